"""Several synthetic streams through one model on real ONNX Runtime: every frame of every stream
comes back once, in its stream's order, with the detections a single-frame run finds in it; a
source that fails to open is reported and retried while the others run; one that never opens is
given up and the rest finish."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from batch_model import dynamic_batch_path  # noqa: F401 (a fixture)
from edge_sdk.errors import BackendError, ConfigError, SourceError
from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend
from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.config import ReconnectConfig
from edge_sdk.preprocess import Preprocessor
from edge_sdk.runtime.detectors.base import PreparedPlanes, model_decoder
from edge_sdk.runtime.detectors.batched import make_batch_detector
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.model import Model
from edge_sdk.runtime.sources import SyntheticSource
from edge_sdk.runtime.streams import MultiStreamPipeline, StreamResult
from edge_sdk.runtime.synthetic import SyntheticFaces
from runtime_factories import CENTERFACE_DECODER, CENTERFACE_SPEC

pytestmark = pytest.mark.host  # the batch axis is set with onnx

FRAMES = 5
FAST_RETRY = ReconnectConfig(initial_s=0.01, max_s=0.02, max_attempts=3)


def uri(seed: int, frames: int = FRAMES) -> str:
    return f"synthetic://faces?width=320&height=240&frames={frames}&seed={seed}&count=2&min_size=60&max_size=90"


@pytest.fixture(scope="module")
def model(dynamic_batch_path: Path):  # noqa: F811
    backend = OnnxRuntimeBackend(dynamic_batch_path, provider="cpu", threads=1)
    backend.activate()
    model = Model(backend, CENTERFACE_SPEC, dict(CENTERFACE_DECODER))
    yield model
    model.close()


def by_stream(results: List[StreamResult]) -> Dict[str, List[StreamResult]]:
    out: Dict[str, List[StreamResult]] = {}
    for r in results:
        out.setdefault(r.stream, []).append(r)
    return out


class FailingOpens(SyntheticSource):
    """A synthetic source whose first `failures` opens fail, as a camera that is not up yet."""

    def __init__(self, uri: str, failures: int) -> None:
        super().__init__(uri)
        self.failures = failures
        self.opens = 0

    def open(self) -> None:
        self.opens += 1
        if self.opens <= self.failures:
            raise SourceError(f"{self.name}: camera not reachable (attempt {self.opens})")
        super().open()


def test_three_streams_one_model_every_frame_once_in_order_with_single_frame_detections(model):
    sources = [("a", uri(1)), ("b", uri(2)), ("c", uri(3))]
    detector = make_batch_detector(model, max_batch_size=3)
    prepared: List[bool] = []
    detect_batch = detector.detect_batch
    detector.detect_batch = lambda frames: (prepared.extend(f.prepared is not None and f.prepared.ready for f in frames),
                                            detect_batch(frames))[1]
    with MultiStreamPipeline(sources, detector, BatchPolicy(3, (), max_queue_delay_ms=50)) as pipeline:
        results = list(pipeline.results(timeout=60))
    streams = by_stream(results)
    assert sorted(streams) == ["a", "b", "c"]
    oracle = FullFrameDetector(model.backend, model_decoder(model), model.input_spec)
    found_faces = 0
    for sid, seed in (("a", 1), ("b", 2), ("c", 3)):
        assert [r.index for r in streams[sid]] == list(range(FRAMES))  # each stream in order, none lost
        scene = SyntheticFaces.from_uri(uri(seed))
        for r in streams[sid]:
            want = oracle.detect(Frame(scene.render(r.index))).detections
            assert len(r.detections) == len(want)
            np.testing.assert_allclose(r.detections.xyxy, want.xyxy, atol=0.05)
            assert r.latency_ms["queue"] >= 0 and r.latency_ms["total"] >= r.latency_ms["infer"]
            assert r.to_json()["stream"] == sid
            found_faces += len(r.detections)
    assert found_faces > 0  # the comparison is not between empty results
    assert prepared == [True] * 3 * FRAMES  # every network input was prepared on its capture thread
    stats = pipeline.stats()
    assert stats["batcher"]["total"]["requests"] == 3 * FRAMES
    assert max(stats["batcher"]["histogram"]) > 1  # frames of several streams shared a call
    assert detector.batch.inferences == stats["batcher"]["total"]["batches"]
    assert {s["state"] for s in stats["streams"].values()} == {"ended"}


def test_each_stream_prepares_into_uint8_planes_one_per_frame_buffer_with_one_scratch(model, monkeypatch):
    detector = make_batch_detector(model, max_batch_size=2)
    made: List[Any] = []  # the batch argument of every Preprocessor the pipeline makes
    init = Preprocessor.__init__
    monkeypatch.setattr(Preprocessor, "__init__", lambda self, spec, batch=None: (made.append(batch),
                                                                                 init(self, spec, batch))[1])
    seen: Dict[str, Dict[int, Any]] = {"a": {}, "b": {}}  # per stream, every prepared input (kept alive)
    detect_batch = detector.detect_batch

    def recording(frames: List[Frame]) -> Any:
        for f in frames:
            seen[f.stream_id][id(f.prepared)] = f.prepared
        return detect_batch(frames)

    detector.detect_batch = recording
    frames = 12
    with MultiStreamPipeline([("a", uri(21, frames)), ("b", uri(22, frames))], detector,
                             BatchPolicy(2, (), max_queue_delay_ms=50)) as pipeline:
        results = list(pipeline.results(timeout=60))
    assert len(results) == 2 * frames
    spec = model.input_spec
    for sid, prepared in seen.items():
        # the ring's 3 frame buffers (frames_in_flight 1 + 2, a synthetic source's default) each keep theirs
        assert 1 < len(prepared) <= 3, (sid, len(prepared))
        for p in prepared.values():
            assert isinstance(p, PreparedPlanes) and p.planes.dtype == np.uint8
            assert p.planes.shape == (3, spec.height, spec.width)  # a quarter of a float32 network input
    assert made == [0, 0]  # one resize scratch per stream, with no tensor of its own


def test_a_live_sources_ring_is_frames_in_flight_plus_two_whatever_pool_size_says(model):
    detector = make_batch_detector(model, max_batch_size=2)
    policy = BatchPolicy(2, (), max_queue_delay_ms=50)
    live, finite = SyntheticSource(uri(31)), SyntheticSource(uri(32))
    live.live = True  # as a camera: only its newest frame is kept
    pipeline = MultiStreamPipeline([("a", uri(33))], detector, policy, pool_size=8, frames_in_flight=2)
    assert (pipeline.ring_size(live), pipeline.ring_size(finite)) == (4, 8)
    default = MultiStreamPipeline([("a", uri(33))], detector, policy, frames_in_flight=2)
    assert (default.ring_size(live), default.ring_size(finite)) == (4, 4)
    with pytest.raises(ConfigError, match="pool_size - 2 = 2"):
        MultiStreamPipeline([("a", uri(33))], detector, policy, pool_size=4, frames_in_flight=3)
    with pytest.raises(ConfigError, match="frames_in_flight must be an integer >= 1"):
        MultiStreamPipeline([("a", uri(33))], detector, policy, frames_in_flight=0)


def test_a_stream_has_at_most_frames_in_flight_frames_in_a_batch(model):
    detector = make_batch_detector(model, max_batch_size=4)
    calls: List[List[str]] = []
    detect_batch = detector.detect_batch
    detector.detect_batch = lambda frames: (calls.append([f.stream_id for f in frames]), detect_batch(frames))[1]
    # a delay no batch waits out: with one frame of each stream in flight, the two streams' frames go together
    policy = BatchPolicy(4, (2,), max_queue_delay_ms=60_000)
    with MultiStreamPipeline([("a", uri(12)), ("b", uri(13))], detector, policy, frames_in_flight=1) as p:
        streams = by_stream(list(p.results(timeout=60)))
    assert [len(streams[s]) for s in ("a", "b")] == [FRAMES, FRAMES]
    assert [sorted(c) for c in calls] == [["a", "b"]] * FRAMES  # each call: one frame of each, in arrival order
    assert p.stats()["batcher"]["efficiency"] == 0.5


def test_a_stream_never_has_more_than_frames_in_flight_frames_waiting_in_the_batcher(model):
    """The bound itself, counted at the batcher: the model's first call is held until every
    stream's ring holds several frames, so a feeder that ignored the bound would queue them all."""
    import threading

    from polling import wait_until

    detector = make_batch_detector(model, max_batch_size=4)
    policy = BatchPolicy(4, (2,), max_queue_delay_ms=60_000)
    # a ring deeper than one frame in flight needs, so that frames could pile up in the batcher
    p = MultiStreamPipeline([("a", uri(12)), ("b", uri(13))], detector, policy, frames_in_flight=1, pool_size=4)
    lock = threading.Lock()
    waiting = {"a": 0, "b": 0}
    most = dict(waiting)
    put, next_batch, detect_batch = p.batcher.put, p.batcher.next_batch, detector.detect_batch

    def counted_put(stream_id, item):
        with lock:
            waiting[stream_id] += 1
            most[stream_id] = max(most[stream_id], waiting[stream_id])
        return put(stream_id, item)

    def counted_next(timeout=None):
        batch = next_batch(timeout)
        with lock:
            for request in batch.requests if batch is not None else ():
                waiting[request.stream_id] -= 1
        return batch

    held = []

    def held_detect(frames):
        if not held:  # the first call: let every ring fill up first
            held.append(wait_until(lambda: all(s.frames_captured >= 3 for s in p.stream_stats().values()), timeout=30))
        return detect_batch(frames)

    p.batcher.put, p.batcher.next_batch, detector.detect_batch = counted_put, counted_next, held_detect
    with p:
        streams = by_stream(list(p.results(timeout=60)))
    assert held == [True]
    assert [len(streams[s]) for s in ("a", "b")] == [FRAMES, FRAMES]
    assert most == {"a": 1, "b": 1}


@pytest.mark.parametrize("in_flight", [0, 3, 1.0])
def test_frames_in_flight_must_fit_the_ring(model, in_flight):
    with pytest.raises(ConfigError, match="frames_in_flight"):
        MultiStreamPipeline([("a", uri(1))], make_batch_detector(model, 2), BatchPolicy(2), pool_size=4,
                            frames_in_flight=in_flight)


def test_a_source_that_fails_to_open_is_retried_while_the_others_run(model):
    flaky = FailingOpens(uri(5), failures=2)
    sources = [("ok", uri(4)), ("flaky", flaky)]
    with MultiStreamPipeline(sources, make_batch_detector(model, 2), BatchPolicy(2, (), 20), reconnect=FAST_RETRY) as p:
        streams = by_stream(list(p.results(timeout=60)))
    assert [r.index for r in streams["ok"]] == list(range(FRAMES))
    assert [r.index for r in streams["flaky"]] == list(range(FRAMES))  # back after two failed opens
    failed = [e for e in p.events() if e["event"] == "source_failed"]
    assert [(e["stream"], e["failures"]) for e in failed] == [("flaky", 1), ("flaky", 2)]
    assert "camera not reachable" in failed[0]["error"]
    assert flaky.opens == 3


class DiesOnce(SyntheticSource):
    """A synthetic source whose first life ends in an error after `frames` frames."""

    def __init__(self, uri: str, frames: int) -> None:
        super().__init__(uri)
        self.frames = frames
        self.opens = 0

    def open(self) -> None:
        self.opens += 1
        self.served = 0
        super().open()

    def read(self, out=None):
        if self.opens == 1 and self.served == self.frames:
            raise SourceError(f"{self.name}: the stream died")
        self.served += 1
        return super().read(out)


def test_a_source_that_dies_is_reopened_and_its_frame_numbers_go_on(model):
    dying = DiesOnce(uri(10), frames=2)
    sources = [("ok", uri(11)), ("dying", dying)]
    with MultiStreamPipeline(sources, make_batch_detector(model, 2), BatchPolicy(2, (), 20), reconnect=FAST_RETRY) as p:
        streams = by_stream(list(p.results(timeout=60)))
    assert [r.index for r in streams["ok"]] == list(range(FRAMES))
    # two frames, the error, then the reopened source's five frames numbered on from 2
    assert [r.index for r in streams["dying"]] == list(range(2 + FRAMES))
    assert [(e["event"], "died" in e.get("error", "")) for e in p.events() if e["stream"] == "dying"] == [
        ("source_failed", True), ("stream_ended", False)]
    assert dying.opens == 2


def test_a_source_that_never_opens_is_given_up_and_the_others_finish(model):
    dead = FailingOpens(uri(6), failures=10 ** 6)
    sources = [("ok", uri(7)), ("dead", dead)]
    with MultiStreamPipeline(sources, make_batch_detector(model, 2), BatchPolicy(2, (), 20), reconnect=FAST_RETRY) as p:
        streams = by_stream(list(p.results(timeout=60)))
    assert sorted(streams) == ["ok"] and [r.index for r in streams["ok"]] == list(range(FRAMES))
    assert [e["event"] for e in p.events() if e["stream"] == "dead"] == ["source_failed"] * 3 + ["source_given_up"]
    assert p.stats()["streams"]["dead"]["state"] == "given_up" and dead.opens == 3


class BrokenBackend(OnnxRuntimeBackend):
    """Fails on its third call, as a backend that loses its device."""

    calls = 0

    def _infer_impl(self, feed):
        self.calls += 1
        if self.calls == 3:
            raise BackendError("the device was lost")
        return super()._infer_impl(feed)


def test_a_model_error_stops_every_stream_and_is_raised(dynamic_batch_path):  # noqa: F811
    backend = BrokenBackend(dynamic_batch_path, provider="cpu", threads=1)
    with backend:
        broken = Model(backend, CENTERFACE_SPEC, dict(CENTERFACE_DECODER))
        pipeline = MultiStreamPipeline([("a", uri(8, 50)), ("b", uri(9, 50))], make_batch_detector(broken, 2),
                                       BatchPolicy(2, (), 20))
        with pipeline:
            got: List[StreamResult] = []
            with pytest.raises(BackendError, match="device was lost"):
                for r in pipeline.results(timeout=60):
                    got.append(r)
        assert len(got) <= 4  # two calls of two frames at most came back
        assert {s["state"] for s in pipeline.stats()["streams"].values()} == {"stopped"}


def test_duplicate_stream_ids_are_refused(model):
    with pytest.raises(ConfigError, match="duplicate stream ids \\['a'\\]"):
        MultiStreamPipeline([("a", uri(1)), ("a", uri(2))], make_batch_detector(model, 2), BatchPolicy(2))
    with pytest.raises(ConfigError, match="no sources"):
        MultiStreamPipeline([], make_batch_detector(model, 2), BatchPolicy(2))


class Recording:
    """A batched detector that records the (stream, index) of every frame it runs."""

    def __init__(self, detector) -> None:
        self.detector = detector
        self.prepared_spec = detector.prepared_spec
        self.seen: List[tuple] = []

    @property
    def stage(self) -> str:
        return self.detector.stage

    def detect_batch(self, frames):
        self.seen.extend((f.stream_id, f.index) for f in frames)
        return self.detector.detect_batch(frames)


def test_a_detector_swapped_mid_run_takes_every_frame_from_the_next_batch_on_and_none_is_lost(model):
    old, new = Recording(make_batch_detector(model, 2)), Recording(make_batch_detector(model, 2))
    frames = 12
    sources = [("a", uri(20, frames)), ("b", uri(21, frames))]
    done = None
    results = []
    with MultiStreamPipeline(sources, old, BatchPolicy(2, (2,), 20), keep_frames=True) as p:
        for result in p.results(timeout=60):
            results.append(result)
            if done is None:
                done = p.swap_detector(new)
    assert done is not None and done.is_set() and p.detector is new
    every = sorted((s, i) for s in ("a", "b") for i in range(frames))
    assert sorted(old.seen + new.seen) == every  # each frame run once, by one of the two
    assert old.seen and new.seen and len(old.seen) < len(every) - 2
    streams = by_stream(results)
    assert [r.index for r in streams["a"]] == list(range(frames)) == [r.index for r in streams["b"]]
    scenes = {"a": SyntheticFaces.from_uri(uri(20, frames)), "b": SyntheticFaces.from_uri(uri(21, frames))}
    for r in results:  # a copy of its own frame (kept after its slot went back) and its age at the batch
        np.testing.assert_array_equal(r.frame, scenes[r.stream].render(r.index))
        assert 0.0 <= r.frame_age_ms <= r.latency_ms["total"]


class Flapping(SyntheticSource):
    """A camera that comes and goes: of its opens, only every `every`-th succeeds, for `lives`
    lives; each life delivers one frame and dies. After the last life it never opens again.
    It counts the errors it raised and the lives it had (the oracle of the pipeline's counts)."""

    def __init__(self, uri: str, every: int, lives: int) -> None:
        super().__init__(uri)
        self.every, self.lives = every, lives
        self.opens = self.raised = self.lived = self.served = 0

    def open(self) -> None:
        self.opens += 1
        if self.opens % self.every or self.lived == self.lives:
            self.raised += 1
            raise SourceError(f"{self.name}: camera not reachable (attempt {self.opens})")
        self.lived += 1
        self.served = 0
        super().open()

    def read(self, out=None):
        if self.served == 1:
            self.raised += 1
            raise SourceError(f"{self.name}: the stream died")
        self.served += 1
        return super().read(out)


def test_a_camera_failing_thousands_of_times_keeps_a_bounded_event_list_and_exact_counts(model):
    from edge_sdk.runtime.streams import EVENTS_KEPT

    flapping = Flapping(uri(12, frames=10 ** 6), every=50, lives=40)
    retry = ReconnectConfig(initial_s=0.0, max_s=0.0, max_attempts=60)
    sources = [("ok", uri(13)), ("flapping", flapping)]
    with MultiStreamPipeline(sources, make_batch_detector(model, 2), BatchPolicy(2, (), 5), reconnect=retry) as p:
        streams = by_stream(list(p.results(timeout=120)))
    assert [r.index for r in streams["ok"]] == list(range(FRAMES))
    assert [r.index for r in streams["flapping"]] == list(range(40))  # a frame per life, numbered on
    state = p.stats()["streams"]["flapping"]
    assert flapping.raised == 40 * 49 + 40 + 59 and flapping.raised > 8 * EVENTS_KEPT
    assert state["failed"] == flapping.raised
    # a loss: the failure at the first open, then each death after a frame (the failed reopens are not losses)
    assert state["losses"] == 1 + flapping.lived == 41
    assert state["state"] == "given_up" and state["failures"] == 60
    events = p.events()
    assert len(events) == EVENTS_KEPT  # the latest ones, not every failure
    assert events[-1]["event"] == "source_given_up" and events[-1]["failures"] == 60
    assert [e["failures"] for e in events[-61:-1]] == list(range(1, 61))
