"""The build's inputs: the model, its network input (config overrides over the embedded spec or
the graph's input) and its decoder."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from detector_factory import make_detector

from edge_sdk.builder.inputs import resolve_input_spec, resolve_model
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host


def test_default_spec_with_overrides() -> None:
    default = InputSpec(name="input.1", shape=[1, 3, 384, 640])
    spec = resolve_input_spec(BuildConfig(input_size=(320, 192), color="RGB", mean=[1.0] * 3), make_detector(), default)
    assert (spec.name, spec.shape, spec.color, spec.mean, spec.scale) == ("input.1", [1, 3, 192, 320], "RGB", [1.0] * 3, [1.0] * 3)


def test_interpolation_from_the_project_file_reaches_the_spec(tmp_path: Path) -> None:
    from edge_sdk.builder.project import read_project

    (tmp_path / "edge.toml").write_text('[input]\nresize = "stretch"\ninterpolation = "area"\n')
    config = BuildConfig(**read_project(tmp_path / "edge.toml"))
    default = InputSpec(name="input.1", shape=[1, 3, 384, 640])
    spec = resolve_input_spec(config, make_detector(), default)
    assert (spec.resize, spec.interpolation) == ("stretch", "area")
    assert resolve_input_spec(BuildConfig(), make_detector(), default).interpolation == "linear"
    (tmp_path / "edge.toml").write_text('[input]\ninterpolation = "cubic"\n')
    with pytest.raises(ConfigError, match="interpolation must be one of"):
        resolve_input_spec(BuildConfig(**read_project(tmp_path / "edge.toml")), make_detector(), default)


def test_dummy_dims_are_used_when_nothing_else_is_given() -> None:
    spec = resolve_input_spec(BuildConfig(), make_detector(dummy_dims=(1, 3, 64, 96)), None)
    assert spec.shape == [1, 3, 64, 96]


def test_dynamic_dims_need_an_input_size() -> None:
    model = make_detector()
    dim = model.graph.input[0].type.tensor_type.shape.dim[2]
    dim.Clear()
    dim.dim_param = "height"
    with pytest.raises(ConfigError, match="--input-size"):
        resolve_input_spec(BuildConfig(), model, None)


@pytest.mark.parametrize("decoder", [None, {"type": "centerface", "score_threshold": 0.25}])
def test_a_model_given_by_path(tmp_path: Path, decoder) -> None:
    path = tmp_path / "my_detector.onnx"
    onnx.save(make_detector(input_name="images"), str(path))
    config = BuildConfig(model=path, input_size=(96, 64), color="RGB", decoder=decoder)
    inputs = resolve_model(config, None, BuildProgress(quiet=True))
    assert (inputs.path, inputs.name, inputs.source) == (path, "my_detector", "my_detector.onnx")
    assert (inputs.spec.name, inputs.spec.shape, inputs.spec.color) == ("images", [1, 3, 64, 96], "RGB")
    assert [i.name for i in inputs.model.graph.input][0] == "images"
    assert inputs.decoder_spec == decoder
    if decoder is None:
        assert inputs.decoder is None
    else:
        assert inputs.decoder.score_threshold == 0.25
