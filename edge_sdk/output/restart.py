"""A video output that comes back after its GStreamer process dies (kill -9, the OOM killer, a
crashed encoder), for the daemon: detection, telemetry and commands never stop for a secondary
output.

`RestartingOutput` has VideoOutput's face (`put`, `stats`, `close`). When `put` finds the child
dead it reports the death (`on_change(name, True, why)`: the daemon's `output_failed` alert),
closes what is left of it off the frame loop, and from then on drops frames while a new child is
started on a thread of its own with backoff (1 s, doubling to 60 s); the first frame after a
start that succeeded goes to the new child (`on_change(name, False, ...)`: the alert clears).
`restarts` counts the children started again. A file output is not restarted: a new child would
write the file again from its start; it stays stopped, and says so.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional

import numpy as np

from edge_sdk.errors import EdgeSdkError, OutputError

log = logging.getLogger(__name__)

BACKOFF_S = (1.0, 60.0)  # the first wait before a restart, and the longest


class RestartingOutput:
    def __init__(self, first: Any, open_again: Callable[[], Any], on_change: Callable[[str, bool, str], None],
                 backoff_s: tuple = BACKOFF_S, clock: Callable[[], float] = time.monotonic) -> None:
        """`first`: the VideoOutput started with the daemon; `open_again()` starts another for the
        same target (raising OutputError or ConfigError when it cannot)."""
        self.target = first.target
        self.name = first.name
        self._out: Optional[Any] = first
        self._open_again = open_again
        self._on_change = on_change
        self._backoff = backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: Optional[Any] = None
        self._starting = False
        self._closed = False
        self._delay = backoff_s[0]
        self._next = 0.0
        self._error: Optional[str] = None
        self._last = first.stats()
        self.restarts = 0

    def put(self, frame: np.ndarray) -> None:
        """Hand `frame` to the child, or drop it while none runs; never raises for the child."""
        if self._out is None:
            self._adopt()
            if self._out is None:
                return
        try:
            self._out.put(frame)
        except OutputError as exc:
            self._died(str(exc))

    def _died(self, why: str) -> None:
        dead, self._out = self._out, None
        self._error = why
        if dead is not None:
            self._last = dead.stats()
            threading.Thread(target=_close_quietly, args=(dead,), name="output-close", daemon=True).start()
        again = self.target.kind != "file"
        log.error("%s%s", why, f"; starting it again in {self._delay:g} s" if again else
                  "; a file output is not started again (a new process would write the file from its start)")
        self._on_change(self.name, True, why + ("" if again else "; not restarted (a file)"))
        self._next = self._clock() + self._delay

    def _adopt(self) -> None:
        """Take a child started meanwhile, or start one when the backoff allows."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                if self._closed:
                    threading.Thread(target=_close_quietly, args=(pending,), daemon=True).start()
                    return
                self._out, self._error = pending, None
                self.restarts += 1
                self._delay = self._backoff[0]
                self._on_change(self.name, False, f"video output {self.name} started again ({self.restarts} restart(s))")
                return
            if self._starting or self._closed or self.target.kind == "file" or self._clock() < self._next:
                return
            self._starting = True
        threading.Thread(target=self._start, name="output-restart", daemon=True).start()

    def _start(self) -> None:
        try:
            new = self._open_again()
        except EdgeSdkError as exc:
            with self._lock:
                self._starting = False
                self._error = f"{self._error}; starting it again failed: {exc}"
                self._delay = min(self._delay * 2, self._backoff[1])
                self._next = self._clock() + self._delay
            log.warning("video output %s: starting it again failed (%s); next try in %g s", self.name, exc, self._delay)
            return
        with self._lock:
            self._starting = False
            self._pending = new

    def stats(self) -> Dict[str, Any]:
        out = self._out
        figures = dict(out.stats() if out is not None else self._last)
        if out is None:
            figures.update(error=self._error, encode_ms=None, clients=0)
        figures["restarts"] = self.restarts
        return figures

    def close(self, timeout_s: float = 30.0) -> bool:
        with self._lock:
            self._closed = True
            out, self._out = self._out, None
        return out.close(timeout_s) if out is not None else True


def _close_quietly(output: Any) -> None:
    try:
        output.close(5.0)
    except Exception:  # noqa: BLE001 - what is left of a dead child; logged
        log.exception("closing the video output %s failed", getattr(output, "name", "?"))
