"""nms() against a plain-loop reference on random boxes."""
from __future__ import annotations

import importlib
from typing import List, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.decoders import nms

# The package exports the function under the module's name; reach the module itself.
nms_module = importlib.import_module("edge_sdk.decoders.nms")


@pytest.fixture(params=["matrix", "loop"])
def path(request, monkeypatch):
    """Run a test through both implementations: the overlap matrix and the per-kept-box loop."""
    if request.param == "loop":
        monkeypatch.setattr(nms_module, "MATRIX_LIMIT", 0)
    return request.param


def reference_nms(boxes: np.ndarray, scores: np.ndarray, iou: float, classes: Optional[np.ndarray] = None, max_det: Optional[int] = None) -> List[int]:
    """Textbook greedy NMS, one pair at a time, in the same float32 arithmetic."""
    n = len(boxes)
    order = sorted(range(n), key=lambda k: -scores[k])
    thr = np.float32(iou)
    area = [np.float32(max(b[2] - b[0], 0) * max(b[3] - b[1], 0)) for b in boxes.astype(np.float32)]
    keep: List[int] = []
    dead = [False] * n
    for a, i in enumerate(order):
        if dead[i]:
            continue
        keep.append(i)
        if max_det is not None and len(keep) >= max_det:
            break
        for j in order[a + 1 :]:
            if dead[j] or (classes is not None and classes[i] != classes[j]):
                continue
            w = np.float32(max(min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]), 0))
            h = np.float32(max(min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]), 0))
            inter = np.float32(w * h)
            union = np.float32(max(np.float32(area[i] + area[j]) - inter, np.float32(1e-12)))
            if np.float32(inter / union) > thr:
                dead[j] = True
    return keep


def random_boxes(rng: np.random.Generator, n: int, spread: float = 200.0):
    centers = rng.uniform(0, spread, (n, 2))
    sizes = rng.uniform(5, 60, (n, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, n).astype(np.float32)
    classes = rng.integers(0, 3, n)
    return boxes, scores, classes


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("iou", [0.1, 0.3, 0.5, 0.7])
@pytest.mark.parametrize("class_aware", [False, True])
def test_matches_reference_on_random_boxes(path: str, seed: int, iou: float, class_aware: bool) -> None:
    rng = np.random.default_rng(seed)
    boxes, scores, classes = random_boxes(rng, int(rng.integers(1, 120)))
    cls = classes if class_aware else None
    got = nms(boxes, scores, iou, cls).tolist()
    assert got == reference_nms(boxes, scores, iou, cls)


@pytest.mark.parametrize("max_det", [0, 1, 3, 1000])
def test_max_det_keeps_the_best_first(path: str, max_det: int) -> None:
    boxes, scores, _ = random_boxes(np.random.default_rng(7), 80)
    full = reference_nms(boxes, scores, 0.4)
    got = nms(boxes, scores, 0.4, max_det=max_det).tolist()
    assert got == full[:max_det]


_coord = st.integers(0, 40)


@st.composite
def box_sets(draw):
    n = draw(st.integers(0, 25))
    raw = draw(st.lists(st.tuples(_coord, _coord, st.integers(0, 20), st.integers(0, 20)), min_size=n, max_size=n))
    scores = draw(st.lists(st.sampled_from([0.1, 0.5, 0.5, 0.9, 0.3]), min_size=n, max_size=n))
    classes = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    boxes = np.array([[x, y, x + w, y + h] for x, y, w, h in raw], np.float32).reshape(-1, 4)
    return boxes, np.array(scores, np.float32), np.array(classes)


@settings(max_examples=150, deadline=None)
@given(box_sets(), st.sampled_from([0.0, 0.25, 0.5, 0.75]), st.booleans(), st.sampled_from([None, 2]))
def test_matches_reference_on_integer_boxes_with_ties(data, iou: float, class_aware: bool, max_det) -> None:
    """Integer boxes, tied scores, zero-area and identical boxes: the corner cases, both paths."""
    boxes, scores, classes = data
    cls = classes if class_aware else None
    expected = reference_nms(boxes, scores, iou, cls, max_det)
    assert nms(boxes, scores, iou, cls, max_det).tolist() == expected
    saved = nms_module.MATRIX_LIMIT
    nms_module.MATRIX_LIMIT = 0
    try:
        assert nms(boxes, scores, iou, cls, max_det).tolist() == expected
    finally:
        nms_module.MATRIX_LIMIT = saved


def test_a_long_suppression_chain_resolves_exactly() -> None:
    """Each box overlaps only its neighbours: kept, suppressed, kept... the worst case for rounds."""
    n = 60
    x = np.arange(n, dtype=np.float32) * 4.0  # IoU 0.43 with the next box, 0.11 with the one after
    boxes = np.stack([x, np.zeros(n), x + 10.0, np.full(n, 10.0)], axis=1).astype(np.float32)
    scores = np.linspace(1.0, 0.1, n, dtype=np.float32)
    assert nms(boxes, scores, 0.3).tolist() == reference_nms(boxes, scores, 0.3) == list(range(0, n, 2))


@pytest.mark.parametrize(
    "boxes, scores, iou, expected",
    [
        (np.zeros((0, 4)), np.zeros(0), 0.5, []),
        ([[0, 0, 10, 10]], [0.3], 0.5, [0]),
        ([[0, 0, 10, 10], [0, 0, 10, 10]], [0.3, 0.9], 0.5, [1]),  # identical: the better one stays
        ([[0, 0, 10, 10], [0, 0, 10, 10]], [0.5, 0.5], 0.5, [0]),  # tie: the lower index stays
        ([[0, 0, 10, 10], [5, 0, 15, 10]], [0.9, 0.8], 1 / 3, [0, 1]),  # IoU exactly 1/3 is not > 1/3
        ([[0, 0, 10, 10], [5, 0, 15, 10]], [0.9, 0.8], 0.3, [0]),
        ([[0, 0, 0, 0], [0, 0, 0, 0]], [0.9, 0.8], 0.0, [0, 1]),  # zero-area boxes never overlap
    ],
)
def test_small_cases(path: str, boxes, scores, iou, expected) -> None:
    assert nms(np.asarray(boxes, np.float32), np.asarray(scores, np.float32), iou).tolist() == expected


def test_class_aware_keeps_overlapping_boxes_of_other_classes(path: str) -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11]], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    assert nms(boxes, scores, 0.5).tolist() == [0]
    assert nms(boxes, scores, 0.5, class_id=np.array([0, 1])).tolist() == [0, 1]
    assert nms(boxes, scores, 0.5, class_id=np.array([2, 2])).tolist() == [0]


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="2 boxes but 1 scores"):
        nms(np.zeros((2, 4)), np.zeros(1), 0.5)
