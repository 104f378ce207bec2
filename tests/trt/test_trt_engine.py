"""Engine building against fake TensorRT 8.5 / 10 / 11 modules.

The fakes enforce the API differences and record what was configured; these tests prove
edge_sdk's choices (model, flags, calibration, DLA, constraints, caching), not TensorRT.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_sdk.errors import (
    BackendError,
    BundleError,
    CalibrationError,
    ConfigError,
    MissingDependencyError,
    ModelError,
    TargetError,
)
from edge_sdk.fsutil import sha256_file
from edge_sdk.trt import engine as engine_mod
from edge_sdk.trt.engine import build_engine, maybe_build_engine
from edge_sdk.trt.options import BuildOptions
from edge_sdk.trt.pins import layer_nodes
from fakes.fake_tensorrt import decode_engine
from trt_bundles import ORIN, XAVIER, calib_cache_text

# (TensorRT, precision) -> (model file, builder flags, strongly typed, INT8 mode)
EXPECTED = {
    ("8.5", "fp32"): ("model.onnx", [], False, None),
    ("8.5", "fp16"): ("model.onnx", ["FP16"], False, None),
    ("8.5", "int8"): ("model.onnx", ["INT8", "PREFER_PRECISION_CONSTRAINTS"], False, "calibration"),
    ("8.5", "best"): ("model.onnx", ["FP16", "INT8", "PREFER_PRECISION_CONSTRAINTS"], False, "calibration"),
    ("10", "fp32"): ("model.onnx", [], False, None),
    ("10", "fp16"): ("model.onnx", ["FP16"], False, None),
    ("10", "int8"): ("model.int8.qdq.onnx", ["INT8"], False, "qdq"),
    ("10", "best"): ("model.int8.qdq.onnx", ["FP16", "INT8", "PREFER_PRECISION_CONSTRAINTS"], False, "qdq"),
    ("11", "fp32"): ("model.onnx", [], True, None),
    ("11", "fp16"): ("model.fp16.onnx", [], True, None),
    ("11", "int8"): ("model.int8.qdq.onnx", [], True, "qdq"),
    ("11", "best"): ("model.int8.qdq.onnx", [], True, "qdq"),
}


def _build(bundle, fake, cache_dir, **kw):
    kw.setdefault("gpu", XAVIER)
    kw.setdefault("allocate", fake.device_memory.allocate)
    result = build_engine(bundle, BuildOptions(cache_dir=cache_dir, **kw))
    return result, decode_engine(result.path.read_bytes())


def _rehash(root: Path) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"] = {rel: sha256_file(root / rel) for rel in manifest["files"] if (root / rel).exists()}
    (root / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("version, precision", sorted(EXPECTED))
def test_each_precision_on_each_api(install_trt, make_bundle, cache_dir, version: str, precision: str) -> None:
    fake = install_trt(version)
    result, record = _build(make_bundle(), fake, cache_dir, precision=precision)
    model, flags, strongly, int8 = EXPECTED[(version, precision)]
    assert (record["model"], record["flags"], record["strongly_typed"]) == (model, flags, strongly)
    assert (record["int8"] or {}).get("mode") == int8
    assert fake.warnings == []  # no deprecated API touched on any version
    assert result.key.precision == precision and result.key.tensorrt == fake.__version__ and result.key.sm == "7.2"
    assert not result.cached and result.path.parent == cache_dir


@pytest.mark.parametrize("version, flags", [("8.5", 1 << 0), ("10", 0), ("11", 0)])
def test_network_creation_flags(install_trt, make_bundle, cache_dir, version: str, flags: int) -> None:
    """8.5 must ask for EXPLICIT_BATCH; 10 must not (deprecated); 11 is always strongly typed and
    its STRONGLY_TYPED flag is deprecated and ignored: not set."""
    fake = install_trt(version)
    _build(make_bundle(), fake, cache_dir, precision="fp32")
    assert fake.calls["create_network"] == [flags]


@pytest.mark.parametrize("version", ["8.5", "10"])
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_dla_core_with_gpu_fallback(install_trt, make_bundle, cache_dir, version: str, precision: str) -> None:
    fake = install_trt(version)
    result, record = _build(make_bundle(), fake, cache_dir, precision=precision, dla_core=1)
    assert (record["device_type"], record["dla_core"]) == ("DLA", 1)
    assert "GPU_FALLBACK" in record["flags"] and record["gpu_fallback_layers"] == ["head"]
    assert result.key.dla_core == 1 and result.path.name.endswith("-dla1.engine")


@pytest.mark.parametrize(
    "precision, dla_core, cores, error, text",
    [
        ("fp32", 0, 2, ConfigError, "FP16 and INT8 only"),
        ("fp16", 2, 2, TargetError, "2 DLA core(s) (0..1)"),
        ("fp16", 0, 0, TargetError, "leave --dla-core out"),
    ],
)
def test_dla_requests_the_device_cannot_honour(install_trt, make_bundle, cache_dir, precision, dla_core, cores, error, text) -> None:
    fake = install_trt("8.5", num_dla_cores=cores)
    with pytest.raises(error) as exc:
        _build(make_bundle(), fake, cache_dir, precision=precision, dla_core=dla_core)
    assert text in str(exc.value)
    assert fake.engines_built() == 0


def test_shipped_cache_is_used_without_touching_the_gpu(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle()
    result, record = _build(bundle, fake, cache_dir, precision="int8")
    assert record["int8"]["source"] == "cache" and record["int8"]["header"] == "TRT-8502-EntropyCalibration2"
    assert result.calibration["cache_read"] == str(bundle / "calib.cache") and result.calibration["batches"] == 0
    assert fake.device_memory.allocations == 0


def test_recalibrate_feeds_the_bundle_tensors_in_order_then_reuses_the_device_cache(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(calib_samples=3)
    result, record = _build(bundle, fake, cache_dir, precision="int8", recalibrate=True)
    # Sample i is all (i + 1); 3*8*8 values each: TensorRT saw them in file order.
    assert record["int8"]["batch_sums"] == [192.0, 384.0, 576.0]
    assert fake.calls["read_calibration_cache"] == [False]  # the shipped cache was not offered
    written = Path(result.calibration["cache_written"])
    assert written.parent == cache_dir and written.read_text().startswith("TRT-8502-EntropyCalibration2\n")
    assert (bundle / "calib.cache").read_text() == calib_cache_text()  # the bundle is never modified
    assert fake.device_memory.allocations == 1 and fake.device_memory.freed == 1

    result2, record2 = _build(bundle, fake, cache_dir, precision="best")
    assert record2["int8"]["source"] == "cache" and result2.calibration["cache_read"] == str(written)


def test_a_cache_for_another_tensorrt_means_calibrating_here(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    result, record = _build(make_bundle(cache_header="TRT-8601-EntropyCalibration2"), fake, cache_dir, precision="int8")
    assert record["int8"]["source"] == "calibrator" and record["int8"]["batches"] == 3
    assert any("TRT-8601" in n for n in result.notes)


def test_minmax_bundles_get_the_minmax_calibrator(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    _, record = _build(make_bundle(algorithm="minmax", cache_header="TRT-8502-MinMaxCalibration"), fake, cache_dir, precision="int8")
    assert fake.calls["calibrator_class"] == ["FakeIInt8MinMaxCalibrator"]
    assert record["int8"]["source"] == "cache"


@pytest.mark.parametrize(
    "kwargs, outcome",
    [
        ({"calib_samples": 0, "cache_header": None}, "qdq"),
        ({"calib_samples": 0, "cache_header": None, "variants": ("fp32", "fp16")}, CalibrationError),
        ({"calib_samples": 0, "cache_header": "TRT-8601-EntropyCalibration2"}, CalibrationError),
        ({"sample_shape": (3, 4, 4), "cache_header": None}, CalibrationError),
    ],
)
def test_int8_on_85_without_usable_calibration(install_trt, make_bundle, cache_dir, kwargs, outcome) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(**kwargs)
    if outcome == "qdq":
        _, record = _build(bundle, fake, cache_dir, precision="int8")
        assert record["model"] == "model.int8.qdq.onnx" and record["int8"]["mode"] == "qdq"
    else:
        with pytest.raises(outcome):
            _build(bundle, fake, cache_dir, precision="int8")
        assert not cache_dir.exists() or not list(cache_dir.glob("*.engine"))


def test_fp32_fallback_layers_become_precision_constraints(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(
        layers=("conv1", "conv1_3", "conv2", "conv2_7", "head"),
        fp32_layers=("conv1", "ghost"),
        layer_precisions={"conv1": "fp32", "conv2": "int8", "conv2_7": "int8", "head": "fp32"},
    )
    result, record = _build(bundle, fake, cache_dir, precision="int8")
    # conv1's second layer (conv1_3) follows its node; node conv2_7 is its own node, left in INT8.
    assert record["layer_precisions"] == {"conv1": "FLOAT", "conv1_3": "FLOAT", "head": "FLOAT"}
    assert set(record["output_types"]) == {"conv1", "conv1_3", "head"}
    assert "PREFER_PRECISION_CONSTRAINTS" in record["flags"] and "OBEY_PRECISION_CONSTRAINTS" not in record["flags"]
    assert result.constrained_layers == 3
    assert any("ghost" in n for n in result.notes)


@pytest.mark.parametrize("version", ["10", "11"])
def test_no_layer_constraints_on_the_qdq_path(install_trt, make_bundle, cache_dir, version: str) -> None:
    fake = install_trt(version)
    result, record = _build(make_bundle(fp32_layers=("conv1",)), fake, cache_dir, precision="int8")
    assert record["layer_precisions"] == {} and result.constrained_layers == 0


@pytest.mark.parametrize(
    "names, nodes, expected",
    [
        (["a", "a_1", "a_b"], {"a"}, {"a": "a", "a_1": "a"}),
        (["conv", "conv_1"], {"conv", "conv_1"}, {"conv": "conv", "conv_1": "conv_1"}),
        (["x_12"], {"x"}, {"x_12": "x"}),
        (["y"], {"x"}, {}),
    ],
)
def test_layer_nodes(names, nodes, expected) -> None:
    assert layer_nodes(names, nodes) == expected


@pytest.mark.parametrize("version", ["8.5", "10", "11"])
def test_timing_cache_round_trip(install_trt, make_bundle, cache_dir, tmp_path: Path, version: str) -> None:
    fake = install_trt(version)
    bundle, timing = make_bundle(), tmp_path / "timing.cache"
    _, first = _build(bundle, fake, cache_dir, precision="fp16", timing_cache=timing)
    assert first["timing_cache"] == {"entries_before": 0, "hit": False} and timing.is_file()
    _, second = _build(bundle, fake, cache_dir, precision="fp16", timing_cache=timing, force=True)
    assert second["timing_cache"] == {"entries_before": 1, "hit": True}


def test_a_timing_cache_from_another_device_is_replaced(install_trt, make_bundle, cache_dir, tmp_path: Path) -> None:
    timing, bundle = tmp_path / "timing.cache", make_bundle()
    other = install_trt("8.5", device_name="Other GPU")
    _build(bundle, other, cache_dir, precision="fp16", timing_cache=timing)
    fake = install_trt("8.5")
    result, record = _build(bundle, fake, cache_dir, precision="fp16", timing_cache=timing, force=True)
    assert not result.cached and fake.engines_built() == 1
    assert record["timing_cache"]["entries_before"] == 0 and any("timing cache" in n for n in result.notes)
    assert json.loads(timing.read_bytes().split(b"\n", 1)[1])["device"] == "FakeGPU SM 7.2"  # replaced


def test_workspace_limit(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    _, record = _build(make_bundle(), fake, cache_dir, precision="fp16", workspace_mib=256)
    assert record["pool_limits"] == {"WORKSPACE": 256 << 20}
    with pytest.raises(ConfigError, match="--workspace"):
        _build(make_bundle(), fake, cache_dir, precision="fp16", workspace_mib=0, force=True)


def test_cache_hit_skips_the_build_and_force_rebuilds(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle()
    first, _ = _build(bundle, fake, cache_dir, precision="fp16")
    second, _ = _build(bundle, fake, cache_dir, precision="fp16")
    assert second.cached and second.path == first.path and fake.engines_built() == 1
    _build(bundle, fake, cache_dir, precision="fp16", force=True)
    assert fake.engines_built() == 2
    _build(bundle, fake, cache_dir, precision="fp32")  # another key
    assert fake.engines_built() == 3


def test_a_corrupt_cached_engine_is_rebuilt(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle()
    first, _ = _build(bundle, fake, cache_dir, precision="fp16")
    first.path.write_bytes(first.path.read_bytes()[:10])
    again, record = _build(bundle, fake, cache_dir, precision="fp16")
    assert not again.cached and fake.engines_built() == 2 and record["flags"] == ["FP16"]
    assert any("wrong size" in n for n in again.notes)


def test_foreign_gpu_engine_is_a_target_error(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    with pytest.raises(TargetError) as exc:
        _build(make_bundle(), fake, cache_dir, precision="int8", target="xavier-nx", require=True, gpu=ORIN)
    text = str(exc.value)
    for part in ("SM 8.7", "SM 7.2", "#1810", "#1879", "edge-sdk engine", "TensorRT version"):
        assert part in text
    assert fake.engines_built() == 0


@pytest.mark.parametrize("gpu, text", [(ORIN, "SM 8.7"), (None, "no NVIDIA GPU")])
def test_foreign_gpu_request_on_a_host_without_tensorrt(no_trt, make_bundle, cache_dir, monkeypatch, gpu, text) -> None:
    """The x86 host case: the answer is why engines are not portable, not how to install TensorRT."""
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: gpu)
    with pytest.raises(TargetError) as exc:
        build_engine(make_bundle(), BuildOptions(target="xavier-nx", require=True, cache_dir=cache_dir))
    assert text in str(exc.value) and "#1810" in str(exc.value)


def test_foreign_tensorrt_version_is_a_target_error(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("10")
    with pytest.raises(TargetError, match="TensorRT 10.3.0.26.*8.5.2"):
        _build(make_bundle(), fake, cache_dir, target="xavier-nx", require=True)


@pytest.mark.parametrize("target, gpu", [("xavier-nx", XAVIER), ("host", ORIN)])
def test_matching_target_builds(install_trt, make_bundle, cache_dir, target, gpu) -> None:
    fake = install_trt("8.5")
    result, _ = _build(make_bundle(), fake, cache_dir, target=target, require=True, gpu=gpu)
    assert result.path.is_file() and result.gpu == gpu


def test_maybe_build_engine_without_tensorrt(no_trt, make_bundle) -> None:
    bundle = make_bundle()
    path, message = maybe_build_engine(bundle, "xavier-nx", "best")
    assert path is None
    assert "TensorRT is not installed" in message and f"edge-sdk engine {bundle}" in message


@pytest.mark.parametrize(
    "gpu, built, text",
    [(None, False, "no NVIDIA GPU"), (ORIN, False, "SM 8.7"), (XAVIER, True, "SM 7.2")],
)
def test_maybe_build_engine_builds_only_for_its_own_gpu(install_trt, make_bundle, cache_dir, monkeypatch, gpu, built, text) -> None:
    fake = install_trt("8.5")
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: gpu)
    path, message = maybe_build_engine(make_bundle(), "xavier-nx", "fp16", cache_dir=cache_dir)
    assert (path is not None) is built and text in message
    assert fake.engines_built() == int(built)
    if built:
        assert path.is_file() and decode_engine(path.read_bytes())["flags"] == ["FP16"]
    else:
        assert "the device compiles the engine" in message


def test_missing_tensorrt_names_the_extra(no_trt, make_bundle, cache_dir) -> None:
    with pytest.raises(MissingDependencyError) as exc:
        build_engine(make_bundle(), BuildOptions(cache_dir=cache_dir, gpu=XAVIER))
    assert exc.value.extra == "trt"
    assert "python3-libnvinfer" in str(exc.value) and 'edge-sdk[trt]' in str(exc.value)


def test_failed_build_is_a_backend_error_with_the_log(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    fake.fail_build = "Internal Error (could not find any implementation for node conv1)"
    with pytest.raises(BackendError) as exc:
        _build(make_bundle(), fake, cache_dir, precision="fp16")
    assert "could not find any implementation for node conv1" in str(exc.value)
    assert "--workspace" in str(exc.value)
    assert not cache_dir.exists() or not list(cache_dir.iterdir())


def test_unparsable_model_is_a_model_error(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle()
    (bundle / "model.onnx").write_bytes(b"\x08\x07garbage")
    _rehash(bundle)
    with pytest.raises(ModelError, match="cannot parse model.onnx.*not a protobuf"):
        _build(bundle, fake, cache_dir, precision="fp16")


def test_a_corrupt_bundle_is_refused_before_building(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle()
    (bundle / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(BundleError, match="sha256"):
        _build(bundle, fake, cache_dir)
    assert fake.engines_built() == 0


def test_missing_variant_names_the_rebuild(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("11")
    with pytest.raises(BundleError, match="no fp16 variant"):
        _build(make_bundle(variants=("fp32", "int8")), fake, cache_dir, precision="fp16")


def test_unknown_precision(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    with pytest.raises(ConfigError, match="fp32, fp16, int8, best"):
        _build(make_bundle(), fake, cache_dir, precision="tf32")


@pytest.mark.parametrize("version, precision", [("10", "int8"), ("8.5", "fp16")])
def test_recalibrate_without_a_calibrator_says_so(install_trt, make_bundle, cache_dir, version: str, precision: str) -> None:
    fake = install_trt(version)
    result, record = _build(make_bundle(), fake, cache_dir, precision=precision, recalibrate=True)
    assert any("--recalibrate has no effect" in n for n in result.notes)
    assert fake.device_memory.allocations == 0 and record["int8"] in (None, {"mode": "qdq"})
