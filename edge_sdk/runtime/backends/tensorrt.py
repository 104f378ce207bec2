"""The native TensorRT backend: a bundle's engine, run with the name-based tensor API on one stream.

    backend = TensorRTBackend.from_bundle(bundle, "int8")      # finds or builds the cached engine
    with backend:                                               # activate(): deserialize, bind
        outputs = backend.infer({"input.1": tensor})            # host array or device tensor

Loaders and runner, as Polygraphy splits them. `from_bundle` composes the loaders: the precision
policy (edge_sdk.trt.choice.engine_precision: which variant, which engine), EngineFromBundle (the
engine from the engine cache, keyed by bundle hash, TensorRT version, GPU SM, precision and DLA
core, or built by `edge_sdk.trt.engine.build_engine`, the same code `edge-sdk engine` runs) and
EngineBytesFromCache (its bytes, size and sha256 checked), all in edge_sdk.trt.loaders. The runner:

* `activate()` deserializes the engine (`trt.Runtime(logger).deserialize_cuda_engine`), creates
  the execution context, reads the I/O tensors (`num_io_tensors`, `get_tensor_name/mode/shape/
  dtype`, present from TensorRT 8.5 on, the only API in 10 and 11) and checks them against the
  manifest. An engine that does not deserialize (corrupt, another TensorRT version or GPU) is
  rebuilt once, never run; the reason is logged and kept in `describe()`.
* Buffers are allocated once from the CUDA layer (edge_sdk.cuda): the input in device memory
  (plus a pinned staging buffer for host arrays); the outputs in mapped page-locked memory on an
  integrated GPU (the host array *is* the result: no copy) or in device memory with one async
  copy to pinned memory per output on a discrete GPU. Addresses are bound with
  `set_tensor_address` once.
* `infer(feed)` takes a host array (the CPU preprocessor: one copy into pinned memory, one async
  host-to-device copy) or a device tensor (`__cuda_array_interface__` or `.ptr`: the GPU
  preprocessor's output, queued on this backend's `stream`: bound as the input, no copy), runs
  `execute_async_v3(stream)` and waits for an event recorded after the outputs. The returned
  arrays are the backend's own buffers: valid until the next `infer` (or `deactivate`, which frees them).
* Dynamic batch: an input whose batch dimension is -1 takes any row count within its
  optimization profile (`get_tensor_profile_shape`); `set_input_shape` is called when the count
  changes; more rows than the profile's maximum is a BackendError.
* CUDA graphs: with a CUDA implementation that has them (cuda-python) and a GPU engine, the work
  of a call (copies and the TensorRT enqueue) is captured once per (input source, rows) and
  replayed afterwards. TensorRT defers work to the first enqueue after the context is made or
  an input shape changes, and that work is not permitted under stream capture (it invalidates
  the capture): like trtexec (`samples/common/sampleInference.cpp`: enqueue and synchronize once,
  then capture), every shape change is followed by one plain, synchronized run before a graph is
  captured or replayed; a graph then replays while the row count stays. A capture that fails
  runs that row count plainly from then on, said once in the log and in `describe()`; it is
  never raised mid-run (other counts keep their graphs).
* DLA: `dla_core=N` builds the engine for that core with GPU fallback (the builder's
  `GPU_FALLBACK`) and sets `Runtime.DLA_core` before deserializing.

TensorRT is imported here, lazily (inside the methods), and nowhere else at run time. Nothing in
this module has run on a GPU yet: the tests run it against fakes (tests/fakes/fake_tensorrt_runtime.py
and fake_cuda_host.py) that follow TensorRT 8.5/10/11's bindings; tests/device has the Jetson checks.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import BackendError, BundleError
from edge_sdk.runtime.backends.base import Backend, Capabilities, TensorSpec, device_pointer

log = logging.getLogger(__name__)

# trt.DataType member name -> numpy dtype
_DTYPES = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32, "BOOL": np.bool_,
           "UINT8": np.uint8, "INT64": np.int64}

MAX_GRAPHS = 8  # graphs kept per backend (input sources x row counts)


def stream_handle(stream: Any) -> int:
    """The `cudaStream_t` of a CUDA-layer stream as the integer `execute_async_v3` takes:
    pycuda's Stream has `.handle`; cuda-python's cudaStream_t converts with int()."""
    handle = getattr(stream, "handle", None)
    if isinstance(handle, int):
        return handle
    return int(stream)


def _np_dtype(trt_dtype: Any) -> Any:
    name = getattr(trt_dtype, "name", str(trt_dtype)).split(".")[-1]
    if name not in _DTYPES:
        raise BackendError(f"the engine has a tensor of type {name}, which edge-sdk cannot feed or read; rebuild the bundle "
                           "with float32 or float16 inputs and outputs")
    return np.dtype(_DTYPES[name])


class _Output:
    """One output: where TensorRT writes it and the host array the caller reads."""

    __slots__ = ("name", "shape", "dtype", "host", "device", "views")

    def __init__(self, name: str, shape: Tuple[int, ...], dtype: Any) -> None:
        self.name = name
        self.shape = shape  # at the maximum batch
        self.dtype = dtype
        self.host: Any = None  # HostBuffer (mapped or pinned)
        self.device: Any = None  # DeviceBuffer (discrete GPU only)
        self.views: Dict[int, np.ndarray] = {}  # rows -> view of host.array, made once per row count

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:])) * self.dtype.itemsize

    def view(self, rows: int) -> np.ndarray:
        v = self.views.get(rows)
        if v is None:
            v = self.views[rows] = self.host.array[:rows]
        return v


class TensorRTBackend(Backend):
    """Runner over a serialized TensorRT engine (see the module docstring)."""

    name = "tensorrt"

    def __init__(
        self,
        engine_path: Any,
        bundle: Any = None,
        cuda: Any = None,
        dla_core: Optional[int] = None,
        use_graphs: bool = True,
        rebuild: Optional[Callable[[], Path]] = None,
        engine_cached: bool = True,
        notes: Sequence[str] = (),
        tensorrt_version: str = "",
        read_engine: Optional[Callable[[], bytes]] = None,
    ) -> None:
        """`rebuild()` builds the engine again (ignoring the cache) and returns its path; it is
        called once when the cached engine does not deserialize. `read_engine()` gives the bytes to
        deserialize (default: the file at `engine_path`); for a cached engine, EngineCache.read_engine:
        read once, checked against the sidecar, and those same bytes deserialized."""
        super().__init__()
        self.engine_path = Path(engine_path)
        self.bundle = bundle
        self.cuda = cuda
        self.dla_core = dla_core
        self.use_graphs = use_graphs
        self.engine_cached = engine_cached
        self.notes: List[str] = list(notes)
        self.tensorrt_version = tensorrt_version
        self._rebuild = rebuild
        self._read_engine = read_engine
        self.device_choice: Optional[Dict[str, Any]] = None  # edge_sdk.trt.choice.summary of the choice that picked it
        self.stream: Any = None
        self.graph: Any = None
        self.graph_note = ""
        self._reset()

    def _reset(self) -> None:
        self._trt: Any = None
        self._logger: Any = None  # edge_sdk.trt.log.Listener while active
        self._deserialize_log: List[Tuple[str, str]] = []
        self._runtime: Any = None
        self._engine: Any = None
        self._context: Any = None
        self._input_dtype: Any = None
        self._input_shape: Tuple[int, ...] = ()  # at the maximum batch
        self._dynamic = False
        self._min_rows = self._max_rows = 1
        self._rows = 0  # rows of the shape set now
        self._input_dev: Any = None
        self._staging: Any = None
        self._bound_input = 0
        self._outputs: List[_Output] = []
        self._results: Dict[int, List[np.ndarray]] = {}
        self._start: Any = None
        self._done: Any = None
        self._prepared = False  # a plain run since the context was made or its input shape last changed
        self._no_graph: Dict[int, str] = {}  # rows -> why capturing that shape failed
        self._handle = 0
        self.mapped_outputs = False
        self.input_specs = {}

    # -- loader ------------------------------------------------------------------------------
    @classmethod
    def from_bundle(
        cls,
        bundle: Any,
        precision: str,
        threads: int = 0,
        dla_core: Optional[int] = None,
        cuda: Any = None,
        cache_dir: Any = None,
        workspace_mib: Optional[int] = None,
        use_graphs: bool = True,
        progress: Optional[Callable[[str], None]] = None,
        max_batch: Optional[int] = None,
        workspace_limit: Optional[Callable[[], Optional[int]]] = None,
        **options: Any,
    ) -> "TensorRTBackend":
        """Find the bundle's engine for `precision` in the engine cache, or build it (what
        `edge-sdk engine BUNDLE --precision P` does), and return the runner, not yet active.
        `precision`: fp32, fp16 or int8, or auto (edge_sdk.trt.choice.engine_precision: the choice
        `edge-sdk engine` made on this device, else the bundle's gated choice); the runner's
        `precision` and `precision_reason` say which and why. `threads`: unused (the GPU runs).
        `cuda`: a CudaApi to run on (default: `edge_sdk.cuda.require_cuda()`'s). `max_batch`: the
        largest batch of a dynamic-batch model (its profile; default: the ROI settings', as `edge-sdk
        engine` uses). `workspace_limit`: bounds the builder's workspace when a build is due
        (edge_sdk.trt.options.BuildOptions). Unknown options are a BackendError."""
        if options:
            raise BackendError(f"the tensorrt backend does not take option(s) {', '.join(sorted(options))}")
        from edge_sdk.cuda import require_cuda
        from edge_sdk.trt.api import trt_api
        from edge_sdk.trt.choice import engine_precision
        from edge_sdk.trt.device import GpuInfo
        from edge_sdk.trt.engine import build_engine
        from edge_sdk.trt.loaders import EngineBytesFromCache, EngineFromBundle
        from edge_sdk.trt.options import BuildOptions
        from edge_sdk.trt.profiles import batch_range

        trt = _imports.tensorrt()
        api = cuda if cuda is not None else require_cuda("auto")
        gpu = GpuInfo.of_cuda(api)
        choice = engine_precision(bundle, precision, trt_api(trt).version, gpu.sm, dla_core, cache_dir)
        batch = batch_range(max_batch, dla=dla_core is not None) if max_batch is not None else None
        engine = EngineFromBundle(build_engine, bundle.root, BuildOptions(
            precision=choice.engine, dla_core=dla_core, workspace_mib=workspace_mib, cache_dir=cache_dir, gpu=gpu,
            progress=progress or _say, batch=batch, workspace_limit=workspace_limit))
        result = engine()
        backend = cls(result.path, bundle=bundle, cuda=api, dla_core=dla_core, use_graphs=use_graphs, rebuild=engine.rebuild,
                      engine_cached=result.cached, notes=result.notes, tensorrt_version=str(getattr(trt, "__version__", "")),
                      read_engine=EngineBytesFromCache(cache_dir, result.key))
        backend.precision, backend.precision_reason, backend.device_choice = choice.variant, choice.reason, choice.device_choice
        backend.frame_memory = choice.frame_memory
        return backend

    # -- runner ------------------------------------------------------------------------------
    def activate(self) -> None:
        if self.is_active:
            return
        if self.cuda is None:
            from edge_sdk.cuda import require_cuda

            self.cuda = require_cuda("auto")
        trt = _imports.tensorrt()
        from edge_sdk.trt import log as trt_log

        self._trt = trt
        self.tensorrt_version = str(getattr(trt, "__version__", self.tensorrt_version))
        try:
            # TensorRT keeps one logger per process: the runner listens to it while active.
            self._logger = trt_log.subscribe(trt_log.Listener(keep=64))
            self._runtime = trt_log.create(trt, "Runtime", self._logger)
            if self.dla_core is not None:
                self._runtime.DLA_core = int(self.dla_core)
            engine = self._deserialize()
            if engine is None and self._rebuild is not None:
                why = self._log_text() or "no reason logged"
                note = (f"the cached engine {self.engine_path.name} does not load on this TensorRT/GPU ({why}); "
                        "rebuilt it")
                log.warning(note)
                self.notes.append(note)
                self.engine_path = self._rebuild()
                self.engine_cached = False
                engine = self._deserialize()
            if engine is None:
                raise BackendError(f"TensorRT {self.tensorrt_version} cannot deserialize {self.engine_path}; rebuild it with "
                                   f"`edge-sdk engine BUNDLE --force`" + trt_log.log_tail(self._logger))
            self._engine = engine
            self._context = engine.create_execution_context()
            if self._context is None:
                raise BackendError("TensorRT could not create an execution context (out of GPU memory?); stop other GPU "
                                   "programs or use a smaller input" + trt_log.log_tail(self._logger))
            self._read_io()
            self._allocate()
            self.is_active = True
        except BaseException:
            self._free()
            raise

    def _deserialize(self) -> Any:
        from edge_sdk.trt import log as trt_log

        try:
            data = self._read_engine() if self._read_engine is not None else self.engine_path.read_bytes()
        except OSError as exc:
            raise BackendError(f"cannot read the engine {self.engine_path} ({exc.strerror or exc}); rebuild it with "
                               "`edge-sdk engine BUNDLE --force`") from exc
        with trt_log.listen() as tail:
            engine = self._runtime.deserialize_cuda_engine(data)
        self._deserialize_log = tail.messages
        return engine

    def _log_text(self) -> str:
        return "; ".join(m for _s, m in self._deserialize_log[-3:])

    def _read_io(self) -> None:
        trt, engine = self._trt, self._engine
        inputs: Dict[str, Tuple[Tuple[int, ...], Any]] = {}
        outputs: Dict[str, Tuple[Tuple[int, ...], Any]] = {}
        for i in range(int(engine.num_io_tensors)):
            name = engine.get_tensor_name(i)
            shape = tuple(int(d) for d in engine.get_tensor_shape(name))
            entry = (shape, _np_dtype(engine.get_tensor_dtype(name)))
            mode = engine.get_tensor_mode(name)
            if mode == trt.TensorIOMode.INPUT:
                inputs[name] = entry
            elif mode == trt.TensorIOMode.OUTPUT:
                outputs[name] = entry
        self._check_manifest(inputs, outputs)
        (name, (shape, dtype)), = inputs.items()
        self.input_names = [name]
        self._input_dtype = dtype
        if any(d < 0 for d in shape[1:]):
            raise BundleError(f"the engine's input {name!r} has dynamic dimensions {list(shape)} beyond the batch; "
                              "the runtime runs fixed-size inputs: rebuild the engine from the bundle")
        if shape[0] < 0:
            lo, _opt, hi = (tuple(int(d) for d in s) for s in engine.get_tensor_profile_shape(name, 0))
            self._dynamic = True
            self._min_rows, self._max_rows = lo[0], hi[0]
        else:
            self._min_rows = self._max_rows = shape[0]
        self._input_shape = (self._max_rows,) + shape[1:]
        # any batch here (_check_rows holds it to the profile); a host array may be cast on its way
        # into the staging buffer, a device tensor is bound as it is
        self.input_specs = {name: TensorSpec((None,) + shape[1:], dtype, casting="same_kind",
                                            shown=["N"] + list(shape[1:]), what="engine")}
        if self._dynamic and not self._context.set_input_shape(name, self._input_shape):
            raise BackendError(f"TensorRT refused the input shape {list(self._input_shape)} for {name!r}" + self._tail())
        self._rows = self._max_rows
        order = self._output_order(list(outputs))
        self.output_names = order
        self._outputs = []
        for out in order:
            oshape = tuple(int(d) for d in self._context.get_tensor_shape(out))
            if any(d < 0 for d in oshape):
                raise BackendError(f"the engine's output {out!r} has a data-dependent shape {list(oshape)}; the tensorrt "
                                   "backend binds fixed buffers: use --backend onnxruntime for this model")
            self._outputs.append(_Output(out, oshape, outputs[out][1]))

    def _output_order(self, engine_outputs: List[str]) -> List[str]:
        """The manifest's output order when it lists them (decoders rely on it), else the engine's."""
        listed = [o.get("name") for o in (self.bundle.get("outputs") or [])] if self.bundle is not None else []
        return listed if listed and set(listed) == set(engine_outputs) else engine_outputs

    def _check_manifest(self, inputs: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        """BundleError naming both sides when the engine's I/O disagrees with the manifest."""
        fix = ("; the engine was built from another model than this manifest describes: rebuild the bundle "
               "(`edge-sdk build`), then the engine (`edge-sdk engine BUNDLE --force`)")
        where = f"engine {self.engine_path.name}"
        if len(inputs) != 1:
            raise BundleError(f"{where} has {len(inputs)} inputs ({', '.join(inputs)}); the runtime runs single-input models")
        if self.bundle is None:
            return
        specs = self.bundle.inputs
        manifest = f"the manifest of {self.bundle.root}"
        names = [s.name for s in specs]
        if list(inputs) != names:
            raise BundleError(f"{where} has input(s) {list(inputs)}, {manifest} lists {names}{fix}")
        spec = specs[0]
        shape, dtype = inputs[spec.name]
        want = list(spec.shape)
        batch_ok = shape[0] == want[0] or shape[0] == -1
        if len(shape) != len(want) or not batch_ok or list(shape[1:]) != want[1:]:
            raise BundleError(f"{where}: input {spec.name!r} has shape {list(shape)}, {manifest} says {want}{fix}")
        if dtype != np.dtype(spec.dtype):
            raise BundleError(f"{where}: input {spec.name!r} is {dtype.name}, {manifest} says {spec.dtype}{fix}")
        listed = [o for o in (self.bundle.get("outputs") or []) if isinstance(o, dict) and o.get("name")]
        if listed:
            listed_names = [str(o["name"]) for o in listed]
            if set(listed_names) != set(outputs):
                raise BundleError(f"{where} has outputs {sorted(outputs)}, {manifest} lists {sorted(listed_names)}{fix}")
            for o in listed:
                want_shape = o.get("shape")
                got = outputs[o["name"]][0]
                if isinstance(want_shape, list) and len(want_shape) == len(got) and all(isinstance(d, int) for d in want_shape):
                    if list(got[1:]) != list(want_shape[1:]):
                        raise BundleError(f"{where}: output {o['name']!r} has shape {list(got)}, {manifest} says "
                                          f"{want_shape}{fix}")

    def _allocate(self) -> None:
        from edge_sdk.cuda import MAPPED, frame_memory_for

        api = self.cuda
        self.stream = api.create_stream()
        self._handle = stream_handle(self.stream)
        self._start = api.create_event()
        self._done = api.create_event()
        nbytes = int(np.prod(self._input_shape)) * self._input_dtype.itemsize
        self._input_dev = api.alloc_device(nbytes)
        self._bind(self.input_names[0], self._input_dev.ptr)
        self._bound_input = self._input_dev.ptr
        self.mapped_outputs = frame_memory_for(api.properties) == MAPPED
        for out in self._outputs:
            if self.mapped_outputs:
                out.host = api.alloc_host(out.shape, out.dtype, mapped=True)
                self._bind(out.name, out.host.device_ptr)
            else:
                out.device = api.alloc_device(max(1, int(np.prod(out.shape)) * out.dtype.itemsize))
                out.host = api.alloc_host(out.shape, out.dtype)
                self._bind(out.name, out.device.ptr)
        self._results = {}
        from edge_sdk.cuda.graph import FrameGraph

        reason = ""
        if not self.use_graphs:
            reason = "off: use_graphs=False"
        elif not api.supports_graphs:
            reason = f"off: {api.name} has no CUDA graph API (kernels are launched per call)"
        elif self.dla_core is not None:
            reason = "off: DLA engines are not captured (their layers run on the DLA)"
        self.graph = FrameGraph(api, self.stream, max_graphs=MAX_GRAPHS, enabled=not reason)
        self.graph_note = reason or "on: one graph per (input, rows), captured after a plain run at that shape, replayed while the shape stays"

    def _bind(self, name: str, ptr: int) -> None:
        if not self._context.set_tensor_address(name, int(ptr)):
            raise BackendError(f"TensorRT refused the address of tensor {name!r}" + self._tail())

    def _tail(self) -> str:
        from edge_sdk.trt import log as trt_log

        return trt_log.log_tail(self._logger)

    # -- inference ---------------------------------------------------------------------------
    def _infer_impl(self, feed: Mapping[str, Any]) -> List[np.ndarray]:
        name = self.input_names[0]
        value = feed[name]
        ptr = device_pointer(value)
        rows = self._check_rows(name, int(value.shape[0]))
        api = self.cuda
        if ptr is None:
            arr = np.asarray(value)
            np.copyto(self._staging_array(rows), arr, casting="same_kind")
            source = self._input_dev.ptr
            nbytes = rows * self._row_bytes
        else:
            source, nbytes = ptr, 0
        if source != self._bound_input:
            self._bind(name, source)
            self._bound_input = source
        if self._dynamic and rows != self._rows:
            if not self._context.set_input_shape(name, (rows,) + self._input_shape[1:]):
                raise BackendError(f"TensorRT refused {rows} rows for {name!r}" + self._tail())
            self._rows = rows
            self._prepared = False

        def work() -> None:
            if nbytes:
                api.copy_htod(self._input_dev, self._staging, nbytes, self.stream)
            if not self._context.execute_async_v3(self._handle):
                raise BackendError(f"TensorRT failed to run {self.engine_path.name} (execute_async_v3 returned False)"
                                   + self._tail())
            if not self.mapped_outputs:
                for out in self._outputs:
                    api.copy_dtoh(out.host, out.device.ptr, rows * out.row_bytes, self.stream)

        api.record(self._start, self.stream)
        self._launch((source, rows), rows, work)
        api.record(self._done, self.stream)
        api.event_synchronize(self._done)
        result = self._results.get(rows)
        if result is None:
            result = self._results[rows] = [out.view(rows) for out in self._outputs]
        return result

    @property
    def _row_bytes(self) -> int:
        return int(np.prod(self._input_shape[1:])) * self._input_dtype.itemsize

    def _staging_array(self, rows: int) -> np.ndarray:
        if self._staging is None:
            self._staging = self.cuda.alloc_host(self._input_shape, self._input_dtype)
        return self._staging.array[:rows]

    def _check_rows(self, name: str, rows: int) -> int:
        """The batch of a feed whose other dimensions and type TensorSpec has checked: within the
        engine's optimization profile, or its fixed batch."""
        if not self._min_rows <= rows <= self._max_rows:
            if self._dynamic and self._min_rows == self._max_rows:
                raise BackendError(
                    f"{rows} rows for {name!r}, but the engine was built for exactly {self._max_rows} (a DLA engine has one "
                    "batch size): send that many crops per batch, or rebuild it with --opt-batch")
            if self._dynamic:
                raise BackendError(
                    f"{rows} rows for {name!r}, but the engine's optimization profile takes {self._min_rows} to "
                    f"{self._max_rows}; send at most {self._max_rows} crops per batch, or rebuild the engine with a larger "
                    "maximum batch")
            raise BackendError(f"{rows} rows for {name!r}, but the engine's batch is fixed at {self._max_rows}")
        return rows

    def _launch(self, key: Tuple[int, int], rows: int, work: Callable[[], None]) -> None:
        """Run `work` plainly after a shape change (infer synchronizes before the next call), else
        as a CUDA graph kept per `key`: captured the first time, replayed after. A capture that
        fails sends `rows` to plain runs for good; a replay that fails is a real error."""
        graph = self.graph
        if not graph.enabled or not self._prepared or rows in self._no_graph:
            work()
            self._prepared = True
            return
        capturing = key not in graph
        try:
            graph.run(key, work)
        except Exception as exc:
            if not capturing:
                raise
            self._no_graph[rows] = " ".join(str(exc).split()) or type(exc).__name__  # with TensorRT's log tail
            log.warning("tensorrt backend: capturing the engine in a CUDA graph at %d row(s) failed (%s); that row count "
                        "runs without a graph", rows, _first_line(exc))
            work()

    def gpu_ms(self) -> float:
        """GPU time of the last `infer` (copies and TensorRT's kernels), from CUDA events."""
        return float(self.cuda.elapsed_ms(self._start, self._done)) if self.is_active else 0.0

    # -- description, lifetime ---------------------------------------------------------------
    def describe(self) -> Dict[str, Any]:
        out = dict(super().describe())
        out.update({
            "tensorrt": self.tensorrt_version,
            "engine": str(self.engine_path),
            "engine_cached": self.engine_cached,
            "dla_core": self.dla_core,
            "cuda": getattr(self.cuda, "name", None),
        })
        if self.notes:
            out["engine_notes"] = list(self.notes)
        if self.device_choice is not None:
            out["device_choice"] = dict(self.device_choice)
        if self.cuda is not None:
            # Frames are the capture ring's and the GPU detector's (their describe() says which
            # memory, measured or default); the engine's own host memory is its outputs'.
            out["device"] = self.cuda.properties.name
        if self.is_active:
            out["output_memory"] = "mapped (zero-copy)" if self.mapped_outputs else "pinned + one async copy per output"
            out["batch"] = {"min": self._min_rows, "max": self._max_rows, "dynamic": self._dynamic}
            out["cuda_graphs"] = self.graph_note
            if self._no_graph:
                counts = ", ".join(str(r) for r in sorted(self._no_graph))
                out["cuda_graphs"] += f"; without a graph at {counts} row(s): the capture failed"
                out["cuda_graph_failures"] = {str(r): why for r, why in sorted(self._no_graph.items())}
        return out

    @property
    def cpu_bound(self) -> bool:
        return False

    def input_shape(self, name: str) -> Optional[List[Any]]:
        """The engine's input shape, batch "N" where the profile sets it (see batch_range)."""
        if not self.is_active or name not in self.input_specs:
            return None
        batch: Any = "N" if self._dynamic else self._max_rows
        return [batch] + list(self._input_shape[1:])

    def input_dtype(self, name: str) -> Any:
        return self._input_dtype if self.is_active and name in self.input_specs else None

    def batch_range(self, name: str) -> Optional[Tuple[int, int]]:
        """(min, max) rows of the engine's profile (a static batch: it twice), as describe() says."""
        if not self.is_active or name not in self.input_specs:
            return None
        return self._min_rows, self._max_rows

    def capabilities(self) -> Capabilities:
        return Capabilities(device="gpu", cuda=self.cuda if self.is_active else None,
                            stream=self.stream if self.is_active else None)

    def deactivate(self) -> None:
        self._free()
        self.is_active = False

    def _free(self) -> None:
        api = self.cuda
        if api is not None and self.stream is not None:
            try:
                api.synchronize(self.stream)
            finally:
                if self.graph is not None:
                    self.graph.invalidate()
        if api is not None:
            for out in self._outputs:
                if out.host is not None:
                    api.free_host(out.host)
                if out.device is not None:
                    api.free_device(out.device)
            if self._staging is not None:
                api.free_host(self._staging)
            if self._input_dev is not None:
                api.free_device(self._input_dev)
            # cuda-python's handles are not freed by garbage collection: destroy them here.
            for event in (self._start, self._done):
                if event is not None:
                    api.destroy_event(event)
            if self.stream is not None:
                api.destroy_stream(self.stream)
        self._start = self._done = None
        self._context = self._engine = self._runtime = None
        if self._logger is not None:
            from edge_sdk.trt import log as trt_log

            trt_log.unsubscribe(self._logger)
        self.stream = None
        self.graph = None
        self._reset()


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _say(message: str) -> None:
    log.warning("tensorrt backend: %s", message)
