"""Heads: models that end in NMS, segmentation, pose and OBB heads, and class names, on graphs with
the output signatures and metadata of real exports (tests/builder/heads_factory.py), run by ONNX
Runtime. Oracles: boxes placed in network pixels by hand and mapped through the letterbox by hand
(a 640x480 frame in a 320x320 input: x / 0.5, (y - 40) / 0.5, clipped to the frame)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

from edge_sdk.builder.heads import resolve_head
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.decoders import make_decoder
from edge_sdk.errors import ConfigError, ModelError
from edge_sdk.preprocess import InputSpec

from heads_factory import (
    H, W, constant_outputs_model, frame_transform, nms_rows_model, onnx_nms_model, run, save, ultralytics_metadata,
    yolo_columns,
)

SPEC = InputSpec(name="images", shape=[1, 3, H, W], color="RGB", resize="letterbox")
NAMES = ["person", "bicycle", "car"]
# three boxes in network pixels, their classes and scores
NET_BOXES = np.array([[100, 60, 200, 140], [40, 100, 80, 300], [250, 200, 300, 260]], np.float32)
CLASSES = [2, 0, 1]
SCORES = [0.9, 0.6, 0.8]
# the same boxes in the 640x480 frame, worked out by hand: x / 0.5, (y - 40) / 0.5, clipped to 480
FRAME_BOXES = np.array([[200, 40, 400, 200], [80, 120, 160, 480], [500, 320, 600, 440]], np.float32)


def resolved(model: Any, spec: Optional[Dict[str, Any]], labels: Optional[Path] = None) -> Optional[Dict[str, Any]]:
    return resolve_head(model, spec, labels, BuildProgress(quiet=True))


def decode(spec: Dict[str, Any], outputs: List[np.ndarray]) -> Any:
    transform, _, _ = frame_transform()
    return make_decoder(spec, SPEC)(outputs, [transform])[0]


def by_score(det: Any) -> Any:
    return det[np.argsort(-det.confidence, kind="stable")]


def assert_found(det: Any, order: List[int]) -> None:
    """`det` holds exactly the boxes `order` indexes, best score first, with their classes and names."""
    det = by_score(det)
    assert len(det) == len(order)
    np.testing.assert_allclose(det.xyxy, FRAME_BOXES[order], atol=1e-3)
    assert det.class_id.tolist() == [CLASSES[k] for k in order]
    np.testing.assert_allclose(det.confidence, [SCORES[k] for k in order], atol=1e-6)


def rows(count: int = 300, garbage: bool = False) -> np.ndarray:
    """[count, 6] rows x1, y1, x2, y2, score, class; the rest zero padding (or, with `garbage`,
    high-scoring rows that a count says are not detections)."""
    out = np.zeros((count, 6), np.float32)
    for k, (box, c, s) in enumerate(zip(NET_BOXES, CLASSES, SCORES)):
        out[k] = [*box, s, c]
    if garbage:
        out[3:] = [5, 5, 50, 50, 0.99, 1]
    return out


# -- models that end in NMS ----------------------------------------------------------------------
def test_ultralytics_nms_export_gets_the_end2end_decoder_and_its_names() -> None:
    model = nms_rows_model(rows(), ultralytics_metadata("detect", NAMES))
    spec = resolved(model, {"type": "yolov8", "score_threshold": 0.3})
    assert spec is not None
    assert (spec["type"], spec["format"], spec["score_threshold"], spec["labels"]) == ("end2end", "rows", 0.3, NAMES)
    det = decode(spec, run(model))
    assert_found(det, [0, 2, 1])
    assert by_score(det).data["label"].tolist() == ["car", "bicycle", "person"]


def test_ultralytics_nms_segment_export_ignores_mask_columns_and_prototypes() -> None:
    seg_rows = np.concatenate([rows(), np.full((300, 32), 0.95, np.float32)], axis=1)  # mask coefficients
    model = nms_rows_model(seg_rows, ultralytics_metadata("segment", NAMES), proto=True)
    spec = resolved(model, None)  # no decoder configured: chosen from the outputs
    assert spec is not None and spec["type"] == "end2end" and spec["format"] == "rows"
    assert_found(decode(spec, run(model)), [0, 2, 1])


@pytest.mark.parametrize("classes_dtype", [np.int32, np.float32])
def test_efficient_nms_outputs_decode_only_the_counted_rows(classes_dtype: type) -> None:
    r = rows(100, garbage=True)
    outputs = {
        "num_dets": np.array([[3]], np.int32),
        "det_boxes": r[None, :, :4],
        "det_scores": r[None, :, 4],
        "det_classes": r[None, :, 5].astype(classes_dtype),
    }
    if classes_dtype is np.float32:  # classes before scores: only the name tells them apart
        outputs = {k: outputs[k] for k in ("num_dets", "det_boxes", "det_classes", "det_scores")}
    model = constant_outputs_model(outputs)
    spec = resolved(model, None)
    assert spec is not None and spec["format"] == "count_boxes_scores_classes"
    if classes_dtype is np.float32:
        assert spec["outputs"] == ["count", "boxes", "classes", "scores"]
    assert_found(decode(spec, run(model)), [0, 2, 1])


def test_a_real_onnx_nonmaxsuppression_graph() -> None:
    boxes = np.array([[10, 10, 110, 110], [12, 12, 112, 112], [200, 200, 260, 260], [150, 150, 170, 190]], np.float32)
    scores = np.array([[0.9, 0.8, 0.1, 0.2], [0.05, 0.1, 0.7, 0.35]], np.float32)  # [classes, boxes]
    model = onnx_nms_model(boxes, scores, iou=0.5, score_threshold=0.3)
    outputs = run(model)
    # by hand: class 0 keeps box 0 (box 1 overlaps it at IoU 0.92; 2 and 3 score below 0.3);
    # class 1 keeps boxes 2 and 3 (apart)
    assert sorted(map(tuple, outputs[2].tolist())) == [(0, 0, 0), (0, 1, 2), (0, 1, 3)]
    spec = resolved(model, None)
    assert spec == {"type": "end2end", "format": "selected_indices"}
    det = by_score(decode(spec, outputs))
    np.testing.assert_allclose(det.xyxy, [[20, 0, 220, 140], [400, 320, 520, 440], [300, 220, 340, 300]], atol=1e-3)
    assert det.class_id.tolist() == [0, 1, 1]
    np.testing.assert_allclose(det.confidence, [0.9, 0.7, 0.35], atol=1e-6)


# -- YOLOv8/11 heads with more than classes --------------------------------------------------
def seg_model(metadata: bool = True) -> Any:
    pred = yolo_columns(NET_BOXES, CLASSES, SCORES, 3, extra=32)
    proto = np.full((1, 32, H // 4, W // 4), 0.5, np.float32)
    meta = ultralytics_metadata("segment", NAMES) if metadata else None
    return constant_outputs_model({"output0": pred, "output1": proto}, meta)


@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "signature"])
def test_a_segmentation_head_decodes_its_boxes_not_its_mask_coefficients(metadata: bool) -> None:
    model = seg_model(metadata)
    spec = resolved(model, {"type": "yolov8"})
    assert spec is not None and (spec["head"], spec["mask_channels"]) == ("segment", 32)
    det = decode(spec, run(model))
    assert_found(det, [0, 2, 1])  # the 0.7 mask coefficients of every column are no class scores
    if metadata:
        assert spec["num_classes"] == 3 and by_score(det).data["label"].tolist() == ["car", "bicycle", "person"]


def test_a_pose_head_decodes_boxes_and_keypoints_in_frame_pixels() -> None:
    kpts = np.zeros((3, 51), np.float32)
    kpts[0, :3] = [150, 100, 0.9]  # keypoint 0 of box 0 at (150, 100) in network pixels
    pred = yolo_columns(NET_BOXES, [0, 0, 0], SCORES, 1, extra=51, extra_values=kpts)
    model = constant_outputs_model({"output0": pred}, ultralytics_metadata("pose", ["person"], kpt_shape="[17, 3]"))
    spec = resolved(model, {"type": "yolov8"})
    assert spec is not None and (spec["head"], spec["keypoints"], spec["num_classes"]) == ("pose", [17, 3], 1)
    det = by_score(decode(spec, run(model)))
    np.testing.assert_allclose(det.xyxy, FRAME_BOXES[[0, 2, 1]], atol=1e-3)
    assert det.class_id.tolist() == [0, 0, 0]
    assert det.data["keypoints"].shape == (3, 17, 2)
    np.testing.assert_allclose(det.data["keypoints"][0, 0], [300, 120], atol=1e-3)  # (150 / 0.5, (100 - 40) / 0.5)


def test_an_obb_head_is_refused_with_exit_4() -> None:
    pred = yolo_columns(NET_BOXES, CLASSES, SCORES, 15, extra=1)
    model = constant_outputs_model({"output0": pred}, ultralytics_metadata("obb", [f"c{i}" for i in range(15)]))
    with pytest.raises(ModelError, match=r"oriented-box \(OBB\) head.*supported: detection heads") as info:
        resolved(model, {"type": "yolov8"})
    assert info.value.exit_code == 4


def test_an_obb_export_with_nms_is_refused_too() -> None:
    """Ultralytics' nms=True OBB export: rows x, y, w, h, score, class, angle: rotated, not corners."""
    obb_rows = np.concatenate([rows(), np.full((300, 1), 0.3, np.float32)], axis=1)
    model = nms_rows_model(obb_rows, ultralytics_metadata("obb", NAMES))
    with pytest.raises(ModelError, match=r"oriented-box \(OBB\) head"):
        resolved(model, None)


def test_a_raw_head_is_not_taken_for_nms_rows_whatever_the_metadata_says() -> None:
    """A YOLO26 exported without its end-to-end branch keeps `end2end: True` in its metadata, but
    its output is the raw [1, 4 + C, anchors] head."""
    pred = yolo_columns(NET_BOXES, CLASSES, SCORES, 3)
    model = constant_outputs_model({"output0": pred}, ultralytics_metadata("detect", NAMES, end2end="True",
                                                                            args="{'batch': 1, 'nms': True}"))
    spec = resolved(model, {"type": "yolov8"})
    assert spec is not None and spec["type"] == "yolov8"
    assert_found(decode(spec, run(model)), [0, 2, 1])


@pytest.mark.parametrize("extra, guess", [(1, "oriented-box"), (51, "pose head"), (7, "another layout")])
def test_columns_beyond_the_named_classes_are_not_read_as_classes(extra: int, guess: str) -> None:
    """No task in the metadata, but its names count 3 classes: 4 + 3 + extra columns is refused."""
    pred = yolo_columns(NET_BOXES, CLASSES, SCORES, 3, extra=extra)
    meta = ultralytics_metadata("detect", NAMES)
    del meta["task"]
    model = constant_outputs_model({"output0": pred}, meta)
    with pytest.raises(ModelError, match=rf"names 3 classes: 4 \+ 3 \+ {extra} extra values per box looks like .*{guess}"):
        resolved(model, {"type": "yolov8"})


def yolov5_rows(extra: int = 0) -> np.ndarray:
    """[1, anchors, 5 + C + extra] as YOLOv5 writes it: cx, cy, w, h, objectness, class scores."""
    columns = yolo_columns(NET_BOXES, CLASSES, SCORES, 3, extra=extra)
    objectness = np.zeros((1, 1, columns.shape[2]), np.float32)
    return np.ascontiguousarray(np.concatenate([columns[:, :4], objectness, columns[:, 4:]], axis=1).transpose(0, 2, 1))


def test_a_yolov5_segmentation_export_is_refused() -> None:
    proto = np.full((1, 32, H // 4, W // 4), 0.5, np.float32)
    model = constant_outputs_model({"output0": yolov5_rows(32), "output1": proto}, {"stride": "32", "names": str(dict(enumerate(NAMES)))})
    with pytest.raises(ModelError, match=r"mask prototypes output \(output1\): a YOLOv5 segmentation head"):
        resolved(model, {"type": "yolov5"})


def test_a_yolov5_head_must_match_its_names() -> None:
    model = constant_outputs_model({"output0": yolov5_rows()}, {"names": str(dict(enumerate(NAMES + ["bus"])))})
    with pytest.raises(ModelError, match=r"has 8 values per box, but the model's metadata \(names\) names 4 classes"):
        resolved(model, {"type": "yolov5"})
    model = constant_outputs_model({"output0": yolov5_rows()}, {"names": str(dict(enumerate(NAMES)))})
    assert resolved(model, {"type": "yolov5"}) == {"type": "yolov5", "labels": NAMES, "num_classes": 3}


def test_a_plain_detect_head_with_its_names_decodes_with_labels() -> None:
    model = constant_outputs_model({"output0": yolo_columns(NET_BOXES, CLASSES, SCORES, 3)}, ultralytics_metadata("detect", NAMES))
    spec = resolved(model, {"type": "yolo11"})
    assert spec == {"type": "yolo11", "labels": NAMES, "num_classes": 3}
    det = by_score(decode(spec, run(model)))
    assert_found(det, [0, 2, 1])
    assert det.data["label"].tolist() == ["car", "bicycle", "person"]


# -- labels files ------------------------------------------------------------------------------
def test_a_labels_file_wins_over_the_metadata(tmp_path: Path) -> None:
    model = constant_outputs_model({"output0": yolo_columns(NET_BOXES, CLASSES, SCORES, 3)}, ultralytics_metadata("detect", NAMES))
    path = tmp_path / "data.yaml"
    path.write_text("path: ../datasets/x\nnames:\n  0: human\n  1: bike\n  2: 'car, parked'\n")
    spec = resolved(model, {"type": "yolov8"}, path)
    assert spec is not None and spec["labels"] == ["human", "bike", "car, parked"]


def test_a_labels_file_with_the_wrong_count_is_a_config_error(tmp_path: Path) -> None:
    model = constant_outputs_model({"output0": yolo_columns(NET_BOXES, CLASSES, SCORES, 3)})
    path = tmp_path / "labels.txt"
    path.write_text("a\nb\n")
    with pytest.raises(ConfigError, match=r"--labels .*labels.txt names 2 classes.*give one name per class"):
        resolved(model, {"type": "yolov8"}, path)


def test_garbage_names_metadata_is_a_model_error() -> None:
    meta = ultralytics_metadata("detect", NAMES)
    meta["names"] = "__import__('os').system('true')"
    model = constant_outputs_model({"output0": yolo_columns(NET_BOXES, CLASSES, SCORES, 3)}, meta)
    with pytest.raises(ModelError, match=r"metadata `names` is not a list or a mapping of class names"):
        resolved(model, {"type": "yolov8"})


# -- through `edge-sdk build` --------------------------------------------------------------------
def build(tmp_path: Path, model: Any, *args: str) -> Any:
    from typer.testing import CliRunner

    from edge_sdk.cli import app

    path = save(model, tmp_path / "model.onnx")
    calib = tmp_path / "calib"
    if not calib.exists():
        from detector_factory import write_images

        write_images(calib, 4)
    return CliRunner().invoke(app, ["build", str(path), "--out", str(tmp_path / "bundle"), "--precision", "fp32",
                                    "--calib", str(calib), *args])


def test_build_refuses_an_obb_model_with_exit_4(tmp_path: Path) -> None:
    pred = yolo_columns(NET_BOXES, CLASSES, SCORES, 15, extra=1)
    model = constant_outputs_model({"output0": pred}, ultralytics_metadata("obb", [f"c{i}" for i in range(15)]))
    result = build(tmp_path, model, "--decoder", "yolov8")
    assert result.exit_code == 4, result.output
    assert "OBB" in result.output and not (tmp_path / "bundle").exists()


def test_build_writes_the_head_and_the_names_into_the_manifest(tmp_path: Path) -> None:
    result = build(tmp_path, seg_model(), "--decoder", "yolov8")
    assert result.exit_code == 0, result.output
    decoder = json.loads((tmp_path / "bundle" / "manifest.json").read_text())["decoder"]
    assert decoder == {"type": "yolov8", "head": "segment", "mask_channels": 32, "labels": NAMES, "num_classes": 3}
    assert "labels: 3 class names from the model's metadata (names)" in result.output


def test_an_export_with_nothing_but_its_file_gets_its_head_fitted_or_refused(tmp_path: Path) -> None:
    """No --decoder: the metadata's task implies the YOLOv8/11 head; segment is fitted, OBB refused."""
    (tmp_path / "seg").mkdir()
    (tmp_path / "obb").mkdir()
    result = build(tmp_path / "seg", seg_model())
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "seg" / "bundle" / "manifest.json").read_text())
    assert manifest["decoder"] == {"type": "yolov8", "head": "segment", "mask_channels": 32, "labels": NAMES,
                                   "num_classes": 3}
    assert manifest["provenance"]["decoder"]["type"].startswith("preset: ultralytics (metadata task segment")
    assert manifest["provenance"]["decoder"]["head"].startswith("model head")
    pred = yolo_columns(NET_BOXES, CLASSES, SCORES, 15, extra=1)
    obb = constant_outputs_model({"output0": pred}, ultralytics_metadata("obb", [f"c{i}" for i in range(15)]))
    result = build(tmp_path / "obb", obb)
    assert result.exit_code == 4, result.output
    assert "OBB" in result.output and not (tmp_path / "obb" / "bundle").exists()


def test_build_picks_end2end_for_a_model_ending_in_nms(tmp_path: Path) -> None:
    labels = tmp_path / "names.txt"
    labels.write_text("human\nbike\nautomobile\n")
    result = build(tmp_path, nms_rows_model(rows()), "--labels", str(labels))
    assert result.exit_code == 0, result.output
    decoder = json.loads((tmp_path / "bundle" / "manifest.json").read_text())["decoder"]
    assert decoder == {"type": "end2end", "format": "rows", "labels": ["human", "bike", "automobile"], "num_classes": 3}


def test_a_built_segmentation_bundle_detects_with_names(tmp_path: Path) -> None:
    """build → detect on 640x480 frames: the JSONL holds the seg model's boxes in frame pixels, named."""
    import cv2
    from typer.testing import CliRunner

    from edge_sdk.cli import app

    assert build(tmp_path, seg_model(), "--decoder", "yolov8").exit_code == 0
    frames = tmp_path / "frames"
    frames.mkdir()
    cv2.imwrite(str(frames / "a.png"), np.full((480, 640, 3), 90, np.uint8))
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["detect", str(frames), "--bundle", str(tmp_path / "bundle"), "--jsonl", str(out),
                                      "--backend", "onnxruntime", "--quiet"])
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(text) for text in out.read_text().splitlines()]
    assert [(d["label"], d["class_id"], d["score"]) for d in line["detections"]] == [("car", 2, 0.9), ("bicycle", 1, 0.8),
                                                                                     ("person", 0, 0.6)]
    np.testing.assert_allclose([d["xyxy"] for d in line["detections"]], FRAME_BOXES[[0, 2, 1]], atol=0.01)


def test_edge_toml_names_a_labels_file_relative_to_itself(tmp_path: Path) -> None:
    from edge_sdk.builder.project import make_config

    (tmp_path / "edge.toml").write_text('model = "m.onnx"\nlabels = "names/coco.yaml"\n')
    assert make_config({}, tmp_path).labels == tmp_path / "names" / "coco.yaml"
    assert make_config({"labels": Path("other.txt")}, tmp_path).labels == Path("other.txt")  # the flag wins
    (tmp_path / "edge.toml").write_text("labels = 3\n")
    with pytest.raises(ConfigError, match=r"'labels' in .*edge.toml must be the path of a labels file"):
        make_config({}, tmp_path)
