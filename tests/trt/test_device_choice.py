"""`edge-sdk verify` on the TensorRT backend and the on-device precision choice, against the fake
TensorRT runtime (8.5, 10, 11) on a fake integrated and a fake discrete GPU.

The bundle's reference (gate inputs and FP32 outputs) is computed here with numpy from the fake
network's arithmetic written out again (`expected`), never by the code under test. The fake
engines take a per-precision GPU time (the fake CUDA clock, read through CUDA events) and may
distort their outputs (a reduced precision's error), so the choice must weigh speed and the gate.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edge_sdk.builder.reference import reference_npz
from edge_sdk.cli import app
from edge_sdk.errors import AccuracyGateError, BundleError, ConfigError
from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import MANIFEST, REFERENCE, Bundle
from edge_sdk.geometry import Placement
from edge_sdk.runtime.backends import select_backend
from edge_sdk.trt import calibrator as calibrator_mod
from edge_sdk.trt import engine as engine_mod
from edge_sdk.trt.cache import EngineCache
from edge_sdk.precision_choice import choose_engine, time_backend
from edge_sdk.trt.choice import read_device_report, report_errors, report_key
from edge_sdk.trt.options import BuildOptions
from edge_sdk.verify import verify_bundle
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX
from fakes.fake_tensorrt_runtime import CENTERFACE_OUTPUTS, RUNTIME_FAKES, FakeRuntimeCuda, TinyCenterFace
from trt_bundles import XAVIER, write_bundle

H, W = 32, 64
GPUS = {"xavier": XAVIER_NX, "discrete": DISCRETE}
VERSIONS = sorted(RUNTIME_FAKES)
NAMES = [n for n, _ in CENTERFACE_OUTPUTS]


def expected(x: np.ndarray) -> List[np.ndarray]:
    """The fake network's outputs, written out again: heatmap = sigmoid((4x4 cell mean over the
    channels - 128) / 4), every other output zero."""
    n = x.shape[0]
    gray = x.astype(np.float64).reshape(n, 3, H // 4, 4, W // 4, 4).mean(axis=(1, 3, 5))[:, None]
    heat = (1.0 / (1.0 + np.exp(-(gray - 128.0) / 4.0))).astype(np.float32)
    return [heat] + [np.zeros((n, c, H // 4, W // 4), np.float32) for _, c in CENTERFACE_OUTPUTS[1:]]


def gate_images(count: int = 6) -> List[np.ndarray]:
    """Dark frames with two bright 8x8 squares each, at places that differ per image."""
    images = []
    for i in range(count):
        x = np.full((1, 3, H, W), 20.0, np.float32)
        for k in range(2):
            top, left = 4 * ((i + 3 * k) % 6), 8 * ((2 * i + 5 * k) % 7)
            x[:, :, top : top + 8, left : left + 8] = 250.0
        images.append(x)
    return images


def choice_bundle(root: Path, reference: bool = True, min_f1: float = 0.9) -> Path:
    """A fake bundle the fake builders build (fp32, fp16, int8; calibration data) with a
    CenterFace manifest and, with `reference`, reference.npz from `expected`."""
    write_bundle(root, shape=[1, 3, H, W])
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["outputs"] = [{"name": n, "shape": [1, c, H // 4, W // 4], "dtype": "float32"} for n, c in CENTERFACE_OUTPUTS]
    manifest["inputs"][0]["resize"] = "stretch"
    manifest["precision"] = "int8"
    manifest["variants"] = ["fp32", "fp16", "int8"]
    if reference:
        inputs = gate_images()
        data, section = reference_npz(inputs, [Placement.affine(1.0, 1.0, 0.0, 0.0, W, H)] * len(inputs), NAMES,
                                      [expected(x) for x in inputs])
        (root / REFERENCE).write_bytes(data)
        section["min_f1"] = min_f1
        manifest["reference"] = section
    manifest["files"] = {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*"))
                         if p.is_file() and p.name != MANIFEST}
    (root / MANIFEST).write_text(json.dumps(manifest))
    Bundle.load(root)
    return root


def drop_left_half(outputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """A reduced precision that loses every object in the left half of the frame."""
    heat = outputs["537"].copy()
    heat[..., : heat.shape[-1] // 2] = 0.0
    return dict(outputs, **{"537": heat})


def tiny_noise(outputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """A reduced precision that keeps every detection: the heatmap off by 0.01 %."""
    return dict(outputs, **{"537": outputs["537"] * np.float32(1.0001)})


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Any]:
    """device(version, gpu, latency={kind: ms or [ms, ...]}, distort={kind: fn}, network=...) -> (fake trt, fake CUDA)."""

    def make(version: str = "8.5", gpu: str = "xavier", latency: Dict[str, Any] = None,
             distort: Dict[str, Any] = None, network: Any = None) -> Any:
        cuda = FakeRuntimeCuda(props=GPUS[gpu])
        trt = RUNTIME_FAKES[version](cuda=cuda, network=network)
        trt.latency_ms.update(latency or {})
        trt.distort.update(distort or {})
        monkeypatch.setitem(sys.modules, "tensorrt", trt)
        monkeypatch.setattr(calibrator_mod, "allocate_device_buffer", trt.device_memory.allocate)
        monkeypatch.setattr("edge_sdk.cuda.require_cuda", lambda *a, **k: cuda)
        # The fake TensorRT runs no kernels: the frame-memory timing (tests/cuda/test_frame_choice.py
        # runs it through the host shim) is replaced by a fixed measurement here, which reads its
        # arguments as the real one does (the device's CUDA api, the bundle's input).
        def measured(api: Any, spec: Any) -> Dict[str, Any]:
            assert api is cuda and api.properties.can_map_host_memory, api
            return dict(MEASURED, input=f"{spec.width}x{spec.height}")

        monkeypatch.setattr("edge_sdk.cuda.measure.measure_frame_memory", measured)
        return trt, cuda

    return make


MEASURED = {"chosen": "mapped", "gpu_ms": {"mapped": 0.8, "pinned": 1.1, "device": 0.5}, "frame": "1920x1080",
            "input": "64x32", "repeat": 50}


def choose(bundle: Path, cuda: Any, cache: Path, **kwargs: Any):
    return choose_engine(bundle, BuildOptions(cache_dir=cache, **kwargs), cuda=cuda, warmup=2, iterations=5, reference="bundle")


# --- the choice ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_fastest_engine_that_passes_is_chosen_and_recorded(device, tmp_path: Path, version: str, gpu: str) -> None:
    trt, cuda = device(version, gpu, latency={"fp16": 4.0, "int8": 2.5}, distort={"int8": tiny_noise})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    choice = choose(bundle, cuda, cache)
    rows = {r.precision: r for r in choice.candidates}
    assert choice.chosen == "int8" and set(rows) == {"fp16", "int8"}
    assert rows["fp16"].median_ms == pytest.approx(4.0) and rows["int8"].median_ms == pytest.approx(2.5)
    assert rows["int8"].passed and rows["int8"].f1_vs_fp32 == 1.0 and rows["fp16"].passed
    stored = json.loads(choice.path.read_text())
    assert choice.path.parent == cache and choice.path.name.endswith(".device_report.json")
    assert stored["chosen"] == "int8" and [r["chosen"] for r in stored["candidates"]] == [False, True]
    assert [(r["precision"], r["median_ms"], r["passed"]) for r in stored["candidates"]] == [
        ("fp16", 4.0, True), ("int8", 2.5, True)]
    assert Path(stored["candidates"][1]["engine"]) == choice.engine.path and choice.engine.key.precision == "int8"


def test_choice_runs_destroy_the_streams_and_events_they_create(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 4.0, "int8": 2.5}, distort={"int8": tiny_noise})
    bundle = choice_bundle(tmp_path / "b")
    for i in range(3):
        choose(bundle, cuda, tmp_path / "engines", force=i > 0)
    assert cuda.streams >= 6 and cuda.events >= 12
    assert (cuda.live_streams, cuda.live_events) == (0, 0)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_frame_memory_is_measured_on_a_jetson_recorded_and_read_back(device, tmp_path: Path, gpu: str) -> None:
    from edge_sdk.trt import choice as choice_mod

    trt, cuda = device(gpu=gpu)
    choice = choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines")
    stored = json.loads(choice.path.read_text())
    if gpu == "xavier":
        assert stored["frame_memory"] == dict(MEASURED, input=f"{W}x{H}")  # measured for the bundle's input
        assert choice_mod.summary(stored)["frame_memory"]["chosen"] == "mapped"
    else:  # a discrete GPU: pinned + one copy, nothing to measure
        assert "frame_memory" not in stored and choice_mod.summary(stored)["frame_memory"] is None


def test_a_frame_memory_measurement_that_fails_loses_no_choice(device, tmp_path: Path, monkeypatch) -> None:
    """The measurement runs after every build and timing: its failure is a note, the report is written."""
    trt, cuda = device(latency={"fp16": 4.0, "int8": 2.5}, distort={"int8": tiny_noise})

    def fails(api: Any, spec: Any) -> Any:
        raise ValueError("a frame size the preprocessor refuses")

    monkeypatch.setattr("edge_sdk.cuda.measure.measure_frame_memory", fails)
    choice = choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines")
    stored = json.loads(choice.path.read_text())
    assert stored["chosen"] == "int8" and stored.get("frame_memory") is None
    assert any("frame memory not measured (ValueError" in n for n in stored["notes"])


@pytest.mark.parametrize("value", [
    "mapped", {"chosen": "zero-copy", "gpu_ms": {"zero-copy": 1.0}}, {"chosen": "mapped"},
    {"chosen": "mapped", "gpu_ms": {"pinned": 1.0}}, {"chosen": "mapped", "gpu_ms": {"mapped": "fast"}},
    {"chosen": "mapped", "gpu_ms": {"mapped": True}}, {"chosen": "pinned", "gpu_ms": {"pinned": -1.0}},
])
def test_a_malformed_frame_memory_field_is_ignored(value: Any) -> None:
    from edge_sdk.trt import choice as choice_mod

    assert choice_mod.frame_memory({"frame_memory": value}) is None
    good = {"frame_memory": {"chosen": "pinned", "gpu_ms": {"mapped": 2.0, "pinned": 1.0}, "frame": "1920x1080"}}
    assert choice_mod.frame_memory(good)["chosen"] == "pinned"
    zero = {"frame_memory": {"chosen": "pinned", "gpu_ms": {"mapped": 2.0, "pinned": 0.0}}}  # 0 ms is a time
    assert choice_mod.frame_memory(zero)["gpu_ms"] == {"mapped": 2.0, "pinned": 0.0}


def test_a_faster_int8_that_fails_the_gate_is_not_chosen(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 4.0, "int8": 1.0}, distort={"int8": drop_left_half})
    choice = choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines")
    rows = {r.precision: r for r in choice.candidates}
    assert choice.chosen == "fp16"
    assert not rows["int8"].passed and rows["int8"].f1_vs_fp32 < 0.9 and "f1_vs_fp32" in rows["int8"].failures[0]


def test_int8_is_not_assumed_faster(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 2.0, "int8": 3.0})
    assert choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines").chosen == "fp16"


def test_when_neither_passes_fp32_is_verified_and_chosen(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp32": 9.0, "fp16": 4.0, "int8": 1.0},
                       distort={"fp16": drop_left_half, "int8": drop_left_half})
    choice = choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines")
    assert choice.chosen == "fp32" and [r.precision for r in choice.candidates] == ["fp16", "int8", "fp32"]
    assert any("FP32 verified as the fallback" in n for n in choice.notes)


def test_when_nothing_passes_the_choice_is_an_accuracy_error(device, tmp_path: Path) -> None:
    trt, cuda = device(distort={k: drop_left_half for k in ("fp32", "fp16", "int8")})
    cache = tmp_path / "engines"
    with pytest.raises(AccuracyGateError, match="no engine of .* keeps FP32's accuracy on this device"):
        choose(choice_bundle(tmp_path / "b"), cuda, cache)
    assert not list(cache.glob("*.device_report.json"))


# --- `edge-sdk engine` (best) then the runtime: one build ------------------------------------


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_engine_default_then_auto_reuses_the_chosen_engine(device, tmp_path: Path, gpu: str) -> None:
    trt, cuda = device("8.5", gpu, latency={"fp16": 2.0, "int8": 3.0})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    result = CliRunner().invoke(app, ["engine", str(bundle), "--cache-dir", str(cache), "--iterations", "5", "--reference", "bundle",
                                      "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["device_choice"]["chosen"] == "fp16" and out["key"]["precision"] == "fp16"
    built = trt.engines_built()
    assert built == 2  # fp16 and int8
    backend = select_backend("tensorrt", bundle=Bundle.load(bundle), cache_dir=cache)
    assert trt.engines_built() == built  # no second build: the chosen engine was found
    assert backend.precision == "fp16" and str(backend.engine_path) == out["engine"]
    assert "chosen on this device" in backend.precision_reason
    described = backend.describe()["device_choice"]
    assert described["chosen"] == "fp16" and [r["precision"] for r in described["table"]] == ["fp16", "int8"]
    # an explicit precision maps to its own engine (also built by the choice: still no build)
    assert select_backend("tensorrt", bundle=Bundle.load(bundle), precision="int8", cache_dir=cache).precision == "int8"
    assert trt.engines_built() == built


def test_engine_prints_the_frame_memory_measured_and_the_backend_carries_it(device, tmp_path: Path) -> None:
    trt, cuda = device("8.5", "xavier", latency={"fp16": 2.0, "int8": 3.0})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    result = CliRunner().invoke(app, ["engine", str(bundle), "--cache-dir", str(cache), "--iterations", "5",
                                      "--reference", "bundle"])
    assert result.exit_code == 0, result.output
    assert ("frame memory measured on this device: mapped (mapped 0.800 ms, pinned 1.100 ms, device 0.500 ms per "
            "1920x1080 frame; frame_memory = auto uses it)") in result.stdout
    backend = select_backend("tensorrt", bundle=Bundle.load(bundle), cache_dir=cache)
    assert backend.describe()["device_choice"]["frame_memory"]["chosen"] == "mapped"
    assert backend.frame_memory["chosen"] == "mapped"


@pytest.mark.parametrize("precision", ["fp16", "int8", "fp32"])
def test_the_frame_memory_measured_holds_for_an_explicit_precision(device, tmp_path: Path, precision: str) -> None:
    """The measurement is of the device: `precision = int8` (no choice made here) still runs the
    frame memory `edge-sdk engine` measured, as mode full's GPU detector and the capture read it."""
    from edge_sdk.runtime.detectors.gpu import measured_frame_memory
    from edge_sdk.runtime.model import Model

    trt, cuda = device("8.5", "xavier", latency={"fp16": 2.0, "int8": 3.0})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    result = CliRunner().invoke(app, ["engine", str(bundle), "--cache-dir", str(cache), "--iterations", "5",
                                      "--reference", "bundle"])
    assert result.exit_code == 0, result.output
    backend = select_backend("tensorrt", bundle=Bundle.load(bundle), precision=precision, cache_dir=cache)
    assert backend.precision == precision and backend.device_choice is None  # not chosen here
    stored = json.loads(next(cache.rglob("*device_report*.json")).read_text())
    assert measured_frame_memory(backend) == {"chosen": "mapped", "gpu_ms": stored["frame_memory"]["gpu_ms"],
                                              "frame": "1920x1080", "input": f"{W}x{H}"}


def test_an_old_bundle_gets_one_fp16_int8_engine_which_auto_reuses(device, tmp_path: Path, monkeypatch) -> None:
    trt, cuda = device("8.5")
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: XAVIER)
    bundle, cache = choice_bundle(tmp_path / "b", reference=False), tmp_path / "engines"
    result = CliRunner().invoke(app, ["engine", str(bundle), "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    assert "carries no gate inputs" in result.output and trt.engines_built() == 1
    backend = select_backend("tensorrt", bundle=Bundle.load(bundle), cache_dir=cache)
    assert trt.engines_built() == 1 and "-best-" in backend.engine_path.name
    assert backend.precision == "int8" and "FP16+INT8 engine" in backend.precision_reason


def test_a_stale_report_is_ignored(device, tmp_path: Path) -> None:
    trt, cuda = device("8.5", latency={"fp16": 2.0, "int8": 3.0})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    choice = choose(bundle, cuda, cache)
    stored = json.loads(choice.path.read_text())
    stored["key"]["bundle_hash"] = "0" * 16  # a report for another bundle under this name
    choice.path.write_text(json.dumps(stored))
    loaded = Bundle.load(bundle)
    assert read_device_report(EngineCache(cache), report_key(loaded, trt.__version__, "7.2", None)) is None
    backend = select_backend("tensorrt", bundle=loaded, cache_dir=cache)
    assert backend.precision == "int8" and "gated choice" in backend.precision_reason


# --- verify on the TensorRT backend ----------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_verify_the_engine_against_the_stored_reference(device, tmp_path: Path, version: str) -> None:
    trt, cuda = device(version, "discrete", distort={"int8": drop_left_half})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    good = verify_bundle(Bundle.load(bundle), precision="fp16", reference="bundle", cache_dir=cache)
    assert good.passed and good.f1 == 1.0 and good.reference_detections > 0
    assert all(o.max_abs_err < 2.5e-4 for o in good.outputs)  # the same arithmetic; float16's rounding below 1.0
    result = CliRunner().invoke(app, ["verify", str(bundle), "--precision", "int8", "--reference", "bundle",
                                      "--cache-dir", str(cache), "--json"])
    assert result.exit_code == AccuracyGateError.exit_code, result.output
    out = json.JSONDecoder().raw_decode(result.stdout)[0]  # stderr may follow (click < 8.2 mixes it in)
    # the oracle: the left half of the frame holds these detections of FP32's, lost by the distortion
    heat = [expected(x)[0][0, 0] for x in gate_images()]
    left = sum(int(((h[:, : W // 8] > 0.5)).any()) for h in heat)
    assert left > 0 and out["passed"] is False and out["f1_vs_fp32"] < 0.9
    assert out["outputs"]["537"]["max_abs_err"] > 0.5 and out["outputs"]["538"]["max_abs_err"] == 0.0


def test_verify_an_old_bundle_says_how_to_get_the_reference(device, tmp_path: Path) -> None:
    device("8.5")
    bundle = choice_bundle(tmp_path / "b", reference=False)
    result = CliRunner().invoke(app, ["verify", str(bundle), "--cache-dir", str(tmp_path / "engines")])
    assert result.exit_code == BundleError.exit_code
    assert "carries no reference.npz" in result.output and "Rebuild it with `edge-sdk build" in result.output


def test_the_model_the_daemon_runs_describes_the_choice(device, tmp_path: Path, monkeypatch) -> None:
    """What the daemon's status reports: the running model's describe() (runtime.model.Model)."""
    from edge_sdk.runtime.model import load_model

    trt, cuda = device("8.5", latency={"fp16": 2.0, "int8": 1.0})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    monkeypatch.setenv("EDGE_SDK_ENGINE_CACHE", str(cache))
    choose(bundle, cuda, None)
    built = trt.engines_built()
    model = load_model(bundle, backend="tensorrt")
    try:
        described = model.describe()
    finally:
        model.close()
    assert trt.engines_built() == built and described["precision"] == "int8"
    assert described["device_choice"]["chosen"] == "int8"
    assert [(r["precision"], r["median_ms"], r["passed"], r["chosen"]) for r in described["device_choice"]["table"]] == [
        ("fp16", 2.0, True, False), ("int8", 1.0, True, True)]


def _choose_failed_int8(report: Dict[str, Any]) -> None:
    report["chosen"] = "int8"
    for row in report["candidates"]:
        row["chosen"] = row["precision"] == "int8"  # its own row still says passed: false


def _passed_as_text(report: Dict[str, Any]) -> None:
    _choose_failed_int8(report)
    report["candidates"][1]["passed"] = "yes"


def _slower_than_a_passing_row(report: Dict[str, Any]) -> None:
    report["candidates"][1]["passed"] = True  # int8 (1 ms) passes, fp16 (4 ms) stays chosen


def _median_as_text(report: Dict[str, Any]) -> None:
    report["candidates"][0]["median_ms"] = "fast"


def _repeated_row(report: Dict[str, Any]) -> None:
    report["candidates"].append(dict(report["candidates"][0], chosen=False))


def _no_version(report: Dict[str, Any]) -> None:
    del report["version"]


def _f1_out_of_range(report: Dict[str, Any]) -> None:
    report["candidates"][0]["f1_vs_fp32"] = 7


def _many_rows(report: Dict[str, Any]) -> None:
    report["candidates"] += [dict(report["candidates"][1], chosen=False) for _ in range(50)]


@pytest.mark.parametrize("edit, why", [
    (_choose_failed_int8, "the int8 row says passed: false"),
    (_passed_as_text, "candidates[1].passed is not true or false"),
    (_slower_than_a_passing_row, "fp16 is not the fastest row that passed"),
    (_median_as_text, "candidates[0].median_ms is not a number"),
    (_repeated_row, "candidates[2].precision 'fp16' is unknown or repeated"),
    (_no_version, "version None is not 1"),
    (_f1_out_of_range, "candidates[0].f1_vs_fp32 is not null or a number in [0, 1]"),
    (_many_rows, "candidates must be a list of 1 to 8 rows"),
])
def test_a_planted_or_broken_report_is_never_followed(device, tmp_path: Path, caplog, edit, why: str) -> None:
    trt, cuda = device(latency={"fp16": 4.0, "int8": 1.0}, distort={"int8": drop_left_half})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    choice = choose(bundle, cuda, cache)
    assert choice.chosen == "fp16"
    stored = json.loads(choice.path.read_text())
    edit(stored)
    choice.path.write_text(json.dumps(stored))
    loaded = Bundle.load(bundle)
    with caplog.at_level("WARNING"):
        assert read_device_report(EngineCache(cache), report_key(loaded, trt.__version__, "7.2", None)) is None
    assert any(why in r.getMessage() and str(choice.path) in r.getMessage() for r in caplog.records)
    backend = select_backend("tensorrt", bundle=loaded, cache_dir=cache)
    assert "chosen on this device" not in backend.precision_reason and backend.device_choice is None


def test_a_report_reached_through_a_link_is_not_read(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 4.0, "int8": 1.0}, distort={"int8": drop_left_half})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    choice = choose(bundle, cuda, cache)
    key = report_key(Bundle.load(bundle), trt.__version__, "7.2", None)
    assert read_device_report(EngineCache(cache), key)["chosen"] == "fp16"
    elsewhere = tmp_path / "report.json"
    choice.path.rename(elsewhere)  # the very same, valid report, now behind a link
    choice.path.symlink_to(elsewhere)
    assert read_device_report(EngineCache(cache), key) is None


# --- timing: the median, with jitter and outliers --------------------------------------------


class TimedRunner:
    """A backend whose runs take the listed GPU times in turn (cycled), as `gpu_ms()` reads them."""

    def __init__(self, times: List[float]) -> None:
        self.times, self.runs, self.reads = list(times), 0, 0

    def infer(self, feed: Dict[str, Any]) -> Dict[str, np.ndarray]:
        self.runs += 1
        return {}

    def gpu_ms(self) -> float:
        self.reads += 1
        return self.times[(self.runs - 1) % len(self.times)]


@pytest.mark.parametrize("times,warmup,iterations,figure", [
    ([1, 1, 1, 1, 100], 0, 5, 1.0),  # an outlier moves the mean to 20.8, not the median
    ([50, 50, 1, 2, 3, 4], 2, 4, 2.5),  # warmup runs are not timed; an even count: the middle two's mean
    ([7], 0, 1, 7.0),
    ([3, 1, 2], 10, 3, 2.0),
])
def test_time_backend_is_the_median_of_the_timed_runs(times, warmup: int, iterations: int, figure: float) -> None:
    runner = TimedRunner(times)
    assert time_backend(runner, {}, warmup=warmup, iterations=iterations) == figure
    assert runner.runs == warmup + iterations and runner.reads == iterations


@settings(max_examples=60, deadline=None)
@given(times=st.lists(st.floats(0.01, 1000.0), min_size=1, max_size=30))
def test_time_backend_against_numpy(times: List[float]) -> None:
    assert time_backend(TimedRunner(times), {}, warmup=0, iterations=len(times)) == pytest.approx(float(np.median(times)))


@pytest.mark.parametrize("warmup,iterations", [(-1, 5), (0, 0), (2, -1)])
def test_time_backend_refuses_what_cannot_time(warmup: int, iterations: int) -> None:
    with pytest.raises(ConfigError, match="--warmup"):
        time_backend(TimedRunner([1.0]), {}, warmup=warmup, iterations=iterations)


def test_the_choice_times_by_the_median_of_jittery_runs(device, tmp_path: Path) -> None:
    # warmup 2, then five timed runs: fp16 1,1,100,1,1 (median 1, mean 20.8) against int8 at 2 ms
    trt, cuda = device(latency={"fp16": [1.0, 1.0, 1.0, 1.0, 100.0], "int8": [2.1, 1.9, 2.0, 2.0, 2.0]},
                       distort={"int8": tiny_noise})
    choice = choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines")
    rows = {r.precision: r for r in choice.candidates}
    assert rows["fp16"].median_ms == 1.0 and rows["int8"].median_ms == 2.0
    assert choice.chosen == "fp16"
    stored = json.loads(choice.path.read_text())
    assert stored["timing"] == {"warmup": 2, "iterations": 5, "statistic": "median GPU ms (CUDA events)"}
    assert (stored["images"], stored["min_f1"], stored["version"], stored["chosen"]) == (6, 0.9, 1, "fp16")
    assert stored["reference"].startswith("the bundle's stored FP32 outputs") and stored["gpu"]["sm"] == "7.2"
    assert stored["key"] == report_key(Bundle.load(tmp_path / "b"), trt.__version__, "7.2", None).to_dict()
    assert stored["path"] == str(choice.path) and stored["bundle"] == str(Bundle.load(tmp_path / "b").root)
    assert [r["median_ms"] for r in stored["candidates"]] == [1.0, 2.0]


def test_an_equally_fast_passing_row_is_a_valid_choice(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 2.0, "int8": 2.0})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    choice = choose(bundle, cuda, cache)
    assert choice.chosen == "fp16"  # the first of equals
    key = report_key(Bundle.load(bundle), trt.__version__, "7.2", None)
    report = read_device_report(EngineCache(cache), key)
    assert report is not None and report["chosen"] == "fp16"
    for edit in ({"chosen": "int8"},):  # int8 is as fast: choosing it is as valid
        stored = json.loads(choice.path.read_text())
        stored.update(edit)
        for row in stored["candidates"]:
            row["chosen"] = row["precision"] == "int8"
        assert report_errors(stored, key) == []


@pytest.mark.parametrize("field,value,ok", [
    ("median_ms", 0.0, True), ("median_ms", 3.6e6, True), ("median_ms", 3.6e6 + 1, False), ("median_ms", -0.001, False),
    ("median_ms", True, False), ("f1_vs_fp32", 0.0, True), ("f1_vs_fp32", 1.0, True), ("f1_vs_fp32", 1.0001, False),
    ("f1_vs_fp32", -0.0001, False), ("f1_vs_fp32", None, True), ("passed", 1, False),
])
def test_a_report_row_at_its_bounds(device, tmp_path: Path, field: str, value: Any, ok: bool) -> None:
    trt, cuda = device(latency={"fp16": 4.0, "int8": 1.0}, distort={"int8": drop_left_half})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    choice = choose(bundle, cuda, cache)
    stored = json.loads(choice.path.read_text())
    stored["candidates"][1][field] = value  # the int8 row: not chosen, failed
    key = report_key(Bundle.load(bundle), trt.__version__, "7.2", None)
    assert (report_errors(stored, key) == []) is ok
    assert len(report_errors(dict(stored, candidates=stored["candidates"][:1] * 0), key)) == 1


# --- on a DLA core ------------------------------------------------------------------------------


def test_on_a_dla_core_fp32_is_not_a_fallback(device, tmp_path: Path) -> None:
    trt, cuda = device(distort={"fp16": drop_left_half, "int8": drop_left_half})
    cache = tmp_path / "engines"
    with pytest.raises(AccuracyGateError, match="fp16: .*int8: "):
        choose(choice_bundle(tmp_path / "b"), cuda, cache, dla_core=0)
    assert not any("fp32" in p.name for p in cache.glob("*.engine")) and not list(cache.glob("*.device_report.json"))


def test_a_choice_on_a_dla_core_is_stored_for_that_core_only(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 4.0, "int8": 1.0}, distort={"int8": tiny_noise})
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    choice = choose(bundle, cuda, cache, dla_core=1)
    assert choice.chosen == "int8"
    loaded = Bundle.load(bundle)
    on_core = report_key(loaded, trt.__version__, "7.2", 1)
    assert choice.path == EngineCache(cache).device_report_path(on_core)
    assert read_device_report(EngineCache(cache), on_core)["chosen"] == "int8"
    for other in (None, 0):
        assert read_device_report(EngineCache(cache), report_key(loaded, trt.__version__, "7.2", other)) is None


# --- an engine that lists its outputs in another order than the manifest ----------------------


class EngineOrderCenterFace(TinyCenterFace):
    """The same network, its outputs declared in another order (as TensorRT may list an engine's
    I/O tensors in any order its builder chose)."""

    outputs = (CENTERFACE_OUTPUTS[2], CENTERFACE_OUTPUTS[0], CENTERFACE_OUTPUTS[3], CENTERFACE_OUTPUTS[1])


@pytest.mark.parametrize("version", VERSIONS)
def test_verify_matches_an_engines_outputs_by_name_not_by_position(device, tmp_path: Path, version: str) -> None:
    trt, cuda = device(version, "discrete", network=EngineOrderCenterFace())
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    report = verify_bundle(Bundle.load(bundle), precision="fp32", reference="bundle", cache_dir=cache)
    assert report.passed and report.f1 == 1.0
    assert [o.name for o in report.outputs] == NAMES
    assert all(o.max_abs_err < 2.5e-4 and o.cosine == pytest.approx(1.0) for o in report.outputs), report.to_dict()
    choice = choose(bundle, cuda, tmp_path / "engines2")
    assert all(r.passed and r.f1_vs_fp32 == 1.0 for r in choice.candidates)



def test_a_row_says_its_figures_to_four_and_six_places() -> None:
    from edge_sdk.precision_choice import Candidate

    row = Candidate("int8", "/e.engine", 1.234567, 0.987654, 0.123456789, False, ["x"], chosen=False)
    assert row.to_dict() == {"precision": "int8", "median_ms": 1.2346, "f1_vs_fp32": 0.9877, "min_cosine": 0.123457,
                             "passed": False, "chosen": False, "failures": ["x"], "engine": "/e.engine"}
    assert Candidate("fp16", "e", 2.0, None, 1.0, True).to_dict()["f1_vs_fp32"] is None


def test_fp32_is_computed_before_any_engine_is_built(device, tmp_path: Path) -> None:
    trt, cuda = device()
    bundle, cache = choice_bundle(tmp_path / "b"), tmp_path / "engines"
    with pytest.raises(Exception):  # the fake bundle's model.onnx is no model ONNX Runtime can run
        choose_engine(bundle, BuildOptions(cache_dir=cache), cuda=cuda, warmup=0, iterations=1, reference="onnxruntime")
    assert not list(cache.glob("*.engine")) if cache.exists() else True
    assert trt.engines_built() == 0


def test_a_precision_the_bundle_cannot_build_is_noted_not_a_candidate(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 2.0})
    bundle = choice_bundle(tmp_path / "b")
    for path in list((bundle / "calib").iterdir()) + [bundle / "calib.cache", bundle / "model.int8.qdq.onnx"]:
        path.unlink()  # no Q/DQ model and no calibration data: no INT8 engine
    (bundle / "calib").rmdir()
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"] = {k: v for k, v in manifest["files"].items() if (bundle / k).exists()}
    manifest["variants"] = ["fp32", "fp16"]
    manifest["precision"] = "fp16"
    manifest.pop("calibration", None)
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    choice = choose(bundle, cuda, tmp_path / "engines")
    assert choice.chosen == "fp16" and [r.precision for r in choice.candidates] == ["fp16"]
    assert any(n.startswith("int8 is not a candidate: ") for n in choice.notes), choice.notes


def test_by_default_ten_warmup_runs_then_the_median_of_a_hundred_as_the_readme_says() -> None:
    # README: "times each trtexec-style (`--warmup` 10 runs, then the median GPU time of `--iterations` 100 runs"
    runner = TimedRunner([5.0] * 10 + [1.0] * 50 + [3.0] * 50)
    assert time_backend(runner, {}) == 2.0  # the warmup's 5 ms runs are not counted: the middle of 1s and 3s
    assert (runner.runs, runner.reads) == (110, 100)


def test_the_build_notes_of_each_candidate_are_kept_with_its_name(device, tmp_path: Path) -> None:
    trt, cuda = device("8.5", "discrete", latency={"fp16": 2.0, "int8": 3.0})
    choice = choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines")
    assert any(n.startswith("fp16: ") and "SM 8.6" in n for n in choice.notes), choice.notes
    assert any(n.startswith("int8: ") for n in choice.notes)


def test_the_choice_says_what_it_does_as_it_goes(device, tmp_path: Path) -> None:
    trt, cuda = device(latency={"fp16": 2.0, "int8": 3.0})
    said: List[str] = []
    choose(choice_bundle(tmp_path / "b"), cuda, tmp_path / "engines", progress=said.append)
    assert said[0] == "FP32 reference on 6 gate image(s)"
    assert said.index("timing and verifying the fp16 engine") < said.index("timing and verifying the int8 engine")
