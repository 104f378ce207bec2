"""YOLOv5 and YOLOv8 / YOLO11 heads, as exported to ONNX by their projects.

* YOLOv5: one output [N, boxes, 5 + C] = (cx, cy, w, h, objectness, class scores...), in
  network-input pixels, scores already through a sigmoid. Score = objectness x class score.
* YOLOv8 / YOLO11: one output [N, 4 + C, boxes] = (cx, cy, w, h, class scores...), no
  objectness. `layout` says which axis holds the channels: "channels_first" (the export's
  default), "boxes_first" ([N, boxes, 4 + C]) or "auto" (the axis equal to 4 + num_classes,
  else the shorter one). Segmentation and pose heads: see :class:`YOLOv8Decoder`.

Each box gets its best class; with `class_agnostic` false (the default) NMS runs per class.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

import numpy as np

from edge_sdk.decoders._base import (
    Decoder,
    check_count,
    check_ndim,
    cxcywh_to_xyxy,
    empty_candidates,
    spec_choice,
    spec_int,
)
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.preprocess import InputSpec

Candidates = Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, np.ndarray]]


class YOLOv5Decoder(Decoder):
    """[N, boxes, 5 + C]: box, objectness, class scores."""

    type_name = "yolov5"

    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        check_count(self, outputs, (1,), "one output [N, boxes, 5 + classes]")
        check_ndim(self, outputs, 0, 3, "[N, boxes, 5 + classes]")
        channels = outputs[0].shape[2]
        expected = 5 + self.num_classes if self.num_classes else None
        if channels < 6 or (expected is not None and channels != expected):
            want = expected if expected is not None else "5 + classes (>= 6)"
            raise BackendError(
                f"{self.type_name} decoder: output {self._name(0)} has {channels} values per box, expected {want}. "
                "Check decoder.num_classes and decoder.type in the manifest"
            )

    def candidates(self, outputs: List[np.ndarray], i: int) -> Candidates:
        pred = outputs[0][i]
        # score = objectness * class score <= objectness: filter on objectness first.
        rows = np.nonzero(pred[:, 4] > self.score_threshold)[0]
        if rows.size == 0:
            return empty_candidates()
        sel = pred[rows].astype(np.float32)
        cls = sel[:, 5:]
        class_id = cls.argmax(axis=1)
        scores = sel[:, 4] * cls[np.arange(len(sel)), class_id]
        ok = scores > self.score_threshold
        rows, sel = rows[ok], sel[ok]
        boxes = self.boxes(sel[:, :4], rows)
        return boxes, scores[ok], class_id[ok].astype(np.int32), {}

    def boxes(self, raw: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(K, 4) cx, cy, w, h in network-input pixels -> xyxy. `rows` are the anchor indices."""
        return cxcywh_to_xyxy(raw[:, 0], raw[:, 1], raw[:, 2], raw[:, 3])


HEADS = ("detect", "segment", "pose")


class YOLOv8Decoder(Decoder):
    """[N, 4 + C (+ extra), boxes] (or [N, boxes, 4 + C (+ extra)]): box, class scores; no objectness.

    `head` says what follows the class scores in each column: "detect" nothing; "segment"
    (YOLOv8/11-seg) `mask_channels` mask coefficients (default 32), with the [N, 32, h, w]
    prototype output beside it, which is ignored (boxes only); "pose" (YOLOv8/11-pose) keypoints,
    `keypoints` = [K, D] values each (default [17, 3]: x, y, visibility), returned as
    `data["keypoints"]` (boxes, K, 2) in frame pixels. Oriented boxes (OBB) are not decoded.
    """

    type_name = "yolov8"
    extra_keys = ("layout", "head", "mask_channels", "keypoints")

    def __init__(self, spec: Mapping[str, Any], input_spec: InputSpec) -> None:
        super().__init__(spec, input_spec)
        self.layout = spec_choice(self.spec, "layout", "auto", ("auto", "channels_first", "boxes_first"))
        self.head = spec_choice(self.spec, "head", "detect", HEADS)
        self.mask_channels = spec_int(self.spec, "mask_channels", 32, 1) if self.head == "segment" else 0
        self.keypoints: Tuple[int, int] = (0, 0)
        if self.head == "pose":
            kpt = self.spec.get("keypoints", [17, 3])
            if (not isinstance(kpt, (list, tuple)) or len(kpt) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in kpt)
                    or kpt[0] < 1 or kpt[1] not in (2, 3)):
                raise ConfigError(f"decoder.keypoints must be [count, 2 or 3] such as [17, 3], got {kpt!r}")
            self.keypoints = (int(kpt[0]), int(kpt[1]))
            if self.num_classes is None:
                self.num_classes = 1  # YOLOv8/11-pose: one class (person)
        self.extra = self.mask_channels + self.keypoints[0] * self.keypoints[1]

    def _channels_first(self, shape: Tuple[int, ...]) -> bool:
        if self.layout != "auto":
            return self.layout == "channels_first"
        if self.num_classes:
            want = 4 + self.num_classes + self.extra
            if shape[1] == want:
                return True
            if shape[2] == want:
                return False
        return shape[1] <= shape[2]

    def _pred(self, outputs: List[np.ndarray]) -> int:
        """The index of the prediction output (a segmentation model's other one is its prototypes)."""
        return 0 if self.head != "segment" or outputs[0].ndim == 3 or len(outputs) == 1 else 1

    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        if self.head == "segment":
            check_count(self, outputs, (1, 2), "one output [N, 4 + classes + masks, boxes] (and the mask prototypes)")
        else:
            check_count(self, outputs, (1,), f"one output [N, 4 + classes{' + keypoints' if self.extra else ''}, boxes]")
        k = self._pred(outputs)
        check_ndim(self, outputs, k, 3, "[N, 4 + classes, boxes]")
        shape = tuple(outputs[k].shape)
        channels = shape[1] if self._channels_first(shape) else shape[2]
        expected = 4 + self.num_classes + self.extra if self.num_classes else None
        if channels < 5 + self.extra or (expected is not None and channels != expected):
            want = expected if expected is not None else f"4 + classes{f' + {self.extra}' if self.extra else ''}"
            raise BackendError(
                f"{self.type_name} decoder: output {self._name(k)} of shape {list(shape)} has {channels} values per "
                f"box (layout {self.layout}, head {self.head}), expected {want}. Check decoder.num_classes, "
                "decoder.head, decoder.layout and decoder.type in the manifest"
            )

    def candidates(self, outputs: List[np.ndarray], i: int) -> Candidates:
        k = self._pred(outputs)
        pred = outputs[k][i]
        if not self._channels_first(outputs[k].shape):
            pred = pred.T
        classes = pred.shape[0] - 4 - self.extra
        best = pred[4 : 4 + classes].max(axis=0)
        cols = np.nonzero(best > self.score_threshold)[0]
        if cols.size == 0:
            boxes, scores, class_id, data = empty_candidates()
            if self.head == "pose":
                data = {"keypoints": np.zeros((0, self.keypoints[0], 2), np.float32)}
            return boxes, scores, class_id, data
        sel = pred[:, cols].T.astype(np.float32)
        class_id = sel[:, 4 : 4 + classes].argmax(axis=1).astype(np.int32)
        boxes = cxcywh_to_xyxy(sel[:, 0], sel[:, 1], sel[:, 2], sel[:, 3])
        data = {}
        if self.head == "pose":
            kpt = sel[:, 4 + classes :].reshape(len(sel), self.keypoints[0], self.keypoints[1])
            data["keypoints"] = np.ascontiguousarray(kpt[:, :, :2])
        return boxes, best[cols].astype(np.float32), class_id, data
