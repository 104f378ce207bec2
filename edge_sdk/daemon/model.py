"""The one owner of the model the daemon runs: the loaded model, its mode, its thresholds and
the detector built from them.

    running = RunningModel(config.pipeline)
    model, detector = running.open(config.pipeline.bundle)    # loaded, warmed, detector built
    pipeline = Pipeline(config.pipeline, model=model, detector=detector)
    running.attach(pipeline)
    running.set_thresholds(score_threshold=0.6)   # commands, between two frames
    running.set_mode("roi")                       # a new detector over the same model
    running.serve_streams(streams, batching)      # several [[sources]]: a detector per stream, one model
    running.set_mode("tiles", stream="door")      # that stream only, from the next batch
    running.swap(new_model)                       # hot reload: a new model in the running mode
    running.retire_unused()                       # every frame: close replaced models once unused
    running.swap(candidate, keep=True)            # promotion: the replaced model stays loaded (`kept`)
    running.swap(running.take_kept())             # rollback to it; or running.release_kept() to retire it
    running.split(candidate, ["door"])            # A/B: door on the candidate (arm B), the rest on the model (A)
    running.end_split(promote=True)               # every stream on the candidate (A's model retired); False: on A's
    running.describe()                            # status, telemetry's model block, responses
    running.close()                               # after the pipeline stopped

Nothing else holds the model: the pipeline is given it (an injected model stays its caller's)
and the daemon asks this object. Every change runs on the frame loop between two frames
(commands and reloads are served there) and goes to the pipeline through
`Pipeline.swap_detector`. A model replaced by a reload is closed on a worker thread once the
pipeline runs the latest detector (the Event of the last swap_detector is set; `retire_unused`,
called by the frame loop), never while a frame may still use it — also when a later change
replaced the new detector before the pipeline took it (that swap's own Event is never set).

Thresholds across a mode switch and a reload: the values set explicitly — by the config's
top-level `score_threshold` / `nms_iou` or by a `set` command — are kept; those never set
follow the running bundle's decoder. So after `set score_threshold 0.6` a reload to any
bundle still filters at 0.6, while its own `nms_iou` applies unless one was set. The mode is
kept too: a reload builds the new model's detector in the running mode.

Several streams (`serve_streams`): each has its own mode, ROI settings and thresholds set
explicitly (the config's, then `set` commands with its `stream`; a `set` without one changes
every stream's, and the top-level mode and thresholds). One StreamsDetector
(edge_sdk.runtime.detectors.shared) serves them over the one model, its batches fitted to what
the bundle takes; a stream's change replaces that stream's detector at the next batch (the
others keep their state), a reload builds every stream's afresh over the new model.

An A/B test (`split`) runs a candidate model beside the live one: the streams of arm B on the
candidate, those of arm A on the live model, each model batching its own streams
(make_arms_detector), from the next batch on. Mode and threshold changes keep the arms; a
reload is refused until `end_split` puts every stream on one model again, at a batch boundary.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from edge_sdk.daemon.enginebuild import EngineBuild
from edge_sdk.daemon.shadow import build_workspace_mib
from edge_sdk.errors import ConfigError
from edge_sdk.runtime.config import BatchingConfig, PipelineConfig, StreamConfig
from edge_sdk.runtime.detectors.base import THRESHOLDS, Detector, check_threshold
from edge_sdk.runtime.detectors.factory import make_detector
from edge_sdk.runtime.detectors.shared import (StreamSetup, build_stream_detector, make_arms_detector,
                                               make_stream_detector)
from edge_sdk.runtime.model import Model, load_model
from edge_sdk.runtime.streams import fitted_policy

log = logging.getLogger(__name__)

WARM_RUNS = 2  # warm-up inferences of a model before it is swapped in (the first real frame pays nothing)


class RunningModel:
    """The model, mode, thresholds and detector the daemon runs; see the module docstring."""

    def __init__(self, config: PipelineConfig) -> None:
        self.backend_name = config.backend
        self.precision = config.precision  # asked for; describe() says which variant runs
        self.threads = config.threads
        self.roi = config.roi
        self.mode = config.mode
        # several streams: each one's mode, ROI settings and explicit thresholds, and the batching
        # the one detector over them is fitted to; None: one stream
        self.streams: Optional[Dict[str, StreamSetup]] = None
        self.batching: Optional[BatchingConfig] = None
        # the thresholds set explicitly (config or command): kept across mode switches and reloads
        self.overrides: Dict[str, float] = {key: float(getattr(config, key)) for key in THRESHOLDS
                                            if getattr(config, key) is not None}
        self.model: Optional[Model] = None
        self.detector: Optional[Detector] = None
        self.pipeline: Any = None  # the Pipeline that runs the detector (swap_detector)
        self.reloads = 0  # models swapped in by a reload
        self.reload_failures = 0  # reloads refused: the load or the swap failed
        self._lock = threading.Lock()  # describe() on the reporter's thread against a swap
        self._installed: Optional[threading.Event] = None  # set once the pipeline runs the latest detector
        self.retiring: List[Model] = []  # replaced by a reload, maybe still in use: not yet closed
        self.retiring_detectors: List[Detector] = []  # replaced detectors (a GPU one holds buffers): closed first
        self._retirers: List[threading.Thread] = []
        self.kept: Optional[Model] = None  # replaced by a promotion, kept loaded for a rollback
        self.candidate: Optional[Model] = None  # an A/B test's arm B model, beside `model` (arm A)
        self.arm_b: List[str] = []  # the streams the candidate serves
        self.engine_build = EngineBuild()  # a reload's TensorRT engine build, for the status
        # kept free for the live model when a reload builds an engine beside it ([shadow] memory_margin_mb)
        self.memory_margin_mb = 256.0

    # -- loading -------------------------------------------------------------------------------
    def _load(self, bundle: Union[str, Path], precision: Optional[str] = None,
              progress: Optional[Callable[[str], None]] = None,
              workspace_limit: Optional[Callable[[], Optional[int]]] = None) -> Model:
        return load_model(bundle, backend=self.backend_name, precision=precision or self.precision,
                          threads=self.threads, verify=True, warm_runs=WARM_RUNS, progress=progress,
                          workspace_limit=workspace_limit)

    def open(self, bundle: Union[str, Path]) -> Tuple[Model, Detector]:
        """Load the bundle the daemon starts with and build its detector (mode and thresholds
        from the config). BundleError, ConfigError or BackendError leave nothing loaded."""
        model = self._load(bundle)
        try:
            detector = self._build(self.mode, model, self.overrides)
        except BaseException:
            model.close()
            raise
        with self._lock:
            self.model, self.detector = model, detector
        return model, detector

    def serve_streams(self, streams: Sequence[StreamConfig], batching: BatchingConfig) -> None:
        """Several sources (before `open`): `streams` each with its mode and ROI settings resolved
        (PipelineConfig.batched_streams), the config's thresholds for each, batched by `batching`."""
        self.streams = {s.id: StreamSetup(s.id, s.mode or self.mode, s.roi or self.roi, dict(self.overrides))
                        for s in streams}
        self.batching = batching

    def _build(self, mode: str, model: Model, thresholds: Dict[str, float]) -> Detector:
        """The detector of `model` in `mode` with `thresholds`; with several streams, the one over
        every stream's own setup (see serve_streams; `mode` and `thresholds` are in it)."""
        if self.streams is None:
            return make_detector(mode, model, self.roi, thresholds)
        assert self.batching is not None
        if self.candidate is not None:
            arms = {"a": (model, [s for sid, s in self.streams.items() if sid not in self.arm_b]),
                    "b": (self.candidate, [self.streams[sid] for sid in self.arm_b])}
            sizes = {arm: fitted_policy(self.batching, m, len(setups))[0].max_batch_size
                     for arm, (m, setups) in arms.items()}
            return make_arms_detector(arms, sizes)  # type: ignore[return-value]
        policy, _ = fitted_policy(self.batching, model, len(self.streams))
        return make_stream_detector(model, list(self.streams.values()), policy.max_batch_size)  # type: ignore[return-value]

    def _every_stream(self, mode: Optional[str], thresholds: Dict[str, float]) -> Dict[str, StreamSetup]:
        """The streams' setups with `mode` (None: each its own) and `thresholds` laid over theirs."""
        assert self.streams is not None
        return {sid: StreamSetup(sid, mode or s.mode, s.roi, dict(s.thresholds, **thresholds))
                for sid, s in self.streams.items()}

    def stream_settings(self, stream: str) -> Dict[str, Any]:
        """`stream`'s mode and thresholds in force (one stream: the model's)."""
        with self._lock:
            detector = self.detector
        if self.streams is None or stream not in self.streams:
            return {"mode": self.mode, "thresholds": dict(detector.thresholds) if detector else dict(self.overrides)}
        setup = self.streams[stream]
        in_force = getattr(detector, "thresholds_of", None)
        thresholds = in_force().get(stream, {}) if in_force is not None else {}
        return {"mode": setup.mode, "thresholds": dict(thresholds, **setup.thresholds)}

    def mode_of(self, stream: Optional[str]) -> str:
        """The mode `stream` runs (None, or one stream: the top-level mode)."""
        if stream is None or self.streams is None or stream not in self.streams:
            return self.mode
        return self.streams[stream].mode

    def attach(self, pipeline: Any) -> None:
        """The pipeline that runs `detector` (built with `Pipeline(config, model=..., detector=...)`)."""
        self.pipeline = pipeline

    def load(self, bundle: Union[str, Path], precision: Optional[str] = None) -> Model:
        """Hot reload's loader (HotReloader's worker thread): the bundle loaded and warmed beside
        the running model, not yet in use. A TensorRT engine build's steps go to `engine_build`
        (the status's block, null again once the load ends); such a build's workspace is bounded
        by the memory free beside the live model (edge_sdk.daemon.shadow.build_workspace_mib: a
        BackendError with the figures when it cannot fit). A failure counts in `reload_failures`
        and raises."""
        margin = self.memory_margin_mb
        try:
            return self._load(bundle, precision, progress=self.engine_build.progress(Path(bundle).name),
                              workspace_limit=lambda: build_workspace_mib(Path(bundle), margin))
        except Exception:
            self.reload_failures += 1
            raise
        finally:
            self.engine_build.end()

    def detector_for(self, model: Model) -> Detector:
        """A detector of `model` (not the running one: a shadow's) in the running mode with the
        kept thresholds; ConfigError when it does not fit the mode."""
        return self._build(self.mode, model, self.overrides)

    # -- changes (frame loop) ------------------------------------------------------------------
    def swap(self, new: Model, keep: bool = False) -> threading.Event:
        """Run `new` from the next frame on, in the running mode with the kept thresholds; the
        returned Event is set once the pipeline uses the new detector, and the replaced model is
        closed by `retire_unused` after that. If no detector can be built for `new` (it does not
        fit the mode, or the pipeline cannot make its buffers), `new` is closed, the old model and
        detector keep running, and the error is raised, whatever its type. With `keep`, the
        replaced model stays loaded as `kept` (one at a time: a model kept before is retired)."""
        try:
            if self.candidate is not None:
                raise ConfigError("an A/B test runs: promote or abort it before a reload")
            detector = self._build(self.mode, new, self.overrides)
            done = self._install(detector)
        except BaseException:
            self.reload_failures += 1
            new.close()
            raise
        with self._lock:
            old, self.model = self.model, new
        self.reloads += 1
        if keep:
            self.release_kept()
            old, self.kept = None, old
        if old is not None:
            self.retiring.append(old)
        return done

    def split(self, candidate: Model, arm_b: Sequence[str]) -> threading.Event:
        """A/B test (several streams): the streams `arm_b` run on `candidate` from the next batch
        on, the others stay on the running model; the Event is set once the pipeline runs both.
        ConfigError for streams this daemon does not run, or none left on the running model;
        when no detector can be built, `candidate` is closed and the error raised, nothing changed."""
        try:
            if self.streams is None:
                raise ConfigError("an A/B test needs several [[sources]]: one stream cannot be split")
            if self.candidate is not None:
                raise ConfigError("an A/B test runs already: promote or abort it first")
            unknown = [sid for sid in arm_b if sid not in self.streams]
            if unknown:
                raise ConfigError(f"unknown streams {unknown}; the streams are {', '.join(self.streams)}")
            if not arm_b or set(arm_b) >= set(self.streams):
                raise ConfigError("arm B must take some streams and leave arm A at least one")
            assert self.model is not None
            self.candidate, self.arm_b = candidate, list(arm_b)
            try:
                return self._install(self._build(self.mode, self.model, self.overrides))
            except BaseException:
                self.candidate, self.arm_b = None, []
                raise
        except BaseException:
            self.reload_failures += 1
            candidate.close()
            raise

    def end_split(self, promote: bool) -> threading.Event:
        """End the A/B test from the next batch on: with `promote` every stream runs the
        candidate (the model of arm A retired), else every stream runs arm A's model (the
        candidate retired). When no detector can be built the test runs on and the error is raised."""
        candidate, arm_b = self.candidate, self.arm_b
        if candidate is None:
            raise ConfigError("no A/B test runs: nothing to promote or abort")
        assert self.model is not None
        survivor, retired = (candidate, self.model) if promote else (self.model, candidate)
        self.candidate, self.arm_b = None, []
        try:
            done = self._install(self._build(self.mode, survivor, self.overrides))
        except BaseException:
            self.candidate, self.arm_b = candidate, arm_b
            raise
        with self._lock:
            self.model = survivor
        self.retiring.append(retired)
        if promote:
            self.reloads += 1
        return done

    def take_kept(self) -> Model:
        """The model a promotion kept (to swap back in); ConfigError when there is none."""
        if self.kept is None:
            raise ConfigError("no previous model is kept: nothing to roll back to")
        kept, self.kept = self.kept, None
        return kept

    def release_kept(self) -> None:
        """Retire the kept model (closed by `retire_unused` like any replaced one)."""
        if self.kept is not None:
            self.retiring.append(self.kept)
            self.kept = None

    def set_thresholds(self, stream: Optional[str] = None, **changes: Any) -> Dict[str, float]:
        """Change `score_threshold` and/or `nms_iou` of the running detector, from the next frame,
        in every mode: of `stream` only with several streams, else of every stream. Every value is
        checked before any is applied: ConfigError and nothing changed otherwise. Returns the
        values now in force for the keys given."""
        detector = self._require_detector()
        if self.streams is None:
            in_force = detector.set_thresholds(**changes)
        else:
            in_force = detector.set_thresholds(stream=stream, **changes)  # type: ignore[call-arg]
        applied = {key: float(in_force[key]) for key in changes}
        if self.streams is not None:
            for sid in ([stream] if stream is not None else list(self.streams)):
                self.streams[sid].thresholds.update(applied)
        if stream is None or self.streams is None:
            self.overrides.update(applied)
        return applied

    def set_mode(self, mode: str, stream: Optional[str] = None, **thresholds: Any) -> Dict[str, Any]:
        """Switch to `mode` ("full", "tiles", "roi") over the same model, from the next frame,
        with the kept thresholds and `thresholds` (changed at the same moment): of `stream` only
        with several streams, else of every stream. Everything is checked first: ConfigError and
        nothing changed otherwise. Returns the mode and the thresholds now in force for the keys
        given."""
        self._require_detector()
        assert self.model is not None
        for key in thresholds:
            if key not in THRESHOLDS:
                raise ConfigError(f"unknown threshold {key!r}; known: {', '.join(THRESHOLDS)}")
        if self.streams is not None and stream is not None:
            return self._set_stream_mode(stream, mode, thresholds)
        wanted = dict(self.overrides)
        wanted.update(thresholds)
        if self.streams is not None:
            checked = {key: check_threshold(key, value) for key, value in thresholds.items()}
            previous, self.streams = self.streams, self._every_stream(mode, checked)
            try:
                detector = self._build(mode, self.model, wanted)
            except BaseException:
                self.streams = previous
                raise
            self._install(detector)
            self.mode = mode
            self.overrides.update(checked)
            return dict({"mode": mode}, **{key: self.overrides[key] for key in thresholds})
        detector = self._build(mode, self.model, wanted)  # checks the mode and every value
        in_force = detector.thresholds
        self._install(detector)
        self.mode = mode
        self.overrides = {key: float(in_force.get(key, wanted[key])) for key in wanted}
        return dict({"mode": mode}, **{key: self.overrides[key] for key in thresholds})

    def _set_stream_mode(self, stream: str, mode: str, thresholds: Dict[str, Any]) -> Dict[str, Any]:
        """One stream of several in `mode`: its detector replaced at the next batch, the others
        run on with their state."""
        assert self.streams is not None and self.model is not None
        running = self.detector
        if stream not in self.streams:
            raise ConfigError(f"unknown stream {stream!r}; the streams are {', '.join(self.streams)}")
        old = self.streams[stream]
        setup = StreamSetup(stream, mode, old.roi, dict(old.thresholds, **thresholds))
        model = self.candidate if stream in self.arm_b else self.model
        detector = build_stream_detector(running.shared_of(stream), model, setup)  # type: ignore[union-attr]
        running.replace(stream, detector)  # type: ignore[union-attr]
        self.streams[stream] = StreamSetup(stream, mode, old.roi, {k: float(v) for k, v in setup.thresholds.items()})
        in_force = detector.thresholds
        return dict({"mode": mode}, **{key: float(in_force[key]) for key in thresholds})

    def _require_detector(self) -> Detector:
        if self.detector is None:
            raise ConfigError("no model is running yet; retry once the daemon reports online")
        return self.detector

    def _install(self, detector: Detector) -> threading.Event:
        """Hand `detector` to the pipeline; when the pipeline refuses it (its buffers cannot be
        made), `detector` is closed, the running one stays, and the error is raised."""
        if self.pipeline is None:
            done = threading.Event()
            done.set()
        else:
            try:
                done = self.pipeline.swap_detector(detector)
            except BaseException:
                self._close_all([], [detector])
                raise
        with self._lock:
            old, self.detector = self.detector, detector
        if old is not None:
            self.retiring_detectors.append(old)
        self._installed = done
        return done

    def retire_unused(self) -> None:
        """Frame loop, between two frames: once the pipeline runs the latest detector, close the
        models it replaced, on a worker (closing a backend can take a while). Cheap otherwise."""
        installed = self._installed
        if not (self.retiring or self.retiring_detectors) or installed is None or not installed.is_set():
            return
        models, self.retiring = self.retiring, []
        detectors, self.retiring_detectors = self.retiring_detectors, []
        worker = threading.Thread(target=self._close_all, args=(models, detectors), name="model-retire", daemon=True)
        self._retirers = [t for t in self._retirers if t.is_alive()] + [worker]
        worker.start()

    @staticmethod
    def _close_all(models: List[Model], detectors: Sequence[Detector] = ()) -> None:
        for detector in detectors:  # before the models: their buffers live on the models' streams
            try:
                detector.close()
            except Exception:  # noqa: BLE001 - logged, the rest is still closed
                log.exception("closing a replaced detector failed")
        for model in models:
            try:
                model.close()
            except Exception:  # noqa: BLE001 - a worker's last act: logged, the new model runs on
                log.exception("closing the replaced model %s failed", model.bundle_hash)

    # -- reporting -----------------------------------------------------------------------------
    def describe(self) -> Dict[str, Any]:
        """bundle_hash, target, backend, precision, precision_reason, mode, thresholds, reloads
        and reload_failures: the status, telemetry's `model` block and command responses."""
        with self._lock:
            model, detector, mode = self.model, self.detector, self.mode
        if model is not None:
            out = model.describe()
        else:  # before the first load (or after it failed): what was asked for
            out = {"bundle_hash": None, "target": None, "backend": None, "precision": self.precision,
                   "precision_reason": None}
        out["mode"] = mode
        out["thresholds"] = dict(detector.thresholds) if detector is not None else dict(self.overrides)
        out["reloads"] = self.reloads
        out["reload_failures"] = self.reload_failures
        return out

    # -- lifetime ------------------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Close every model this object holds: the running one and any replaced one not yet
        closed. Call it once the pipeline has stopped (no frame can use them any more).
        describe() still tells what ran."""
        for worker in self._retirers:
            worker.join(timeout)
        self._retirers = []
        models, self.retiring = self.retiring, []
        detectors, self.retiring_detectors = self.retiring_detectors, []
        if self.detector is not None:
            detectors.append(self.detector)
        if self.model is not None:
            models.append(self.model)
        if self.kept is not None:
            models.append(self.kept)
            self.kept = None
        if self.candidate is not None:
            models.append(self.candidate)
            self.candidate, self.arm_b = None, []
        self._close_all(models, detectors)
