"""merge() at its stated limit: detections are joined where they overlap "by more than
`threshold`": two boxes whose overlap is exactly the threshold stay apart, by every method and
metric."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.roi.merge import METHODS, merge


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("metric,boxes,at", [
    ("iou", [[0, 0, 10, 10], [0, 0, 10, 5]], 0.5),  # intersection 50, union 100
    ("ios", [[0, 0, 10, 10], [5, 0, 15, 10]], 0.5),  # intersection 50, smaller box 100
    ("iou", [[0, 0, 20, 10], [15, 0, 35, 10]], 50 / 350),
])
def test_an_overlap_exactly_at_the_threshold_is_not_merged(method: str, metric: str, boxes, at: float) -> None:
    det = Detections(np.array(boxes, np.float32), np.array([0.9, 0.8], np.float32), np.zeros(2))
    assert len(merge(det, method, metric, threshold=float(np.float32(at)))) == 2
    merged = merge(det, method, metric, threshold=float(np.float32(at)) * 0.999)
    assert len(merged) == 1 and merged.confidence.tolist() == [pytest.approx(0.9)]
    if method != "nms":  # merged into the union box
        x = np.array(boxes)
        assert merged.xyxy[0].tolist() == [x[:, 0].min(), x[:, 1].min(), x[:, 2].max(), x[:, 3].max()]
    else:
        assert merged.xyxy[0].tolist() == boxes[0]


@pytest.mark.parametrize("threshold,ok", [(0.0, True), (1.0, True), (-0.01, False), (1.01, False)])
def test_the_threshold_is_a_fraction(threshold: float, ok: bool) -> None:
    det = Detections(np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32), np.array([0.9, 0.8]), np.zeros(2))
    if ok:
        assert len(merge(det, threshold=threshold)) == 2  # apart: no overlap at all
    else:
        with pytest.raises(ValueError, match="merge threshold must be in \\[0, 1\\]"):
            merge(det, threshold=threshold)
