"""Merging against brute-force references written as plainly as possible."""
from __future__ import annotations

from typing import List

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.roi.merge import merge


def _overlap(a, b, metric: str) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    denom = area_a + area_b - inter if metric == "iou" else min(area_a, area_b)
    return inter / denom if denom > 0 else 0.0


def _reference(boxes, scores, classes, method: str, metric: str, thr: float, agnostic: bool) -> List[tuple]:
    n = len(boxes)
    order = sorted(range(n), key=lambda i: -scores[i])

    def linked(i, j) -> bool:
        return (agnostic or classes[i] == classes[j]) and _overlap(boxes[i], boxes[j], metric) > thr

    groups = []
    if method == "nmm":
        parent = list(range(n))

        def find(i):
            while parent[i] != i:
                i = parent[i]
            return i

        for i in range(n):
            for j in range(n):
                if i != j and linked(i, j):
                    parent[find(i)] = find(j)
        by_root = {}
        for i in order:
            by_root.setdefault(find(i), []).append(i)
        groups = list(by_root.values())
    else:
        alive = list(order)
        while alive:
            i = alive.pop(0)
            group = [i] + [j for j in alive if linked(i, j)]
            alive = [j for j in alive if j not in group]
            groups.append(group)
    out = []
    for grp in groups:
        if method == "nms":
            box = boxes[grp[0]]
        else:
            box = [min(boxes[j][0] for j in grp), min(boxes[j][1] for j in grp), max(boxes[j][2] for j in grp), max(boxes[j][3] for j in grp)]
        out.append((tuple(round(float(v), 3) for v in box), round(float(max(scores[j] for j in grp)), 5), int(classes[grp[0]])))
    return sorted(out)


def _random_detections(seed: int, n: int) -> Detections:
    rng = np.random.default_rng(seed)
    # clustered boxes so that overlaps at every threshold occur
    centres = rng.uniform(0, 200, size=(max(1, n // 4), 2))
    c = centres[rng.integers(0, len(centres), n)] + rng.normal(0, 8, size=(n, 2))
    wh = rng.uniform(6, 40, size=(n, 2))
    xyxy = np.concatenate([c - wh / 2, c + wh / 2], axis=1)
    scores = rng.permutation(n) / n * 0.9 + 0.05  # distinct, so the order is unambiguous
    classes = rng.integers(0, 2, n)
    return Detections(xyxy, scores, classes, {"row": np.arange(n)})


def _as_tuples(det: Detections) -> List[tuple]:
    return sorted(
        (tuple(round(float(v), 3) for v in box), round(float(s), 5), int(c))
        for box, s, c in zip(det.xyxy, det.confidence, det.class_id)
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("method", ["nms", "greedy_nmm", "nmm"])
@pytest.mark.parametrize("metric", ["iou", "ios"])
@pytest.mark.parametrize("threshold, agnostic", [(0.3, False), (0.5, True), (0.7, False)])
def test_merge_matches_brute_force(seed, method, metric, threshold, agnostic) -> None:
    det = _random_detections(seed, 40)
    got = merge(det, method=method, metric=metric, threshold=threshold, class_agnostic=agnostic)
    ref = _reference(det.xyxy.tolist(), det.confidence.tolist(), det.class_id.tolist(), method, metric, threshold, agnostic)
    assert _as_tuples(got) == ref
    assert list(got.confidence) == sorted(got.confidence, reverse=True)
    # the extra data travels with the highest-confidence member of each group
    np.testing.assert_array_equal(got.confidence, det.confidence[got.data["row"]])


def _faces(*rows) -> Detections:
    return Detections(np.array([r[:4] for r in rows], np.float32), np.array([r[4] for r in rows]), np.zeros(len(rows)))


@pytest.mark.parametrize(
    "method, metric, expected",
    [
        # a face cut by a tile edge (left part) and found whole in the neighbour tile
        ("nms", "iou", [[100, 100, 140, 150], [100, 100, 118, 150]]),  # IoU 0.45: both stay
        ("nms", "ios", [[100, 100, 140, 150]]),  # the part lies inside the whole: dropped
        ("greedy_nmm", "ios", [[100, 100, 140, 150]]),
        ("nmm", "ios", [[100, 100, 140, 150]]),
    ],
)
def test_partial_face_across_tile_edge(method, metric, expected) -> None:
    det = _faces((100, 100, 140, 150, 0.9), (100, 100, 118, 150, 0.8))
    assert merge(det, method, metric, 0.5).xyxy.tolist() == expected


def test_nmm_merges_chains_that_greedy_keeps_apart() -> None:
    # a-b overlap, b-c overlap, a-c do not; a has the best score
    det = _faces((0, 0, 10, 10, 0.9), (6, 0, 16, 10, 0.5), (12, 0, 22, 10, 0.8))
    assert merge(det, "greedy_nmm", "iou", 0.2).xyxy.tolist() == [[0, 0, 16, 10], [12, 0, 22, 10]]
    assert merge(det, "nmm", "iou", 0.2).xyxy.tolist() == [[0, 0, 22, 10]]


def test_classes_are_kept_apart_unless_agnostic() -> None:
    det = Detections(np.array([[0, 0, 10, 10], [0, 0, 10, 10]]), np.array([0.9, 0.8]), np.array([0, 1]))
    assert len(merge(det, "nms", "iou", 0.5)) == 2
    assert len(merge(det, "nms", "iou", 0.5, class_agnostic=True)) == 1


@pytest.mark.parametrize("bad", [dict(method="wbf"), dict(metric="giou"), dict(threshold=1.5)])
def test_merge_rejects_unknown_settings(bad) -> None:
    with pytest.raises(ValueError):
        merge(_faces((0, 0, 1, 1, 0.5), (0, 0, 1, 1, 0.4)), **bad)


@pytest.mark.parametrize("n", [0, 1])
def test_merge_trivial_sizes(n) -> None:
    det = _faces(*[(0, 0, 1, 1, 0.5)] * n) if n else Detections.empty()
    assert len(merge(det)) == n
