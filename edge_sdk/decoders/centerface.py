"""CenterFace: a heatmap of face centres with per-cell box size, sub-cell offset and 5 landmarks.

Outputs (stride 4, for an input of H x W): heatmap [N,1,H/4,W/4] (sigmoid scores), scale
[N,2,H/4,W/4] (log of box height and width in cells), offset [N,2,H/4,W/4] (dy, dx within the
cell), landmarks [N,10,H/4,W/4] (five (dy, dx) pairs as fractions of the box size, from the
box's top-left corner). For a peak at cell (y, x):

    h = exp(scale0) * 4          w = exp(scale1) * 4
    cy = (y + dy + 0.5) * 4      cx = (x + dx + 0.5) * 4
    box = (cx - w/2, cy - h/2, cx + w/2, cy + h/2)
    landmark j = (x1 + lm[2j+1] * w, y1 + lm[2j] * h)

Spec keys beyond the common ones: `outputs` (the role of each model output, in order; default
["heatmap", "scale", "offset", "landmarks"]), `local_max` (keep only peaks that are the maximum
of their 3x3 neighbourhood before NMS; default true), `stride` (default 4).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Any, Tuple

import numpy as np

from edge_sdk.decoders._base import (
    Decoder,
    check_count,
    empty_candidates,
    spec_bool,
    spec_int,
    spec_roles,
)
from edge_sdk.errors import BackendError
from edge_sdk.preprocess import InputSpec

ROLES = ("heatmap", "scale", "offset", "landmarks")
CHANNELS = {"heatmap": 1, "scale": 2, "offset": 2, "landmarks": 10}
# exp() of a log-size above this is not a face; clamping keeps broken outputs finite.
_MAX_LOG_SIZE = 16.0
_NEIGHBOURS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))


class CenterFaceDecoder(Decoder):
    type_name = "centerface"
    extra_keys = ("outputs", "local_max", "stride")
    default_score_threshold = 0.5
    default_nms_iou = 0.3
    default_class_agnostic = True

    def __init__(self, spec: Mapping[str, Any], input_spec: InputSpec) -> None:
        super().__init__(spec, input_spec)
        self.roles = spec_roles(self.spec, "outputs", ROLES, ROLES[:3], ROLES[3:])
        self.local_max = spec_bool(self.spec, "local_max", True)
        self.stride = spec_int(self.spec, "stride", 4, 1)
        self._index = {role: k for k, role in enumerate(self.roles)}

    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        check_count(self, outputs, (len(self.roles),), f"{len(self.roles)} outputs {self.roles}")
        h = self.input_spec.height // self.stride
        w = self.input_spec.width // self.stride
        for role, k in self._index.items():
            shape = tuple(outputs[k].shape)
            expected = (CHANNELS[role], h, w)
            if len(shape) != 4 or shape[1:] != expected:
                raise BackendError(
                    f"centerface decoder: output {self._name(k)} ({role}) should have shape "
                    f"[N, {expected[0]}, {h}, {w}] for a {self.input_spec.height}x{self.input_spec.width} input, "
                    f"got {list(shape)}. Check the input size and decoder.outputs in the manifest"
                )

    def candidates(
        self, outputs: List[np.ndarray], i: int
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, np.ndarray]]:
        heat = outputs[self._index["heatmap"]][i, 0]
        ys, xs = np.nonzero(heat > self.score_threshold)
        if ys.size == 0:
            boxes, scores, class_id, data = empty_candidates()
            if "landmarks" in self._index:
                data["landmarks"] = np.zeros((0, 5, 2), np.float32)
            return boxes, scores, class_id, data
        scores = heat[ys, xs]
        if self.local_max:
            peak = _is_local_max(heat, ys, xs, scores)
            ys, xs, scores = ys[peak], xs[peak], scores[peak]
        s = self.stride
        size = outputs[self._index["scale"]][i][:, ys, xs].astype(np.float32)  # (2, K): log h, log w
        np.minimum(size, _MAX_LOG_SIZE, out=size)
        h = np.exp(size[0]) * s
        w = np.exp(size[1]) * s
        off = outputs[self._index["offset"]][i][:, ys, xs].astype(np.float32)  # (2, K): dy, dx
        x1 = (xs + off[1] + 0.5) * s - w * 0.5
        y1 = (ys + off[0] + 0.5) * s - h * 0.5
        boxes = np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32, copy=False)
        data: Dict[str, np.ndarray] = {}
        if "landmarks" in self._index:
            lm = outputs[self._index["landmarks"]][i][:, ys, xs].astype(np.float32)  # (10, K)
            px = lm[1::2] * w + x1  # (5, K)
            py = lm[0::2] * h + y1
            data["landmarks"] = np.stack([px.T, py.T], axis=2)  # (K, 5, 2)
        return boxes, scores.astype(np.float32), np.zeros(len(scores), np.int32), data


def _is_local_max(heat: np.ndarray, ys: np.ndarray, xs: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """True where a cell is >= each of its 8 neighbours (edges compare with themselves)."""
    hh, ww = heat.shape
    keep = np.ones(len(ys), dtype=bool)
    for dy, dx in _NEIGHBOURS:
        ny = np.clip(ys + dy, 0, hh - 1)
        nx = np.clip(xs + dx, 0, ww - 1)
        keep &= scores >= heat[ny, nx]
    return keep
