"""What the model's outputs are, before anything decodes them: its head and its class names.

From the graph's outputs (shapes, dtypes, a NonMaxSuppression or EfficientNMS_TRT node) and its
ONNX metadata (Ultralytics writes `task`, `names`, `kpt_shape`):

* a model that ends in NMS gets the `end2end` decoder (with no decoder configured, or where a
  YOLO decoder was named for it), its output format fixed in the spec;
* a YOLOv8/11 segmentation head is decoded for its boxes (`head = "segment"`), a pose head for
  its boxes and keypoints (`head = "pose"`); an oriented-box (OBB) head, a classifier, a YOLOv5
  segmentation head, or a head whose outputs do not add up to its classes is refused (ModelError,
  exit 4) instead of being read as extra classes;
* class names come from `--labels FILE`, else the decoder's `labels`, else the metadata's
  `names`, and go into the decoder spec (the manifest's `decoder.labels`).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from edge_sdk.builder.progress import BuildProgress
from edge_sdk.decoders.end2end import ROLES, signature_format
from edge_sdk.errors import ConfigError, ModelError
from edge_sdk.labels import check_labels, parse_names_literal, read_labels_file

YOLO_TYPES = ("yolov8", "yolo11")  # the decoder types of Ultralytics' raw heads
RAW_TYPES = YOLO_TYPES + ("yolov5",)
NMS_OPS = ("NonMaxSuppression", "EfficientNMS_TRT", "BatchedNMS_TRT", "BatchedNMSDynamic_TRT")
MAX_METADATA_CHARS = 1024 * 1024
SUPPORTED = ("supported: detection heads (yolov8/yolo11, yolov5, yolox, ssd, centerface), YOLOv8/11 segmentation "
             "(boxes) and pose (boxes and keypoints) heads, and models that end in NMS (end2end)")


@dataclass
class Output:
    name: str
    dims: Tuple[Optional[int], ...]  # None where the graph leaves a dimension open
    integer: bool


def metadata(model: Any) -> Dict[str, str]:
    """The model's ONNX metadata_props (values longer than MAX_METADATA_CHARS are left out)."""
    return {p.key: p.value for p in model.metadata_props if len(p.value) <= MAX_METADATA_CHARS}


def outputs(model: Any) -> List[Output]:
    from onnx import TensorProto

    found = []
    for value in model.graph.output:
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim)
        integer = tensor.elem_type in (TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.INT8)
        found.append(Output(value.name, dims, integer))
    return found


def resolve_head(model: Any, decoder_spec: Optional[Dict[str, Any]], labels_file: Optional[Path],
                 progress: BuildProgress) -> Optional[Dict[str, Any]]:
    """The decoder spec for this model's head, with its labels (see the module docstring)."""
    meta = metadata(model)
    outs = outputs(model)
    spec = dict(decoder_spec) if decoder_spec else None
    labels, labels_from, labels_error = _labels(meta, spec, labels_file)
    task = str(meta.get("task", "")).strip().lower() or None
    kind = str(spec.get("type", "")).lower() if spec else None
    fmt = _end2end_format(model, meta, outs)
    if spec is not None or fmt is not None:
        _check_task(task, "end2end" if fmt is not None else str(kind))
    if fmt is not None and (spec is None or kind in RAW_TYPES):
        spec = _end2end_spec(spec, fmt, outs)
        progress.info(f"decoder: end2end ({fmt}): the model ends in NMS ({', '.join(o.name for o in outs)})"
                      + (f", in place of {kind}" if kind else ""))
    elif spec is not None and kind in YOLO_TYPES:
        spec = _yolo_head(spec, task, meta, outs, len(labels) if labels else None, labels_from, labels_error)
    elif spec is not None and kind == "yolov5":
        _check_yolov5(outs, len(labels) if labels else spec.get("num_classes"), labels_from, labels_error)
    if labels is None:
        return spec
    if spec is None:
        progress.warn(f"{labels_from} give {len(labels)} class names, but the build has no decoder to attach them to; "
                      "name one with --decoder")
        return spec
    spec["labels"] = labels
    spec.setdefault("num_classes", len(labels))
    if spec["num_classes"] != len(labels):
        raise labels_error(f"{labels_from} give {len(labels)} class names but decoder.num_classes is {spec['num_classes']}; "
                           "give one name per class the model outputs")
    progress.info(f"labels: {len(labels)} class names from {labels_from} ({_preview(labels)})")
    return spec


# -- class names ---------------------------------------------------------------------------------
def _labels(meta: Dict[str, str], spec: Optional[Dict[str, Any]],
            labels_file: Optional[Path]) -> Tuple[Optional[List[str]], str, type]:
    """(names or None, where they come from, the error type a mismatch raises)."""
    if labels_file is not None:
        return read_labels_file(labels_file), f"--labels {labels_file}", ConfigError
    if spec is not None and spec.get("labels") is not None:
        return check_labels(spec["labels"], "decoder.labels"), "decoder.labels", ConfigError
    if "names" in meta:
        names = parse_names_literal(meta["names"], "the model's metadata `names`", ModelError)
        return names, "the model's metadata (names)", ModelError
    return None, "", ConfigError


def _preview(labels: List[str]) -> str:
    return ", ".join(labels[:5]) + (f", … {len(labels) - 5} more" if len(labels) > 5 else "")


# -- heads that end in NMS -----------------------------------------------------------------------
def _end2end_format(model: Any, meta: Dict[str, str], outs: List[Output]) -> Optional[str]:
    ops = {node.op_type for node in model.graph.node}
    fmt = signature_format([o.dims for o in outs], [o.integer for o in outs])
    if fmt is not None:
        return fmt
    first = outs[0].dims if outs else ()
    # [N, max_det, 6 + extra]: more rows than values per row (a raw head is [N, 4 + C, anchors])
    rows = (len(first) == 3 and first[2] is not None and first[2] >= 6 and (first[1] is None or first[1] > first[2])
            and len(outs) <= 2)
    if rows and (ops & set(NMS_OPS) or _flag(meta.get("end2end")) or _nms_arg(meta.get("args"))):
        return "rows"
    return None


def _flag(value: Optional[str]) -> bool:
    return value is not None and value.strip().lower() == "true"


def _nms_arg(args: Optional[str]) -> bool:
    """Ultralytics records its export arguments as a dict literal: {'nms': True, ...}."""
    if not args:
        return False
    try:
        value = ast.literal_eval(args.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return isinstance(value, dict) and value.get("nms") is True


def _end2end_spec(spec: Optional[Dict[str, Any]], fmt: str, outs: List[Output]) -> Dict[str, Any]:
    """An end2end spec that keeps what a YOLO spec said of thresholds and classes."""
    kept = ("score_threshold", "max_detections", "num_classes", "labels", "output_names", "class_agnostic")
    new: Dict[str, Any] = {"type": "end2end", "format": fmt}
    new.update({k: v for k, v in (spec or {}).items() if k in kept})
    roles = _roles(fmt, outs)
    if roles is not None:
        new["outputs"] = roles
    return new


def _roles(fmt: str, outs: List[Output]) -> Optional[List[str]]:
    """Each output's role where the names tell what the shapes cannot (two float [N, K] outputs)."""
    if fmt != "count_boxes_scores_classes":
        return None
    pair = [k for k, o in enumerate(outs) if len(o.dims) == 2 and o.dims[1] != 1]
    if any(outs[k].integer for k in pair):
        return None
    named = [k for k in pair if any(w in outs[k].name.lower() for w in ("class", "label"))]
    if len(named) != 1:
        return None
    roles = []
    for k, o in enumerate(outs):
        if len(o.dims) == 3:
            roles.append("boxes")
        elif k in pair:
            roles.append("classes" if k == named[0] else "scores")
        else:
            roles.append("count")
    assert sorted(roles) == sorted(ROLES[fmt])
    return roles


# -- YOLO heads ----------------------------------------------------------------------------------
def _check_task(task: Optional[str], kind: str) -> None:
    """ModelError for a head no decoder reads right: rotated boxes, a classifier, a yolov5 decoder on
    a YOLOv8/11 segment or pose head."""
    if task == "obb":
        raise ModelError(
            f"the model is an oriented-box (OBB) head (metadata task 'obb'): its boxes are rotated (x, y, w, h, angle), "
            f"which the {kind} decoder would misread as an extra class; edge-sdk does not decode rotated boxes. {SUPPORTED}"
        )
    if task == "classify":
        raise ModelError(f"the model is an image classifier (metadata task 'classify'), not a detector. {SUPPORTED}")
    if task in ("segment", "pose") and kind == "yolov5":
        raise ModelError(f"the model is a {task} head (metadata task {task!r}); the yolov5 decoder reads detection "
                         f"heads only. Use --decoder yolov8 for a YOLOv8/11 {task} export. {SUPPORTED}")


def _yolo_head(spec: Dict[str, Any], task: Optional[str], meta: Dict[str, str], outs: List[Output],
               classes: Optional[int], labels_from: str, labels_error: type) -> Dict[str, Any]:
    """The head a YOLOv8/11 spec reads: detect, segment or pose, checked against the outputs."""
    preds = [o for o in outs if len(o.dims) == 3]
    protos = [o for o in outs if len(o.dims) == 4]
    if task is None and len(outs) == 2 and len(preds) == 1 and len(protos) == 1:
        task = "segment"  # YOLOv8/11-seg: predictions beside [N, 32, h, w] mask prototypes
    if task not in (None, "detect", "segment", "pose"):
        raise ModelError(f"the model's metadata says task {task!r}, which edge-sdk does not decode. {SUPPORTED}")
    if classes is None and isinstance(spec.get("num_classes"), int):
        classes = spec["num_classes"]
    channels = _channels(preds[0]) if len(preds) == 1 else None
    head = task or "detect"
    if head == "segment":
        masks = protos[0].dims[1] if len(protos) == 1 else None
        if masks is None and channels is not None and classes is not None:
            masks = channels - 4 - classes
        spec.setdefault("head", "segment")
        if masks is not None:
            spec.setdefault("mask_channels", masks)
        extra = masks
    elif head == "pose":
        kpt = _kpt_shape(meta.get("kpt_shape"))
        spec.setdefault("head", "pose")
        if kpt is not None:
            spec.setdefault("keypoints", kpt)
        k = spec.get("keypoints", [17, 3])
        extra = k[0] * k[1] if isinstance(k, list) and len(k) == 2 and all(isinstance(v, int) for v in k) else None
        if classes is None:
            classes = 1
    else:
        extra = 0
    if channels is not None and classes is not None and extra is not None and channels != 4 + classes + extra:
        raise labels_error(_mismatch(preds[0], channels, classes, extra, head, labels_from, len(protos)))
    return spec


def _check_yolov5(outs: List[Output], classes: Any, labels_from: str, labels_error: type) -> None:
    """A YOLOv5 head is one [N, anchors, 5 + C] output; a segmentation export adds 32 mask
    coefficients per row and a prototypes output, which the yolov5 decoder does not read."""
    if any(len(o.dims) == 4 for o in outs):
        raise ModelError(
            f"the model has a mask prototypes output ({', '.join(o.name for o in outs if len(o.dims) == 4)}): a YOLOv5 "
            f"segmentation head, whose mask coefficients the yolov5 decoder would read as classes. {SUPPORTED}"
        )
    rows = outs[0].dims[2] if len(outs) == 1 and len(outs[0].dims) == 3 else None
    if rows is not None and isinstance(classes, int) and rows != 5 + classes:
        raise labels_error(
            f"output {outs[0].name!r} {list(outs[0].dims)} has {rows} values per box, but {labels_from or 'decoder.num_classes'} "
            f"names {classes} classes (a YOLOv5 head has 5 + classes). Give one class name per class the model outputs"
        )


def _channels(pred: Output) -> Optional[int]:
    """Values per box of a [N, C, boxes] or [N, boxes, C] output (the smaller known dimension)."""
    known = [d for d in pred.dims[1:] if d is not None]
    if len(known) == 2:
        return min(known)
    return None


def _kpt_shape(value: Optional[str]) -> Optional[List[int]]:
    if not value:
        return None
    try:
        kpt = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ModelError(f"the model's metadata kpt_shape {value!r:.40} is not [keypoints, values] such as [17, 3]") from None
    if not isinstance(kpt, (list, tuple)) or len(kpt) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in kpt):
        raise ModelError(f"the model's metadata kpt_shape {value!r:.40} is not [keypoints, values] such as [17, 3]")
    return [int(kpt[0]), int(kpt[1])]


def _mismatch(pred: Output, channels: int, classes: int, extra: int, head: str, labels_from: str, protos: int) -> str:
    rest = channels - 4 - classes
    where = f"output {pred.name!r} {list(pred.dims)} has {channels} values per box"
    source = labels_from or "decoder.num_classes"
    if head != "detect" or rest <= 0:
        return (f"{where}; a {head} head with {classes} classes ({source}) has {4 + classes + extra}. "
                "Give one class name per class the model outputs, or check the export")
    if rest == 1:
        guess = "an oriented-box (OBB) head (4 + classes + 1 angle), whose rotated boxes edge-sdk does not decode"
    elif rest == 32 or protos:
        guess = "a segmentation head (4 + classes + 32 mask coefficients); build it with its mask prototypes output"
    elif rest > 0 and rest % 3 == 0:
        guess = f"a pose head (4 + classes + {rest // 3} keypoints x 3); its metadata should say task 'pose'"
    else:
        guess = "a head of another layout"
    return (f"{where}, but {source} names {classes} classes: 4 + {classes} + {rest} extra values per box looks like "
            f"{guess}, not {rest} more classes. If the model has {channels - 4} classes, give one name per class. {SUPPORTED}")

