"""The capture thread: back-pressure, newest-frame policy, reconnect, errors, size changes."""
from __future__ import annotations

import threading
from typing import List

import numpy as np
import pytest

from edge_sdk.errors import SourceError
from edge_sdk.runtime.capture import Capture, Pacer, can_leave_sched_idle
from edge_sdk.runtime.config import ReconnectConfig
from runtime_factories import FakeCamera, FakeClock, ListSource, RecordingEvent, drain, scene

FAST = ReconnectConfig(initial_s=0.001, max_s=0.004, max_attempts=10)


@pytest.mark.parametrize("pool_size", [3, 4, 6])
def test_finite_source_loses_nothing(pool_size: int) -> None:
    frames = [scene(i) for i in range(40)]
    capture = Capture(ListSource(frames), pool_size=pool_size).start()
    try:
        assert drain(capture) == list(range(40))
        assert capture.stats.frames_captured == 40 and capture.stats.frames_dropped == 0
    finally:
        capture.stop()


def test_buffers_are_a_fixed_pool() -> None:
    capture = Capture(ListSource([scene(i) for i in range(30)]), pool_size=3).start()
    seen = set()
    try:
        while True:
            slot = capture.get(timeout=10)
            if slot is None:
                break
            seen.add(id(slot.buffer))
            capture.release(slot)
    finally:
        capture.stop()
    assert len(seen) <= 3


def test_live_source_keeps_the_newest_frame_and_counts_drops() -> None:
    cam = FakeCamera(width=128, height=96)
    cam.gate = threading.Semaphore(0)
    capture = Capture(cam, pool_size=3).start()
    try:
        cam.gate.release()
        first = capture.get(timeout=10)
        assert int(first.frame[0, 0, 0]) == 0
        # while the consumer holds frame 0, the camera delivers five more
        for _ in range(5):
            cam.gate.release()
        assert capture.wait_captured(6)
        newest = capture.get(timeout=10)
        assert int(newest.frame[0, 0, 0]) == 5
        assert capture.stats.frames_dropped == 4
        capture.release(first)
        capture.release(newest)
    finally:
        for _ in range(3):
            cam.gate.release()
        capture.stop()


def test_camera_that_vanishes_reconnects_and_reports() -> None:
    cam = FakeCamera(fail_reads=(3, 7), fail_opens=2, stop_after=10)
    capture = Capture(cam, pool_size=4, reconnect=FAST).start()
    events = []
    got = []
    try:
        with pytest.raises(SourceError, match="did not come back after 10 reconnect attempts"):
            while True:
                slot = capture.get(timeout=10)
                got.append(int(slot.frame[0, 0, 0]))
                events += slot.events
                capture.release(slot)
    finally:
        capture.stop()
    # live: frames may be dropped when the consumer is slower, but order is kept and the
    # frames on both sides of each loss arrive
    assert got == sorted(set(got)) and got[-1] == 9  # in order, none twice
    kinds = [e["event"] for e in events]
    assert kinds.count("source_reconnected") == 2
    assert kinds.count("source_lost") >= 2
    assert capture.stats.reconnects == 2
    assert capture.stats.source_errors >= 2 + 2 * 2  # each loss + each failed reopen
    assert cam.opens >= 1 + 2 * 3


def test_stop_interrupts_backoff_immediately() -> None:
    cam = FakeCamera(stop_after=1)
    capture = Capture(cam, reconnect=ReconnectConfig(initial_s=3600, max_s=3600, max_attempts=0)).start()
    slot = capture.get(timeout=10)
    capture.release(slot)
    done = threading.Event()

    def stopper() -> None:
        capture.stop()
        done.set()

    threading.Thread(target=stopper).start()
    assert done.wait(10), "stop() waited for the hour-long backoff"


def test_error_in_a_finite_source_surfaces_in_the_consumer() -> None:
    capture = Capture(ListSource([scene(0), scene(1), ValueError("decoder exploded")])).start()
    try:
        assert int(capture.get(timeout=10).frame[0, 0, 0]) == 0
        slot = capture.get(timeout=10)
        capture.release(slot)
        with pytest.raises(ValueError, match="decoder exploded"):
            capture.get(timeout=10)
    finally:
        capture.stop()


def test_size_change_and_channels_are_converted_and_reported() -> None:
    frames = [scene(0, 64, 48), scene(1, 64, 48)[:, :, 0].copy(), scene(2, 96, 80), np.dstack([scene(3, 96, 80), np.zeros((80, 96), np.uint8)])]
    capture = Capture(ListSource(frames)).start()
    shapes, events = [], []
    try:
        while True:
            slot = capture.get(timeout=10)
            if slot is None:
                break
            shapes.append(slot.frame.shape)
            events += slot.events
            capture.release(slot)
    finally:
        capture.stop()
    assert shapes == [(48, 64, 3), (48, 64, 3), (80, 96, 3), (80, 96, 3)]
    assert events == [{"event": "frame_size_changed", "from": [64, 48], "to": [96, 80]}]


def test_open_errors_raise_in_the_caller() -> None:
    cam = FakeCamera()
    cam._opens_to_fail = 1
    with pytest.raises(OSError, match="camera not found"):
        Capture(cam).start()


def test_pool_needs_three_slots() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        Capture(ListSource([]), pool_size=2)


def test_pacer_spaces_frames_and_does_not_burst_after_a_stall() -> None:
    clock = FakeClock()
    pacer = Pacer(10.0, clock=clock)
    stop = RecordingEvent(clock)
    assert pacer.wait(stop)  # first frame: no wait
    clock.now += 0.03  # the frame took 30 ms
    assert pacer.wait(stop)
    clock.now += 0.5  # a long stall
    assert pacer.wait(stop)
    assert pacer.wait(stop)
    assert stop.waits == [0.07, 0.1]


class PriorityProbe(ListSource):
    """Records the nice value of the thread that reads it."""

    def read(self, out=None):
        import os

        self.seen = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return super().read(out)


@pytest.mark.skipif(not hasattr(__import__("os"), "setpriority"), reason="needs os.setpriority (Unix)")
@pytest.mark.parametrize("nice", [0, 5])
def test_capture_thread_runs_below_the_consumer(nice: int) -> None:
    import os

    probe = PriorityProbe([scene(0)])
    capture = Capture(probe, nice=nice).start()
    try:
        drain(capture)
    finally:
        capture.stop()
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert probe.seen == min(19, mine + nice)


needs_sched_idle = pytest.mark.skipif(
    not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux's SCHED_IDLE scheduling class"
)


class PolicyProbe(ListSource):
    """Records the scheduling policy of the reading thread at each read. Read `hold_at` does
    not return until its thread has been lifted out of SCHED_IDLE (at most 5 s)."""

    def __init__(self, frames: List[np.ndarray], hold_at: int = -1) -> None:
        super().__init__(frames)
        self.hold_at = hold_at
        self.policies: List[int] = []
        self._poll = threading.Event()  # never set: a bounded wait between two checks

    def read(self, out=None):
        import os
        import time

        if len(self.policies) == self.hold_at:
            deadline = time.monotonic() + 5.0
            while os.sched_getscheduler(0) == os.SCHED_IDLE and time.monotonic() < deadline:
                self._poll.wait(0.001)
        self.policies.append(os.sched_getscheduler(0))
        return super().read(out)


@needs_sched_idle
@pytest.mark.skipif(not can_leave_sched_idle(), reason="this process may not take a thread out of SCHED_IDLE, so never puts one in")
@pytest.mark.parametrize(
    "idle,live,fps,in_idle_class",
    [
        (False, False, 0.0, False),
        (True, False, 0.0, True),
        (True, True, 0.0, False),  # a camera makes the consumer wait by design
        (True, False, 1000.0, False),  # so does a target frame rate
    ],
)
def test_idle_class_only_for_unpaced_finite_sources(idle: bool, live: bool, fps: float, in_idle_class: bool) -> None:
    import os

    probe = PolicyProbe([scene(i) for i in range(3)])
    probe.live = live
    capture = Capture(probe, idle=idle, fps=fps, starved_after_s=60.0).start()
    try:
        for _ in range(3):
            slot = capture.get(timeout=10)
            assert slot is not None
            capture.release(slot)
    finally:
        capture.stop()
    assert set(probe.policies) == {os.SCHED_IDLE if in_idle_class else os.SCHED_OTHER}


@needs_sched_idle
def test_a_starved_idle_capture_thread_leaves_the_idle_class_and_says_so() -> None:
    import os

    if not can_leave_sched_idle():
        pytest.skip("this process may not take a thread out of SCHED_IDLE (no CAP_SYS_NICE, RLIMIT_NICE 0)")
    probe = PolicyProbe([scene(i) for i in range(4)], hold_at=2)
    capture = Capture(probe, idle=True, starved_after_s=0.2).start()
    got, events = [], []
    try:
        while True:
            slot = capture.get(timeout=10)
            if slot is None:
                break
            got.append(int(slot.frame[0, 0, 0]))
            events += [(got[-1], e["event"]) for e in slot.events]
            capture.release(slot)
    finally:
        capture.stop()
    assert got == [0, 1, 2, 3]
    # read 2 held on until the waiting consumer moved the thread out; it stays out
    assert probe.policies[:4] == [os.SCHED_IDLE, os.SCHED_IDLE, os.SCHED_OTHER, os.SCHED_OTHER]
    assert events == [(2, "capture_idle_class_left")]


class CountingSource(ListSource):
    def __init__(self, frames: List[np.ndarray]) -> None:
        super().__init__(frames)
        self.reads = 0

    def read(self, out=None):
        self.reads += 1
        return super().read(out)


@pytest.mark.parametrize("pool_size,read_ahead,expected", [(3, None, 1), (4, None, 2), (6, None, 4), (6, 1, 1), (6, 3, 3)])
def test_a_finite_source_reads_ahead_then_waits_for_the_consumer(pool_size: int, read_ahead, expected: int) -> None:
    source = CountingSource([scene(i) for i in range(12)])
    capture = Capture(source, pool_size=pool_size, read_ahead=read_ahead).start()
    try:
        assert capture.read_ahead == expected
        assert capture.wait_captured(expected)
    finally:
        capture.stop()  # the thread is parked in _acquire: it read exactly `expected` frames
    assert source.reads == expected


@pytest.mark.parametrize("read_ahead", [0, 3])
def test_read_ahead_must_leave_room_for_the_writer_and_the_consumer(read_ahead: int) -> None:
    with pytest.raises(ValueError, match="read_ahead"):
        Capture(ListSource([scene(0)]), pool_size=4, read_ahead=read_ahead)


@needs_sched_idle
def test_no_idle_class_where_the_thread_could_not_be_taken_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from edge_sdk.runtime import capture as capture_module

    monkeypatch.setattr(capture_module, "can_leave_sched_idle", lambda: False)
    probe = PolicyProbe([scene(i) for i in range(2)])
    capture = Capture(probe, idle=True).start()
    try:
        assert drain(capture) == [0, 1]
    finally:
        capture.stop()
    assert set(probe.policies) == {os.SCHED_OTHER}
