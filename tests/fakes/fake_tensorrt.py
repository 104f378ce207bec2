"""Fake `tensorrt` modules for tests. They prove edge_sdk's logic, not TensorRT's behaviour.

Each fake is a module object to put in `sys.modules["tensorrt"]` (monkeypatch.setitem). The
members follow the real API of each version; where a member is faked, the comment names the
file of the TensorRT open-source repository (github.com/NVIDIA/TensorRT, at the tag given)
that it follows. Those files were read to write this; nothing is copied from them.

* [H85] `include/NvInfer.h`, `include/NvInferRuntime.h`, `include/NvInferRuntimeCommon.h` at 8.5.2
* [H10] `include/NvInfer.h`, `include/NvInferRuntimeBase.h` at v10.3.0
* [H11] `include/NvInfer.h` at v11.0
* [PyCore] `python/src/infer/pyCore.cpp` (Builder, IBuilderConfig, IOptimizationProfile,
  Runtime, ICudaEngine, EngineInspector), at the tag of each version
* [PyGraph] `python/src/infer/pyGraph.cpp` (INetworkDefinition, ILayer, ITensor)
* [PyInt8] `python/src/infer/pyInt8.cpp` (the calibrator trampolines)
* [PyOnnx] `python/src/parsers/pyOnnx.cpp` (OnnxParser: parse, parse_from_file, num_errors, get_error)

What each version has, as those files say:

* FakeTensorRT85 (JetPack 5.1): the ONNX parser needs an EXPLICIT_BATCH network; FP16/INT8
  builder flags; IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator and `config.int8_calibrator`;
  layer precision constraints with OBEY/PREFER_PRECISION_CONSTRAINTS; `platform_has_fast_int8`.
* FakeTensorRT10 (10.3): EXPLICIT_BATCH is deprecated (using it logs a warning the tests look
  for), STRONGLY_TYPED exists, a calibrator still works but logs a deprecation warning.
* FakeTensorRT11 (11.0): no EXPLICIT_BATCH; BuilderFlag has no FP16, INT8,
  OBEY_PRECISION_CONSTRAINTS or PREFER_PRECISION_CONSTRAINTS; no calibrator classes, no
  `config.int8_calibrator`, no `ILayer.precision` / `set_output_type`, no
  `Builder.platform_has_fast_int8`. Every network is strongly typed: STRONGLY_TYPED is still an
  enum member (value 0, where 10 has 1) but deprecated and ignored, and using it logs a warning.

Loggers: TensorRT 8.x keeps the first ILogger handed to a Builder or Runtime while any of them
lives (NVIDIA/TensorRT #1475); a different logger given to a later one receives nothing, and
the kept logger hears the warning TensorRT prints for it. The fakes do the same
(`FakeTensorRT.adopt_logger`): every message goes to the kept logger only.

Calibrator callbacks go through trampolines that behave as [PyInt8] 8.5.2's: an exception
raised in `get_batch_size`, `get_batch`, `read_calibration_cache` or `write_calibration_cache`
is caught, printed to stderr as `[ERROR] Exception caught in get_batch(): ...`, and TensorRT
sees -1 / "no more batches" / "no cache" / nothing. The trampoline copies as many pointers as
the network has inputs out of what `get_batch` returned (real TensorRT reads past a shorter
list); the fake fails the calibration instead, and checks each pointer names device memory
large enough for that input's batch.

"ONNX" files for the fake are small JSON documents (`fake_model()`): a name, the model's
types ("fp32", "fp16" or "qdq"), inputs and layers (names, or dicts with a name, a LayerType,
`shape_output` and `no_fp32`). The parser also reads real ONNX files (with the `onnx`
package, on the host): the graph's inputs and one layer per node, named after the node, so
that a bundle written by `edge-sdk build` can go through the engine builder.
`build_serialized_network` returns deterministic bytes encoding everything that was
configured (`decode_engine()` reads them back), or None after logging an error, as TensorRT
does, when the configuration is one the real TensorRT rejects. `Runtime` deserializes them
into an engine whose inspector reports per-layer precision and device as JSON.
"""
from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
import types
import weakref
from collections import defaultdict
from enum import IntEnum
from typing import Any, Dict, List, Optional, Sequence, Set, Union

import numpy as np

from edge_sdk.trt.calibrator import DeviceBuffer

ENGINE_MAGIC = b"FAKE-TRT-ENGINE\n"
TIMING_MAGIC = b"FAKE-TIMING-CACHE\n"

# [H85]/[H10] NvInfer.h: the warning TensorRT logs for a tensor the calibration cache has no scale for.
MISSING_SCALE = ("Missing scale and zero-point for tensor {name}, expect fall back to non-int8 implementation "
                 "for any layer consuming or producing given tensor")

LayerSpec = Union[str, Dict[str, Any]]


def fake_model(
    name: str = "model.onnx",
    types_: str = "fp32",
    inputs: Sequence[Dict[str, Any]] = ({"name": "input.1", "shape": [1, 3, 8, 8]},),
    layers: Sequence[LayerSpec] = ("conv1", "relu1", "conv2", "conv2_7", "head"),
    dla_unsupported: Sequence[str] = ("head",),
    float_layers: Sequence[str] = (),
) -> bytes:
    """The bytes of a model file the fake parser understands. A layer is a name or a dict
    {"name", "type" (a LayerType name), "shape_output" (its output is a shape tensor),
    "no_fp32" (TensorRT has no FP32 kernel for it)}. In a "qdq" model every layer is quantized
    except `float_layers`."""
    doc = {"fake_onnx": 1, "name": name, "types": types_, "inputs": list(inputs), "layers": list(layers),
           "dla_unsupported": list(dla_unsupported), "float_layers": list(float_layers)}
    return json.dumps(doc, sort_keys=True).encode()


def decode_engine(data: bytes) -> Dict[str, Any]:
    assert data.startswith(ENGINE_MAGIC), data[:40]
    return json.loads(data[len(ENGINE_MAGIC):].decode())


# --- fake device memory (what cuda-python / pycuda would allocate) ------------------------------


class FakeDeviceBuffer(DeviceBuffer):
    def __init__(self, memory: "FakeDeviceMemory", nbytes: int) -> None:
        self.memory = memory
        self.nbytes = nbytes
        self.ptr = memory._next
        memory._next += 0x1000 + nbytes
        memory.blocks[self.ptr] = bytearray(nbytes)

    def upload(self, host: np.ndarray) -> None:
        assert host.nbytes == self.nbytes and host.flags["C_CONTIGUOUS"]
        self.memory.blocks[self.ptr][:] = host.tobytes()
        self.memory.uploads += 1

    def free(self) -> None:
        del self.memory.blocks[self.ptr]
        self.memory.freed += 1
        self.ptr = 0


class FakeDeviceMemory:
    """Stands in for cudaMalloc/cudaMemcpy; the fake builder reads batches back from it.

    Any object with `size_of(ptr)` and `read(ptr, shape)` can take its place as
    `FakeTensorRT.device_memory` (e.g. one reading FakeHostCuda's memory)."""

    def __init__(self) -> None:
        self.blocks: Dict[int, bytearray] = {}
        self._next = 0x7F0000000000
        self.allocations = 0
        self.uploads = 0
        self.freed = 0
        self.events: List[str] = []  # "alloc:<nbytes>", in order (shared with the fake TensorRT's calls)

    def allocate(self, nbytes: int) -> FakeDeviceBuffer:
        self.allocations += 1
        self.events.append(f"alloc:{nbytes}")
        return FakeDeviceBuffer(self, nbytes)

    def size_of(self, ptr: int) -> Optional[int]:
        block = self.blocks.get(int(ptr))
        return None if block is None else len(block)

    def read(self, ptr: int, shape: Sequence[int]) -> np.ndarray:
        return np.frombuffer(bytes(self.blocks[ptr]), dtype=np.float32).reshape(shape)


# --- pieces shared by every version --------------------------------------------------------------


class FakeILogger:
    # [H85] NvInferRuntimeCommon.h ILogger::Severity
    class Severity(IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    INTERNAL_ERROR = Severity.INTERNAL_ERROR
    ERROR = Severity.ERROR
    WARNING = Severity.WARNING
    INFO = Severity.INFO
    VERBOSE = Severity.VERBOSE

    def __init__(self) -> None:
        self._fake_initialized = True

    def log(self, severity: Any, msg: str) -> None:  # overridden
        raise NotImplementedError


class FakeLogger(FakeILogger):
    def __init__(self, min_severity: Any = FakeILogger.Severity.WARNING) -> None:
        FakeILogger.__init__(self)
        self.min_severity = min_severity
        self.messages: List[str] = []

    def log(self, severity: Any, msg: str) -> None:
        if severity <= self.min_severity:
            self.messages.append(f"{severity.name}: {msg}")


class FakeIProgressMonitor:
    """[H10] IProgressMonitor (TensorRT >= 10 here; 8.5 has none): a pybind11 trampoline whose
    `__init__` must be called; the builder calls phase_start(name, parent, steps),
    step_complete(name, step) -> bool (False cancels the build) and phase_finish(name)."""

    def __init__(self) -> None:
        self._fake_initialized = True


class FakeIInt8Calibrator:
    """[PyInt8] IInt8Calibrator and subclasses: `__init__` must be called (pybind11 checks it)."""

    ALGORITHM = "Legacy"

    def __init__(self) -> None:
        self._fake_initialized = True


class FakeIInt8EntropyCalibrator2(FakeIInt8Calibrator):
    ALGORITHM = "EntropyCalibration2"


class FakeIInt8MinMaxCalibrator(FakeIInt8Calibrator):
    ALGORITHM = "MinMaxCalibration"


def _trampoline(calibrator: Any, method: str, failed: Any, *args: Any) -> Any:
    """[PyInt8] 8.5.2 pyCalibratorTrampoline: the Python override runs inside try/catch; an
    exception is printed to stderr and TensorRT gets the failure value."""
    try:
        return getattr(calibrator, method)(*args)
    except Exception as exc:  # as the trampoline's catch (std::exception const& e)
        print(f"[ERROR] Exception caught in {method}(): {exc}", file=sys.stderr)
        return failed


class FakeTensor:
    """[PyGraph] ITensor: name, dtype, shape, is_shape_tensor, is_execution_tensor."""

    def __init__(self, name: str, dtype: Any, shape: Sequence[int] = (), shape_tensor: bool = False) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.is_shape_tensor = shape_tensor
        self.is_execution_tensor = not shape_tensor


class FakeLayer:
    """[PyGraph] ILayer without the precision API (TensorRT 11): name, type, outputs."""

    def __init__(self, trt: "FakeTensorRT", name: str, type_: Any, dtype: Any, outputs: Sequence[str],
                 shape_output: bool = False, no_fp32: bool = False) -> None:
        self.name = name
        self.type = type_
        self.no_fp32 = no_fp32
        out_dtype = trt.int32 if shape_output else dtype
        self._outputs = [FakeTensor(o, out_dtype, shape_tensor=shape_output) for o in outputs]
        self._dtype = dtype
        self._precision = dtype
        self.precision_is_set_ = False
        self.output_types: Dict[int, Any] = {}

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_output(self, i: int) -> FakeTensor:
        return self._outputs[i]

    @property
    def constrained(self) -> bool:
        return self.precision_is_set_ or bool(self.output_types)


class FakeLayerWithPrecision(FakeLayer):
    """[PyGraph] 8.5.2 / v10.3.0 ILayer: precision, precision_is_set, reset_precision,
    set_output_type, get_output_type, output_type_is_set."""

    @property
    def precision(self) -> Any:
        return self._precision

    @precision.setter
    def precision(self, dtype: Any) -> None:
        self._precision = dtype
        self.precision_is_set_ = True

    @property
    def precision_is_set(self) -> bool:
        return self.precision_is_set_

    def reset_precision(self) -> None:
        self._precision = self._dtype
        self.precision_is_set_ = False

    def set_output_type(self, i: int, dtype: Any) -> None:
        if not 0 <= i < self.num_outputs:
            raise IndexError(i)
        self.output_types[i] = dtype

    def get_output_type(self, i: int) -> Any:
        return self.output_types.get(i, self._outputs[i].dtype)

    def output_type_is_set(self, i: int) -> bool:
        return i in self.output_types


class FakeNetwork:
    """[PyGraph] INetworkDefinition: num_layers, get_layer, num_inputs, get_input."""

    def __init__(self, trt: "FakeTensorRT", flags: int) -> None:
        self.trt = trt
        self.flags = flags
        self.explicit_batch = trt.EXPLICIT_BATCH != "required" or bool(flags & 1)
        if trt.ALWAYS_STRONGLY_TYPED:
            self.strongly_typed = True
        else:
            self.strongly_typed = trt.STRONGLY_TYPED and bool(flags & (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)))
        self.model: Optional[Dict[str, Any]] = None
        self.layers: List[FakeLayer] = []
        self.inputs: List[FakeTensor] = []

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def get_layer(self, i: int) -> FakeLayer:
        return self.layers[i]

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def get_input(self, i: int) -> FakeTensor:
        return self.inputs[i]


class FakeParserError:
    def __init__(self, desc: str) -> None:
        self._desc = desc

    def desc(self) -> str:
        return self._desc

    def __str__(self) -> str:
        return f"In node -1 (parseGraph): INVALID_GRAPH: {self._desc}"


# ONNX operator -> TensorRT LayerType name, for the real-ONNX parse (what the ONNX parser builds).
_ONNX_LAYER_TYPES = {
    "Conv": "CONVOLUTION", "ConvTranspose": "DECONVOLUTION", "Relu": "ACTIVATION", "LeakyRelu": "ACTIVATION",
    "Sigmoid": "ACTIVATION", "Tanh": "ACTIVATION", "Clip": "ACTIVATION", "MaxPool": "POOLING", "AveragePool": "POOLING",
    "GlobalAveragePool": "REDUCE", "Concat": "CONCATENATION", "Add": "ELEMENTWISE", "Mul": "ELEMENTWISE",
    "Sub": "ELEMENTWISE", "Div": "ELEMENTWISE", "Reshape": "SHUFFLE", "Transpose": "SHUFFLE", "Flatten": "SHUFFLE",
    "Constant": "CONSTANT", "Shape": "SHAPE", "Resize": "RESIZE", "Upsample": "RESIZE", "Softmax": "SOFTMAX",
    "BatchNormalization": "SCALE", "Slice": "SLICE", "Identity": "IDENTITY", "Gather": "GATHER",
    "QuantizeLinear": "QUANTIZE", "DequantizeLinear": "DEQUANTIZE", "MatMul": "MATRIX_MULTIPLY", "Gemm": "MATRIX_MULTIPLY",
}


class FakeOnnxParser:
    """[PyOnnx] OnnxParser(network, logger): parse, parse_from_file, num_errors, get_error."""

    trt: "FakeTensorRT"

    def __init__(self, network: FakeNetwork, logger: Any) -> None:
        assert isinstance(network, FakeNetwork)
        self.network = network
        self.logger = logger
        self.errors: List[FakeParserError] = []

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, i: int) -> FakeParserError:
        return self.errors[i]

    def parse_from_file(self, path: str) -> bool:
        self.trt.calls["parse_from_file"].append(path)
        with open(path, "rb") as f:
            return self._parse(f.read(), os.path.basename(path))

    def parse(self, model: bytes, path: Optional[str] = None) -> bool:
        self.trt.calls["parse"].append(path)
        return self._parse(bytes(model))

    def _parse(self, data: bytes, filename: Optional[str] = None) -> bool:
        if not self.network.explicit_batch:
            # TensorRT 8.x: the ONNX parser only supports explicit-batch networks.
            self.errors.append(FakeParserError("Network must have explicit batch dimension (EXPLICIT_BATCH flag)"))
            return False
        if not data.lstrip().startswith(b"{") and _onnx() is not None:
            return self._parse_onnx(data, filename)
        try:
            doc = json.loads(data.decode())
            assert doc.get("fake_onnx") == 1
        except (ValueError, AssertionError, UnicodeDecodeError):
            self.errors.append(FakeParserError("Failed to parse ONNX model: not a protobuf"))
            return False
        trt = self.trt
        dtype = trt.float16 if doc["types"] == "fp16" else trt.float32
        specs = [l if isinstance(l, dict) else {"name": l} for l in doc["layers"]]
        doc["layers"] = [s["name"] for s in specs]
        doc.setdefault("float_layers", [])
        doc["quantized"] = [s["name"] for s in specs if s["name"] not in doc["float_layers"]] if doc["types"] == "qdq" else []
        self.network.model = doc
        self.network.inputs = [FakeTensor(i["name"], trt.float32, i["shape"]) for i in doc["inputs"]]
        self.network.layers = [
            trt._layer(s["name"], trt.LayerType[s.get("type", "CONVOLUTION")], dtype, [s.get("output", s["name"])],
                       bool(s.get("shape_output")), bool(s.get("no_fp32")))
            for s in specs
        ]
        return True

    def _parse_onnx(self, data: bytes, filename: Optional[str]) -> bool:
        """A real ONNX model, read with `onnx` (host only): the network gets the graph's real
        inputs (those that are not initializers) with their shapes (-1 for a symbolic dim), and
        one layer per node named as TensorRT's parser names them: after the node (an unnamed
        node gets a placeholder that no list of fallback layers can name). Outputs of Shape
        nodes, and of nodes computing only from shape tensors and weights, are shape tensors."""
        onnx = _onnx()
        try:
            model = onnx.load_from_string(data)
            onnx.checker.check_model(model)
        except Exception as exc:  # onnx raises DecodeError / ValidationError
            self.errors.append(FakeParserError(f"Failed to parse ONNX model: not a protobuf, or not a valid model ({exc})"))
            return False
        trt = self.trt
        graph = model.graph
        weights = {init.name for init in graph.initializer}
        ops = [n.op_type for n in graph.node]
        elem = {i.name: i.type.tensor_type.elem_type for i in graph.input}
        if "QuantizeLinear" in ops:
            types_ = "qdq"
        elif onnx.TensorProto.FLOAT16 in {init.data_type for init in graph.initializer}:
            types_ = "fp16"
        else:
            types_ = "fp32"
        inputs = [
            {"name": i.name, "shape": [d.dim_value if d.HasField("dim_value") else -1 for d in i.type.tensor_type.shape.dim]}
            for i in graph.input if i.name not in weights
        ]
        unnamed = [n.op_type for n in graph.node if not n.name]
        layers = [n.name if n.name else f"(Unnamed Layer* {k}) [{n.op_type}]" for k, n in enumerate(graph.node)]
        shape_tensors: Set[str] = set()
        producer: Dict[str, str] = {}
        for node in graph.node:
            data_inputs = [i for i in node.input if i and i not in weights]
            if node.op_type == "Shape" or (data_inputs and all(i in shape_tensors for i in data_inputs)):
                shape_tensors.update(node.output)
            for out in node.output:
                producer[out] = node.op_type
        quantized = [name for name, node in zip(layers, graph.node)
                     if node.op_type not in ("QuantizeLinear", "DequantizeLinear")
                     and any(producer.get(i) == "DequantizeLinear" for i in node.input)]
        self.network.model = {"fake_onnx": 0, "name": filename or graph.name, "types": types_, "inputs": inputs,
                              "layers": layers, "dla_unsupported": [], "outputs": [o.name for o in graph.output],
                              "unnamed_nodes": unnamed, "input_elem_types": elem, "quantized": quantized, "float_layers": []}
        self.network.inputs = [FakeTensor(i["name"], trt.float32, i["shape"]) for i in inputs]
        dtype = trt.float16 if types_ == "fp16" else trt.float32
        self.network.layers = [
            trt._layer(name, trt.LayerType[_ONNX_LAYER_TYPES.get(node.op_type, "ELEMENTWISE")], dtype,
                       list(node.output), bool(node.output) and all(o in shape_tensors for o in node.output))
            for name, node in zip(layers, graph.node)
        ]
        return True


def _onnx() -> Any:
    """The onnx package where installed (the host), else None: the device test set has no onnx."""
    try:
        import onnx
    except ImportError:
        return None
    return onnx


class FakeTimingCache:
    """[PyCore] ITimingCache: serialize()."""

    def __init__(self, device: str, entries: List[str]) -> None:
        self.device = device
        self.entries = list(entries)

    def serialize(self) -> bytes:
        return TIMING_MAGIC + json.dumps({"device": self.device, "entries": self.entries}).encode()


class FakeHostMemory(bytes):
    @property
    def nbytes(self) -> int:
        return len(self)


class FakeOptimizationProfile:
    """[PyCore] IOptimizationProfile: set_shape(input, min, opt, max) raises RuntimeError when
    the three shapes disagree (rank, or min <= opt <= max per dim); get_shape(input)."""

    def __init__(self) -> None:
        self.shapes: Dict[str, List[List[int]]] = {}

    def set_shape(self, input: str, min: Sequence[int], opt: Sequence[int], max: Sequence[int]) -> None:  # noqa: A002
        lo, mid, hi = (list(map(int, s)) for s in (min, opt, max))
        if not len(lo) == len(mid) == len(hi):
            raise RuntimeError("Shape provided for opt is inconsistent with other shapes.")
        if any(v < 0 for v in lo) or any(not a <= b <= c for a, b, c in zip(lo, mid, hi)):
            raise RuntimeError("Shape provided for max is inconsistent with other shapes.")
        self.shapes[input] = [lo, mid, hi]

    def get_shape(self, input: str) -> List[List[int]]:  # noqa: A002
        return [list(s) for s in self.shapes.get(input, [])]


class FakeBuilderConfig:
    """[PyCore] IBuilderConfig: properties default_device_type, DLA_core, profiling_verbosity and
    (8.5, 10) int8_calibrator; set_flag, get_flag, set_memory_pool_limit, add_optimization_profile,
    (8.5, 10) set_calibration_profile, create_timing_cache, set_timing_cache, get_timing_cache."""

    trt: "FakeTensorRT"
    _PUBLIC = {"default_device_type", "DLA_core", "int8_calibrator", "profiling_verbosity"}

    def __init__(self) -> None:
        object.__setattr__(self, "_flags", set())
        object.__setattr__(self, "pool_limits", {})
        object.__setattr__(self, "_timing_cache", None)
        object.__setattr__(self, "profiles", [])
        object.__setattr__(self, "calibration_profile", None)
        object.__setattr__(self, "default_device_type", self.trt.DeviceType.GPU)
        object.__setattr__(self, "DLA_core", -1)
        object.__setattr__(self, "profiling_verbosity", self.trt.ProfilingVerbosity.LAYER_NAMES_ONLY)
        if self.trt.IMPLICIT_INT8:
            object.__setattr__(self, "int8_calibrator", None)
        if self.trt.PROGRESS_MONITOR:
            object.__setattr__(self, "progress_monitor", None)

    def __getattr__(self, name: str) -> Any:
        if name in ("set_calibration_profile", "get_calibration_profile") and self.trt.IMPLICIT_INT8:
            return getattr(self, "_" + name)
        raise AttributeError(f"'tensorrt.IBuilderConfig' object has no attribute '{name}' (TensorRT {self.trt.__version__})")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "progress_monitor" and self.trt.PROGRESS_MONITOR:
            if value is not None and not (isinstance(value, FakeIProgressMonitor) and getattr(value, "_fake_initialized", False)):
                raise TypeError("progress_monitor must be a tensorrt.IProgressMonitor whose __init__ was called")
            object.__setattr__(self, name, value)
            return
        if name not in self._PUBLIC or (name == "int8_calibrator" and not self.trt.IMPLICIT_INT8):
            raise AttributeError(f"'tensorrt.IBuilderConfig' object has no attribute '{name}' (TensorRT {self.trt.__version__})")
        if name == "int8_calibrator" and value is not None:
            if not isinstance(value, FakeIInt8Calibrator):
                raise TypeError("int8_calibrator must be an IInt8Calibrator")
            if self.trt.major >= 10:
                self.trt.warn("IBuilderConfig::setInt8Calibrator is deprecated: implicit quantization is deprecated")
        if name == "default_device_type" and not isinstance(value, self.trt.DeviceType):
            raise TypeError("default_device_type must be a tensorrt.DeviceType")
        if name == "profiling_verbosity" and not isinstance(value, self.trt.ProfilingVerbosity):
            raise TypeError("profiling_verbosity must be a tensorrt.ProfilingVerbosity")
        object.__setattr__(self, name, value)

    def set_flag(self, flag: Any) -> None:
        if not isinstance(flag, self.trt.BuilderFlag):
            raise TypeError(f"set_flag(): incompatible argument {flag!r}")
        self._flags.add(flag.name)

    def get_flag(self, flag: Any) -> bool:
        return flag.name in self._flags

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        if not isinstance(pool, self.trt.MemoryPoolType):
            raise TypeError("pool must be a tensorrt.MemoryPoolType")
        self.pool_limits[pool.name] = int(size)

    def add_optimization_profile(self, profile: FakeOptimizationProfile) -> int:
        if not isinstance(profile, FakeOptimizationProfile):
            raise TypeError("add_optimization_profile(): incompatible argument")
        if not profile.shapes:
            return -1  # [H85] addOptimizationProfile returns -1 for an invalid profile
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def _set_calibration_profile(self, profile: FakeOptimizationProfile) -> bool:
        if not isinstance(profile, FakeOptimizationProfile):
            raise TypeError("set_calibration_profile(): incompatible argument")
        object.__setattr__(self, "calibration_profile", profile)
        return True

    def _get_calibration_profile(self) -> Optional[FakeOptimizationProfile]:
        return self.calibration_profile

    def create_timing_cache(self, data: bytes) -> Optional[FakeTimingCache]:
        data = bytes(data)
        if not data:
            return FakeTimingCache(self.trt.device_name, [])
        if not data.startswith(TIMING_MAGIC):
            self.trt.error("Failed to deserialize the timing cache: corrupt data")
            return None
        doc = json.loads(data[len(TIMING_MAGIC):].decode())
        return FakeTimingCache(doc["device"], doc["entries"])

    def set_timing_cache(self, cache: FakeTimingCache, ignore_mismatch: bool) -> bool:
        if not isinstance(cache, FakeTimingCache):
            raise TypeError("set_timing_cache(): incompatible argument")
        if cache.device != self.trt.device_name and not ignore_mismatch:
            self.trt.warn("timing cache was created on a different device; ignoring it")
            return False
        object.__setattr__(self, "_timing_cache", cache)
        self.trt.calls["set_timing_cache"].append(list(cache.entries))
        return True

    def get_timing_cache(self) -> Optional[FakeTimingCache]:
        return self._timing_cache


_PRECISION_FORMATS = {"INT8": "Row major Int8 format", "FP16": "Row major linear FP16 format",
                      "FP32": "Row major linear FP32", "INT32": "Row major linear Int32"}


class FakeBuilder:
    """[PyCore] Builder: create_network, create_builder_config, create_optimization_profile,
    build_serialized_network, num_DLA_cores, platform_has_fast_fp16 and (8.5, 10)
    platform_has_fast_int8."""

    trt: "FakeTensorRT"

    def __init__(self, logger: Any) -> None:
        if not isinstance(logger, FakeILogger) or not getattr(logger, "_fake_initialized", False):
            raise TypeError("Builder(): logger must be a tensorrt.ILogger whose __init__ was called")
        self.trt.null_factory("Builder", logger)
        self.logger = self.trt.adopt_logger(self, logger, "createInferBuilder")
        self.num_DLA_cores = self.trt.num_dla_cores
        self.platform_has_fast_fp16 = True

    def __getattr__(self, name: str) -> Any:
        if name == "platform_has_fast_int8" and self.trt.FAST_INT8_PROPERTY:
            return self.trt.fast_int8
        raise AttributeError(f"'tensorrt.Builder' object has no attribute '{name}' (TensorRT {self.trt.__version__})")

    def create_network(self, flags: int = 0) -> FakeNetwork:
        trt = self.trt
        known = 0
        for member in trt.NetworkDefinitionCreationFlag:
            known |= 1 << int(member)
        if flags & ~known:
            raise ValueError(f"create_network(): unknown NetworkDefinitionCreationFlag bits {flags:#x}")
        for member in trt.NetworkDefinitionCreationFlag:
            if member.name in trt.DEPRECATED_NETWORK_FLAGS and flags & (1 << int(member)):
                trt.warn(f"NetworkDefinitionCreationFlag::k{member.name} is deprecated and has no effect")
        trt.calls["create_network"].append(flags)
        return FakeNetwork(trt, flags)

    def create_builder_config(self) -> FakeBuilderConfig:
        return self.trt._config_class()

    def create_optimization_profile(self) -> FakeOptimizationProfile:
        return FakeOptimizationProfile()

    def build_serialized_network(self, network: FakeNetwork, config: FakeBuilderConfig) -> Optional[FakeHostMemory]:
        trt = self.trt
        trt.calls["build"].append(network.model["name"] if network.model else None)
        trt.calls["events"].append("build")
        monitor = getattr(config, "progress_monitor", None)
        if monitor is not None and not self._report_progress(monitor, network):
            self._fail("Build cancelled: IProgressMonitor::stepComplete returned false")
            return None
        record = self._check(network, config)
        if record is None:
            return None
        return FakeHostMemory(ENGINE_MAGIC + json.dumps(record, sort_keys=True).encode())

    def _report_progress(self, monitor: Any, network: FakeNetwork) -> bool:
        """The phases a build goes through, as TensorRT reports them: a top phase of 2 steps whose
        first step holds a phase of one step per layer. False: the monitor cancelled."""
        top, inner = "Building engine", "Tactic selection"
        self.trt.calls["progress"].append(("start", top))
        monitor.phase_start(top, None, 2)
        monitor.phase_start(inner, top, max(1, len(network.layers)))
        for step in range(max(1, len(network.layers))):
            self.trt.calls["progress"].append(("step", inner, step))
            if not monitor.step_complete(inner, step):
                monitor.phase_finish(inner)
                monitor.phase_finish(top)
                return False
        monitor.phase_finish(inner)
        for step in range(2):
            if not monitor.step_complete(top, step):
                monitor.phase_finish(top)
                return False
        monitor.phase_finish(top)
        return True

    def _fail(self, msg: str) -> None:
        self.logger.log(FakeILogger.Severity.ERROR, msg)
        self.trt.logged.append("ERROR: " + msg)

    def _input_shapes(self, network: FakeNetwork, config: FakeBuilderConfig) -> Optional[Dict[str, Dict[str, Any]]]:
        """Each input's fixed shape, or its profile: a dynamic input (-1) needs one."""
        out: Dict[str, Dict[str, Any]] = {}
        for t in network.inputs:
            dynamic = any(d < 0 for d in t.shape)
            shapes = config.profiles[0].get_shape(t.name) if config.profiles else []
            if dynamic and not shapes:
                self._fail("Network has dynamic or shape inputs, but no optimization profile has been defined.")
                return None
            if shapes:
                for sel in shapes:
                    if len(sel) != len(t.shape) or any(d >= 0 and d != s for d, s in zip(t.shape, sel)):
                        self._fail(f"{t.name}: optimization profile dimensions {sel} disagree with the network's {list(t.shape)}")
                        return None
                out[t.name] = {"min": shapes[0], "opt": shapes[1], "max": shapes[2]}
            else:
                out[t.name] = {"min": list(t.shape), "opt": list(t.shape), "max": list(t.shape)}
        return out

    def _check(self, network: FakeNetwork, config: FakeBuilderConfig) -> Optional[Dict[str, Any]]:
        trt = self.trt
        if network.model is None:
            self._fail("Network has no layers: parse a model first")
            return None
        if trt.fail_build:
            self._fail(trt.fail_build)
            return None
        flags = sorted(config._flags)
        weak = {"FP16", "INT8"} & set(flags)
        if network.strongly_typed and weak:
            self._fail(f"BuilderFlag {sorted(weak)} cannot be used with a strongly typed network")
            return None
        constrained = [l for l in network.layers if l.constrained]
        if network.strongly_typed and constrained:
            self._fail("layer precision constraints are not allowed in a strongly typed network")
            return None
        obey, prefer = "OBEY_PRECISION_CONSTRAINTS" in flags, "PREFER_PRECISION_CONSTRAINTS" in flags
        if constrained and not (obey or prefer):
            trt.warn("layer precisions were set but neither OBEY nor PREFER_PRECISION_CONSTRAINTS: ignored")
        for layer in constrained:
            shape_out = any(layer.get_output(i).is_shape_tensor for i in range(layer.num_outputs))
            if layer.type == trt.LayerType.CONSTANT or layer.type == trt.LayerType.SHAPE or shape_out:
                what = "a shape tensor" if shape_out or layer.type == trt.LayerType.SHAPE else "a constant"
                self._fail(f"{layer.name}: a precision constraint cannot apply to a layer producing {what}")
                return None
            if layer.precision_is_set_ and layer._precision == trt.float16 and "FP16" not in flags:
                self._fail(f"{layer.name}: constrained to HALF, but BuilderFlag.FP16 is not set")
                return None
            if obey and layer.no_fp32 and layer._precision == trt.float32:
                self._fail(f"Could not find any implementation for node {layer.name} obeying the precision constraints (FLOAT)")
                return None
        shapes = self._input_shapes(network, config)
        if shapes is None:
            return None
        record: Dict[str, Any] = {
            "tensorrt": trt.__version__,
            "model": network.model["name"],
            "model_types": network.model["types"],
            "inputs": [{"name": t.name, "shape": list(t.shape)} for t in network.inputs],
            "layers": [l.name for l in network.layers],
            "network_flags": network.flags,
            "strongly_typed": network.strongly_typed,
            "flags": flags,
            "device_type": config.default_device_type.name,
            "dla_core": config.DLA_core,
            "pool_limits": dict(config.pool_limits),
            "layer_precisions": {l.name: l._precision.name for l in network.layers if l.precision_is_set_},
            "output_types": {l.name: {str(k): v.name for k, v in l.output_types.items()} for l in network.layers if l.output_types},
            "int8": None,
            "timing_cache": None,
            "profiles": [dict(p.shapes) for p in config.profiles],
            "io_shapes": shapes,
            "calibration_profile": dict(config.calibration_profile.shapes) if config.calibration_profile else None,
            "profiling_verbosity": config.profiling_verbosity.name,
        }
        if config.default_device_type == trt.DeviceType.DLA:
            if not 0 <= config.DLA_core < self.num_DLA_cores:
                self._fail(f"DLA core {config.DLA_core} is not available ({self.num_DLA_cores} DLA cores)")
                return None
            if not (weak or network.model["types"] in ("fp16", "qdq")):
                self._fail("DLA supports FP16 and INT8 only")
                return None
            unsupported = list(network.model.get("dla_unsupported", []))
            dynamic = sorted(name for name, s in shapes.items() if not s["min"] == s["opt"] == s["max"])
            if dynamic:
                # The DLA supports no dynamic dimensions: with a profile whose min, opt and max
                # differ, every layer is unsupported on the DLA (falls back to the GPU, with a
                # warning per layer, or fails the build without GPU fallback).
                if "GPU_FALLBACK" not in flags:
                    self._fail(f"{network.layers[0].name}: DLA does not support dynamic shapes (input {dynamic[0]} has "
                               "a profile whose min, opt and max differ) and GPU fallback is not enabled")
                    return None
                for layer in network.layers:
                    if layer.name not in unsupported:
                        trt.warn(f"Layer '{layer.name}' ({layer.type.name}): DLA does not support dynamic shapes "
                                 f"(input {dynamic[0]}); falling back to GPU")
                        unsupported.append(layer.name)
            if unsupported and "GPU_FALLBACK" not in flags:
                self._fail(f"layer {unsupported[0]} cannot run on DLA and GPU fallback is not enabled")
                return None
            record["gpu_fallback_layers"] = list(unsupported)
        scales: Optional[Set[str]] = None
        if "INT8" in flags:
            int8 = self._int8(network, config, shapes)
            if int8 is None:
                return None
            record["int8"] = int8
            scales = int8.pop("_scales", None)
        elif network.model["types"] == "qdq":
            if network.strongly_typed:
                record["int8"] = {"mode": "qdq"}
            else:
                self._fail("Q/DQ layers found but BuilderFlag.INT8 is not set")
                return None
        record["layer_info"] = self._layer_info(network, config, record, scales)
        cache = config.get_timing_cache()
        if cache is not None:
            signature = f"{network.model['name']}|{'+'.join(flags)}|{config.default_device_type.name}"
            hit = signature in cache.entries
            record["timing_cache"] = {"entries_before": len(cache.entries), "hit": hit}
            if not hit:
                cache.entries.append(signature)
        return record

    def _layer_info(self, network: FakeNetwork, config: FakeBuilderConfig, record: Dict[str, Any],
                    scales: Optional[Set[str]]) -> List[Dict[str, Any]]:
        """What the engine inspector will say of each layer: its precision and device.

        INT8 where the INT8 flag (or a strongly typed Q/DQ model) quantizes the layer and, with a
        calibrator or a cache, every output tensor has a scale (else the warning TensorRT logs);
        a constrained layer runs its constraint unless it has no kernel for it (PREFER); the
        rest FP16 where FP16 is on or the model is FP16, else FP32. On the DLA, consecutive layers
        that do not fall back to the GPU make one foreign node, as TensorRT shows DLA subgraphs."""
        trt = self.trt
        flags = set(record["flags"])
        int8 = record["int8"] or {}
        quantized = set(network.model.get("quantized") or [])
        fp16 = "FP16" in flags or network.model["types"] == "fp16"
        dla = config.default_device_type == trt.DeviceType.DLA
        fallback = set(record.get("gpu_fallback_layers") or [])
        out: List[Dict[str, Any]] = []
        for layer in network.layers:
            tensors = [layer.get_output(i) for i in range(layer.num_outputs)]
            shape_like = layer.type in (trt.LayerType.SHAPE, trt.LayerType.CONSTANT) or any(t.is_shape_tensor for t in tensors)
            if any(t.is_shape_tensor for t in tensors):
                precision = "INT32"
            elif layer.precision_is_set_ and not (layer.no_fp32 and layer._precision == trt.float32):
                precision = {trt.float32: "FP32", trt.float16: "FP16", trt.int8: "INT8"}[layer._precision]
            elif int8.get("mode") == "qdq" and layer.name in quantized:
                precision = "INT8"
            elif int8.get("mode") == "calibration" and not shape_like:
                missing = [t.name for t in tensors if scales is not None and t.name not in scales]
                for name in missing:
                    trt.warn(MISSING_SCALE.format(name=name))
                precision = "INT8" if not missing else ("FP16" if fp16 else "FP32")
            else:
                precision = "FP16" if fp16 else "FP32"
            if layer.precision_is_set_ and layer.no_fp32 and layer._precision == trt.float32:
                trt.warn(f"{layer.name}: no implementation in the constrained precision FLOAT; the constraint was not honoured")
            on_dla = dla and layer.name not in fallback and precision in ("INT8", "FP16")
            out.append({"Name": layer.name, "LayerType": layer.type.name.title(), "dla": on_dla,
                        "Outputs": [{"Name": t.name, "Location": "Device", "Format/Datatype": _PRECISION_FORMATS[precision]}
                                    for t in tensors]})
        merged: List[Dict[str, Any]] = []
        for entry in out:
            if entry.pop("dla"):
                if merged and merged[-1].get("_dla"):
                    merged[-1]["_names"].append(entry["Name"])
                    merged[-1]["Outputs"] = entry["Outputs"]
                    continue
                entry = dict(entry, _dla=True, _names=[entry["Name"]])
            merged.append(entry)
        for entry in merged:
            if entry.pop("_dla", False):
                names = entry.pop("_names")
                entry["Name"] = "{ForeignNode[" + (names[0] if len(names) == 1 else f"{names[0]}...{names[-1]}") + "]}"
                entry["LayerType"] = "DLA"
        return merged

    def _int8(self, network: FakeNetwork, config: FakeBuilderConfig, shapes: Dict[str, Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        trt = self.trt
        calibrator = getattr(config, "int8_calibrator", None) if trt.IMPLICIT_INT8 else None
        if network.model["types"] == "qdq":
            if calibrator is not None:
                trt.warn("calibrator is ignored for a network with Q/DQ layers")
            return {"mode": "qdq"}
        if calibrator is None:
            self._fail("INT8 requested without a calibrator, dynamic ranges or Q/DQ layers")
            return None
        if not getattr(calibrator, "_fake_initialized", False):
            raise TypeError("calibrator: the base class __init__ was not called")
        trt.calls["calibrator_class"].append(type(calibrator).__mro__[1].__name__)
        header = f"TRT-{trt.version_code}-{calibrator.ALGORITHM}"
        cache = _trampoline(calibrator, "read_calibration_cache", None)
        trt.calls["read_calibration_cache"].append(cache is not None)
        if cache is not None:
            text = bytes(cache).decode(errors="replace")
            if text.split("\n", 1)[0].strip() == header:
                names = {line.rpartition(":")[0].strip() for line in text.splitlines()[1:] if ":" in line}
                return {"mode": "calibration", "source": "cache", "header": header, "scales": len(names), "_scales": names}
            trt.warn("calibration cache does not match this TensorRT or calibrator: calibrating")
        batch = _trampoline(calibrator, "get_batch_size", -1)
        if batch is None or int(batch) < 1:
            self._fail("Calibration failure: get_batch_size() returned no valid batch size")
            return None
        calib_shapes = config.calibration_profile.shapes if config.calibration_profile is not None else {}
        names = [t.name for t in network.inputs]
        needed = {}
        for t in network.inputs:
            shape = calib_shapes[t.name][1] if t.name in calib_shapes else shapes[t.name]["opt"]
            if any(d < 0 for d in shape):
                self._fail(f"Calibration failure: {t.name} has dynamic dims and no calibration profile")
                return None
            needed[t.name] = list(shape)
        sums: List[float] = []
        while True:
            ptrs = _trampoline(calibrator, "get_batch", None, names)
            trt.calls["events"].append("get_batch")
            if not ptrs:
                break
            ptrs = [int(p) for p in ptrs]
            if len(ptrs) != len(names):
                self._fail(f"Calibration failure: get_batch() returned {len(ptrs)} pointer(s) for {len(names)} input(s) {names}")
                return None
            for name, ptr in zip(names, ptrs):
                nbytes = int(np.prod(needed[name])) * 4
                size = trt.device_memory.size_of(ptr)
                if size is None or size < nbytes:
                    self._fail(f"Calibration failure: the buffer for {name} at {ptr:#x} holds {size} bytes, "
                               f"a batch of {needed[name]} float32 needs {nbytes}")
                    return None
            sums.append(round(float(trt.device_memory.read(ptrs[0], needed[names[0]]).sum()), 3))
        trt.calls["calibration_batches"].append(sums)
        if not sums:
            self._fail("Calibration failure occurred with no scaling factors detected")
            return None
        tensors = [t.name for t in network.inputs] + [network.layers[i].get_output(k).name
                                                     for i in range(network.num_layers)
                                                     for k in range(network.layers[i].num_outputs)]
        lines = [header] + [f"{t.name}: {_hex(1.0 + len(sums))}" for t in network.inputs] + [f"{n}: {_hex(0.5)}" for n in tensors[len(network.inputs):]]
        _trampoline(calibrator, "write_calibration_cache", None, memoryview("\n".join(lines).encode() + b"\n"))
        return {"mode": "calibration", "source": "calibrator", "header": header, "batches": len(sums), "batch_sums": sums,
                "_scales": set(tensors)}


def _hex(scale: float) -> str:
    return struct.pack(">f", scale).hex()


# --- the runtime side the layer report needs: Runtime, ICudaEngine, EngineInspector ----------------


class FakeEngineInspector:
    """[PyCore] EngineInspector.get_engine_information(format): with ProfilingVerbosity.DETAILED,
    JSON {"Layers": [ {...}, ... ], "Bindings": [...]}; with LAYER_NAMES_ONLY, "Layers" lists
    names only; with NONE, nothing."""

    def __init__(self, trt: "FakeTensorRT", record: Dict[str, Any]) -> None:
        self.trt = trt
        self.record = record

    def get_engine_information(self, format: Any) -> str:  # noqa: A002
        if not isinstance(format, self.trt.LayerInformationFormat):
            raise TypeError("get_engine_information(): incompatible argument")
        verbosity = self.record.get("profiling_verbosity", "LAYER_NAMES_ONLY")
        layers = self.record.get("layer_info", [])
        if verbosity == "NONE":
            listed: List[Any] = []
        elif verbosity == "DETAILED":
            listed = layers
        else:
            listed = [l["Name"] for l in layers]
        if format == self.trt.LayerInformationFormat.ONELINE:
            return "\n".join(l if isinstance(l, str) else l["Name"] for l in listed)
        return json.dumps({"Layers": listed, "Bindings": [t["name"] for t in self.record["inputs"]]})


class FakeCudaEngine:
    """[PyCore] ICudaEngine: create_engine_inspector, profiling_verbosity."""

    def __init__(self, trt: "FakeTensorRT", record: Dict[str, Any]) -> None:
        self.trt = trt
        self.record = record
        self.profiling_verbosity = trt.ProfilingVerbosity[record.get("profiling_verbosity", "LAYER_NAMES_ONLY")]

    def create_engine_inspector(self) -> FakeEngineInspector:
        return FakeEngineInspector(self.trt, self.record)


class FakeRuntime:
    """[PyCore] Runtime(logger).deserialize_cuda_engine(bytes): None, after logging an error,
    for bytes that are not an engine of this TensorRT version, or a DLA engine while
    `DLA_core` is not one of the device's cores (a new runtime's is -1, unset)."""

    trt: "FakeTensorRT"

    def __init__(self, logger: Any) -> None:
        if not isinstance(logger, FakeILogger) or not getattr(logger, "_fake_initialized", False):
            raise TypeError("Runtime(): logger must be a tensorrt.ILogger whose __init__ was called")
        self.trt.null_factory("Runtime", logger)
        self.logger = self.trt.adopt_logger(self, logger, "createInferRuntime")
        self.DLA_core = -1  # NvInferRuntime.h (8.5.2) getDLACore: -1 "for DLA not present or unset"

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> Optional[FakeCudaEngine]:
        data = bytes(serialized_engine)
        if not data.startswith(ENGINE_MAGIC):
            self.logger.log(FakeILogger.Severity.ERROR, "1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization (Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)")
            return None
        record = decode_engine(data)
        if record.get("tensorrt") != self.trt.__version__:
            self.logger.log(FakeILogger.Severity.ERROR, "6: The engine plan file is not compatible with this version of TensorRT")
            return None
        if record.get("device_type") == "DLA" and not 0 <= self.DLA_core < self.trt.num_dla_cores:
            self.logger.log(FakeILogger.Severity.ERROR, f"1: DLA engine deserialized on DLA core {self.DLA_core}: set "
                            "Runtime.DLA_core to a core of this device first (IRuntime::setDLACore)")
            return None
        return FakeCudaEngine(self.trt, record)


# --- the module objects ------------------------------------------------------------------------

# [H85] BuilderFlag / NetworkDefinitionCreationFlag / DataType values at 8.5.2
_FLAGS_85 = {"FP16": 0, "INT8": 1, "DEBUG": 2, "GPU_FALLBACK": 3, "STRICT_TYPES": 4, "REFIT": 5, "DISABLE_TIMING_CACHE": 6,
             "TF32": 7, "SPARSE_WEIGHTS": 8, "SAFETY_SCOPE": 9, "OBEY_PRECISION_CONSTRAINTS": 10,
             "PREFER_PRECISION_CONSTRAINTS": 11, "DIRECT_IO": 12, "REJECT_EMPTY_ALGORITHMS": 13, "ENABLE_TACTIC_HEURISTIC": 14}
# [H10] at v10.3.0
_FLAGS_10 = {"FP16": 0, "INT8": 1, "DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6,
             "SPARSE_WEIGHTS": 7, "SAFETY_SCOPE": 8, "OBEY_PRECISION_CONSTRAINTS": 9, "PREFER_PRECISION_CONSTRAINTS": 10,
             "DIRECT_IO": 11, "REJECT_EMPTY_ALGORITHMS": 12, "VERSION_COMPATIBLE": 13, "EXCLUDE_LEAN_RUNTIME": 14, "FP8": 15,
             "ERROR_ON_TIMING_CACHE_MISS": 16, "BF16": 17, "DISABLE_COMPILATION_CACHE": 18, "STRIP_PLAN": 19,
             "REFIT_IDENTICAL": 20, "WEIGHT_STREAMING": 21, "INT4": 22, "REFIT_INDIVIDUAL": 23}
# [H11] at v11.0: FP16, INT8, OBEY/PREFER_PRECISION_CONSTRAINTS (and others) are gone
_FLAGS_11 = {"DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6, "SPARSE_WEIGHTS": 7,
             "SAFETY_SCOPE": 8, "DIRECT_IO": 11, "VERSION_COMPATIBLE": 12, "EXCLUDE_LEAN_RUNTIME": 13,
             "ERROR_ON_TIMING_CACHE_MISS": 15, "DISABLE_COMPILATION_CACHE": 17, "STRIP_PLAN": 18, "REFIT_IDENTICAL": 19,
             "WEIGHT_STREAMING": 20, "REFIT_INDIVIDUAL": 22, "STRICT_NANS": 23, "MONITOR_MEMORY": 24,
             "EDITABLE_TIMING_CACHE": 26, "DISTRIBUTIVE_INDEPENDENCE": 27}
# [H85] LayerType at 8.5.2 (the members the fakes use); [H10]/[H11] renumbered after kCAST took 1
_LAYERS_85 = {"CONVOLUTION": 0, "FULLY_CONNECTED": 1, "ACTIVATION": 2, "POOLING": 3, "SCALE": 5, "SOFTMAX": 6,
              "DECONVOLUTION": 7, "CONCATENATION": 8, "ELEMENTWISE": 9, "SHUFFLE": 13, "REDUCE": 14, "GATHER": 16,
              "MATRIX_MULTIPLY": 17, "CONSTANT": 19, "IDENTITY": 21, "SLICE": 23, "SHAPE": 24, "RESIZE": 26,
              "QUANTIZE": 33, "DEQUANTIZE": 34}
_LAYERS_10 = {"CONVOLUTION": 0, "CAST": 1, "ACTIVATION": 2, "POOLING": 3, "SCALE": 5, "SOFTMAX": 6, "DECONVOLUTION": 7,
              "CONCATENATION": 8, "ELEMENTWISE": 9, "SHUFFLE": 13, "REDUCE": 14, "GATHER": 16, "MATRIX_MULTIPLY": 17,
              "CONSTANT": 19, "IDENTITY": 20, "SLICE": 22, "SHAPE": 23, "RESIZE": 25, "QUANTIZE": 32, "DEQUANTIZE": 33}


class FakeTensorRT(types.ModuleType):
    """Base of the fakes: a `tensorrt` module with the attributes a version has, and a record."""

    VERSION = "0.0.0"
    EXPLICIT_BATCH: Optional[str] = "required"  # "required" | "deprecated" | None (absent)
    BUILDER_FLAGS: Dict[str, int] = _FLAGS_85
    NETWORK_FLAGS: Dict[str, int] = {"EXPLICIT_BATCH": 0, "EXPLICIT_PRECISION": 1}
    DEPRECATED_NETWORK_FLAGS: Set[str] = {"EXPLICIT_PRECISION"}
    LAYER_TYPES: Dict[str, int] = _LAYERS_85
    IMPLICIT_INT8 = True  # calibrator classes, config.int8_calibrator and set_calibration_profile exist
    LAYER_PRECISION = True  # ILayer.precision / set_output_type exist
    FAST_INT8_PROPERTY = True  # Builder.platform_has_fast_int8 exists
    STRONGLY_TYPED = False  # the STRONGLY_TYPED creation flag has an effect
    PROGRESS_MONITOR = False  # IProgressMonitor and IBuilderConfig.progress_monitor exist
    ALWAYS_STRONGLY_TYPED = False  # every network is strongly typed (11)

    def __init__(self, num_dla_cores: int = 2, fast_int8: bool = True, device_name: str = "FakeGPU SM 7.2") -> None:
        super().__init__("tensorrt")
        self.__version__ = self.VERSION
        self.major = int(self.VERSION.split(".")[0])
        parts = [int(p) for p in self.VERSION.split(".")[:3]]
        # The calibration-cache header's version code: 8.x major*1000 + minor*100 + patch (8502);
        # from 10 on major*10000 + minor*100 + patch (10.3.0 -> 100300).
        self.version_code = parts[0] * (10000 if parts[0] >= 10 else 1000) + parts[1] * 100 + parts[2]
        self.num_dla_cores = num_dla_cores
        self.fast_int8 = fast_int8
        self.device_name = device_name
        self.fail_build: Optional[str] = None
        # "Builder", "Runtime": its factory (createInferBuilder, createInferRuntime) returns null, as
        # when CUDA cannot initialise: TensorRT logs why, pybind11's init() raises TypeError
        self.null_factories: Set[str] = set()
        self.calls: Dict[str, List[Any]] = defaultdict(list)
        self.logged: List[str] = []
        self.logger: Any = None  # the one logger TensorRT keeps (adopt_logger)
        self.live: "weakref.WeakSet[Any]" = weakref.WeakSet()  # Builders and Runtimes not yet freed
        self.device_memory: Any = FakeDeviceMemory()
        self.device_memory.events = self.calls["events"]  # allocations and builds in one ordered list

        self.BuilderFlag = IntEnum("BuilderFlag", dict(self.BUILDER_FLAGS))
        self.NetworkDefinitionCreationFlag = IntEnum("NetworkDefinitionCreationFlag", dict(self.NETWORK_FLAGS))
        self.MemoryPoolType = IntEnum("MemoryPoolType", [("WORKSPACE", 0), ("DLA_MANAGED_SRAM", 1), ("DLA_LOCAL_DRAM", 2),
                                                          ("DLA_GLOBAL_DRAM", 3)])
        self.DeviceType = IntEnum("DeviceType", [("GPU", 0), ("DLA", 1)])
        self.DataType = IntEnum("DataType", [("FLOAT", 0), ("HALF", 1), ("INT8", 2), ("INT32", 3), ("BOOL", 4), ("UINT8", 5)])
        self.LayerType = IntEnum("LayerType", dict(self.LAYER_TYPES))
        # [H85] NvInferRuntime.h ProfilingVerbosity / LayerInformationFormat
        self.ProfilingVerbosity = IntEnum("ProfilingVerbosity", [("LAYER_NAMES_ONLY", 0), ("NONE", 1), ("DETAILED", 2)])
        self.LayerInformationFormat = IntEnum("LayerInformationFormat", [("ONELINE", 0), ("JSON", 1)])
        self.float32 = self.DataType.FLOAT
        self.float16 = self.DataType.HALF
        self.int8 = self.DataType.INT8
        self.int32 = self.DataType.INT32
        self.ILogger = FakeILogger
        self.Logger = FakeLogger
        self.Builder = type("Builder", (FakeBuilder,), {"trt": self})
        self.OnnxParser = type("OnnxParser", (FakeOnnxParser,), {"trt": self})
        self.Runtime = type("Runtime", (FakeRuntime,), {"trt": self})
        if self.PROGRESS_MONITOR:
            self.IProgressMonitor = FakeIProgressMonitor
        self._config_class = type("IBuilderConfig", (FakeBuilderConfig,), {"trt": self})
        self._layer_class = FakeLayerWithPrecision if self.LAYER_PRECISION else FakeLayer
        if self.IMPLICIT_INT8:
            self.IInt8Calibrator = FakeIInt8Calibrator
            self.IInt8EntropyCalibrator2 = FakeIInt8EntropyCalibrator2
            self.IInt8MinMaxCalibrator = FakeIInt8MinMaxCalibrator

    @property
    def has_strongly_typed(self) -> bool:
        return self.STRONGLY_TYPED

    def _layer(self, name: str, type_: Any, dtype: Any, outputs: Sequence[str], shape_output: bool = False,
               no_fp32: bool = False) -> FakeLayer:
        return self._layer_class(self, name, type_, dtype, outputs, shape_output, no_fp32)

    def null_factory(self, kind: str, logger: Any) -> None:
        """pybind11 `py::init(&createInfer...)` with a factory that returned null: TypeError, after
        TensorRT logged its reason (here: CUDA's initialisation failure)."""
        if kind in self.null_factories:
            logger.log(FakeILogger.Severity.ERROR, "1: [defaultAllocator.cpp::nvinfer1::internal::DefaultAllocator] "
                       "CUDA initialization failure with error: 222. Please check your CUDA installation")
            raise TypeError("pybind11::init(): factory function returned nullptr")

    def adopt_logger(self, owner: Any, logger: Any, factory: str) -> Any:
        """The logger `owner` (a new Builder or Runtime) logs to. As TensorRT 8.x's logger
        registry does (NVIDIA/TensorRT #1475): the first logger given while no Builder or
        Runtime lives is kept; a different one given while one lives gets nothing, and the kept
        one hears a warning saying so."""
        if not list(self.live):
            self.logger = logger
        elif logger is not self.logger:
            self.warn(f"The logger passed into {factory} differs from one already provided for an existing builder, "
                      "runtime, or refitter. Uses of the global logger, returned by nvinfer1::getLogger(), will return "
                      "the existing value.")
        self.live.add(owner)
        return self.logger

    def warn(self, msg: str) -> None:
        self.logged.append("WARNING: " + msg)
        if self.logger is not None:
            self.logger.log(FakeILogger.Severity.WARNING, msg)

    def error(self, msg: str) -> None:
        self.logged.append("ERROR: " + msg)
        if self.logger is not None:
            self.logger.log(FakeILogger.Severity.ERROR, msg)

    @property
    def warnings(self) -> List[str]:
        return [m for m in self.logged if m.startswith("WARNING")]

    def engines_built(self) -> int:
        return len(self.calls["build"])


class FakeTensorRT85(FakeTensorRT):
    VERSION = "8.5.2.2"
    EXPLICIT_BATCH = "required"


class FakeTensorRT10(FakeTensorRT):
    VERSION = "10.3.0.26"
    EXPLICIT_BATCH = "deprecated"
    BUILDER_FLAGS = _FLAGS_10
    NETWORK_FLAGS = {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1}
    DEPRECATED_NETWORK_FLAGS = {"EXPLICIT_BATCH"}
    LAYER_TYPES = _LAYERS_10
    STRONGLY_TYPED = True
    PROGRESS_MONITOR = True


class FakeTensorRT11(FakeTensorRT):
    VERSION = "11.0.0.1"
    EXPLICIT_BATCH = None
    BUILDER_FLAGS = _FLAGS_11
    NETWORK_FLAGS = {"STRONGLY_TYPED": 0, "PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
    DEPRECATED_NETWORK_FLAGS = {"STRONGLY_TYPED"}
    LAYER_TYPES = _LAYERS_10
    IMPLICIT_INT8 = False
    LAYER_PRECISION = False
    FAST_INT8_PROPERTY = False
    ALWAYS_STRONGLY_TYPED = True
    PROGRESS_MONITOR = True


FAKES = {"8.5": FakeTensorRT85, "10": FakeTensorRT10, "11": FakeTensorRT11}


class HostAddressMemory:
    """`FakeTensorRT.device_memory` for buffers whose "device" memory is host memory at a real
    address (fake pycuda, fake cuda-python, FakeHostCuda): `blocks` maps an address to the
    ctypes array allocated there."""

    def __init__(self, blocks: Dict[int, Any]) -> None:
        self.blocks = blocks

    def size_of(self, ptr: int) -> Optional[int]:
        block = self.blocks.get(int(ptr))
        return None if block is None else ctypes.sizeof(block)

    def read(self, ptr: int, shape: Sequence[int]) -> np.ndarray:
        count = int(np.prod(shape))
        return np.frombuffer(self.blocks[int(ptr)], dtype=np.float32, count=count).reshape(shape).copy()
