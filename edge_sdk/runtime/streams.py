"""Several sources, one model: a capture ring per source, one dynamic batcher, one batch thread.

    detector = make_batch_detector(model, max_batch_size=4)
    with MultiStreamPipeline([("door", "rtsp://cam1/live"), ("yard", "rtsp://cam2/live")], detector,
                             BatchPolicy(4, (2, 4), max_queue_delay_ms=10)) as pipeline:
        for result in pipeline.results():       # StreamResult: result.stream, its index, detections
            ...
        pipeline.stats()                        # the batcher's window, each stream's state and counts
        pipeline.swap_detector(new_detector)    # from the next batch on, for every stream (hot reload)

Each source has its own :class:`~edge_sdk.runtime.capture.Capture` (its ring of frame slots) and a
feeder thread that puts each captured frame into the :class:`~edge_sdk.runtime.batcher.DynamicBatcher`
under the stream's id. The batch thread takes the batches the batcher forms (Triton's rules,
oldest first with one frame per stream per round), runs them through the detector in one backend
call (:class:`~edge_sdk.runtime.detectors.batched.StreamBatchDetector`) and hands the results on,
in order for each stream, before giving the frames' slots back to their rings. Each frame's
network input is prepared on its stream's capture thread (resized into uint8 planes, a
PreparedPlanes per frame buffer, with one resize scratch per stream), so preprocessing runs beside
inference and the batch thread only converts the rows into the batch tensor. At most
`frames_in_flight` frames of a stream (default 1) wait in the batcher or the model at once; the
next waits in the stream's ring, where a live source keeps only the newest frame (the older ones
are dropped and counted) and a file or synthetic source reads ahead as far as the ring allows. So
a frame's queue delay is at most the batcher's delay plus the batch ahead of it, and a stream that
delivers faster than the model runs cannot fill the batcher.

A source that cannot be opened, or whose capture fails, is reported (an event, :meth:`events`,
which keeps the latest :data:`EVENTS_KEPT`; each stream counts its failures and losses in
:meth:`stats`, exactly, however many there are) and opened again after an exponential backoff (`reconnect`: initial_s, doubling up to max_s; after
max_attempts failures in a row, 0 for never, the stream is given up), while the other streams run
on; a reopened stream's frame numbers go on from the last one it delivered; a live source's own
reconnects happen inside its Capture. The pipeline ends when every stream has ended or been given
up (the last one to end closes the batcher, so its last frames go at once), or on :meth:`stop`. An
error of the model (not of a source) stops the pipeline and is raised by :meth:`results`.
"""
from __future__ import annotations

import ctypes
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.preprocess import InputSpec, Preprocessor
from edge_sdk.runtime.batcher import BatchPolicy, BatcherClosed, DynamicBatcher
from edge_sdk.runtime.capture import Capture, FrameSlot
from edge_sdk.runtime.config import ReconnectConfig
from edge_sdk.runtime.detectors.base import PreparedPlanes
from edge_sdk.runtime.frame import DEFAULT_STREAM_ID
from edge_sdk.runtime.sources import Source, open_source
from edge_sdk.runtime.types import TRACK, FrameResult, PipelineStats
from edge_sdk.tracking.tracker import StreamTrackers, TrackingConfig

logger = logging.getLogger(__name__)

clock = time.perf_counter  # the capture clock: t_capture and the total latency

_END = object()

EVENTS_KEPT = 256  # the latest source events events() returns; a camera failing for days is counted, not listed


@dataclass
class StreamResult(FrameResult):
    """A FrameResult of one stream: `stream` is its id. `latency_ms` adds `queue` (the time the
    frame waited in the batcher); `frame_age_ms`: from capture to the moment its batch left the
    batcher (how stale the frames the model sees are). `frame` is a copy of the pixels with
    `keep_frames`, else not kept, and `captured` is not kept (the slot goes back to its ring once
    the batch is decoded). `tracks`, as a FrameResult's: the detections with a confirmed track
    of the stream's tracker (empty with tracking off)."""

    stream: str = DEFAULT_STREAM_ID
    frame_age_ms: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        return dict({"stream": self.stream}, **super().to_json())


class _Inputs:
    """A stream's prepared inputs: one PreparedPlanes per frame buffer of its ring (by slot id)
    and one resize scratch for them all (its capture thread prepares one frame at a time)."""

    def __init__(self, spec: InputSpec, pool_size: int) -> None:
        self.spec = spec
        self.scratch = Preprocessor(spec, batch=0)
        self.planes = [PreparedPlanes(spec) for _ in range(pool_size)]


class _Stream:
    """One source and what the pipeline knows of it."""

    def __init__(self, stream_id: str, source: Source, fps: float = 0.0) -> None:
        self.id = stream_id
        self.source = source
        self.fps = fps  # paces a file, folder or synthetic source (Capture's `fps`); 0: unpaced
        self.stats = PipelineStats()
        self.state = "starting"  # running, retrying, ended, given_up, stopped
        self.failures = 0  # failures in a row
        self.failed = 0  # failures since the start (source_failed events)
        self.losses = 0  # first failures in a row: after frames were delivered, or at the first open
        self.in_flight = 0  # slots of its ring in the batcher or the batch thread
        self.next_index = 0  # frame numbers go on across the rings of its reopened source
        self.left = False  # puts no more frames
        self.cond = threading.Condition()
        self.thread: Optional[threading.Thread] = None
        self.capture: Optional[Capture] = None
        self.inputs: Optional[_Inputs] = None  # for the detector's prepared_spec, made on its capture thread

    def release(self, capture: Capture, slot: FrameSlot) -> None:
        capture.release(slot)
        with self.cond:
            self.in_flight -= 1
            self.cond.notify_all()


SourceSpec = Union[str, Source]

M_ARENA_MAX = -8  # glibc's mallopt parameter: the most malloc arenas the process's threads spread over
MALLOC_ARENAS = 2  # what `detect` and the daemon (processes of their own) ask MultiStreamPipeline for


def limit_malloc_arenas(arenas: int) -> bool:
    """Have the C library's malloc keep at most `arenas` arenas for the process's threads
    (glibc's mallopt M_ARENA_MAX): a thread that allocates for the first time after this shares
    one. False where the C library has no mallopt or refuses the value (not glibc: nothing
    changed). glibc gives each new thread an arena of its own, up to 8 per core, and each keeps
    what its thread freed: one process of four streams (bench_streams' worker, a capture and a
    feeder thread per stream and the batch thread) peaked at 358 MB, at 344 MB with two."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # no C library to open by None (Windows), no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, int(arenas)))


def fitted_policy(batching: Any, model: Any, streams: int, origin: str = "config") -> Tuple[BatchPolicy, Optional[str]]:
    """The BatchPolicy of `batching` (a [batching] table) for `streams` sources on a loaded
    `model`, and a note or None. A max_batch_size set explicitly that the bundle (or its model)
    cannot take is refused (ConfigError naming the rebuild); left to its default (the number of
    sources) it is capped at what the bundle takes, and the note says so and how to lift it."""
    from edge_sdk.manifest_check import batch_limit, check_batch

    if batching.max_batch_size is not None:
        for owner in (model.bundle, model.backend):
            check_batch(owner, batching.max_batch_size)
        return batching.policy(streams, origin=origin), None
    limits = [limit for limit, _ in (batch_limit(model.bundle), batch_limit(model.backend)) if limit is not None]
    limit = min(limits) if limits else None
    policy = batching.policy(streams, limit, origin=origin)
    note = None
    if limit is not None and limit < streams:
        note = (f"bundle {model.bundle.root} takes at most {limit} frame(s) per call: the {streams} streams share the "
                f"model in batches of {limit}; rebuild it with `edge-sdk build --max-batch {streams}` to run them in one call")
    return policy, note


class MultiStreamPipeline:
    """`sources`: (stream id, URI or Source) pairs, ids unique. `detector`: a StreamBatchDetector
    (anything with ``detect_batch(frames)``). `fps`: {stream id: the rate to pace its file, folder or
    synthetic source to}. `keep_frames`: each result carries a copy of its frame (True), or those
    of the frames for which it returns True, called with their stream id on the batch thread.
    `tracking`: a track id on each stream's detections (None, or not enabled: none).
    `pool_size`: the frame buffers of a file, folder or synthetic source's ring (default
    `frames_in_flight` + 2: one being read, one ready, those in flight); a live source's ring is
    `frames_in_flight` + 2 whatever it says (:meth:`ring_size`). `malloc_arenas`: at `start()`,
    the C library's malloc keeps at most that many arenas for the process's threads from then on
    (:func:`limit_malloc_arenas`, glibc; a setting of the whole process, so a library caller's
    choice: None, the default, leaves it; `detect` and the daemon ask for MALLOC_ARENAS). Python
    API; `start()` or use it as a context manager."""

    def __init__(self, sources: Sequence[Tuple[str, SourceSpec]], detector: Any, policy: BatchPolicy,
                 reconnect: Optional[ReconnectConfig] = None, pool_size: Optional[int] = None, loop: bool = False,
                 frames_in_flight: int = 1, fps: Optional[Dict[str, float]] = None,
                 keep_frames: Union[bool, Callable[[str], bool]] = False,
                 tracking: Optional[TrackingConfig] = None, malloc_arenas: Optional[int] = None) -> None:
        ids = [str(sid) for sid, _ in sources]
        if not ids:
            raise ConfigError("no sources: give at least one (stream id, URI) pair")
        duplicates = sorted({sid for sid in ids if ids.count(sid) > 1})
        if duplicates:
            raise ConfigError(f"duplicate stream ids {duplicates}: give every source its own id")
        self._streams = [_Stream(str(sid), src if isinstance(src, Source) else open_source(str(src), loop=loop),
                                 float((fps or {}).get(str(sid), 0.0))) for sid, src in sources]
        self.detector = detector
        self.batcher = DynamicBatcher(policy)
        self.reconnect = reconnect or ReconnectConfig()
        if isinstance(frames_in_flight, bool) or not isinstance(frames_in_flight, int) or frames_in_flight < 1:
            raise ConfigError(f"frames_in_flight must be an integer >= 1, got {frames_in_flight!r}")
        self.pool_size = frames_in_flight + 2 if pool_size is None else int(pool_size)
        if frames_in_flight > self.pool_size - 2:
            raise ConfigError(f"frames_in_flight must be an integer from 1 to pool_size - 2 = {self.pool_size - 2}, "
                              f"got {frames_in_flight!r}; raise pool_size for more")
        self.frames_in_flight = frames_in_flight
        self.malloc_arenas = malloc_arenas
        # each result carries a copy of its frame (snapshots), or those the callable picks (stream id -> keep)
        self.keep_frames = keep_frames if callable(keep_frames) else bool(keep_frames)
        self.tracking = None if tracking is None or not tracking.enabled else StreamTrackers(
            tracking, {s.id: s.fps or s.source.fps or 0.0 for s in self._streams})
        self._pending: Optional[Tuple[Any, threading.Event]] = None  # swap_detector's, until the next batch
        most = len(self._streams) * frames_in_flight
        if policy.target > most:
            logger.warning("a batch of %d never forms with %d streams of %d frame(s) in flight: every batch waits the "
                           "full %g ms queue delay; set max_batch_size (and the preferred sizes) to at most %d",
                           policy.target, len(self._streams), frames_in_flight, policy.max_queue_delay_ms, most)
        self._stop = threading.Event()
        self._results: "queue.Queue[Any]" = queue.Queue()
        self._events: Deque[Dict[str, Any]] = deque(maxlen=EVENTS_KEPT)
        self._lock = threading.Lock()
        self._feeding = len(self._streams)
        self._error: Optional[BaseException] = None
        self._batch_thread: Optional[threading.Thread] = None

    # -- the caller's side
    def start(self) -> "MultiStreamPipeline":
        if self._batch_thread is not None:
            return self
        if self.malloc_arenas is not None:  # before its threads first allocate
            limit_malloc_arenas(self.malloc_arenas)
        for stream in self._streams:
            stream.thread = threading.Thread(target=self._feed, args=(stream,), name=f"edge-sdk-feed[{stream.id}]",
                                             daemon=True)
            stream.thread.start()
        self._batch_thread = threading.Thread(target=self._run_batches, name="edge-sdk-batch", daemon=True)
        self._batch_thread.start()
        return self

    def results(self, timeout: Optional[float] = None) -> Iterator[StreamResult]:
        """The results as they come, each stream's in order, until the pipeline ends; raises the
        model's error if it stopped on one. `timeout`: SourceError when no result came for
        that many seconds."""
        while True:
            try:
                item = self._results.get(timeout=timeout)
            except queue.Empty:
                raise SourceError(f"no result from any stream within {timeout:.1f} s") from None
            if item is _END:
                self._results.put(_END)  # a second iterator ends too
                if self._error is not None:
                    raise self._error
                return
            yield item

    def stop(self) -> None:
        """Stop every stream and the batch thread; frames still queued are decoded first."""
        self._stop.set()
        self.batcher.close()
        for stream in self._streams:
            capture = stream.capture
            if capture is not None:
                capture.wake()
            with stream.cond:
                stream.cond.notify_all()
        for stream in self._streams:
            if stream.thread is not None:
                stream.thread.join()
        if self._batch_thread is not None:
            self._batch_thread.join()

    def __enter__(self) -> "MultiStreamPipeline":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def swap_detector(self, detector: Any) -> threading.Event:
        """Run `detector` from the next batch on, for every stream: the batch in the model
        finishes with the old one, and frames queued in the batcher go to the new one (none is
        dropped). The Event is set once the batch thread took it; the old detector is the
        caller's to close after that."""
        done = threading.Event()
        with self._lock:
            self._pending = (detector, done)
        return done

    def _take_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self.detector = pending[0]
            pending[1].set()

    def stream_stats(self) -> Dict[str, PipelineStats]:
        """Each stream's counters (captured, dropped, source errors, reconnects), by its id."""
        return {s.id: s.stats for s in self._streams}

    def events(self) -> List[Dict[str, Any]]:
        """What happened to the sources lately (the latest EVENTS_KEPT): source_failed,
        source_given_up, stream_ended (with the stream id). Counts are stats()'s."""
        with self._lock:
            return list(self._events)

    def states(self) -> Dict[str, str]:
        """Each stream's state: starting, running, retrying, ended, given_up or stopped."""
        return {s.id: s.state for s in self._streams}

    def stats(self) -> Dict[str, Any]:
        """The batcher's statistics and, per stream, its state and counters: `failures` (in a row
        now), `failed` (source_failed since the start), `losses` (the first failure of each run of
        failures: the source went away after delivering, or did not open at first)."""
        with self._lock:
            counts = {s.id: (s.failed, s.losses) for s in self._streams}
        streams = {s.id: {"state": s.state, "frames_captured": s.stats.frames_captured,
                          "frames_dropped": s.stats.frames_dropped, "failures": s.failures,
                          "failed": counts[s.id][0], "losses": counts[s.id][1],
                          "source_errors": s.stats.source_errors, "reconnects": s.stats.reconnects} for s in self._streams}
        return {"batcher": self.batcher.stats(), "streams": streams}

    # -- a feeder thread per stream
    def _report(self, stream: _Stream, event: str, **details: Any) -> None:
        record = dict({"event": event, "stream": stream.id, "source": stream.source.name}, **details)
        with self._lock:
            self._events.append(record)
        if event != "stream_ended":
            logger.warning("stream %s: %s %s", stream.id, event, details)

    def _source_failed(self, stream: _Stream, exc: SourceError) -> None:
        """Its source failed to open or died: counted (exactly) and reported."""
        stream.failures += 1
        with self._lock:
            stream.failed += 1
            stream.losses += stream.failures == 1
        self._report(stream, "source_failed", error=str(exc), failures=stream.failures)

    def _fail(self, exc: BaseException) -> None:
        """An error that is not a source's: every stream stops, results() raises it."""
        with self._lock:
            if self._error is None:
                self._error = exc
        self._stop.set()
        self.batcher.close()

    def _feed(self, stream: _Stream) -> None:
        try:
            while not self._stop.is_set():
                if self._run_capture(stream):
                    stream.state = "ended"
                    self._report(stream, "stream_ended")
                    return
                if self._stop.is_set():
                    break
                cfg = self.reconnect
                if cfg.max_attempts and stream.failures >= cfg.max_attempts:
                    stream.state = "given_up"
                    self._report(stream, "source_given_up", failures=stream.failures)
                    return
                stream.state = "retrying"
                self._stop.wait(min(cfg.max_s, cfg.initial_s * (2 ** (stream.failures - 1))))
            stream.state = "stopped"
        except BaseException as exc:  # not a source's failure (those are reported and retried)
            stream.state = "stopped"
            self._fail(exc)
        finally:
            self._leave(stream)

    def _leave(self, stream: _Stream) -> None:
        """The stream puts no more frames (once per stream); the last one to leave closes the
        batcher, so that what is still queued goes at once instead of after the queue delay."""
        with self._lock:
            if stream.left:
                return
            stream.left = True
            self._feeding -= 1
            last = self._feeding == 0
        if last:
            self.batcher.close()

    def ring_size(self, source: Source) -> int:
        """The frame buffers of a source's ring: `pool_size` for a file, folder or synthetic
        source (it reads ahead into what its frames in flight leave), `frames_in_flight` + 2 for a
        live one, which keeps only its newest frame (one being written, one ready, those in
        flight): more would never be filled."""
        return self.frames_in_flight + 2 if source.live else self.pool_size

    def _run_capture(self, stream: _Stream) -> bool:
        """One life of the stream's ring: True when its source ended, False when it failed (or
        the pipeline stops)."""
        capture = Capture(stream.source, pool_size=self.ring_size(stream.source), fps=stream.fps, stats=stream.stats,
                          prepare=lambda slot: self._prepare(stream, slot))
        try:
            capture.start()
        except SourceError as exc:
            self._source_failed(stream, exc)
            stream.source.close()
            return False
        stream.capture = capture
        stream.state = "running"
        base = stream.next_index
        try:
            while True:
                with stream.cond:  # the stream's frames waiting for the model: at most frames_in_flight
                    stream.cond.wait_for(lambda: stream.in_flight < self.frames_in_flight or self._stop.is_set())
                slot = capture.get(cancel=self._stop)
                if slot is None:
                    if self._stop.is_set():
                        return False
                    self._leave(stream)  # before waiting for its last frames: they may be all that is queued
                    return True
                stream.failures = 0
                slot.view.stream_id = stream.id
                slot.index += base  # a ring numbers its frames from 0; the stream goes on
                stream.next_index = slot.index + 1
                with stream.cond:
                    stream.in_flight += 1
                try:
                    self.batcher.put(stream.id, (capture, slot))
                except BatcherClosed:
                    stream.release(capture, slot)
                    return False
        except SourceError as exc:
            self._source_failed(stream, exc)
            return False
        finally:
            with stream.cond:  # its frames still in the batcher are decoded before the ring goes
                stream.cond.wait_for(lambda: stream.in_flight == 0)
            stream.capture = None
            capture.stop()

    def _prepare(self, stream: _Stream, slot: FrameSlot) -> None:
        """On the stream's capture thread: the frame's network input, filled beside the model's
        work on other frames into its slot's PreparedPlanes (made once per ring size and spec)."""
        spec = self.detector.prepared_spec
        if spec is None:
            return
        inputs = stream.inputs
        if inputs is None or inputs.spec != spec or len(inputs.planes) <= slot.slot_id:
            inputs = stream.inputs = _Inputs(spec, self.ring_size(stream.source))
        prepared = inputs.planes[slot.slot_id]
        prepared.fill(slot.buffer, inputs.scratch)
        slot.view.prepared = prepared

    # -- the batch thread
    def _run_batches(self) -> None:
        streams = {s.id: s for s in self._streams}
        try:
            while True:
                batch = self.batcher.next_batch()
                if batch is None:
                    return
                formed = clock()
                self._take_pending()
                held = [(streams[r.stream_id], r.item[0], r.item[1]) for r in batch]
                try:
                    if self.tracking is not None:  # for a detector that follows it (mode roi): one tracker per stream
                        for stream, _, slot in held:
                            slot.view.tracker = self.tracking.tracker(stream.id)
                    found = self.detector.detect_batch([slot.view for _, _, slot in held])
                    for (stream, _, slot), result, waited in zip(held, found, batch.queue_delays_ms()):
                        detections, latency = result.detections, dict(result.latency, queue=waited)
                        if self.tracking is not None:  # in each stream's frame order: the batch thread's
                            t_track = clock()
                            detections = self.tracking.apply(stream.id, detections)
                            latency[TRACK] = latency.get(TRACK, 0.0) + (clock() - t_track) * 1000.0
                        latency["total"] = (clock() - slot.t_capture) * 1000.0
                        info = dict(result.info, events=list(slot.events)) if slot.events else result.info
                        self._results.put(StreamResult(
                            index=slot.index, timestamp=slot.timestamp, detections=detections,
                            latency_ms=latency, info=info, ground_truth=slot.ground_truth, stream=stream.id,
                            frame=slot.buffer.copy() if self._keeps(stream.id) else None,
                            frame_age_ms=(formed - slot.t_capture) * 1000.0))
                finally:
                    for stream, capture, slot in held:
                        slot.view.tracker = None
                        stream.release(capture, slot)
        except BaseException as exc:  # the model failed: every stream stops, results() raises it
            self._fail(exc)
            self._drain(streams)
        finally:
            self._results.put(_END)

    def _keeps(self, stream_id: str) -> bool:
        keep = self.keep_frames
        return keep(stream_id) if callable(keep) else keep

    def _drain(self, streams: Dict[str, _Stream]) -> None:
        """Give back the slots of what is still queued once the model has failed."""
        while True:
            batch = self.batcher.next_batch(timeout=0)
            if batch is None:
                return
            for r in batch:
                streams[r.stream_id].release(*r.item)
