"""The Pipeline end to end: real ONNX Runtime inference on tiny and real models."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from edge_sdk.detections import Detections, match_detections
from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.runtime.config import CacheConfig, PipelineConfig, ReconnectConfig, SourceConfig
from edge_sdk.runtime.pipeline import Detector, Pipeline
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import RESULT_STAGES, FrameDetections
from astronaut import assert_finds_her_face, astronaut_bgr
from runtime_factories import FakeCamera, ListSource, scene, write_bundle


def config(uri: str = "", bundle: Any = None, **kw: Any) -> PipelineConfig:
    kw.setdefault("threads", 1)
    return PipelineConfig(source=SourceConfig(uri), bundle=str(bundle) if bundle else None, **kw)


def square_frame(index: int, width: int = 256, height: int = 128, size: int = 64) -> np.ndarray:
    frame = np.full((height, width, 3), 10, np.uint8)
    x = 16 + (index * 24) % (width - size - 32)
    frame[32 : 32 + size, x : x + size] = 250
    return frame


def test_video_file_through_the_tiny_model(tiny_bundle: Path, video_factory) -> None:
    path = video_factory(frames=8, width=128, height=96)
    with Pipeline(config(str(path), tiny_bundle, cache=CacheConfig(enabled=False))) as pipeline:
        results = [(r.index, r.latency_ms, r.frame.shape, r.to_json()) for r in pipeline]
    assert [r[0] for r in results] == list(range(8))
    for _, latency, shape, line in results:
        assert set(latency) == set(RESULT_STAGES) | {"total"}  # [tracking] is on by default
        assert latency["total"] >= latency["infer"] > 0
        assert shape == (96, 128, 3)
        assert json.loads(json.dumps(line))["frame"] == line["frame"]
    assert pipeline.stats.frames_processed == 8 and pipeline.stats.frames_captured == 8


def test_boxes_come_back_in_frame_pixels(tiny_bundle: Path) -> None:
    frames = [square_frame(i) for i in range(4)]
    with Pipeline(config(bundle=tiny_bundle), source=ListSource(frames)) as pipeline:
        results = [(r.index, r.detections) for r in pipeline]
    # By hand: the 256x128 frame shrinks 4x into the 64x32 input (no padding); the tiny model
    # scores each 4x4 input cell, i.e. each 16x16 frame cell, sigmoid((mean - 128) / 4), and
    # boxes it exactly. Cells wholly inside the square (x0..x0+64, 32..96) score ~1 and are
    # kept; a half-covered cell scores sigmoid(0.5) = 0.62 beside a neighbour of ~1, so it is
    # not a local maximum. Square x0 = 16, 40, 64, 88 -> whole frame cells x = 1..4, 3..5,
    # 4..7, 6..8; rows y = 2..5 (32..96).
    cells_x = {0: range(1, 5), 1: range(3, 6), 2: range(4, 8), 3: range(6, 9)}
    assert [i for i, _ in results] == [0, 1, 2, 3]
    for i, det in results:
        want = sorted([16.0 * x, 16.0 * y, 16.0 * x + 16, 16.0 * y + 16] for x in cells_x[i] for y in range(2, 6))
        assert sorted(det.xyxy.tolist()) == want, (i, det.xyxy)
        np.testing.assert_allclose(det.confidence, 1.0, atol=1e-6)


@pytest.mark.parametrize("enabled, hits", [(True, 5), (False, 0)])
def test_prediction_cache_in_the_pipeline(tiny_bundle: Path, enabled: bool, hits: int) -> None:
    frames = [square_frame(0)] * 6
    cfg = config(bundle=tiny_bundle, cache=CacheConfig(enabled=enabled))
    with Pipeline(cfg, source=ListSource(frames)) as pipeline:
        results = list((r.cached, r.detections, dict(r.latency_ms)) for r in pipeline)
    assert pipeline.stats.cache_hits == hits
    assert [c for c, _, _ in results] == [False] + [enabled] * 5
    if enabled:
        assert all(np.shares_memory(d.xyxy, results[0][1].xyxy) for _, d, _ in results)  # the cache's boxes
        assert "infer" not in results[1][2] and "total" in results[1][2]


def test_max_frames(tiny_bundle: Path) -> None:
    cfg = config("synthetic://faces?width=256&height=128&count=2&min_size=16&max_size=24", tiny_bundle, max_frames=5)
    with Pipeline(cfg) as pipeline:
        assert sum(1 for _ in pipeline) == 5


def test_camera_that_vanishes_is_reported_and_the_stream_continues(tiny_bundle: Path) -> None:
    cam = FakeCamera(width=128, height=64, fail_reads=(4,), fail_opens=2)
    events: List[Dict[str, Any]] = []
    cfg = config(bundle=tiny_bundle, max_frames=12, reconnect=ReconnectConfig(initial_s=0.001, max_s=0.002, max_attempts=5))
    with Pipeline(cfg, source=cam, on_event=events.append) as pipeline:
        infos = [r.info for r in pipeline]
    assert len(infos) == 12
    assert [e["event"] for e in events] == ["source_lost", "source_reconnected"]
    # the events ride on exactly one result, the first frame delivered after the loss
    carried = [[e["event"] for e in info["events"]] for info in infos if "events" in info]
    assert carried == [["source_lost", "source_reconnected"]], infos
    assert pipeline.stats.reconnects == 1 and pipeline.stats.source_errors == 3


def test_size_change_mid_stream_is_handled(tiny_bundle: Path) -> None:
    frames = [square_frame(0, 256, 128), square_frame(0, 256, 128), np.ascontiguousarray(square_frame(0, 512, 256, 128))]
    with Pipeline(config(bundle=tiny_bundle, cache=CacheConfig(enabled=False)), source=ListSource(frames)) as pipeline:
        results = [(r.frame.shape, r.detections.xyxy.copy(), r.info) for r in pipeline]
    assert [s for s, _, _ in results] == [(128, 256, 3), (128, 256, 3), (256, 512, 3)]
    # the size change is reported with the frame that brought it (beside any capture event, such as
    # leaving the idle scheduling class on a loaded machine), and with no other frame
    assert [[e["event"] for e in info.get("events", []) if e["event"] == "frame_size_changed"]
            for _, _, info in results] == [[], [], ["frame_size_changed"]]
    big = results[2][1]
    centres = (big[:, :2] + big[:, 2:]) / 2
    # the square is 16..144 x 32..160 in the bigger frame (16..80 x 32..96 in the first ones)
    assert np.all((centres >= [16, 32]) & (centres <= [144, 160])), centres
    assert big[:, 2].max() > 100 and results[0][1][:, 2].max() <= 96


class RecordingDetector(Detector):
    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.frames = 0

    def detect(self, frame: Frame) -> FrameDetections:
        self.frames += 1
        return FrameDetections(Detections(np.array([[0, 0, 1, 1]]), np.array([0.9]), np.array([self.tag])),
                               info={"detector": self.tag})


def test_injected_detector_and_hot_swap() -> None:
    first, second = RecordingDetector(1), RecordingDetector(2)
    cfg = config(cache=CacheConfig(enabled=False))
    with Pipeline(cfg, source=ListSource([scene(i) for i in range(10)]), detector=first) as pipeline:
        tags = []
        swapped = None
        for result in pipeline:
            tags.append(result.info["detector"])
            if result.index == 3:
                swapped = pipeline.swap_detector(second)
                assert not swapped.is_set()
    assert swapped is not None and swapped.is_set()
    assert tags == [1] * 4 + [2] * 6 and first.frames == 4 and second.frames == 6


def test_a_swap_whose_input_buffers_cannot_be_made_raises_to_the_caller_and_the_old_detector_runs_on() -> None:
    from edge_sdk.preprocess import InputSpec

    first, second = RecordingDetector(1), RecordingDetector(2)
    spec = InputSpec(name="input", shape=[1, 3, 32, 32])
    spec.dtype = "no-such-dtype"  # past the spec's own checks: numpy refuses it when the buffers are made
    second.prepared_spec = spec
    cfg = config(cache=CacheConfig(enabled=False), preprocess="capture")
    with Pipeline(cfg, source=ListSource([scene(i) for i in range(10)]), detector=first) as pipeline:
        tags = []
        for result in pipeline:
            tags.append(result.info["detector"])
            if result.index == 3:
                with pytest.raises(TypeError):
                    pipeline.swap_detector(second)
    assert tags == [1] * 10 and second.frames == 0 and pipeline.detector is first


def test_tiles_mode_plugs_in_the_roi_strategy(tiny_bundle: Path) -> None:
    from edge_sdk.runtime.detectors.full import FullFrameDetector

    cfg = config("synthetic://faces?width=256&height=128&count=2&min_size=16&max_size=24", tiny_bundle, mode="tiles", max_frames=2)
    with Pipeline(cfg) as pipeline:
        results = list(pipeline)
        assert not isinstance(pipeline.detector, FullFrameDetector)
    assert len(results) == 2 and all("total" in r.latency_ms for r in results)


def test_no_bundle_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no bundle"):
        Pipeline(config("synthetic://faces")).open()


def test_corrupt_and_newer_bundles_are_refused(tiny_bundle: Path, tmp_path: Path) -> None:
    from runtime_factories import CENTERFACE_DECODER
    from edge_sdk.preprocess import InputSpec

    spec = InputSpec(name="input.1", shape=[1, 3, 32, 64])
    corrupt = write_bundle(tmp_path / "corrupt", tiny_bundle / "model.onnx", spec, CENTERFACE_DECODER)
    with open(corrupt / "model.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(BundleError, match="fails its sha256 check"):
        Pipeline(config("synthetic://faces", corrupt)).open()
    newer = write_bundle(tmp_path / "newer", tiny_bundle / "model.onnx", spec, CENTERFACE_DECODER, schema_version=99)
    with pytest.raises(BundleError, match="newer than this runtime"):
        Pipeline(config("synthetic://faces", newer)).open()


def test_source_error_after_open_leaves_nothing_running(tiny_bundle: Path) -> None:
    before = threading.active_count()
    pipeline = Pipeline(config(bundle=tiny_bundle), source=ListSource([scene(0), ValueError("broken decoder")]))
    with pytest.raises(ValueError, match="broken decoder"):
        with pipeline:
            for _ in pipeline:
                pass
    assert threading.active_count() == before
    assert pipeline.backend is not None and not pipeline.backend.is_active


# -- the real default model -------------------------------------------------------------------


@pytest.mark.host  # fixing the model's input size needs onnx
def test_centerface_finds_the_astronaut(centerface_bundle: Path, tmp_path: Path) -> None:
    import cv2

    cv2.imwrite(str(tmp_path / "astronaut.png"), astronaut_bgr())
    with Pipeline(config(str(tmp_path / "astronaut.png"), centerface_bundle, threads=2)) as pipeline:
        (result,) = list(pipeline)
    assert_finds_her_face(result.detections)


@pytest.mark.host
def test_centerface_on_the_synthetic_scene_matches_its_ground_truth(centerface_bundle: Path) -> None:
    uri = "synthetic://faces?width=1280&height=720&count=8&seed=2&min_size=56&max_size=96&frames=6"
    with Pipeline(config(uri, centerface_bundle, threads=2, cache=CacheConfig(enabled=False))) as pipeline:
        scores = [match_detections(r.detections, r.ground_truth, iou=0.3) for r in pipeline]
    assert len(scores) == 6
    recall = np.mean([s["recall"] for s in scores])
    precision = np.mean([s["precision"] for s in scores])
    assert recall >= 0.6 and precision >= 0.6, (recall, precision)


@pytest.mark.parametrize(
    "backend,nice,idle",
    [
        ("onnxruntime-cpu", 10, True),  # inference owns the cores: capture takes only idle ones
        ("onnxruntime-cpu", 0, False),  # capture_nice 0 asks for no lowering at all
        (None, 10, False),  # an injected detector without a backend: nothing is known
    ],
)
def test_capture_is_idle_class_only_beside_cpu_inference(tiny_bundle: Path, backend: Any, nice: int, idle: bool) -> None:
    cfg = config("synthetic://faces?width=64&height=32&count=1&min_size=8&max_size=12&frames=2", tiny_bundle,
                 capture_nice=nice, **({"backend": backend} if backend else {}))
    detector = None if backend else _EmptyDetector()
    with Pipeline(cfg, detector=detector) as pipeline:
        assert len(list(pipeline)) == 2
        assert pipeline.capture is not None and pipeline.capture.idle is idle
        if backend:
            assert pipeline.backend is not None and pipeline.backend.cpu_bound


class _EmptyDetector(Detector):
    def detect(self, frame: Frame) -> FrameDetections:
        return FrameDetections(Detections.empty())


@pytest.mark.parametrize("mode", ["full", "tiles", "roi"])
def test_track_ids_in_every_mode_are_those_of_a_tracker_on_the_modes_detections(tiny_bundle: Path, mode: str) -> None:
    from edge_sdk.tracking.tracker import ByteTracker, TrackingConfig

    frames = [square_frame(i) for i in range(8)]
    runs = {}
    for enabled in (False, True):
        cfg = config(bundle=tiny_bundle, mode=mode, cache=CacheConfig(enabled=False), tracking=TrackingConfig(enabled=enabled))
        with Pipeline(cfg, source=ListSource(frames)) as pipeline:
            runs[enabled] = [(r.detections, dict(r.latency_ms)) for r in pipeline]
            assert (pipeline.tracking is not None) == enabled
    assert all("track_id" not in d.data and "track" not in lat for d, lat in runs[False])
    alone = ByteTracker()
    expected = [alone.update(d).tolist() for d, _ in runs[False]]
    assert [d.data["track_id"].tolist() for d, _ in runs[True]] == expected
    assert all(lat["track"] >= 0 for _, lat in runs[True]) and max(max(ids, default=0) for ids in expected) >= 1


def test_in_mode_roi_the_scheduler_follows_the_streams_one_tracker(tiny_bundle: Path) -> None:
    """The ROI scheduler proposes regions from the tracker whose ids the results carry: the
    stream's one tracker, moved once a frame (by the scheduler; the pipeline does not again)."""
    from edge_sdk.tracking.tracker import ByteTracker

    frames = [square_frame(i) for i in range(8)]
    cfg = config(bundle=tiny_bundle, mode="roi", cache=CacheConfig(enabled=False))
    with Pipeline(cfg, source=ListSource(frames)) as pipeline:
        results = list(pipeline)
        assert pipeline.tracking is not None
        tracker = pipeline.tracking.tracker(results[0].stream)
        assert pipeline.detector.strategy.tracker is tracker
    assert tracker.frame == len(results) == len(frames)
    alone = ByteTracker()  # the ids of one tracker moved once a frame by exactly these detections
    assert [r.detections.data["track_id"].tolist() for r in results] == [alone.update(r.detections).tolist() for r in results]
    assert max(len(r.tracks) for r in results) >= 1
    assert all(r.latency_ms["track"] > 0 for r in results)


class _SilentAfter(Detector):
    """One box in the first `frames` frames, none after (a detector that stops seeing anything)."""

    def __init__(self, frames: int) -> None:
        self.frames = frames

    def detect(self, frame: Frame) -> FrameDetections:
        if frame.index < self.frames:
            return FrameDetections(Detections(np.array([[40.0, 40.0, 80.0, 80.0]]), np.array([0.9]), np.array([0])))
        return FrameDetections(Detections.empty())


def test_a_detector_silent_for_10_s_keeps_tracks_for_the_buffer_at_the_sources_fps_then_ends_them() -> None:
    from edge_sdk.tracking.tracker import TrackingConfig

    source = ListSource([scene(i) for i in range(105)])
    source.fps = 10.0  # its native rate: 100 frames are 10 s, a 2 s buffer 20 frames
    cfg = config(cache=CacheConfig(enabled=False), tracking=TrackingConfig(buffer_s=2.0))
    lost, active = [], []
    with Pipeline(cfg, source=source, detector=_SilentAfter(5)) as pipeline:
        for result in pipeline:
            tracker = pipeline.tracking.trackers["0"]
            lost.append(tracker.lost_ids)
            active.append(result.detections.data["track_id"].tolist())
    assert active[:5] == [[1]] * 5
    assert lost[5:25] == [[1]] * 20 and lost[25:] == [[]] * 80
