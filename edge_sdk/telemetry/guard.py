"""A guard for paho callbacks: nothing received from the network may raise out of one.

paho-mqtt re-raises a callback's exception in its network thread, which then ends: the client
goes deaf while the process looks alive. Every callback we register is wrapped:

    guard = CallbackGuard("monitor")
    client.on_message = guard(on_message)

An exception is logged (with its traceback the first times, then once a minute) and counted in
`guard.errors`; the network thread goes on.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)


class CallbackGuard:
    def __init__(self, name: str, verbose: int = 5, every_s: float = 60.0) -> None:
        self.name = name
        self.errors = 0
        self._verbose = verbose
        self._every_s = every_s
        self._last_log = 0.0
        self._lock = threading.Lock()

    def __call__(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(callback)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return callback(*args, **kwargs)
            except Exception:  # noqa: BLE001 - the network thread must survive any message; logged, counted
                self._report(callback.__name__)
                return None

        return guarded

    def _report(self, where: str) -> None:
        with self._lock:
            self.errors += 1
            now = time.monotonic()
            if self.errors <= self._verbose or now - self._last_log >= self._every_s:
                self._last_log = now
                log.exception("%s: %s failed on a received message (%d so far); the client goes on",
                              self.name, where, self.errors)
