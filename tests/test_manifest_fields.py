"""Every field of a bundle manifest is checked when the bundle loads: a wrong type, a value out of
range, a huge or deeply nested value at any field gives a BundleError that names the field and
the file, and a manifest that loads is one the runtime can use (its input spec makes a
preprocessor, its decoder builds, its precision notes and gate read) without any other error.

The fuzz walks every field of a complete manifest (the fields a `best` build writes, on the tiny
model of tests/tiny_bundle.py) and puts a hostile value in it."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.builder.input_stats import stats_of_frames
from edge_sdk.decoders import make_decoder
from edge_sdk.errors import BundleError, EdgeSdkError
from edge_sdk.manifest import Bundle
from edge_sdk.preprocess import Preprocessor
from edge_sdk.verify import gate_threshold

from tiny_bundle import HEIGHT, WIDTH, make_tiny_bundle

pytest.importorskip("cv2")

OUTPUTS = (("heatmap", 1), ("scale", 2), ("offset", 2), ("landmarks", 10))


def complete_manifest(root: Path) -> Dict[str, Any]:
    """The tiny bundle's manifest with every field a `best` build records."""
    data = json.loads((root / "manifest.json").read_text())
    frames = [np.random.default_rng(i).integers(0, 256, (24, 32, 3)).astype(np.uint8) for i in range(3)]
    data.update({
        "schema_version": 2,
        "model": {"name": "tiny", "source_sha256": data["files"]["model.onnx"], "source": "tiny.onnx"},
        "target": {"name": "xavier-nx", "sm": "7.2", "tensorrt": "8.5.2", "quantization": "implicit"},
        "outputs": [{"name": n, "shape": [1, c, HEIGHT // 4, WIDTH // 4], "dtype": "float32"} for n, c in OUTPUTS],
        "decoder": {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3,
                    "output_names": [n for n, _ in OUTPUTS], "labels": ["face"]},
        "provenance": {"input": {"color": "preset: ultralytics", "size": "graph"},
                       "decoder": {"type": "flag: --decoder", "labels": "metadata: names"},
                       "preset": {"name": "ultralytics", "evidence": "metadata author"}},
        "precision": "fp32",
        "requested_precision": "best",
        "variants": ["fp32"],
        "graph": {"source": {"nodes": 4}, "optimized": {"nodes": 4}, "optimizer": "onnxruntime"},
        "accuracy": {
            "fp32": {"f1_vs_fp32": 1.0, "max_abs_err": 0.0, "cosine": 1.0},
            "int8": {"f1_vs_fp32": 0.98, "precision": 0.97, "recall": 0.99, "max_abs_err": 0.12, "mean_abs_err": 0.01,
                     "cosine": 0.995, "detections": 10, "reference_detections": 10, "outputs": {"heatmap": {"cosine": 0.99}},
                     "gate": {"metric": "f1_vs_fp32", "value": 0.98, "threshold": 0.97, "passed": True}},
        },
        "reference": {"file": "reference.npz", "images": 2, "inputs_dtype": "uint8", "outputs": ["float16"], "min_f1": 0.97},
        "calibration": {
            "algorithm": "entropy", "trt_calibrator": "IInt8EntropyCalibrator2", "percentile": None, "samples": 8,
            "held_back": 2, "folder": "calibrate/images", "split": {"rule": "every 5th", "gate": {"images": 2}},
            "tensors_kept": 0,
            "tensors": {"count": 0, "format": "npz", "dtype": "uint8", "dtypes": ["uint8"], "values": "network input",
                        "mean": [0.0, 0.0, 0.0], "scale": [1.0, 1.0, 1.0]},
            "coverage": {"clipped_fraction": {"input": 0.0}, "warn_above": 0.01},
        },
        "int8": {"fp32_layers": ["conv_0"], "fallback_layers": {"conv_0": "fp32", "sig": "fp16"},
                 "layer_precisions": {"conv_0": "fp32", "pool": "int8"}, "int8_flop_share": 0.8, "layers": {},
                 "search": [], "search_target": 0.98, "search_f1": 0.99},
        "preprocess_probe": {"resize_ms": 0.5},
        "engine": {"dla_core": None, "workspace_mib": 1024},
        "builder": {"edge_sdk": "0.1", "seconds": 1.5},
        "input_stats": stats_of_frames(iter(frames)).to_dict(),
    })
    return data


def paths(value: Any, prefix: Tuple[Any, ...] = ()) -> Iterator[Tuple[Any, ...]]:
    """Every field path of a JSON value: object keys and list indexes, inner nodes included."""
    if isinstance(value, dict):
        for key, v in value.items():
            yield prefix + (key,)
            yield from paths(v, prefix + (key,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def put(data: Dict[str, Any], path: Tuple[Any, ...], value: Any) -> Dict[str, Any]:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def use(bundle: Bundle) -> None:
    """What the runtime reads of a loaded bundle, before any model runs."""
    specs = bundle.inputs
    assert specs
    for spec in specs:
        Preprocessor(spec)(np.zeros((20, 30, 3), np.uint8))
    if bundle.decoder:
        make_decoder(bundle.decoder, specs[0])
    assert len(bundle.hash) == 16
    for variant in bundle.variants():
        bundle.accuracy_note(variant)
    bundle.gated_precision
    bundle.input_stats
    assert 0.0 <= gate_threshold(bundle) <= 1.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Tuple[Path, Dict[str, Any]]:
    root = make_tiny_bundle(tmp_path_factory.mktemp("fields") / "b")
    return root, complete_manifest(root)


def load_with(root: Path, data: Any) -> Bundle:
    (root / "manifest.json").write_text(json.dumps(data))
    return Bundle.load(root)


def test_the_complete_manifest_loads_and_is_usable(tiny) -> None:
    root, data = tiny
    use(load_with(root, data))


# A value at a field, and the message that must name it (with the file).
BAD: List[Tuple[Tuple[Any, ...], Any, str]] = [
    (("inputs", 0, "pad_value"), 300, "inputs[0].pad_value must be in 0..255"),
    (("inputs", 0, "pad_value"), -1, "inputs[0].pad_value must be in 0..255"),
    (("inputs", 0, "pad_value"), 1.5, "inputs[0].pad_value must be an integer"),
    (("inputs", 0, "shape"), [1, 3, 100000, 100000], "inputs[0].shape[2] must be in 1..16384"),
    (("inputs", 0, "shape"), [64, 3, 16384, 16384], "inputs[0].shape [64, 3, 16384, 16384] holds more than"),
    (("inputs", 0, "shape"), [1, 3, True, 32], "inputs[0].shape[2] must be an integer"),
    (("inputs", 0, "mean"), [0, 0, 1e300], "inputs[0].mean[2] must be a finite number"),
    (("inputs", 0, "scale"), [1, 0, 1], "inputs[0].scale[1] must not be 0"),
    (("inputs", 0, "name"), ["input"], "inputs[0].name must be a string"),
    (("inputs", 0, "resize"), "crop", "inputs[0] is not a valid input: input resize must be one of"),
    (("inputs",), [], "inputs has 0 entries"),
    (("outputs", 1, "name"), "heatmap", "outputs[1] repeats the output name 'heatmap'"),
    (("decoder", "score_threshold"), 1.5, "decoder is refused by its decoder"),
    (("decoder", "nms_iou"), "0.3", "decoder is refused by its decoder"),
    (("decoder", "output_names"), ["heatmap", "scale", "offset", "marks"], "decoder.output_names names ['marks']"),
    (("precision",), "int4", "precision must be one of"),
    (("precision",), ["fp32"], "precision must be a"),
    (("variants",), ["fp32", "fp32"], "variants repeats a variant"),
    (("accuracy", "int8", "gate", "threshold"), 2, "accuracy.int8.gate.threshold must be a finite number in [0, 1]"),
    (("reference", "min_f1"), -0.5, "reference.min_f1 must be a finite number in [0, 1]"),
    (("calibration", "algorithm"), "kl-magic", "calibration.algorithm must be one of"),
    (("calibration", "tensors", "dtype"), "float64", "calibration.tensors.dtype must be one of"),
    (("int8", "fallback_layers", "conv_0"), "int4", "int8.fallback_layers.conv_0 must be one of 'fp16', 'fp32'"),
    (("int8", "fp32_layers"), "conv_0", "int8.fp32_layers must be a list"),
    (("engine", "dla_core"), 99, "engine.dla_core must be in 0..15"),
    (("target", "sm"), 7.2, "target.sm must be a string"),
    (("model", "source_sha256"), "abc", "model.source_sha256 must be a sha256"),
    (("graph",), [1, 2], "graph must be a JSON object"),
]


@pytest.mark.parametrize("path, value, message", BAD, ids=[".".join(map(str, p)) + f"={v!r:.20}" for p, v, _ in BAD])
def test_a_bad_field_is_named_with_the_file(tiny, path: Tuple[Any, ...], value: Any, message: str) -> None:
    root, data = tiny
    with pytest.raises(BundleError) as err:
        load_with(root, put(data, path, value))
    assert message in str(err.value) and str(root / "manifest.json") in str(err.value), str(err.value)
    assert err.value.exit_code == 8


def hostile_values() -> st.SearchStrategy:
    leaves = st.one_of(
        st.none(), st.booleans(),
        st.integers(), st.sampled_from([-1, 0, 1, 255, 256, 2**31, 2**63, -(2**63), 10**30]),
        st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e300, -1e300, 5e-324, 0.5, -0.0]),
        st.text(max_size=20), st.sampled_from(["", "x" * 100_000, "fp32", "int8", "float16", "BGR", "NCHW"]),
    )
    nested = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                          max_leaves=12)
    deep = st.integers(1, 200).map(lambda n: json.loads("[" * n + "]" * n))
    return st.one_of(nested, deep, st.sampled_from([[0] * 100_000, {str(i): i for i in range(5000)}]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_every_field_gives_a_usable_bundle_or_a_bundle_error(tiny, data) -> None:
    root, manifest = tiny
    all_paths = sorted(paths(manifest), key=repr)
    path = data.draw(st.sampled_from(all_paths), label="field")
    value = data.draw(hostile_values(), label="value")
    try:
        bundle = load_with(root, put(manifest, path, value))
    except BundleError as exc:
        assert str(root / "manifest.json") in str(exc) or str(root) in str(exc), str(exc)
        return
    try:
        use(bundle)
    except EdgeSdkError:  # a typed refusal of a value the loader let through is a finding too
        raise AssertionError(f"{path} = {value!r:.200} loaded, then the runtime refused it") from None


def test_fuzz_reaches_every_field(tiny) -> None:
    root, manifest = tiny
    top = {p[0] for p in paths(manifest)}
    assert {"inputs", "outputs", "decoder", "accuracy", "calibration", "int8", "engine", "reference", "target",
            "model", "files", "input_stats", "variants", "precision", "provenance"} <= top
    assert {"placement", "pad_value"} <= set(manifest["inputs"][0])


@pytest.mark.parametrize("path, value, message", [
    (("outputs", 0, "name"), "scores", "has outputs ['heatmap', 'landmarks', 'offset', 'scale'], the manifest of"),
    (("inputs", 0, "name"), "images", "has input(s) ['input'], the manifest of"),
    (("inputs", 0, "shape"), [1, 3, 64, 64], "input 'input' has shape [1, 3, 32, 32], the manifest of"),
    (("inputs", 0, "dtype"), "float16", "input 'input' is float32, the manifest of"),
])
def test_a_manifest_that_disagrees_with_its_model_is_refused_when_it_opens(tmp_path: Path, path: Tuple[Any, ...],
                                                                          value: Any, message: str) -> None:
    pytest.importorskip("onnxruntime")
    from edge_sdk.runtime.model import load_model

    root = make_tiny_bundle(tmp_path / "b")
    data = complete_manifest(root)
    if path[0] == "outputs":  # a decoder that names no outputs: only the model I/O check can tell
        data["decoder"].pop("output_names")
    load_with(root, put(data, path, value))  # every field on its own is well formed
    with pytest.raises(BundleError) as err:
        load_model(root, backend="onnxruntime-cpu", threads=1)
    assert message in str(err.value) and str(root) in str(err.value), str(err.value)
