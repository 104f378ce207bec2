"""Slicing, crop/pad/scale round trips, packing and mapping back: exact on hand-built cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.detections import Detections
from edge_sdk.geometry import Placement, move_detections
from edge_sdk.roi import geometry as g


@pytest.mark.parametrize(
    "frame, slice_, overlap, xs, ys",
    [
        # 4K with the CenterFace input: 128 px / 76 px overlap, last column/row flush with the edge
        ((3840, 2160), (640, 384), 0.2, [0, 512, 1024, 1536, 2048, 2560, 3072, 3200], [0, 308, 616, 924, 1232, 1540, 1776]),
        ((1280, 384), (640, 384), 0.0, [0, 640], [0]),
        ((1000, 500), (640, 384), 0.2, [0, 360], [0, 116]),
        ((300, 200), (640, 384), 0.2, [0], [0]),  # frame smaller than a slice: one tile, the frame
        ((100, 50), (40, 30), 0.25, [0, 30, 60], [0, 20]),
    ],
)
def test_slice_grid_hand_built(frame, slice_, overlap, xs, ys) -> None:
    tiles = g.slice_grid(frame[0], frame[1], slice_[0], slice_[1], overlap, overlap)
    w, h = min(slice_[0], frame[0]), min(slice_[1], frame[1])
    expected = [(x, y, x + w, y + h) for y in ys for x in xs]
    assert tiles.tolist() == [list(t) for t in expected]


@settings(max_examples=60, deadline=None)
@given(
    fw=st.integers(1, 300),
    fh=st.integers(1, 300),
    sw=st.integers(1, 120),
    sh=st.integers(1, 120),
    ov=st.floats(0.0, 0.9),
)
def test_slice_grid_covers_frame_and_stays_inside(fw, fh, sw, sh, ov) -> None:
    tiles = g.slice_grid(fw, fh, sw, sh, ov, ov)
    seen = np.zeros((fh, fw), dtype=bool)
    for x0, y0, x1, y1 in tiles:
        assert 0 <= x0 < x1 <= fw and 0 <= y0 < y1 <= fh
        assert (x1 - x0, y1 - y0) == (min(sw, fw), min(sh, fh))
        seen[y0:y1, x0:x1] = True
    assert seen.all()


@pytest.mark.parametrize("bad", [dict(overlap_w=1.0), dict(overlap_h=-0.1), dict(slice_w=0)])
def test_slice_grid_rejects_bad_arguments(bad) -> None:
    args = dict(frame_w=100, frame_h=100, slice_w=10, slice_h=10)
    args.update(bad)
    with pytest.raises(ValueError):
        g.slice_grid(**args)


@pytest.mark.parametrize(
    "box, kwargs, expected",
    [
        ((30, 20, 50, 60), dict(margin=0.5), (20, 0, 60, 80)),
        ((0, 0, 10, 10), dict(margin=0.5, min_size=(64, 64)), (0, 0, 64, 64)),  # shifted in, not cut
        ((95, 95, 100, 100), dict(margin=0.0, min_size=(64, 64)), (36, 36, 100, 100)),
        ((10, 10, 90, 90), dict(margin=1.0, max_size=(50, 40)), (25, 30, 75, 70)),
        ((0, 0, 400, 10), dict(margin=0.0), (0, 0, 100, 10)),  # wider than the frame: the frame
    ],
)
def test_expand_boxes(box, kwargs, expected) -> None:
    out = g.expand_boxes(np.array([box], np.float32), 100, 100, **kwargs)
    assert tuple(out[0]) == expected


@pytest.mark.parametrize(
    "region, win, expected",
    [
        ((100, 100, 110, 110), (40, 20), (85, 95, 125, 115)),
        ((0, 0, 4, 4), (40, 20), (0, 0, 40, 20)),
        ((195, 195, 200, 200), (40, 20), (160, 180, 200, 200)),
        ((0, 0, 10, 10), (400, 20), (0, 0, 200, 20)),
    ],
)
def test_fit_window(region, win, expected) -> None:
    assert g.fit_window(region, win[0], win[1], 200, 200) == expected


def test_clip_regions() -> None:
    out = g.clip_regions(np.array([[-5, -5, 10, 10], [90, 95, 120, 130], [150, 0, 160, 5]]), 100, 100)
    assert out.tolist() == [[0, 0, 10, 10], [90, 95, 100, 100], [100, 0, 100, 5]]


@pytest.mark.parametrize(
    "regions, max_wh, gap, expected",
    [
        ([(0, 0, 10, 10), (5, 5, 20, 20)], (100, 100), 0, [(0, 0, 20, 20)]),
        ([(0, 0, 10, 10), (5, 5, 20, 20)], (15, 100), 0, [(0, 0, 10, 10), (5, 5, 20, 20)]),  # union too wide
        ([(0, 0, 10, 10), (12, 0, 20, 10)], (100, 100), 0, [(0, 0, 10, 10), (12, 0, 20, 10)]),
        ([(0, 0, 10, 10), (12, 0, 20, 10)], (100, 100), 3, [(0, 0, 20, 10)]),
        # a chain: the third joins the union of the first two
        ([(0, 0, 10, 10), (30, 0, 40, 10), (8, 0, 32, 10)], (100, 100), 0, [(0, 0, 40, 10)]),
    ],
)
def test_merge_regions(regions, max_wh, gap, expected) -> None:
    out = g.merge_regions(np.array(regions), max_wh[0], max_wh[1], gap)
    assert [tuple(r) for r in out.tolist()] == expected


def test_split_region_covers_and_fits() -> None:
    parts = g.split_region((100, 50, 1100, 550), 640, 384)
    assert parts.tolist() == [[100, 50, 740, 434], [460, 50, 1100, 434], [100, 166, 740, 550], [460, 166, 1100, 550]]
    assert g.split_region((0, 0, 10, 10), 640, 384).tolist() == [[0, 0, 10, 10]]


def test_covered_by() -> None:
    covers = np.array([[0, 0, 100, 100]])
    regions = np.array([[10, 10, 20, 20], [90, 90, 101, 100], [0, 0, 100, 100]])
    assert g.covered_by(regions, covers).tolist() == [True, False, True]
    assert g.covered_by(regions, np.zeros((0, 4))).tolist() == [False, False, False]


def _frame_with_block(w: int, h: int, block) -> np.ndarray:
    frame = np.zeros((h, w, 3), np.uint8)
    x0, y0, x1, y1 = block
    frame[y0:y1, x0:x1] = 255
    return frame


def _extent(img: np.ndarray):
    ys, xs = np.nonzero(img[..., 0] > 127)
    return (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)


@pytest.mark.parametrize(
    "region, out_wh, fixed_scale, scale, block_in_out",
    [
        ((40, 10, 120, 60), (100, 60), 1.0, 1.0, (10, 10, 30, 30)),  # crop + pad at full resolution
        ((40, 10, 200, 90), (80, 40), None, 0.5, (5, 5, 15, 15)),  # crop + halve (fit)
        ((40, 10, 80, 50), (80, 80), None, 2.0, (20, 20, 60, 60)),  # crop + double (fit)
    ],
)
def test_crop_scale_pad_round_trip_exact(region, out_wh, fixed_scale, scale, block_in_out) -> None:
    block = (50, 20, 70, 40)
    frame = _frame_with_block(200, 100, block)
    out = np.full((out_wh[1], out_wh[0], 3), 7, np.uint8)
    placement = g.crop_scale_pad(frame, region, out, pad_value=0, scale=fixed_scale)
    assert placement.scale == pytest.approx(scale)
    assert _extent(out) == block_in_out
    w, h = placement.size
    assert (out[h:] == 0).all() and (out[:, w:] == 0).all()  # padding, old content gone
    back = placement.inverse(np.array([block_in_out], np.float32))[0]
    assert back.tolist() == list(block)
    assert placement.forward(back[None])[0].tolist() == list(block_in_out)


def test_crop_scale_pad_refuses_overflow() -> None:
    out = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(ValueError):
        g.crop_scale_pad(np.zeros((50, 50, 3), np.uint8), (0, 0, 20, 20), out, scale=1.0)


@settings(max_examples=50, deadline=None)
@given(
    src=st.tuples(st.integers(0, 3000), st.integers(0, 2000), st.integers(1, 640), st.integers(1, 384)),
    pos=st.tuples(st.integers(0, 640), st.integers(0, 384)),
    scale=st.sampled_from([0.25, 0.5, 1.0, 2.0]),
    box=st.tuples(st.floats(0, 600), st.floats(0, 300), st.floats(1, 40), st.floats(1, 40)),
)
def test_placement_round_trip(src, pos, scale, box) -> None:
    p = Placement.region((src[0], src[1], src[0] + src[2], src[1] + src[3]), pos[0], pos[1], scale)
    xyxy = np.array([[box[0], box[1], box[0] + box[2], box[1] + box[3]]], np.float32)
    np.testing.assert_allclose(p.forward(p.inverse(xyxy)), xyxy, atol=1e-2)


def test_move_detections_maps_boxes_and_landmarks() -> None:
    p = Placement.region((1000, 500, 1100, 600), 200, 100, 2.0)
    det = Detections(
        np.array([[200, 100, 240, 140]]), np.array([0.9]), np.array([0]),
        {"landmarks": np.array([[[200, 100], [220, 120], [240, 140], [210, 110], [230, 130]]], np.float32)},
    )
    out = move_detections(det, p)
    assert out.xyxy.tolist() == [[1000, 500, 1020, 520]]
    assert out.data["landmarks"][0, :3].tolist() == [[1000, 500], [1010, 510], [1020, 520]]
    assert move_detections(det, Placement.region((10, 20, 11, 21))).xyxy.tolist() == [[210, 120, 250, 160]]


def test_pack_shelves_hand_built() -> None:
    sizes = [(300, 200), (300, 200), (300, 200), (100, 100)]
    assert g.pack_shelves(sizes, 640, 384, gap=4) == [(0, 0, 0), (0, 304, 0), (1, 0, 0), (0, 0, 204)]
    assert g.canvases_needed(sizes, 640, 384, gap=4) == 2
    assert g.canvases_needed([], 640, 384) == 0
    with pytest.raises(ValueError):
        g.pack_shelves([(641, 10)], 640, 384)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 640), st.integers(1, 384)), min_size=1, max_size=30), gap=st.integers(0, 8))
def test_pack_shelves_never_overlaps(sizes, gap) -> None:
    placed = g.pack_shelves(sizes, 640, 384, gap)
    assert len(placed) == len(sizes)
    rects = [(c, x, y, x + w, y + h) for (c, x, y), (w, h) in zip(placed, sizes)]
    for c, x0, y0, x1, y1 in rects:
        assert 0 <= x0 and x1 <= 640 and 0 <= y0 and y1 <= 384
    for i, a in enumerate(rects):
        for b in rects[i + 1 :]:
            if a[0] != b[0]:
                continue
            apart = a[3] + gap <= b[1] or b[3] + gap <= a[1] or a[4] + gap <= b[2] or b[4] + gap <= a[2]
            assert apart, (a, b)


def test_assign_to_placements() -> None:
    ps = [Placement.region((0, 0, 100, 100), 0, 0), Placement.region((0, 0, 100, 100), 110, 0)]
    boxes = np.array([[10, 10, 20, 20], [100, 10, 120, 20], [90, 10, 130, 20], [300, 300, 310, 310]], np.float32)
    # centres at x=15 (first), x=110 (second), x=110 (second), outside both
    assert g.assign_to_placements(boxes, ps).tolist() == [0, 1, 1, -1]


@pytest.mark.parametrize("n, k, bound", [(56, 2, 28), (56, 3, 19), (1, 4, 1), (7, 7, 1)])
def test_sweep_bound(n, k, bound) -> None:
    assert g.sweep_bound(n, k) == bound


@pytest.mark.parametrize(
    "sizes, target, levels",
    [
        ([20, 96, 97, 192, 193, 400, 800], 96, [0, 0, 1, 1, 2, 3, 4]),  # size / 2**level <= target, smallest level
        ([0.5, 3000], 0, [0, 0]),  # target 0: always full resolution
        ([], 96, []),
    ],
)
def test_scale_levels(sizes, target, levels) -> None:
    assert g.scale_levels(np.array(sizes, np.float32), target).tolist() == levels


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25])
def test_paste_draws_the_region_at_its_scale_into_the_canvas(scale) -> None:
    # a colour block with an odd size and odd position; its frame box comes back within a pixel
    # of the zoom step, and nothing outside the placement is touched
    frame = np.zeros((300, 400, 3), np.uint8)
    frame[100:140, 120:164] = (30, 200, 90)
    p = Placement.region((100, 80, 196, 176), 21, 13, scale, 0)
    canvas = np.full((120, 160, 3), 5, np.uint8)
    g.paste(frame, p, canvas)
    x0, y0, x1, y1 = p.dst
    outside = canvas.copy()
    outside[y0:y1, x0:x1] = 5
    assert (outside == 5).all()
    ys, xs = np.nonzero(canvas[..., 1] > 100)
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    np.testing.assert_allclose(p.inverse(found)[0], [120, 100, 164, 140], atol=1.0 / scale)
    assert tuple(canvas[(y0 + y1) // 2, (x0 + x1) // 2]) == (30, 200, 90)  # colour order kept


def test_move_detections_through_a_stretch_maps_boxes_and_landmarks_per_axis() -> None:
    det = Detections(np.array([[10, 10, 20, 30]]), np.array([0.9]), np.array([0]), {"landmarks": np.array([[[15, 20]] * 5], np.float32)})
    out = move_detections(det, Placement.stretch(1, 1, 6, 5), forward=True)
    assert out.xyxy.tolist() == [[60, 50, 120, 150]]
    assert out.data["landmarks"][0, 0].tolist() == [90, 100]
    assert det.xyxy.tolist() == [[10, 10, 20, 30]]  # the input is left alone


def test_inside_matrix() -> None:
    regions = np.array([[10, 10, 20, 20], [90, 90, 101, 100]])
    covers = np.array([[0, 0, 100, 100], [5, 5, 25, 25], [80, 80, 120, 120]])
    assert g.inside(regions, covers).tolist() == [[True, True, False], [False, False, True]]


@pytest.mark.parametrize(
    "regions, expected",
    [
        # diagonal overlap: the 20x20 union (400 px) costs more than 100 + 225 px apart
        ([(0, 0, 10, 10), (5, 5, 20, 20)], [(0, 0, 10, 10), (5, 5, 20, 20)]),
        # nested: the union is the larger one
        ([(0, 0, 20, 20), (5, 5, 15, 15)], [(0, 0, 20, 20)]),
        # side by side, mostly overlapping: 12x10 = 120 <= 100 + 100
        ([(0, 0, 10, 10), (2, 0, 12, 10)], [(0, 0, 12, 10)]),
    ],
)
def test_thrifty_merge_joins_only_where_the_union_saves_pixels(regions, expected) -> None:
    merged, first = g.merge_regions_indexed(np.array(regions), 100, 100, thrifty=True)
    assert [tuple(r) for r in merged.tolist()] == expected
    assert first.tolist() == list(range(len(expected)))


def test_pose_keypoints_move_with_their_boxes() -> None:
    det = Detections(np.array([[200, 100, 240, 140]]), np.array([0.9]), np.array([0]),
                     {"keypoints": np.array([[[200, 100], [240, 140]]], np.float32), "label": np.array(["person"])})
    out = move_detections(det, Placement.region((1000, 500, 1100, 600), 200, 100, 2.0))
    assert out.data["keypoints"][0].tolist() == [[1000, 500], [1020, 520]]
    assert out.data["label"].tolist() == ["person"]
    assert move_detections(det, Placement.stretch(1, 1, 6, 5), forward=True).data["keypoints"][0].tolist() == [[1200, 500], [1440, 700]]
