"""Greedy non-maximum suppression, vectorized over candidates.

Candidates are sorted by score once. Up to MATRIX_LIMIT of them, the whole pairwise overlap
matrix is computed at once and the greedy result found by a short fixed-point iteration;
beyond that, a loop runs once per *kept* box, comparing it with every remaining box at once.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

# Up to this many candidates, NMS works on the full pairwise overlap matrix (4 MB at 1000).
MATRIX_LIMIT = 2048


def nms(
    xyxy: np.ndarray,
    scores: np.ndarray,
    iou: float,
    class_id: Optional[np.ndarray] = None,
    max_det: Optional[int] = None,
) -> np.ndarray:
    """Indices of the boxes greedy NMS keeps, best score first.

    A box is suppressed when its IoU with a better-scoring kept box is strictly greater than
    `iou`. With `class_id`, only boxes of the same class suppress each other (class-aware);
    without it, all boxes compete (class-agnostic). Ties in score keep the lower index first.
    At most `max_det` indices are returned.
    """
    boxes = np.asarray(xyxy, dtype=np.float32).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float32).reshape(-1)
    n = len(boxes)
    if len(scores) != n:
        raise ValueError(f"nms: {n} boxes but {len(scores)} scores")
    if class_id is not None:
        class_id = np.asarray(class_id).reshape(-1)
        if len(class_id) != n:
            raise ValueError(f"nms: {n} boxes but {len(class_id)} class ids")
    limit = n if max_det is None else max(0, int(max_det))
    if n == 0 or limit == 0:
        return np.zeros(0, dtype=np.int64)

    order = np.argsort(-scores, kind="stable")
    b = boxes[order]
    cls = class_id[order] if class_id is not None else None
    if n <= MATRIX_LIMIT:
        keep = _greedy_matrix(b, float(iou), cls)
        return order[keep][:limit]
    return order[_greedy_loop(b, float(iou), cls, limit)]


def _overlap(b: np.ndarray, area: np.ndarray, i: object, j: object, iou: float) -> np.ndarray:
    """IoU(i, j) > iou for index expressions i and j (broadcasting), in float32."""
    w = np.minimum(b[i, 2], b[j, 2]) - np.maximum(b[i, 0], b[j, 0])
    h = np.minimum(b[i, 3], b[j, 3]) - np.maximum(b[i, 1], b[j, 1])
    inter = np.clip(w, 0, None) * np.clip(h, 0, None)
    union = np.maximum(area[i] + area[j] - inter, np.float32(1e-12))
    return inter / union > np.float32(iou)


def _overlap_matrix(b: np.ndarray, iou: float) -> np.ndarray:
    """`_overlap` for every pair, computed in place: the same float32 arithmetic, fewer temporaries."""
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    area = _area(b)
    inter = np.minimum.outer(x2, x2)
    inter -= np.maximum.outer(x1, x1)
    np.maximum(inter, 0, out=inter)
    h = np.minimum.outer(y2, y2)
    h -= np.maximum.outer(y1, y1)
    np.maximum(h, 0, out=h)
    inter *= h
    union = np.add.outer(area, area, out=h)
    union -= inter
    np.maximum(union, np.float32(1e-12), out=union)
    np.divide(inter, union, out=inter)
    return inter > np.float32(iou)


def _area(b: np.ndarray) -> np.ndarray:
    return np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)


def _greedy_matrix(b: np.ndarray, iou: float, cls: Optional[np.ndarray]) -> np.ndarray:
    """Greedy NMS on score-sorted boxes from the pairwise overlap matrix.

    `over[i, j]` (i before j) says that i suppresses j if i is kept. A box is kept when no kept
    box before it overlaps it; iterating `keep = no kept suppressor` from "all kept" fixes one
    more leading box per round at least, and stops at the greedy result, usually in a few
    rounds (the fixed point is unique, as in Cluster-NMS, Zheng et al. 2020).
    """
    n = len(b)
    idx = np.arange(n)
    over = _overlap_matrix(b, iou)
    if cls is not None:
        over &= cls[:, None] == cls[None, :]
    over = np.triu(over, k=1)
    if not over.any():
        return idx
    keep = np.ones(n, dtype=bool)
    for _ in range(n):
        new = ~over[keep].any(axis=0)  # boolean ops only: no BLAS threads competing with the pipeline
        if np.array_equal(new, keep):
            break
        keep = new
    return idx[keep]


def _greedy_loop(b: np.ndarray, iou: float, cls: Optional[np.ndarray], limit: int) -> np.ndarray:
    """Greedy NMS one kept box at a time, each compared with all remaining boxes at once."""
    area = _area(b)
    keep = []
    rest = np.arange(len(b))
    while rest.size:
        i = rest[0]
        keep.append(i)
        if len(keep) >= limit:
            break
        rest = rest[1:]
        overlap = _overlap(b, area, i, rest, iou)
        if cls is not None:
            overlap &= cls[rest] == cls[i]
        rest = rest[~overlap]
    return np.asarray(keep, dtype=np.int64)
