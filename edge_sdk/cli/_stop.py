"""How a long-running command stops: SIGTERM (what systemd, `docker stop` and `timeout` send)
and SIGINT (Ctrl-C) alike, with handlers the command installs itself.

A command started as a background job of a non-interactive shell (`cmd &` in a script,
`nohup cmd &`) inherits SIGINT *ignored*, and Python keeps an inherited ignore: without its own
handler such a command never sees Ctrl-C, and SIGTERM kills it before its `finally` runs. Inside
`stop_signals()` both signals are caught whatever the process inherited:

- the first either calls `on_stop(signum)` (a command whose loops check a flag: the monitor, the
  rollout's waits), or raises `edge_sdk.errors.Stopped` in the main thread (a command blocked in
  a library call: detect waiting for a frame), so the command's own cleanup runs — counters
  printed, recordings and state flushed. Inside `request.held()` the raise waits for the block's
  end: detect writes each frame to all of its sinks or to none;
- a second while the first is still being handled raises `Stopped(forced=True)`: the way out of a
  cleanup that hangs, as a second Ctrl-C is everywhere.

The previous handlers come back when the block ends. Off the main thread (where Python cannot
install handlers: a test's CliRunner in a worker thread) it does nothing.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Dict, Iterator, Optional

from edge_sdk.errors import Stopped

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """What `stop_signals()` yields: which signal came first (None until one does)."""

    def __init__(self, raises: bool = True) -> None:
        self.signum: Optional[int] = None
        self.event = threading.Event()
        self._raises = raises
        self._holding = 0
        self._raised = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A first stop that comes inside the block takes effect at its end, so what the block
        does is done whole: a frame written to every sink or to none."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
        self.deliver()

    def deliver(self) -> None:
        """Raise the Stopped that a held block deferred (once)."""
        if self._raises and self.signum is not None and not self._raised and self._holding == 0:
            self._raised = True
            raise Stopped(self.signum)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return Stopped(self.signum).name if self.signum is not None else ""


@contextlib.contextmanager
def stop_signals(on_stop: Optional[Callable[[int], None]] = None) -> Iterator[StopRequest]:
    """Catch SIGTERM and SIGINT for the block (see the module's text)."""
    request = StopRequest(raises=on_stop is None)
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handle(signum: int, frame: Any) -> None:
        if request.signum is not None:
            raise Stopped(signum, forced=True)
        request.signum = signum
        request.event.set()
        if on_stop is not None:
            on_stop(signum)
        else:
            request.deliver()  # at once, or at the end of the block that holds it

    previous: Dict[int, Any] = {}
    try:
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, handle)
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
