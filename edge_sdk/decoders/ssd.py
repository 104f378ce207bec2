"""SSD-style heads: per-prior boxes [N, B, 4] and class scores [N, B, C], before NMS.

Spec keys beyond the common ones:

* `box_format`: "xyxy" (default) or "yxyx" (TensorFlow's order).
* `normalized`: boxes are fractions of the network input (default true) or input pixels.
* `background_class`: the score column that means "no object" (default 0), or null. It is
  never reported; other classes keep their column index as `class_id`.
* `score_activation`: "none" (default: scores are probabilities), "sigmoid" or "softmax".
* `outputs`: the role of each model output, ["boxes", "scores"] or ["scores", "boxes"];
  when absent it is read from the shapes (the output whose last axis is 4 holds the boxes).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from edge_sdk.decoders._base import (
    Decoder,
    check_count,
    check_ndim,
    empty_candidates,
    spec_bool,
    spec_choice,
    spec_int,
    spec_roles,
)
from edge_sdk.errors import BackendError
from edge_sdk.preprocess import InputSpec

ROLES = ("boxes", "scores")


class SSDDecoder(Decoder):
    type_name = "ssd"
    extra_keys = ("box_format", "normalized", "background_class", "score_activation", "outputs")
    default_score_threshold = 0.3

    def __init__(self, spec: Mapping[str, Any], input_spec: InputSpec) -> None:
        super().__init__(spec, input_spec)
        self.box_format = spec_choice(self.spec, "box_format", "xyxy", ("xyxy", "yxyx"))
        self.normalized = spec_bool(self.spec, "normalized", True)
        self.background_class = spec_int(self.spec, "background_class", 0, 0, allow_none=True)
        self.activation = spec_choice(self.spec, "score_activation", "none", ("none", "sigmoid", "softmax"))
        self.roles: Optional[List[str]] = spec_roles(self.spec, "outputs", ROLES, ROLES) if "outputs" in self.spec else None
        sx = float(input_spec.width) if self.normalized else 1.0
        sy = float(input_spec.height) if self.normalized else 1.0
        scale = (sx, sy, sx, sy) if self.box_format == "xyxy" else (sy, sx, sy, sx)
        self._scale = np.asarray(scale, dtype=np.float32)

    def _order(self, outputs: List[np.ndarray]) -> Tuple[int, int]:
        """(index of boxes, index of scores)."""
        if self.roles is not None:
            return self.roles.index("boxes"), self.roles.index("scores")
        box_like = [k for k, o in enumerate(outputs) if o.ndim == 3 and o.shape[2] == 4]
        if len(box_like) == 1:
            return box_like[0], 1 - box_like[0]
        return 0, 1

    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        check_count(self, outputs, (2,), "two outputs: boxes [N, B, 4] and scores [N, B, classes]")
        b, s = self._order(outputs)
        check_ndim(self, outputs, b, 3, "boxes [N, B, 4]")
        check_ndim(self, outputs, s, 3, "scores [N, B, classes]")
        boxes, scores = outputs[b].shape, outputs[s].shape
        if boxes[2] != 4 or boxes[1] != scores[1]:
            raise BackendError(
                f"ssd decoder: expected boxes [N, B, 4] and scores [N, B, classes] with the same B, got boxes "
                f"{list(boxes)} (output {self._name(b)}) and scores {list(scores)} (output {self._name(s)}). "
                "Set decoder.outputs to the order of the model's outputs"
            )
        if self.num_classes is not None and scores[2] != self.num_classes:
            raise BackendError(
                f"ssd decoder: scores output {self._name(s)} has {scores[2]} classes, decoder.num_classes says "
                f"{self.num_classes}"
            )
        if self.background_class is not None and self.background_class >= scores[2]:
            raise BackendError(
                f"ssd decoder: decoder.background_class is {self.background_class} but the scores output has only "
                f"{scores[2]} classes; set it to null if the model has no background class"
            )

    def candidates(self, outputs: List[np.ndarray], i: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, np.ndarray]]:
        b, s = self._order(outputs)
        scores = outputs[s][i]
        if self.activation == "softmax":
            scores = scores.astype(np.float32)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
        elif self.activation == "sigmoid":
            scores = 1.0 / (1.0 + np.exp(-scores.astype(np.float32)))
        if self.background_class is not None:
            bg = self.background_class
            masked = scores.astype(np.float32, copy=True)
            masked[:, bg] = -np.inf
            scores = masked
        best = scores.max(axis=1)
        rows = np.nonzero(best > self.score_threshold)[0]
        if rows.size == 0:
            return empty_candidates()
        class_id = scores[rows].argmax(axis=1).astype(np.int32)
        raw = outputs[b][i][rows].astype(np.float32) * self._scale
        if self.box_format == "yxyx":
            raw = raw[:, [1, 0, 3, 2]]
        return np.ascontiguousarray(raw), best[rows].astype(np.float32), class_id, {}
