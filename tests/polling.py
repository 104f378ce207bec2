"""Waiting on state owned by another thread or process, for tests."""
from __future__ import annotations

import threading
import time
from typing import Callable


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, poll: float = 0.02) -> bool:
    """Poll `predicate` until it holds (True) or `timeout` seconds pass (False).

    For counters and state that another thread owns and that offer no event to wait on; the
    poll interval only bounds how soon a change is seen, it does not stand in for ordering.
    """
    deadline = time.monotonic() + timeout
    idle = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        idle.wait(poll)
    return True
