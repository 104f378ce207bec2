"""ONNX models with the exact output signatures and metadata of real detector exports, made with
onnx.helper: each output is a known array (so a test can compute what a decoder must find by
hand) that still depends on the image input, so ONNX Runtime runs the graph as a whole.

* Ultralytics YOLOv8/11 detect, segment, pose and OBB heads ([1, 4+C(+extra), N], a segment
  model's [1, 32, H/4, W/4] prototypes beside it), with the metadata Ultralytics writes;
* Ultralytics' `nms=True` export: one [1, max_det, 6] output behind a real NonMaxSuppression node;
* TensorRT EfficientNMS_TRT's four outputs (num_dets int32 [1,1], boxes [1,K,4], scores [1,K],
  classes int32 [1,K]);
* a graph ending in ONNX NonMaxSuppression: boxes, scores and the selected_indices it computes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, W = 320, 320  # network input
INPUT = "images"


def ultralytics_metadata(task: str, names: Sequence[str], **extra: str) -> Dict[str, str]:
    """The metadata_props an Ultralytics ONNX export carries (values as it writes them)."""
    meta = {
        "description": f"Ultralytics YOLO11n-{task} model", "author": "Ultralytics", "date": "2025-01-01T00:00:00",
        "version": "8.3.40", "license": "AGPL-3.0 License (https://ultralytics.com/license)",
        "docs": "https://docs.ultralytics.com", "stride": "32", "task": task, "batch": "1", "imgsz": f"[{H}, {W}]",
        "names": str(dict(enumerate(names))),
    }
    meta.update(extra)
    return meta


def _zero_nodes() -> List[onnx.NodeProto]:
    """`zero` [1] = 0 * mean(image): makes every output depend on the input."""
    n = helper.make_node
    return [
        n("ReduceMean", [INPUT], ["mean"], axes=[1, 2, 3], keepdims=0),
        n("Mul", ["mean", "c_zero"], ["zero0"]),
        n("Reshape", ["zero0", "c_shape1"], ["zero"]),
    ]


def _inits() -> List[onnx.TensorProto]:
    return [numpy_helper.from_array(np.zeros(1, np.float32), "c_zero"),
            numpy_helper.from_array(np.array([1], np.int64), "c_shape1")]


def constant_outputs_model(outputs: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None,
                           opset: int = 13) -> onnx.ModelProto:
    """A model whose outputs are the given arrays (float32, or int32/int64 through a Cast)."""
    n = helper.make_node
    nodes, inits = _zero_nodes(), _inits()
    infos = []
    for name, value in outputs.items():
        value = np.asarray(value)
        const = f"c_{name}"
        inits.append(numpy_helper.from_array(value.astype(np.float32), const))
        if value.dtype.kind in "iu":
            nodes += [n("Add", [const, "zero"], [f"{name}_f"]),
                      n("Cast", [f"{name}_f"], [name], to=helper.np_dtype_to_tensor_dtype(value.dtype))]
        else:
            nodes.append(n("Add", [const, "zero"], [name]))
        elem = helper.np_dtype_to_tensor_dtype(value.dtype if value.dtype.kind in "iu" else np.dtype(np.float32))
        infos.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
    return _model(nodes, inits, infos, metadata, opset)


def _model(nodes, inits, outputs, metadata, opset) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [1, 3, H, W])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch")
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    return model


def yolo_columns(boxes_xyxy: np.ndarray, classes: Sequence[int], scores: Sequence[float], num_classes: int,
                 extra: int = 0, anchors: int = 2100, slots: Sequence[int] = (5, 700, 2000),
                 extra_values: Optional[np.ndarray] = None) -> np.ndarray:
    """[1, 4 + C + extra, anchors] as a YOLOv8/11 head writes it: cx, cy, w, h, class scores, extra."""
    out = np.zeros((1, 4 + num_classes + extra, anchors), np.float32)
    out[0, 4 + num_classes:, :] = 0.7  # mask coefficients / keypoints / angle: large values, not scores
    for k, (slot, box, c, s) in enumerate(zip(slots, boxes_xyxy, classes, scores)):
        x1, y1, x2, y2 = box
        out[0, :4, slot] = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
        out[0, 4 + c, slot] = s
        if extra_values is not None:
            out[0, 4 + num_classes:, slot] = extra_values[k]
    return out


def nms_rows_model(rows: np.ndarray, metadata: Optional[Dict[str, str]] = None, proto: bool = False) -> onnx.ModelProto:
    """Ultralytics' `nms=True` export: output0 [1, max_det, 6 (+32)] behind a NonMaxSuppression node
    (whose selection this stand-in does not use), and for a segment model output1 [1, 32, 80, 80]."""
    n = helper.make_node
    nodes, inits = _zero_nodes(), _inits()
    inits += [numpy_helper.from_array(rows.astype(np.float32)[None], "c_rows"),
              numpy_helper.from_array(np.array([[[0, 0, 10, 10]]], np.float32), "c_nms_boxes"),
              numpy_helper.from_array(np.array([[[0.9]]], np.float32), "c_nms_scores")]
    nodes += [n("Add", ["c_rows", "zero"], ["output0"]),
              n("NonMaxSuppression", ["c_nms_boxes", "c_nms_scores"], ["nms_selected"])]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, rows.shape[0], rows.shape[1]])]
    if proto:
        inits.append(numpy_helper.from_array(np.full((1, 32, H // 4, W // 4), 0.5, np.float32), "c_proto"))
        nodes.append(n("Add", ["c_proto", "zero"], ["output1"]))
        outputs.append(helper.make_tensor_value_info("output1", TensorProto.FLOAT, [1, 32, H // 4, W // 4]))
    return _model(nodes, inits, outputs, metadata, 13)


def onnx_nms_model(boxes: np.ndarray, scores: np.ndarray, iou: float, score_threshold: float,
                   max_per_class: int = 10) -> onnx.ModelProto:
    """A graph ending in a real NonMaxSuppression: outputs boxes [1, B, 4], scores [1, C, B] and
    the selected_indices [M, 3] that ONNX Runtime's NonMaxSuppression computes from them."""
    n = helper.make_node
    nodes, inits = _zero_nodes(), _inits()
    inits += [numpy_helper.from_array(boxes.astype(np.float32)[None], "c_boxes"),
              numpy_helper.from_array(scores.astype(np.float32)[None], "c_scores"),
              numpy_helper.from_array(np.array([max_per_class], np.int64), "c_max"),
              numpy_helper.from_array(np.array([iou], np.float32), "c_iou"),
              numpy_helper.from_array(np.array([score_threshold], np.float32), "c_thr")]
    nodes += [n("Add", ["c_boxes", "zero"], ["boxes"]),
              n("Add", ["c_scores", "zero"], ["scores"]),
              n("NonMaxSuppression", ["boxes", "scores", "c_max", "c_iou", "c_thr"], ["selected_indices"],
                center_point_box=0)]
    outputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, boxes.shape[0], 4]),
               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, scores.shape[0], scores.shape[1]]),
               helper.make_tensor_value_info("selected_indices", TensorProto.INT64, ["num_selected", 3])]
    return _model(nodes, inits, outputs, None, 13)


def run(model: onnx.ModelProto, image: Optional[np.ndarray] = None) -> List[np.ndarray]:
    """The model's outputs on ONNX Runtime (CPU) for one image tensor (random by default)."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    if image is None:
        image = np.random.default_rng(0).random((1, 3, H, W), dtype=np.float32)
    return session.run(None, {INPUT: image})


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def frame_transform(frame_w: int = 640, frame_h: int = 480) -> Tuple[object, float, float]:
    """The letterbox transform of a 640x480 frame into the 320x320 input: scale 0.5, pad_y 40."""
    from edge_sdk.preprocess import plan_transform

    transform, _ = plan_transform(frame_w, frame_h, W, H, "letterbox")
    return transform, 0.5, 40.0
