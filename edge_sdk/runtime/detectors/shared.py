"""Several streams, each in its own mode (full, tiles, roi) with its own thresholds, through one
model: a detector per stream, and one :class:`SharedBackend` that gathers their backend calls.

    detector = make_stream_detector(model, [StreamSetup("door", "roi"), StreamSetup("yard", "tiles")],
                                    max_batch_size=4)
    found = detector.detect_batch(frames)         # one FrameDetections per Frame (frame.stream_id)
    detector.set_thresholds(stream="door", score_threshold=0.6)   # that stream's, from the next batch
    detector.replace("yard", new_detector)        # that stream's detector, from the next batch

Each stream keeps its own detector (its strategy's state: ROI tracks, the tile grid; its decoder
and so its thresholds, applied per row at decode). `detect_batch` runs the frames of a batch the
dynamic batcher formed (:mod:`edge_sdk.runtime.batcher`) on one thread per stream, each
stream's frames one after another, in order; their backend calls (full frames, tiles, ROI coarse
passes and crops) go to the SharedBackend, which waits until every stream still working on the
batch has submitted its rows or finished, then runs them all as one backend call (in calls of at
most `max_batch_size` rows; a model whose batch dimension is fixed gets calls of exactly that
many rows, one after another when it is 1: `describe()` says so). So the coarse passes of all
streams go together, then their crops, and no call waits for a stream that has nothing to
submit: the waiting for slow or stalled sources is the dynamic batcher's (its queue delay),
never the model's.

Two models side by side (an A/B test: `make_arms_detector`): each arm's streams are served by
that arm's model through its own SharedBackend, each batching its own streams' calls; every
FrameDetections says in `info["arm"]` which arm's model found it.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec
from edge_sdk.roi.config import RoiConfig
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.detectors.base import Detector, check_input, model_decoder
from edge_sdk.runtime.detectors.batched import calls_note, fixed_batch, rows_per_call
from edge_sdk.runtime.detectors.factory import detector_entry
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.detectors.strategy import StrategyDetector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import FrameDetections


class _Submission:
    __slots__ = ("tensor", "outputs", "error", "done")

    def __init__(self, tensor: np.ndarray) -> None:
        self.tensor = tensor
        self.outputs: List[np.ndarray] = []
        self.error: Optional[BaseException] = None
        self.done = False


class SharedBackend:
    """One model's backend called by several per-stream detectors at once: ``infer(feed)`` from
    each of `begin(n)`'s n participants is held until every participant still working has
    submitted or called ``leave()``; then the rows of all go as one batch (calls of at most
    `max_batch_size` rows, or exactly the fixed batch of the model) and each gets its own rows
    back (copies: the backend's buffers are reused by its next call). `calls` counts the backend
    calls, `rows` the rows they carried (without a fixed batch's padding)."""

    def __init__(self, backend: Backend, input_spec: InputSpec, max_batch_size: int) -> None:
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        self.backend = backend
        self.input_spec = input_spec
        self.max_batch_size = max_batch_size
        self.fixed_batch = fixed_batch(backend, input_spec)
        # a fixed batch: its size; a range (TensorRT's optimization profile): up to its most
        self.rows_per_call, self.min_rows = rows_per_call(backend, input_spec, max_batch_size)
        self.calls = 0
        self.rows = 0
        self._cond = threading.Condition()
        self._active = 1
        self._pending: List[_Submission] = []
        self._checked = False

    # what the per-stream detectors ask of a backend besides infer
    @property
    def input_names(self) -> List[str]:
        return self.backend.input_names

    def input_shape(self, name: str) -> Any:
        return self.backend.input_shape(name)

    def batch_range(self, name: str) -> Any:
        return self.backend.batch_range(name)

    def capabilities(self) -> Any:
        return self.backend.capabilities()

    # -- the gathering
    def begin(self, participants: int) -> None:
        """A batch starts: `participants` streams will submit rows until each calls leave()."""
        with self._cond:
            self._active = int(participants)

    def leave(self) -> None:
        """A participant is done with the batch: the others no longer wait for its rows."""
        with self._cond:
            self._active -= 1
            due = self._take_due()
        if due:
            self._run(due)

    def infer(self, feed: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        submission = _Submission(np.asarray(feed[self.input_spec.name]))
        with self._cond:
            self._pending.append(submission)
            due = self._take_due()
        if due:
            self._run(due)
        with self._cond:
            self._cond.wait_for(lambda: submission.done)
        if submission.error is not None:
            raise submission.error
        return submission.outputs

    def _take_due(self) -> List[_Submission]:
        if self._pending and len(self._pending) >= self._active:
            due, self._pending = self._pending, []
            return due
        return []

    def _run(self, due: List[_Submission]) -> None:
        try:
            tensor = due[0].tensor if len(due) == 1 else np.concatenate([s.tensor for s in due])
            outputs = self.run_rows(tensor)
            start = 0
            for submission in due:
                n = len(submission.tensor)
                submission.outputs = [o[start: start + n] for o in outputs]
                start += n
        except BaseException as exc:  # every caller of the call raises it
            for submission in due:
                submission.error = exc
        with self._cond:
            for submission in due:
                submission.done = True
            self._cond.notify_all()

    def run_rows(self, tensor: np.ndarray) -> List[np.ndarray]:
        """The model's outputs for every row of `tensor`, in backend calls of `rows_per_call`
        rows at most (a fixed batch: exactly; a call under the model's fewest rows is filled up
        to them: the unused rows zero and cut off)."""
        if not self._checked:
            check_input(self.backend, self.input_spec)
            self._checked = True
        size = self.rows_per_call
        parts: List[List[np.ndarray]] = []
        for start in range(0, len(tensor), size):
            chunk = tensor[start: start + size]
            n = len(chunk)
            if n < self.min_rows:
                padded = np.zeros((self.min_rows,) + chunk.shape[1:], chunk.dtype)
                padded[:n] = chunk
                chunk = padded
            outputs = self.backend.infer({self.input_spec.name: chunk})
            self.calls += 1
            self.rows += n
            parts.append([np.array(np.asarray(o)[:n]) for o in outputs])
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate(column) for column in zip(*parts)]

    def describe(self) -> Dict[str, Any]:
        return {"max_batch_size": self.max_batch_size, "rows_per_call": self.rows_per_call,
                "calls": calls_note(self.max_batch_size, self.fixed_batch, "row", self.rows_per_call)}


@dataclass
class StreamSetup:
    """One stream's detector: its `mode`, its tiles/roi parameters (None: the defaults) and the
    thresholds set for it (score_threshold, nms_iou; missing: the bundle decoder's)."""

    id: str
    mode: str = "full"
    roi: Optional[RoiConfig] = None
    thresholds: Dict[str, float] = field(default_factory=dict)


def build_stream_detector(shared: SharedBackend, model: Any, setup: StreamSetup) -> Detector:
    """The detector of one stream over `shared`: mode full one row per frame, tiles and roi
    their strategy with batches of the shared backend's rows, another registered mode its
    builder over the shared backend. ConfigError for an unknown mode or a bad threshold."""
    entry = detector_entry(setup.mode)
    roi = setup.roi or RoiConfig()
    decoder = model_decoder(model, setup.thresholds)
    spec = model.input_spec
    if setup.mode == "full":
        return FullFrameDetector(shared, decoder, spec)  # type: ignore[arg-type]
    if setup.mode in ("tiles", "roi"):
        return StrategyDetector(setup.mode, shared, decoder, spec, roi,  # type: ignore[arg-type]
                                score_threshold=float(decoder.score_threshold), batch=shared.rows_per_call,
                                dynamic_batch=shared.fixed_batch is None)
    return entry.build(_SharedModel(model, shared), decoder, roi)


class _SharedModel:
    """A loaded Model whose backend is the shared one (for a registered mode's builder)."""

    def __init__(self, model: Any, shared: SharedBackend) -> None:
        self.backend = shared
        self.input_spec = model.input_spec
        self.decoder_spec = model.decoder_spec


class StreamsDetector:
    """A detector per stream over one :class:`SharedBackend`; see the module docstring. What
    the MultiStreamPipeline calls (`detect_batch`, `prepared_spec`, `stage`) and what the daemon
    changes per stream (`set_thresholds`, `replace`), applied at the next batch boundary."""

    def __init__(self, shared: SharedBackend, detectors: Mapping[str, Detector],
                 arms: Optional[Mapping[str, str]] = None, backends: Optional[Mapping[str, SharedBackend]] = None) -> None:
        """`arms` (an A/B test): each stream's arm, and `backends` each arm's SharedBackend
        (`shared`: the first arm's); without them every stream is served by `shared`."""
        if not detectors:
            raise ConfigError("no streams: give at least one stream's detector")
        self.shared = shared
        self.arms: Dict[str, str] = dict(arms or {})
        self.backends: Dict[str, SharedBackend] = dict(backends or {})
        self.backend = shared.backend
        self.detectors: Dict[str, Detector] = dict(detectors)
        self.input_spec = shared.input_spec
        self._changes: List[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=len(self.detectors), thread_name_prefix="edge-sdk-stream")
        self._failed = ""

    @property
    def modes(self) -> Dict[str, str]:
        return {sid: d.mode for sid, d in self.detectors.items()}

    @property
    def mode(self) -> str:
        """The streams' mode when they share one, else "mixed"."""
        modes = set(self.modes.values())
        return modes.pop() if len(modes) == 1 else "mixed"

    @property
    def prepared_spec(self) -> Optional[InputSpec]:
        """The network input a frame is prepared into ahead: only when every stream runs mode
        full (a tiles or roi frame is cut up, not letterboxed whole)."""
        return self.input_spec if all(m == "full" for m in self.modes.values()) else None

    @property
    def stage(self) -> str:
        return self._failed or "infer"

    @property
    def thresholds(self) -> Dict[str, float]:
        """The thresholds every stream shares (a key whose streams differ is left out)."""
        each = list(self.thresholds_of().values())
        return {key: value for key, value in each[0].items() if all(t.get(key) == value for t in each[1:])}

    def thresholds_of(self) -> Dict[str, Dict[str, float]]:
        return {sid: dict(d.thresholds) for sid, d in self.detectors.items()}

    def shared_of(self, stream: str) -> SharedBackend:
        """The SharedBackend that serves `stream` (its arm's in an A/B test)."""
        arm = self.arms.get(stream)
        return self.backends[arm] if arm is not None else self.shared

    def _targets(self, stream: Optional[str]) -> List[str]:
        if stream is None:
            return list(self.detectors)
        if stream not in self.detectors:
            raise ConfigError(f"unknown stream {stream!r}; the streams are {', '.join(self.detectors)}")
        return [stream]

    def set_thresholds(self, stream: Optional[str] = None, **changes: Any) -> Dict[str, float]:
        """Change `stream`'s thresholds (None: every stream's) from the next batch on; every value
        is checked first (ConfigError, nothing changed). Returns the values that will be in force."""
        targets = self._targets(stream)
        for sid in targets:
            detector = self.detectors[sid]
            values = detector.check_thresholds(changes)
            missing = sorted(set(values) - set(detector.thresholds))
            if missing:
                raise ConfigError(f"this model's decoder has no {', '.join(missing)} to set")
        with self._lock:
            for sid in targets:
                detector = self.detectors[sid]
                self._changes.append(lambda d=detector: d.set_thresholds(**changes))
        return {key: float(value) for key, value in changes.items()}

    def replace(self, stream: str, detector: Detector) -> None:
        """Run `detector` for `stream` from the next batch on (its strategy state starts afresh)."""
        self._targets(stream)
        with self._lock:
            self._changes.append(lambda: self.detectors.__setitem__(stream, detector))

    def _apply_changes(self) -> None:
        with self._lock:
            changes, self._changes = self._changes, []
        for change in changes:
            change()

    def detect(self, frame: Frame) -> FrameDetections:
        return self.detect_batch([frame])[0]

    def detect_batch(self, frames: Sequence[Frame]) -> List[FrameDetections]:
        """One FrameDetections per Frame, in the order given: each stream's frames in order on its
        own detector, the streams side by side, their backend calls gathered."""
        self._apply_changes()
        groups: Dict[str, List[int]] = {}
        for i, frame in enumerate(frames):
            if frame.stream_id not in self.detectors:
                raise ConfigError(f"frame of unknown stream {frame.stream_id!r}; the streams are "
                                  f"{', '.join(self.detectors)}")
            groups.setdefault(frame.stream_id, []).append(i)
        results: List[Optional[FrameDetections]] = [None] * len(frames)
        participants: Dict[int, List[Any]] = {}  # each SharedBackend serving the batch: its streams in it
        for sid in groups:
            shared = self.shared_of(sid)
            participants.setdefault(id(shared), [shared, 0])[1] += 1
        for shared, count in participants.values():
            shared.begin(count)

        def run(sid: str, rows: List[int]) -> None:
            detector, arm = self.detectors[sid], self.arms.get(sid)
            try:
                for i in rows:
                    found = detector.detect(frames[i])
                    if arm is not None:
                        found.info = dict(found.info, arm=arm)
                    results[i] = found
            except BaseException:
                self._failed = detector.stage
                raise
            finally:
                self.shared_of(sid).leave()

        if len(groups) == 1:
            run(*next(iter(groups.items())))
        else:
            futures = [self._pool.submit(run, sid, rows) for sid, rows in groups.items()]
            wait(futures)
            for future in futures:
                future.result()
        return results  # type: ignore[return-value]

    def describe(self) -> Dict[str, Any]:
        out = {"mode": self.mode, "preprocess": "cpu", "thresholds": self.thresholds, "batch": self.shared.describe(),
               "streams": {sid: {"mode": d.mode, "thresholds": dict(d.thresholds)} for sid, d in self.detectors.items()}}
        if self.arms:
            out["arms"] = {arm: sorted(sid for sid, a in self.arms.items() if a == arm) for arm in self.backends}
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for detector in self.detectors.values():
            detector.close()


def make_stream_detector(model: Any, streams: Sequence[StreamSetup], max_batch_size: int) -> StreamsDetector:
    """The StreamsDetector of a loaded Model for `streams` (ids unique), gathering their backend
    calls into batches of up to `max_batch_size` rows."""
    ids = [s.id for s in streams]
    duplicates = sorted({sid for sid in ids if ids.count(sid) > 1})
    if duplicates:
        raise ConfigError(f"duplicate stream ids {duplicates}: give every stream its own id")
    shared = SharedBackend(model.backend, model.input_spec, max_batch_size)
    return StreamsDetector(shared, {s.id: build_stream_detector(shared, model, s) for s in streams})


def make_arms_detector(arms: Mapping[str, Tuple[Any, Sequence[StreamSetup]]],
                       max_batch_size: Mapping[str, int]) -> StreamsDetector:
    """The StreamsDetector of an A/B test: `arms` maps each arm ("a", "b") to its loaded Model
    and the setups of the streams it serves, each arm batching its own streams' calls into
    batches of up to `max_batch_size[arm]` rows. Every stream in exactly one arm."""
    ids = [s.id for _, setups in arms.values() for s in setups]
    duplicates = sorted({sid for sid in ids if ids.count(sid) > 1})
    if duplicates:
        raise ConfigError(f"streams {duplicates} are in more than one arm: put each stream in one")
    empty = sorted(arm for arm, (_, setups) in arms.items() if not setups)
    if empty:
        raise ConfigError(f"arm {', '.join(empty)} serves no stream: give every arm at least one")
    backends = {arm: SharedBackend(model.backend, model.input_spec, max_batch_size[arm])
                for arm, (model, _) in arms.items()}
    detectors = {s.id: build_stream_detector(backends[arm], model, s)
                 for arm, (model, setups) in arms.items() for s in setups}
    of = {s.id: arm for arm, (_, setups) in arms.items() for s in setups}
    return StreamsDetector(next(iter(backends.values())), detectors, arms=of, backends=backends)
