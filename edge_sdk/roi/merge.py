"""Merging the detections of overlapping passes (tiles, crops, a full-frame pass).

One dispatch point, :func:`merge`, in the manner of SAHI's postprocessing:

- ``nms``: greedy non-maximum suppression. In order of falling confidence, a detection is kept
  and every remaining one that overlaps it by more than `threshold` is dropped.
- ``greedy_nmm``: the same greedy walk, but the dropped detections are merged into the one
  that dropped them: the kept box becomes the union of the group's boxes. A face cut in two by
  a tile edge and found whole in the neighbouring tile comes out as one whole box.
- ``nmm``: non-maximum merging over clusters: detections are joined wherever two overlap by
  more than `threshold`, transitively (connected components of the overlap graph), and each
  cluster becomes one box. Independent of order; merges chains that greedy_nmm keeps apart.

Overlap is ``iou`` (intersection over union) or ``ios`` (intersection over the smaller box,
which also catches a partial box lying inside a whole one). A merged detection takes the union
box, the highest confidence of its group, and the class and extra data (e.g. landmarks) of its
highest-confidence member. Only detections of the same class are merged unless
``class_agnostic``. The output is ordered by falling confidence.
"""
from __future__ import annotations

from typing import List

import numpy as np

from edge_sdk.detections import Detections, box_iou

METHODS = ("nms", "nmm", "greedy_nmm")
METRICS = ("iou", "ios")


def overlap_matrix(xyxy: np.ndarray, metric: str = "iou") -> np.ndarray:
    """Pairwise overlap (N, N) of boxes by `metric` ("iou" or "ios")."""
    if metric not in METRICS:
        raise ValueError(f"merge metric must be one of {METRICS}, got {metric!r}")
    return box_iou(xyxy, xyxy, over="union" if metric == "iou" else "smaller")


def _linked(det: Detections, metric: str, threshold: float, class_agnostic: bool) -> np.ndarray:
    m = overlap_matrix(det.xyxy, metric) > threshold
    if not class_agnostic:
        m &= det.class_id[:, None] == det.class_id[None, :]
    np.fill_diagonal(m, False)
    return m


def _order(det: Detections) -> np.ndarray:
    return np.argsort(-det.confidence, kind="stable")


def nms_groups(det: Detections, metric: str = "iou", threshold: float = 0.5, class_agnostic: bool = False) -> List[List[int]]:
    """Groups [keeper, suppressed...] of the greedy walk (what nms drops, greedy_nmm merges)."""
    linked = _linked(det, metric, threshold, class_agnostic)
    free = np.ones(len(det), dtype=bool)
    groups: List[List[int]] = []
    for i in _order(det):
        if not free[i]:
            continue
        free[i] = False
        members = np.flatnonzero(linked[i] & free)
        free[members] = False
        groups.append([int(i)] + [int(j) for j in members])
    return groups


def cluster_groups(det: Detections, metric: str = "iou", threshold: float = 0.5, class_agnostic: bool = False) -> List[List[int]]:
    """Connected components of the overlap graph, each [highest-confidence member, others...]."""
    linked = _linked(det, metric, threshold, class_agnostic)
    label = np.full(len(det), -1, dtype=np.int64)
    groups: List[List[int]] = []
    for i in _order(det):
        if label[i] >= 0:
            continue
        label[i] = len(groups)
        members = [int(i)]
        frontier = [int(i)]
        while frontier:
            nxt = np.flatnonzero(linked[frontier].any(axis=0) & (label < 0))
            label[nxt] = len(groups)
            frontier = [int(j) for j in nxt]
            members.extend(frontier)
        groups.append(members)
    return groups


def _combine(det: Detections, groups: List[List[int]], union: bool) -> Detections:
    if not groups:
        return det[np.zeros(0, dtype=np.int64)]
    keep = np.array([g[0] for g in groups], dtype=np.int64)
    out = det[keep]
    if union:
        for k, g in enumerate(groups):
            if len(g) > 1:
                boxes = det.xyxy[g]
                out.xyxy[k] = (boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max())
    return out


def merge(
    det: Detections,
    method: str = "greedy_nmm",
    metric: str = "ios",
    threshold: float = 0.5,
    class_agnostic: bool = False,
) -> Detections:
    """Merge overlapping detections by `method` ("nms", "nmm", "greedy_nmm") and `metric` ("iou", "ios")."""
    if method not in METHODS:
        raise ValueError(f"merge method must be one of {METHODS}, got {method!r}")
    if metric not in METRICS:
        raise ValueError(f"merge metric must be one of {METRICS}, got {metric!r}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"merge threshold must be in [0, 1], got {threshold}")
    if len(det) <= 1:
        return det[np.arange(len(det))]
    if method == "nmm":
        return _combine(det, cluster_groups(det, metric, threshold, class_agnostic), union=True)
    groups = nms_groups(det, metric, threshold, class_agnostic)
    return _combine(det, groups, union=(method == "greedy_nmm"))
