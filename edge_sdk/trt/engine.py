"""TensorRT engine loaders: small callables chained the way Polygraphy chains them.

    NetworkFromOnnxPath(path) -> CreateConfig(...) -> EngineBytesFromNetwork(...) -> SaveEngine(...)

`tensorrt` is imported lazily, inside the callables. The code speaks two API generations:

* TensorRT 8.x (JetPack 5.1 ships 8.5.2): networks need the EXPLICIT_BATCH creation flag;
  FP16 and INT8 are builder flags; INT8 is *implicit*: a calibrator
  (IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator) hands TensorRT the shipped calibration
  cache, or calibrates on the shipped tensors; layers the builder kept in FP32 become layer
  precision constraints (with OBEY_PRECISION_CONSTRAINTS).
* TensorRT >= 10: every network is explicit batch (the flag is deprecated), implicit INT8
  calibration is deprecated (10.1) and removed in 11, so INT8 comes from the bundle's Q/DQ
  model (`model.int8.qdq.onnx`, already FP32 where the builder kept layers in FP32). Where the
  FP16/INT8 builder flags are gone too (11), the network is strongly typed and the precision
  comes from the model itself (`model.fp16.onnx`, the Q/DQ model).

Which generation is present is read from `tensorrt.__version__` and from the attributes the
module has. The tests run this code against fakes in tests/fakes/ that enforce those API
differences: they prove this module's logic, not TensorRT's behaviour.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from edge_sdk import _imports
from edge_sdk.errors import BackendError, BundleError, CalibrationError, ConfigError, ModelError, TargetError
from edge_sdk.fsutil import PathLike, atomic_write_bytes
from edge_sdk.manifest import VARIANT_FILES, Bundle
from edge_sdk.precision import BUILD_PRECISIONS
from edge_sdk.targets import Target, get_target
from edge_sdk.trt.cache import EngineCache, EngineKey
from edge_sdk.trt.calibrator import (
    CALIB_CACHE,
    CalibrationFeed,
    DeviceBuffer,
    algorithm_from_header,
    calibration_tensors,
    make_calibrator,
)
from edge_sdk.trt.device import GpuInfo, detect_gpu

PORTABILITY = (
    "a TensorRT engine is tied to the GPU's compute capability (SM), the TensorRT version and the OS "
    "it was built with, and an x86 host cannot build one for a Jetson (NVIDIA/TensorRT #1810, #1879). "
    "The bundle carries everything the device needs: run `edge-sdk engine BUNDLE` on the device"
)


# --- what the installed TensorRT can do -----------------------------------------------------


@dataclass(frozen=True)
class TrtApi:
    version: str  # tensorrt.__version__, e.g. "8.5.2.2"
    major: int
    weak_flags: bool  # BuilderFlag.FP16 / INT8 exist
    implicit_int8: bool  # calibrator-based INT8 is available (8.x)
    strongly_typed: bool  # NetworkDefinitionCreationFlag.STRONGLY_TYPED exists

    @property
    def explicit_batch_flag(self) -> bool:
        """8.x must ask for an explicit-batch network; >= 10 networks always are."""
        return self.major < 10

    @property
    def short_version(self) -> str:
        return ".".join(self.version.split(".")[:3])


def trt_api(trt: Any) -> TrtApi:
    version = str(getattr(trt, "__version__", ""))
    m = re.match(r"(\d+)\.", version)
    if not m:
        raise BackendError(f"cannot read the TensorRT version ({version!r}); reinstall TensorRT (python3-libnvinfer)")
    major = int(m.group(1))
    flags = trt.BuilderFlag
    weak = hasattr(flags, "FP16") and hasattr(flags, "INT8")
    return TrtApi(
        version=version,
        major=major,
        weak_flags=weak,
        implicit_int8=major < 10 and weak and hasattr(trt, "IInt8EntropyCalibrator2"),
        strongly_typed=hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"),
    )


# --- TensorRT's log, kept for error messages --------------------------------------------------


def make_logger(trt: Any) -> Any:
    """A `trt.ILogger` that keeps warnings and errors (shown when a parse or build fails)."""

    class CollectingLogger(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: List[Tuple[str, str]] = []

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.Severity.WARNING):
                self.messages.append((getattr(severity, "name", str(severity)), str(msg)))

    return CollectingLogger()


def _log_tail(logger: Any, n: int = 8) -> str:
    lines = [f"{s}: {m}" for s, m in getattr(logger, "messages", [])][-n:]
    return ("\nTensorRT log:\n  " + "\n  ".join(lines)) if lines else ""


# --- loaders -----------------------------------------------------------------------------------


class NetworkFromOnnxPath:
    """`()` -> (builder, network, parser): the ONNX file parsed into a TensorRT network."""

    def __init__(self, path: PathLike, strongly_typed: bool = False, logger: Any = None) -> None:
        self.path = Path(path)
        self.strongly_typed = strongly_typed
        self.logger = logger

    def __call__(self) -> Tuple[Any, Any, Any]:
        trt = _imports.tensorrt()
        api = trt_api(trt)
        if self.logger is None:
            self.logger = make_logger(trt)
        if not self.path.is_file():
            raise ModelError(f"{self.path} does not exist; copy the whole bundle folder again")
        builder = trt.Builder(self.logger)
        flags = 0
        if api.explicit_batch_flag:
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        if self.strongly_typed:
            if not api.strongly_typed:
                raise BackendError(f"TensorRT {api.version} cannot build strongly typed networks; update TensorRT")
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if hasattr(parser, "parse_from_file"):  # resolves external weights next to the file
            ok = parser.parse_from_file(str(self.path))
        else:
            ok = parser.parse(self.path.read_bytes())
        if not ok:
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise ModelError(
                f"TensorRT {api.version} cannot parse {self.path.name}: "
                + "; ".join(errors or ["no parser error reported"])
                + ". Rebuild the bundle, or check the model's operators against the TensorRT ONNX parser"
                + _log_tail(self.logger)
            )
        return builder, network, parser


def layer_nodes(layer_names: Iterable[str], node_names: Set[str]) -> Dict[str, str]:
    """TensorRT layer name -> ONNX node name, for layers that come from a known node.

    TensorRT's ONNX parser names a layer after its node and makes further layers of the same
    node unique with `_<counter>` (`conv1`, `conv1_7`). An exact node name wins, so a node
    `conv_1` is never mistaken for a second layer of node `conv`.
    """
    out: Dict[str, str] = {}
    for name in layer_names:
        if name in node_names:
            out[name] = name
            continue
        m = re.match(r"^(.+)_\d+$", name)
        if m and m.group(1) in node_names:
            out[name] = m.group(1)
    return out


def constrain_layers(trt: Any, network: Any, fp32_nodes: Set[str], known_nodes: Set[str]) -> Tuple[List[str], List[str]]:
    """Pin the layers of `fp32_nodes` to FP32 (precision and output types).

    Returns (constrained TensorRT layers, fp32 nodes with no layer found).
    """
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    mapping = layer_nodes([layer.name for layer in layers], known_nodes | fp32_nodes)
    float_types = {trt.float32, trt.float16}
    constrained: List[str] = []
    seen: Set[str] = set()
    for layer in layers:
        node = mapping.get(layer.name)
        if node is None or node not in fp32_nodes:
            continue
        layer.precision = trt.float32
        for i in range(layer.num_outputs):
            if layer.get_output(i).dtype in float_types:
                layer.set_output_type(i, trt.float32)
        constrained.append(layer.name)
        seen.add(node)
    return constrained, sorted(fp32_nodes - seen)


class CreateConfig:
    """`(builder, network)` -> IBuilderConfig, like Polygraphy's CreateConfig.

    fp16 / int8: builder flags (TensorRT < 11). calibrator: implicit INT8 (8.x). dla_core: run on
    that DLA with GPU fallback. workspace_mib: the workspace memory pool limit. load_timing_cache:
    a timing cache file to start from (missing file: start empty). fp32_nodes: ONNX nodes whose
    layers are pinned to FP32 (`known_nodes`: every node the builder listed, to map layer names).
    """

    def __init__(
        self,
        fp16: bool = False,
        int8: bool = False,
        calibrator: Any = None,
        dla_core: Optional[int] = None,
        workspace_mib: Optional[int] = None,
        load_timing_cache: Optional[PathLike] = None,
        fp32_nodes: Sequence[str] = (),
        known_nodes: Sequence[str] = (),
    ) -> None:
        self.fp16 = fp16
        self.int8 = int8
        self.calibrator = calibrator
        self.dla_core = dla_core
        self.workspace_mib = workspace_mib
        self.load_timing_cache = Path(load_timing_cache) if load_timing_cache is not None else None
        self.fp32_nodes = set(fp32_nodes)
        self.known_nodes = set(known_nodes)
        self.constrained_layers: List[str] = []
        self.notes: List[str] = []

    def __call__(self, builder: Any, network: Any) -> Any:
        trt = _imports.tensorrt()
        api = trt_api(trt)
        config = builder.create_builder_config()
        if self.workspace_mib is not None:
            if self.workspace_mib <= 0:
                raise ConfigError(f"--workspace must be a positive number of MiB, got {self.workspace_mib}")
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(self.workspace_mib) << 20)
        for wanted, flag in ((self.fp16, "FP16"), (self.int8, "INT8")):
            if wanted:
                if not hasattr(trt.BuilderFlag, flag):
                    raise BackendError(f"TensorRT {api.version} has no BuilderFlag.{flag}; build from the bundle's typed model instead")
                config.set_flag(getattr(trt.BuilderFlag, flag))
        if self.int8 and api.major < 10 and not builder.platform_has_fast_int8:  # deprecated in 10
            self.notes.append("this GPU has no fast INT8: TensorRT may pick FP32/FP16 kernels")
        if self.calibrator is not None:
            config.int8_calibrator = self.calibrator
        if self.fp32_nodes:
            self.constrained_layers, missing = constrain_layers(trt, network, self.fp32_nodes, self.known_nodes)
            if self.constrained_layers:
                config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
            if missing:
                self.notes.append(
                    f"{len(missing)} FP32 fallback node(s) have no TensorRT layer of that name (fused or constant): "
                    + ", ".join(missing[:8])
                )
        if self.dla_core is not None:
            available = int(builder.num_DLA_cores)
            if not 0 <= self.dla_core < available:
                raise TargetError(
                    f"--dla-core {self.dla_core} does not exist: this device has {available} DLA core(s)"
                    + (f" (0..{available - 1})" if available else "; leave --dla-core out to run on the GPU")
                )
            config.default_device_type = trt.DeviceType.DLA
            config.DLA_core = int(self.dla_core)
            config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
        if self.load_timing_cache is not None:
            data = self.load_timing_cache.read_bytes() if self.load_timing_cache.is_file() else b""
            cache = config.create_timing_cache(data)
            if cache is None or not config.set_timing_cache(cache, ignore_mismatch=False):
                self.notes.append(f"timing cache {self.load_timing_cache} is from another device or TensorRT; starting a new one")
                config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
        return config


class EngineBytesFromNetwork:
    """`()` -> serialized engine bytes. Saves the timing cache afterwards when asked."""

    def __init__(
        self,
        network_loader: Callable[[], Tuple[Any, Any, Any]],
        config_loader: Callable[[Any, Any], Any],
        save_timing_cache: Optional[PathLike] = None,
    ) -> None:
        self.network_loader = network_loader
        self.config_loader = config_loader
        self.save_timing_cache = Path(save_timing_cache) if save_timing_cache is not None else None

    def __call__(self) -> bytes:
        builder, network, _parser = self.network_loader()
        config = self.config_loader(builder, network)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            logger = getattr(self.network_loader, "logger", None)
            raise BackendError(
                "TensorRT could not build the engine (build_serialized_network returned nothing). "
                "Try a larger --workspace, another --precision, or leave --dla-core out" + _log_tail(logger)
            )
        if self.save_timing_cache is not None:
            atomic_write_bytes(self.save_timing_cache, bytes(config.get_timing_cache().serialize()))
        return bytes(serialized)


class SaveEngine:
    """`()` -> path: write the engine bytes (or the bytes its loader returns) atomically."""

    def __init__(self, engine: Union[bytes, Callable[[], bytes]], path: PathLike) -> None:
        self.engine = engine
        self.path = Path(path)

    def __call__(self) -> Path:
        data = self.engine() if callable(self.engine) else self.engine
        atomic_write_bytes(self.path, data)
        return self.path


# --- from a bundle to a plan ----------------------------------------------------------------


@dataclass
class BuildPlan:
    """What to build for a requested precision on the installed TensorRT."""

    precision: str
    variant: str  # which bundle model: fp32 | fp16 | int8 (see manifest.VARIANT_FILES)
    fp16: bool = False
    int8: bool = False
    strongly_typed: bool = False
    calibrate: bool = False  # implicit INT8 through a calibrator (8.x)
    fp32_nodes: List[str] = field(default_factory=list)
    known_nodes: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "precision": self.precision,
            "model": VARIANT_FILES[self.variant],
            "fp16": self.fp16,
            "int8": self.int8,
            "strongly_typed": self.strongly_typed,
            "int8_mode": "calibration" if self.calibrate else ("qdq" if self.variant == "int8" else None),
            "fp32_layers": len(self.fp32_nodes) if self.calibrate else 0,
        }


def _int8_section(manifest: Dict[str, Any]) -> Tuple[List[str], Dict[str, str]]:
    section = manifest.get("int8") or {}
    fp32 = list(section.get("fp32_layers", manifest.get("fp32_layers", [])) or [])
    precisions = dict(section.get("layer_precisions", manifest.get("layer_precisions", {})) or {})
    return fp32, precisions


def plan_build(bundle: Bundle, api: TrtApi, precision: str, dla_core: Optional[int] = None) -> BuildPlan:
    if precision not in BUILD_PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(BUILD_PRECISIONS)}, got {precision!r}")
    if dla_core is not None and precision == "fp32":
        raise ConfigError("the DLA runs FP16 and INT8 only: use --precision fp16, int8 or best with --dla-core")
    wants_int8 = precision in ("int8", "best")
    wants_fp16 = precision in ("fp16", "best")
    if api.implicit_int8:
        plan = BuildPlan(precision, "fp32", fp16=wants_fp16, int8=wants_int8)
        if wants_int8:
            has_calib = (bundle.root / CALIB_CACHE).is_file() or bool(calibration_tensors(bundle.root))
            if has_calib:
                plan.calibrate = True
                fp32, precisions = _int8_section(bundle.manifest)
                plan.fp32_nodes = sorted(set(fp32) | {n for n, p in precisions.items() if p == "fp32"})
                plan.known_nodes = sorted(set(precisions) | set(plan.fp32_nodes))
            elif (bundle.root / VARIANT_FILES["int8"]).is_file():
                plan.variant = "int8"
                plan.notes.append("no calibration data in the bundle: INT8 from the Q/DQ model")
            else:
                raise CalibrationError(
                    f"bundle {bundle.root} has neither {CALIB_CACHE}, calib/*.npy nor {VARIANT_FILES['int8']}: "
                    "rebuild it with `edge-sdk build --precision int8` (or use --precision fp16)"
                )
    elif api.weak_flags:
        plan = BuildPlan(precision, "int8" if wants_int8 else "fp32", fp16=wants_fp16, int8=wants_int8)
    else:
        # Strongly typed only: the model's own types decide.
        variant = "int8" if wants_int8 else ("fp16" if wants_fp16 else "fp32")
        plan = BuildPlan(precision, variant, strongly_typed=True)
        if precision == "best":
            plan.notes.append(
                f"TensorRT {api.version} follows the model's types: 'best' is the Q/DQ model, FP32 outside the quantized layers"
            )
    bundle.model_path(plan.variant)  # BundleError naming the missing variant
    return plan


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
        }


def build_engine(
    bundle_dir: PathLike,
    precision: str = "best",
    dla_core: Optional[int] = None,
    workspace_mib: Optional[int] = None,
    timing_cache: Optional[PathLike] = None,
    cache_dir: Optional[PathLike] = None,
    recalibrate: bool = False,
    force: bool = False,
    target: Union[None, str, Target] = None,
    require: bool = False,
    gpu: Optional[GpuInfo] = None,
    allocate: Optional[Callable[[int], DeviceBuffer]] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> EngineResult:
    """Compile (or find in the cache) the engine of a bundle for this machine's GPU.

    With `target` and `require=True`, a target whose GPU or TensorRT differs from this
    machine's is a TargetError (engines are not portable) instead of a wrong engine.
    """
    say = progress or (lambda _msg: None)
    if gpu is None:
        gpu = detect_gpu()
    wanted = (get_target(target) if isinstance(target, str) else target) if require else None
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
    made_for = (bundle.get("target") or {}).get("sm")
    if made_for and made_for != gpu.sm:
        plan.notes.append(f"the bundle was made for SM {made_for}; building for this GPU (SM {gpu.sm})")
    key = EngineKey(bundle.hash, api.version, gpu.sm, precision, dla_core)
    cache = EngineCache(cache_dir)
    notes = list(plan.notes)
    if recalibrate and not plan.calibrate:
        notes.append(f"--recalibrate has no effect here: the {precision} engine on TensorRT {api.version} uses no calibrator")
    if not (force or recalibrate):
        hit, why = cache.inspect(key)
        if hit is not None:
            return EngineResult(hit, key, True, 0.0, gpu, api.version, plan, notes=notes)
        if why != "not cached":
            notes.append(why)

    feed: Optional[CalibrationFeed] = None
    calibrator = None
    if plan.calibrate:
        device_cache = cache.calib_cache_path(bundle.hash, api.version, gpu.sm)
        if recalibrate:
            cache_in = None
        elif device_cache.is_file():
            cache_in = device_cache
        else:
            cache_in = bundle.root / CALIB_CACHE
        inputs = bundle.inputs
        if len(inputs) != 1:
            raise BundleError(f"INT8 calibration supports single-input models; the manifest lists {len(inputs)} inputs")
        feed = CalibrationFeed(
            calibration_tensors(bundle.root),
            inputs[0].name,
            inputs[0].shape,
            _calibration_algorithm(bundle),
            api.version,
            cache_in=cache_in,
            cache_out=device_cache,
            allocate=allocate,
        )
        feed.check()
        calibrator = make_calibrator(trt, feed)

    network = NetworkFromOnnxPath(bundle.model_path(plan.variant), strongly_typed=plan.strongly_typed)
    config = CreateConfig(
        fp16=plan.fp16,
        int8=plan.int8,
        calibrator=calibrator,
        dla_core=dla_core,
        workspace_mib=workspace_mib,
        load_timing_cache=timing_cache,
        fp32_nodes=plan.fp32_nodes if plan.calibrate else (),
        known_nodes=plan.known_nodes,
    )
    say(f"building the {precision} engine from {VARIANT_FILES[plan.variant]} (TensorRT {api.version}, {gpu.name}); this can take minutes")
    started = time.perf_counter()
    try:
        data = EngineBytesFromNetwork(network, config, save_timing_cache=timing_cache)()
    except BackendError:
        if feed is not None and feed.error is not None:
            raise feed.error  # the calibrator's own error says more than "the build failed"
        raise
    finally:
        if feed is not None:
            feed.close()
    if feed is not None and feed.error is not None:
        raise feed.error
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
    info = {"gpu": gpu.to_dict(), "plan": plan.to_dict(), "build_seconds": round(seconds, 2), "bundle": str(bundle.root)}
    path = cache.put(key, data, info)
    return EngineResult(
        path, key, False, seconds, gpu, api.version, plan, calibration, len(config.constrained_layers), notes
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
    result = build_engine(
        bundle_dir,
        precision=precision,
        dla_core=dla_core,
        workspace_mib=workspace_mib,
        timing_cache=timing_cache,
        cache_dir=cache_dir,
        gpu=gpu,
    )
    verb = "found in the cache" if result.cached else f"built in {result.build_seconds:.1f} s"
    return result.path, f"TensorRT engine for {gpu.name} (SM {gpu.sm}, TensorRT {api.version}) {verb}: {result.path}"
