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

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

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
from edge_sdk.trt import log as trt_log
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
    strongly_typed: bool  # strongly typed networks can be built (flag on 10, always on >= 11)
    strongly_typed_flag: bool = False  # NetworkDefinitionCreationFlag.STRONGLY_TYPED must be set to get one
    prefer_constraints: bool = False  # BuilderFlag.PREFER_PRECISION_CONSTRAINTS exists (< 11)

    @property
    def explicit_batch_flag(self) -> bool:
        """8.x must ask for an explicit-batch network; >= 10 networks always are."""
        return self.major < 10

    @property
    def always_strongly_typed(self) -> bool:
        """TensorRT 11: every network is strongly typed; STRONGLY_TYPED is deprecated and ignored."""
        return self.major >= 11

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
    has_flag = hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    return TrtApi(
        version=version,
        major=major,
        weak_flags=weak,
        implicit_int8=major < 10 and weak and hasattr(trt, "IInt8EntropyCalibrator2"),
        strongly_typed=major >= 11 or has_flag,
        strongly_typed_flag=major < 11 and has_flag,
        prefer_constraints=hasattr(flags, "PREFER_PRECISION_CONSTRAINTS"),
    )


# --- TensorRT's log, kept for error messages --------------------------------------------------
# One logger per process (edge_sdk.trt.log): each build listens for the scope of its work.


def _log_tail(listener: Any, n: int = 8) -> str:
    lines = [f"{s}: {m}" for s, m in getattr(listener, "messages", [])][-n:]
    return ("\nTensorRT log:\n  " + "\n  ".join(lines)) if lines else ""


# --- loaders -----------------------------------------------------------------------------------


class NetworkFromOnnxPath:
    """`()` -> (builder, network, parser): the ONNX file parsed into a TensorRT network. The
    builder and the parser log to the process's one logger (edge_sdk.trt.log)."""

    def __init__(self, path: PathLike, strongly_typed: bool = False) -> None:
        self.path = Path(path)
        self.strongly_typed = strongly_typed

    def __call__(self) -> Tuple[Any, Any, Any]:
        trt = _imports.tensorrt()
        with trt_log.listen() as tail:
            return self._parse(trt, tail)

    def _parse(self, trt: Any, tail: trt_log.Listener) -> Tuple[Any, Any, Any]:
        api = trt_api(trt)
        logger = trt_log.process_logger(trt)
        if not self.path.is_file():
            raise ModelError(f"{self.path} does not exist; copy the whole bundle folder again")
        builder = trt.Builder(logger)
        flags = 0
        if api.explicit_batch_flag:
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        if self.strongly_typed and not api.always_strongly_typed:
            if not api.strongly_typed_flag:
                raise BackendError(f"TensorRT {api.version} cannot build strongly typed networks; update TensorRT")
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
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
                + _log_tail(tail)
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


PIN_PRECISIONS = ("fp32", "fp16")


@dataclass
class Pinning:
    """What `constrain_layers` did. `pinned`: TensorRT layer -> "fp32" | "fp16"; `skipped`:
    layer -> why it took no constraint; `missing`: pinned nodes with no layer of that name."""

    pinned: Dict[str, str] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    missing: List[str] = field(default_factory=list)


def unpinnable(trt: Any, layer: Any) -> Optional[str]:
    """Why `layer` must not get a precision constraint, or None.

    The same layers Polygraphy's precision debugging leaves alone (NVIDIA/TensorRT
    `tools/Polygraphy/polygraphy/tools/debug/subtool/precision.py`): CONSTANT and SHAPE layers,
    and layers with an output that is a shape tensor (not an execution tensor) or not a float
    or INT8 activation. Constraining them fails the build or changes nothing.
    """
    kinds = getattr(trt, "LayerType", None)
    ltype = getattr(layer, "type", None)
    for kind in ("CONSTANT", "SHAPE"):
        if kinds is not None and hasattr(kinds, kind) and ltype == getattr(kinds, kind):
            return f"a {kind.lower()} layer"
    activations = {trt.float32, trt.float16, getattr(trt, "int8", trt.float32)}
    for i in range(layer.num_outputs):
        out = layer.get_output(i)
        if out is None:
            continue
        if getattr(out, "is_shape_tensor", False) or not getattr(out, "is_execution_tensor", True):
            return f"output {out.name} is a shape tensor"
        if out.dtype not in activations:
            return f"output {out.name} is {getattr(out.dtype, 'name', out.dtype)}, not a float activation"
    return None


def constrain_layers(trt: Any, network: Any, pins: Mapping[str, str], known_nodes: Set[str]) -> Pinning:
    """Pin the layers of each node in `pins` ({ONNX node: "fp32" | "fp16"}) to that precision
    (layer precision and float output types), skipping layers that cannot take a constraint
    (`unpinnable`)."""
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    mapping = layer_nodes([layer.name for layer in layers], set(known_nodes) | set(pins))
    dtypes = {"fp32": trt.float32, "fp16": trt.float16}
    float_types = {trt.float32, trt.float16}
    result = Pinning()
    seen: Set[str] = set()
    for layer in layers:
        node = mapping.get(layer.name)
        if node is None or node not in pins:
            continue
        seen.add(node)
        why = unpinnable(trt, layer)
        if why:
            result.skipped[layer.name] = why
            continue
        dtype = dtypes[pins[node]]
        layer.precision = dtype
        for i in range(layer.num_outputs):
            if layer.get_output(i).dtype in float_types:
                layer.set_output_type(i, dtype)
        result.pinned[layer.name] = pins[node]
    result.missing = sorted(set(pins) - seen)
    return result


@dataclass(frozen=True)
class BatchRange:
    """The batch dimension of the optimization profile written into the engine: ROI crops run
    up to `max` at a time; TensorRT picks its kernels for `opt`."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        values = (self.min, self.opt, self.max)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values) or not 1 <= self.min <= self.opt <= self.max:
            raise ConfigError(
                f"the engine's batch range must satisfy 1 <= min <= opt <= max, got min {self.min}, opt {self.opt}, "
                f"max {self.max}: check --opt-batch / --max-batch (or roi.max_fine_inputs)"
            )

    @property
    def static(self) -> bool:
        return self.min == self.opt == self.max

    def to_dict(self) -> Dict[str, int]:
        return {"min": self.min, "opt": self.opt, "max": self.max}


def batch_range(max_batch: Optional[int] = None, opt_batch: Optional[int] = None, dla: bool = False) -> BatchRange:
    """min 1; max from `max_batch`, else the ROI settings' `max_fine_inputs` (fine-pass model
    inputs per frame); opt from `opt_batch`, else max (the fullest fine pass is the one that
    bounds a frame's latency). On the DLA (`dla`) the engine runs exactly `opt` inputs at a time
    (static shapes only), so opt defaults to 1 there: the default mode, full, runs one frame."""
    if max_batch is None:
        from edge_sdk.roi.config import RoiConfig

        max_batch = max(1, RoiConfig().max_fine_inputs)
    if opt_batch is None:
        opt_batch = 1 if dla else max_batch
    return BatchRange(1, opt_batch, max_batch)


def add_batch_profile(
    trt: Any, builder: Any, network: Any, config: Any, batch: BatchRange, input_shapes: Mapping[str, Sequence[int]]
) -> Tuple[Optional[Dict[str, List[List[int]]]], Any, str]:
    """Write an optimization profile on the batch dimension when the network's batch is dynamic.

    Returns ({input: [min, opt, max]} or None, the profile or None, a note). Other dynamic dims
    take the manifest's value; an input with no manifest shape and a dynamic dim other than the
    batch is a ModelError.
    """
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    dynamic = [t for t in inputs if any(int(d) < 0 for d in t.shape)]
    if not dynamic:
        fixed = ", ".join(f"{t.name} {list(t.shape)}" for t in inputs)
        return None, None, f"the model's batch is fixed ({fixed}): built without an optimization profile"
    profile = builder.create_optimization_profile()
    shapes: Dict[str, List[List[int]]] = {}
    for t in inputs:
        dims = [int(d) for d in t.shape]
        known = list(input_shapes.get(t.name) or [])
        rest = []
        for k, d in enumerate(dims[1:], start=1):
            if d >= 0:
                rest.append(d)
            elif k < len(known) and int(known[k]) > 0:
                rest.append(int(known[k]))
            else:
                raise ModelError(
                    f"input {t.name} has dynamic dimension {k} ({dims}) and the manifest gives no size for it; "
                    "rebuild the bundle with a fixed input size"
                )
        if dims and dims[0] < 0:
            low, mid, high = ([b] + rest for b in (batch.min, batch.opt, batch.max))
        else:
            low = mid = high = dims[:1] + rest
        try:
            profile.set_shape(t.name, low, mid, high)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise BackendError(f"TensorRT refused the optimization profile of {t.name} ({low}, {mid}, {high}): {exc}") from exc
        shapes[t.name] = [low, mid, high]
    if config.add_optimization_profile(profile) < 0:
        raise BackendError(f"TensorRT refused the optimization profile {shapes}")
    names = ", ".join(t.name for t in dynamic)
    return shapes, profile, f"dynamic batch on {names}: optimization profile batch {batch.min}..{batch.max}, tuned for {batch.opt}"


def _dynamic_batch(network: Any) -> bool:
    return any(len(t.shape) and int(t.shape[0]) < 0 for t in (network.get_input(i) for i in range(network.num_inputs)))


def calibration_profile(trt: Any, builder: Any, network: Any, config: Any, input_shapes: Mapping[str, Sequence[int]]) -> bool:
    """On a dynamic-shape network, calibrate at the manifest's shape (what the calibration
    tensors were made for): a profile with min = opt = max. False where the API has none."""
    if not hasattr(config, "set_calibration_profile"):
        return False
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        t = network.get_input(i)
        shape = [int(v) for v in input_shapes.get(t.name) or t.shape]
        profile.set_shape(t.name, shape, shape, shape)
    config.set_calibration_profile(profile)
    return True


class CreateConfig:
    """`(builder, network)` -> IBuilderConfig, like Polygraphy's CreateConfig.

    fp16 / int8: builder flags (TensorRT < 11). calibrator: implicit INT8 (8.x). dla_core: run on
    that DLA with GPU fallback. workspace_mib: the workspace memory pool limit. load_timing_cache:
    a timing cache file to start from (missing file: start empty). pins: {ONNX node: "fp32" |
    "fp16"} whose layers are pinned to that precision with PREFER_PRECISION_CONSTRAINTS (a layer
    TensorRT has no kernel for in that precision then runs in another one, and the layer report
    says so, instead of failing the build as OBEY would); `fp32_nodes` adds FP32 pins
    (`known_nodes`: every node the builder listed, to map layer names). batch: the batch range of
    the optimization profile, written when the network's batch is dynamic (`input_shapes`: the
    manifest's shapes, for the other dims). The engine keeps detailed layer information
    (ProfilingVerbosity.DETAILED) for the layer report.
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
        pins: Optional[Mapping[str, str]] = None,
        batch: Optional[BatchRange] = None,
        input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    ) -> None:
        self.fp16 = fp16
        self.int8 = int8
        self.calibrator = calibrator
        self.dla_core = dla_core
        self.workspace_mib = workspace_mib
        self.load_timing_cache = Path(load_timing_cache) if load_timing_cache is not None else None
        self.pins: Dict[str, str] = {n: "fp32" for n in fp32_nodes}
        self.pins.update(pins or {})
        bad = sorted(n for n, p in self.pins.items() if p not in PIN_PRECISIONS)
        if bad:
            raise ConfigError(f"layers can be pinned to {' or '.join(PIN_PRECISIONS)} only; got {bad}")
        self.known_nodes = set(known_nodes)
        self.batch = batch
        self.input_shapes = dict(input_shapes or {})
        self.pinning = Pinning()
        self.profile: Optional[Dict[str, List[List[int]]]] = None
        self.detailed = False
        self.notes: List[str] = []

    @property
    def fp32_nodes(self) -> Set[str]:
        return {n for n, p in self.pins.items() if p == "fp32"}

    @property
    def constrained_layers(self) -> List[str]:
        return list(self.pinning.pinned)

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
        if self.int8 and api.major < 10 and not getattr(builder, "platform_has_fast_int8", True):  # deprecated in 10, gone in 11
            self.notes.append("this GPU has no fast INT8: TensorRT may pick FP32/FP16 kernels")
        if self.calibrator is not None:
            config.int8_calibrator = self.calibrator
        if self.pins:
            self._pin(trt, api, network, config)
        if self.batch is not None:
            batch = self.batch
            if self.dla_core is not None and not batch.static and _dynamic_batch(network):
                # The DLA has no dynamic dimensions: a profile whose min, opt and max differ sends
                # every layer to the GPU (silently, with GPU fallback). Build for the batch TensorRT
                # is told it will run.
                batch = BatchRange(batch.opt, batch.opt, batch.opt)
                self.notes.append(
                    f"the DLA runs static shapes only (min = opt = max): the engine is built for batch {batch.opt} "
                    f"(--opt-batch), not {self.batch.min}..{self.batch.max}, and runs exactly {batch.opt} input(s) at a "
                    "time; a batch range would move every layer to the GPU (mode full runs 1; give --opt-batch N "
                    "for the N inputs of a roi or tiles pass)"
                )
            self.profile, _profile, note = add_batch_profile(trt, builder, network, config, batch, self.input_shapes)
            self.notes.append(note)
            if self.profile is not None and self.calibrator is not None:
                calibration_profile(trt, builder, network, config, self.input_shapes)
        if hasattr(trt, "ProfilingVerbosity") and hasattr(trt.ProfilingVerbosity, "DETAILED"):
            config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
            self.detailed = True
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

    def _pin(self, trt: Any, api: TrtApi, network: Any, config: Any) -> None:
        if not api.prefer_constraints:
            self.notes.append(
                f"TensorRT {api.version} has no layer precision constraints: the {len(self.pins)} fallback layer(s) follow the model's types"
            )
            return
        if "fp16" in self.pins.values() and not self.fp16:
            raise ConfigError("layers pinned to FP16 need the FP16 builder flag: build with --precision best, or fp16")
        self.pinning = constrain_layers(trt, network, self.pins, self.known_nodes)
        if self.pinning.pinned:
            config.set_flag(trt.BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
        if self.pinning.skipped:
            self.notes.append(
                f"{len(self.pinning.skipped)} fallback layer(s) take no precision constraint (constant or shape layers, as "
                "Polygraphy skips them): " + ", ".join(f"{k} ({v})" for k, v in list(self.pinning.skipped.items())[:8])
            )
        if self.pinning.missing:
            self.notes.append(
                f"{len(self.pinning.missing)} fallback node(s) have no TensorRT layer of that name (fused or constant): "
                + ", ".join(self.pinning.missing[:8])
            )


_OOM = re.compile(r"out of memory|outofmemory|could not be allocated|cudaErrorMemoryAllocation|insufficient memory|"
                  r"failed to allocate|\bOOM\b", re.IGNORECASE)


def out_of_memory(listener: Any) -> bool:
    """True when TensorRT's log says the build ran out of (GPU) memory."""
    return any(_OOM.search(m) for _s, m in getattr(listener, "messages", []))


class EngineBytesFromNetwork:
    """`()` -> serialized engine bytes. Saves the timing cache afterwards when asked. `log`:
    what TensorRT logged while parsing and building (edge_sdk.trt.log.Listener), after a call."""

    def __init__(
        self,
        network_loader: Callable[[], Tuple[Any, Any, Any]],
        config_loader: Callable[[Any, Any], Any],
        save_timing_cache: Optional[PathLike] = None,
    ) -> None:
        self.network_loader = network_loader
        self.config_loader = config_loader
        self.save_timing_cache = Path(save_timing_cache) if save_timing_cache is not None else None
        self.log: Optional[trt_log.Listener] = None

    def __call__(self) -> bytes:
        with trt_log.listen() as tail:
            self.log = tail
            return self._build(tail)

    def _build(self, logger: trt_log.Listener) -> bytes:
        builder, network, _parser = self.network_loader()
        config = self.config_loader(builder, network)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            if out_of_memory(logger):
                limit = getattr(self.config_loader, "workspace_mib", None)
                now = f" (workspace limit now {limit} MiB)" if limit else " (no workspace limit: TensorRT may take all free memory)"
                raise BackendError(
                    f"TensorRT ran out of GPU memory building the engine{now}. Lower the builder workspace limit: "
                    "`--workspace MIB` on `edge-sdk engine` / `edge-sdk build` (`workspace_mib` in the project file), "
                    "e.g. --workspace 512 on an 8 GB Jetson, and stop other programs using the GPU" + _log_tail(logger)
                )
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
    fp16_nodes: List[str] = field(default_factory=list)
    known_nodes: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def pins(self) -> Dict[str, str]:
        """{ONNX node: "fp32" | "fp16"}: the layers the build pins to a precision."""
        out = {n: "fp16" for n in self.fp16_nodes}
        out.update({n: "fp32" for n in self.fp32_nodes})
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {
            "precision": self.precision,
            "model": VARIANT_FILES[self.variant],
            "fp16": self.fp16,
            "int8": self.int8,
            "strongly_typed": self.strongly_typed,
            "int8_mode": "calibration" if self.calibrate else ("qdq" if self.variant == "int8" else None),
            "fp32_layers": len(self.fp32_nodes),
            "fp16_layers": len(self.fp16_nodes),
        }


def _int8_section(manifest: Dict[str, Any]) -> Tuple[List[str], Dict[str, str], Optional[Dict[str, str]]]:
    """(fp32_layers, layer_precisions, fallback_layers or None for a bundle written before it)."""
    section = manifest.get("int8") or {}
    fp32 = list(section.get("fp32_layers", manifest.get("fp32_layers", [])) or [])
    precisions = dict(section.get("layer_precisions", manifest.get("layer_precisions", {})) or {})
    fallback = section.get("fallback_layers")
    if fallback is None:
        return fp32, precisions, None
    if not isinstance(fallback, dict) or any(not isinstance(k, str) or v not in PIN_PRECISIONS for k, v in fallback.items()):
        raise BundleError(
            f"manifest.json int8.fallback_layers must map ONNX node names to {' or '.join(repr(p) for p in PIN_PRECISIONS)}; "
            "rebuild the bundle"
        )
    return fp32, precisions, dict(fallback)


def _pins_from_manifest(manifest: Dict[str, Any]) -> Tuple[Dict[str, str], List[str]]:
    """({node: "fp32" | "fp16"}, every node the manifest names). `int8.fallback_layers` when
    present ("fp16" where the target builds with FP16, "fp32" where FP16 failed the gate), plus
    `fp32_layers` (which lists the FP32 ones); older bundles: `fp32_layers` and the nodes
    `layer_precisions` keeps in FP32."""
    fp32, precisions, fallback = _int8_section(manifest)
    if fallback is None:
        pins = {n: "fp32" for n in set(fp32) | {n for n, p in precisions.items() if p == "fp32"}}
    else:
        pins = dict(fallback)
        pins.update({n: "fp32" for n in fp32})
    return pins, sorted(set(precisions) | set(pins))


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
                pins, plan.known_nodes = _pins_from_manifest(bundle.manifest)
                plan.fp32_nodes = sorted(n for n, p in pins.items() if p == "fp32")
                plan.fp16_nodes = sorted(n for n, p in pins.items() if p == "fp16")
                if plan.fp16_nodes and not plan.fp16:
                    plan.fp16 = True
                    plan.notes.append(
                        f"--precision int8: FP16 turned on for the {len(plan.fp16_nodes)} layer(s) the bundle keeps in FP16 "
                        "(int8.fallback_layers); the rest runs INT8"
                    )
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
        if wants_int8:
            # The Q/DQ model carries INT8 where the builder quantized. Outside the Q/DQ pairs a
            # weakly typed network with FP16 on may run the FP32 fallback layers in FP16: pin them.
            pins, known = _pins_from_manifest(bundle.manifest)
            if plan.fp16:
                plan.fp32_nodes = sorted(n for n, p in pins.items() if p == "fp32")
                plan.known_nodes = known
            elif any(p == "fp16" for p in pins.values()):
                plan.notes.append(
                    f"TensorRT {api.version} builds INT8 from the Q/DQ model: its FP16 fallback layers run in FP32 "
                    "unless FP16 is on (--precision best)"
                )
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


# --- the layer report: what the engine really runs -----------------------------------------------

_MISSING_SCALE = re.compile(r"Missing scale and zero-point for tensor (.+?), expect fall back", re.IGNORECASE)


def _precision_of(fmt: str) -> str:
    """TensorRT's 'Format/Datatype' text -> INT8 | FP16 | FP32 | INT32 | other (as TensorRT
    Engine Explorer reads it: tools/experimental/trt-engine-explorer/trex/activations.py)."""
    low = fmt.lower()
    if "int8" in low:
        return "INT8"
    if "fp16" in low or "half" in low:
        return "FP16"
    if "fp32" in low or "float" in low:
        return "FP32"
    if "int32" in low:
        return "INT32"
    return "other"


def inspect_engine(trt: Any, data: bytes) -> Tuple[Optional[List[Any]], str]:
    """(layers of the engine inspector's JSON, "") or (None, why not). TensorRT >= 8.2:
    `engine.create_engine_inspector().get_engine_information(LayerInformationFormat.JSON)`."""
    runtime_cls = getattr(trt, "Runtime", None)
    fmt = getattr(getattr(trt, "LayerInformationFormat", None), "JSON", None)
    if runtime_cls is None or fmt is None:
        return None, f"TensorRT {getattr(trt, '__version__', '?')} has no engine inspector (TensorRT >= 8.2 has)"
    try:
        with trt_log.listen() as tail:
            engine = runtime_cls(trt_log.process_logger(trt)).deserialize_cuda_engine(data)
        if engine is None or not hasattr(engine, "create_engine_inspector"):
            return None, "the engine did not deserialize for inspection" + _log_tail(tail, 2)
        text = engine.create_engine_inspector().get_engine_information(fmt)
    except Exception as exc:  # the report is information: a failed inspection is said in it, the engine stands
        return None, f"the engine inspector failed: {type(exc).__name__}: {exc}"
    try:
        doc = json.loads(text)
    except (TypeError, ValueError):
        return None, "the engine inspector's answer is not JSON"
    layers = doc.get("Layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        return None, "the engine inspector lists no layers"
    return layers, ""


def summarize_layers(
    layers: Optional[List[Any]],
    why: str,
    warnings: Sequence[str],
    dla: bool,
    pinned: Mapping[str, str],
    dla_core: Optional[int] = None,
) -> Dict[str, Any]:
    """The layer report: how many layers run INT8 / FP16 / FP32, on the DLA or the GPU; which
    pinned layers got their precision; tensors the calibration cache had no scale for; the
    warnings TensorRT printed during the build.

    A layer's precision is that of its first output. Reformat and no-op layers are counted
    apart. With `dla`, a foreign node (`{ForeignNode[...]}`, or a layer type naming the DLA) is
    a DLA subgraph: it counts as one layer on the DLA.
    """
    missing: List[str] = []
    for message in warnings:
        m = _MISSING_SCALE.search(message)
        if m and m.group(1) not in missing:
            missing.append(m.group(1))
    report: Dict[str, Any] = {
        "detailed": False,
        "precisions": {"INT8": 0, "FP16": 0, "FP32": 0, "INT32": 0, "other": 0},
        "devices": {"GPU": 0, "DLA": 0},
        "reformats": 0,
        "layers": [],
        "pinned": {"requested": dict(pinned), "honoured": [], "not_honoured": {}, "not_found": []},
        "missing_scales": missing,
        "warnings": list(dict.fromkeys(warnings)),
        "note": why or None,
    }
    if dla:
        report["dla"] = {"core": dla_core, "subgraphs": 0, "gpu_layers": 0}
    if layers is None:
        report["pinned"]["not_found"] = sorted(pinned)
        return report
    report["detailed"] = bool(layers) and all(isinstance(l, dict) for l in layers)
    if not report["detailed"]:
        report["note"] = "the engine has layer names only (built without ProfilingVerbosity.DETAILED): precisions unknown"
        report["layers"] = [{"name": str(l if isinstance(l, str) else l.get("Name"))} for l in layers]
        report["pinned"]["not_found"] = sorted(pinned)
        return report
    found: Dict[str, str] = {}
    for layer in layers:
        name = str(layer.get("Name", ""))
        kind = str(layer.get("LayerType", ""))
        outputs = layer.get("Outputs") or layer.get("Inputs") or []
        fmt = str(outputs[0].get("Format/Datatype", "")) if outputs and isinstance(outputs[0], dict) else ""
        precision = _precision_of(fmt)
        on_dla = dla and (name.startswith("{ForeignNode") or "dla" in kind.lower())
        if kind.lower() in ("reformat", "noop", "no-op"):
            report["reformats"] += 1
            continue
        report["precisions"][precision] += 1
        report["devices"]["DLA" if on_dla else "GPU"] += 1
        report["layers"].append({"name": name, "type": kind, "precision": precision, "device": "DLA" if on_dla else "GPU"})
        for part in name.split(" + "):
            found.setdefault(part.strip(), precision)
    if dla:
        report["dla"].update(subgraphs=report["devices"]["DLA"], gpu_layers=report["devices"]["GPU"])
    for name, want in sorted(pinned.items()):
        got = found.get(name)
        if got is None:
            report["pinned"]["not_found"].append(name)
        elif got == want.upper():
            report["pinned"]["honoured"].append(name)
        else:
            report["pinned"]["not_honoured"][name] = got
    return report


def report_lines(report: Dict[str, Any]) -> List[str]:
    """The layer report as short lines for a terminal (`edge-sdk engine`)."""
    lines: List[str] = []
    if report.get("detailed"):
        p, d = report["precisions"], report["devices"]
        counts = ", ".join(f"{p[k]} {k}" for k in ("INT8", "FP16", "FP32") if p.get(k)) or "none"
        where = f"GPU {d['GPU']}" + (f", DLA {d['DLA']} (subgraphs)" if d.get("DLA") else "")
        lines.append(f"layers: {counts} ({where}; {report.get('reformats', 0)} reformat(s))")
    elif report.get("note"):
        lines.append(f"layers: {report['note']}")
    dla = report.get("dla")
    if dla and report.get("detailed") and not dla["subgraphs"]:
        lines.append(f"DLA core {dla['core']}: no layer runs on it; all {dla['gpu_layers']} run on the GPU")
    pinned = report.get("pinned") or {}
    if pinned.get("requested"):
        bad = pinned.get("not_honoured") or {}
        lines.append(
            f"pinned layers: {len(pinned.get('honoured', []))} of {len(pinned['requested'])} run in the precision asked"
            + (": not honoured " + ", ".join(f"{k} (ran {v})" for k, v in list(bad.items())[:8]) if bad else "")
            + (f"; {len(pinned.get('not_found', []))} not found in the engine (fused)" if pinned.get("not_found") else "")
        )
    return lines


def report_warnings(report: Dict[str, Any]) -> List[str]:
    """What the user must hear: tensors left out of INT8, and TensorRT's build warnings."""
    out: List[str] = []
    missing = report.get("missing_scales") or []
    if missing:
        out.append(
            f"{len(missing)} tensor(s) have no scale in the calibration cache, so TensorRT left their layers out of INT8: "
            + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            + " (run `edge-sdk engine BUNDLE --recalibrate` to calibrate every tensor on the device)"
        )
    dla = report.get("dla")
    if dla and report.get("detailed") and not dla["subgraphs"]:
        out.append(
            f"no layer runs on DLA core {dla['core']}: TensorRT moved all {dla['gpu_layers']} to the GPU (GPU fallback); "
            "check the build warnings for why, or leave --dla-core out"
        )
    others = [w for w in report.get("warnings") or [] if not _MISSING_SCALE.search(w)]
    if others:
        out.append(f"TensorRT printed {len(others)} warning(s) during the build: " + " | ".join(others[:5])
                   + (" ..." if len(others) > 5 else ""))
    return out


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
    batch: Optional[BatchRange] = None,
) -> EngineResult:
    """Compile (or find in the cache) the engine of a bundle for this machine's GPU.

    With `target` and `require=True`, a target whose GPU or TensorRT differs from this
    machine's is a TargetError (engines are not portable) instead of a wrong engine. `batch`:
    the batch range written as an optimization profile when the model's batch is dynamic
    (default: `batch_range()`, from the ROI settings). `allocate`: how calibration batch
    buffers are made (default: the SDK's CUDA layer, opened in the primary context before the
    build starts).
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
    batch = batch if batch is not None else batch_range(dla=dla_core is not None)
    made_for = (bundle.get("target") or {}).get("sm")
    if made_for and made_for != gpu.sm:
        plan.notes.append(f"the bundle was made for SM {made_for}; building for this GPU (SM {gpu.sm})")
    key = EngineKey(bundle.hash, api.version, gpu.sm, precision, dla_core)
    cache = EngineCache(cache_dir)
    cache.check()  # an untrusted folder is refused before anything in it is read or written
    notes = list(plan.notes)
    if recalibrate and not plan.calibrate:
        notes.append(f"--recalibrate has no effect here: the {precision} engine on TensorRT {api.version} uses no calibrator")
    if not (force or recalibrate):
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
            allocate=allocate,
        )
        if not recalibrate:
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
        workspace_mib=workspace_mib,
        load_timing_cache=timing_cache,
        pins=plan.pins,
        known_nodes=plan.known_nodes,
        batch=batch,
        input_shapes={spec.name: list(spec.shape) for spec in bundle.inputs},
    )
    say(f"building the {precision} engine from {VARIANT_FILES[plan.variant]} (TensorRT {api.version}, {gpu.name}); this can take minutes")
    started = time.perf_counter()
    engine_bytes = EngineBytesFromNetwork(network, config, save_timing_cache=timing_cache)
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
        layers, why = inspect_engine(trt, data) if config.detailed else (None, "no engine inspector in this TensorRT")
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
