"""Several streams in modes tiles and roi (and full) through one model, on the device test set:
the tiny CenterFace-shaped model with a symbolic batch dimension, real ONNX Runtime, synthetic
sources. Each stream's detections are those of the same stream run alone through the
single-stream detector of its mode (its own strategy state, its frames in order); the backend
sees calls of several rows; a stalled stream does not hold the others; per-stream thresholds."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.preprocess import InputSpec
from edge_sdk.roi.config import RoiConfig
from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend
from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.detectors.factory import make_detector
from edge_sdk.runtime.detectors.shared import StreamSetup, make_stream_detector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.model import Model
from edge_sdk.runtime.sources import SyntheticSource
from edge_sdk.runtime.streams import MultiStreamPipeline
from edge_sdk.runtime.synthetic import SyntheticFaces
from runtime_factories import tiny_centerface_bytes

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
DECODER = {"type": "centerface", "score_threshold": 0.6, "nms_iou": 0.3}
FRAMES = 5
ROI = RoiConfig(sweep_tiles=2)


class Recording:
    """The model's backend, recording the rows of every call it gets."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.rows: List[int] = []
        self.input_names = backend.input_names

    def input_shape(self, name: str) -> Any:
        return self.backend.input_shape(name)

    def batch_range(self, name: str) -> Any:
        return self.backend.batch_range(name)

    def capabilities(self) -> Any:
        return self.backend.capabilities()

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        self.rows.append(len(feed[SPEC.name]))
        return self.backend.infer(feed)


def tiny_model(path: Path, batch) -> Model:
    path.write_bytes(tiny_centerface_bytes(batch=batch))
    backend = OnnxRuntimeBackend(path, provider="cpu", threads=1)
    backend.activate()
    return Model(backend, SPEC, dict(DECODER))


@pytest.fixture
def models(tmp_path: Path):
    shared, single = tiny_model(tmp_path / "batch.onnx", "batch"), tiny_model(tmp_path / "single.onnx", 1)
    yield shared, single
    shared.close()
    single.close()


def uri(seed: int, frames: int = FRAMES) -> str:
    return f"synthetic://faces?width=320&height=160&frames={frames}&seed={seed}&count=3"


def alone(single: Model, mode: str, seed: int, frames: int = FRAMES, **thresholds: float) -> List[Any]:
    """The oracle: the stream run alone, in order, through the single-stream detector of `mode`."""
    detector = make_detector(mode, single, ROI, thresholds)
    scene = SyntheticFaces.from_uri(uri(seed, frames))
    return [detector.detect(Frame(scene.render(i))).detections for i in range(frames)]


def run(detector: Any, seeds: Dict[str, int], policy: BatchPolicy, frames: int = FRAMES,
        frames_in_flight: int = 1) -> Dict[str, List[Any]]:
    got: Dict[str, List[Any]] = {}
    with MultiStreamPipeline([(sid, uri(seed, frames)) for sid, seed in seeds.items()], detector, policy,
                             frames_in_flight=frames_in_flight) as p:
        for r in p.results(timeout=60):
            got.setdefault(r.stream, []).append(r)
    return got


def assert_same(got: List[Any], want: List[Any]) -> int:
    assert [r.index for r in got] == list(range(len(want)))
    for r, w in zip(got, want):
        assert len(r.detections) == len(w)
        np.testing.assert_allclose(r.detections.xyxy, w.xyxy, atol=1e-3)
        np.testing.assert_allclose(r.detections.confidence, w.confidence, atol=1e-4)
    return sum(len(w) for w in want)


def test_streams_in_roi_tiles_and_full_find_what_each_finds_alone_in_shared_calls(models):
    model, single = models
    recording, alone_calls = Recording(model.backend), Recording(single.backend)
    modes = {"a": "roi", "b": "tiles", "c": "roi", "d": "full"}
    seeds = {"a": 1, "b": 2, "c": 3, "d": 4}
    model.backend, single.backend = recording, alone_calls
    try:
        detector = make_stream_detector(model, [StreamSetup(sid, mode, ROI) for sid, mode in modes.items()], 8)
        assert detector.prepared_spec is None and detector.mode == "mixed"
        # two frames of a stream in flight: a batch may hold both, run one after the other
        got = run(detector, seeds, BatchPolicy(8, (8,), max_queue_delay_ms=60_000), frames_in_flight=2)
        found = sum(assert_same(got[sid], alone(single, modes[sid], seeds[sid])) for sid in modes)
    finally:
        model.backend, single.backend = recording.backend, alone_calls.backend
    assert found > 0
    # the same model inputs as the streams run alone (one row per call there), in calls of several
    # rows, none over the max
    assert sum(recording.rows) == sum(alone_calls.rows) == detector.shared.rows
    assert max(recording.rows) == 8 and min(recording.rows) >= 1
    assert len(recording.rows) < len(alone_calls.rows) / 2


def test_each_roi_streams_scheduler_follows_that_streams_tracker_whose_ids_its_results_carry(models):
    """One tracker per stream, shared by its ROI scheduler and its track ids; the results of
    several streams have `.tracks` as a single stream's do (the detections with a track id)."""
    from edge_sdk.tracking.tracker import TrackingConfig

    model, _ = models
    seeds = {"a": 1, "b": 2, "c": 3}
    detector = make_stream_detector(model, [StreamSetup(sid, "roi", ROI) for sid in seeds], 3)
    got: Dict[str, List[Any]] = {}
    with MultiStreamPipeline([(sid, uri(seed)) for sid, seed in seeds.items()], detector,
                             BatchPolicy(3, (3,), max_queue_delay_ms=60_000), tracking=TrackingConfig()) as p:
        for r in p.results(timeout=60):
            got.setdefault(r.stream, []).append(r)
        trackers = p.tracking.trackers
    for sid in seeds:
        assert detector.detectors[sid].strategy.tracker is trackers[sid]
        assert trackers[sid].frame == len(got[sid]) == FRAMES
    results = [r for rs in got.values() for r in rs]
    assert any(len(r.tracks) for r in results)
    for r in results:
        ids = r.detections.data["track_id"]
        assert r.tracks.data["track_id"].tolist() == ids[ids >= 0].tolist()
        np.testing.assert_array_equal(r.tracks.xyxy, r.detections.xyxy[ids >= 0])


def test_a_model_fixed_at_batch_1_runs_the_gathered_rows_one_call_each(models):
    _, single = models
    recording = Recording(single.backend)
    single.backend = recording
    try:
        detector = make_stream_detector(single, [StreamSetup("a", "roi", ROI), StreamSetup("b", "tiles", ROI)], 4)
        assert "fixed at 1" in detector.describe()["batch"]["calls"]
        got = run(detector, {"a": 5, "b": 6}, BatchPolicy(2, (2,), max_queue_delay_ms=60_000))
    finally:
        single.backend = recording.backend
    assert set(recording.rows) == {1}
    assert_same(got["a"], alone(single, "roi", 5))
    assert_same(got["b"], alone(single, "tiles", 6))


class Stalling(SyntheticSource):
    """A synthetic source whose frames after the first wait for `go`: a camera that stalls."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.go = threading.Event()
        self.reads = 0

    def read(self, out: Any = None) -> Any:
        self.reads += 1
        if self.reads > 1:
            self.go.wait()
        return super().read(out)


def test_a_stalled_stream_does_not_hold_the_others(models):
    model, single = models
    detector = make_stream_detector(model, [StreamSetup("live", "roi", ROI), StreamSetup("stuck", "tiles", ROI)], 4)
    stuck = Stalling(uri(8))
    frames = 8
    live: List[Any] = []
    stuck_results: List[Any] = []
    with MultiStreamPipeline([("live", uri(7, frames)), ("stuck", stuck)], detector,
                             BatchPolicy(2, (2,), max_queue_delay_ms=5)) as p:
        for r in p.results(timeout=60):
            (live if r.stream == "live" else stuck_results).append(r)
            if len(live) == frames:
                stuck.go.set()  # the live stream finished while the other one was stalled
    assert len(stuck_results) == FRAMES
    assert stuck.reads >= 2
    assert_same(live, alone(single, "roi", 7, frames))
    assert_same(stuck_results, alone(single, "tiles", 8))


def test_thresholds_set_for_one_stream_change_only_that_stream(models):
    model, single = models
    detector = make_stream_detector(model, [StreamSetup("a", "roi", ROI), StreamSetup("b", "roi", ROI)], 4)
    assert detector.set_thresholds(stream="a", score_threshold=0.9) == {"score_threshold": 0.9}
    with pytest.raises(ConfigError, match="unknown stream 'z'"):
        detector.set_thresholds(stream="z", score_threshold=0.9)
    with pytest.raises(ConfigError, match="score_threshold must be a number in"):
        detector.set_thresholds(stream="b", score_threshold=2)
    got = run(detector, {"a": 1, "b": 1}, BatchPolicy(2, (2,), max_queue_delay_ms=60_000))
    assert detector.thresholds_of()["a"]["score_threshold"] == 0.9
    assert detector.thresholds_of()["b"]["score_threshold"] == 0.6
    assert_same(got["a"], alone(single, "roi", 1, score_threshold=0.9))
    assert_same(got["b"], alone(single, "roi", 1))
    # the same scene: the stricter stream keeps fewer
    assert sum(len(r.detections) for r in got["a"]) < sum(len(r.detections) for r in got["b"])


class FailsOnCall(Recording):
    """The model's backend failing on its `n`-th call, as a model whose device went away."""

    def __init__(self, backend: Any, n: int) -> None:
        super().__init__(backend)
        self.n = n

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        if len(self.rows) + 1 == self.n:
            raise BackendError("the device went away")
        return super().infer(feed)


def test_a_model_error_in_a_shared_call_stops_every_stream_and_is_raised(models):
    model, _ = models
    failing = FailsOnCall(model.backend, 3)
    model.backend = failing
    try:
        detector = make_stream_detector(model, [StreamSetup("a", "roi", ROI), StreamSetup("b", "tiles", ROI)], 4)
        with pytest.raises(BackendError, match="the device went away"):
            run(detector, {"a": 1, "b": 2}, BatchPolicy(2, (2,), max_queue_delay_ms=60_000), frames=50)
        detector.close()
    finally:
        model.backend = failing.backend
    assert len(failing.rows) == 2  # nothing ran after the failed call
