"""The whole engine build of a bundle for this machine: check that this machine can build for
the target, find the engine in the cache or else plan the build (edge_sdk.trt.plan), calibrate,
chain the loaders (edge_sdk.trt.loaders) and write the engine with its layer report
(edge_sdk.trt.report) into the cache.

    result = build_engine(bundle_dir, BuildOptions(precision="best"))   # EngineResult: path, key, plan, layers ...
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from edge_sdk import _imports
from edge_sdk.errors import BackendError, BundleError, CalibrationError, TargetError
from edge_sdk.fsutil import PathLike
from edge_sdk.manifest import VARIANT_FILES, Bundle
from edge_sdk.targets import Target, get_target
from edge_sdk.trt import log as trt_log
from edge_sdk.trt.api import TrtApi, trt_api
from edge_sdk.trt.cache import EngineCache, EngineKey
from edge_sdk.trt.calibrator import (
    CALIB_CACHE,
    CalibrationFeed,
    algorithm_from_header,
    calibration_tensors,
    make_calibrator,
)
from edge_sdk.trt.device import GpuInfo, detect_gpu
from edge_sdk.trt.loaders import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath
from edge_sdk.trt.options import BuildOptions
from edge_sdk.trt.plan import BuildPlan, plan_build
from edge_sdk.trt.profiles import batch_range
from edge_sdk.trt.progress import monitor as progress_monitor
from edge_sdk.trt.report import inspect_engine, summarize_layers

PORTABILITY = (
    "a TensorRT engine is tied to the GPU's compute capability (SM), the TensorRT version and the OS "
    "it was built with, and an x86 host cannot build one for a Jetson (NVIDIA/TensorRT #1810, #1879). "
    "The bundle carries everything the device needs: run `edge-sdk engine BUNDLE` on the device"
)


# --- targets: may this machine build the engine? ------------------------------------------------


def target_mismatch(target: Union[str, Target], gpu: GpuInfo, api: Optional[TrtApi]) -> Optional[str]:
    """Why an engine built here would not run on `target` (None when it would; TensorRT
    is compared only when `api` is given)."""
    t = get_target(target) if isinstance(target, str) else target
    if t.sm is not None and t.sm != gpu.sm:
        return f"this machine's GPU is {gpu.name} (SM {gpu.sm}), target {t.name} is SM {t.sm}"
    if api is not None and t.tensorrt is not None and api.short_version != t.tensorrt:
        return f"this machine has TensorRT {api.version}, target {t.name} runs TensorRT {t.tensorrt}"
    return None


# --- the whole build ----------------------------------------------------------------------------


@dataclass
class EngineResult:
    path: Path
    key: EngineKey
    cached: bool
    build_seconds: float
    gpu: GpuInfo
    tensorrt: str
    plan: BuildPlan
    calibration: Optional[Dict[str, Any]] = None
    constrained_layers: int = 0
    notes: List[str] = field(default_factory=list)
    layers: Optional[Dict[str, Any]] = None  # the layer report (also in `layer_report`)
    layer_report: Optional[Path] = None
    batch: Optional[Dict[str, Any]] = None  # the optimization profile, or why there is none

    def to_dict(self) -> Dict[str, Any]:
        return {
            "engine": str(self.path),
            "cached": self.cached,
            "build_seconds": round(self.build_seconds, 2),
            "key": self.key.to_dict(),
            "gpu": self.gpu.to_dict(),
            "tensorrt": self.tensorrt,
            "plan": self.plan.to_dict(),
            "calibration": self.calibration,
            "constrained_layers": self.constrained_layers,
            "notes": list(self.notes),
            "batch": self.batch,
            "layer_report": str(self.layer_report) if self.layer_report is not None else None,
            "layers": self.layers,
        }


def _calibration_source(candidates: Sequence[Path], expected_header: str) -> Optional[Path]:
    """The first cache whose header is `expected_header`; else the last one that exists (the
    feed then says why it calibrates); None when none exists."""
    existing = [p for p in candidates if p.is_file()]
    for path in existing:
        if path.read_text(errors="replace").split("\n", 1)[0].strip() == expected_header:
            return path
    return existing[-1] if existing else None


def build_engine(bundle_dir: PathLike, options: BuildOptions = BuildOptions()) -> EngineResult:
    """Compile (or find in the cache) the engine of a bundle for this machine's GPU, as `options`
    ask (BuildOptions: its defaults are `edge-sdk engine BUNDLE`'s).

    With `options.target` and `options.require`, a target whose GPU or TensorRT differs from this
    machine's is a TargetError (engines are not portable) instead of a wrong engine. The batch
    range (default: `batch_range()`, from the bundle's recorded range, else the ROI settings) is written as an optimization profile
    when the model's batch is dynamic. Calibration batch buffers are made by `options.allocate`
    (default: the SDK's CUDA layer, opened in the primary context before the build starts).
    """
    precision, dla_core, gpu, target = options.precision, options.dla_core, options.gpu, options.target
    say = options.progress or (lambda _msg: None)
    if gpu is None:
        gpu = detect_gpu()
    wanted = (get_target(target) if isinstance(target, str) else target) if options.require else None
    if wanted is not None:
        # Checked before TensorRT is imported: a host without TensorRT asked for a Jetson's
        # engine needs to hear why that cannot work, not how to install TensorRT.
        if gpu is None:
            raise TargetError(f"cannot build the engine here: this machine has no NVIDIA GPU, target {wanted.name} needs one. {PORTABILITY}")
        if wanted.sm is not None and wanted.sm != gpu.sm:
            raise TargetError(f"cannot build the engine here: {target_mismatch(wanted, gpu, None)}. {PORTABILITY}")
    trt = _imports.tensorrt()
    api = trt_api(trt)
    bundle = Bundle.load(bundle_dir)
    if gpu is None:
        raise BackendError("no NVIDIA GPU found (cuda-python, pycuda, nvidia-smi and the Jetson device tree were asked); run this on the device")
    if wanted is not None:
        reason = target_mismatch(wanted, gpu, api)
        if reason:
            raise TargetError(f"cannot build the engine here: {reason}. {PORTABILITY}")
    plan = plan_build(bundle, api, precision, dla_core)
    batch = options.batch if options.batch is not None else batch_range(dla=dla_core is not None, recorded=bundle.get("batch"))
    made_for = (bundle.get("target") or {}).get("sm")
    if made_for and made_for != gpu.sm:
        plan.notes.append(f"the bundle was made for SM {made_for}; building for this GPU (SM {gpu.sm})")
    key = EngineKey(bundle.hash, api.version, gpu.sm, precision, dla_core)
    cache = EngineCache(options.cache_dir)
    cache.check()  # an untrusted folder is refused before anything in it is read or written
    notes = list(plan.notes)
    if options.recalibrate and not plan.calibrate:
        notes.append(f"--recalibrate has no effect here: the {precision} engine on TensorRT {api.version} uses no calibrator")
    if not (options.force or options.recalibrate):
        hit, why = cache.inspect(key)
        if hit is not None:
            info = cache.info(key)
            built_for = info.get("batch_profile")
            if built_for is None or built_for == batch.to_dict():
                report = cache.read_report(key)
                return EngineResult(hit, key, True, 0.0, gpu, api.version, plan, notes=notes, layers=report,
                                    layer_report=cache.report_path(key) if report is not None else None,
                                    batch=info.get("batch"))
            why = f"{hit.name} was built for batch {built_for}, {batch.to_dict()} is asked; rebuilding"
        if why != "not cached":
            notes.append(why)
    workspace = options.workspace_mib
    if options.workspace_limit is not None:  # a build is due: bounded by the memory free now
        bound = options.workspace_limit()
        if bound is not None and (workspace is None or bound < workspace):
            workspace = bound
            notes.append(f"builder workspace limited to {bound} MiB: what free memory leaves beside the running model")

    feed: Optional[CalibrationFeed] = None
    calibrator = None
    if plan.calibrate:
        algorithm = _calibration_algorithm(bundle)
        shipped_ok = True
        if dla_core is not None and algorithm != "entropy":
            # The DLA takes INT8 scales from the Entropy2 calibrator only (IInt8EntropyCalibrator2).
            if not calibration_tensors(bundle.root):
                raise CalibrationError(
                    f"the DLA needs INT8 scales from TensorRT's Entropy2 calibrator, and this bundle was calibrated with "
                    f"{algorithm} and ships no calib/ tensors to calibrate again from: rebuild it with "
                    "`edge-sdk build --calib-method entropy`, or leave --dla-core out to run on the GPU"
                )
            notes.append(
                f"the DLA needs Entropy2 calibration: the bundle's {algorithm} scales are not used; calibrating on the device "
                "with IInt8EntropyCalibrator2 on the bundle's calib/ tensors"
            )
            algorithm, shipped_ok = "entropy", False
        device_cache = cache.calib_cache_path(bundle.hash, api.version, gpu.sm)
        inputs = bundle.inputs
        if len(inputs) != 1:
            raise BundleError(f"INT8 calibration supports single-input models; the manifest lists {len(inputs)} inputs")
        feed = CalibrationFeed(
            calibration_tensors(bundle.root),
            inputs[0].name,
            inputs[0].shape,
            algorithm,
            api.version,
            cache_out=device_cache,
            allocate=options.allocate,
        )
        if not options.recalibrate:
            candidates = [device_cache] + ([bundle.root / CALIB_CACHE] if shipped_ok else [])
            feed.cache_in = _calibration_source(candidates, feed.expected_header)
        feed.check()
        feed.prepare()  # CUDA (primary context) and the batch buffer, before TensorRT starts
        calibrator = make_calibrator(trt, feed)

    network = NetworkFromOnnxPath(bundle.model_path(plan.variant), strongly_typed=plan.strongly_typed)
    config = CreateConfig(
        fp16=plan.fp16,
        int8=plan.int8,
        calibrator=calibrator,
        dla_core=dla_core,
        workspace_mib=workspace,
        load_timing_cache=options.timing_cache,
        pins=plan.pins,
        known_nodes=plan.known_nodes,
        batch=batch,
        input_shapes={spec.name: list(spec.shape) for spec in bundle.inputs},
        monitor=progress_monitor(trt, options.progress),
    )
    say(f"building the {precision} engine from {VARIANT_FILES[plan.variant]} (TensorRT {api.version}, {gpu.name}); this can take minutes")
    started = time.perf_counter()
    engine_bytes = EngineBytesFromNetwork(network, config, save_timing_cache=options.timing_cache)
    try:
        data = engine_bytes()
    except BackendError:
        if feed is not None and feed.error is not None:
            raise feed.error  # the calibrator's own error says more than "the build failed"
        raise
    finally:
        if feed is not None:
            feed.close()
    if feed is not None and feed.error is not None:
        raise feed.error  # TensorRT built from the batches it got before the error: not an engine to keep
    seconds = time.perf_counter() - started
    notes += config.notes
    calibration = None
    if feed is not None:
        notes += feed.notes
        calibration = {
            "algorithm": feed.algorithm,
            "calibrator": feed.class_name,
            "cache_read": feed.cache_read,
            "cache_written": feed.cache_written,
            "batches": feed.batches_fed,
        }
    say("reading the engine's layers")
    with trt_log.listen() as inspected:
        layers, why = inspect_engine(trt, data, dla_core) if config.detailed else (None, "no engine inspector in this TensorRT")
    warnings = [m for sev, m in (engine_bytes.log.messages if engine_bytes.log else []) + inspected.messages
                if sev == "WARNING"]
    report = summarize_layers(layers, why, warnings, dla_core is not None, config.pinning.pinned, dla_core)
    report["pinned"]["skipped"] = dict(config.pinning.skipped)
    batch_info: Dict[str, Any] = (
        {"profile": config.profile, "range": batch.to_dict()} if config.profile is not None
        else {"profile": None, "fixed": True}
    )
    info = {"gpu": gpu.to_dict(), "plan": plan.to_dict(), "build_seconds": round(seconds, 2), "bundle": str(bundle.root),
            "batch": batch_info, "batch_profile": batch.to_dict() if config.profile is not None else None}
    path = cache.put(key, data, info, report=report)
    return EngineResult(
        path, key, False, seconds, gpu, api.version, plan, calibration, len(config.constrained_layers), notes,
        layers=report, layer_report=cache.report_path(key), batch=batch_info,
    )


def _calibration_algorithm(bundle: Bundle) -> str:
    algorithm = (bundle.get("calibration") or {}).get("algorithm")
    if algorithm:
        return str(algorithm)
    cache = bundle.root / CALIB_CACHE
    if cache.is_file():
        found = algorithm_from_header(cache.read_text(errors="replace").split("\n", 1)[0])
        if found:
            return found
    return "entropy"


def device_builds_message(bundle_dir: PathLike, reason: str) -> str:
    return (
        f"{reason}: the device compiles the engine on first start: run `edge-sdk engine {bundle_dir}` there "
        "(engines are tied to GPU SM, TensorRT version and OS)"
    )


def maybe_build_engine(
    bundle_dir: PathLike,
    target: Union[str, Target],
    precision: str = "best",
    dla_core: Optional[int] = None,
    workspace_mib: Optional[int] = None,
    timing_cache: Optional[PathLike] = None,
    cache_dir: Optional[PathLike] = None,
) -> Tuple[Optional[Path], str]:
    """What `edge-sdk build` calls last: build the engine when this machine *is* the target.

    Returns (engine path, message), or (None, message saying the device builds it) when
    TensorRT is missing here, there is no GPU, or the GPU / TensorRT differ from the target's.
    """
    if not _imports.available("tensorrt"):
        return None, device_builds_message(bundle_dir, "TensorRT is not installed on this machine")
    api = trt_api(_imports.tensorrt())
    gpu = detect_gpu()
    if gpu is None:
        return None, device_builds_message(bundle_dir, "no NVIDIA GPU on this machine")
    reason = target_mismatch(target, gpu, api)
    if reason:
        return None, device_builds_message(bundle_dir, reason)
    result = build_engine(bundle_dir, BuildOptions(precision=precision, dla_core=dla_core, workspace_mib=workspace_mib,
                                                   timing_cache=timing_cache, cache_dir=cache_dir, gpu=gpu))
    verb = "found in the cache" if result.cached else f"built in {result.build_seconds:.1f} s"
    return result.path, f"TensorRT engine for {gpu.name} (SM {gpu.sm}, TensorRT {api.version}) {verb}: {result.path}"
