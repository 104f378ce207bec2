"""The frame pipeline: source → preprocess → backend → decode → merge, one FrameResult per frame.

    config = PipelineConfig(source=SourceConfig("clip.mp4"), bundle="bundle")
    with Pipeline(config) as pipeline:
        for result in pipeline:
            print(result.index, len(result.detections), result.latency_ms["total"])
        print(pipeline.stats)

The capture thread (edge_sdk.runtime.capture) reads frames (from files, a few ahead) into a
fixed pool of buffers while the consumer runs the per-frame *detector*, so decoding video overlaps
inference (ONNX Runtime and OpenCV release the GIL). When inference runs on the CPU (the
backend's `cpu_bound`), the capture thread is put in Linux's idle scheduling class: it decodes
on cores the inference threads leave idle and never delays them (with `capture_nice` 0 it
stays at the consumer's priority). The detector is a swappable strategy:
`FullFrameDetector` runs the whole frame through the network once; tiled or ROI strategies
plug in through `Pipeline(detector=...)` with the same `detect(frame, latency, info)` method.
Everything is owned by the Pipeline instance: nothing global.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec, Preprocessor
from edge_sdk.runtime.backends import Backend, select_backend
from edge_sdk.runtime.cache import PredictionCache
from edge_sdk.runtime.capture import Capture, FrameSlot
from edge_sdk.runtime.config import PipelineConfig
from edge_sdk.runtime.sources import Source, open_source
from edge_sdk.runtime.timing import LatencyWindow, clock
from edge_sdk.runtime.types import FrameResult, PipelineStats

EventCallback = Callable[[Dict[str, Any]], None]


class Detector:
    """A per-frame detection strategy: BGR frame → Detections in frame pixels.

    `detect` adds its stage latencies (ms) to `latency` (keys from
    edge_sdk.runtime.types.STAGES: preprocess, infer, decode, merge) and may add a report to
    `info` (it ends up in FrameResult.info).
    """

    def detect(self, frame: np.ndarray, latency: Dict[str, float], info: Dict[str, Any]) -> Detections:
        raise NotImplementedError


class FullFrameDetector(Detector):
    """The whole frame, letterboxed into the network input, one inference, decode, no merge.

    The preprocessor's tensor is created once and fed to the backend on every frame, so the
    backend binds it once and the steady state allocates no frame-sized array.
    """

    def __init__(self, backend: Backend, decoder: Callable[..., List[Detections]], input_spec: InputSpec) -> None:
        self.backend = backend
        self.decoder = decoder
        self.input_spec = input_spec
        self.preprocessor = Preprocessor(input_spec)
        self.input_name = input_spec.name
        self._feed: Dict[str, np.ndarray] = {}

    def detect(self, frame: np.ndarray, latency: Dict[str, float], info: Dict[str, Any]) -> Detections:
        t0 = clock()
        transform = self.preprocessor.fill(frame, 0)
        t1 = clock()
        feed = self._feed
        if not feed:
            names = self.backend.input_names
            if names and self.input_name not in names:
                raise ConfigError(
                    f"the bundle's input {self.input_name!r} is not an input of the model (its inputs: {names}); rebuild the bundle"
                )
            feed[self.input_name] = self.preprocessor.tensor
        outputs = self.backend.infer(feed)
        t2 = clock()
        detections = self.decoder(outputs, [transform] * len(self.preprocessor.tensor))[0]
        t3 = clock()
        # A single full-frame pass has nothing to merge; the stage is kept so every strategy
        # reports the same stages.
        t4 = clock()
        latency["preprocess"] = (t1 - t0) * 1000.0
        latency["infer"] = (t2 - t1) * 1000.0
        latency["decode"] = (t3 - t2) * 1000.0
        latency["merge"] = (t4 - t3) * 1000.0
        return detections


def make_detector(mode: str, backend: Backend, decoder_spec: Dict[str, Any], input_spec: InputSpec, roi: Any = None) -> Detector:
    """The per-frame detector for `mode` ("full", "tiles" or "roi") over an active backend.

    One factory for the pipeline, hot reload and the daemon's `set mode` command. `roi` is the
    RoiConfig of the tiles and roi modes (defaults when None).
    """
    if mode == "full":
        from edge_sdk.decoders import make_decoder

        return FullFrameDetector(backend, make_decoder(decoder_spec, input_spec), input_spec)
    from edge_sdk.roi.runtime import strategy_detector  # imports this module: loaded on demand

    return strategy_detector(mode, backend, decoder_spec, input_spec, roi)


class Pipeline:
    """Frames in, FrameResults out. Iterate it; use it as a context manager.

    Anything not injected is built from `config`: the source from `config.source`, the backend
    and decoder from the bundle at `config.bundle` (precision and backend choice from the
    config), the detector from `config.mode`.
    """

    def __init__(
        self,
        config: PipelineConfig,
        backend: Optional[Backend] = None,
        source: Optional[Source] = None,
        decoder: Optional[Callable[..., List[Detections]]] = None,
        detector: Optional[Detector] = None,
        input_spec: Optional[InputSpec] = None,
        on_event: Optional[EventCallback] = None,
    ) -> None:
        self.config = config.validate()
        self.stats = PipelineStats()
        self.latency = LatencyWindow()
        self.on_event = on_event
        self.bundle: Any = None
        self._backend = backend
        self._source = source
        self._decoder = decoder
        self._detector = detector
        self._input_spec = input_spec
        self._owned_backends: List[Backend] = []
        self._capture: Optional[Capture] = None
        self._cache: Optional[PredictionCache] = None
        self._swap_lock = threading.Lock()
        self._pending: Optional[Detector] = None
        self._swapped: Optional[threading.Event] = None
        self._iterating = False
        self._closed = False

    # -- assembly ------------------------------------------------------------------------------
    def _load_bundle(self) -> Any:
        if self.bundle is None:
            if not self.config.bundle:
                raise ConfigError("no bundle: set `bundle` in the config (or --bundle DIR); build one with `edge-sdk build`")
            from edge_sdk.manifest import Bundle

            self.bundle = Bundle.load(self.config.bundle)
        return self.bundle

    def _build_detector(self) -> Detector:
        cfg = self.config
        input_spec = self._input_spec
        if input_spec is None:
            inputs = self._load_bundle().inputs
            if not inputs:
                raise ConfigError(f"bundle {self.config.bundle} lists no inputs in its manifest; rebuild it")
            input_spec = inputs[0]
        backend = self._backend
        if backend is None:
            bundle = self._load_bundle()
            backend = select_backend(cfg.backend, bundle=bundle, precision=cfg.precision, threads=cfg.threads)
        if not backend.is_active:
            backend.activate()
            self._owned_backends.append(backend)
        self._backend = backend
        if cfg.mode == "full" and self._decoder is not None:
            return FullFrameDetector(backend, self._decoder, input_spec)
        return make_detector(cfg.mode, backend, self._load_bundle().decoder, input_spec, cfg.roi)

    def open(self) -> "Pipeline":
        """Build what was not injected, open the source and start capturing. Idempotent."""
        if self._capture is not None:
            return self
        if self._closed:
            raise RuntimeError("this pipeline was closed; create a new one")
        try:
            if self._detector is None:
                self._detector = self._build_detector()
            cfg = self.config
            if self._source is None:
                self._source = open_source(cfg.source.uri, loop=cfg.source.loop, **cfg.source.options)
            self._cache = PredictionCache(cfg.cache.threshold, (cfg.cache.width, cfg.cache.height), enabled=cfg.cache_enabled)
            # With inference on the CPU, capture runs only on cores inference leaves idle.
            idle = cfg.capture_nice > 0 and bool(getattr(self._backend, "cpu_bound", False))
            capture = Capture(self._source, cfg.pool_size, fps=cfg.source.fps, reconnect=cfg.reconnect, stats=self.stats,
                              nice=cfg.capture_nice, idle=idle)
            capture.start()
            self._capture = capture
        except BaseException:
            self._release_backends()
            raise
        return self

    @property
    def source(self) -> Optional[Source]:
        return self._source

    @property
    def backend(self) -> Optional[Backend]:
        return self._backend

    @property
    def detector(self) -> Optional[Detector]:
        return self._detector

    @property
    def capture(self) -> Optional[Capture]:
        return self._capture

    def swap_detector(self, detector: Detector) -> threading.Event:
        """Replace the detector between two frames (hot reload). The returned Event is set once
        the new detector is in use; the prediction cache is cleared at the same moment. The
        caller owns the old detector (and its backend) from then on."""
        done = threading.Event()
        with self._swap_lock:
            self._pending = detector
            self._swapped = done
        if not self._iterating:
            self._apply_swap()
        return done

    def _apply_swap(self) -> None:
        with self._swap_lock:
            pending, done = self._pending, self._swapped
            self._pending = self._swapped = None
        if pending is None:
            return
        self._detector = pending
        if self._cache is not None:
            self._cache.clear()
            self._cache.enabled = self.config.cache_enabled
        if done is not None:
            done.set()

    # -- the loop ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[FrameResult]:
        self.open()
        capture = self._capture
        cache = self._cache
        assert capture is not None and cache is not None
        limit = self.config.max_frames
        slot: Optional[FrameSlot] = None
        self._iterating = True
        try:
            while not limit or self.stats.frames_processed < limit:
                t_wait = clock()
                slot = capture.get()
                if slot is None:
                    return
                latency: Dict[str, float] = {"capture_wait": (clock() - t_wait) * 1000.0}
                if self._pending is not None:
                    self._apply_swap()
                info: Dict[str, Any] = {}
                if slot.events:
                    info["events"] = slot.events
                    if self.on_event is not None:
                        for event in slot.events:
                            self.on_event(event)
                frame = slot.frame
                detections = cache.lookup(frame)
                cached = detections is not None
                if detections is None:
                    assert self._detector is not None
                    detections = self._detector.detect(frame, latency, info)
                    cache.store(detections)
                else:
                    self.stats.cache_hits += 1
                t_done = clock()
                latency["total"] = (t_done - slot.t_capture) * 1000.0
                self.stats.frames_processed += 1
                self.latency.record(latency, t_done)
                result = FrameResult(
                    index=slot.index,
                    timestamp=slot.timestamp,
                    detections=detections,
                    latency_ms=latency,
                    frame=frame,
                    cached=cached,
                    info=info,
                    ground_truth=slot.ground_truth,
                )
                yield result
                capture.release(slot)
                slot = None
        finally:
            self._iterating = False
            if slot is not None:
                capture.release(slot)

    def run(self, callback: Optional[Callable[[FrameResult], None]] = None) -> PipelineStats:
        """Process the whole stream (or `max_frames`), calling `callback` per result."""
        with self:
            for result in self:
                if callback is not None:
                    callback(result)
        return self.stats

    # -- lifetime ------------------------------------------------------------------------------
    def _release_backends(self) -> None:
        while self._owned_backends:
            backend = self._owned_backends.pop()
            if backend.is_active:
                backend.deactivate()

    def close(self) -> None:
        """Stop capturing, close the source and deactivate backends this pipeline activated."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._capture is not None:
                self._capture.stop()
            elif self._source is not None:
                self._source.close()
        finally:
            self._release_backends()

    def __enter__(self) -> "Pipeline":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()
