"""YOLOv5 and YOLOv8 / YOLO11 heads, as exported to ONNX by their projects.

* YOLOv5: one output [N, boxes, 5 + C] = (cx, cy, w, h, objectness, class scores...), in
  network-input pixels, scores already through a sigmoid. Score = objectness x class score.
* YOLOv8 / YOLO11: one output [N, 4 + C, boxes] = (cx, cy, w, h, class scores...), no
  objectness. `layout` says which axis holds the channels: "channels_first" (the export's
  default), "boxes_first" ([N, boxes, 4 + C]) or "auto" (the axis equal to 4 + num_classes,
  else the shorter one).

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
)
from edge_sdk.errors import BackendError
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


class YOLOv8Decoder(Decoder):
    """[N, 4 + C, boxes] (or [N, boxes, 4 + C]): box, class scores; no objectness."""

    type_name = "yolov8"
    extra_keys = ("layout",)

    def __init__(self, spec: Mapping[str, Any], input_spec: InputSpec) -> None:
        super().__init__(spec, input_spec)
        self.layout = spec_choice(self.spec, "layout", "auto", ("auto", "channels_first", "boxes_first"))

    def _channels_first(self, shape: Tuple[int, ...]) -> bool:
        if self.layout != "auto":
            return self.layout == "channels_first"
        if self.num_classes:
            want = 4 + self.num_classes
            if shape[1] == want:
                return True
            if shape[2] == want:
                return False
        return shape[1] <= shape[2]

    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        check_count(self, outputs, (1,), "one output [N, 4 + classes, boxes]")
        check_ndim(self, outputs, 0, 3, "[N, 4 + classes, boxes]")
        shape = tuple(outputs[0].shape)
        channels = shape[1] if self._channels_first(shape) else shape[2]
        expected = 4 + self.num_classes if self.num_classes else None
        if channels < 5 or (expected is not None and channels != expected):
            want = expected if expected is not None else "4 + classes (>= 5)"
            raise BackendError(
                f"{self.type_name} decoder: output {self._name(0)} of shape {list(shape)} has {channels} values per "
                f"box (layout {self.layout}), expected {want}. Check decoder.num_classes, decoder.layout and "
                "decoder.type in the manifest"
            )

    def candidates(self, outputs: List[np.ndarray], i: int) -> Candidates:
        pred = outputs[0][i]
        if self._channels_first(outputs[0].shape):
            best = pred[4:].max(axis=0)
            cols = np.nonzero(best > self.score_threshold)[0]
            if cols.size == 0:
                return empty_candidates()
            sel = pred[:, cols].T.astype(np.float32)
        else:
            best = pred[:, 4:].max(axis=1)
            cols = np.nonzero(best > self.score_threshold)[0]
            if cols.size == 0:
                return empty_candidates()
            sel = pred[cols].astype(np.float32)
        class_id = sel[:, 4:].argmax(axis=1).astype(np.int32)
        boxes = cxcywh_to_xyxy(sel[:, 0], sel[:, 1], sel[:, 2], sel[:, 3])
        return boxes, best[cols].astype(np.float32), class_id, {}
