"""Several streams through one model on the device test set (no onnx package): the tiny
CenterFace-shaped model with a symbolic batch dimension, real ONNX Runtime, synthetic sources.
Each frame's detections are those of a single-frame run of the same model with its batch fixed
at 1; each stream's frames come back once, in order, and the streams share backend calls."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend
from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.detectors.base import model_decoder
from edge_sdk.runtime.detectors.batched import make_batch_detector
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.model import Model
from edge_sdk.runtime.sources import SyntheticSource
from edge_sdk.runtime.streams import MultiStreamPipeline
from edge_sdk.runtime.synthetic import SyntheticFaces
from runtime_factories import tiny_centerface_bytes

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
DECODER = {"type": "centerface", "score_threshold": 0.6, "nms_iou": 0.3}
FRAMES = 6


def tiny_model(path: Path, batch) -> Model:
    path.write_bytes(tiny_centerface_bytes(batch=batch))
    backend = OnnxRuntimeBackend(path, provider="cpu", threads=1)
    backend.activate()
    return Model(backend, SPEC, dict(DECODER))


def uri(seed: int) -> str:
    return f"synthetic://faces?width=320&height=160&frames={FRAMES}&seed={seed}&count=3"


def test_streams_share_calls_of_a_free_batch_model_and_match_single_frame_runs(tmp_path: Path):
    model = tiny_model(tmp_path / "batch.onnx", "batch")
    single = tiny_model(tmp_path / "single.onnx", 1)
    try:
        detector = make_batch_detector(model, max_batch_size=3)
        assert detector.fixed_batch is None
        calls: List[int] = []
        detect_batch = detector.detect_batch
        holding: List[bool] = []  # each frame the model gets still has its pixels (its ring is not stopped under it)
        detector.detect_batch = lambda frames: (calls.append(len(frames)), holding.extend(f.image is not None for f in frames),
                                                detect_batch(frames))[2]
        seeds = {"a": 1, "b": 2, "c": 3}
        with MultiStreamPipeline([(sid, uri(seed)) for sid, seed in seeds.items()], detector,
                                 BatchPolicy(3, (3,), max_queue_delay_ms=60_000)) as pipeline:
            results = list(pipeline.results(timeout=60))
        got: Dict[str, list] = {}
        for r in results:
            got.setdefault(r.stream, []).append(r)
        oracle = FullFrameDetector(single.backend, model_decoder(single), single.input_spec)
        found = 0
        for sid, seed in seeds.items():
            assert [r.index for r in got[sid]] == list(range(FRAMES))
            scene = SyntheticFaces.from_uri(uri(seed))
            for r in got[sid]:
                want = oracle.detect(Frame(scene.render(r.index))).detections
                assert len(r.detections) == len(want)
                np.testing.assert_allclose(r.detections.xyxy, want.xyxy, atol=1e-3)
                found += len(want)
        assert found > 0
        # one frame of each stream in flight and a delay no batch waits out: every call takes all three
        assert calls == [3] * FRAMES
        assert holding == [True] * 3 * FRAMES
        assert pipeline.stats()["batcher"]["efficiency"] == 1.0
    finally:
        model.close()
        single.close()


def test_a_batch_size_the_streams_cannot_fill_is_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    model = tiny_model(tmp_path / "batch.onnx", "batch")
    try:
        detector = make_batch_detector(model, max_batch_size=4)
        sources = [("a", uri(1)), ("b", uri(2))]
        with caplog.at_level("WARNING", logger="edge_sdk.runtime.streams"):
            MultiStreamPipeline(sources, detector, BatchPolicy(4, (2,), 20))  # 2 streams fill a preferred 2
            assert caplog.records == []
            MultiStreamPipeline(sources, detector, BatchPolicy(4, (2, 4), 20))
        assert len(caplog.records) == 1
        assert "a batch of 4 never forms with 2 streams" in caplog.records[0].getMessage()
        assert "at most 2" in caplog.records[0].getMessage()
    finally:
        model.close()


def test_a_streams_ring_stays_until_the_model_is_done_with_its_frames(tmp_path: Path):
    # two frames of each stream in flight: when a source ends, frames of it may still wait in the
    # batcher; its ring (the frames' pixels) must outlive them
    model = tiny_model(tmp_path / "batch.onnx", "batch")
    try:
        detector = make_batch_detector(model, max_batch_size=2)
        holding: List[bool] = []
        detect_batch = detector.detect_batch
        detector.detect_batch = lambda frames: (holding.extend(f.image is not None for f in frames), detect_batch(frames))[1]
        with MultiStreamPipeline([("a", uri(4)), ("b", uri(5))], detector, BatchPolicy(2, (), 20), frames_in_flight=2) as p:
            indices: Dict[str, List[int]] = {}
            for r in p.results(timeout=60):
                indices.setdefault(r.stream, []).append(r.index)
        assert indices == {"a": list(range(FRAMES)), "b": list(range(FRAMES))}
        assert holding == [True] * 2 * FRAMES
    finally:
        model.close()


class EndsAfter(SyntheticSource):
    """A synthetic source that says when it is closed (its ring has been stopped)."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()
        super().close()


def test_the_last_frame_of_the_last_stream_goes_at_once_and_before_its_ring_stops(tmp_path: Path):
    # one stream of 3 frames, 2 in flight, batches of 2 and a delay no test waits out: frames 0
    # and 1 fill a batch; frame 2 goes when the stream ends (the batcher closes), and the ring it
    # is in is stopped only after the model is done with it
    model = tiny_model(tmp_path / "batch.onnx", "batch")
    source = EndsAfter("synthetic://faces?width=320&height=160&frames=3&seed=6&count=3")
    try:
        detector = make_batch_detector(model, max_batch_size=2)
        seen: List[tuple] = []
        detect_batch = detector.detect_batch

        def detect(frames):
            # with the ring kept, the source cannot be closed before this call returns: the wait runs out
            closed_meanwhile = source.closed.wait(0.5)
            seen.append((len(frames), closed_meanwhile, all(f.image is not None for f in frames)))
            return detect_batch(frames)

        detector.detect_batch = detect
        with MultiStreamPipeline([("a", source)], detector, BatchPolicy(2, (), 3_600_000), frames_in_flight=2) as p:
            indices = [r.index for r in p.results(timeout=30)]
        assert indices == [0, 1, 2]
        assert seen == [(2, False, True), (1, False, True)]
        assert p.stats()["batcher"]["histogram"] == {1: 1, 2: 1}
    finally:
        model.close()


def test_each_stream_has_its_own_tracks_in_its_frame_order(tmp_path: Path):
    """Two streams of the same clip get the same ids (one tracker each: a shared one would number
    the second stream's objects on), and each stream's ids are those of a tracker run on its
    detections alone, frame by frame; with tracking off there are none."""
    from edge_sdk.tracking.tracker import ByteTracker, TrackingConfig

    model = tiny_model(tmp_path / "batch.onnx", "batch")
    try:
        runs = {}
        for tracking in (TrackingConfig(), TrackingConfig(enabled=False)):
            detector = make_batch_detector(model, max_batch_size=3)
            with MultiStreamPipeline([(sid, uri(seed)) for sid, seed in (("a", 4), ("b", 4), ("c", 5))], detector,
                                     BatchPolicy(3, (3,), max_queue_delay_ms=60_000), tracking=tracking) as pipeline:
                results = list(pipeline.results(timeout=60))
            runs[tracking.enabled] = {sid: [r.detections for r in results if r.stream == sid] for sid in "abc"}
        tracked = runs[True]
        assert all("track_id" not in d.data for dets in runs[False].values() for d in dets)
        assert sum(len(d) for d in tracked["a"]) > FRAMES  # boxes to track
        ids = {sid: [d.data["track_id"].tolist() for d in dets] for sid, dets in tracked.items()}
        assert ids["a"] == ids["b"]
        for sid, dets in tracked.items():
            alone = ByteTracker()
            assert ids[sid] == [alone.update(d).tolist() for d in dets], sid
            assert max(max(frame, default=0) for frame in ids[sid]) >= 1
    finally:
        model.close()
