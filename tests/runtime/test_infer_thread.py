"""The infer stage on its own thread (edge_sdk.runtime.infer_thread): one frame ahead of decode,
same results as the inline arrangement, order kept, swaps, errors, early exits and the cache."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.base import Backend, Capabilities
from edge_sdk.runtime.config import CacheConfig, PipelineConfig, SourceConfig
from edge_sdk.runtime.detectors.factory import make_detector
from edge_sdk.runtime.model import Model
from edge_sdk.runtime.pipeline import Pipeline
from runtime_factories import CENTERFACE_DECODER, ListSource, scene

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64])


def config(**kw: Any) -> PipelineConfig:
    kw.setdefault("threads", 1)
    kw.setdefault("cache", CacheConfig(enabled=False))
    kw.setdefault("preprocess", "capture")  # what "auto" picks when inference leaves a core free
    return PipelineConfig(source=SourceConfig(""), **kw)


class CellBackend(Backend):
    """A CPU backend whose 'face' sits in a cell that depends on the frame's mean, so that each
    frame's result is its own; records which thread ran each inference."""

    cpu_bound = True
    threads = 1

    def __init__(self, gate: Any = None, score: float = 0.9) -> None:
        super().__init__()
        self.score = score  # each backend's own: a result tells which one ran its frame
        self.input_names = ["input.1"]
        self.is_active = True
        self.threads_seen: List[str] = []
        self.gate = gate  # called before each inference (tests that need a rendezvous)
        self.runs = 0

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        x = feed["input.1"]
        if self.gate is not None:
            self.gate(self.runs)
        self.runs += 1
        self.threads_seen.append(threading.current_thread().name)
        n, h, w = x.shape[0], x.shape[2] // 4, x.shape[3] // 4
        heat = np.zeros((n, 1, h, w), np.float32)
        cell = int(x.mean()) % (w - 2) + 1
        heat[:, 0, 4, cell] = self.score
        return [heat, np.zeros((n, 2, h, w), np.float32), np.zeros((n, 2, h, w), np.float32),
                np.zeros((n, 10, h, w), np.float32)]

    def capabilities(self) -> Capabilities:
        return Capabilities(device="cpu", threads=self.threads)


def frames(n: int) -> List[np.ndarray]:
    return [np.full((60, 100, 3), 7 * i, np.uint8) for i in range(n)]


def detector_on(backend: Any, mode: str = "full") -> Any:
    return make_detector(mode, Model(backend, SPEC, dict(CENTERFACE_DECODER)))


def collect(pipeline: Pipeline) -> List[Any]:
    return [(r.index, r.detections.xyxy.copy(), dict(r.latency_ms)) for r in pipeline]


def infer_threads_alive() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "edge-sdk-infer"]


def test_results_equal_the_inline_arrangement_in_order() -> None:
    ahead_backend, inline_backend = CellBackend(), CellBackend()
    with Pipeline(config(), source=ListSource(frames(14)), detector=detector_on(ahead_backend)) as pipeline:
        assert pipeline.runs_ahead()
        stages = {s["stage"]: s["runs_on"] for s in pipeline.describe()["stages"]}
        ahead = collect(pipeline)
    with Pipeline(config(preprocess="inline"), source=ListSource(frames(14)), detector=detector_on(inline_backend)) as pipeline:
        assert not pipeline.runs_ahead()
        inline = collect(pipeline)
    assert stages["infer"].startswith("infer thread") and stages["decode/merge"].startswith("consumer")
    assert [i for i, _, _ in ahead] == list(range(14))
    for (i, boxes, latency), (j, boxes2, _) in zip(ahead, inline):
        assert i == j and len(boxes) == 1
        np.testing.assert_array_equal(boxes, boxes2)
        assert {"capture_wait", "preprocess", "infer", "decode", "merge", "total"} <= set(latency)
    assert len({tuple(b[0]) for _, b, _ in ahead}) > 3  # frames differ: a stale output set would show
    assert set(ahead_backend.threads_seen) == {"edge-sdk-infer"}
    assert set(inline_backend.threads_seen) == {threading.current_thread().name}
    assert not infer_threads_alive()


def test_the_next_frame_is_inferred_while_the_loop_body_holds_this_one() -> None:
    """Inline, frame k+1 cannot be inferred before the loop body is done with frame k; ahead,
    it starts while the body still holds frame k."""
    started = [threading.Event() for _ in range(8)]
    backend = CellBackend(lambda run: started[run].set())
    with Pipeline(config(), source=ListSource(frames(8)), detector=detector_on(backend)) as pipeline:
        for result in pipeline:
            if result.index + 1 < 8:
                assert started[result.index + 1].wait(timeout=10), f"frame {result.index + 1} not inferred ahead"


def count_slots(pipeline: Pipeline) -> Dict[str, int]:
    """Counts the slots taken from the capture ring and given back, from the pipeline's side."""
    capture = pipeline.capture
    assert capture is not None
    counts = {"taken": 0, "released": 0}
    get, release = capture.get, capture.release

    def counting_get(*args: Any, **kwargs: Any) -> Any:
        slot = get(*args, **kwargs)
        counts["taken"] += slot is not None
        return slot

    def counting_release(slot: Any) -> None:
        counts["released"] += 1
        release(slot)

    capture.get, capture.release = counting_get, counting_release  # type: ignore[method-assign]
    return counts


def test_max_frames_early_exit_and_release_every_slot() -> None:
    started = [threading.Event() for _ in range(20)]
    with Pipeline(config(max_frames=5, pool_size=4), source=ListSource(frames(20)),
                  detector=detector_on(CellBackend(lambda run: started[run].set()))) as pipeline:
        counts = count_slots(pipeline)
        for result in pipeline:
            if result.index == 4:  # the last one: the thread has taken the next frame ahead
                assert started[5].wait(10)
        assert result.index == 4 and pipeline.stats.frames_processed == 5
        assert not infer_threads_alive()
        # the frame inferred ahead went back to the ring too
        assert counts["taken"] >= 6 and counts["released"] == counts["taken"]
    started = [threading.Event() for _ in range(20)]
    with Pipeline(config(), source=ListSource(frames(20)),
                  detector=detector_on(CellBackend(lambda run: started[run].set()))) as pipeline:
        counts = count_slots(pipeline)
        for result in pipeline:
            if result.index == 2:
                assert started[3].wait(10)
                break
        assert not infer_threads_alive()
        assert counts["taken"] >= 4 and counts["released"] == counts["taken"]
        # it goes on with the frames after the one inferred ahead (dropped with the loop): every
        # slot went back to the pool, or capture would stall here
        rest = [i for i, _, _ in collect(pipeline)]
        assert rest[0] in (4, 5) and rest == list(range(rest[0], 20))


@pytest.mark.parametrize("mode", ["full", "roi"])
def test_a_swap_while_ahead_keeps_order_and_every_later_frame_is_the_new_detectors(mode: str) -> None:
    """The swap is asked for while frame 6 is already being inferred ahead by the first detector:
    frame 6 and every later one are still the second's (run again), so that a `set` answered
    between frames 5 and 6 holds from frame 6 on."""
    started = [threading.Event() for _ in range(17)]
    first, second = CellBackend(lambda run: started[run].set()), CellBackend(score=0.8)
    done = None
    with Pipeline(config(), source=ListSource(frames(16)), detector=detector_on(first)) as pipeline:
        results = []
        for result in pipeline:
            results.append((result.index, result.detections.confidence.copy()))
            if result.index == 5:
                assert started[6].wait(timeout=10), "frame 6 was not inferred ahead"
                done = pipeline.swap_detector(detector_on(second, mode))
        assert pipeline.runs_ahead() == (mode == "full")
    assert [i for i, _ in results] == list(range(16))
    assert done is not None and done.is_set()
    assert first.runs == 7  # frames 0..6: 6 was inferred ahead, and its outputs thrown away
    for index, scores in results:
        assert len(scores) and np.allclose(scores, 0.9 if index < 6 else 0.8, atol=1e-6), (index, scores)
    if mode == "full":
        assert second.runs == 10  # frames 6..15
        # frame 6 on the consumer (taken before the swap), the rest on a new infer thread
        assert second.threads_seen[0] == threading.current_thread().name
        assert set(second.threads_seen[2:]) == {"edge-sdk-infer"}
    else:  # a coarse pass and fine passes per frame, on the consumer
        assert second.runs >= 10 and "edge-sdk-infer" not in second.threads_seen
    assert not infer_threads_alive()


def test_a_swap_back_to_full_runs_ahead_again() -> None:
    first, roi, last = CellBackend(), CellBackend(), CellBackend()
    with Pipeline(config(), source=ListSource(frames(18)), detector=detector_on(first)) as pipeline:
        indices = []
        for result in pipeline:
            indices.append(result.index)
            if result.index == 4:
                pipeline.swap_detector(detector_on(roi, "roi"))
            if result.index == 10:
                pipeline.swap_detector(detector_on(last))
    assert indices == list(range(18))
    assert "edge-sdk-infer" not in roi.threads_seen  # roi runs on the consumer
    # the frame in hand when the swap is applied runs on the consumer, the rest on the infer thread
    assert last.threads_seen[0] == threading.current_thread().name and last.runs >= 6
    assert set(last.threads_seen[1:]) == {"edge-sdk-infer"}


@pytest.mark.parametrize("stage", ["infer", "decode"])
def test_an_error_on_either_side_is_raised_in_the_loop_and_named(stage: str) -> None:
    backend = CellBackend()
    detector = detector_on(backend)
    if stage == "infer":
        def boom(run: int) -> None:
            if run == 3:
                raise RuntimeError("inference failed")
        backend.gate = boom
    else:
        decode = detector.batch.decoder

        def bad_decode(outputs: Any, transforms: Any) -> Any:
            if bad_decode.calls == 3:  # type: ignore[attr-defined]
                raise RuntimeError("decoding failed")
            bad_decode.calls += 1  # type: ignore[attr-defined]
            return decode(outputs, transforms)
        bad_decode.calls = 0  # type: ignore[attr-defined]
        detector.batch.decoder = bad_decode
    seen = []
    with Pipeline(config(), source=ListSource(frames(10)), detector=detector) as pipeline:
        with pytest.raises(RuntimeError, match="failed"):
            for result in pipeline:
                seen.append(result.index)
        assert pipeline.failed_stage == stage
        assert seen == [0, 1, 2]
    assert not infer_threads_alive()


def test_a_capture_error_names_capture() -> None:
    with Pipeline(config(), source=ListSource([scene(0), ValueError("camera gone")]), detector=detector_on(CellBackend())) as pipeline:
        with pytest.raises(ValueError, match="camera gone"):
            list(pipeline)
        assert pipeline.failed_stage == "capture"


def test_the_cache_answers_repeated_frames_in_order() -> None:
    still = [np.full((60, 100, 3), 50, np.uint8)] * 4 + [np.full((60, 100, 3), 120, np.uint8)] * 4
    backend = CellBackend()
    cfg = config(cache=CacheConfig(enabled=True, threshold=2.0))
    with Pipeline(cfg, source=ListSource(still), detector=detector_on(backend)) as pipeline:
        results = [(r.cached, r.detections.xyxy.copy()) for r in pipeline]
        hits = pipeline.stats.cache_hits
    assert [c for c, _ in results] == [False, True, True, True, False, True, True, True]
    assert backend.runs == 2 and hits == 6
    for cached, boxes in results[1:4]:
        np.testing.assert_array_equal(boxes, results[0][1])
    for cached, boxes in results[5:]:
        np.testing.assert_array_equal(boxes, results[4][1])
    assert not np.array_equal(results[0][1], results[4][1])


def test_the_default_bundle_path_runs_ahead_with_onnxruntime(tiny_bundle: Path) -> None:
    cfg = PipelineConfig(source=SourceConfig(""), bundle=str(tiny_bundle), threads=1, preprocess="capture",
                         cache=CacheConfig(enabled=False))
    with Pipeline(cfg, source=ListSource([scene(i) for i in range(6)])) as pipeline:
        assert pipeline.runs_ahead()
        assert len(collect(pipeline)) == 6
    # the summary printed after the run says how the frames ran, though the backend is closed
    stages = {s["stage"]: s for s in pipeline.describe()["stages"]}
    assert stages["infer"]["runs_on"].startswith("infer thread")
    assert stages["preprocess"]["why"] == "preprocess = 'capture' in the config"


def test_close_with_an_iterator_left_open_stops_the_thread() -> None:
    pipeline = Pipeline(config(), source=ListSource(frames(30)), detector=detector_on(CellBackend())).open()
    it = iter(pipeline)
    assert next(it).index == 0 and next(it).index == 1
    assert infer_threads_alive()
    pipeline.close()
    assert not infer_threads_alive()
    assert list(it) == []  # the open iterator ends quietly


def test_a_get_waiting_for_a_frame_returns_none_when_cancelled_and_the_next_get_waits_again() -> None:
    from edge_sdk.runtime.capture import Capture

    release = threading.Event()

    class Held(ListSource):
        """Delivers its first frame once `release` is set."""

        def read(self, out: Any = None) -> Any:
            release.wait(10)
            return super().read(out)

    capture = Capture(Held(frames(2)), pool_size=3).start()
    try:
        cancel = threading.Event()
        got: List[Any] = []
        waiter = threading.Thread(target=lambda: got.append(capture.get(cancel=cancel)))
        waiter.start()
        cancel.set()
        capture.wake()
        waiter.join(10)
        assert not waiter.is_alive() and got == [None]
        release.set()
        slot = capture.get(timeout=10)  # the cancel was that caller's alone: this one gets the frame
        assert slot is not None and slot.index == 0
        capture.release(slot)
    finally:
        release.set()
        capture.stop()
