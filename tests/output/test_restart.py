"""RestartingOutput's rules, with a stand-in for VideoOutput (its put/stats/close face) and a
clock the test moves: a dead child is reported once, frames are dropped while none runs, a start
that fails waits twice as long next time, a file output is never started again. The real child
killed under a real daemon: tests/daemon/test_daemon_output.py."""
from __future__ import annotations

import threading
from typing import Any, Dict, List

import numpy as np

from edge_sdk.errors import OutputError
from edge_sdk.output.restart import RestartingOutput
from edge_sdk.output.video import OutputTarget
from polling import wait_until


class StandIn:
    """VideoOutput's face: put raises OutputError once `dead`."""

    def __init__(self, kind: str = "rtsp") -> None:
        self.target = OutputTarget(kind, "rtsp://127.0.0.1:8554/x" if kind == "rtsp" else "/tmp/x.mp4")
        self.name = self.target.target
        self.dead = False
        self.frames = 0
        self.closed = threading.Event()

    def put(self, frame: np.ndarray) -> None:
        if self.dead:
            raise OutputError(f"video output {self.name} stopped: killed")
        self.frames += 1

    def stats(self) -> Dict[str, Any]:
        return {"out": self.name, "kind": self.target.kind, "encoder": "x264enc", "frames": self.frames, "dropped": 0,
                "encode_ms": 1.0, "encode_ms_mean": 1.0, "clients": 0, "error": None}

    def close(self, timeout_s: float = 30.0) -> None:
        self.closed.set()


FRAME = np.zeros((4, 4, 3), np.uint8)


def test_a_dead_output_is_reported_started_again_with_backoff_and_adopted() -> None:
    now = [0.0]
    heard: List[tuple] = []
    first = StandIn()
    made: List[StandIn] = []
    fail = [True]
    started = threading.Event()

    def again() -> StandIn:
        started.set()
        if fail[0]:
            raise OutputError("port in use")
        made.append(StandIn())
        return made[-1]

    out = RestartingOutput(first, again, lambda name, down, why: heard.append((down, why)), clock=lambda: now[0])
    out.put(FRAME)
    first.dead = True
    out.put(FRAME)  # the death: reported once, the rest closed off the frame loop
    assert heard and heard[0][0] is True and "killed" in heard[0][1] and first.closed.wait(5)
    out.put(FRAME)  # within the first second: no start yet
    assert not started.is_set()
    now[0] = 1.5
    out.put(FRAME)  # a start, which fails: the next wait doubles
    assert started.wait(5)
    assert wait_until(lambda: not out._starting)
    assert out.stats()["error"].endswith("starting it again failed: port in use") and out.stats()["restarts"] == 0
    started.clear()
    now[0] = 2.5
    out.put(FRAME)  # 1 s after the failure: within the 2 s it now waits
    assert not started.is_set()
    fail[0] = False
    now[0] = 4.0
    out.put(FRAME)
    assert started.wait(5) and wait_until(lambda: out._pending is not None)
    out.put(FRAME)  # adopted: this frame goes to the new child
    assert made[0].frames == 1 and out.stats()["restarts"] == 1 and out.stats()["error"] is None
    assert [down for down, _ in heard] == [True, False]
    out.close()
    assert made[0].closed.is_set()


def test_a_file_output_is_not_started_again() -> None:
    first = StandIn("file")
    heard: List[tuple] = []
    out = RestartingOutput(first, lambda: (_ for _ in ()).throw(AssertionError("never started")),
                           lambda name, down, why: heard.append((down, why)), clock=lambda: 1e9)
    first.dead = True
    for _ in range(3):
        out.put(FRAME)
    assert heard == [(True, "video output /tmp/x.mp4 stopped: killed; not restarted (a file)")]
    assert out.stats()["restarts"] == 0 and "killed" in out.stats()["error"]

