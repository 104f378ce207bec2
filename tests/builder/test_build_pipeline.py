"""Pipeline helpers: the deterministic calibration split and input-spec resolution."""
from __future__ import annotations

from pathlib import Path

import pytest
from detector_factory import make_detector

from edge_sdk.builder.pipeline import list_images, resolve_input_spec, split_images
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import CalibrationError, ConfigError
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host


def names(n: int):
    return [Path(f"{i:03d}.jpg") for i in range(n)]


@pytest.mark.parametrize(
    "n, held, calib",
    [(48, 12, 36), (16, 4, 12), (12, 4, 8), (13, 4, 9)],
)
def test_split_is_deterministic_and_disjoint(n: int, held: int, calib: int) -> None:
    c1, h1 = split_images(names(n), 0.25, 4, 8)
    c2, h2 = split_images(list(reversed(sorted(names(n))))[::-1], 0.25, 4, 8)
    assert (c1, h1) == (c2, h2)
    assert (len(h1), len(c1)) == (held, calib)
    assert not set(c1) & set(h1)
    assert h1[0] == Path("000.jpg")  # every 4th image by name is held back


def test_split_caps_the_calibration_part() -> None:
    calib, held = split_images(names(48), 0.25, 4, 8, max_calib=10)
    assert (len(calib), len(held)) == (10, 12)


def test_too_few_images() -> None:
    with pytest.raises(CalibrationError, match="too few calibration images: 11; need at least 12"):
        split_images(names(11), 0.25, 4, 8)


def test_list_images_ignores_other_files(tmp_path: Path) -> None:
    for name in ("b.png", "a.JPG", "notes.txt", "c.jpeg"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in list_images(tmp_path)] == ["a.JPG", "b.png", "c.jpeg"]


def test_default_spec_with_overrides() -> None:
    default = InputSpec(name="input.1", shape=[1, 3, 384, 640])
    spec = resolve_input_spec(BuildConfig(input_size=(320, 192), color="RGB", mean=[1.0] * 3), make_detector(), default)
    assert (spec.name, spec.shape, spec.color, spec.mean, spec.scale) == ("input.1", [1, 3, 192, 320], "RGB", [1.0] * 3, [1.0] * 3)


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
