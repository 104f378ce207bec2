"""SSD-style decoding: per-prior boxes and class scores, several box formats."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.decoders import make_decoder
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec, plan_transform

H, W, B, C = 300, 300, 200, 6
SPEC = InputSpec(shape=[1, 3, H, W], color="RGB")
IDENTITY = Placement.affine(1.0, 1.0, 0.0, 0.0, W, H)
BOXES = np.array([[30.0, 45.0, 120.0, 150.0], [150.0, 10.0, 290.0, 100.0]], np.float32)
CLASSES = [3, 1]
SCORES = [0.9, 0.7]
SLOTS = [5, 150]


def encode(boxes, classes, scores, box_format="xyxy", normalized=True, background=0):
    raw = np.zeros((1, B, 4), np.float32)
    probs = np.zeros((1, B, C), np.float32)
    if background is not None:
        probs[0, :, background] = 1.0  # every prior is background...
    for slot, box, c, s in zip(SLOTS, boxes, classes, scores):
        b = np.asarray(box, np.float64) / ([W, H, W, H] if normalized else 1.0)
        raw[0, slot] = b if box_format == "xyxy" else b[[1, 0, 3, 2]]
        probs[0, slot] = 0.0  # ...except the ones holding objects
        probs[0, slot, c] = s
        if background is not None:
            probs[0, slot, background] = 1.0 - s
    return raw, probs


@pytest.mark.parametrize("box_format", ["xyxy", "yxyx"])
@pytest.mark.parametrize("normalized", [True, False])
def test_decodes_known_boxes(box_format: str, normalized: bool) -> None:
    raw, probs = encode(BOXES, CLASSES, SCORES, box_format, normalized)
    spec = {"type": "ssd", "box_format": box_format, "normalized": normalized, "score_threshold": 0.5}
    [det] = make_decoder(spec, SPEC)([raw, probs], [IDENTITY])
    np.testing.assert_allclose(det.xyxy, BOXES, atol=1e-3)
    np.testing.assert_allclose(det.confidence, SCORES, atol=1e-6)
    assert det.class_id.tolist() == CLASSES


def test_background_class_is_never_reported() -> None:
    raw, probs = encode(BOXES, CLASSES, SCORES)
    [det] = make_decoder({"type": "ssd", "score_threshold": 0.5}, SPEC)([raw, probs], [IDENTITY])
    assert 0 not in det.class_id.tolist() and len(det) == 2
    [raw_bg] = make_decoder({"type": "ssd", "score_threshold": 0.5, "background_class": None}, SPEC)([raw, probs], [IDENTITY])
    assert (raw_bg.class_id == 0).sum() == B - 2  # without it, every empty prior is a "class 0" box


def test_outputs_in_either_order() -> None:
    raw, probs = encode(BOXES, CLASSES, SCORES)
    auto = make_decoder({"type": "ssd", "score_threshold": 0.5}, SPEC)
    np.testing.assert_allclose(auto([probs, raw], [IDENTITY])[0].xyxy, BOXES, atol=1e-3)
    named = make_decoder({"type": "ssd", "score_threshold": 0.5, "outputs": ["scores", "boxes"]}, SPEC)
    np.testing.assert_allclose(named([probs, raw], [IDENTITY])[0].xyxy, BOXES, atol=1e-3)


@pytest.mark.parametrize("activation", ["softmax", "sigmoid"])
def test_logits_go_through_the_activation(activation: str) -> None:
    raw, probs = encode(BOXES, CLASSES, SCORES)
    if activation == "softmax":
        logits = np.log(np.clip(probs, 1e-9, 1.0))
    else:
        p = np.clip(probs, 1e-6, 1 - 1e-6)
        logits = np.log(p / (1 - p))
    spec = {"type": "ssd", "score_threshold": 0.5, "score_activation": activation}
    [det] = make_decoder(spec, SPEC)([raw, logits.astype(np.float32)], [IDENTITY])
    np.testing.assert_allclose(det.confidence, SCORES, atol=1e-4)
    assert det.class_id.tolist() == CLASSES


def test_letterboxed_frame_pixels() -> None:
    transform, _ = plan_transform(1280, 720, W, H, "letterbox")
    frame_boxes = np.array([[100, 100, 400, 300], [700, 200, 1200, 700]], np.float32)
    raw, probs = encode(transform.forward(frame_boxes), CLASSES, SCORES)
    [det] = make_decoder({"type": "ssd", "score_threshold": 0.5}, SPEC)([raw, probs], [transform])
    np.testing.assert_allclose(det.xyxy, frame_boxes, atol=1e-3 * 1280 / W)


@pytest.mark.parametrize(
    "spec, shapes, error, message",
    [
        ({"type": "ssd"}, [(1, B, 4)], BackendError, r"expects two outputs"),
        ({"type": "ssd"}, [(1, B, 4), (1, B + 1, C)], BackendError, r"same B"),
        ({"type": "ssd", "num_classes": 91}, [(1, B, 4), (1, B, C)], BackendError, r"6 classes.*says 91"),
        ({"type": "ssd", "background_class": 7}, [(1, B, 4), (1, B, C)], BackendError, r"background_class is 7"),
        ({"type": "ssd"}, [(1, B, 4), (B, C)], BackendError, r"scores \[N, B, classes\]"),
        ({"type": "ssd", "box_format": "cxcywh"}, [(1, B, 4), (1, B, C)], ConfigError, r"decoder.box_format"),
        ({"type": "ssd", "outputs": ["boxes"]}, [(1, B, 4), (1, B, C)], ConfigError, r"decoder.outputs"),
    ],
)
def test_wrong_outputs_or_spec(spec, shapes, error, message) -> None:
    with pytest.raises(error, match=message):
        make_decoder(spec, SPEC)([np.zeros(s, np.float32) for s in shapes], [IDENTITY])
