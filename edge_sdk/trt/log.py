"""TensorRT's log: one logger for the whole process, read by whoever listens.

TensorRT 8.x keeps the first `ILogger` handed to a Builder, Runtime or Refitter and ignores
every later one while any of them lives: it warns once ("The logger passed into
createInferRuntime differs from one already provided ...", NVIDIA/TensorRT #1475) and
the later logger receives nothing. A logger per build or per runner therefore reads nothing
on a rebuild, beside a second backend, or in a precision choice that builds several engines.
Polygraphy keeps one process-wide logger for this reason (`backend/trt/util.py`,
`get_trt_logger`); so does this module.

    with listen() as tail:                          # subscribe for the scope
        builder = trt.Builder(process_logger(trt))  # every Builder/Runtime gets the same logger
        ...
    tail.messages                                   # [(severity name, message)], in order

A `Listener` receives every message logged while it is subscribed, whichever thread or
object logged it (TensorRT's messages do not say which builder or runtime they come from): two
builds at once each read both. A library that handed TensorRT a logger of its own before this
one, and still holds a Builder or Runtime, takes every message: nothing here can change that.
Subscribing and logging are thread-safe. Messages nobody listens to go to Python's `logging`
(errors as errors, the rest as debug: TensorRT repeats its warnings).
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from contextlib import contextmanager
from typing import Any, Deque, Iterator, List, Optional, Tuple

from edge_sdk.errors import BackendError

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
_LOGGER: Optional[Tuple[Any, Any]] = None  # (the tensorrt module, its logger)
_LISTENERS: List["Listener"] = []


class Listener:
    """The messages logged while subscribed, at `min_severity` and above (TensorRT's
    severities: 0 internal error, 1 error, 2 warning, 3 info, 4 verbose); the last `keep`
    of them when `keep` is given (a runner that listens for hours)."""

    def __init__(self, min_severity: int = 2, keep: Optional[int] = None) -> None:
        self.min_severity = int(min_severity)
        self._messages: Deque[Tuple[str, str]] = deque(maxlen=keep)
        self._lock = threading.Lock()

    @property
    def messages(self) -> List[Tuple[str, str]]:
        """[(severity name, message)], oldest first: a copy, safe while others log."""
        with self._lock:
            return list(self._messages)

    def _add(self, severity: int, name: str, msg: str) -> None:
        if severity <= self.min_severity:
            with self._lock:
                self._messages.append((name, msg))


def _deliver(severity: Any, msg: str) -> None:
    level = int(severity)
    name = getattr(severity, "name", str(severity)).split(".")[-1]
    with _LOCK:
        listeners = list(_LISTENERS)
    for listener in listeners:
        listener._add(level, name, msg)
    if not listeners:
        log.log(logging.ERROR if level <= 1 else logging.DEBUG, "TensorRT %s: %s", name, msg)


def process_logger(trt: Any) -> Any:
    """The process's one `trt.ILogger`, made on first use (one per `tensorrt` module: the tests
    install a fresh fake module per test; a real process has one)."""
    global _LOGGER
    with _LOCK:
        if _LOGGER is not None and _LOGGER[0] is trt:
            return _LOGGER[1]

        class ProcessLogger(trt.ILogger):  # type: ignore[misc, name-defined]
            def __init__(self) -> None:
                trt.ILogger.__init__(self)

            def log(self, severity: Any, msg: str) -> None:
                try:  # ILogger::log is noexcept: nothing may escape into TensorRT
                    _deliver(severity, str(msg))
                except Exception:  # a listener's failure must not reach TensorRT's C++ frames
                    log.exception("TensorRT log message lost")

        logger = ProcessLogger()
        _LOGGER = (trt, logger)
        return logger


def subscribe(listener: Listener) -> Listener:
    with _LOCK:
        _LISTENERS.append(listener)
    return listener


def unsubscribe(listener: Listener) -> None:
    with _LOCK:
        if listener in _LISTENERS:
            _LISTENERS.remove(listener)


@contextmanager
def listen(min_severity: int = 2, keep: Optional[int] = None) -> Iterator[Listener]:
    """Subscribe a Listener for the scope of the `with` block."""
    listener = subscribe(Listener(min_severity, keep))
    try:
        yield listener
    finally:
        unsubscribe(listener)


def listening() -> int:
    """How many listeners are subscribed now."""
    with _LOCK:
        return len(_LISTENERS)


_FACTORIES = {"Builder": "createInferBuilder", "Runtime": "createInferRuntime"}


def create(trt: Any, kind: str, listener: Any = None) -> Any:
    """`trt.Builder` or `trt.Runtime` (`kind`) on the process logger. TensorRT's Python classes
    are pybind11 factories over createInferBuilder / createInferRuntime: when that returns null
    (CUDA could not initialise, or no memory for it) pybind11 raises a bare TypeError ("factory
    function returned nullptr"); that becomes the BackendError naming what failed, with what
    `listener` heard of TensorRT's reason."""
    try:
        return getattr(trt, kind)(process_logger(trt))
    except TypeError as exc:
        raise BackendError(
            f"TensorRT could not create its {kind} ({_FACTORIES.get(kind, kind)} returned nothing: {exc}); CUDA "
            "did not initialise or GPU memory ran out: check the GPU with `edge-sdk doctor`, stop other GPU programs"
            + log_tail(listener)) from exc


def log_tail(listener: Any, n: int = 8) -> str:
    """The last `n` messages a listener heard, as a paragraph to end an error message with
    ("" when it heard none)."""
    lines = [f"{s}: {m}" for s, m in getattr(listener, "messages", [])][-n:]
    return ("\nTensorRT log:\n  " + "\n  ".join(lines)) if lines else ""
