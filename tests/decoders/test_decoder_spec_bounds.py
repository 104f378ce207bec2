"""The spec keys every decoder shares, at their documented bounds, and what top-k, max_detections
and labels do at their edges (a YOLOv5 output built here, one candidate per row)."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest

from edge_sdk.decoders import make_decoder
from edge_sdk.detections import LABEL
from edge_sdk.errors import ConfigError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec

SPEC = InputSpec(shape=[1, 3, 64, 96])
IDENTITY = Placement.affine(1.0, 1.0, 0.0, 0.0, 96, 64)


@pytest.mark.parametrize("key,value,ok", [
    ("score_threshold", 0.0, True), ("score_threshold", 1.0, True), ("score_threshold", 1, True),
    ("score_threshold", -0.001, False), ("score_threshold", 1.001, False), ("score_threshold", True, False),
    ("score_threshold", "0.5", False), ("nms_iou", 0.0, True), ("nms_iou", 1.0, True), ("nms_iou", 1.5, False),
    ("max_detections", 1, True), ("max_detections", 0, False), ("max_detections", 1.0, False),
    ("max_detections", True, False), ("pre_nms_topk", None, True), ("pre_nms_topk", 1, True),
    ("pre_nms_topk", 0, False), ("num_classes", 1, True), ("num_classes", 0, False), ("class_agnostic", 1, False),
    ("class_agnostic", True, True), ("output_names", ["a"], True), ("output_names", "a", False),
    ("output_names", [1], False), ("unknown_key", 1, False), ("max_detections", None, False),
    # one frame's detections fit one `detections` message (its schema: 4,096 boxes); NMS input bounded
    ("max_detections", 4096, True), ("max_detections", 4097, False), ("max_detections", 10 ** 9, False),
    ("pre_nms_topk", 10000, True), ("pre_nms_topk", 10001, False),
])
def test_shared_keys_at_their_bounds(key: str, value: Any, ok: bool) -> None:
    spec = {"type": "yolov5", key: value}
    if ok:
        make_decoder(spec, SPEC)
    else:
        with pytest.raises(ConfigError, match=key):
            make_decoder(spec, SPEC)


def rows(scores, classes=None, n_classes: int = 3) -> np.ndarray:
    """One well-separated 8x8 box per score, objectness 1, in a [1, N, 5 + C] YOLOv5 output."""
    out = np.zeros((1, len(scores), 5 + n_classes), np.float32)
    for i, s in enumerate(scores):
        out[0, i, :4] = [10 * i + 4, 32, 8, 8]
        out[0, i, 4] = 1.0
        out[0, i, 5 + (classes[i] if classes else 0)] = s
    return out


def decode(spec: Dict[str, Any], out: np.ndarray):
    return make_decoder(dict({"type": "yolov5"}, **spec), SPEC)([out], [IDENTITY])[0]


def test_the_score_threshold_keeps_scores_above_it() -> None:
    det = decode({"score_threshold": 0.5}, rows([0.5, 0.5001, 0.9, 0.2]))
    assert sorted(det.confidence.tolist()) == pytest.approx([0.5001, 0.9])


@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_pre_nms_topk_keeps_the_k_highest(k: int) -> None:
    scores = [0.3, 0.9, 0.5, 0.7, 0.6]
    det = decode({"pre_nms_topk": k, "score_threshold": 0.1}, rows(scores))
    assert sorted(det.confidence.tolist(), reverse=True) == pytest.approx(sorted(scores, reverse=True)[:k])


@pytest.mark.parametrize("m", [1, 2, 5, 6])
def test_max_detections_keeps_the_m_highest(m: int) -> None:
    scores = [0.3, 0.9, 0.5, 0.7, 0.6]
    det = decode({"max_detections": m, "score_threshold": 0.1}, rows(scores))
    assert det.confidence.tolist() == pytest.approx(sorted(scores, reverse=True)[:m])


def test_labels_name_each_class_and_ids_beyond_them_get_none() -> None:
    det = decode({"labels": ["cat", "dog"], "num_classes": 2, "score_threshold": 0.1},
                 rows([0.9, 0.8], classes=[1, 0], n_classes=2))
    assert dict(zip(det.class_id.tolist(), det.data[LABEL].tolist())) == {1: "dog", 0: "cat"}
    with pytest.raises(ConfigError, match="names 2 classes"):
        make_decoder({"type": "yolov5", "labels": ["cat", "dog"], "num_classes": 3}, SPEC)
    end2end = make_decoder({"type": "end2end", "format": "rows", "labels": ["cat", "dog"], "score_threshold": 0.1}, SPEC)
    out = np.zeros((1, 3, 6), np.float32)
    out[0, 0] = [0, 0, 10, 10, 0.9, 1]
    out[0, 1] = [40, 40, 50, 50, 0.8, 5]  # a class the labels do not name
    det = end2end([out], [IDENTITY])[0]
    assert dict(zip(det.class_id.tolist(), det.data[LABEL].tolist())) == {1: "dog", 5: ""}


@pytest.mark.parametrize("strides,ok", [([8, 16, 32], True), ([1], True), ([8, 0], False), ([-8], False), ([], False),
                                        ([8.0], False), ([True], False), ("8", False)])
def test_yolox_strides_are_positive_integers(strides: Any, ok: bool) -> None:
    spec = {"type": "yolox", "strides": strides}
    if ok:
        make_decoder(spec, SPEC)
    else:
        with pytest.raises(ConfigError, match="strides"):
            make_decoder(spec, SPEC)


@pytest.mark.parametrize("channels_first", [True, False])
def test_yolov8_auto_layout_goes_by_the_class_count_when_there_are_fewer_boxes_than_channels(channels_first: bool) -> None:
    """80 classes and 50 candidates: [1, 84, 50] is channels first although 84 > 50."""
    out = np.zeros((1, 84, 50), np.float32)
    out[0, :4, 7] = [40, 30, 10, 8]
    out[0, 4 + 66, 7] = 0.9
    if not channels_first:
        out = np.ascontiguousarray(out.transpose(0, 2, 1))
    det = make_decoder({"type": "yolov8", "num_classes": 80}, SPEC)([out], [IDENTITY])[0]
    assert det.class_id.tolist() == [66] and det.xyxy[0].tolist() == pytest.approx([35, 26, 45, 34])


def test_a_segmentation_head_decodes_without_its_prototypes_too() -> None:
    pred = np.zeros((1, 4 + 1 + 32, 60), np.float32)
    pred[0, :4, 3] = [40, 30, 10, 8]
    pred[0, 4, 3] = 0.9
    det = make_decoder({"type": "yolov8", "head": "segment"}, SPEC)([pred], [IDENTITY])[0]
    assert det.xyxy[0].tolist() == pytest.approx([35, 26, 45, 34])


def test_end2end_rows_beside_mask_prototypes_are_found_without_a_format() -> None:
    rows = np.zeros((1, 5, 6 + 32), np.float32)
    rows[0, 0, :6] = [1, 2, 11, 12, 0.9, 3]
    det = make_decoder({"type": "end2end"}, SPEC)([rows, np.zeros((1, 32, 16, 24), np.float32)], [IDENTITY])[0]
    assert det.xyxy.tolist() == [[1, 2, 11, 12]] and det.class_id.tolist() == [3]


def test_efficient_nms_with_float_classes_goes_by_its_own_output_order() -> None:
    """classes as float32: nothing tells them from the scores but EfficientNMS_TRT's order."""
    count = np.array([[1]], np.int32)
    boxes = np.zeros((1, 4, 4), np.float32)
    boxes[0, 0] = [1, 2, 11, 12]
    scores = np.array([[0.8, 0, 0, 0]], np.float32)
    classes = np.array([[2.0, 0, 0, 0]], np.float32)
    det = make_decoder({"type": "end2end"}, SPEC)([count, boxes, scores, classes], [IDENTITY])[0]
    assert det.class_id.tolist() == [2] and det.confidence.tolist() == pytest.approx([0.8])


@pytest.mark.parametrize("scores_shape,classes_shape", [((1, 3), (1, 4)), ((1, 4), (1, 3)), ((2, 4), (1, 4))])
def test_efficient_nms_outputs_of_other_lengths_are_refused(scores_shape, classes_shape) -> None:
    from edge_sdk.errors import BackendError

    outputs = [np.array([[1]], np.int32), np.zeros((1, 4, 4), np.float32), np.zeros(scores_shape, np.float32),
               np.zeros(classes_shape, np.int32)]
    with pytest.raises(BackendError, match="must be"):
        make_decoder({"type": "end2end", "format": "count_boxes_scores_classes"}, SPEC)(outputs, [IDENTITY])


@pytest.mark.parametrize("dy,dx", [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)])
def test_centerface_keeps_a_cell_only_if_no_neighbour_is_higher(dy: int, dx: int) -> None:
    """Each of the 8 neighbours counts; boxes of 2 pixels in 4-pixel cells never overlap, so NMS
    cannot hide a cell that should not have been a peak."""
    gh, gw = 64 // 4, 96 // 4
    heat = np.zeros((1, 1, gh, gw), np.float32)
    scale = np.full((1, 2, gh, gw), np.log(0.5), np.float32)  # 2-pixel boxes
    offset = np.zeros((1, 2, gh, gw), np.float32)
    heat[0, 0, 6, 9] = 0.6
    heat[0, 0, 6 + dy, 9 + dx] = 0.9
    heat[0, 0, 12, 3] = 0.7  # a lone peak elsewhere
    det = make_decoder({"type": "centerface", "outputs": ["heatmap", "scale", "offset"]}, SPEC)(
        [heat, scale, offset], [IDENTITY])[0]
    assert sorted(det.confidence.tolist()) == pytest.approx([0.7, 0.9])


@pytest.mark.parametrize("spec,outputs", [
    ({"type": "yolov5"}, [np.zeros((1, 10, 8), np.float32)]),
    ({"type": "yolov8"}, [np.zeros((1, 7, 30), np.float32)]),
    ({"type": "ssd"}, [np.zeros((1, 10, 4), np.float32), np.zeros((1, 10, 3), np.float32)]),
    ({"type": "end2end", "format": "rows"}, [np.zeros((1, 5, 6), np.float32)]),
    ({"type": "centerface"}, [np.zeros((1, c, 16, 24), np.float32) for c in (1, 2, 2, 10)]),
])
def test_nothing_found_is_an_empty_detections_of_the_usual_shapes(spec: Dict[str, Any], outputs) -> None:
    det = make_decoder(spec, SPEC)(outputs, [IDENTITY])[0]
    assert det.xyxy.shape == (0, 4) and det.confidence.shape == (0,) and det.class_id.shape == (0,)
    assert det.xyxy.dtype == np.float32 and det.class_id.dtype == np.int32


def test_pre_nms_topk_null_still_bounds_what_nms_gets(monkeypatch) -> None:
    """null: no cut of the bundle's own, but never more than MAX_PRE_NMS_TOPK candidates into NMS
    (its cost grows with their square: 6,400 boxes a frame ran at 0.05 fps)."""
    from edge_sdk.decoders import _base

    seen = []
    real = _base.nms

    def counting(boxes, scores, *args, **kwargs):
        seen.append(len(scores))
        return real(boxes, scores, *args, **kwargs)

    monkeypatch.setattr(_base, "nms", counting)
    n = _base.MAX_PRE_NMS_TOPK + 2000
    scores = np.linspace(0.99, 0.3, n).astype(np.float32)
    out = rows(scores.tolist())
    decode({"pre_nms_topk": None, "score_threshold": 0.25}, out)
    decode({"pre_nms_topk": 50, "score_threshold": 0.25}, out)
    assert seen == [_base.MAX_PRE_NMS_TOPK, 50]
