"""A fake TensorRT *runtime* (deserialize, I/O tensors, execution context) for the backend tests.

It extends the builder fakes of tests/fakes/fake_tensorrt.py (same module object: the engine
bytes it deserializes are the ones their `build_serialized_network` writes, read back with
`decode_engine`) with the runtime API of the name-based tensor interface. Every faked member
follows a real binding; the references are to the NVIDIA/TensorRT repository at a tag:

* `python/src/infer/pyCore.cpp` (8.5.2, v10.3.0, v11.0): which members the Python module has;
* `python/docstrings/infer/pyCoreDoc.h` (8.5.2): what they return;
* `include/NvInferRuntime.h` (8.5.2): the C++ contract behind them.

What differs between the versions, as those files show:

| member | 8.5 | 10 | 11 |
|---|---|---|---|
| bindings API (`num_bindings`, `get_binding_*`, `execute_async_v2`) | deprecated, present | removed | removed |
| `create_execution_context_without_device_memory` | present | deprecated | removed |
| `ICudaEngine.device_memory_size` | present | deprecated (`device_memory_size_v2`) | removed |
| `Runtime.DLA_core` | present | present | present, but 11.0-11.3 have no DLA |

The fake "runs" the network on the fake CUDA host (tests/fakes/fake_cuda_host.py), whose
device memory is host memory: `execute_async_v3(stream_handle)` queues, on that stream, one
operation that reads the input rows at the bound input address and writes each output at its
bound address. The network is a small deterministic function (`TinyCenterFace`: the same
arithmetic as tests/runtime_factories.tiny_centerface_model), so a test can check the data path
(which bytes reached the engine, from where, and where the outputs went) and decode real
detections from it. It proves edge_sdk's logic, not TensorRT's behaviour.

CUDA graphs: TensorRT defers work to the first enqueue after a context is made or an input
shape changes; trtexec (`samples/common/sampleInference.cpp`, 8.5.2) therefore enqueues and
synchronizes once before capturing, and notes that under capture "the enqueue call may return
false if the current CUDA graph capture fails". The fake context does the same: an enqueue
under capture with that work pending invalidates the capture and returns False, and
`FakeRuntimeCuda.end_capture` then raises the CudaError cudaStreamEndCapture's error becomes
(no graph). A graph replayed while the context is prepared for another row count fails.
"""
from __future__ import annotations

import ctypes
import json
from enum import IntEnum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fakes.fake_cuda_host import XAVIER_NX, DeviceProperties, FakeHostCuda, FakeStream
from fakes.fake_tensorrt import ENGINE_MAGIC, FakeILogger, FakeTensorRT85, FakeTensorRT10, FakeTensorRT11, decode_engine

CENTERFACE_OUTPUTS = (("537", 1), ("538", 2), ("539", 2), ("540", 10))


# --- the fake CUDA host, with stream handles as TensorRT takes them ---------------------------


class FakeHandleStream(FakeStream):
    """A stream with an integer `handle`, as pycuda's Stream has (cuda-python's cudaStream_t
    converts with int()): the value TensorRT's `execute_async_v3(stream_handle)` takes."""

    def __init__(self, name: str, handle: int) -> None:
        super().__init__(name)
        self.handle = handle


class FakeRuntimeCuda(FakeHostCuda):
    """FakeHostCuda whose streams have handles the fake TensorRT can resolve."""

    def __init__(self, launcher: Any = None, props: DeviceProperties = XAVIER_NX, graphs: bool = True,
                 memory_limit: int = 4 << 30) -> None:
        super().__init__(launcher or _no_kernels, props=props, graphs=graphs, memory_limit=memory_limit)
        self.by_handle: Dict[int, FakeHandleStream] = {}
        self.invalidated: Dict[int, str] = {}  # id(stream) -> why its capture was invalidated

    def create_stream(self) -> FakeHandleStream:
        self.streams += 1
        stream = FakeHandleStream(f"stream{self.streams}", 0x5000 + self.streams)
        self._live_streams.add(id(stream))
        self.by_handle[stream.handle] = stream
        return stream

    def queue_host_op(self, stream: FakeStream, name: str, op: Callable[[], None]) -> None:
        """Queue (or, while the stream captures, record) work a library enqueues on a stream."""
        self._queue(stream, name, op)

    # A capture is invalidated by a call that is not permitted while the stream captures (a
    # synchronizing call, an allocation): CUDA then refuses the rest of the capture, and
    # cudaStreamEndCapture ends it with cudaErrorStreamCaptureInvalidated and no graph
    # (cuda_runtime_api.h). edge_sdk.cuda._cudapython raises that as a CudaError; so does this.
    def invalidate_capture(self, stream: FakeStream, why: str) -> None:
        assert stream.capture is not None, "only a capturing stream can be invalidated"
        self.invalidated[id(stream)] = why

    def end_capture(self, stream: FakeStream) -> Any:
        why = self.invalidated.pop(id(stream), None)
        graph = super().end_capture(stream)  # the stream leaves capture mode either way
        if why is None:
            return graph
        graph.ops = []  # no graph comes out of an invalidated capture
        from edge_sdk.errors import CudaError

        raise CudaError(f"cudaStreamEndCapture failed: cudaErrorStreamCaptureInvalidated (901): {why}")

    # GPU time: `clock_ms` advances as queued work runs (the fake engine adds its latency); an
    # event records the clock when its stream reaches it (cudaEventRecord / cudaEventElapsedTime).
    clock_ms = 0.0

    def record(self, event: Any, stream: FakeStream) -> None:
        event.done = False
        event.stream = stream

        def mark() -> None:
            event.done = True
            event.time_ms = self.clock_ms

        self._queue(stream, "record", mark)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(getattr(end, "time_ms", 0.0) - getattr(start, "time_ms", 0.0))


def _no_kernels(name: str, grid: Sequence[int], block: Sequence[int], params: int) -> None:
    raise AssertionError(f"no kernel {name} expected in this test")


# --- the network the fake engine runs -----------------------------------------------------------


class TinyCenterFace:
    """CenterFace's four outputs from a (N, 3, H, W) float32 input: heatmap "537" =
    sigmoid((mean of a 4x4 cell over the channels - 128) / 4); scale, offset and landmarks zero."""

    outputs = CENTERFACE_OUTPUTS

    def output_shapes(self, input_shape: Sequence[int]) -> Dict[str, Tuple[int, ...]]:
        n, _, h, w = input_shape
        return {name: (n, c, h // 4, w // 4) for name, c in self.outputs}

    def __call__(self, x: np.ndarray) -> Dict[str, np.ndarray]:
        n, c, h, w = x.shape
        cells = x[:, :, : h // 4 * 4, : w // 4 * 4].astype(np.float32).reshape(n, c, h // 4, 4, w // 4, 4)
        gray = cells.mean(axis=(3, 5)).mean(axis=1, keepdims=True)
        heat = (1.0 / (1.0 + np.exp(-(gray - np.float32(128.0)) * np.float32(0.25)))).astype(np.float32)
        out = {name: heat if name == "537" else np.zeros((n, ch, h // 4, w // 4), np.float32) for name, ch in self.outputs}
        return out  # in the order the engine lists its outputs (self.outputs), which may not be the manifest's


def engine_kind(record: Dict[str, Any]) -> str:
    """What an engine the fake builder wrote computes in: "int8" (the INT8 flag or a Q/DQ model),
    "fp16" (the FP16 flag or an FP16 model) or "fp32"."""
    flags = set(record.get("flags") or [])
    types_ = record.get("model_types")
    if "INT8" in flags or types_ == "qdq":
        return "int8"
    if "FP16" in flags or types_ == "fp16":
        return "fp16"
    return "fp32"


def engine_bytes(trt: Any, inputs: Sequence[Dict[str, Any]], **record: Any) -> bytes:
    """Engine bytes in the fake builder's format (ENGINE_MAGIC + JSON record), for engines the
    builder fakes do not make (an optimization profile, another device or version)."""
    doc: Dict[str, Any] = {"tensorrt": trt.__version__, "model": "model.onnx", "inputs": list(inputs),
                           "device_type": "GPU", "dla_core": -1}
    doc.update(record)
    return ENGINE_MAGIC + json.dumps(doc, sort_keys=True).encode()


# --- the runtime API ----------------------------------------------------------------------------


class FakeDims(tuple):
    """`tensorrt.Dims`: a sequence of ints (pyFoundationalTypes.cpp binds it as a sequence)."""


class FakeRuntime:
    """`tensorrt.Runtime(logger)` (pyCore.cpp `py::class_<IRuntime>`)."""

    trt: "RuntimeMixin"

    def __init__(self, logger: Any) -> None:
        if not isinstance(logger, FakeILogger) or not getattr(logger, "_fake_initialized", False):
            raise TypeError("Runtime(): logger must be a tensorrt.ILogger whose __init__ was called")
        self.trt.null_factory("Runtime", logger)
        self.logger = self.trt.adopt_logger(self, logger, "createInferRuntime")
        # IRuntime::setDLACore / getDLACore (pyCore.cpp: def_property "DLA_core"); NvInferRuntime.h
        # (8.5.2) getDLACore: "-1 for DLA not present or unset", the value a new runtime has
        self.DLA_core = -1

    def deserialize_cuda_engine(self, serialized_engine: Any) -> Optional["FakeEngine"]:
        """pyCoreDoc.h (8.5.2) RuntimeDoc::deserialize_cuda_engine: "The ICudaEngine, or None if it
        could not be deserialized"; the reason goes to the logger (NvInferRuntime.h
        IRuntime::deserializeCudaEngine returns nullptr)."""
        trt = self.trt
        data = bytes(serialized_engine)
        trt.calls["deserialize"].append(len(data))
        try:
            record = decode_engine(data)
        except (AssertionError, ValueError, UnicodeDecodeError):
            self._error("1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization (Serialization "
                        "assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)")
            return None
        if record.get("tensorrt") != trt.__version__:
            self._error(f"6: The engine plan file is not compatible with this version of TensorRT, expecting library "
                        f"version {trt.__version__} got {record.get('tensorrt')}, please rebuild.")
            return None
        device = record.get("device", trt.device_name)
        if device != trt.device_name:
            self._error(f"6: The engine plan file is generated on an incompatible device ({device}), this device is "
                        f"{trt.device_name}, please rebuild.")
            return None
        if record.get("device_type") == "DLA" and not 0 <= self.DLA_core < trt.num_dla_cores:
            if self.DLA_core == -1:
                self._error("1: [runtime.cpp::deserializeCudaEngine] Error Code 1: DLA engine deserialized "
                            "without a DLA core: set Runtime.DLA_core first (IRuntime::setDLACore)")
            else:
                self._error(f"DLA core {self.DLA_core} is not available ({trt.num_dla_cores} DLA cores)")
            return None
        return trt._engine_class(record, self)

    def _error(self, msg: str) -> None:
        self.trt.error(msg)


class FakeEngine:
    """`tensorrt.ICudaEngine` (pyCore.cpp `py::class_<ICudaEngine>`): the name-based tensor API
    (num_io_tensors, get_tensor_name/mode/shape/dtype, get_tensor_profile_shape) of 8.5+."""

    trt: "RuntimeMixin"

    def __init__(self, record: Dict[str, Any], runtime: FakeRuntime) -> None:
        self.record = record
        self.runtime = runtime
        trt = self.trt
        self.dla_core = runtime.DLA_core if record.get("device_type") == "DLA" else None
        self.network = trt.network
        profiles = record.get("profiles") or []
        self._inputs: Dict[str, Tuple[int, ...]] = {i["name"]: tuple(int(d) for d in i["shape"]) for i in record["inputs"]}
        self._profiles: List[Dict[str, List[Tuple[int, ...]]]] = [
            {name: [tuple(int(d) for d in s) for s in shapes] for name, shapes in p.items()} for p in profiles
        ]
        for name, shape in self._inputs.items():
            if -1 in shape and not any(name in p for p in self._profiles):
                raise AssertionError(f"fake engine: dynamic input {name} needs an optimization profile")
        # Outputs: the network's, for the inputs' shapes with dynamic dims as -1.
        first = next(iter(self._inputs.values()))
        self._outputs = {name: tuple(-1 if first[0] == -1 and k == 0 else d for k, d in enumerate(shape))
                         for name, shape in self.network.output_shapes(first).items()}
        self._dtypes = {n: trt.DataType.FLOAT for n in list(self._inputs) + list(self._outputs)}
        if "input_dtypes" in record:
            for n, t in record["input_dtypes"].items():
                self._dtypes[n] = trt.DataType[t]
        self.contexts: List["FakeContext"] = []

    @property
    def num_io_tensors(self) -> int:
        return len(self._inputs) + len(self._outputs)

    def get_tensor_name(self, index: int) -> str:
        names = list(self._inputs) + list(self._outputs)
        return names[index]

    def get_tensor_mode(self, name: str) -> Any:
        mode = self.trt.TensorIOMode
        return mode.INPUT if name in self._inputs else (mode.OUTPUT if name in self._outputs else mode.NONE)

    def get_tensor_shape(self, name: str) -> FakeDims:
        return FakeDims(self._inputs.get(name) or self._outputs[name])

    def get_tensor_dtype(self, name: str) -> Any:
        return self._dtypes[name]

    @property
    def num_optimization_profiles(self) -> int:
        return max(1, len(self._profiles))

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> List[FakeDims]:
        """pyCore.cpp (8.5.2) lambdas::get_tensor_profile_shape: [min, opt, max] from
        ICudaEngine::getProfileShape with kMIN, kOPT, kMAX."""
        if profile_index < len(self._profiles) and name in self._profiles[profile_index]:
            return [FakeDims(s) for s in self._profiles[profile_index][name]]
        shape = self.get_tensor_shape(name)
        return [shape, shape, shape]  # a static input's "profile" is its own shape

    def create_execution_context(self, *args: Any, **kwargs: Any) -> "FakeContext":
        context = self.trt._context_class(self)
        self.contexts.append(context)
        return context


class FakeContext:
    """`tensorrt.IExecutionContext` (pyCore.cpp `py::class_<IExecutionContext>`)."""

    trt: "RuntimeMixin"

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.addresses: Dict[str, int] = {}
        self.shapes: Dict[str, Tuple[int, ...]] = {n: s for n, s in engine._inputs.items() if -1 not in s}
        self.runs = 0  # enqueued runs that executed
        self.enqueues = 0  # execute_async_v3 calls that returned True
        self.last_rows: Optional[int] = None
        # TensorRT defers work to the first enqueue after the context is made or an input shape
        # changes (sampleInference.cpp 8.5.2 enqueues and synchronizes once before capturing "to
        # avoid capturing initialization calls"); that work is not permitted under stream capture.
        self.pending = True  # no plain enqueue since creation or the last shape change
        self.prepared_rows: Optional[int] = None  # the rows the last plain enqueue prepared for

    def set_tensor_address(self, name: str, memory: int) -> bool:
        """NvInferRuntime.h (8.5.2) IExecutionContext::setTensorAddress: "Return false if the
        provided name does not map to an input or output tensor"."""
        self.trt.calls["set_tensor_address"].append((name, int(memory)))
        if self.engine.get_tensor_mode(name) == self.trt.TensorIOMode.NONE:
            self.trt.error(f"3: setTensorAddress given invalid tensor name: {name}")
            return False
        self.addresses[name] = int(memory)
        return True

    def set_input_shape(self, name: str, shape: Sequence[int]) -> bool:
        """NvInferRuntime.h (8.5.2) IExecutionContext::setInputShape: false if the name is not an
        input or an error occurred; each dimension must agree with the network's unless that is
        -1, and lie within the optimization profile (setBindingDimensions' contract)."""
        self.trt.calls["set_input_shape"].append((name, tuple(shape)))
        if name not in self.engine._inputs:
            self.trt.error(f"3: setInputShape given invalid tensor name: {name}")
            return False
        declared = self.engine._inputs[name]
        shape = tuple(int(d) for d in shape)
        lo, _, hi = self.engine.get_tensor_profile_shape(name, 0)
        if len(shape) != len(declared) or any(d != -1 and d != s for d, s in zip(declared, shape)):
            self.trt.error(f"3: setInputShape: {list(shape)} does not match the network's {list(declared)}")
            return False
        if any(s < a or s > b for s, a, b in zip(shape, lo, hi)):
            self.trt.error(f"3: setInputShape: {list(shape)} is outside the optimization profile [{list(lo)}, {list(hi)}]")
            return False
        if self.shapes.get(name) != shape:
            self.pending = True
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> FakeDims:
        if name in self.engine._inputs:
            return FakeDims(self.shapes.get(name, self.engine._inputs[name]))
        first = next(iter(self.engine._inputs))
        if first not in self.shapes:
            return self.engine.get_tensor_shape(name)
        return FakeDims(self.engine.network.output_shapes(self.shapes[first])[name])

    def execute_async_v3(self, stream_handle: int) -> bool:
        """pyCore.cpp (8.5.2) lambdas::execute_async_v3 -> IExecutionContext::enqueueV3: "True if
        the kernels were enqueued successfully, false otherwise" (pyCoreDoc.h). False here, with
        the reason logged as TensorRT logs it, when a tensor has no address, a dynamic input has no
        shape, or the engine refuses stream capture (`capturable=False`)."""
        trt = self.trt
        trt.calls["execute_async_v3"].append(int(stream_handle))
        if not isinstance(stream_handle, int):
            raise TypeError("execute_async_v3(): incompatible function arguments (stream_handle: int)")
        stream = trt.cuda.by_handle.get(stream_handle)
        assert stream is not None, f"unknown stream handle {stream_handle:#x}"
        engine = self.engine
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            if name not in self.addresses:
                trt.error(f"3: [executionContext.cpp::enqueueV3::2666] Error Code 3: API Usage Error (Parameter "
                          f"check failed at: ... Address is not set for tensor {name})")
                return False
        for name in engine._inputs:
            if name not in self.shapes:
                trt.error(f"3: [executionContext.cpp::enqueueV3] Error Code 3: API Usage Error (input {name} has a "
                          "dynamic shape and set_input_shape was not called)")
                return False
        if stream.capture is not None and not trt.capturable:
            trt.error("1: [executionContext.cpp::enqueueV3] Error Code 1: Cuda Runtime (operation not permitted when "
                      "stream is capturing)")
            return False
        if stream.capture is not None and self.pending:
            # the deferred work synchronizes: not permitted while capturing, and it invalidates the capture
            trt.cuda.invalidate_capture(stream, "a synchronizing call was made while the stream was capturing")
            trt.error("1: [executionContext.cpp::enqueueV3] Error Code 1: Cuda Runtime (operation not permitted when "
                      "stream is capturing)")
            return False
        if trt.fail_execute:
            trt.error(trt.fail_execute)
            return False
        name_in = next(iter(engine._inputs))
        shape = self.shapes[name_in]
        dtype = np.float16 if self.engine._dtypes[name_in] == trt.DataType.HALF else np.float32
        in_addr = self.addresses[name_in]
        out_addrs = {n: self.addresses[n] for n in engine._outputs}
        network = engine.network
        kind = engine_kind(engine.record)
        captured = stream.capture is not None
        if not captured:
            self.pending, self.prepared_rows = False, shape[0]

        def run() -> None:
            if captured and self.prepared_rows != shape[0]:
                # A graph holds the kernels of one shape; what TensorRT prepared at the plain
                # enqueue after a shape change is not in it. Replaying it while the context is
                # prepared for another shape computes garbage on a GPU: the fake refuses.
                raise AssertionError(f"replayed a graph captured for {shape[0]} row(s) while the context is prepared "
                                     f"for {self.prepared_rows}: enqueue plainly after a shape change")
            # Reads the input when the stream reaches it, as the GPU would.
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            x = np.frombuffer(ctypes.string_at(in_addr, nbytes), dtype=dtype).reshape(shape).astype(np.float32)
            trt.inputs_seen.append(x.copy())
            results = network(x)
            if kind in trt.distort:
                results = trt.distort[kind](results)
            trt.cuda.clock_ms += trt.run_time_ms(kind)
            for out_name, value in results.items():
                data = np.ascontiguousarray(value, np.float32)
                ctypes.memmove(out_addrs[out_name], data.ctypes.data, data.nbytes)
            self.runs += 1

        trt.cuda.queue_host_op(stream, f"trt:enqueue:{shape[0]}", run)
        self.enqueues += 1
        self.last_rows = shape[0]
        return True


# --- the module objects -------------------------------------------------------------------------


class RuntimeMixin:
    """Adds the runtime API to a builder fake. `cuda`: the FakeRuntimeCuda whose streams
    `execute_async_v3` resolves; `network`: what the engine computes; `capturable=False`: the
    engine refuses CUDA stream capture; `fail_execute`: a message execute_async_v3 logs before
    returning False."""

    BINDINGS_API = True  # num_bindings, get_binding_*, execute_async_v2 (removed in 10)
    CONTEXT_WITHOUT_DEVICE_MEMORY = True  # removed in 11

    calls: Dict[str, List[Any]]
    device_name: str
    num_dla_cores: int
    __version__: str

    def _add_runtime(self, cuda: Optional[FakeRuntimeCuda], network: Any, capturable: bool) -> None:
        # Per engine kind (engine_kind: "fp32", "fp16" or "int8"): GPU milliseconds one run takes
        # (a number, or a list of numbers the runs take in turn, cycled: jitter and outliers, as a
        # real GPU's clocks and other processes give them), and a function applied to the
        # network's outputs (a reduced precision's error).
        self.latency_ms: Dict[str, Any] = {}
        self.runs_of: Dict[str, int] = {}
        self.distort: Dict[str, Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]] = {}
        self.cuda = cuda if cuda is not None else FakeRuntimeCuda()
        self.network = network if network is not None else TinyCenterFace()
        self.capturable = capturable
        self.fail_execute: Optional[str] = None
        self.inputs_seen: List[np.ndarray] = []
        self.TensorIOMode = IntEnum("TensorIOMode", [("NONE", 0), ("INPUT", 1), ("OUTPUT", 2)])
        self.Runtime = type("Runtime", (FakeRuntime,), {"trt": self})
        engine_ns: Dict[str, Any] = {"trt": self}
        context_ns: Dict[str, Any] = {"trt": self}
        if self.BINDINGS_API:
            engine_ns["num_bindings"] = property(lambda e: e.num_io_tensors)
            engine_ns["get_binding_name"] = FakeEngine.get_tensor_name
            context_ns["execute_async_v2"] = _removed_in_tests("execute_async_v2")
        if self.CONTEXT_WITHOUT_DEVICE_MEMORY:
            engine_ns["create_execution_context_without_device_memory"] = _removed_in_tests(
                "create_execution_context_without_device_memory")
        self._engine_class = type("ICudaEngine", (FakeEngine,), engine_ns)
        self._context_class = type("IExecutionContext", (FakeContext,), context_ns)

    def run_time_ms(self, kind: str) -> float:
        """The GPU time of the next run of an engine of this kind (see latency_ms)."""
        spent = self.latency_ms.get(kind, 0.0)
        k = self.runs_of.get(kind, 0)
        self.runs_of[kind] = k + 1
        return float(spent) if isinstance(spent, (int, float)) else float(spent[k % len(spent)])

    # engine_bytes for this fake's version and device
    def engine(self, inputs: Sequence[Dict[str, Any]], **record: Any) -> bytes:
        record.setdefault("device", self.device_name)
        return engine_bytes(self, inputs, **record)


def _removed_in_tests(name: str) -> Callable[..., Any]:
    def member(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{name} exists in this TensorRT, but edge_sdk must use the tensor API")

    return member


class FakeTensorRTRuntime85(FakeTensorRT85, RuntimeMixin):
    def __init__(self, cuda: Optional[FakeRuntimeCuda] = None, network: Any = None, capturable: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._add_runtime(cuda, network, capturable)


class FakeTensorRTRuntime10(FakeTensorRT10, RuntimeMixin):
    BINDINGS_API = False

    def __init__(self, cuda: Optional[FakeRuntimeCuda] = None, network: Any = None, capturable: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._add_runtime(cuda, network, capturable)


class FakeTensorRTRuntime11(FakeTensorRT11, RuntimeMixin):
    BINDINGS_API = False
    CONTEXT_WITHOUT_DEVICE_MEMORY = False

    def __init__(self, cuda: Optional[FakeRuntimeCuda] = None, network: Any = None, capturable: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._add_runtime(cuda, network, capturable)


RUNTIME_FAKES = {"8.5": FakeTensorRTRuntime85, "10": FakeTensorRTRuntime10, "11": FakeTensorRTRuntime11}
