"""The infer stage on a thread of its own, one frame ahead of decode.

With a CPU backend that leaves a core free, the thread that runs the model should do nothing
else: every millisecond it spends decoding a frame's outputs or waiting for the caller's loop
body is a millisecond the model does not run. :class:`InferThread` takes the frames from the
capture ring (preprocessed beside capture), looks them up in the prediction cache, runs the
model and copies its outputs into one of two preallocated output sets; the pipeline's
consumer (the thread iterating it) decodes one set while the next frame is inferred into the
other. Frames keep their order; nothing is dropped that capture did not drop.

Two work items, each owning a frame slot, its latency figures and an output set, go back and
forth: the thread fills one while the consumer finishes the other, so the thread is at most
one frame ahead and holds at most two frame buffers. `stop()` is prompt: a thread waiting for
a frame is woken, one running the model finishes that run. A frame the thread took after
being stopped is handed over uninferred (`raw`), for the consumer to run as it would without
the thread. An exception on the thread travels in an item to the consumer, which raises it.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

import numpy as np

from edge_sdk.geometry import Placement
from edge_sdk.runtime.capture import Capture, FrameSlot
from edge_sdk.runtime.timing import clock

ITEMS = 2  # one being inferred, one being decoded


class Pending:
    """What the prediction cache holds for a frame whose outputs are not decoded yet: the
    consumer fills `detections` before it reaches any later frame that hits the cache."""

    __slots__ = ("detections",)

    def __init__(self) -> None:
        self.detections: Any = None


class Item:
    """One frame on its way from the infer thread to the consumer."""

    __slots__ = ("slot", "latency", "outputs", "transform", "cached", "pending", "error", "stage", "end", "raw",
                 "detector", "buffers")

    def __init__(self) -> None:
        self.buffers: List[np.ndarray] = []  # this item's output set, allocated on first use
        self.reset()

    def reset(self) -> None:
        self.slot: Optional[FrameSlot] = None
        self.latency: Dict[str, float] = {}
        self.outputs: Optional[List[np.ndarray]] = None
        self.transform: Optional[Placement] = None
        self.cached: Any = None  # the cache's value on a hit (Detections or a Pending)
        self.pending: Optional[Pending] = None
        self.error: Optional[BaseException] = None
        self.stage = ""
        self.end = False
        self.raw = False  # taken after stop(): not inferred
        self.detector: Any = None

    def keep_outputs(self, outputs: List[np.ndarray]) -> List[np.ndarray]:
        """Copy the backend's `outputs` into this item's output set (allocated once per shape)."""
        if len(self.buffers) != len(outputs) or any(b.shape != o.shape or b.dtype != o.dtype
                                                     for b, o in zip(self.buffers, outputs)):
            self.buffers = [np.empty(o.shape, o.dtype) for o in outputs]
        for buf, out in zip(self.buffers, outputs):
            np.copyto(buf, out)
        return self.buffers


class InferThread:
    """Runs `detector.infer_stage` for each captured frame on its own thread.

    `prepare` is the pipeline's preprocess stage (`take(slot)` gives the frame's prepared input
    and cache thumbnail, or (None, None)); `cache` the prediction cache, used only from this
    thread while it runs; `prepare_failed` tells a capture error from a preprocessing one.
    """

    def __init__(self, capture: Capture, detector: Any, prepare: Any, cache: Any,
                 prepare_failed: Any = lambda: False) -> None:
        self.capture = capture
        self.detector = detector
        self.prepare = prepare
        self.cache = cache
        self.prepare_failed = prepare_failed
        self._cond = threading.Condition()
        self._free: List[Item] = [Item() for _ in range(ITEMS)]
        self._done: List[Item] = []  # inferred, in frame order
        self._stop = threading.Event()
        self._exited = False
        self._thread = threading.Thread(target=self._run, name="edge-sdk-infer", daemon=True)

    def start(self) -> "InferThread":
        self._thread.start()
        return self

    # -- consumer side -------------------------------------------------------------------------
    def next(self) -> Optional[Item]:
        """The next item in frame order; None once the thread has stopped with none left."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._done) or self._exited)
            return self._done.pop(0) if self._done else None

    def recycle(self, item: Item) -> None:
        """Give an item back once its frame slot was released and its outputs decoded."""
        item.reset()
        with self._cond:
            self._free.append(item)
            self._cond.notify_all()

    def stop(self) -> List[Item]:
        """Stop the thread and wait for it; returns the items it finished and nobody took yet
        (in frame order), whose slots the caller now owns."""
        self._stop.set()
        self.capture.wake()
        with self._cond:
            self._cond.notify_all()
        self._thread.join()
        with self._cond:
            left, self._done = self._done, []
        return left

    # -- the thread ----------------------------------------------------------------------------
    def _take_free(self) -> Optional[Item]:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._free) or self._stop.is_set())
            return None if self._stop.is_set() else self._free.pop()

    def _post(self, item: Item) -> None:
        with self._cond:
            self._done.append(item)
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            while True:
                item = self._take_free()
                if item is None:
                    return
                if not self._fill(item):
                    return
        finally:
            with self._cond:
                self._exited = True
                self._cond.notify_all()

    def _fill(self, item: Item) -> bool:
        """Capture, cache lookup and inference for one frame into `item`, posted to the
        consumer; False when the thread is to end."""
        t_wait = clock()
        try:
            slot = self.capture.get(cancel=self._stop)
        except BaseException as exc:
            item.error, item.stage = exc, ("preprocess" if self.prepare_failed() else "capture")
            self._post(item)
            return False
        if slot is None:
            if self._stop.is_set():
                self.recycle(item)
            else:
                item.end = True
                self._post(item)
            return False
        item.slot = slot
        item.latency["capture_wait"] = (clock() - t_wait) * 1000.0
        item.detector = detector = self.detector
        if self._stop.is_set():
            item.raw = True  # the consumer runs it, after whatever made it stop
            self._post(item)
            return False
        prepared, thumbnail = self.prepare.take(slot) if self.prepare is not None else (None, None)
        cache = self.cache
        hit = cache.lookup(slot.frame, thumbnail)
        if hit is not None:
            item.cached = hit
            self._post(item)
            return True
        frame = slot.view
        frame.prepared = prepared
        try:
            outputs, item.transform = detector.infer_stage(frame, item.latency)
            item.outputs = item.keep_outputs(list(outputs))
        except BaseException as exc:
            item.error, item.stage = exc, detector.stage
            self._post(item)
            return False
        if cache.enabled:
            item.pending = Pending()
            cache.store(item.pending)
        self._post(item)
        return True
