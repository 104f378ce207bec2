"""The capture thread and its fixed pool of preallocated frame buffers.

One thread reads the source into free slots of a fixed pool and publishes them in order.

- Live sources (cameras, streams) keep only the newest frame: when a new frame is published
  while an older one still waits, the older one goes back to the pool and is counted as
  dropped. The camera paces the stream.
- File, folder and synthetic sources lose nothing: the thread reads ahead up to `read_ahead`
  frames (default: the pool less the slot being written and the consumer's) and then waits for
  the consumer (back-pressure), optionally paced to a target rate. Reading ahead lets decoding
  use every idle moment of a busy CPU instead of only those of the current frame.
- A live source that raises or delivers nothing is closed and reopened with exponential
  backoff; each loss and each recovery is reported as an event attached to the next frame
  (and counted in PipelineStats). Waits use `Event.wait`, so `stop()` is immediate.
- An exception in the thread is never swallowed: the consumer's next `get()` raises it.
- `prepare(slot)`, when given, runs on this thread for each captured frame before it is
  published: the pipeline's preprocess stage when it runs beside capture.
- The thread can run at a lower priority (`nice`), so that on a small CPU it decodes in the
  gaps inference leaves rather than competing with the inference threads. With `idle=True`
  (the pipeline's choice when inference runs on the CPU) it goes further where Linux allows:
  the SCHED_IDLE class runs it only on a core nothing else wants, and an inference thread
  that wakes up takes its core at once (a nice value, even 19, still lets it keep the core
  for a while). So that it cannot starve, a consumer kept waiting for a frame longer than
  `starved_after_s` takes the thread out of the idle class for good (back to its nice value)
  and reports it: other processes want the CPU too, and an idle-class thread would only get
  their leftovers. A process that may not take a thread out of SCHED_IDLE again (no
  CAP_SYS_NICE, RLIMIT_NICE too low) does not put it there; live and rate-paced sources,
  which make the consumer wait by design, never use the idle class.

Buffers come from a :class:`~edge_sdk.cuda.frames.FrameMemory` (`memory`), once per slot and
frame size: ordinary numpy arrays by default, page-locked memory mapped into the GPU (zero-copy,
an integrated GPU) or pinned memory with one device copy per slot (a discrete GPU) when a CUDA
device is used. The source decodes straight into the slot's buffer where it can (OpenCV's
`read(image=buf)`); other frames (grey, BGRA, another size) are converted into it. Each slot
holds one :class:`~edge_sdk.runtime.frame.Frame` (`slot.view`), made with the slot and refilled
with each frame (its buffer, index and capture clocks); `upload` records on it where the device
reads the pixels. The first
frame sizes every slot. A size change mid-stream resizes the free slots at once and the others
as they come back (each old buffer released first), and is reported once as a
`frame_size_changed` event. `stop()` releases every buffer.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional

import numpy as np

from edge_sdk.cuda.frames import FrameBuffer, FrameMemory, HostMemory
from edge_sdk.errors import SourceError
from edge_sdk.runtime.config import ReconnectConfig
from edge_sdk.runtime.frame import DEFAULT_STREAM_ID, Frame
from edge_sdk.runtime.sources import Source, to_bgr
from edge_sdk.runtime.types import PipelineStats

logger = logging.getLogger(__name__)


class _OnFrame:
    """A FrameSlot attribute kept in the slot's Frame (one owner for each value)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, slot: Any, owner: Any = None) -> Any:
        return self if slot is None else getattr(slot.view, self.name)

    def __set__(self, slot: Any, value: Any) -> None:
        setattr(slot.view, self.name, value)


class FrameSlot:
    """One preallocated frame buffer and what is known about the frame in it.

    `view` is the slot's :class:`~edge_sdk.runtime.frame.Frame`, made once with the slot: what
    the slot hands to the stages after capture. `buffer`, `index`, `timestamp` and `t_capture`
    are that Frame's (`buffer` is its `image`)."""

    __slots__ = ("slot_id", "view", "device_ptr", "allocation", "events", "ground_truth")

    buffer = _OnFrame("image")  # BGR uint8 (H, W, 3)
    index = _OnFrame("index")
    timestamp = _OnFrame("timestamp")
    t_capture = _OnFrame("t_capture")

    def __init__(self, slot_id: int, stream_id: str = DEFAULT_STREAM_ID) -> None:
        self.slot_id = slot_id
        self.view = Frame(stream_id=stream_id)
        # Where a kernel reads the frame: the mapping of `buffer` (mapped memory), the slot's
        # device buffer once Capture.upload has queued the copy (pinned memory), else None.
        self.device_ptr: Optional[int] = None
        self.allocation: Optional[FrameBuffer] = None  # what `buffer` came from (the capture's memory)
        self.index = -1  # frame number in the stream
        self.timestamp = 0.0  # wall clock at capture (time.time())
        self.t_capture = 0.0  # monotonic clock at capture (time.perf_counter())
        self.events: List[Dict[str, Any]] = []
        self.ground_truth: Any = None  # synthetic sources: Detections of this frame

    @property
    def frame(self) -> np.ndarray:
        assert self.buffer is not None
        return self.buffer


def can_leave_sched_idle() -> bool:
    """Whether a thread started by the calling one may go into SCHED_IDLE and come back out.

    Coming back needs CAP_SYS_NICE or a RLIMIT_NICE that allows the thread's nice value
    (often neither for a normal user, nor for root in a container). Probed in a throwaway
    thread, which inherits the caller's nice value."""
    if not hasattr(os, "SCHED_IDLE") or not hasattr(os, "sched_setscheduler"):
        return False
    result: List[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except OSError:
            result.append(False)
            return
        result.append(True)

    thread = threading.Thread(target=probe, name="edge-sdk-sched-probe", daemon=True)
    thread.start()
    thread.join()
    return result == [True]


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
    """Runs `source` on a thread into a pool of `pool_size` slots. Use `get()` / `release()`.

    `memory` allocates the slots' frame buffers (default: ordinary host memory); see
    :func:`edge_sdk.cuda.frames.frame_memory` for the choice between host, mapped and pinned.
    `stream_id` is the id every Frame of this ring carries (the config's source id).
    """

    STOP_WAIT_S = 5.0  # how long stop() waits for a live source's thread blocked in its driver

    def __init__(
        self,
        source: Source,
        pool_size: int = 4,
        fps: float = 0.0,
        reconnect: Optional[ReconnectConfig] = None,
        stats: Optional[PipelineStats] = None,
        nice: int = 0,
        idle: bool = False,
        starved_after_s: float = 0.02,
        read_ahead: Optional[int] = None,
        prepare: Optional[Callable[[FrameSlot], None]] = None,
        memory: Optional[FrameMemory] = None,
        stream_id: str = DEFAULT_STREAM_ID,
    ) -> None:
        if pool_size < 3:
            raise ValueError("the frame pool needs at least 3 slots (writer, ready, consumer)")
        self.source = source
        self.memory = memory if memory is not None else HostMemory(reason="no frame memory was chosen")
        self.live = bool(source.live)
        self.reconnect = reconnect or ReconnectConfig()
        self.stats = stats if stats is not None else PipelineStats()
        self.nice = int(nice)
        self.idle = bool(idle)
        self.starved_after_s = float(starved_after_s)
        self.prepare = prepare  # a stage run on this thread for each frame before it is published
        self.read_ahead = max(1, pool_size - 2) if read_ahead is None else int(read_ahead)
        if not 1 <= self.read_ahead <= pool_size - 2:
            raise ValueError(f"read_ahead must be between 1 and pool_size - 2 ({pool_size - 2}), got {read_ahead}")
        self._pacer = Pacer(0.0 if self.live else fps)
        self._slots = [FrameSlot(i, stream_id) for i in range(pool_size)]
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
        self._tid: Optional[int] = None  # the capture thread's native id
        self._idle_class = False  # the thread is in SCHED_IDLE

    # -- consumer side -------------------------------------------------------------------
    def start(self) -> "Capture":
        """Open the source (errors raise here, in the caller's thread) and start the thread."""
        if self._thread is not None:
            return self
        self.source.open()
        self._thread = threading.Thread(target=self._run, name=f"edge-sdk-capture[{self.source.name}]", daemon=True)
        self._thread.start()
        return self

    def _has_news(self) -> bool:
        return bool(self._ready) or self._ended or self._error is not None

    def get(self, timeout: Optional[float] = None, cancel: Optional[threading.Event] = None) -> Optional[FrameSlot]:
        """The next frame's slot, or None at the end of the stream. Raises the thread's error.

        `cancel`: an Event that, once set (followed by :meth:`wake`), makes a waiting `get`
        return None with no frame taken; the caller tells it from the end by the Event."""
        news = self._has_news if cancel is None else (lambda: self._has_news() or cancel.is_set())
        with self._cond:
            if not news():
                if self._idle_class:
                    first = self.starved_after_s if timeout is None else min(timeout, self.starved_after_s)
                    if not self._cond.wait_for(news, first):
                        self._leave_idle_class(first)
                if not self._cond.wait_for(news, timeout):
                    raise SourceError(f"no frame from {self.source.name} within {timeout:.1f} s")
            if cancel is not None and cancel.is_set():
                return None
            if self._ready:
                slot = self._ready.popleft()
                self._cond.notify_all()
                return slot
            if self._error is not None:
                raise self._error
            return None

    def wake(self) -> None:
        """Wake a `get` waiting on another thread, so that it sees its `cancel` Event."""
        with self._cond:
            self._cond.notify_all()

    def release(self, slot: FrameSlot) -> None:
        """Give a slot back to the pool once its frame is no longer needed, by the CPU or by
        GPU work: the capture thread may write the next frame into it at once, so work queued
        on a stream that reads it (a kernel, the copy `upload` queues) must have completed."""
        with self._cond:
            slot.events = []
            self._free.append(slot)
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop the thread, close the source and release the frame buffers. A frame the caller
        still holds stays readable (its memory goes when the last array referring to it does),
        but it is no longer the capture's."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A live source can block inside its driver (a dead RTSP server); the thread is a
            # daemon and is left behind after a bounded wait rather than hanging the caller.
            thread.join(timeout=self.STOP_WAIT_S if self.live else None)
        self._thread = None
        self.source.close()
        if thread is not None and thread.is_alive():
            # It may still be writing into a slot: its buffers stay allocated.
            logger.warning("capture thread of %s did not stop within %.1f s; its %d frame buffers are not released",
                           self.source.name, self.STOP_WAIT_S, sum(s.allocation is not None for s in self._slots))
            return
        self._release_buffers()

    def _release_buffers(self) -> None:
        for slot in self._slots:
            self._release_slot(slot)

    def _release_slot(self, slot: FrameSlot) -> None:
        """Give `slot`'s buffer back to the frame memory; the slot holds none afterwards."""
        allocation = slot.allocation
        slot.buffer = None
        slot.device_ptr = None
        slot.view.on_device(None)
        slot.allocation = None
        if allocation is not None:
            self.memory.release(allocation)

    def upload(self, slot: FrameSlot, stream: Any) -> Optional[int]:
        """Make `slot`'s frame readable by the next work on `stream` (one async copy for pinned
        memory, nothing for mapped memory) and return the device address to read it from;
        None for host memory. Release the slot only after that work has completed."""
        if slot.allocation is None:
            raise SourceError(f"slot {slot.slot_id} holds no frame; upload a slot that get() has just returned")
        ptr = self.memory.upload(slot.allocation, stream)
        slot.view.on_device(ptr, stream)  # the slot's Frame: readable on the device from there
        return ptr

    def describe(self) -> Dict[str, Any]:
        """The source, the pool and the frame memory path (`frame_memory.path`: "mapped (zero-copy,
        integrated GPU)", "pinned + async copy (discrete GPU)" or "host") with the reason for it."""
        return {
            "source": self.source.name,
            "live": self.live,
            "pool_size": len(self._slots),
            "read_ahead": self.read_ahead,
            "frame_memory": self.memory.describe(),
        }

    def wait_captured(self, count: int, timeout: float = 5.0) -> bool:
        """Block until the thread has captured `count` frames (or the stream ended): for tests."""
        with self._cond:
            return self._cond.wait_for(lambda: self.stats.frames_captured >= count or self._ended or self._error is not None, timeout)

    @property
    def pool(self) -> List[FrameSlot]:
        return list(self._slots)

    # -- capture thread ------------------------------------------------------------------
    def _lower_priority(self) -> None:
        """Raise this thread's nice value (Linux: per thread) and, with `idle`, move it to the
        SCHED_IDLE class, so that on a CPU that inference keeps busy, decoding the next frame
        runs in the gaps instead of stalling inference threads. Measured on 2 cores by
        bench/bench_pipeline.py. A system that refuses is reported as an event; capture goes
        on at the priority it has."""
        tid = threading.get_native_id()
        self._tid = tid
        if self.nice > 0 and hasattr(os, "setpriority"):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self.nice)
            except OSError as exc:
                self._post({"event": "capture_priority_unchanged", "error": str(exc)})
        paced = self.live or self._pacer.period > 0  # waits for the camera or the clock are not starvation
        # Only a thread that can be taken out again if it starves goes into the idle class.
        if self.idle and not paced and can_leave_sched_idle():
            try:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            except OSError as exc:
                self._post({"event": "capture_priority_unchanged", "error": f"SCHED_IDLE: {exc}"})
                return
            with self._cond:
                self._idle_class = True

    def _leave_idle_class(self, waited: float) -> None:
        """(Consumer side, `_cond` held.) The consumer waited `waited` s for a frame: the
        idle-class thread does not get enough of the CPU. Move it back to normal
        scheduling (at its nice value) for the rest of the stream and report it. Leaving
        SCHED_IDLE was probed before entering it; a refusal all the same is reported and the
        thread stays where it is."""
        assert self._tid is not None
        self._idle_class = False
        try:
            os.sched_setscheduler(self._tid, os.SCHED_OTHER, os.sched_param(0))
        except OSError as exc:
            self._events.append({"event": "capture_priority_unchanged", "error": f"leaving SCHED_IDLE: {exc}"})
            return
        self._events.append({"event": "capture_idle_class_left", "waited_ms": round(waited * 1000.0, 1),
                             "reason": "the consumer waited for a frame: capture needs a core of its own "
                                       "(other processes keep the CPU busy, or decoding is the bottleneck)"})

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
                if self.prepare is not None:
                    self.prepare(slot)  # raising ends the thread: the consumer's get() raises it
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
        """A free slot to read into. A finite source reads on while fewer than `read_ahead`
        frames wait for the consumer; a live one always reads (the newest frame wins)."""
        with self._cond:
            while not self._free or (not self.live and len(self._ready) >= self.read_ahead):
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
            self._allocate(slot, (h, w, 3))
            assert slot.buffer is not None
        to_bgr(raw, slot.buffer)  # nothing to do when the source decoded into the buffer
        if self._shape != (h, w):
            if self._shape is not None:
                self._post({"event": "frame_size_changed", "from": [self._shape[1], self._shape[0]], "to": [w, h]})
            self._shape = (h, w)
        slot.t_capture = t_capture
        slot.timestamp = timestamp
        view = slot.view
        view.on_device(None)  # until this frame is uploaded
        view.prepared = None
        slot.ground_truth = getattr(self.source, "ground_truth", None)
        self._failures = 0
        return True

    def _allocate(self, slot: FrameSlot, shape: tuple) -> None:
        """(Capture thread.) Buffers of `shape` for `slot` and for every free slot, so that a
        new frame size allocates once, up front, and later frames decode into the slots
        instead of allocating when a slot is first used. Only this thread writes into free
        slots; those the consumer holds or has yet to take change size when they come back."""
        self._reallocate(slot, shape)
        with self._cond:
            idle = [s for s in self._free if s.buffer is None or s.buffer.shape != shape]
        for other in idle:
            self._reallocate(other, shape)

    def _reallocate(self, slot: FrameSlot, shape: tuple) -> None:
        """A buffer of `shape` for `slot`, its old one released first."""
        self._release_slot(slot)
        allocation = self.memory.allocate(shape)
        slot.allocation = allocation
        slot.buffer = allocation.array
        slot.device_ptr = allocation.device_ptr

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
