"""The capture thread and its fixed pool of preallocated frame buffers.

One thread reads the source into free slots of a fixed pool and publishes them in order.

- Live sources (cameras, streams) keep only the newest frame: when a new frame is published
  while an older one still waits, the older one goes back to the pool and is counted as
  dropped. The camera paces the stream.
- File, folder and synthetic sources lose nothing: the thread reads the next frame once the
  consumer has taken the previous one (back-pressure), optionally paced to a target rate.
- A live source that raises or delivers nothing is closed and reopened with exponential
  backoff; each loss and each recovery is reported as an event attached to the next frame
  (and counted in PipelineStats). Waits use `Event.wait`, so `stop()` is immediate.
- An exception in the thread is never swallowed: the consumer's next `get()` raises it.
- The thread can run at a lower priority (`nice`), so that on a small CPU it decodes in the
  gaps inference leaves rather than competing with the inference threads.

Buffers are allocated once per frame size; a size change mid-stream reallocates the slots
that see it and is reported once as a `frame_size_changed` event.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any, Deque, Dict, List, Optional

import numpy as np

from edge_sdk.errors import SourceError
from edge_sdk.runtime.config import ReconnectConfig
from edge_sdk.runtime.sources import Source, to_bgr
from edge_sdk.runtime.types import PipelineStats


class FrameSlot:
    """One preallocated frame buffer and what is known about the frame in it."""

    __slots__ = ("slot_id", "buffer", "index", "timestamp", "t_capture", "events", "ground_truth")

    def __init__(self, slot_id: int) -> None:
        self.slot_id = slot_id
        self.buffer: Optional[np.ndarray] = None  # BGR uint8 (H, W, 3)
        self.index = -1  # frame number in the stream
        self.timestamp = 0.0  # wall clock at capture (time.time())
        self.t_capture = 0.0  # monotonic clock at capture (time.perf_counter())
        self.events: List[Dict[str, Any]] = []
        self.ground_truth: Any = None  # synthetic sources: Detections of this frame

    @property
    def frame(self) -> np.ndarray:
        assert self.buffer is not None
        return self.buffer


class Pacer:
    """Spaces frames `1/fps` apart on the monotonic clock; waits on an Event so stop is immediate.

    When it falls behind by more than one period it re-anchors rather than bursting.
    """

    def __init__(self, fps: float, clock: Any = time.perf_counter) -> None:
        self.period = 1.0 / fps if fps and fps > 0 else 0.0
        self.clock = clock
        self._due: Optional[float] = None

    def wait(self, stop: threading.Event) -> bool:
        """Wait until the next frame is due; False when `stop` was set meanwhile."""
        if self.period <= 0:
            return not stop.is_set()
        now = self.clock()
        if self._due is None or now - self._due > self.period:
            self._due = now
        delay = self._due - now
        self._due += self.period
        if delay > 0:
            return not stop.wait(delay)
        return not stop.is_set()


class Capture:
    """Runs `source` on a thread into a pool of `pool_size` slots. Use `get()` / `release()`."""

    def __init__(
        self,
        source: Source,
        pool_size: int = 4,
        fps: float = 0.0,
        reconnect: Optional[ReconnectConfig] = None,
        stats: Optional[PipelineStats] = None,
        nice: int = 0,
    ) -> None:
        if pool_size < 3:
            raise ValueError("the frame pool needs at least 3 slots (writer, ready, consumer)")
        self.source = source
        self.live = bool(source.live)
        self.reconnect = reconnect or ReconnectConfig()
        self.stats = stats if stats is not None else PipelineStats()
        self.nice = int(nice)
        self._pacer = Pacer(0.0 if self.live else fps)
        self._slots = [FrameSlot(i) for i in range(pool_size)]
        self._free: List[FrameSlot] = list(reversed(self._slots))
        self._ready: Deque[FrameSlot] = collections.deque(maxlen=pool_size)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ended = False
        self._error: Optional[BaseException] = None
        self._events: List[Dict[str, Any]] = []
        self._thread: Optional[threading.Thread] = None
        self._next_index = 0
        self._shape: Optional[tuple] = None
        self._failures = 0  # consecutive failed reads/reopens of a live source
        self._last_error = ""

    # -- consumer side -------------------------------------------------------------------
    def start(self) -> "Capture":
        """Open the source (errors raise here, in the caller's thread) and start the thread."""
        if self._thread is not None:
            return self
        self.source.open()
        self._thread = threading.Thread(target=self._run, name=f"edge-sdk-capture[{self.source.name}]", daemon=True)
        self._thread.start()
        return self

    def get(self, timeout: Optional[float] = None) -> Optional[FrameSlot]:
        """The next frame's slot, or None at the end of the stream. Raises the thread's error."""
        with self._cond:
            while not self._ready and not self._ended and self._error is None:
                if not self._cond.wait(timeout):
                    raise SourceError(f"no frame from {self.source.name} within {timeout:.1f} s")
            if self._ready:
                slot = self._ready.popleft()
                self._cond.notify_all()
                return slot
            if self._error is not None:
                raise self._error
            return None

    def release(self, slot: FrameSlot) -> None:
        """Give a slot back to the pool once its frame is no longer needed."""
        with self._cond:
            slot.events = []
            self._free.append(slot)
            self._cond.notify_all()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            # A live source can block inside its driver (a dead RTSP server); the thread is a
            # daemon and is left behind after a bounded wait rather than hanging the caller.
            self._thread.join(timeout=5.0 if self.live else None)
        self._thread = None
        self.source.close()

    def wait_captured(self, count: int, timeout: float = 5.0) -> bool:
        """Block until the thread has captured `count` frames (or the stream ended): for tests."""
        with self._cond:
            return self._cond.wait_for(lambda: self.stats.frames_captured >= count or self._ended or self._error is not None, timeout)

    @property
    def pool(self) -> List[FrameSlot]:
        return list(self._slots)

    # -- capture thread ------------------------------------------------------------------
    def _lower_priority(self) -> None:
        """Raise this thread's nice value (Linux: per thread) so that, on a CPU that inference
        keeps busy, decoding the next frame runs in the gaps instead of stalling inference
        threads. Measured on 2 cores by bench/bench_pipeline.py. A system that refuses is
        reported as an event; capture goes on at normal priority."""
        if self.nice <= 0 or not hasattr(os, "setpriority"):
            return
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self.nice)
        except OSError as exc:
            self._post({"event": "capture_priority_unchanged", "error": str(exc)})

    def _run(self) -> None:
        try:
            self._lower_priority()
            while not self._stop.is_set():
                slot = self._acquire()
                if slot is None:
                    break
                if not self._pacer.wait(self._stop):
                    self._put_back(slot)
                    break
                if not self._capture_into(slot):
                    self._put_back(slot)
                    if not self.live:
                        break
                    if not self._recover():
                        break
                    continue
                self._publish(slot)
        except BaseException as exc:  # surfaced to the consumer by get()
            with self._cond:
                self._error = exc
                self._cond.notify_all()
            return
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def _acquire(self) -> Optional[FrameSlot]:
        """A free slot to read into. A finite source reads the next frame only once the
        consumer has taken the last one, so one frame is read while one is processed (overlap)
        and a frame never waits in the pool longer than one processing step."""
        with self._cond:
            while not self._free or (not self.live and self._ready):
                if self._stop.is_set():
                    return None
                if self.live and self._ready and not self._free:
                    self._free.append(self._ready.popleft())  # the consumer holds the rest
                    self.stats.frames_dropped += 1
                    continue
                self._cond.wait()
            return self._free.pop()

    def _put_back(self, slot: FrameSlot) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify_all()

    def _capture_into(self, slot: FrameSlot) -> bool:
        """Read one frame into `slot`. False when the source gave nothing (end, or a live failure)."""
        error: Optional[BaseException] = None
        try:
            raw = self.source.read(slot.buffer)
        except Exception as exc:
            if not self.live:
                raise
            raw, error = None, exc
        if raw is None:
            if self.live:
                self._lost(error)
            return False
        t_capture = time.perf_counter()
        timestamp = time.time()
        h, w = raw.shape[:2]
        if slot.buffer is None or slot.buffer.shape[:2] != (h, w):
            slot.buffer = np.empty((h, w, 3), np.uint8)
        to_bgr(raw, slot.buffer)
        if self._shape != (h, w):
            if self._shape is not None:
                self._post({"event": "frame_size_changed", "from": [self._shape[1], self._shape[0]], "to": [w, h]})
            self._shape = (h, w)
        slot.t_capture = t_capture
        slot.timestamp = timestamp
        slot.ground_truth = getattr(self.source, "ground_truth", None)
        self._failures = 0
        return True

    def _publish(self, slot: FrameSlot) -> None:
        with self._cond:
            slot.index = self._next_index
            self._next_index += 1
            if self._events:
                slot.events = self._events
                self._events = []
            if self.live:
                while self._ready:
                    stale = self._ready.popleft()
                    if stale.events:
                        slot.events = stale.events + slot.events
                        stale.events = []
                    self._free.append(stale)
                    self.stats.frames_dropped += 1
            self._ready.append(slot)
            self.stats.frames_captured += 1
            self._cond.notify_all()

    def _post(self, event: Dict[str, Any]) -> None:
        with self._cond:
            self._events.append(event)

    def _lost(self, error: Optional[BaseException]) -> None:
        self.stats.source_errors += 1
        self._failures += 1
        reason = f"{type(error).__name__}: {error}" if error is not None else "no frame"
        self._post({"event": "source_lost", "source": self.source.name, "error": reason, "failures": self._failures})
        self._last_error = reason

    def _recover(self) -> bool:
        """Close and reopen a live source with exponential backoff. False when stopping."""
        cfg = self.reconnect
        self.source.close()
        while True:
            if cfg.max_attempts and self._failures > cfg.max_attempts:
                raise SourceError(
                    f"{self.source.name} did not come back after {cfg.max_attempts} reconnect attempts "
                    f"(last error: {self._last_error}); check the camera or stream, or raise reconnect.max_attempts"
                )
            delay = min(cfg.max_s, cfg.initial_s * (2 ** (self._failures - 1)))
            if self._stop.wait(delay):
                return False
            try:
                self.source.open()
            except Exception as exc:
                self.stats.source_errors += 1
                self._failures += 1
                self._last_error = f"{type(exc).__name__}: {exc}"
                continue
            self.stats.reconnects += 1
            self._post({"event": "source_reconnected", "source": self.source.name, "attempts": self._failures})
            return True
