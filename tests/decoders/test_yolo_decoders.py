"""YOLOv5, YOLOv8/YOLO11 and YOLOX decoding on hand-built outputs that encode known boxes."""
from __future__ import annotations

from typing import List

import numpy as np
import pytest

from edge_sdk.decoders import make_decoder
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec, plan_transform

H, W, C = 384, 640, 3
SPEC = InputSpec(shape=[1, 3, H, W], color="RGB")
IDENTITY = Placement.affine(1.0, 1.0, 0.0, 0.0, W, H)
STRIDES = (8, 16, 32)
ROWS = sum((H // s) * (W // s) for s in STRIDES)  # 5040

BOXES = np.array([[100.5, 50.25, 180.75, 140.0], [300.0, 200.0, 340.0, 260.0], [500.0, 10.0, 630.0, 370.0]], np.float32)
CLASSES = [2, 0, 1]
SCORES = [0.9, 0.8, 0.6]
SLOTS = [17, 2500, 5001]  # anchor rows carrying the boxes


def cxcywh(box: np.ndarray) -> List[float]:
    x1, y1, x2, y2 = [float(v) for v in box]
    return [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def encode_v5(boxes, classes, scores, rows=ROWS, obj=1.0) -> np.ndarray:
    out = np.zeros((1, rows, 5 + C), np.float32)
    out[0, :, 5:] = 0.01
    for slot, box, c, s in zip(SLOTS, boxes, classes, scores):
        out[0, slot, :4] = cxcywh(box)
        out[0, slot, 4] = obj
        out[0, slot, 5 + c] = s / obj
    return out


def encode_v8(boxes, classes, scores, rows=8400) -> np.ndarray:
    out = np.zeros((1, 4 + C, rows), np.float32)
    for slot, box, c, s in zip(SLOTS, boxes, classes, scores):
        out[0, :4, slot] = cxcywh(box)
        out[0, 4 + c, slot] = s
    return out


def grid_of(row: int):
    for s in STRIDES:
        gh, gw = H // s, W // s
        if row < gh * gw:
            return row % gw, row // gw, s
        row -= gh * gw
    raise IndexError(row)


def encode_yolox_raw(boxes, classes, scores) -> np.ndarray:
    out = encode_v5(boxes, classes, scores)
    for slot, box in zip(SLOTS, boxes):
        gx, gy, s = grid_of(slot)
        cx, cy, w, h = cxcywh(box)
        out[0, slot, :4] = [cx / s - gx, cy / s - gy, np.log(w / s), np.log(h / s)]
    return out


def decode(spec, outputs, transforms=(IDENTITY,)):
    return make_decoder(spec, SPEC)(outputs, list(transforms))


CASES = {
    "yolov5": ({"type": "yolov5"}, lambda: [encode_v5(BOXES, CLASSES, SCORES)]),
    "yolov5-objectness": ({"type": "yolov5"}, lambda: [encode_v5(BOXES, CLASSES, SCORES, obj=0.95)]),
    "yolov8": ({"type": "yolov8"}, lambda: [encode_v8(BOXES, CLASSES, SCORES)]),
    "yolo11": ({"type": "yolo11", "num_classes": C}, lambda: [encode_v8(BOXES, CLASSES, SCORES)]),
    "yolov8-boxes-first": ({"type": "yolov8", "layout": "boxes_first"}, lambda: [np.ascontiguousarray(encode_v8(BOXES, CLASSES, SCORES).transpose(0, 2, 1))]),
    "yolov8-auto-boxes-first": ({"type": "yolov8", "num_classes": C}, lambda: [np.ascontiguousarray(encode_v8(BOXES, CLASSES, SCORES).transpose(0, 2, 1))]),
    "yolox-raw": ({"type": "yolox"}, lambda: [encode_yolox_raw(BOXES, CLASSES, SCORES)]),
    "yolox-decoded": ({"type": "yolox", "decoded": True}, lambda: [encode_v5(BOXES, CLASSES, SCORES)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decodes_known_boxes(case: str) -> None:
    spec, make = CASES[case]
    [det] = decode(dict(spec, score_threshold=0.5), make())
    np.testing.assert_allclose(det.xyxy, BOXES, atol=1e-3)
    np.testing.assert_allclose(det.confidence, SCORES, atol=1e-5)
    assert det.class_id.tolist() == CLASSES


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("frame_w, frame_h", [(1920, 1080), (1080, 1920)])
def test_boxes_come_back_in_frame_pixels(case: str, frame_w: int, frame_h: int) -> None:
    transform, (px, py, pw, ph) = plan_transform(frame_w, frame_h, W, H, "letterbox")
    frame_boxes = np.array([[0.1 * frame_w, 0.2 * frame_h, 0.3 * frame_w, 0.4 * frame_h], [0.5 * frame_w, 0.6 * frame_h, 0.9 * frame_w, 0.95 * frame_h], [0.0, 0.0, 0.05 * frame_w, 0.05 * frame_h]], np.float32)
    spec, _ = CASES[case]
    kind = spec["type"]
    net = transform.forward(frame_boxes)
    if kind == "yolox" and not spec.get("decoded"):
        outputs = [encode_yolox_raw(net, CLASSES, SCORES)]
    elif kind == "yolov5" or kind == "yolox":
        outputs = [encode_v5(net, CLASSES, SCORES)]
    else:
        outputs = [encode_v8(net, CLASSES, SCORES)]
        if spec.get("layout") == "boxes_first" or "num_classes" in spec and kind == "yolov8":
            outputs = [np.ascontiguousarray(outputs[0].transpose(0, 2, 1))]
    [det] = decode(dict(spec, score_threshold=0.5), outputs, [transform])
    order = np.argsort(-np.asarray(SCORES))
    tol = 1e-3 * max(frame_w / pw, frame_h / ph)
    np.testing.assert_allclose(det.xyxy, frame_boxes[order], atol=tol)


@pytest.mark.parametrize("kind", ["yolov5", "yolov8", "yolox"])
@pytest.mark.parametrize("agnostic, expected", [(False, 2), (True, 1)])
def test_class_aware_and_agnostic_nms(kind: str, agnostic: bool, expected: int) -> None:
    boxes = np.array([[100, 100, 200, 200], [102, 101, 201, 203], [0, 0, 1, 1]], np.float32)
    scores = [0.9, 0.8, 0.0]
    classes = [0, 1, 0]
    spec = {"type": kind, "class_agnostic": agnostic, "score_threshold": 0.5}
    if kind == "yolov8":
        outputs = [encode_v8(boxes, classes, scores)]
    elif kind == "yolox":
        spec["decoded"] = True
        outputs = [encode_v5(boxes, classes, scores)]
    else:
        outputs = [encode_v5(boxes, classes, scores)]
    [det] = decode(spec, outputs)
    assert len(det) == expected
    assert det.confidence[0] == pytest.approx(0.9)


def test_v5_score_is_objectness_times_class() -> None:
    out = encode_v5(BOXES[:1], [1], [0.5], obj=0.6)  # class score 0.5/0.6, product 0.5
    [det] = decode({"type": "yolov5", "score_threshold": 0.45}, [out])
    np.testing.assert_allclose(det.confidence, [0.5], atol=1e-6)
    [none] = decode({"type": "yolov5", "score_threshold": 0.55}, [out])
    assert len(none) == 0  # objectness 0.6 passes, the product does not


def test_pre_nms_topk_and_max_detections() -> None:
    rng = np.random.default_rng(0)
    n = 50
    centres = rng.uniform(50, 330, (n, 2))
    boxes = np.concatenate([centres - 8, centres + 8], axis=1)
    boxes[:, [0, 2]] += np.arange(n)[:, None] * 5.0  # spread out: no overlaps
    out = np.zeros((1, 4 + C, n), np.float32)
    out[0, :4] = np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2, boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]])
    scores = np.linspace(0.99, 0.5, n, dtype=np.float32)
    out[0, 4] = scores
    [top] = decode({"type": "yolov8", "score_threshold": 0.3, "pre_nms_topk": 10}, [out])
    np.testing.assert_allclose(top.confidence, scores[:10])
    [capped] = decode({"type": "yolov8", "score_threshold": 0.3, "max_detections": 7}, [out])
    np.testing.assert_allclose(capped.confidence, scores[:7])


def test_batches_decode_item_by_item() -> None:
    a = encode_v8(BOXES, CLASSES, SCORES)
    b = encode_v8(BOXES[:1], [1], [0.7])
    t2 = Placement.affine(0.5, 0.5, 0.0, 0.0, 1280, 768)
    dets = decode({"type": "yolov8", "score_threshold": 0.5}, [np.concatenate([a, b])], [IDENTITY, t2])
    assert [len(d) for d in dets] == [3, 1]
    np.testing.assert_allclose(dets[1].xyxy, BOXES[:1] * 2, atol=1e-3)
    assert dets[1].class_id.tolist() == [1]


def test_nothing_above_threshold_gives_empty_detections() -> None:
    for kind, out in [("yolov5", encode_v5(BOXES, CLASSES, SCORES)), ("yolov8", encode_v8(BOXES, CLASSES, SCORES))]:
        [det] = decode({"type": kind, "score_threshold": 0.95}, [out])
        assert len(det) == 0 and det.xyxy.shape == (0, 4)


@pytest.mark.parametrize(
    "spec, shapes, error, message",
    [
        ({"type": "yolov5"}, [(1, 100, 5)], BackendError, r"5 values per box, expected 5 \+ classes"),
        ({"type": "yolov5", "num_classes": 80}, [(1, 100, 8)], BackendError, r"8 values per box, expected 85"),
        ({"type": "yolov5"}, [(1, 100, 8), (1, 100, 8)], BackendError, r"expects one output.*gave 2 output"),
        ({"type": "yolov5"}, [(100, 8)], BackendError, r"should be \[N, boxes, 5 \+ classes\]"),
        ({"type": "yolov8", "num_classes": 80}, [(1, 7, 8400)], BackendError, r"expected 84"),
        ({"type": "yolov8", "layout": "boxes_first"}, [(1, 8400, 4)], BackendError, r"4 values per box"),
        ({"type": "yolox"}, [(1, 5000, 8)], BackendError, r"5000 rows.*give 5040.*decoded: true"),
        ({"type": "yolox", "strides": [8, 16]}, [(1, 5040, 8)], BackendError, r"give 4800"),
        ({"type": "yolox", "strides": []}, [(1, 5040, 8)], ConfigError, r"decoder.strides"),
        ({"type": "yolov8", "layout": "nhwc"}, [(1, 7, 8400)], ConfigError, r"decoder.layout"),
    ],
)
def test_wrong_outputs_or_spec_say_what_was_expected(spec, shapes, error, message) -> None:
    with pytest.raises(error, match=message):
        decode(spec, [np.zeros(s, np.float32) for s in shapes])
