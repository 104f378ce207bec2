"""ONNX Runtime backend: a session loader and a runner that binds preallocated buffers.

`SessionFromOnnx(path, providers, threads)` is the loader; `OnnxRuntimeBackend` the runner.
After the first call the runner binds its input to the caller's tensor and its outputs to
buffers of its own (ONNX Runtime I/O binding), so a steady stream of `infer` calls on the same
input tensor copies nothing and allocates no array: outputs are written in place and the same
arrays are returned each time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import BackendError, ModelError
from edge_sdk.runtime.backends.base import Backend, Capabilities, TensorSpec

PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}

_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def available_providers() -> List[str]:
    return list(_imports.ort().get_available_providers())


def execution_provider(provider: str) -> str:
    """The short name (cpu, cuda, tensorrt) of the provider a choice runs on first: `auto` is
    CUDA when this onnxruntime has it, else the CPU (resolve_providers' rule)."""
    if provider != "auto":
        return provider
    return "cuda" if PROVIDERS["cuda"] in available_providers() else "cpu"


def resolve_providers(provider: str) -> List[Any]:
    """Execution providers for a choice: auto (CUDA when present, else CPU), cpu, cuda or tensorrt.

    An explicit choice that this onnxruntime cannot honour is a BackendError.
    """
    have = available_providers()
    if provider == "auto":
        return [p for p in (PROVIDERS["cuda"], PROVIDERS["cpu"]) if p in have]
    if provider not in PROVIDERS:
        raise BackendError(f"unknown ONNX Runtime provider {provider!r}; choose one of auto, {', '.join(PROVIDERS)}")
    wanted = PROVIDERS[provider]
    if wanted not in have:
        hint = {
            "cuda": "install onnxruntime-gpu matching your CUDA (on a Jetson: the wheel from NVIDIA's Jetson Zoo)",
            "tensorrt": "install an onnxruntime build with TensorRT (onnxruntime-gpu with TensorRT libraries), or use --backend tensorrt",
            "cpu": "reinstall onnxruntime",
        }[provider]
        raise BackendError(
            f"ONNX Runtime execution provider {wanted} is not available here (this onnxruntime has: {', '.join(have)}); {hint}"
        )
    if provider == "tensorrt":
        import platformdirs

        cache = Path(platformdirs.user_cache_dir("edge-sdk")) / "ort-trt"
        options = {"trt_engine_cache_enable": True, "trt_engine_cache_path": str(cache)}
        return [(wanted, options)] + [p for p in (PROVIDERS["cuda"], PROVIDERS["cpu"]) if p in have]
    if provider == "cuda":
        return [wanted, PROVIDERS["cpu"]]
    return [wanted]


class SessionFromOnnx:
    """Loader: an `onnxruntime.InferenceSession` for a model file.

    `spinning=False` (the default here, unlike ONNX Runtime's) stops idle intra-op threads
    from busy-waiting between runs: beside a capture thread on a small CPU, spinning threads
    take the cores that decoding the next frame needs.

    A model whose batch dimension is free (several streams in one call) runs without ONNX
    Runtime's memory pattern: the pattern is planned and kept per input shape, and batches of
    1, 2, 3 and 4 frames each kept their own, which held about 60 MB more than the largest batch
    needs (CenterFace 640x384 on the CPU: 252 MB against 194 MB after runs of every size). Such
    a session on the CPU alone is opened a second time without it, once its input is seen to be
    free (other providers keep it: a second TensorRT session would build its engines again).
    """

    def __init__(self, path: Any, providers: Sequence[Any], threads: int = 0, optimization: str = "all",
                 spinning: bool = False) -> None:
        self.path = Path(path)
        self.providers = list(providers)
        self.threads = int(threads)
        self.optimization = optimization
        self.spinning = spinning

    def __call__(self) -> Any:
        ort = _imports.ort()
        if not self.path.is_file():
            raise ModelError(f"model file {self.path} does not exist")
        session = self._open(ort, memory_pattern=True)
        inputs = session.get_inputs()
        cpu_only = all((p[0] if isinstance(p, tuple) else p) == "CPUExecutionProvider" for p in self.providers)
        if cpu_only and inputs and inputs[0].shape and not isinstance(inputs[0].shape[0], int):  # a free batch
            del session
            session = self._open(ort, memory_pattern=False)
        return session

    def _open(self, ort: Any, memory_pattern: bool) -> Any:
        so = ort.SessionOptions()
        so.enable_mem_pattern = memory_pattern
        so.log_severity_level = 3  # errors only; unused-initializer warnings are noise here
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
        so.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.optimization]
        try:
            return ort.InferenceSession(str(self.path), so, providers=self.providers)
        except Exception as exc:  # onnxruntime raises its own pybind exception types
            raise ModelError(f"ONNX Runtime cannot load {self.path}: {exc}") from exc


class OnnxRuntimeBackend(Backend):
    """Runner over an ONNX Runtime session (CPU, CUDA or TensorRT execution provider)."""

    name = "onnxruntime"

    def __init__(self, model_path: Any, provider: str = "auto", threads: int = 0, reuse_outputs: bool = True,
                 session_loader: Any = None, spinning: bool = False) -> None:
        super().__init__()
        self.model_path = Path(model_path)
        self.provider = provider
        self.threads = int(threads)
        self.spinning = spinning
        self.reuse_outputs = reuse_outputs
        self._loader = session_loader
        self.session: Any = None
        self._binding: Any = None
        self._bound_inputs: Dict[str, np.ndarray] = {}
        self._bound_values: Dict[str, Any] = {}
        self._outputs: List[np.ndarray] = []
        self._static_outputs = True

    def activate(self) -> None:
        providers = resolve_providers(self.provider)
        loader = self._loader or SessionFromOnnx(self.model_path, providers, self.threads, spinning=self.spinning)
        session = loader()
        wanted = [p[0] if isinstance(p, tuple) else p for p in providers]
        got = list(session.get_providers())
        if self.provider != "auto" and wanted[0] not in got:
            raise BackendError(
                f"ONNX Runtime did not enable {wanted[0]} for {self.model_path} (enabled: {', '.join(got)}); "
                "its libraries failed to load. Fix the CUDA/TensorRT installation or choose --backend onnxruntime-cpu"
            )
        self.session = session
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]
        # the declared shapes (a str or None for a symbolic dimension) and types; ONNX Runtime takes
        # a host array of any type: it is converted to the model's (_as_input)
        self.input_specs = {i.name: TensorSpec(list(i.shape), np.dtype(_DTYPES.get(i.type, np.float32)), casting="unsafe")
                            for i in session.get_inputs()}
        # Outputs whose shape depends on the data (e.g. a model with NMS inside) cannot be bound
        # to fixed buffers; such models run through session.run, which allocates the outputs.
        input_symbols = {d for spec in self.input_specs.values() for d in spec.shown if isinstance(d, str)}
        self._static_outputs = all(
            isinstance(d, int) or (isinstance(d, str) and d in input_symbols) for o in session.get_outputs() for d in o.shape
        )
        self._binding = session.io_binding()
        self._bound_inputs = {}
        self._bound_values = {}
        self._outputs = []
        self.is_active = True

    @property
    def providers(self) -> List[str]:
        return list(self.session.get_providers()) if self.session is not None else []

    @property
    def cpu_bound(self) -> bool:
        return self.providers[:1] == [PROVIDERS["cpu"]]

    def capabilities(self) -> Capabilities:
        return Capabilities(device="cpu" if self.cpu_bound else "gpu", threads=self.threads if self.cpu_bound else 0)

    def describe(self) -> Dict[str, Any]:
        return dict(super().describe(), providers=self.providers, threads=self.threads, model=str(self.model_path))

    def input_shape(self, name: Optional[str] = None) -> List[Any]:
        """The declared shape of an input (symbolic dims are strings or None)."""
        if not self.is_active:
            raise BackendError("activate the backend first")
        return list(self.input_specs[name or self.input_names[0]].shown)

    def input_dtype(self, name: Optional[str] = None) -> np.dtype:
        """The element type of an input, as the model declares it."""
        if not self.is_active:
            raise BackendError("activate the backend first")
        return np.dtype(self.input_specs[name or self.input_names[0]].dtype)

    def _as_input(self, name: str, arr: Any) -> np.ndarray:
        """A checked input as ONNX Runtime takes it: C-contiguous, of the model's type."""
        arr = np.asarray(arr)
        dtype = self.input_specs[name].dtype
        if arr.dtype != dtype or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr, dtype=dtype)
        return arr

    def _infer_impl(self, feed: Mapping[str, Any]) -> List[np.ndarray]:
        if not self._static_outputs:
            try:
                outs = self.session.run(None, {n: self._as_input(n, feed[n]) for n in self.input_names})
            except Exception as exc:
                raise BackendError(f"ONNX Runtime failed to run {self.model_path.name}: {exc}") from exc
            return list(outs)
        ort = _imports.ort()
        rebound = False
        for name in self.input_names:
            given = feed[name]
            if self._bound_inputs.get(name) is given:
                continue
            arr = self._as_input(name, given)
            value = ort.OrtValue.ortvalue_from_numpy(arr)
            self._binding.bind_ortvalue_input(name, value)
            old = self._bound_inputs.get(name)
            if old is None or old.shape != arr.shape:
                rebound = True
            self._bound_inputs[name] = given if arr is given else arr
            self._bound_values[name] = value
        try:
            if rebound or not self._outputs:
                # First call for these shapes: let ONNX Runtime size the outputs, then bind ours.
                self._binding.clear_binding_outputs()
                for name in self.output_names:
                    self._binding.bind_output(name, "cpu")
                self.session.run_with_iobinding(self._binding)
                fresh = self._binding.copy_outputs_to_cpu()
                self._outputs = [np.ascontiguousarray(o) for o in fresh]
                self._binding.clear_binding_outputs()
                for name, buf in zip(self.output_names, self._outputs):
                    self._binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(buf))
            else:
                self.session.run_with_iobinding(self._binding)
        except Exception as exc:  # onnxruntime's pybind exceptions carry the reason
            raise BackendError(f"ONNX Runtime failed to run {self.model_path.name}: {exc}") from exc
        if self.reuse_outputs:
            return self._outputs
        return [o.copy() for o in self._outputs]

    def deactivate(self) -> None:
        self._binding = None
        self._bound_inputs = {}
        self._bound_values = {}
        self._outputs = []
        self.session = None
        self.input_specs = {}
        self.is_active = False
