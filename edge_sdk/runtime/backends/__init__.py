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

Each name is an entry of a registry: `register_backend(name, factory, available=...)` adds one
(a factory that creates the runner, a test that says whether it can run here);
`select_backend` creates the named one, `available_backends()` lists those that can run, and
`BACKEND_NAMES` (the configuration's choices) are the names registered here.

Which of the bundle's variants runs is decided by the precision policy, edge_sdk.precision
(`choose_precision`, re-exported here; precision `auto` asks it to pick for the backend); the
created backend says which and why in its `precision` and `precision_reason` attributes and in
`describe()`.
"""
from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from edge_sdk import _imports
from edge_sdk.errors import BackendError, MissingDependencyError
from edge_sdk.precision import AUTO, CPU_REASON, check_precision, choose_precision
from edge_sdk.runtime.backends.base import Backend

__all__ = ["BACKEND_NAMES", "CPU_REASON", "Backend", "BackendEntry", "available_backends", "check_precision",
           "choose_precision", "register_backend", "select_backend", "tensorrt_status"]

TENSORRT_MODULE = "edge_sdk.runtime.backends.tensorrt"


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


@dataclass(frozen=True)
class BackendEntry:
    """A registered backend: `factory(model_path=, bundle=, precision=, threads=, **options)`
    creates it (not active); `available()` says whether it can run on this machine now (None for
    a name that picks one of the others when the backend is created, as `auto` does)."""

    name: str
    factory: Callable[..., Backend]
    available: Optional[Callable[[], bool]] = None


_REGISTRY: Dict[str, BackendEntry] = {}


def register_backend(name: str, factory: Callable[..., Backend], available: Optional[Callable[[], bool]] = None) -> None:
    """Make `name` a backend that `select_backend` creates with `factory` and `available_backends`
    lists when `available()` is true. A name is registered once."""
    if name in _REGISTRY:
        raise BackendError(f"a backend named {name!r} is registered already")
    _REGISTRY[name] = BackendEntry(name, factory, available)


def available_backends() -> List[str]:
    """Names of the backends that can run on this machine now, in registration order."""
    return [e.name for e in _REGISTRY.values() if e.available is not None and e.available()]


def select_backend(
    name: str = "auto",
    model_path: Optional[Path] = None,
    *,
    bundle: Any = None,
    precision: str = AUTO,
    threads: int = 0,
    **options: Any,
) -> Backend:
    """Create (not activate) the backend `name` for a bundle's precision variant or a model path.

    With a bundle, the variant comes from `choose_precision(precision, bundle, <the backend that
    runs>)`; the backend's `precision` and `precision_reason` say which and why."""
    entry = _REGISTRY.get(name)
    if entry is None:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(_REGISTRY)}")
    check_precision(precision)
    return entry.factory(model_path=model_path, bundle=bundle, precision=precision, threads=threads, **options)


def _auto(model_path: Optional[Path], bundle: Any, precision: str, threads: int, **options: Any) -> Backend:
    """TensorRT for a bundle when that backend can run here, else ONNX Runtime (CUDA when it has it)."""
    if bundle is not None:
        reason = tensorrt_status()
        if reason is None:
            return _tensorrt(model_path, bundle, precision, threads, **options)
        _say_fallback_once(reason)
    return _onnxruntime("auto", model_path, bundle, precision, threads, **options)


def _tensorrt(model_path: Optional[Path], bundle: Any, precision: str, threads: int, **options: Any) -> Backend:
    _check_tensorrt(bundle)
    # The backend resolves `auto` itself: on TensorRT it follows the choice `edge-sdk engine` made on
    # this device where there is one (edge_sdk.precision.choose_engine_precision).
    backend = _tensorrt_backend(bundle, precision, threads=threads, **options)
    if backend.precision is None:
        backend.precision, backend.precision_reason = choose_precision(precision, bundle, "tensorrt")
    return backend


def _onnxruntime(provider: str, model_path: Optional[Path], bundle: Any, precision: str, threads: int,
                 **options: Any) -> Backend:
    if model_path is None and bundle is None:
        raise BackendError("select_backend needs a bundle or a model path")
    options.pop("progress", None)  # an engine build's progress and workspace: ONNX Runtime builds none
    options.pop("workspace_limit", None)
    try:
        from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend, execution_provider

        _imports.ort()
    except MissingDependencyError as exc:
        raise BackendError(
            f"the ONNX Runtime backend needs onnxruntime: pip install \"edge-sdk[cpu]\" (or onnxruntime-gpu); {exc}"
        ) from exc
    if model_path is not None:  # a model file given directly: no variant to choose
        variant: Optional[str] = None if precision == AUTO else precision
        reason = "a model file given directly, not a bundle variant"
    else:
        variant, reason = choose_precision(precision, bundle, "onnxruntime-" + execution_provider(provider))
        model_path = bundle.model_path(variant)
    backend = OnnxRuntimeBackend(model_path, provider=provider, threads=threads, **options)
    backend.precision, backend.precision_reason = variant, reason
    return backend


def _ort_has(provider: str) -> Callable[[], bool]:
    def available() -> bool:
        if not _imports.available("onnxruntime"):
            return False
        if provider == "auto":
            return True
        from edge_sdk.runtime.backends.onnxruntime import PROVIDERS, available_providers

        return PROVIDERS[provider] in available_providers()

    return available


register_backend("auto", _auto)
register_backend("onnxruntime", partial(_onnxruntime, "auto"), available=_ort_has("auto"))
for _provider in ("cpu", "cuda", "tensorrt"):  # the execution providers of edge_sdk.runtime.backends.onnxruntime.PROVIDERS
    register_backend(f"onnxruntime-{_provider}", partial(_onnxruntime, _provider), available=_ort_has(_provider))
register_backend("tensorrt", _tensorrt, available=lambda: tensorrt_status() is None)

# The built-in names, for the configuration's choices and the command line's help. `auto` and
# `onnxruntime` pick one of the others when the backend is created (select_backend).
BACKEND_NAMES = tuple(_REGISTRY)


# Fallback reasons already said in this process: `auto` says once why it runs ONNX Runtime, not
# on every model load (hot reloads, `set mode`).
_FALLBACK_SAID: set = set()


def _say_fallback_once(reason: str) -> None:
    if reason in _FALLBACK_SAID:
        return
    _FALLBACK_SAID.add(reason)
    logging.getLogger(__name__).warning(
        "backend auto: the tensorrt backend is %s; running ONNX Runtime instead (on a Jetson, install JetPack's "
        "python3-libnvinfer to run TensorRT engines)", reason)


def _check_tensorrt(bundle: Any) -> None:
    reason = tensorrt_status()
    if reason is not None:
        raise BackendError(f"the tensorrt backend is {reason}; use --backend onnxruntime, or run on a Jetson with JetPack")
    if bundle is None:
        raise BackendError("the tensorrt backend builds its engine from a bundle; pass --bundle DIR")


def _tensorrt_backend(bundle: Any, precision: str, **options: Any) -> Backend:
    module = importlib.import_module(TENSORRT_MODULE)
    return module.TensorRTBackend.from_bundle(bundle, precision, **options)  # type: ignore[no-any-return]
