"""Box and point mappings of the ROI geometry against the formula its docstring states, written
out here: ``canvas_px = (frame_px - src_origin) * scale + (x, y)``, on non-square regions at
every zoom, with scales per axis for a resized copy; the owner of a box is the placement whose
canvas area holds its centre (left and top edges in, right and bottom out)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.detections import Detections
from edge_sdk.geometry import Placement, move_detections
from edge_sdk.roi import geometry as g

regions = st.tuples(st.integers(0, 2000), st.integers(0, 1000), st.integers(1, 700), st.integers(1, 300))
boxes = st.lists(st.tuples(st.floats(-50, 800), st.floats(-50, 500), st.floats(0, 90), st.floats(0, 40)), min_size=1, max_size=6)


def xyxy_of(raw) -> np.ndarray:
    return np.array([[x, y, x + w, y + h] for x, y, w, h in raw], np.float32)


@settings(max_examples=120, deadline=None)
@given(src=regions, x=st.integers(0, 640), y=st.integers(0, 384), scale=st.sampled_from([0.125, 0.25, 0.5, 1.0, 2.0, 0.3]),
       raw=boxes)
def test_placement_maps_by_the_stated_formula(src, x: int, y: int, scale: float, raw) -> None:
    x0, y0, w, h = src
    p = Placement.region((x0, y0, x0 + w, y0 + h), x, y, scale)
    canvas = xyxy_of(raw)
    origin = np.array([x0, y0, x0, y0], np.float64)
    at = np.array([x, y, x, y], np.float64)
    np.testing.assert_allclose(p.inverse(canvas), (canvas - at) / scale + origin, rtol=1e-5, atol=1e-2)
    np.testing.assert_allclose(p.forward(canvas), (canvas - origin) * scale + at, rtol=1e-5, atol=1e-2)
    points = canvas.reshape(-1, 2, 2)
    np.testing.assert_allclose(p.inverse_points(points), (points - np.array([x, y])) / scale + np.array([x0, y0]),
                               rtol=1e-5, atol=1e-2)
    assert p.size == (max(1, int(round(w * scale))), max(1, int(round(h * scale))))
    assert p.dst == (x, y, x + p.size[0], y + p.size[1])


@settings(max_examples=80, deadline=None)
@given(sx=st.sampled_from([1.0, 0.5, 2.0, 3.75, 1.6]), sy=st.sampled_from([1.0, 0.5, 2.25, 4.0]), raw=boxes)
def test_move_detections_through_a_stretch_scales_each_axis_by_its_own_factor(sx: float, sy: float, raw) -> None:
    xyxy = xyxy_of(raw)
    points = np.stack([xyxy[:, :2], xyxy[:, 2:]], axis=1)
    det = Detections(xyxy, np.full(len(xyxy), 0.5), np.zeros(len(xyxy)), {"landmarks": points})
    out = move_detections(det, Placement.stretch(1, 1, sx, sy), forward=True)
    np.testing.assert_allclose(out.xyxy, xyxy * np.array([sx, sy, sx, sy], np.float32), rtol=1e-6)
    np.testing.assert_allclose(out.data["landmarks"], points * np.array([sx, sy], np.float32), rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(dx=st.integers(0, 3000), dy=st.integers(0, 2000), raw=boxes)
def test_move_detections_out_of_a_crop_shifts_boxes_and_points(dx: int, dy: int, raw) -> None:
    xyxy = xyxy_of(raw)
    points = np.stack([xyxy[:, :2], xyxy[:, 2:]], axis=1)
    det = Detections(xyxy, np.full(len(xyxy), 0.5), np.zeros(len(xyxy)), {"landmarks": points})
    out = move_detections(det, Placement.region((dx, dy, dx + 1, dy + 1)))
    np.testing.assert_allclose(out.xyxy, xyxy + np.array([dx, dy, dx, dy], np.float32), atol=1e-3)
    np.testing.assert_allclose(out.data["landmarks"], points + np.array([dx, dy], np.float32), atol=1e-3)
    np.testing.assert_array_equal(out.confidence, det.confidence)


@pytest.mark.parametrize("centre,owner", [
    ((10.0, 10.0), 0), ((0.0, 0.0), 0), ((40.0, 10.0), 1), ((39.99, 19.99), 0),  # left/top edges in, right/bottom out
    ((40.0, 20.0), -1), ((100.0, 5.0), -1), ((55.0, 14.99), 1), ((55.0, 15.0), -1), ((20.0, 25.0), -1),
])
def test_a_box_belongs_to_the_placement_holding_its_centre(centre, owner: int) -> None:
    places = [Placement.region((500, 300, 540, 320), 0, 0, 1.0), Placement.region((0, 0, 120, 60), 40, 0, 0.25)]  # 40x20 and 30x15
    cx, cy = centre
    box = np.array([[cx - 3, cy - 2, cx + 3, cy + 2]], np.float32)
    assert g.assign_to_placements(box, places).tolist() == [owner]


@pytest.mark.parametrize("w,h,scale", [(160, 90, 0.5), (90, 160, 0.5), (64, 48, 1.0), (30, 70, 2.0), (200, 50, None)])
def test_paste_and_map_back_find_a_block_where_it_is(w: int, h: int, scale) -> None:
    frame = np.zeros((400, 600, 3), np.uint8)
    x0, y0 = 120, 80
    block = (x0 + w // 4 * 1, y0 + h // 4, x0 + w // 4 * 3, y0 + h // 4 * 3)  # in the middle of the region
    frame[block[1]:block[3], block[0]:block[2]] = 255
    canvas = np.zeros((160, 140, 3), np.uint8) if scale is not None else np.zeros((40, 100, 3), np.uint8)
    if scale is None:
        p = g.crop_scale_pad(frame, (x0, y0, x0 + w, y0 + h), canvas)
        assert p.scale == min(100 / w, 40 / h)
    else:
        p = Placement.region((x0, y0, x0 + w, y0 + h), 7, 5, scale)
        g.paste(frame, p, canvas)
    ys, xs = np.nonzero(canvas[..., 0] > 127)
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    np.testing.assert_allclose(p.inverse(found)[0], block, atol=2.0 / p.scale)
    outside = np.ones(canvas.shape[:2], bool)
    dx0, dy0, dx1, dy1 = p.dst
    outside[dy0:dy1, dx0:dx1] = False
    assert not canvas[outside].any()  # nothing drawn beyond the placement
