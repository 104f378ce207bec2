"""The engine-build risks found in review, each with the test that would have caught it.

DLA and the Entropy2 calibrator; the CUDA context calibration runs in; the calibration-cache
header's version code on TensorRT >= 10; FP32 pinning of layers that cannot take a constraint
and of layers with no FP32 kernel; STRONGLY_TYPED on TensorRT 11; the bundle's FP16/FP32
fallback layers; running out of memory while building.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.cuda import require_cuda
from edge_sdk.errors import BackendError, BundleError, CalibrationError
from edge_sdk.targets import get_target, trt_version_code
from edge_sdk.trt import calibrator as calibrator_mod
from edge_sdk.trt import engine as engine_mod
from edge_sdk.trt.calibrator import CalibrationFeed
from edge_sdk.trt.engine import build_engine
from edge_sdk.trt.options import BuildOptions
from fakes import fake_pycuda
from fakes.fake_tensorrt import FakeTensorRT11, HostAddressMemory, decode_engine
from trt_bundles import XAVIER


def _build(bundle, fake, cache_dir, **kw):
    kw.setdefault("gpu", XAVIER)
    kw.setdefault("allocate", fake.device_memory.allocate)
    result = build_engine(bundle, BuildOptions(cache_dir=cache_dir, **kw))
    return result, decode_engine(result.path.read_bytes())


# --- the calibration-cache header's version code --------------------------------------------


@pytest.mark.parametrize(
    "target, header",
    [
        ("xavier-nx", "TRT-8502-EntropyCalibration2"),  # TensorRT 8.5.2: major*1000 + minor*100 + patch
        ("orin-nx", "TRT-100300-EntropyCalibration2"),  # TensorRT 10.3.0: major*10000 + minor*100 + patch
        ("orin-nano", "TRT-100300-EntropyCalibration2"),
        ("agx-orin", "TRT-100300-EntropyCalibration2"),
    ],
)
def test_each_target_writes_the_header_its_tensorrt_reads(target: str, header: str) -> None:
    assert get_target(target).calib_cache_header() == header


@pytest.mark.parametrize("version, code", [("8.5.2.2", 8502), ("8.6.1", 8601), ("10.3.0.26", 100300), ("10.13.2", 101302)])
def test_version_code_of_both_generations(version: str, code: int) -> None:
    assert trt_version_code(version) == code


@pytest.mark.parametrize("version, header", [("8.5.2.2", "TRT-8502-MinMaxCalibration"), ("10.3.0.26", "TRT-100300-MinMaxCalibration")])
def test_the_device_expects_the_header_its_tensorrt_writes(tmp_path: Path, version: str, header: str) -> None:
    cache = tmp_path / "calib.cache"
    cache.write_text(header + "\ninput.1: 3c010a14\n")
    feed = CalibrationFeed([], "input.1", (1, 3, 2, 2), "minmax", version, cache_in=cache)
    assert feed.expected_header == header and feed.read_cache() == cache.read_bytes()


# --- DLA needs the Entropy2 calibrator --------------------------------------------------------


@pytest.mark.parametrize(
    "algorithm, header",
    [("minmax", "TRT-8502-MinMaxCalibration"), ("percentile", "TRT-8502-EntropyCalibration2")],
)
def test_dla_recalibrates_a_minmax_or_percentile_bundle_with_entropy2(install_trt, make_bundle, cache_dir, algorithm, header) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(algorithm=algorithm, cache_header=header)
    result, record = _build(bundle, fake, cache_dir, precision="int8", dla_core=0)
    assert fake.calls["calibrator_class"] == ["FakeIInt8EntropyCalibrator2"]
    # the shipped scales were not offered: TensorRT calibrated on the bundle's three tensors
    assert fake.calls["read_calibration_cache"] == [False]
    assert record["int8"]["source"] == "calibrator" and record["int8"]["batches"] == 3
    assert record["int8"]["header"] == "TRT-8502-EntropyCalibration2"
    assert result.calibration["algorithm"] == "entropy" and any("Entropy2" in n for n in result.notes)


def test_dla_reuses_its_own_entropy2_cache(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(algorithm="minmax", cache_header="TRT-8502-MinMaxCalibration")
    _build(bundle, fake, cache_dir, precision="int8", dla_core=0)
    _, record = _build(bundle, fake, cache_dir, precision="best", dla_core=1)
    assert record["int8"]["source"] == "cache" and record["int8"]["header"] == "TRT-8502-EntropyCalibration2"


def test_gpu_builds_keep_the_minmax_cache(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    _, record = _build(make_bundle(algorithm="minmax", cache_header="TRT-8502-MinMaxCalibration"), fake, cache_dir, precision="int8")
    assert fake.calls["calibrator_class"] == ["FakeIInt8MinMaxCalibrator"] and record["int8"]["source"] == "cache"


def test_dla_refuses_a_minmax_bundle_without_calibration_tensors(install_trt, make_bundle, cache_dir, monkeypatch) -> None:
    fake = install_trt("8.5")
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: XAVIER)
    bundle = make_bundle(algorithm="minmax", cache_header="TRT-8502-MinMaxCalibration", calib_samples=0)
    result = CliRunner().invoke(app, ["engine", str(bundle), "--precision", "int8", "--dla-core", "0", "--cache-dir", str(cache_dir)])
    assert result.exit_code == CalibrationError.exit_code, result.output
    assert "Entropy2" in result.output and "--calib-method entropy" in result.output
    assert fake.engines_built() == 0


# --- the CUDA context -------------------------------------------------------------------------


def test_calibration_runs_in_the_primary_context_opened_before_the_build(install_trt, make_bundle, cache_dir, monkeypatch) -> None:
    """pycuda through the SDK's CUDA layer (the retained primary context); `pycuda.autoinit`, which
    makes a context of its own, cannot even be imported here. The context and the batch
    buffer exist before TensorRT starts; `get_batch` allocates nothing."""
    fake = install_trt("8.5")
    monkeypatch.setitem(sys.modules, "pycuda.autoinit", None)
    pycuda = fake_pycuda.install(monkeypatch, fake_pycuda.FakePycudaDevice())
    events = fake.calls["events"]

    def open_cuda():
        events.append("cuda-open")
        return require_cuda("pycuda")

    monkeypatch.setattr(calibrator_mod, "open_calibration_cuda", open_cuda)
    mem_alloc = pycuda.drv.mem_alloc

    def counted(nbytes: int):
        events.append(f"mem_alloc:{nbytes}")
        return mem_alloc(nbytes)

    pycuda.drv.mem_alloc = counted
    fake.device_memory = HostAddressMemory(pycuda.state.blocks)
    result = build_engine(make_bundle(), BuildOptions(cache_dir=cache_dir, gpu=XAVIER, precision="int8", recalibrate=True))
    record = decode_engine(result.path.read_bytes())
    assert record["int8"]["batch_sums"] == [192.0, 384.0, 576.0]  # the batches reached TensorRT through that memory
    build = events.index("build")
    assert events[:build] == ["cuda-open", f"mem_alloc:{3 * 8 * 8 * 4}"]
    assert set(events[build + 1:]) == {"get_batch"}  # nothing opened or allocated while TensorRT calibrates
    assert pycuda.state.used == 0  # the buffers were freed after the build


def test_no_cuda_is_opened_when_the_shipped_cache_is_used(install_trt, make_bundle, cache_dir, monkeypatch) -> None:
    fake = install_trt("8.5")
    monkeypatch.setattr(calibrator_mod, "open_calibration_cuda", lambda: pytest.fail("CUDA opened for nothing"))
    result = build_engine(make_bundle(), BuildOptions(cache_dir=cache_dir, gpu=XAVIER, precision="int8"))
    assert result.calibration["cache_read"] and fake.engines_built() == 1


def test_get_batch_never_allocates(tmp_path: Path, make_bundle) -> None:
    fake = FakeTensorRT11()  # only its device memory is used
    bundle = make_bundle(calib_samples=2, cache_header=None)
    feed = CalibrationFeed(calibrator_mod.calibration_tensors(bundle), "input.1", (1, 3, 8, 8), "entropy", "8.5.2.2",
                           allocate=fake.device_memory.allocate)
    with pytest.raises(CalibrationError, match="prepare"):
        feed.next_batch(["input.1"])  # TensorRT asking before the buffer exists: refused, not allocated
    assert fake.device_memory.allocations == 0
    feed.prepare()
    assert fake.device_memory.allocations == 1
    while feed.next_batch(["input.1"]) is not None:
        pass
    assert fake.device_memory.allocations == 1 and feed.batches_fed == 2


# --- FP32 pinning: what can take a constraint, and PREFER over OBEY ----------------------------

LAYERS = (
    "conv1",
    {"name": "anchors", "type": "CONSTANT"},
    {"name": "shape1", "type": "SHAPE", "shape_output": True},
    {"name": "size1", "type": "GATHER", "shape_output": True},
    {"name": "conv2", "no_fp32": True},
    "head",
)


def test_constant_and_shape_layers_are_not_pinned(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(layers=LAYERS, fp32_layers=("conv1", "anchors", "shape1", "size1"),
                         cache_tensors=("input.1", "conv1", "anchors", "conv2", "head"))
    result, record = _build(bundle, fake, cache_dir, precision="int8")
    assert record["layer_precisions"] == {"conv1": "FLOAT"}
    skipped = result.layers["pinned"]["skipped"]
    assert set(skipped) == {"anchors", "shape1", "size1"}
    assert "constant" in skipped["anchors"] and "shape tensor" in skipped["size1"]
    assert any("take no precision constraint" in n for n in result.notes)


def test_a_layer_without_fp32_kernel_falls_back_and_the_report_says_so(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(layers=LAYERS, fp32_layers=("conv1", "conv2"),
                         cache_tensors=("input.1", "conv1", "anchors", "conv2", "head"))
    result, record = _build(bundle, fake, cache_dir, precision="int8")
    assert "PREFER_PRECISION_CONSTRAINTS" in record["flags"] and "OBEY_PRECISION_CONSTRAINTS" not in record["flags"]
    pinned = result.layers["pinned"]
    assert pinned["honoured"] == ["conv1"] and pinned["not_honoured"] == {"conv2": "INT8"}


# --- STRONGLY_TYPED on TensorRT 11 --------------------------------------------------------------


class FakeTensorRT11WithoutStronglyTyped(FakeTensorRT11):
    """A TensorRT after 11.0 that dropped the deprecated flag altogether."""

    NETWORK_FLAGS = {"PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
    DEPRECATED_NETWORK_FLAGS: set = set()


@pytest.mark.parametrize("fake_cls", [FakeTensorRT11, FakeTensorRT11WithoutStronglyTyped])
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_tensorrt_11_needs_no_strongly_typed_flag(make_bundle, cache_dir, monkeypatch, fake_cls, precision) -> None:
    fake = fake_cls()
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    _, record = _build(make_bundle(), fake, cache_dir, precision=precision)
    assert record["strongly_typed"] and fake.calls["create_network"] == [0]
    assert fake.warnings == []  # the deprecated flag was not used


# --- the bundle's FP16 / FP32 fallback layers -------------------------------------------------

FALLBACK = {"conv1": "fp16", "conv2": "fp32"}


@pytest.mark.parametrize("precision, note", [("int8", True), ("best", False)])
def test_fallback_layers_are_pinned_to_their_precision(install_trt, make_bundle, cache_dir, precision, note) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(fp32_layers=("conv2",), fallback_layers=FALLBACK)
    result, record = _build(bundle, fake, cache_dir, precision=precision)
    # conv2_7 is the second TensorRT layer of node conv2 (TensorRT's `_<n>` suffix)
    assert record["layer_precisions"] == {"conv1": "HALF", "conv2": "FLOAT", "conv2_7": "FLOAT"}
    assert record["output_types"] == {"conv1": {"0": "HALF"}, "conv2": {"0": "FLOAT"}, "conv2_7": {"0": "FLOAT"}}
    assert {"FP16", "INT8", "PREFER_PRECISION_CONSTRAINTS"} <= set(record["flags"])
    assert any("FP16 turned on" in n for n in result.notes) is note
    assert sorted(result.layers["pinned"]["honoured"]) == ["conv1", "conv2", "conv2_7"]
    assert result.plan.to_dict()["fp16_layers"] == 1 and result.plan.to_dict()["fp32_layers"] == 1


def test_an_old_manifest_pins_only_its_fp32_layers(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    _, record = _build(make_bundle(fp32_layers=("conv2",)), fake, cache_dir, precision="int8")
    assert record["layer_precisions"] == {"conv2": "FLOAT", "conv2_7": "FLOAT"} and "FP16" not in record["flags"]


@pytest.mark.parametrize("precision, pinned", [("best", {"conv2": "FLOAT", "conv2_7": "FLOAT"}), ("int8", {})])
def test_the_qdq_path_pins_fp32_layers_only_where_fp16_is_on(install_trt, make_bundle, cache_dir, precision, pinned) -> None:
    """TensorRT 10, weakly typed: with FP16 on, layers outside the Q/DQ pairs may run FP16, so
    the FP32 fallback layers are pinned; without FP16 they run FP32 anyway."""
    fake = install_trt("10")
    result, record = _build(make_bundle(fp32_layers=("conv2",), fallback_layers=FALLBACK), fake, cache_dir, precision=precision)
    assert record["model"] == "model.int8.qdq.onnx" and record["layer_precisions"] == pinned
    assert any("FP16 fallback layers run in FP32" in n for n in result.notes) is (precision == "int8")


def test_a_malformed_fallback_section_is_a_bundle_error(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(fallback_layers={"conv1": "int4"})
    with pytest.raises(BundleError, match="fallback_layers"):
        _build(bundle, fake, cache_dir, precision="int8")
    assert fake.engines_built() == 0


# --- out of memory on an 8 GB device -----------------------------------------------------------

OOM = ("Requested amount of GPU memory (4294967296 bytes) could not be allocated. There may not be enough free "
       "memory for allocation to succeed.")


@pytest.mark.parametrize("workspace, said", [(None, "no workspace limit"), (2048, "2048 MiB")])
def test_out_of_memory_names_the_workspace_limit(install_trt, make_bundle, cache_dir, workspace, said) -> None:
    fake = install_trt("8.5")
    fake.fail_build = OOM
    with pytest.raises(BackendError) as exc:
        _build(make_bundle(), fake, cache_dir, precision="fp16", workspace_mib=workspace)
    text = str(exc.value)
    assert "ran out of GPU memory" in text and "--workspace" in text and "workspace_mib" in text and said in text
    assert "could not be allocated" in text  # TensorRT's own line is kept


def test_out_of_memory_exit_code_on_the_command_line(install_trt, make_bundle, cache_dir, monkeypatch) -> None:
    fake = install_trt("8.5")
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: XAVIER)
    fake.fail_build = OOM
    result = CliRunner().invoke(app, ["engine", str(make_bundle()), "--precision", "fp16", "--cache-dir", str(cache_dir)])
    assert result.exit_code == BackendError.exit_code and "--workspace" in result.output
    assert json.dumps(result.exit_code) == "10"
