"""YOLOX: [N, boxes, 5 + C] like YOLOv5, but the official export leaves the boxes undecoded.

With `decoded` false (the default of YOLOX's `export_onnx.py`), each row is relative to its
grid cell: for the cell (gx, gy) of a level with stride s,

    cx = (raw_x + gx) * s      cy = (raw_y + gy) * s      w = exp(raw_w) * s      h = exp(raw_h) * s

Rows run level by level (`strides`, default [8, 16, 32]), each level row-major over its
(H/s) x (W/s) grid. With `decoded` true the rows are already cx, cy, w, h in input pixels.
Objectness and class scores are already through a sigmoid in both cases.
"""
from __future__ import annotations

from typing import Any, List, Mapping

import numpy as np

from edge_sdk.decoders._base import cxcywh_to_xyxy, spec_bool
from edge_sdk.decoders.yolo import YOLOv5Decoder
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.preprocess import InputSpec

_MAX_LOG_SIZE = 16.0


class YOLOXDecoder(YOLOv5Decoder):
    type_name = "yolox"
    extra_keys = ("decoded", "strides")

    def __init__(self, spec: Mapping[str, Any], input_spec: InputSpec) -> None:
        super().__init__(spec, input_spec)
        self.decoded = spec_bool(self.spec, "decoded", False)
        strides = self.spec.get("strides", [8, 16, 32])
        if (
            not isinstance(strides, (list, tuple))
            or not strides
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in strides)
        ):
            raise ConfigError(f"decoder.strides must be a list of positive integers such as [8, 16, 32], got {strides!r}")
        self.strides = [int(s) for s in strides]
        # Constant per input size: cell origin and stride of every row.
        grids, steps = [], []
        for s in self.strides:
            gh, gw = input_spec.height // s, input_spec.width // s
            gy, gx = np.meshgrid(np.arange(gh, dtype=np.float32), np.arange(gw, dtype=np.float32), indexing="ij")
            grids.append(np.stack([gx.ravel(), gy.ravel()], axis=1))
            steps.append(np.full(gh * gw, s, dtype=np.float32))
        self._grid = np.concatenate(grids)
        self._stride = np.concatenate(steps)

    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        super().check_outputs(outputs)
        if not self.decoded and outputs[0].shape[1] != len(self._grid):
            raise BackendError(
                f"yolox decoder: output {self._name(0)} has {outputs[0].shape[1]} rows, but strides {self.strides} "
                f"on a {self.input_spec.height}x{self.input_spec.width} input give {len(self._grid)}. "
                "Set decoder.strides, or decoder.decoded: true if the export decodes boxes itself"
            )

    def boxes(self, raw: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if self.decoded:
            return super().boxes(raw, rows)
        s = self._stride[rows]
        cx = (raw[:, 0] + self._grid[rows, 0]) * s
        cy = (raw[:, 1] + self._grid[rows, 1]) * s
        w = np.exp(np.minimum(raw[:, 2], _MAX_LOG_SIZE)) * s
        h = np.exp(np.minimum(raw[:, 3], _MAX_LOG_SIZE)) * s
        return cxcywh_to_xyxy(cx, cy, w, h)
