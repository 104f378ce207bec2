"""Fake `tensorrt` modules for tests. They prove edge_sdk's logic, not TensorRT's behaviour.

Each fake is a module object to put in `sys.modules["tensorrt"]` (monkeypatch.setitem). The
variants enforce the API differences edge_sdk must respect:

* FakeTensorRT85 (JetPack 5.1): the ONNX parser needs an EXPLICIT_BATCH network; FP16/INT8
  builder flags; IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator and `config.int8_calibrator`.
* FakeTensorRT10: EXPLICIT_BATCH is deprecated (using it logs a warning the tests look for),
  STRONGLY_TYPED exists, a calibrator still works but logs a deprecation warning.
* FakeTensorRT11: no EXPLICIT_BATCH, no BuilderFlag.FP16/INT8, no calibrator classes and no
  `config.int8_calibrator`: only strongly typed networks from typed models.

"ONNX" files for the fake are small JSON documents (`fake_model()`): a name, the model's
types ("fp32", "fp16" or "qdq"), inputs and layer names. The parser also reads real ONNX files
(with the `onnx` package, on the host): the graph's inputs and one layer per node, named after
the node, so that a bundle written by `edge-sdk build` can go through the engine builder. `build_serialized_network` returns
deterministic bytes encoding everything that was configured (`decode_engine()` reads them
back), or None after logging an error, as TensorRT does, when the configuration is one the
real TensorRT rejects.
"""
from __future__ import annotations

import json
import os
import struct
import types
from collections import defaultdict
from enum import IntEnum
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from edge_sdk.trt.calibrator import DeviceBuffer

ENGINE_MAGIC = b"FAKE-TRT-ENGINE\n"
TIMING_MAGIC = b"FAKE-TIMING-CACHE\n"


def fake_model(
    name: str = "model.onnx",
    types_: str = "fp32",
    inputs: Sequence[Dict[str, Any]] = ({"name": "input.1", "shape": [1, 3, 8, 8]},),
    layers: Sequence[str] = ("conv1", "relu1", "conv2", "conv2_7", "head"),
    dla_unsupported: Sequence[str] = ("head",),
) -> bytes:
    """The bytes of a model file the fake parser understands."""
    doc = {"fake_onnx": 1, "name": name, "types": types_, "inputs": list(inputs), "layers": list(layers),
           "dla_unsupported": list(dla_unsupported)}
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
    """Stands in for cudaMalloc/cudaMemcpy; the fake builder reads batches back from it."""

    def __init__(self) -> None:
        self.blocks: Dict[int, bytearray] = {}
        self._next = 0x7F0000000000
        self.allocations = 0
        self.uploads = 0
        self.freed = 0

    def allocate(self, nbytes: int) -> FakeDeviceBuffer:
        self.allocations += 1
        return FakeDeviceBuffer(self, nbytes)

    def read(self, ptr: int, shape: Sequence[int]) -> np.ndarray:
        return np.frombuffer(bytes(self.blocks[ptr]), dtype=np.float32).reshape(shape)


# --- pieces shared by every version --------------------------------------------------------------


class FakeILogger:
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


class FakeIInt8Calibrator:
    ALGORITHM = "Legacy"

    def __init__(self) -> None:
        self._fake_initialized = True


class FakeIInt8EntropyCalibrator2(FakeIInt8Calibrator):
    ALGORITHM = "EntropyCalibration2"


class FakeIInt8MinMaxCalibrator(FakeIInt8Calibrator):
    ALGORITHM = "MinMaxCalibration"


class FakeTensor:
    def __init__(self, name: str, dtype: Any, shape: Sequence[int] = ()) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)


class FakeLayer:
    def __init__(self, name: str, dtype: Any) -> None:
        self.name = name
        self._precision = dtype
        self.precision_is_set = False
        self.num_outputs = 1
        self._outputs = [FakeTensor(name + "_out", dtype)]
        self.output_types: Dict[int, Any] = {}

    @property
    def precision(self) -> Any:
        return self._precision

    @precision.setter
    def precision(self, dtype: Any) -> None:
        self._precision = dtype
        self.precision_is_set = True

    def get_output(self, i: int) -> FakeTensor:
        return self._outputs[i]

    def set_output_type(self, i: int, dtype: Any) -> None:
        if not 0 <= i < self.num_outputs:
            raise IndexError(i)
        self.output_types[i] = dtype


class FakeNetwork:
    def __init__(self, trt: "FakeTensorRT", flags: int) -> None:
        self.trt = trt
        self.flags = flags
        self.explicit_batch = trt.EXPLICIT_BATCH != "required" or bool(flags & 1)
        self.strongly_typed = trt.has_strongly_typed and bool(flags & (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)))
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


class FakeOnnxParser:
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
        dtype = self.trt.float16 if doc["types"] == "fp16" else self.trt.float32
        self.network.model = doc
        self.network.inputs = [FakeTensor(i["name"], self.trt.float32, i["shape"]) for i in doc["inputs"]]
        self.network.layers = [FakeLayer(n, dtype) for n in doc["layers"]]
        return True

    def _parse_onnx(self, data: bytes, filename: Optional[str]) -> bool:
        """A real ONNX model, read with `onnx` (host only): the network gets the graph's real
        inputs (those that are not initializers) with their shapes, and one layer per node named
        as TensorRT's parser names them: after the node (an unnamed node gets a placeholder that
        no list of fallback layers can name)."""
        onnx = _onnx()
        try:
            model = onnx.load_from_string(data)
            onnx.checker.check_model(model)
        except Exception as exc:  # onnx raises DecodeError / ValidationError
            self.errors.append(FakeParserError(f"Failed to parse ONNX model: not a protobuf, or not a valid model ({exc})"))
            return False
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
        self.network.model = {"fake_onnx": 0, "name": filename or graph.name, "types": types_, "inputs": inputs,
                              "layers": layers, "dla_unsupported": [], "outputs": [o.name for o in graph.output],
                              "unnamed_nodes": unnamed, "input_elem_types": elem}
        self.network.inputs = [FakeTensor(i["name"], self.trt.float32, i["shape"]) for i in inputs]
        dtype = self.trt.float16 if types_ == "fp16" else self.trt.float32
        self.network.layers = [FakeLayer(n, dtype) for n in layers]
        return True


def _onnx() -> Any:
    """The onnx package where installed (the host), else None: the device test set has no onnx."""
    try:
        import onnx
    except ImportError:
        return None
    return onnx


class FakeTimingCache:
    def __init__(self, device: str, entries: List[str]) -> None:
        self.device = device
        self.entries = list(entries)

    def serialize(self) -> bytes:
        return TIMING_MAGIC + json.dumps({"device": self.device, "entries": self.entries}).encode()


class FakeHostMemory(bytes):
    @property
    def nbytes(self) -> int:
        return len(self)


class FakeBuilderConfig:
    trt: "FakeTensorRT"
    _PUBLIC = {"default_device_type", "DLA_core", "int8_calibrator"}

    def __init__(self) -> None:
        object.__setattr__(self, "_flags", set())
        object.__setattr__(self, "pool_limits", {})
        object.__setattr__(self, "_timing_cache", None)
        object.__setattr__(self, "default_device_type", self.trt.DeviceType.GPU)
        object.__setattr__(self, "DLA_core", -1)
        if self.trt.IMPLICIT_INT8:
            object.__setattr__(self, "int8_calibrator", None)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._PUBLIC or (name == "int8_calibrator" and not self.trt.IMPLICIT_INT8):
            raise AttributeError(f"'tensorrt.IBuilderConfig' object has no attribute '{name}' (TensorRT {self.trt.__version__})")
        if name == "int8_calibrator" and value is not None:
            if not isinstance(value, FakeIInt8Calibrator):
                raise TypeError("int8_calibrator must be an IInt8Calibrator")
            if self.trt.major >= 10:
                self.trt.warn("IBuilderConfig::setInt8Calibrator is deprecated: implicit quantization is deprecated")
        if name == "default_device_type" and not isinstance(value, self.trt.DeviceType):
            raise TypeError("default_device_type must be a tensorrt.DeviceType")
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


class FakeBuilder:
    trt: "FakeTensorRT"

    def __init__(self, logger: Any) -> None:
        if not isinstance(logger, FakeILogger) or not getattr(logger, "_fake_initialized", False):
            raise TypeError("Builder(): logger must be a tensorrt.ILogger whose __init__ was called")
        self.logger = logger
        self.trt.loggers.append(logger)
        self.num_DLA_cores = self.trt.num_dla_cores
        self.platform_has_fast_fp16 = True
        self.platform_has_fast_int8 = self.trt.fast_int8

    def create_network(self, flags: int = 0) -> FakeNetwork:
        trt = self.trt
        known = 0
        for member in trt.NetworkDefinitionCreationFlag:
            known |= 1 << int(member)
        if flags & ~known:
            raise ValueError(f"create_network(): unknown NetworkDefinitionCreationFlag bits {flags:#x}")
        if trt.EXPLICIT_BATCH == "deprecated" and flags & (1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)):
            trt.warn("NetworkDefinitionCreationFlag::kEXPLICIT_BATCH is deprecated and has no effect")
        trt.calls["create_network"].append(flags)
        return FakeNetwork(trt, flags)

    def create_builder_config(self) -> FakeBuilderConfig:
        return self.trt._config_class()

    def build_serialized_network(self, network: FakeNetwork, config: FakeBuilderConfig) -> Optional[FakeHostMemory]:
        trt = self.trt
        trt.calls["build"].append(network.model["name"] if network.model else None)
        record = self._check(network, config)
        if record is None:
            return None
        return FakeHostMemory(ENGINE_MAGIC + json.dumps(record, sort_keys=True).encode())

    def _fail(self, msg: str) -> None:
        self.logger.log(FakeILogger.Severity.ERROR, msg)
        self.trt.logged.append("ERROR: " + msg)

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
        constrained = [l for l in network.layers if l.precision_is_set or l.output_types]
        if network.strongly_typed and constrained:
            self._fail("layer precision constraints are not allowed in a strongly typed network")
            return None
        if constrained and not ({"OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"} & set(flags)):
            trt.warn("layer precisions were set but neither OBEY nor PREFER_PRECISION_CONSTRAINTS: ignored")
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
            "layer_precisions": {l.name: l.precision.name for l in network.layers if l.precision_is_set},
            "output_types": {l.name: {str(k): v.name for k, v in l.output_types.items()} for l in network.layers if l.output_types},
            "int8": None,
            "timing_cache": None,
        }
        if config.default_device_type == trt.DeviceType.DLA:
            if not 0 <= config.DLA_core < self.num_DLA_cores:
                self._fail(f"DLA core {config.DLA_core} is not available ({self.num_DLA_cores} DLA cores)")
                return None
            if not (weak or network.model["types"] in ("fp16", "qdq")):
                self._fail("DLA supports FP16 and INT8 only")
                return None
            unsupported = network.model.get("dla_unsupported", [])
            if unsupported and "GPU_FALLBACK" not in flags:
                self._fail(f"layer {unsupported[0]} cannot run on DLA and GPU fallback is not enabled")
                return None
            record["gpu_fallback_layers"] = list(unsupported)
        if "INT8" in flags:
            int8 = self._int8(network, config)
            if int8 is None:
                return None
            record["int8"] = int8
        elif network.model["types"] == "qdq":
            if network.strongly_typed:
                record["int8"] = {"mode": "qdq"}
            else:
                self._fail("Q/DQ layers found but BuilderFlag.INT8 is not set")
                return None
        cache = config.get_timing_cache()
        if cache is not None:
            signature = f"{network.model['name']}|{'+'.join(flags)}|{config.default_device_type.name}"
            hit = signature in cache.entries
            record["timing_cache"] = {"entries_before": len(cache.entries), "hit": hit}
            if not hit:
                cache.entries.append(signature)
        return record

    def _int8(self, network: FakeNetwork, config: FakeBuilderConfig) -> Optional[Dict[str, Any]]:
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
        cache = calibrator.read_calibration_cache()
        trt.calls["read_calibration_cache"].append(cache is not None)
        if cache is not None:
            text = bytes(cache).decode(errors="replace")
            if text.split("\n", 1)[0].strip() == header:
                return {"mode": "calibration", "source": "cache", "header": header, "scales": text.count(":")}
            trt.warn("calibration cache does not match this TensorRT or calibrator: calibrating")
        batch = calibrator.get_batch_size()
        names = [t.name for t in network.inputs]
        shape = [batch] + list(network.inputs[0].shape[1:])
        sums: List[float] = []
        while True:
            ptrs = calibrator.get_batch(names)
            if not ptrs:
                break
            sums.append(round(float(trt.device_memory.read(int(ptrs[0]), shape).sum()), 3))
        trt.calls["calibration_batches"].append(sums)
        if not sums:
            self._fail("Calibration failure occurred with no scaling factors detected")
            return None
        lines = [header] + [f"{t.name}: {_hex(1.0 + len(sums))}" for t in network.inputs] + [f"{l.name}: {_hex(0.5)}" for l in network.layers]
        calibrator.write_calibration_cache(memoryview("\n".join(lines).encode() + b"\n"))
        return {"mode": "calibration", "source": "calibrator", "header": header, "batches": len(sums), "batch_sums": sums}


def _hex(scale: float) -> str:
    return struct.pack(">f", scale).hex()


# --- the module objects ------------------------------------------------------------------------

_BUILDER_FLAGS = ["FP16", "INT8", "DEBUG", "GPU_FALLBACK", "REFIT", "DISABLE_TIMING_CACHE", "TF32", "SPARSE_WEIGHTS",
                  "SAFETY_SCOPE", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS", "DIRECT_IO"]


class FakeTensorRT(types.ModuleType):
    """Base of the fakes: a `tensorrt` module with the attributes a version has, and a record."""

    VERSION = "0.0.0"
    EXPLICIT_BATCH: Optional[str] = "required"  # "required" | "deprecated" | None (absent)
    WEAK_FLAGS = True  # BuilderFlag.FP16 / INT8 exist
    IMPLICIT_INT8 = True  # calibrator classes and config.int8_calibrator exist
    STRONGLY_TYPED = False

    def __init__(self, num_dla_cores: int = 2, fast_int8: bool = True, device_name: str = "FakeGPU SM 7.2") -> None:
        super().__init__("tensorrt")
        self.__version__ = self.VERSION
        self.major = int(self.VERSION.split(".")[0])
        parts = [int(p) for p in self.VERSION.split(".")[:3]]
        self.version_code = parts[0] * 1000 + parts[1] * 100 + parts[2]
        self.num_dla_cores = num_dla_cores
        self.fast_int8 = fast_int8
        self.device_name = device_name
        self.fail_build: Optional[str] = None
        self.calls: Dict[str, List[Any]] = defaultdict(list)
        self.logged: List[str] = []
        self.loggers: List[Any] = []
        self.device_memory = FakeDeviceMemory()
        self.has_strongly_typed = self.STRONGLY_TYPED

        flags = [f for f in _BUILDER_FLAGS if self.WEAK_FLAGS or f not in ("FP16", "INT8")]
        self.BuilderFlag = IntEnum("BuilderFlag", [(f, _BUILDER_FLAGS.index(f)) for f in flags])
        net_flags = []
        if self.EXPLICIT_BATCH:
            net_flags.append(("EXPLICIT_BATCH", 0))
        if self.STRONGLY_TYPED:
            net_flags.append(("STRONGLY_TYPED", 1))
        elif self.major < 10:
            net_flags.append(("EXPLICIT_PRECISION", 1))
        self.NetworkDefinitionCreationFlag = IntEnum("NetworkDefinitionCreationFlag", net_flags)
        self.MemoryPoolType = IntEnum("MemoryPoolType", [("WORKSPACE", 0), ("DLA_MANAGED_SRAM", 1), ("DLA_LOCAL_DRAM", 2)])
        self.DeviceType = IntEnum("DeviceType", [("GPU", 0), ("DLA", 1)])
        self.DataType = IntEnum("DataType", [("FLOAT", 0), ("HALF", 1), ("INT8", 2), ("INT32", 3), ("BOOL", 4)])
        self.float32 = self.DataType.FLOAT
        self.float16 = self.DataType.HALF
        self.int8 = self.DataType.INT8
        self.int32 = self.DataType.INT32
        self.ILogger = FakeILogger
        self.Logger = FakeLogger
        self.Builder = type("Builder", (FakeBuilder,), {"trt": self})
        self.OnnxParser = type("OnnxParser", (FakeOnnxParser,), {"trt": self})
        self._config_class = type("IBuilderConfig", (FakeBuilderConfig,), {"trt": self})
        if self.IMPLICIT_INT8:
            self.IInt8Calibrator = FakeIInt8Calibrator
            self.IInt8EntropyCalibrator2 = FakeIInt8EntropyCalibrator2
            self.IInt8MinMaxCalibrator = FakeIInt8MinMaxCalibrator

    def warn(self, msg: str) -> None:
        self.logged.append("WARNING: " + msg)
        for logger in self.loggers:
            logger.log(FakeILogger.Severity.WARNING, msg)

    def error(self, msg: str) -> None:
        self.logged.append("ERROR: " + msg)
        for logger in self.loggers:
            logger.log(FakeILogger.Severity.ERROR, msg)

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
    STRONGLY_TYPED = True


class FakeTensorRT11(FakeTensorRT):
    VERSION = "11.0.0.1"
    EXPLICIT_BATCH = None
    WEAK_FLAGS = False
    IMPLICIT_INT8 = False
    STRONGLY_TYPED = True


FAKES = {"8.5": FakeTensorRT85, "10": FakeTensorRT10, "11": FakeTensorRT11}
