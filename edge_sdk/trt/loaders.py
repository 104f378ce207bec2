"""TensorRT engine loaders: small callables chained the way Polygraphy chains them.

    NetworkFromOnnxPath(path) -> CreateConfig(...) -> EngineBytesFromNetwork(...) -> SaveEngine(...)

and, for the runtime (TensorRTBackend.from_bundle composes them with the precision policy):

    EngineFromBundle(build_engine, bundle_dir, options)      -> the engine, from the cache or built
    EngineBytesFromCache(cache_dir, key)                      -> its bytes, checked, to deserialize

`tensorrt` is imported lazily, inside the callables; what they ask of it depends on the API
generation (edge_sdk.trt.api). The layer pins (edge_sdk.trt.pins) and the batch profile
(edge_sdk.trt.profiles) are written into the builder config by `CreateConfig`.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from edge_sdk import _imports
from edge_sdk.errors import BackendError, ConfigError, ModelError, TargetError
from edge_sdk.fsutil import PathLike, atomic_write_bytes
from edge_sdk.trt import log as trt_log
from edge_sdk.trt.api import TrtApi, trt_api
from edge_sdk.trt.cache import EngineCache, EngineKey
from edge_sdk.trt.options import BuildOptions
from edge_sdk.trt.pins import PIN_PRECISIONS, Pinning, constrain_layers
from edge_sdk.trt.profiles import BatchRange, add_batch_profile, calibration_profile, dynamic_batch


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
        builder = trt_log.create(trt, "Builder", tail)
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
                + trt_log.log_tail(tail)
            )
        return builder, network, parser


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
    manifest's shapes, for the other dims). monitor: an IProgressMonitor set on the config. The engine keeps detailed layer information
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
        monitor: Any = None,
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
        self.monitor = monitor  # an IProgressMonitor (edge_sdk.trt.progress.monitor), TensorRT >= 10
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
            if self.dla_core is not None and not batch.static and dynamic_batch(network):
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
        if self.monitor is not None:
            config.progress_monitor = self.monitor
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
                    "e.g. --workspace 512 on an 8 GB Jetson, and stop other programs using the GPU" + trt_log.log_tail(logger)
                )
            raise BackendError(
                "TensorRT could not build the engine (build_serialized_network returned nothing). "
                "Try a larger --workspace, another --precision, or leave --dla-core out" + trt_log.log_tail(logger)
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


class EngineFromBundle:
    """`()` -> EngineResult: a bundle's engine as `options` ask, found in the engine cache or built
    (`build(bundle_dir, options)`: edge_sdk.trt.engine.build_engine, what `edge-sdk engine` runs),
    with its notes and a build said through `options.progress`. `rebuild()` builds it again,
    ignoring the cache, and returns its path: for an engine that does not deserialize here."""

    def __init__(self, build: Callable[[PathLike, BuildOptions], Any], bundle_dir: PathLike, options: BuildOptions) -> None:
        self.build = build
        self.bundle_dir = bundle_dir
        self.options = options

    def __call__(self) -> Any:
        result = self.build(self.bundle_dir, self.options)
        say = self.options.progress or (lambda _m: None)
        for note in result.notes:
            say(f"engine: {note}")
        if not result.cached:
            say(f"built the {self.options.precision} engine in {result.build_seconds:.1f} s: {result.path}")
        return result

    def rebuild(self) -> Path:
        return Path(self.build(self.bundle_dir, replace(self.options, force=True)).path)


class EngineBytesFromCache:
    """`()` -> bytes: a cached engine, read once and checked against its sidecar (size, sha256,
    key: EngineCache.read_engine), the bytes that are then deserialized."""

    def __init__(self, cache_dir: Optional[PathLike], key: EngineKey) -> None:
        self.cache_dir = cache_dir
        self.key = key

    def __call__(self) -> bytes:
        return EngineCache(self.cache_dir).read_engine(self.key)
