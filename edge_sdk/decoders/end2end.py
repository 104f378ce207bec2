"""Models that end in NMS: their outputs are already the detections, in network-input pixels.

`format` names the output signature (or "auto", the default, tells it from the outputs):

* "count_boxes_scores_classes" — TensorRT's EfficientNMS_TRT (and exports built on it): four
  outputs num_dets [N, 1], boxes [N, K, 4] (x1, y1, x2, y2), scores [N, K], classes [N, K];
  the first num_dets rows of each item are detections, the rest padding.
* "rows" — Ultralytics' `nms=True` export (and end-to-end heads such as YOLOv10's): one output
  [N, K, 6 + extra] whose rows are x1, y1, x2, y2, score, class (then mask coefficients or
  keypoints, ignored); rows scoring 0 are padding. A segmentation export's mask prototypes, a
  second output, are ignored.
* "selected_indices" — a graph ending in ONNX NonMaxSuppression: selected_indices [M, 3]
  (batch, class, box) beside the boxes [N, B, 4] and scores [N, C, B] it selected from.

Boxes are `box_format` xyxy (the default; any two opposite corners), yxyx (NonMaxSuppression's
documented order, center_point_box 0) or cxcywh (center_point_box 1).

`outputs` names the role of each output in model order ("count", "boxes", "scores", "classes",
"rows", "indices"); without it the roles follow from the shapes and dtypes. Boxes are in
network-input pixels, or fractions of the input size with `normalized` true. The model's own
NMS has run: `nms_iou` defaults to 1.0 (no further suppression); a lower value adds a second,
class-aware pass. `score_threshold` filters the rows the model returns.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from edge_sdk.decoders._base import Decoder, cxcywh_to_xyxy, empty_candidates, spec_bool, spec_choice
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.preprocess import InputSpec

FORMATS = ("count_boxes_scores_classes", "rows", "selected_indices")
ROLES = {
    "count_boxes_scores_classes": ("count", "boxes", "scores", "classes"),
    "rows": ("rows",),
    "selected_indices": ("boxes", "scores", "indices"),
}
BOX_FORMATS = ("xyxy", "yxyx", "cxcywh")

Candidates = Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, np.ndarray]]


def signature_format(shapes: List[Tuple[Any, ...]], integer: List[bool]) -> Optional[str]:
    """The format an output signature has (dims may be None or names where unknown), or None.

    `integer` says which outputs hold integers. "rows" is not told from the shapes alone (a
    one-class YOLOv5 head is [N, anchors, 6] too); the caller knows it from the graph."""
    ranks = [len(s) for s in shapes]
    if len(shapes) == 4 and sorted(ranks) == [2, 2, 2, 3]:
        count = [k for k, s in enumerate(shapes) if len(s) == 2 and s[1] == 1]
        boxes = [k for k, s in enumerate(shapes) if len(s) == 3 and s[2] == 4]
        if len(count) == 1 and len(boxes) == 1:
            return "count_boxes_scores_classes"
    if 2 <= len(shapes) <= 3:
        indices = [k for k, s in enumerate(shapes) if len(s) == 2 and s[1] == 3 and integer[k]]
        if len(indices) == 1 and ranks.count(3) == 2 and len(shapes) == 3:
            return "selected_indices"
    return None


class End2EndDecoder(Decoder):
    """Detections a model's own NMS selected (see the module docstring)."""

    type_name = "end2end"
    extra_keys = ("format", "outputs", "box_format", "normalized")
    default_nms_iou = 1.0
    default_pre_nms_topk = None

    def __init__(self, spec: Mapping[str, Any], input_spec: InputSpec) -> None:
        super().__init__(spec, input_spec)
        self.format = spec_choice(self.spec, "format", "auto", ("auto",) + FORMATS)
        self.box_format = spec_choice(self.spec, "box_format", "xyxy", BOX_FORMATS)
        self.normalized = spec_bool(self.spec, "normalized", False)
        roles = self.spec.get("outputs")
        if roles is not None:
            if self.format == "auto" or not isinstance(roles, (list, tuple)):
                raise ConfigError(f"decoder.outputs needs decoder.format (one of {list(FORMATS)}) and a list of roles, got {roles!r}")
            known = ROLES[self.format]
            if sorted(r for r in roles if r != "ignore") != sorted(known) or not all(isinstance(r, str) for r in roles):
                raise ConfigError(
                    f"decoder.outputs for format {self.format} must name each of {list(known)} once (and \"ignore\" for "
                    f"outputs to skip), in model output order; got {roles!r}"
                )
        self.roles: Optional[List[str]] = list(roles) if roles is not None else None

    # -- which output is which -------------------------------------------------------------------
    def _format(self, outputs: List[np.ndarray]) -> str:
        if self.format != "auto":
            return self.format
        found = signature_format([tuple(o.shape) for o in outputs], [o.dtype.kind in "iu" for o in outputs])
        rows = outputs[0].ndim == 3 and outputs[0].shape[2] >= 6
        if found is None and rows and (len(outputs) == 1 or len(outputs) == 2 and outputs[1].ndim == 4):
            found = "rows"  # beside a segmentation export's mask prototypes
        if found is None:
            raise BackendError(
                f"end2end decoder: the outputs {[list(o.shape) for o in outputs]} are none of the end-to-end signatures "
                "(num_dets [N,1] + boxes [N,K,4] + scores [N,K] + classes [N,K]; rows [N,K,6+]; boxes + scores + "
                "selected_indices [M,3]). Check decoder.type in the manifest"
            )
        return found

    def _index(self, outputs: List[np.ndarray]) -> Dict[str, int]:
        fmt = self._format(outputs)
        if self.roles is not None:
            if len(self.roles) != len(outputs):
                raise BackendError(
                    f"end2end decoder: decoder.outputs names {len(self.roles)} roles, the model gave {len(outputs)} "
                    "output(s); name one role per output"
                )
            return {role: k for k, role in enumerate(self.roles) if role != "ignore"}
        shapes = [tuple(o.shape) for o in outputs]
        if fmt == "rows":
            return {"rows": 0}
        try:
            if fmt == "selected_indices":
                idx = next(k for k, o in enumerate(outputs) if o.ndim == 2)
                three = [k for k in range(len(outputs)) if k != idx and outputs[k].ndim == 3]
                boxes = [k for k in three if shapes[k][2] == 4]
                box = boxes[0] if len(boxes) == 1 else three[0]
                return {"indices": idx, "boxes": box, "scores": next(k for k in three if k != box)}
            count = next(k for k, s in enumerate(shapes) if len(s) == 2 and s[1] == 1)
            box = next(k for k, s in enumerate(shapes) if len(s) == 3)
            rest = [k for k in range(len(outputs)) if k not in (count, box)]
            ints = [k for k in rest if outputs[k].dtype.kind in "iu"]
            classes = ints[0] if len(ints) == 1 else rest[1]  # EfficientNMS_TRT's order: scores, then classes
            return {"count": count, "boxes": box, "scores": next(k for k in rest if k != classes), "classes": classes}
        except (StopIteration, IndexError):
            raise BackendError(
                f"end2end decoder: the outputs {[list(s) for s in shapes]} do not have the {fmt} signature "
                f"({', '.join(ROLES[fmt])}). Check decoder.format and decoder.outputs in the manifest"
            ) from None

    def batched(self, outputs: List[np.ndarray]) -> List[int]:
        index = self._index(outputs)
        return [k for role, k in index.items() if role != "indices"]

    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        fmt = self._format(outputs)
        index = self._index(outputs)
        want = {"count": 2, "boxes": 3, "scores": 3 if fmt == "selected_indices" else 2, "classes": 2, "rows": 3, "indices": 2}
        for role, k in index.items():
            if k >= len(outputs) or outputs[k].ndim != want[role]:
                got = list(outputs[k].shape) if k < len(outputs) else "nothing"
                raise BackendError(
                    f"end2end decoder ({fmt}): output {self._name(k)} should be the {role}, {want[role]}-D, got {got}. "
                    "Check decoder.outputs and decoder.format in the manifest"
                )
        if fmt == "rows" and outputs[index["rows"]].shape[2] < 6:
            raise BackendError(f"end2end decoder: rows output has {outputs[index['rows']].shape[2]} values per row; "
                               "expected x1, y1, x2, y2, score, class (6 or more)")
        if fmt == "count_boxes_scores_classes":
            b = outputs[index["boxes"]].shape
            if b[2] != 4 or outputs[index["scores"]].shape[:2] != b[:2] or outputs[index["classes"]].shape[:2] != b[:2]:
                raise BackendError(
                    f"end2end decoder: boxes {list(b)}, scores {list(outputs[index['scores']].shape)} and classes "
                    f"{list(outputs[index['classes']].shape)} must be [N, K, 4], [N, K], [N, K]"
                )
        if fmt == "selected_indices":
            sel, b, sc = outputs[index["indices"]], outputs[index["boxes"]].shape, outputs[index["scores"]].shape
            if sel.shape[1] != 3 or b[2] != 4 or sc[0] != b[0] or sc[2] != b[1]:
                raise BackendError(
                    f"end2end decoder: selected_indices {list(sel.shape)}, boxes {list(b)} and scores {list(sc)} must be "
                    "[M, 3], [N, B, 4] and [N, C, B]"
                )

    # -- decoding --------------------------------------------------------------------------------
    def candidates(self, outputs: List[np.ndarray], i: int) -> Candidates:
        fmt = self._format(outputs)
        index = self._index(outputs)
        if fmt == "rows":
            rows = outputs[index["rows"]][i]
            boxes, scores, classes = self._to_xyxy(rows[:, :4]), rows[:, 4], rows[:, 5]
        elif fmt == "count_boxes_scores_classes":
            n = int(np.asarray(outputs[index["count"]][i]).reshape(-1)[0])
            n = max(0, min(n, outputs[index["boxes"]].shape[1]))
            boxes = self._to_xyxy(outputs[index["boxes"]][i, :n])
            scores = outputs[index["scores"]][i, :n]
            classes = outputs[index["classes"]][i, :n]
        else:
            sel = np.asarray(outputs[index["indices"]]).astype(np.int64, copy=False)
            sel = sel[sel[:, 0] == i]
            n_cls, n_box = outputs[index["scores"]].shape[1:]
            ok = (sel[:, 1] >= 0) & (sel[:, 1] < n_cls) & (sel[:, 2] >= 0) & (sel[:, 2] < n_box)
            sel = sel[ok]
            boxes = self._to_xyxy(outputs[index["boxes"]][i, sel[:, 2]])
            scores = outputs[index["scores"]][i, sel[:, 1], sel[:, 2]]
            classes = sel[:, 1]
        keep = np.nonzero(np.asarray(scores) > self.score_threshold)[0]
        if keep.size == 0:
            return empty_candidates()
        boxes = np.asarray(boxes, dtype=np.float32)[keep]
        if self.normalized:
            boxes = boxes * np.array([self.input_spec.width, self.input_spec.height] * 2, np.float32)
        class_id = np.rint(np.asarray(classes)[keep]).astype(np.int32)
        return boxes, np.asarray(scores, dtype=np.float32)[keep], class_id, {}

    def _to_xyxy(self, boxes: np.ndarray) -> np.ndarray:
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        if self.box_format == "yxyx":
            boxes = boxes[:, [1, 0, 3, 2]]
        elif self.box_format == "cxcywh":
            return cxcywh_to_xyxy(boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3])
        # NonMaxSuppression takes any diagonal pair of corners
        return np.concatenate([np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])], axis=1)
