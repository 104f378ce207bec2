"""The frame pipeline: a chain of stages, one FrameResult per frame.

    config = PipelineConfig(source=SourceConfig("clip.mp4"), bundle="bundle")
    with Pipeline(config) as pipeline:
        for result in pipeline:                   # the sinks stage: whatever the caller does
            print(result.index, len(result.detections), result.latency_ms["total"])
        print(pipeline.describe()["stages"], pipeline.stats)

The stages and where each runs:

| stage | runs on | buffers it fills |
|---|---|---|
| capture | the capture thread (edge_sdk.runtime.capture) | a fixed ring of frame buffers (`pool_size`) |
| preprocess | the capture thread, right after capture (`beside capture`), or the inference thread (`inline`) | one network input per frame buffer (PreparedInput), plus the prediction cache's thumbnail |
| infer | the inference thread: the one iterating the pipeline, or its own (`runs_ahead`) | the backend's bound output buffers (ahead: copied into one of two output sets) |
| decode / merge | the inference thread, after infer (ahead: the iterating thread) | the frame's Detections |
| track | the thread that decodes (the inference thread, or the iterating one ahead) | the tracks' states ([tracking]) |
| sinks | the caller's loop body | — |

Where each stage runs is the execution plan's (edge_sdk.runtime.plan: a pure function of the
detector's facts, the backend's Capabilities, the config and the cores; `plan()` gives it,
`describe()["plan"]` reports it, and the loops below are chosen from it). Preprocessing:
a CPU preprocessor runs beside capture whenever the detector takes a prepared input (mode
`full`), so inference never waits for it; `preprocess = "inline"` in the config keeps it on the
inference thread. A GPU preprocessor (edge_sdk.cuda) is enqueued on the inference stream
instead. The tiles and roi strategies preprocess their own crops as part of their pass.

With a CPU backend that leaves a core free and a full-frame detector whose input is prepared
beside capture, the infer stage gets a thread of its own (edge_sdk.runtime.infer_thread), one
frame ahead: the model runs back to back while the iterating thread decodes the previous frame
and runs the caller's loop body. A swap stops that thread between frames and starts a new one if the
new detector qualifies; a frame inferred ahead is run again by the new detector, so every
frame delivered after the swap is the new one's (one extra inference per swap). Leaving the
loop early drops the frame inferred ahead.

Back-pressure and drops are the capture ring's (edge_sdk.runtime.capture): a file is never
dropped from, a live source keeps the newest frame. With inference on the CPU (the backend's
`cpu_bound`) the capture thread runs in Linux's idle scheduling class, on cores inference
leaves idle. Nothing is allocated per frame in the steady state: frame buffers, network
inputs and thumbnails are allocated once per frame size (tests/runtime/test_alloc.py).
Everything is owned by the Pipeline instance: nothing global.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, Generator, Iterator, List, Optional, Tuple

from edge_sdk.errors import ConfigError
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.cache import PredictionCache
from edge_sdk.runtime.capture import Capture, FrameSlot
from edge_sdk.runtime.config import PipelineConfig
from edge_sdk.runtime.detectors.base import Detector, PreparedInput
from edge_sdk.runtime.detectors.factory import make_detector
from edge_sdk.runtime.infer_thread import InferThread, Item, Pending
from edge_sdk.runtime.model import Model, load_model
from edge_sdk.runtime.plan import DetectorFacts, ExecutionPlan, plan as plan_for
from edge_sdk.runtime.sources import Source, open_source
from edge_sdk.runtime.timing import LatencyWindow, clock
from edge_sdk.runtime.types import TRACK, FrameResult, PipelineStats
from edge_sdk.tracking.tracker import StreamTrackers

EventCallback = Callable[[Dict[str, Any]], None]


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class _Prepare:
    """The preprocess stage's buffers for one detector: per frame buffer (slot id) a network
    input and a thumbnail for the prediction cache, filled on the capture thread."""

    def __init__(self, detector: Detector, pool_size: int, cache: Optional[PredictionCache]) -> None:
        """`cache`: the prediction cache this detector's frames go through, None where it is off
        (the caller decides from the detector's mode: a swap builds this before it applies)."""
        spec = detector.prepared_spec
        self.spec = spec
        self.inputs: List[Optional[PreparedInput]] = [PreparedInput(spec) if spec is not None else None
                                                      for _ in range(pool_size)]
        self.cache = cache
        self.thumbs = [cache.thumbnail_buffers() for _ in range(pool_size)] if self.cache is not None else []
        self.stamps = [float("nan")] * pool_size  # t_capture of the frame each slot's input holds

    def __call__(self, slot: FrameSlot) -> None:
        i = slot.slot_id
        self.stamps[i] = float("nan")
        if self.cache is not None:
            small, gray = self.thumbs[i]
            self.cache.thumbnail(slot.frame, small, gray)
        prepared = self.inputs[i]
        if prepared is not None:
            prepared.fill(slot.frame)
        self.stamps[i] = slot.t_capture

    def take(self, slot: FrameSlot) -> Any:
        """(prepared input or None, thumbnail or None) for the frame now in `slot`."""
        i = slot.slot_id
        if self.stamps[i] != slot.t_capture:
            return None, None  # prepared for another detector, or not at all
        return self.inputs[i], (self.thumbs[i][1] if self.thumbs else None)


class Pipeline:
    """Frames in, FrameResults out. Iterate it; use it as a context manager.

    Anything not injected is built from `config`: the source from `config.source` (or its one
    [[sources]] table, whose id the results carry), the model
    from the bundle at `config.bundle` (backend, precision and threads from the config; the
    pipeline owns and closes it), the detector from `config.mode`. An injected `model` or
    `detector` stays its caller's to close.
    """

    def __init__(
        self,
        config: PipelineConfig,
        model: Optional[Model] = None,
        source: Optional[Source] = None,
        detector: Optional[Detector] = None,
        on_event: Optional[EventCallback] = None,
    ) -> None:
        self.config = config.validate().single_stream()
        self.stats = PipelineStats()
        self.latency = LatencyWindow()
        self.on_event = on_event
        self._model = model
        self._owns_model = False
        self._owns_detector = False
        self._source = source
        self._detector = detector
        self._capture: Optional[Capture] = None
        self._cache: Optional[PredictionCache] = None
        self._prepare: Optional[_Prepare] = None
        self._swap_lock = threading.Lock()
        self._pending: Optional[Detector] = None
        self._pending_prepare: Optional[Tuple[Optional[_Prepare]]] = None  # made by swap_detector when capture ran
        self._swapped: Optional[threading.Event] = None
        self._iterating = False
        self._closed = False
        self._prepare_failed = False
        self._infer_thread: Any = None  # the InferThread while one runs
        self._plan_cache: Optional[Tuple[Optional[Detector], ExecutionPlan]] = None
        self.tracking: Optional[StreamTrackers] = None  # made at open() when [tracking] is enabled
        self.failed_stage: Optional[str] = None  # the stage whose exception ended the iteration

    # -- assembly ------------------------------------------------------------------------------
    @property
    def bundle(self) -> Any:
        return self._model.bundle if self._model is not None else None

    def _load_model(self) -> Model:
        if self._model is None:
            cfg = self.config
            if not cfg.bundle:
                raise ConfigError("no bundle: set `bundle` in the config (or --bundle DIR); build one with `edge-sdk build`")
            self._model = load_model(cfg.bundle, backend=cfg.backend, precision=cfg.precision, threads=cfg.threads,
                                     warm_runs=1)
            self._owns_model = True
        return self._model

    def placement(self, detector: Optional[Detector] = None) -> str:
        """Where the preprocess stage runs for `detector`: "capture" (beside capture, on the
        capture thread), "inline" (on the inference thread), "stream" (a GPU preprocessor,
        enqueued on the inference stream) or "strategy" (the tiles and roi strategies
        preprocess their own crops)."""
        return self.plan(detector).preprocess

    def plan(self, detector: Optional[Detector] = None) -> ExecutionPlan:
        """The execution plan of `detector` (default: the current one), edge_sdk.runtime.plan.
        The current detector's is worked out once, while its backend is live, so that
        `describe()` after `close()` still says how the frames ran."""
        if detector is not None and detector is not self._detector:
            return self._plan_of(detector)
        if self._plan_cache is None or self._plan_cache[0] is not self._detector:
            self._plan_cache = (self._detector, self._plan_of(self._detector))
        return self._plan_cache[1]

    def _plan_of(self, detector: Optional[Detector]) -> ExecutionPlan:
        backend = detector.backend if detector is not None and detector.backend is not None else self.backend
        caps = backend.capabilities() if backend is not None else None
        facts = DetectorFacts.of(detector) if detector is not None else None
        return plan_for(facts, caps, self.config, available_cores())

    def open(self) -> "Pipeline":
        """Build what was not injected, open the source and start capturing. Idempotent."""
        if self._capture is not None:
            return self
        if self._closed:
            raise RuntimeError("this pipeline was closed; create a new one")
        try:
            cfg = self.config
            if self._detector is None:
                thresholds = {"score_threshold": cfg.score_threshold, "nms_iou": cfg.nms_iou}
                self._detector = make_detector(cfg.mode, self._load_model(), cfg.roi, thresholds)
                self._owns_detector = True
            if self._source is None:
                self._source = open_source(cfg.source.uri, loop=cfg.source.loop, **cfg.source.options)
            self._cache = PredictionCache(cfg.cache.threshold, (cfg.cache.width, cfg.cache.height), enabled=cfg.cache_enabled)
            self._prepare = self._make_prepare(self._detector)
            if cfg.tracking.enabled:
                fps = cfg.source.fps or self._source.fps
                self.tracking = StreamTrackers(cfg.tracking, {cfg.stream_ids()[0]: fps} if fps else None)
            from edge_sdk.cuda.frames import frame_memory
            from edge_sdk.runtime.detectors.gpu import measured_frame_memory

            # the backend's CUDA implementation when it has one, so that its kernels read the ring;
            # on a Jetson, the kind `edge-sdk engine` measured faster there
            backend = self.backend
            memory = frame_memory(cfg.frame_memory, cuda=backend.capabilities().cuda if backend is not None else None,
                                  measured=measured_frame_memory(backend))
            # With inference on the CPU, capture runs only on cores inference leaves idle (the plan).
            capture = Capture(self._source, cfg.pool_size, fps=cfg.source.fps, reconnect=cfg.reconnect, stats=self.stats,
                              nice=cfg.capture_nice, idle=self.plan().capture_idle, prepare=self._run_prepare,
                              memory=memory, stream_id=cfg.stream_ids()[0])
            capture.start()
            self._capture = capture
        except BaseException:
            self._release_model()
            raise
        return self

    def _make_prepare(self, detector: Detector) -> Optional[_Prepare]:
        if self.placement(detector) != "capture":
            return None
        # the cache runs for the mode this detector brings (RuntimeConfig.cache_enabled), not the
        # mode of the one it may be about to replace
        cached = self.config.cache.enabled and (detector.mode or self.config.mode) == "full"
        return _Prepare(detector, self.config.pool_size, self._cache if cached else None)

    def _run_prepare(self, slot: FrameSlot) -> None:
        prepare = self._prepare  # one read: a swap replaces the whole stage
        if prepare is not None:
            try:
                prepare(slot)
            except BaseException:
                self._prepare_failed = True  # surfaces through the capture thread's error
                raise

    @property
    def source(self) -> Optional[Source]:
        return self._source

    @property
    def model(self) -> Optional[Model]:
        return self._model

    @property
    def backend(self) -> Optional[Backend]:
        if self._detector is not None and self._detector.backend is not None:
            return self._detector.backend
        return self._model.backend if self._model is not None else None

    @property
    def detector(self) -> Optional[Detector]:
        return self._detector

    @property
    def capture(self) -> Optional[Capture]:
        return self._capture

    def describe(self) -> Dict[str, Any]:
        """The stages and where each runs, the model and the mode, for logs and summaries."""
        detector = self._detector
        execution = self.plan(detector)
        placement, why, ahead = execution.preprocess, execution.why, execution.ahead
        stages = [
            {"stage": "capture", "runs_on": "capture thread"},
            {"stage": "preprocess", "runs_on": {"capture": "capture thread", "inline": "inference thread",
                                                "stream": "inference stream (GPU)",
                                                "strategy": "inference thread (per crop, in the strategy)"}[placement],
             "why": why},
            {"stage": "infer", "runs_on": "inference thread"},
            {"stage": "decode/merge", "runs_on": "inference thread"},
            {"stage": "sinks", "runs_on": "caller"},
        ]
        if ahead:
            stages[2] = {"stage": "infer", "runs_on": "infer thread (its own, one frame ahead of decode)",
                         "why": execution.ahead_why}
            stages[3] = {"stage": "decode/merge", "runs_on": "consumer (the thread iterating the pipeline)"}
        out: Dict[str, Any] = {"mode": detector.mode if detector is not None else self.config.mode, "stages": stages,
                               "pool_size": self.config.pool_size, "plan": execution.to_dict()}
        if self._capture is not None:
            out["frame_memory"] = self._capture.memory.describe()
        if self._model is not None:
            out["model"] = self._model.describe()
        elif self.backend is not None:
            out["model"] = {"backend": str(self.backend.describe().get("backend"))}
        if detector is not None:
            out["thresholds"] = detector.thresholds
        return out

    def swap_detector(self, detector: Detector) -> threading.Event:
        """Replace the detector between two frames (hot reload, `set mode`). The returned Event
        is set once the new detector is in use; the prediction cache is cleared at the same
        moment. The caller owns the old detector (and its model) from then on. The new detector's
        preprocess buffers are made here, on the caller's thread: when that fails, the error is
        raised to the caller and nothing is swapped."""
        done = threading.Event()
        prepare = self._make_prepare(detector) if self._capture is not None else None
        with self._swap_lock:
            self._pending = detector
            self._pending_prepare = (prepare,) if self._capture is not None else None
            self._swapped = done
        if not self._iterating:
            self._apply_swap()
        return done

    def _apply_swap(self) -> None:
        with self._swap_lock:
            pending, done, prepared = self._pending, self._swapped, self._pending_prepare
            self._pending = self._swapped = self._pending_prepare = None
        if pending is None:
            return
        self._detector = pending
        self._owns_detector = False  # the old one is the swapper's now, and so is the new one
        self.config.mode = pending.mode or self.config.mode
        if self._cache is not None:
            self._cache.clear()
            self._cache.enabled = self.config.cache_enabled
        if self._capture is not None:
            # buffers for the new detector's input (allocated once per swap, not per frame)
            self._prepare = prepared[0] if prepared is not None else self._make_prepare(pending)
        if done is not None:
            done.set()

    # -- the loop ------------------------------------------------------------------------------
    def runs_ahead(self, detector: Optional[Detector] = None) -> bool:
        """Whether the infer stage runs on a thread of its own, one frame ahead of decode
        (edge_sdk.runtime.infer_thread): a full-frame detector on a CPU backend that leaves a
        core free, whose frames are preprocessed beside capture."""
        return self.plan(detector).ahead

    def __iter__(self) -> Iterator[FrameResult]:
        self.open()
        self._iterating = True
        try:
            # each part returns True when a swapped-in detector runs in the other arrangement
            while (yield from (self._iter_ahead() if self.runs_ahead() else self._iter_inline())):
                pass
        finally:
            self._iterating = False

    def _iter_inline(self) -> Generator[FrameResult, None, bool]:
        """Every stage after capture (and preprocessing, when not beside capture) on this thread."""
        capture = self._capture
        assert capture is not None
        limit = self.config.max_frames
        slot: Optional[FrameSlot] = None
        try:
            while not limit or self.stats.frames_processed < limit:
                t_wait = clock()
                try:
                    slot = capture.get()
                except BaseException:
                    self.failed_stage = "preprocess" if self._prepare_failed else "capture"
                    raise
                if slot is None:
                    return False
                latency: Dict[str, float] = {"capture_wait": (clock() - t_wait) * 1000.0}
                switch = False
                if self._pending is not None:
                    self._apply_swap()
                    switch = self.runs_ahead()
                yield self._process(slot, latency)
                capture.release(slot)
                slot = None
                if switch:
                    return True
            return False
        finally:
            if slot is not None:
                capture.release(slot)

    def _iter_ahead(self) -> Generator[FrameResult, None, bool]:
        """Inference on its own thread (InferThread), decode and the caller's loop body here."""
        capture, cache = self._capture, self._cache
        assert capture is not None and cache is not None
        limit = self.config.max_frames
        worker = InferThread(capture, self._detector, self._prepare, cache, lambda: self._prepare_failed)
        self._infer_thread = worker.start()
        backlog: List[Item] = []
        stopping = False
        item: Optional[Item] = None
        try:
            while not limit or self.stats.frames_processed < limit:
                if not stopping and self._pending is not None:
                    # the frames the thread took and did not deliver yet are run again by the
                    # swapped-in detector: every frame delivered after the swap is its
                    backlog, stopping = worker.stop(), True
                    self._apply_swap()
                    for held in backlog:
                        held.raw = held.error is None and not held.end and held.slot is not None
                if stopping:
                    if not backlog:
                        return True
                    item = backlog.pop(0)
                else:
                    item = worker.next()
                    if item is None:
                        return False
                if item.error is not None:
                    self.failed_stage = item.stage
                    raise item.error
                if item.end:
                    return False
                slot = item.slot
                assert slot is not None
                if item.raw:  # taken before the swap was applied: the swapped-in detector runs it, here
                    yield self._process(slot, {"capture_wait": item.latency.get("capture_wait", 0.0)})
                else:
                    info = self._events(slot)
                    if item.cached is not None:
                        value = item.cached
                        detections = value.detections if isinstance(value, Pending) else value
                        self.stats.cache_hits += 1
                    else:
                        try:
                            detections = item.detector.decode_stage(item.outputs, item.transform, item.latency)
                        except BaseException:
                            self.failed_stage = "decode"
                            raise
                        if item.pending is not None:
                            item.pending.detections = detections
                    yield self._result(slot, detections, item.latency, info, item.cached is not None)
                capture.release(slot)
                item.slot = None
                if not stopping:
                    worker.recycle(item)
                item = None
            return False
        finally:
            self._infer_thread = None
            for held in [item] + backlog + worker.stop():
                if held is not None and held.slot is not None:
                    capture.release(held.slot)
                    held.slot = None

    def _events(self, slot: FrameSlot) -> Dict[str, Any]:
        """FrameResult.info with the frame's events (camera lost, size changed), reported."""
        info: Dict[str, Any] = {}
        if slot.events:
            info["events"] = slot.events
            if self.on_event is not None:
                for event in slot.events:
                    self.on_event(event)
        return info

    def _process(self, slot: FrameSlot, latency: Dict[str, float]) -> FrameResult:
        """Cache lookup, detection and the FrameResult of one frame, on this thread."""
        capture, cache = self._capture, self._cache
        assert capture is not None and cache is not None
        info = self._events(slot)
        frame = slot.view
        prepare = self._prepare
        frame.prepared, thumbnail = prepare.take(slot) if prepare is not None else (None, None)
        detections = cache.lookup(frame.image, thumbnail)
        cached = detections is not None
        if detections is None:
            detector = self._detector
            assert detector is not None
            try:
                stream = self.plan().upload_stream
                if stream is not None:
                    # mapped memory: its own device address; pinned: the copy, queued on the stream
                    capture.upload(slot, stream)
                # the stream's tracker, for a detector that follows it (mode roi: one tracker per stream)
                frame.tracker = self.tracking.tracker(frame.stream_id) if self.tracking is not None else None
                found = detector.detect(frame)
            except BaseException:
                self.failed_stage = detector.stage
                raise
            finally:
                frame.tracker = None
            latency.update(found.latency)
            info.update(found.info)
            detections = found.detections
            cache.store(detections)
        else:
            self.stats.cache_hits += 1
        return self._result(slot, detections, latency, info, cached)

    def _result(self, slot: FrameSlot, detections: Any, latency: Dict[str, float], info: Dict[str, Any],
                cached: bool) -> FrameResult:
        if self.tracking is not None:
            t_track = clock()
            detections = self.tracking.apply(slot.view.stream_id, detections)
            latency[TRACK] = latency.get(TRACK, 0.0) + (clock() - t_track) * 1000.0  # mode roi: the detector's too
        t_done = clock()
        latency["total"] = (t_done - slot.t_capture) * 1000.0
        self.stats.frames_processed += 1
        self.latency.record(latency, t_done)
        return FrameResult(
            index=slot.index,
            timestamp=slot.timestamp,
            detections=detections,
            latency_ms=latency,
            frame=slot.frame,
            cached=cached,
            info=info,
            ground_truth=slot.ground_truth,
            captured=slot.view,
        )

    def run(self, callback: Optional[Callable[[FrameResult], None]] = None) -> PipelineStats:
        """Process the whole stream (or `max_frames`), calling `callback` per result."""
        with self:
            for result in self:
                if callback is not None:
                    callback(result)
        return self.stats

    # -- lifetime ------------------------------------------------------------------------------
    def _release_model(self) -> None:
        try:
            if self._owns_detector and self._detector is not None:
                self._detector.close()  # its GPU buffers live on the model's stream: first
        finally:
            self._owns_detector = False
            if self._owns_model and self._model is not None:
                self._model.close()
            self._owns_model = False

    def close(self) -> None:
        """Stop capturing, close the source and close the model this pipeline loaded."""
        if self._closed:
            return
        self._closed = True
        try:
            worker = self._infer_thread
            if worker is not None:
                worker.stop()  # an iterator left open ends at its next step
            if self._capture is not None:
                self._capture.stop()
            elif self._source is not None:
                self._source.close()
        finally:
            self._release_model()

    def __enter__(self) -> "Pipeline":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()
