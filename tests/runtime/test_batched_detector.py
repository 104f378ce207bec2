"""Frames of several streams in one backend call, on the real default model in ONNX Runtime:
row i's detections are those of a single-frame run on frame i (FullFrameDetector on another
session of the model, with its batch fixed at 1), and the frames differ in size."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import pytest

from astronaut import FACE, assert_finds_her_face, astronaut_bgr
from batch_model import dynamic_batch_path  # noqa: F401 (a fixture)
from edge_sdk.detections import box_iou
from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend
from edge_sdk.preprocess import Preprocessor
from edge_sdk.runtime.detectors.base import PreparedInput, PreparedPlanes, model_decoder
from edge_sdk.runtime.detectors.batched import StreamBatchDetector, make_batch_detector
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.model import Model
from runtime_factories import CENTERFACE_DECODER, CENTERFACE_SPEC

pytestmark = pytest.mark.host  # the batch axis is set with onnx


def model_of(path: Path) -> Model:
    backend = OnnxRuntimeBackend(path, provider="cpu", threads=1)
    backend.activate()
    return Model(backend, CENTERFACE_SPEC, dict(CENTERFACE_DECODER))


@pytest.fixture(scope="module")
def dynamic_model(dynamic_batch_path: Path):
    model = model_of(dynamic_batch_path)
    yield model
    model.close()


@pytest.fixture(scope="module")
def single_model(centerface_384x640_path: Path):
    model = model_of(centerface_384x640_path)
    yield model
    model.close()


def frames() -> List[Frame]:
    """Four streams, four sizes: her photo, the photo on a 1280 x 720 canvas, the photo at 3/4
    size, and an empty grey frame."""
    photo = astronaut_bgr()
    canvas = np.full((720, 1280, 3), 90, np.uint8)
    canvas[100:612, 400:912] = photo
    small = np.ascontiguousarray(photo[::4, ::4].repeat(3, axis=0).repeat(3, axis=1))  # 384 x 384
    grey = np.full((480, 640, 3), 127, np.uint8)
    return [Frame(img, index=i, stream_id=sid) for i, (sid, img) in
            enumerate([("cam0", photo), ("cam1", canvas), ("cam2", small), ("cam3", grey)])]


def single_frame_oracle(model: Model, frame: Frame):
    detector = FullFrameDetector(model.backend, model_decoder(model), model.input_spec)
    return detector.detect(Frame(frame.image.copy())).detections


def assert_same_detections(got, want) -> None:
    assert len(got) == len(want), (got.xyxy, want.xyxy)
    np.testing.assert_allclose(got.xyxy, want.xyxy, atol=0.05)
    np.testing.assert_allclose(got.confidence, want.confidence, atol=1e-4)


def test_frames_of_four_streams_in_one_call_match_single_frame_runs(dynamic_model, single_model):
    detector = make_batch_detector(dynamic_model, max_batch_size=4)
    batch = frames()
    found = detector.detect_batch(batch)
    assert detector.batch.inferences == 1  # one backend call for the four frames
    assert detector.describe()["batch"]["calls"] == "one call per batch of up to 4 frames"
    assert len(found) == 4
    for frame, result in zip(batch, found):
        assert_same_detections(result.detections, single_frame_oracle(single_model, frame))
    assert_finds_her_face(found[0].detections)
    assert len(found[1].detections) == 1 and len(found[2].detections) == 1 and len(found[3].detections) == 0
    moved = found[1].detections.xyxy - np.array([400, 100, 400, 100], np.float32)
    assert box_iou(moved, FACE)[0, 0] >= 0.6  # her face on the canvas, in the canvas's pixels
    for row, result in enumerate(found):
        assert result.info["batch"] == {"size": 4, "row": row}
        assert set(result.latency) == {"preprocess", "infer", "decode", "merge"}
        assert result.latency["infer"] == found[0].latency["infer"] > 0  # the one call each frame waited for


def test_more_frames_than_the_max_go_in_calls_of_the_max_and_the_last_is_cut(dynamic_model, single_model):
    detector = make_batch_detector(dynamic_model, max_batch_size=3)
    shapes = []
    infer = detector.batch.infer
    detector.batch.infer = lambda feed: (shapes.append(feed["input.1"].shape), infer(feed))[1]
    batch = frames() + frames()[:1]  # five
    found = detector.detect_batch(batch)
    assert shapes == [(3, 3, 384, 640), (2, 3, 384, 640)]  # the second call has two rows, not three
    assert [r.info["batch"] for r in found] == [{"size": 3, "row": 0}, {"size": 3, "row": 1}, {"size": 3, "row": 2},
                                                {"size": 2, "row": 0}, {"size": 2, "row": 1}]
    for frame, result in zip(batch, found):
        assert_same_detections(result.detections, single_frame_oracle(single_model, frame))


def test_a_model_fixed_at_batch_one_runs_the_frames_one_call_each(single_model):
    detector = make_batch_detector(single_model, max_batch_size=4)
    assert detector.fixed_batch == 1
    assert "consecutive calls" in detector.describe()["batch"]["calls"]
    batch = frames()
    found = detector.detect_batch(batch)
    assert detector.batch.inferences == 4
    for frame, result in zip(batch, found):
        assert_same_detections(result.detections, single_frame_oracle(single_model, frame))


class ShapeUntoldBackend(OnnxRuntimeBackend):
    """A backend that cannot tell its input's shape (as Backend's default)."""

    def input_shape(self, name=None):
        return None


def test_a_backend_that_cannot_tell_its_batch_runs_the_bundles_batch(dynamic_batch_path: Path):
    backend = ShapeUntoldBackend(dynamic_batch_path, provider="cpu", threads=1)
    with backend:
        model = Model(backend, CENTERFACE_SPEC, dict(CENTERFACE_DECODER))
        detector = make_batch_detector(model, max_batch_size=2)
        assert detector.fixed_batch == CENTERFACE_SPEC.batch == 1
        detector.detect_batch(frames()[:2])
        assert detector.batch.inferences == 2


def test_a_frame_prepared_ahead_is_taken_as_it_is(dynamic_model, single_model):
    batch = frames()[:2]
    prepared = PreparedInput(dynamic_model.input_spec)
    prepared.fill(batch[1].image)
    batch[1].prepared = prepared
    batch[1].image = np.zeros((8, 8, 3), np.uint8)  # what the row holds comes from `prepared` alone
    found = make_batch_detector(dynamic_model, max_batch_size=2).detect_batch(batch)
    assert_same_detections(found[1].detections, single_frame_oracle(single_model, frames()[1]))
    assert found[1].latency["preprocess"] >= prepared.ms


def planes_of(frame: Frame) -> PreparedPlanes:
    prepared = PreparedPlanes(CENTERFACE_SPEC)
    prepared.fill(frame.image, Preprocessor(CENTERFACE_SPEC, batch=0))
    assert prepared.ready and prepared.planes.dtype == np.uint8
    frame.prepared = prepared
    frame.image = np.zeros((8, 8, 3), np.uint8)  # what the detector sees comes from `prepared` alone
    return prepared


def test_frames_prepared_ahead_as_uint8_planes_are_converted_into_their_rows(dynamic_model, single_model):
    batch = frames()
    prepared = [planes_of(batch[1]), planes_of(batch[2])]
    found = make_batch_detector(dynamic_model, max_batch_size=4).detect_batch(batch)
    for i in range(4):
        assert_same_detections(found[i].detections, single_frame_oracle(single_model, frames()[i]))
    assert len(found[1].detections) == 1 and len(found[2].detections) == 1
    assert found[1].latency["preprocess"] >= prepared[0].ms


def test_a_single_frame_detector_takes_a_frame_prepared_as_uint8_planes(single_model):
    frame = frames()[1]
    planes_of(frame)
    detector = FullFrameDetector(single_model.backend, model_decoder(single_model), single_model.input_spec)
    found = detector.detect(frame)
    assert_same_detections(found.detections, single_frame_oracle(single_model, frames()[1]))
    assert len(found.detections) == 1


def recorded_shapes(model: Model, monkeypatch) -> List[tuple]:
    shapes: List[tuple] = []
    infer = model.backend.infer
    monkeypatch.setattr(model.backend, "infer", lambda feed: (shapes.append(next(iter(feed.values())).shape),
                                                              infer(feed))[1])
    return shapes


def test_a_free_batch_runs_its_largest_batch_once_before_the_first(dynamic_model, single_model, monkeypatch):
    shapes = recorded_shapes(dynamic_model, monkeypatch)
    detector = make_batch_detector(dynamic_model, max_batch_size=3)
    batch = frames()
    found = detector.detect_batch(batch[1:2]) + detector.detect_batch(batch[:2])
    spec = dynamic_model.input_spec
    assert shapes == [(3, 3, spec.height, spec.width), (1, 3, spec.height, spec.width), (2, 3, spec.height, spec.width)]
    assert detector.batch.inferences == 2  # the lay-out run is not a batch
    for result, frame in zip(found, [batch[1], batch[0], batch[1]]):
        assert_same_detections(result.detections, single_frame_oracle(single_model, frame))


def test_a_fixed_batch_runs_no_lay_out_batch(single_model, monkeypatch):
    shapes = recorded_shapes(single_model, monkeypatch)
    make_batch_detector(single_model, max_batch_size=2).detect_batch(frames()[:1])
    assert shapes == [(1, 3, single_model.input_spec.height, single_model.input_spec.width)]


def test_a_frame_that_is_not_a_bgr_image_is_refused_by_name(dynamic_model):
    batch = frames()[:2]
    batch[1].image = batch[1].image[:, :, 0]
    detector = make_batch_detector(dynamic_model, max_batch_size=2)
    with pytest.raises(SourceError, match="BGR uint8"):
        detector.detect_batch(batch)
    assert detector.stage == "preprocess"


@pytest.mark.parametrize("size", [0, -1, 2.0, True])
def test_max_batch_size_must_be_a_positive_integer(dynamic_model, size):
    with pytest.raises(ConfigError, match="max_batch_size"):
        StreamBatchDetector(dynamic_model.backend, model_decoder(dynamic_model), dynamic_model.input_spec, size)
