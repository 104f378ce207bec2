"""ROI geometry against oracles written out here from the docstrings, on non-square frames:
expand_boxes ("each side grows by margin times the box's width or height; at least min_size,
at most max_size, centred on the box; shifted back into the frame, not cut"), fit_window,
scale_levels ("the smallest L >= 0 with size / 2**L <= target"), inside, split_region and the
shelf packer's gap."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.geometry import Placement
from edge_sdk.roi import geometry as g

frames = st.tuples(st.integers(16, 1920), st.integers(16, 1080))


@settings(max_examples=150, deadline=None)
@given(frame=frames, box=st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(1, 300), st.floats(1, 200)),
       margin=st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=st.tuples(st.integers(0, 96), st.integers(0, 64)),
       max_size=st.one_of(st.none(), st.tuples(st.integers(100, 400), st.integers(80, 300))))
def test_expand_boxes(frame, box, margin: float, min_size, max_size) -> None:
    fw, fh = frame
    bw, bh = min(box[2], fw), min(box[3], fh)
    x0, y0 = box[0] * (fw - bw), box[1] * (fh - bh)
    xyxy = np.array([[x0, y0, x0 + bw, y0 + bh]], np.float64)
    (rx0, ry0, rx1, ry1), = g.expand_boxes(xyxy, fw, fh, margin, min_size, max_size).tolist()
    bw, bh = xyxy[0, 2] - xyxy[0, 0], xyxy[0, 3] - xyxy[0, 1]  # as the float64 box has them
    want_w = max(bw * (1 + 2 * margin), min_size[0])
    want_h = max(bh * (1 + 2 * margin), min_size[1])
    if max_size is not None:
        want_w, want_h = min(want_w, max_size[0]), min(want_h, max_size[1])
    assert rx1 - rx0 == min(math.ceil(want_w), fw) and ry1 - ry0 == min(math.ceil(want_h), fh)
    assert 0 <= rx0 and rx1 <= fw and 0 <= ry0 and ry1 <= fh
    for lo, hi, c, size, full in ((rx0, rx1, x0 + bw / 2, rx1 - rx0, fw), (ry0, ry1, y0 + bh / 2, ry1 - ry0, fh)):
        if lo > 0 and hi < full:  # not shifted at an edge: centred on the box, to the pixel
            assert abs((lo + hi) / 2 - c) <= 0.5 + 1e-6
        elif lo == 0 and hi < full:
            assert c - size / 2 <= 0.5 + 1e-6  # shifted right to the left edge
        elif hi == full and lo > 0:
            assert c + size / 2 >= full - 0.5 - 1e-6  # shifted left to the right edge


@settings(max_examples=150, deadline=None)
@given(frame=frames, region=st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(1, 200), st.integers(1, 200)),
       win=st.tuples(st.integers(1, 700), st.integers(1, 500)))
def test_fit_window(frame, region, win) -> None:
    fw, fh = frame
    w, h = min(region[2], fw), min(region[3], fh)
    x0, y0 = int(region[0] * (fw - w)), int(region[1] * (fh - h))
    wx0, wy0, wx1, wy1 = g.fit_window((x0, y0, x0 + w, y0 + h), win[0], win[1], fw, fh)
    assert (wx1 - wx0, wy1 - wy0) == (min(win[0], fw), min(win[1], fh))
    assert 0 <= wx0 and wx1 <= fw and 0 <= wy0 and wy1 <= fh
    cx, cy = x0 + w / 2, y0 + h / 2
    if 0 < wx0 and wx1 < fw:
        assert abs((wx0 + wx1) / 2 - cx) <= 0.5
    if 0 < wy0 and wy1 < fh:
        assert abs((wy0 + wy1) / 2 - cy) <= 0.5


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.floats(0, 5000), max_size=10), target=st.integers(0, 300))
def test_scale_levels(sizes, target: int) -> None:
    want = []
    for s in sizes:
        level = 0
        while target > 0 and max(s, 1.0) / 2 ** level > target:
            level += 1
        want.append(level)
    assert g.scale_levels(np.array(sizes), target).tolist() == want


@settings(max_examples=100, deadline=None)
@given(regions=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=6),
       covers=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=6))
def test_inside_and_covered_by(regions, covers) -> None:
    r = np.array([[x, y, x + w, y + h] for x, y, w, h in regions])
    c = np.array([[x, y, x + w, y + h] for x, y, w, h in covers])
    want = [[a[0] >= b[0] and a[1] >= b[1] and a[2] <= b[2] and a[3] <= b[3] for b in c] for a in r]
    assert g.inside(r, c).tolist() == want
    assert g.covered_by(r, c).tolist() == [any(row) for row in want]


@settings(max_examples=100, deadline=None)
@given(region=st.tuples(st.integers(0, 500), st.integers(0, 500), st.integers(1, 900), st.integers(1, 700)),
       max_wh=st.tuples(st.integers(16, 320), st.integers(16, 256)), overlap=st.sampled_from([0.0, 0.2, 0.5]))
def test_split_region_covers_it_with_pieces_that_fit(region, max_wh, overlap: float) -> None:
    x0, y0, w, h = region
    pieces = g.split_region((x0, y0, x0 + w, y0 + h), max_wh[0], max_wh[1], overlap)
    assert (pieces[:, 2] - pieces[:, 0] <= max_wh[0]).all() and (pieces[:, 3] - pieces[:, 1] <= max_wh[1]).all()
    assert (pieces[:, :2] >= [x0, y0]).all() and (pieces[:, 2:] <= [x0 + w, y0 + h]).all()
    covered = np.zeros((h, w), bool)
    for a, b, c, d in pieces - np.array([x0, y0, x0, y0]):
        covered[b:d, a:c] = True
    assert covered.all()
    if w <= max_wh[0] and h <= max_wh[1]:
        assert pieces.tolist() == [[x0, y0, x0 + w, y0 + h]]


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 48)), min_size=1, max_size=20), gap=st.integers(0, 6))
def test_packed_rectangles_keep_the_gap_and_stay_on_their_canvas(sizes, gap: int) -> None:
    placed = g.pack_shelves(sizes, 64, 48, gap)
    rects = [(c, x, y, x + w, y + h) for (c, x, y), (w, h) in zip(placed, sizes)]
    for c, x0, y0, x1, y1 in rects:
        assert 0 <= x0 and x1 <= 64 and 0 <= y0 and y1 <= 48
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            if a[0] == b[0]:  # same canvas: apart by at least `gap` in x or in y
                assert a[3] + gap <= b[1] or b[3] + gap <= a[1] or a[4] + gap <= b[2] or b[4] + gap <= a[2]
    assert g.canvases_needed(sizes, 64, 48, gap) == 1 + max(c for c, _, _ in placed)


def test_a_packer_with_a_canvas_limit_says_when_it_is_full() -> None:
    packer = g.ShelfPacker(64, 48, gap=0, max_canvases=2)
    assert [packer.add(64, 48) for _ in range(3)] == [(0, 0, 0), (1, 0, 0), None]
    assert packer.canvases == 2
    unlimited = g.ShelfPacker(64, 48)
    assert [unlimited.add(32, 24) for _ in range(5)] == [(0, 0, 0), (0, 32, 0), (0, 0, 24), (0, 32, 24), (1, 0, 0)]


@settings(max_examples=50, deadline=None)
@given(regions=st.lists(st.tuples(st.integers(0, 500), st.integers(0, 500), st.integers(0, 300), st.integers(0, 200)), max_size=6))
def test_region_area_is_width_times_height(regions) -> None:
    r = np.array([[x, y, x + w, y + h] for x, y, w, h in regions], np.int64).reshape(-1, 4)
    assert g.region_area(r).tolist() == [w * h for _, _, w, h in regions]


@settings(max_examples=200, deadline=None)
@given(a=st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(1, 50), st.integers(1, 40)),
       b=st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(1, 50), st.integers(1, 40)),
       max_wh=st.tuples(st.integers(20, 120), st.integers(20, 100)), gap=st.integers(0, 6), thrifty=st.booleans())
def test_two_regions_merge_exactly_where_the_rules_say(a, b, max_wh, gap: int, thrifty: bool) -> None:
    ra = [a[0], a[1], a[0] + a[2], a[1] + a[3]]
    rb = [b[0], b[1], b[0] + b[2], b[1] + b[3]]
    u = [min(ra[0], rb[0]), min(ra[1], rb[1]), max(ra[2], rb[2]), max(ra[3], rb[3])]
    near = ra[0] - gap < rb[2] and rb[0] - gap < ra[2] and ra[1] - gap < rb[3] and rb[1] - gap < ra[3]
    fits = u[2] - u[0] <= max_wh[0] and u[3] - u[1] <= max_wh[1]  # one model input holds the union
    cheaper = (u[2] - u[0]) * (u[3] - u[1]) <= a[2] * a[3] + b[2] * b[3]  # thrifty: no more pixels than apart
    merged, first = g.merge_regions_indexed(np.array([ra, rb]), max_wh[0], max_wh[1], gap=gap, thrifty=thrifty)
    if near and fits and (cheaper or not thrifty):
        assert merged.tolist() == [u] and first.tolist() == [0]
    else:
        assert merged.tolist() == [ra, rb] and first.tolist() == [0, 1]


@pytest.mark.parametrize("sizes,target,levels", [([640.0], 160, [2]), ([100.0], 160, [0]), ([], 160, []), ([161.0], 160, [1])])
def test_scale_levels_of_one_object(sizes, target: int, levels) -> None:
    assert g.scale_levels(np.array(sizes), target).tolist() == levels


def test_a_rectangle_taller_than_a_shelf_starts_a_new_shelf() -> None:
    packer = g.ShelfPacker(64, 48)
    assert packer.add(30, 10) == (0, 0, 0)  # a shelf 10 high, filled to x = 30
    assert packer.add(10, 20) == (0, 0, 10)  # too tall for it: a new shelf below
    assert packer.add(20, 10) == (0, 30, 0)  # fits the first shelf beside the first rectangle
    assert packer.add(40, 20) == (0, 10, 10)  # the second shelf, beside the 10-wide one


def test_no_placements_own_no_box_and_no_box_is_owned() -> None:
    boxes = np.array([[1, 1, 5, 5], [10, 10, 20, 20]], np.float32)
    assert g.assign_to_placements(boxes, []).tolist() == [-1, -1]
    assert g.assign_to_placements(np.zeros((0, 4), np.float32), [Placement.region((0, 0, 64, 48), 0, 0)]).tolist() == []


@pytest.mark.parametrize("args", [(0, 10, 4, 4), (10, 0, 4, 4), (10, 10, 0, 4), (10, 10, 4, 0), (-1, 10, 4, 4)])
def test_slice_grid_refuses_sizes_that_are_not_positive(args) -> None:
    with pytest.raises(ValueError, match="sizes must be positive"):
        g.slice_grid(*args)


def test_expand_boxes_by_default_keeps_a_box_of_no_width_as_it_is() -> None:
    assert g.expand_boxes(np.array([[5.0, 5.0, 5.0, 9.0]]), 100, 100, margin=0.0).tolist() == [[5, 5, 5, 9]]
    assert g.expand_boxes(np.array([[5.0, 5.0, 9.0, 5.0]]), 100, 100, margin=0.0).tolist() == [[5, 5, 9, 5]]
