"""The end2end decoder and class names on hand-built outputs (numpy only: the device test set runs
these). The graphs themselves, run by ONNX Runtime, are in tests/builder/test_heads.py."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.decoders import make_decoder
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec

SPEC = InputSpec(name="images", shape=[1, 3, 320, 320])
IDENTITY = Placement.affine(1.0, 1.0, 0.0, 0.0, 320, 320)


def rows_batch() -> np.ndarray:
    """Two images, 5 rows each: image 0 has two detections, image 1 one; the rest is padding."""
    out = np.zeros((2, 5, 6), np.float32)
    out[0, 0] = [10, 20, 110, 120, 0.9, 1]
    out[0, 1] = [200, 200, 250, 260, 0.5, 0]
    out[1, 0] = [30, 30, 60, 90, 0.7, 2]
    return out


def test_rows_decode_per_image_and_skip_padding() -> None:
    dets = make_decoder({"type": "end2end"}, SPEC)([rows_batch()], [IDENTITY, IDENTITY])
    np.testing.assert_allclose(dets[0].xyxy, [[10, 20, 110, 120], [200, 200, 250, 260]])
    assert dets[0].class_id.tolist() == [1, 0]
    np.testing.assert_allclose(dets[1].xyxy, [[30, 30, 60, 90]])
    assert dets[1].class_id.tolist() == [2]


def test_score_threshold_filters_rows() -> None:
    dets = make_decoder({"type": "end2end", "score_threshold": 0.6}, SPEC)([rows_batch()], [IDENTITY, IDENTITY])
    assert [len(d) for d in dets] == [1, 1]


def test_the_models_nms_is_kept_unless_a_lower_iou_is_asked_for() -> None:
    out = np.zeros((1, 3, 6), np.float32)
    out[0, 0] = [0, 0, 100, 100, 0.9, 0]
    out[0, 1] = [10, 0, 110, 100, 0.8, 0]  # IoU 90/110 = 0.82 with the first
    assert len(make_decoder({"type": "end2end"}, SPEC)([out], [IDENTITY])[0]) == 2
    assert len(make_decoder({"type": "end2end", "nms_iou": 0.5}, SPEC)([out], [IDENTITY])[0]) == 1


def test_selected_indices_pick_their_batch_item() -> None:
    boxes = np.array([[[0, 0, 10, 10], [20, 20, 40, 40]], [[5, 5, 15, 15], [50, 50, 70, 90]]], np.float32)
    scores = np.array([[[0.9, 0.2]], [[0.3, 0.8]]], np.float32)  # [N=2, C=1, B=2]
    selected = np.array([[0, 0, 0], [1, 0, 1], [1, 0, 0]], np.int64)
    dets = make_decoder({"type": "end2end"}, SPEC)([boxes, scores, selected], [IDENTITY, IDENTITY])
    np.testing.assert_allclose(dets[0].xyxy, [[0, 0, 10, 10]])
    np.testing.assert_allclose(dets[1].xyxy, [[50, 50, 70, 90], [5, 5, 15, 15]])
    np.testing.assert_allclose(dets[1].confidence, [0.8, 0.3])


@pytest.mark.parametrize("box_format, raw", [("yxyx", [20, 10, 120, 110]), ("cxcywh", [60, 70, 100, 100]),
                                             ("xyxy", [110, 120, 10, 20])])
def test_box_formats(box_format: str, raw: list) -> None:
    out = np.zeros((1, 1, 6), np.float32)
    out[0, 0] = [*raw, 0.9, 0]
    det = make_decoder({"type": "end2end", "box_format": box_format}, SPEC)([out], [IDENTITY])[0]
    np.testing.assert_allclose(det.xyxy, [[10, 20, 110, 120]])


def test_normalized_boxes_scale_to_the_input_then_map_to_the_frame() -> None:
    out = np.zeros((1, 1, 6), np.float32)
    out[0, 0] = [0.25, 0.5, 0.5, 0.75, 0.9, 0]
    half = Placement.affine(0.5, 0.5, 0.0, 0.0, 640, 640)
    det = make_decoder({"type": "end2end", "normalized": True}, SPEC)([out], [half])[0]
    np.testing.assert_allclose(det.xyxy, [[160, 320, 320, 480]])


def test_count_format_reads_only_counted_rows() -> None:
    boxes = np.tile(np.array([[0, 0, 10, 10]], np.float32), (1, 4, 1))
    scores = np.full((1, 4), 0.9, np.float32)
    classes = np.array([[3, 1, 1, 1]], np.int32)
    det = make_decoder({"type": "end2end"}, SPEC)([np.array([[1]], np.int32), boxes, scores, classes], [IDENTITY])[0]
    assert det.class_id.tolist() == [3]


@pytest.mark.parametrize("outputs, message", [
    ([np.zeros((1, 5, 4), np.float32)], r"none of the end-to-end signatures"),
    ([np.zeros((1, 5, 84), np.float32), np.zeros((1, 5), np.float32)], r"none of the end-to-end signatures"),
])
def test_other_signatures_are_backend_errors(outputs, message) -> None:
    with pytest.raises(BackendError, match=message):
        make_decoder({"type": "end2end"}, SPEC)(outputs, [IDENTITY])


def test_a_format_the_outputs_do_not_have_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match=r"do not have the count_boxes_scores_classes signature"):
        make_decoder({"type": "end2end", "format": "count_boxes_scores_classes"}, SPEC)(
            [np.zeros((1, 5, 6), np.float32)] * 4, [IDENTITY])


@pytest.mark.parametrize("spec, message", [
    ({"format": "nms"}, r"decoder.format must be one of"),
    ({"box_format": "xywh"}, r"decoder.box_format must be one of"),
    ({"outputs": ["rows"]}, r"decoder.outputs needs decoder.format"),
    ({"format": "rows", "outputs": ["boxes"]}, r"must name each of \['rows'\] once"),
])
def test_bad_specs(spec, message) -> None:
    with pytest.raises(ConfigError, match=message):
        make_decoder(dict(spec, type="end2end"), SPEC)


# -- labels ------------------------------------------------------------------------------------
def test_labels_name_each_detection_and_ids_beyond_them_get_none() -> None:
    out = rows_batch()
    out[1, 0, 5] = 7  # a class id the names do not cover
    dets = make_decoder({"type": "end2end", "labels": ["cat", "dog"]}, SPEC)([out], [IDENTITY, IDENTITY])
    assert dets[0].data["label"].tolist() == ["dog", "cat"]
    assert dets[0].to_records()[0] == {"xyxy": [10.0, 20.0, 110.0, 120.0], "score": 0.9, "class_id": 1, "label": "dog"}
    assert dets[1].data["label"].tolist() == [""]
    assert "label" not in dets[1].to_records()[0]


def test_labels_set_the_class_count_the_head_is_checked_against() -> None:
    decoder = make_decoder({"type": "yolov8", "labels": ["a", "b"]}, SPEC)
    assert decoder.num_classes == 2
    with pytest.raises(BackendError, match=r"has 84 values per box .* expected 6"):
        decoder([np.zeros((1, 84, 2100), np.float32)], [IDENTITY])


@pytest.mark.parametrize("labels, message", [
    ("person", r"decoder.labels must be a list"),
    ([], r"decoder.labels is empty"),
    (["a", 3], r"decoder.labels\[1\] must be a string"),
    (["a", "  "], r"decoder.labels\[1\] = '  ' is not a class name"),
    (["a", "x" * 129], r"decoder.labels\[1\] = .* is not a class name"),
    (["a", "b\nc"], r"is not a class name"),
    (["c"] * 10001, r"has 10001 names; at most 10000"),
])
def test_bad_labels_are_config_errors(labels, message) -> None:
    with pytest.raises(ConfigError, match=message):
        make_decoder({"type": "yolov8", "labels": labels}, SPEC)


def test_labels_and_num_classes_must_agree() -> None:
    with pytest.raises(ConfigError, match=r"decoder.labels names 2 classes but decoder.num_classes is 3"):
        make_decoder({"type": "yolov8", "labels": ["a", "b"], "num_classes": 3}, SPEC)


# -- YOLOv8/11 segment and pose heads ----------------------------------------------------------
def test_segment_head_needs_its_mask_columns() -> None:
    decoder = make_decoder({"type": "yolov8", "head": "segment", "num_classes": 3}, SPEC)
    with pytest.raises(BackendError, match=r"has 7 values per box .*head segment.*expected 39"):
        decoder([np.zeros((1, 7, 2100), np.float32), np.zeros((1, 32, 80, 80), np.float32)], [IDENTITY])


def test_pose_keypoints_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"decoder.keypoints must be \[count, 2 or 3\]"):
        make_decoder({"type": "yolov8", "head": "pose", "keypoints": [17, 4]}, SPEC)
    with pytest.raises(ConfigError, match=r"decoder.head must be one of"):
        make_decoder({"type": "yolov8", "head": "obb"}, SPEC)
