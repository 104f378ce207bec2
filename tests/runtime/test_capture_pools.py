"""Capture in configurations the defaults never build: live sources with pools larger than three
(the newest frame is delivered, never a stale one kept waiting, however many slots are free),
the consumer holding more than one frame, the pacer and the reconnect backoff at their limits."""
from __future__ import annotations

import threading
from typing import List

import pytest

from edge_sdk.errors import SourceError
from edge_sdk.runtime.capture import Capture, Pacer
from edge_sdk.runtime.config import ReconnectConfig
from polling import wait_until
from runtime_factories import FakeCamera, FakeClock, ListSource, RecordingEvent, drain, scene


def number(slot) -> int:
    return int(slot.frame[0, 0, 0])  # scene(i) carries i there


@pytest.mark.parametrize("pool_size,held", [(3, 1), (4, 1), (4, 2), (5, 1), (5, 3), (8, 1), (8, 4)])
@pytest.mark.parametrize("burst", [1, 2, 6])
def test_a_live_source_delivers_the_newest_frame_whatever_the_pool(pool_size: int, held: int, burst: int) -> None:
    cam = FakeCamera(width=40, height=24)
    cam.gate = threading.Semaphore(0)
    capture = Capture(cam, pool_size=pool_size).start()
    taken = []
    try:
        for i in range(held):  # the consumer holds `held` frames (a pipeline with frames in flight)
            cam.gate.release()
            slot = capture.get(timeout=10)
            assert number(slot) == i and slot.index == i
            taken.append(slot)
        for _ in range(burst):
            cam.gate.release()
        assert capture.wait_captured(held + burst, timeout=20)
        newest = capture.get(timeout=10)
        assert number(newest) == held + burst - 1 and newest.index == held + burst - 1
        assert capture.stats.frames_dropped == burst - 1
        for slot in taken:
            capture.release(slot)
        capture.release(newest)
        for k in range(3):  # and after it, each next frame in turn: nothing older was kept waiting
            cam.gate.release()
            assert capture.wait_captured(held + burst + k + 1, timeout=20)
            slot = capture.get(timeout=10)
            assert number(slot) == held + burst + k
            capture.release(slot)
        assert capture.stats.frames_dropped == burst - 1
        assert capture.stats.frames_captured == held + burst + 3
    finally:
        for _ in range(4):
            cam.gate.release()
        capture.stop()


@pytest.mark.parametrize("pool_size", [4, 6])
def test_events_of_dropped_frames_reach_the_newest_one(pool_size: int) -> None:
    cam = FakeCamera(width=40, height=24, fail_reads=(2,))
    cam.gate = threading.Semaphore(0)
    capture = Capture(cam, pool_size=pool_size, reconnect=ReconnectConfig(initial_s=0.001, max_s=0.001)).start()
    try:
        cam.gate.release()
        first = capture.get(timeout=10)
        for _ in range(6):  # frames 1, a failed read, then frames 2..5: the loss is attached to frame 2
            cam.gate.release()
        assert capture.wait_captured(6, timeout=20)
        newest = capture.get(timeout=10)
        assert number(newest) == 5 and capture.stats.frames_dropped == 4
        assert newest.events == [
            {"event": "source_lost", "source": "fake://camera", "error": "OSError: camera vanished", "failures": 1},
            {"event": "source_reconnected", "source": "fake://camera", "attempts": 1}]
        assert capture.stats.source_errors == 1 and capture.stats.reconnects == 1
        capture.release(first)
        capture.release(newest)
    finally:
        for _ in range(4):
            cam.gate.release()
        capture.stop()


@pytest.mark.parametrize("pool_size", [4, 5, 7])
def test_a_finite_source_with_a_large_pool_loses_nothing_and_keeps_order(pool_size: int) -> None:
    capture = Capture(ListSource([scene(i, 40, 24) for i in range(25)]), pool_size=pool_size).start()
    try:
        got = drain(capture, in_flight=1)  # the consumer keeps one frame in flight
    finally:
        capture.stop()
    assert got == list(range(25)) and capture.stats.frames_dropped == 0


@pytest.mark.parametrize("late,waits", [
    (0.1, []),  # exactly one period behind: not re-anchored, the next two frames are due at once
    (0.1001, [0.1]),  # more than one period behind: re-anchored to now, the next due a period later
])
def test_the_pacer_re_anchors_only_beyond_one_period(late: float, waits: List[float]) -> None:
    clock = FakeClock()
    pacer, stop = Pacer(10.0, clock=clock), RecordingEvent(clock)
    assert pacer.wait(stop)  # due at 0, next at 0.1
    clock.now = 0.1 + late
    assert pacer.wait(stop) and pacer.wait(stop)
    assert stop.waits == waits


@pytest.mark.parametrize("fps", [0.0, -5.0, None])
def test_an_unpaced_source_never_waits(fps) -> None:
    clock = FakeClock()
    pacer, stop = Pacer(fps, clock=clock), RecordingEvent(clock)
    assert pacer.wait(stop) and pacer.wait(stop) and stop.waits == []
    stop.set()
    assert pacer.wait(stop) is False


def test_a_paced_wait_says_when_stop_was_set() -> None:
    clock = FakeClock()
    pacer, stop = Pacer(10.0, clock=clock), RecordingEvent(clock)
    stop.set()
    assert pacer.wait(stop) is False  # due at once, but stopping


def test_reconnects_back_off_exponentially_to_the_cap_then_give_up() -> None:
    cam = FakeCamera(width=40, height=24, stop_after=2)
    capture = Capture(cam, pool_size=4, reconnect=ReconnectConfig(initial_s=0.01, max_s=0.05, max_attempts=5))
    clock = FakeClock()
    capture._stop = RecordingEvent(clock)
    capture.start()
    try:
        got = []
        with pytest.raises(SourceError, match="did not come back after 5 reconnect attempts"):
            while True:
                slot = capture.get(timeout=10)
                got.append(number(slot))
                capture.release(slot)
        assert got[-1] == 1  # live: frame 0 may have been replaced by frame 1 before it was taken
        assert capture._stop.waits == [0.01, 0.02, 0.04, 0.05, 0.05]
        assert cam.opens == 1 + 5  # the first open, then max_attempts attempts
        assert capture.stats.source_errors == 1 + 5 and capture.stats.reconnects == 0
    finally:
        capture.stop()


@pytest.mark.parametrize("pool_size,live", [(3, False), (5, True), (7, False)])
def test_describe_says_the_pool_and_the_read_ahead(pool_size: int, live: bool) -> None:
    capture = Capture(ListSource([scene(0, 40, 24)], live=live), pool_size=pool_size)
    d = capture.describe()
    assert (d["source"], d["live"], d["pool_size"], d["read_ahead"]) == ("list://", live, pool_size, pool_size - 2)
    assert d["frame_memory"]["path"] == "host" and len(capture.pool) == pool_size


def test_a_get_that_times_out_says_so_and_the_frames_are_numbered_in_order() -> None:
    cam = FakeCamera(width=40, height=24)
    cam.gate = threading.Semaphore(0)
    capture = Capture(cam, pool_size=5).start()
    try:
        with pytest.raises(SourceError, match="no frame from fake://camera within 0.1 s"):
            capture.get(timeout=0.1)
        cam.gate.release()
        slot = capture.get(timeout=10)
        assert slot.index == 0 and slot.timestamp > 0 and slot.t_capture > 0 and slot.events == []
        capture.release(slot)
    finally:
        for _ in range(3):
            cam.gate.release()
        capture.stop()


@pytest.mark.parametrize("pool_size", [3, 5])
def test_a_consumer_holding_every_slot_gets_the_next_frame_once_it_gives_one_back(pool_size: int) -> None:
    capture = Capture(ListSource([scene(i, 40, 24) for i in range(pool_size + 2)]), pool_size=pool_size).start()
    held = []
    try:
        for i in range(pool_size):  # a finite source: the thread waits for a slot once the consumer holds all
            held.append(capture.get(timeout=10))
            assert number(held[-1]) == i
        # The thread has nothing to do until a slot comes back. Give it time to go to sleep on the
        # condition (the result does not depend on it; a release that forgets to wake it shows only
        # then), then give one back: the only thing that can wake it now.
        threading.Event().wait(0.2)
        capture.release(held.pop(0))
        slot = capture.get(timeout=10)
        assert number(slot) == pool_size
        held.append(slot)
    finally:
        for slot in held:
            capture.release(slot)
        capture.stop()


def test_a_get_with_a_cancel_event_delivers_frames_until_it_is_set() -> None:
    cam = FakeCamera(width=40, height=24)
    cam.gate = threading.Semaphore(0)
    capture = Capture(cam, pool_size=4).start()
    cancel = threading.Event()
    try:
        cam.gate.release()
        slot = capture.get(timeout=10, cancel=cancel)  # not set: the frame comes as without one
        assert slot is not None and number(slot) == 0
        capture.release(slot)
        cancel.set()
        capture.wake()
        assert capture.get(timeout=10, cancel=cancel) is None  # set: nothing taken
        cam.gate.release()
        assert capture.wait_captured(2, timeout=20)
        assert capture.get(timeout=10, cancel=cancel) is None  # a frame is ready, but cancelled
        slot = capture.get(timeout=10)
        assert number(slot) == 1  # the frame the cancelled get left
        capture.release(slot)
    finally:
        for _ in range(3):
            cam.gate.release()
        capture.stop()


class NiceProbe(ListSource):
    """Records the nice value of the thread that reads it."""

    def read(self, out=None):
        import os

        self.seen = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return super().read(out)


@pytest.mark.skipif(not hasattr(__import__("os"), "setpriority"), reason="needs os.setpriority (Unix)")
def test_a_nice_value_of_one_is_applied() -> None:
    import os

    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base >= 19:
        pytest.skip("already at the lowest priority")
    probe = NiceProbe([scene(0, 40, 24)])
    capture = Capture(probe, nice=1).start()
    try:
        capture.release(capture.get(timeout=10))
    finally:
        capture.stop()
    assert probe.seen == base + 1


@pytest.mark.skipif(not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux's SCHED_IDLE scheduling class")
def test_a_refused_idle_class_is_reported_and_capture_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from edge_sdk.runtime import capture as capture_module

    def refuse(tid, policy, param):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(capture_module, "can_leave_sched_idle", lambda: True)
    monkeypatch.setattr(capture_module.os, "sched_setscheduler", refuse)
    capture = Capture(ListSource([scene(i, 40, 24) for i in range(3)]), idle=True).start()
    events: List[dict] = []
    try:
        got = drain(capture, events)
    finally:
        capture.stop()
    assert got == [0, 1, 2] and not capture._idle_class
    assert events == [{"event": "capture_priority_unchanged", "error": "SCHED_IDLE: [Errno 1] Operation not permitted"}]
    assert os.sched_setscheduler is refuse


def test_wake_lets_a_waiting_get_see_its_cancel_event() -> None:
    cam = FakeCamera(width=40, height=24)
    cam.gate = threading.Semaphore(0)  # no frame comes
    capture = Capture(cam, pool_size=3).start()
    cancel = threading.Event()
    got: List[object] = []
    waiter = threading.Thread(target=lambda: got.append(capture.get(cancel=cancel)), daemon=True)
    try:
        waiter.start()
        cancel.set()
        capture.wake()
        waiter.join(timeout=10)
        assert not waiter.is_alive() and got == [None]
    finally:
        for _ in range(3):
            cam.gate.release()
        capture.stop()
        waiter.join(timeout=10)


class RecordingCamera(FakeCamera):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.calls: List[str] = []

    def open(self) -> None:
        self.calls.append("open")
        super().open()

    def close(self) -> None:
        self.calls.append("close")
        super().close()


def test_a_lost_camera_is_closed_before_it_is_reopened() -> None:
    cam = RecordingCamera(width=40, height=24, fail_reads=(1,), stop_after=3)
    capture = Capture(cam, pool_size=3, reconnect=ReconnectConfig(initial_s=0.001, max_s=0.001, max_attempts=2))
    capture.start()
    try:
        with pytest.raises(SourceError, match="did not come back"):
            drain(capture)
    finally:
        capture.stop()
    assert cam.calls[:3] == ["open", "close", "open"]


@pytest.mark.skipif(not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux's SCHED_IDLE scheduling class")
def test_can_leave_sched_idle_says_what_a_thread_of_this_process_may_do() -> None:
    import os

    from edge_sdk.runtime.capture import can_leave_sched_idle

    result: List[bool] = []

    def probe() -> None:  # the oracle: try it in a throwaway thread
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    assert can_leave_sched_idle() is result[0]


def test_taking_a_frame_lets_a_finite_source_read_ahead_again() -> None:
    capture = Capture(ListSource([scene(i, 40, 24) for i in range(6)]), pool_size=5).start()  # read ahead 3
    held = []
    try:
        assert capture.wait_captured(3, timeout=20)
        threading.Event().wait(0.2)  # let the thread go to sleep on the condition (the result does not depend on it)
        for i in range(5):  # no slot given back: only get() taking frames lets it read the next ones
            held.append(capture.get(timeout=5))
            assert number(held[-1]) == i
    finally:
        for slot in held:
            capture.release(slot)
        capture.stop()


@pytest.mark.skipif(not hasattr(__import__("os"), "setpriority"), reason="needs os.setpriority (Unix)")
def test_a_refused_nice_value_is_reported_and_capture_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_sdk.runtime import capture as capture_module

    def refuse(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(capture_module.os, "setpriority", refuse)
    capture = Capture(ListSource([scene(i, 40, 24) for i in range(2)]), nice=5).start()
    events: List[dict] = []
    try:
        got = drain(capture, events)
    finally:
        capture.stop()
    assert got == [0, 1]
    assert events == [{"event": "capture_priority_unchanged", "error": "[Errno 13] Permission denied"}]


def test_a_live_consumer_holding_all_but_one_slot_gets_the_newest_frame_once_it_gives_one_back() -> None:
    cam = FakeCamera(width=40, height=24)
    cam.gate = threading.Semaphore(0)
    capture = Capture(cam, pool_size=3).start()
    held = []
    try:
        for i in range(2):
            cam.gate.release()
            held.append(capture.get(timeout=10))
            assert number(held[-1]) == i
        for _ in range(3):  # frames 2, 3, 4: with no slot free each is dropped for the next read
            cam.gate.release()
        assert capture.wait_captured(5, timeout=20)
        assert wait_until(lambda: capture.stats.frames_dropped == 3, timeout=20)
        capture.release(held.pop(0))
        cam.gate.release()
        slot = capture.get(timeout=10)
        assert number(slot) == 5 and capture.stats.frames_dropped == 3
        held.append(slot)
    finally:
        for slot in held:
            capture.release(slot)
        for _ in range(3):
            cam.gate.release()
        capture.stop()


class HoldUntil(ListSource):
    """Read `hold_at` does not return until `released` is set (at most 5 s)."""

    def __init__(self, frames, hold_at: int, released: threading.Event) -> None:
        super().__init__(frames)
        self.hold_at, self.released, self.reads = hold_at, released, 0

    def read(self, out=None):
        if self.reads == self.hold_at:
            self.released.wait(5.0)
        self.reads += 1
        return super().read(out)


@pytest.mark.skipif(not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux's SCHED_IDLE scheduling class")
def test_a_starved_idle_thread_that_may_not_leave_the_idle_class_after_all_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe said the thread could leave SCHED_IDLE, the kernel refuses when the starved consumer
    asks: the refusal is reported with the frames ("leaving SCHED_IDLE"), nothing says it left,
    and capture goes on."""
    import os

    from edge_sdk.runtime import capture as capture_module

    asked_out = threading.Event()
    policies: List[int] = []

    def into_only(tid, policy, param):
        policies.append(policy)
        if policy != os.SCHED_IDLE:
            asked_out.set()
            raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(capture_module, "can_leave_sched_idle", lambda: True)
    monkeypatch.setattr(capture_module.os, "sched_setscheduler", into_only)
    source = HoldUntil([scene(i, 40, 24) for i in range(4)], hold_at=2, released=asked_out)
    capture = Capture(source, idle=True, starved_after_s=0.2).start()
    events: List[dict] = []
    try:
        got = drain(capture, events)
    finally:
        capture.stop()
    assert got == [0, 1, 2, 3] and asked_out.is_set()
    assert policies == [os.SCHED_IDLE, os.SCHED_OTHER]
    assert events == [{"event": "capture_priority_unchanged", "error": "leaving SCHED_IDLE: [Errno 1] Operation not permitted"}]


@pytest.mark.skipif(not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux's SCHED_IDLE scheduling class")
def test_a_thread_that_may_enter_the_idle_class_but_not_leave_it_is_not_put_there(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from edge_sdk.runtime import capture as capture_module

    def one_way(tid, policy, param):
        if policy != os.SCHED_IDLE:
            raise PermissionError(1, "Operation not permitted")  # no CAP_SYS_NICE, RLIMIT_NICE 0

    monkeypatch.setattr(capture_module.os, "sched_setscheduler", one_way)
    assert capture_module.can_leave_sched_idle() is False


@pytest.mark.skipif(not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux's SCHED_IDLE scheduling class")
def test_the_sched_idle_probe_moves_only_its_own_thread_in_and_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from edge_sdk.runtime import capture as capture_module

    calls = []
    monkeypatch.setattr(capture_module.os, "sched_setscheduler",
                        lambda tid, policy, param: calls.append((tid, policy, param.sched_priority)))
    assert capture_module.can_leave_sched_idle() is True
    assert calls == [(0, os.SCHED_IDLE, 0), (0, os.SCHED_OTHER, 0)]  # 0: the calling thread, nothing else


@pytest.mark.parametrize("pool_size", [3, 4])
def test_a_camera_lost_again_and_again_keeps_every_slot(pool_size: int) -> None:
    cam = FakeCamera(width=40, height=24, fail_reads=(2, 4, 6, 8), stop_after=12)
    capture = Capture(cam, pool_size=pool_size, reconnect=ReconnectConfig(initial_s=0.001, max_s=0.001, max_attempts=3))
    capture.start()
    got: List[int] = []
    try:
        with pytest.raises(SourceError, match="did not come back"):
            while True:  # a consumer as fast as it can be: each frame given back at once
                slot = capture.get(timeout=10)
                got.append(number(slot))
                capture.release(slot)
    finally:
        capture.stop()
    assert got[-1] == 11 and capture.stats.reconnects == 4


def test_stop_before_start_closes_the_source_and_stop_twice_is_harmless() -> None:
    cam = RecordingCamera(width=40, height=24)
    capture = Capture(cam, pool_size=3)
    capture.stop()  # never started: nothing to join
    assert cam.calls == ["close"]
    capture = Capture(ListSource([scene(0, 40, 24)]), pool_size=3).start()
    assert drain(capture) == [0]
    capture.stop()
    capture.stop()


@pytest.mark.parametrize("fps,period", [(0.5, 2.0), (1.0, 1.0), (30.0, 1 / 30)])
def test_the_pacer_spaces_frames_one_over_fps_apart_even_below_one_fps(fps: float, period: float) -> None:
    clock = FakeClock()
    pacer, stop = Pacer(fps, clock=clock), RecordingEvent(clock)
    assert pacer.period == pytest.approx(period)
    assert pacer.wait(stop) and pacer.wait(stop) and pacer.wait(stop)
    assert stop.waits == [round(period, 6)] * 2
