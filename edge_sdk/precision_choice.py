"""The on-device precision choice (`edge-sdk engine --precision best`): build the FP16 and the INT8
engine, time each trtexec-style, verify each against FP32, keep the fastest that passes the gate
(the precision policy's rule: edge_sdk.precision.fastest_passing).

INT8 is often no faster than FP16 on a Xavier NX, and explicit Q/DQ can be slower
(DeepStream-Yolo #166, NVIDIA/TensorRT #3762, #3197): only this device can say. Each candidate is
the engine `edge-sdk engine --precision P` builds (cached under its own key, INT8 with the
manifest's fallback layers), run through the TensorRT backend:

* timing: `warmup` runs, then `iterations` runs of one gate input; the figure is the median of
  the GPU time between two CUDA events around each run (the input copy and TensorRT's work, as
  the backend's `gpu_ms()` measures it), like trtexec's median GPU compute time;
* accuracy: :class:`edge_sdk.verify.Verifier` on the bundle's gate inputs (f1_vs_fp32 against the
  manifest's gate, output cosines).

When neither passes, FP32 is built and verified too (not on a DLA, which has no FP32): a device
always gets an engine that matches FP32, and an AccuracyGateError when not even that does.

On an integrated GPU (a Jetson) the frame memory is measured too: mapped against pinned + one
copy, the preprocess kernel included, for a 1080p frame into the bundle's input
(:func:`edge_sdk.cuda.measure.measure_frame_memory`); the runtime's frame memory `auto` takes
the faster (edge_sdk.cuda.frames). The
table goes to `device_report.json` beside the cached engines (:mod:`edge_sdk.trt.choice` reads
it: the runtime's precision `auto` on TensorRT runs the engine it names, and the backend's
describe() reports it).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from edge_sdk.errors import AccuracyGateError, BundleError, CalibrationError, ConfigError
from edge_sdk.fsutil import PathLike, atomic_write_json
from edge_sdk.manifest import Bundle
from edge_sdk.precision import fastest_passing
from edge_sdk.trt.cache import EngineCache
from edge_sdk.trt.choice import REPORT_VERSION, report_key
from edge_sdk.trt.options import BuildOptions

CANDIDATES = ("fp16", "int8")
WARMUP = 10
ITERATIONS = 100


def time_backend(backend: Any, feed: Dict[str, Any], warmup: int = WARMUP, iterations: int = ITERATIONS) -> float:
    """Median GPU milliseconds of `iterations` runs of an active TensorRT backend on `feed`,
    after `warmup` runs (CUDA events, `backend.gpu_ms()`)."""
    if warmup < 0 or iterations < 1:
        raise ConfigError(f"--warmup must be >= 0 and --iterations >= 1, got {warmup} and {iterations}")
    for _ in range(warmup):
        backend.infer(feed)
    times = []
    for _ in range(iterations):
        backend.infer(feed)
        times.append(backend.gpu_ms())
    return float(statistics.median(times))


@dataclass
class Candidate:
    """One row of the table."""

    precision: str
    engine: str
    median_ms: float
    f1_vs_fp32: Optional[float]
    min_cosine: float
    passed: bool
    failures: List[str] = field(default_factory=list)
    chosen: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"precision": self.precision, "median_ms": round(self.median_ms, 4),
                "f1_vs_fp32": None if self.f1_vs_fp32 is None else round(self.f1_vs_fp32, 4),
                "min_cosine": round(self.min_cosine, 6), "passed": self.passed, "chosen": self.chosen,
                "failures": list(self.failures), "engine": self.engine}


@dataclass
class DeviceChoice:
    """The table and the choice, as `device_report.json` holds them."""

    chosen: str
    candidates: List[Candidate]
    path: Path
    info: Dict[str, Any]
    notes: List[str] = field(default_factory=list)
    engine: Any = None  # the chosen candidate's EngineResult

    def to_dict(self) -> Dict[str, Any]:
        out = dict(self.info)
        out.update({"version": REPORT_VERSION, "chosen": self.chosen, "candidates": [c.to_dict() for c in self.candidates],
                    "notes": list(self.notes)})
        return out


def choose_engine(
    bundle_dir: PathLike,
    options: BuildOptions = BuildOptions(),
    cuda: Any = None,
    warmup: int = WARMUP,
    iterations: int = ITERATIONS,
    reference: str = "auto",
    min_f1: Optional[float] = None,
) -> DeviceChoice:
    """Build, time and verify the FP16 and INT8 engines of a bundle on this device; write and
    return the choice (see the module docstring). `options`: how each candidate is built (its
    precision is each candidate's; `gpu` is the one `cuda` runs on). `cuda`: a CudaApi (default:
    require_cuda)."""
    from edge_sdk.cuda import require_cuda
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend
    from edge_sdk.trt.device import GpuInfo
    from edge_sdk.trt.engine import build_engine
    from edge_sdk.trt.loaders import EngineBytesFromCache
    from edge_sdk.verify import Verifier

    say = options.progress or (lambda _m: None)
    bundle = Bundle.load(bundle_dir)
    verifier = Verifier(bundle, reference=reference, min_f1=min_f1)  # BundleError for a bundle without gate inputs
    say(f"FP32 reference on {verifier.data.images} gate image(s)")
    verifier.reference_outputs()
    api = cuda if cuda is not None else require_cuda("auto")
    props = api.properties
    gpu = GpuInfo.of_cuda(api)
    options = replace(options, gpu=gpu, progress=say)
    dla_core, cache_dir = options.dla_core, options.cache_dir
    feed = {verifier.input_name: verifier.data.inputs[0]}
    rows: List[Candidate] = []
    results: Dict[str, Any] = {}
    notes: List[str] = []

    def run(precision: str) -> Optional[Candidate]:
        try:
            result = build_engine(bundle.root, replace(options, precision=precision))
        except (CalibrationError, BundleError) as exc:  # no INT8 data in this bundle: not a candidate
            notes.append(f"{precision} is not a candidate: {exc}")
            return None
        results[precision] = result
        notes.extend(f"{precision}: {n}" for n in result.notes)
        say(f"timing and verifying the {precision} engine")
        backend = TensorRTBackend(result.path, bundle=bundle, cuda=api, dla_core=dla_core, engine_cached=result.cached,
                                  notes=result.notes, tensorrt_version=result.tensorrt,
                                  read_engine=EngineBytesFromCache(cache_dir, result.key))
        backend.precision, backend.precision_reason = precision, "a candidate of the device choice"
        with backend:
            median = time_backend(backend, feed, warmup, iterations)
            verdict = verifier.check(backend)
        row = Candidate(precision, str(result.path), median, verdict.f1, min(o.cosine for o in verdict.outputs),
                        verdict.passed, verdict.failures)
        rows.append(row)
        return row

    for precision in CANDIDATES:
        run(precision)
    best = _fastest_passing(rows)
    if best is None and dla_core is None:
        notes.append("neither FP16 nor INT8 passes the gate on this device: FP32 verified as the fallback")
        run("fp32")
        best = _fastest_passing(rows)
    if best is None:
        table = "; ".join(f"{r.precision}: {', '.join(r.failures)}" for r in rows) or "no candidate could be built"
        raise AccuracyGateError(
            f"no engine of {bundle.root} keeps FP32's accuracy on this device ({table}). Check the bundle with "
            "`edge-sdk verify BUNDLE --backend onnxruntime` on the host, lower the gate with --min-f1, or rebuild the "
            "bundle with more FP32 fallback layers (`edge-sdk build --int8-fallback auto`)"
        )
    best.chosen = True
    key = report_key(bundle, results[best.precision].tensorrt, gpu.sm, dla_core)
    cache = EngineCache(cache_dir)
    path = cache.device_report_path(key)
    info = {
        "key": key.to_dict(),
        "path": str(path),
        "bundle": str(bundle.root),
        "gpu": gpu.to_dict(),
        "reference": verifier.reference_label,
        "images": verifier.data.images,
        "min_f1": verifier.min_f1,
        "timing": {"warmup": warmup, "iterations": iterations, "statistic": "median GPU ms (CUDA events)"},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if props.integrated:
        info["frame_memory"] = _measure_frames(api, bundle, say, notes)
    choice = DeviceChoice(best.precision, rows, path, info, notes, results[best.precision])
    atomic_write_json(path, choice.to_dict())
    return choice


def _fastest_passing(rows: List[Candidate]) -> Optional[Candidate]:
    return fastest_passing(rows, passed=lambda r: r.passed, median_ms=lambda r: r.median_ms)  # type: ignore[no-any-return]


def _measure_frames(api: Any, bundle: Bundle, say: Callable[[str], None], notes: List[str]) -> Optional[Dict[str, Any]]:
    """Mapped against pinned frame memory on this device (edge_sdk.cuda.measure), or None with a
    note when it cannot be measured here (the runtime then keeps its default). It runs after the
    builds and timings the report records: no failure of this extra measurement may lose them."""
    from edge_sdk.cuda.measure import measure_frame_memory
    from edge_sdk.errors import EdgeSdkError

    inputs = bundle.inputs
    if not inputs:
        return None
    say("timing mapped against pinned frame memory")
    try:
        return measure_frame_memory(api, inputs[0])
    except (EdgeSdkError, ArithmeticError, LookupError, MemoryError, ValueError, OSError) as exc:
        notes.append(f"frame memory not measured ({type(exc).__name__}: {exc}); the runtime keeps pinned + one copy")
        return None
