"""InferThread on its own, with a real Capture and the real prediction cache: every frame in
order and nothing dropped, the outputs copied out of the backend's reused buffers into the item's
own set (reallocated only when a shape or dtype changes), cache hits answered without a run, a
miss leaving a Pending in the cache, errors carried to the consumer and named by stage, and at
most two items in play."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import pytest

from edge_sdk.geometry import Placement
from edge_sdk.runtime.cache import PredictionCache
from edge_sdk.runtime.capture import Capture
from edge_sdk.runtime.infer_thread import ITEMS, InferThread, Item, Pending
from edge_sdk.runtime.timing import clock
from polling import wait_until
from runtime_factories import ListSource

TRANSFORM = Placement.affine(1.0, 1.0, 0.0, 0.0, 40, 24)


class NumberDetector:
    """Outputs the frame's number (pixel 0, 0) in one buffer it reuses for every run, as
    backends do; `fail_at`: the run that raises."""

    def __init__(self, fail_at: Optional[int] = None) -> None:
        self.runs = 0
        self.fail_at = fail_at
        self.stage = ""
        self._out = np.zeros((1, 4), np.float32)

    def infer_stage(self, frame: Any, latency: Dict[str, float]) -> Any:
        self.stage = "infer"
        if self.runs == self.fail_at:
            raise RuntimeError("backend failed")
        self.runs += 1
        self._out[...] = float(frame.image[0, 0, 0])
        latency["infer"] = 1.0
        return [self._out], TRANSFORM


def numbered(values: List[int]) -> List[np.ndarray]:
    return [np.full((24, 40, 3), v, np.uint8) for v in values]


def run_all(thread: InferThread, capture: Capture) -> List[Item]:
    """Consume to the end as the pipeline does: read the item, release its slot, recycle it."""
    seen = []
    while True:
        item = thread.next()
        assert item is not None
        if item.end or item.error is not None:
            return seen + [item]
        copy = Item()
        copy.cached, copy.raw, copy.latency = item.cached, item.raw, dict(item.latency)
        copy.outputs = None if item.outputs is None else [o.copy() for o in item.outputs]
        copy.slot = int(item.slot.frame[0, 0, 0])  # type: ignore[assignment]
        copy.pending = item.pending
        capture.release(item.slot)
        thread.recycle(item)
        seen.append(copy)


def run_through(source: ListSource, detector: Any, cache: Any, pool_size: int = 3) -> List[Item]:
    """Capture `source` and run the thread over it to the end (see run_all)."""
    capture = Capture(source, pool_size=pool_size).start()
    thread = InferThread(capture, detector, None, cache).start()
    try:
        return run_all(thread, capture)
    finally:
        thread.stop()
        capture.stop()


@pytest.mark.parametrize("pool_size", [3, 4, 6])
def test_every_frame_in_order_with_its_own_outputs(pool_size: int) -> None:
    values = [10 * i + 5 for i in range(15)]
    started = clock()
    detector = NumberDetector()
    items = run_through(ListSource(numbered(values)), detector, PredictionCache(enabled=False), pool_size)
    took_ms = (clock() - started) * 1000.0
    assert items[-1].end and items[-1].slot is None
    frames = items[:-1]
    assert [i.slot for i in frames] == values
    assert [float(i.outputs[0][0, 0]) for i in frames] == values  # each its own, not the backend's last
    assert all(0.0 <= i.latency["capture_wait"] <= took_ms and i.latency["infer"] == 1.0 for i in frames)
    assert detector.runs == 15


def test_outputs_are_copied_into_the_items_own_set_allocated_once_per_shape() -> None:
    item = Item()
    a = [np.ones((2, 3), np.float32), np.zeros(4, np.int64)]
    kept = item.keep_outputs(a)
    first = [id(b) for b in kept]
    a[0][...] = 7.0  # the backend reuses its buffer for the next frame
    assert float(kept[0].sum()) == 6.0 and kept[0] is not a[0]
    kept = item.keep_outputs([np.full((2, 3), 2.0, np.float32), np.ones(4, np.int64)])
    assert [id(b) for b in kept] == first and float(kept[0].sum()) == 12.0  # same shapes: the same buffers
    for change in ([np.ones((3, 3), np.float32), np.ones(4, np.int64)], [np.ones((2, 3), np.float64), np.ones(4, np.int64)],
                   [np.ones((2, 3), np.float32)]):
        kept = item.keep_outputs(change)
        assert [(b.shape, b.dtype) for b in kept] == [(c.shape, c.dtype) for c in change]
        np.testing.assert_array_equal(kept[0], change[0])


def test_a_repeated_frame_is_answered_by_the_cache_without_a_run() -> None:
    values = [50, 50, 50, 120, 120, 50]
    detector = NumberDetector()
    cache = PredictionCache(threshold=4.0)
    items = run_through(ListSource(numbered(values)), detector, cache, 4)
    frames = items[:-1]
    assert [i.slot for i in frames] == values
    assert [i.cached is not None for i in frames] == [False, True, True, False, True, False]
    assert detector.runs == 3
    # a miss leaves a Pending in the cache; the hits that follow carry that very Pending
    assert isinstance(frames[0].pending, Pending) and frames[1].cached is frames[0].pending
    assert frames[2].cached is frames[0].pending and frames[4].cached is frames[3].pending
    assert all(i.outputs is None for i in frames if i.cached is not None)


def test_without_the_cache_no_pending_is_made() -> None:
    items = run_through(ListSource(numbered([1, 1])), NumberDetector(), PredictionCache(enabled=False), 3)
    assert [i.pending for i in items[:-1]] == [None, None] and [i.cached for i in items[:-1]] == [None, None]


@pytest.mark.parametrize("failed_in_prepare,stage", [(False, "capture"), (True, "preprocess")])
def test_a_capture_error_reaches_the_consumer_named(failed_in_prepare: bool, stage: str) -> None:
    class Broken(ListSource):
        def read(self, out=None):
            raise OSError("disk gone")

    capture = Capture(Broken(numbered([1])), pool_size=3).start()
    thread = InferThread(capture, NumberDetector(), None, PredictionCache(enabled=False),
                         prepare_failed=lambda: failed_in_prepare).start()
    try:
        item = thread.next()
        assert isinstance(item.error, OSError) and item.stage == stage
        assert thread.next() is None  # the thread has ended
    finally:
        thread.stop()
        capture.stop()


def test_a_backend_error_reaches_the_consumer_after_the_frames_before_it() -> None:
    items = run_through(ListSource(numbered([1, 2, 3, 4])), NumberDetector(fail_at=2), PredictionCache(enabled=False), 3)
    assert [i.slot for i in items[:-1]] == [1, 2]
    assert isinstance(items[-1].error, RuntimeError) and items[-1].stage == "infer"


def test_the_thread_is_at_most_one_frame_ahead() -> None:
    capture = Capture(ListSource(numbered(list(range(1, 9)))), pool_size=6).start()
    detector = NumberDetector()
    thread = InferThread(capture, detector, None, PredictionCache(enabled=False)).start()
    try:
        held = thread.next()  # not recycled: the consumer decodes it
        assert held is not None and int(held.slot.frame[0, 0, 0]) == 1
        assert wait_until(lambda: detector.runs == ITEMS, timeout=10)
        assert ITEMS == 2
    finally:
        left = thread.stop()
    # with one item held, the thread filled the other and then waited for it to come back
    assert detector.runs == 2 and [int(i.slot.frame[0, 0, 0]) for i in left] == [2]
    for item in [held] + left:
        capture.release(item.slot)
    capture.stop()


def test_stop_wakes_a_thread_waiting_for_a_frame() -> None:
    import threading

    class Silent(ListSource):
        """A live source that delivers nothing until released."""

        live = True

        def __init__(self) -> None:
            super().__init__([])
            self.release = threading.Event()

        def read(self, out=None):
            self.release.wait()
            return None

    source = Silent()
    capture = Capture(source, pool_size=3).start()
    thread = InferThread(capture, NumberDetector(), None, PredictionCache(enabled=False)).start()
    left: List[Any] = []
    stopper = threading.Thread(target=lambda: left.append(thread.stop()), daemon=True)
    try:
        stopper.start()
        stopper.join(timeout=10)
        assert not stopper.is_alive(), "stop() waited for a frame that never came"
        assert left == [[]] and thread.next() is None
    finally:
        source.release.set()
        stopper.join()
        capture.stop()


def test_the_capture_wait_is_in_milliseconds() -> None:
    import threading

    class Slow(ListSource):
        def read(self, out=None):
            threading.Event().wait(0.05)  # a camera that takes 50 ms to deliver each frame
            return super().read(out)

    items = run_through(Slow(numbered([1, 2])), NumberDetector(), PredictionCache(enabled=False), 3)
    assert 40.0 <= items[0].latency["capture_wait"] < 5000.0


class OneSlotCapture:
    """Stands in for Capture: get() hands out one slot of a real capture, as though stop() had
    been called while the slot was on its way (the thread's cancel Event is set first)."""

    def __init__(self, slot) -> None:
        self.slot = slot
        self.woken = 0

    def get(self, timeout=None, cancel=None):
        cancel.set()
        return self.slot

    def wake(self) -> None:
        self.woken += 1


def test_a_frame_taken_after_stop_is_handed_over_uninferred() -> None:
    real = Capture(ListSource(numbered([9])), pool_size=3).start()
    slot = real.get(timeout=10)
    detector = NumberDetector()
    thread = InferThread(OneSlotCapture(slot), detector, None, PredictionCache(enabled=False)).start()
    try:
        item = thread.next()
        assert item is not None and item.raw and item.slot is slot and item.outputs is None
        assert item.detector is detector and "capture_wait" in item.latency
        assert detector.runs == 0 and thread.next() is None
    finally:
        thread.stop()
        real.release(slot)
        real.stop()


def test_a_consumer_waiting_for_an_item_is_told_when_the_thread_ends() -> None:
    import threading

    # stop() wakes the waiting consumer, which may look again before the thread has ended: the
    # thread's own exit must wake it then. Run it a number of times, so that both orders occur.
    for _ in range(20):
        capture = Capture(ListSource(numbered(list(range(1, 9)))), pool_size=5).start()
        thread = InferThread(capture, NumberDetector(), None, PredictionCache(enabled=False)).start()
        held = [thread.next() for _ in range(ITEMS)]  # both items in the consumer's hands: the thread waits for one
        got: List[Any] = []
        waiter = threading.Thread(target=lambda: got.append(thread.next()), daemon=True)
        waiter.start()
        try:
            assert thread.stop() == []
            waiter.join(timeout=10)
            assert not waiter.is_alive() and got == [None]
        finally:
            for item in held:
                capture.release(item.slot)
            capture.stop()
