"""Inference backends behind one small runner interface (Polygraphy style).

A backend is a *runner*: `activate()` creates the session/engine, `infer(feed)` runs one
batch and returns the outputs in the model's output order, `deactivate()` frees it. It is
also a context manager. Loaders (small callables that produce a session) live next to their
runner, so a test or the daemon can inject them.

`select_backend(name, ...)` picks one from the name, the bundle and what is importable:

| name | what runs | when it cannot |
|---|---|---|
| `auto` | TensorRT when that backend is installed, else ONNX Runtime with CUDA when available, else CPU | never fails for lack of a GPU |
| `onnxruntime` | ONNX Runtime, CUDA execution provider when available, else CPU | — |
| `onnxruntime-cpu` / `-cuda` / `-tensorrt` | ONNX Runtime with exactly that execution provider | BackendError, never a silent fallback |
| `tensorrt` | the native TensorRT backend (`edge_sdk.runtime.backends.tensorrt`) | BackendError naming what is missing |
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import BackendError, MissingDependencyError

BACKEND_NAMES = ("auto", "onnxruntime", "onnxruntime-cpu", "onnxruntime-cuda", "onnxruntime-tensorrt", "tensorrt")
TENSORRT_MODULE = "edge_sdk.runtime.backends.tensorrt"


class Backend:
    """The runner interface every backend implements."""

    name = "backend"

    def __init__(self) -> None:
        self.input_names: List[str] = []
        self.output_names: List[str] = []
        self.is_active = False

    def activate(self) -> None:
        raise NotImplementedError

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        """Run one batch. Outputs are in `output_names` order. They may be buffers the backend
        reuses: valid until the next `infer` call; copy what must outlive it."""
        raise NotImplementedError

    def deactivate(self) -> None:
        raise NotImplementedError

    def describe(self) -> Dict[str, Any]:
        """What is running, for logs and telemetry (name, provider, threads, model...)."""
        return {"backend": self.name}

    @property
    def cpu_bound(self) -> bool:
        """True when inference runs on the CPU's cores (and so owns them while it runs): the
        pipeline then keeps its capture thread out of the inference threads' way."""
        return False

    def __enter__(self) -> "Backend":
        if not self.is_active:
            self.activate()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.is_active:
            self.deactivate()


def tensorrt_status() -> Optional[str]:
    """None when the native TensorRT backend can run here, else why not (a user-facing reason)."""
    try:
        _imports.tensorrt()
    except MissingDependencyError as exc:
        return f"unavailable: it needs TensorRT, which cannot be imported here ({exc})"
    try:
        importlib.import_module(TENSORRT_MODULE)
    except ImportError:
        return f"not available in this build of edge-sdk (no {TENSORRT_MODULE} module)"
    return None


def available_backends() -> List[str]:
    """Names of the backends that can run on this machine now."""
    names: List[str] = []
    if tensorrt_status() is None:
        names.append("tensorrt")
    if _imports.available("onnxruntime"):
        from edge_sdk.runtime.backends.onnxruntime import PROVIDERS, available_providers

        names.append("onnxruntime")
        names += [f"onnxruntime-{short}" for short, full in PROVIDERS.items() if full in available_providers()]
    return names


def select_backend(
    name: str = "auto",
    model_path: Optional[Path] = None,
    *,
    bundle: Any = None,
    precision: str = "fp32",
    threads: int = 0,
    **options: Any,
) -> Backend:
    """Create (not activate) the backend `name` for a bundle's precision variant or a model path."""
    if name not in BACKEND_NAMES:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name == "tensorrt" or (name == "auto" and bundle is not None and tensorrt_status() is None):
        return _tensorrt_backend(bundle, precision, threads=threads, **options)
    if model_path is None:
        if bundle is None:
            raise BackendError("select_backend needs a bundle or a model path")
        model_path = bundle.model_path(precision)
    if name in ("auto", "onnxruntime"):
        provider = "auto"
    else:
        provider = name.split("-", 1)[1]
    try:
        from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend

        _imports.ort()
    except MissingDependencyError as exc:
        raise BackendError(
            f"the ONNX Runtime backend needs onnxruntime: pip install \"edge-sdk[cpu]\" (or onnxruntime-gpu); {exc}"
        ) from exc
    return OnnxRuntimeBackend(model_path, provider=provider, threads=threads, **options)


def _tensorrt_backend(bundle: Any, precision: str, **options: Any) -> Backend:
    reason = tensorrt_status()
    if reason is not None:
        raise BackendError(f"the tensorrt backend is {reason}; use --backend onnxruntime, or run on a Jetson with JetPack")
    if bundle is None:
        raise BackendError("the tensorrt backend builds its engine from a bundle; pass --bundle DIR")
    module = importlib.import_module(TENSORRT_MODULE)
    return module.TensorRTBackend.from_bundle(bundle, precision, **options)  # type: ignore[no-any-return]
