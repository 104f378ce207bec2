"""One placement type, one detection mapping, one resize routine.

The resize checks compare every routine that draws into a buffer (the Preprocessor's letterbox
and stretch, the ROI canvas paste, crop_scale_pad, the scheduler's shrunk copy) with the cv2 calls
each of them made on its own before they shared `resize_into`, written out here, on real photos:
the same pixels, to the bit."""
from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.detections import Detections
from edge_sdk.geometry import Placement, move_detections, resize_into
from edge_sdk.preprocess import InputSpec, Preprocessor
from edge_sdk.roi import geometry as g
from edge_sdk.roi.config import RoiConfig
from edge_sdk.roi.strategies import RoiScheduler

PHOTOS = Path(__file__).resolve().parents[1] / "calibrate" / "images"


def photos() -> List[np.ndarray]:
    """Real photos at their size, enlarged to 1080p (a camera frame), and cut to odd sizes."""
    out = []
    for name in ("scene_12_chelsea.jpg", "scene_21_coffee.jpg", "photo_moon.jpg"):
        img = cv2.imread(str(PHOTOS / name))
        assert img is not None, name
        out.append(img)
    out.append(cv2.resize(out[0], (1920, 1080), interpolation=cv2.INTER_CUBIC))
    out.append(np.ascontiguousarray(out[1][7:300, 3:531]))
    return out


# -- the routines as they were, each its own cv2 call ---------------------------------------------
def old_letterbox_canvas(frame: np.ndarray, spec: InputSpec) -> np.ndarray:
    h, w = frame.shape[:2]
    net_w, net_h = spec.width, spec.height
    if spec.resize == "stretch":
        x, y, rw, rh = 0, 0, net_w, net_h
    else:
        r = min(net_w / w, net_h / h)
        if spec.placement == "center":
            rw, rh = max(1, min(net_w, int(round(w * r)))), max(1, min(net_h, int(round(h * r))))
            x, y = (net_w - rw) // 2, (net_h - rh) // 2
        else:
            rw, rh = max(1, min(net_w, int(w * r))), max(1, min(net_h, int(h * r)))
            x, y = 0, 0
    canvas = np.full((net_h, net_w, 3), spec.pad_value, np.uint8)
    if (rw, rh) == (w, h):
        canvas[y:y + rh, x:x + rw] = frame
    else:
        interp = cv2.INTER_AREA if spec.interpolation == "area" and rw < w else cv2.INTER_LINEAR
        canvas[y:y + rh, x:x + rw] = cv2.resize(frame, (rw, rh), interpolation=interp)
    return canvas


def old_crop_scale_pad(frame: np.ndarray, region: Tuple[int, int, int, int], out_shape: Tuple[int, int], pad: int) -> np.ndarray:
    x0, y0, x1, y1 = region
    h_out, w_out = out_shape
    scale = min(w_out / (x1 - x0), h_out / (y1 - y0))
    w, h = max(1, int(round((x1 - x0) * scale))), max(1, int(round((y1 - y0) * scale)))
    out = np.full((h_out, w_out, 3), pad, np.uint8)
    crop = frame[y0:y1, x0:x1]
    if (w, h) == (x1 - x0, y1 - y0):
        out[:h, :w] = crop
    else:
        out[:h, :w] = cv2.resize(crop, (w, h), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    return out


def old_shrink(frame: np.ndarray, cw: int, ch: int) -> np.ndarray:
    h, w = frame.shape[:2]
    s = min(cw / w, ch / h)
    if s >= 1.0:
        return frame
    sw, sh = min(cw, max(1, int(round(w * s)))), min(ch, max(1, int(round(h * s))))
    return cv2.resize(frame, (sw, sh), interpolation=cv2.INTER_AREA)


SPECS = [
    dict(resize="letterbox", placement="center", interpolation="linear"),
    dict(resize="letterbox", placement="center", interpolation="area"),
    dict(resize="letterbox", placement="top-left", interpolation="area", pad_value=114),
    dict(resize="stretch", interpolation="linear", color="RGB"),
    dict(resize="stretch", interpolation="area"),
]


@pytest.mark.parametrize("net", [(640, 384), (320, 320), (96, 160)])
@pytest.mark.parametrize("options", SPECS)
def test_the_preprocessor_draws_the_pixels_it_drew_before(net: Tuple[int, int], options: dict) -> None:
    spec = InputSpec(shape=[1, 3, net[1], net[0]], **options)
    pre = Preprocessor(spec)
    order = [0, 1, 2] if spec.color == "BGR" else [2, 1, 0]
    for frame in photos():  # one preprocessor, frames of several sizes: the canvas is re-padded
        tensor, _ = pre(frame)
        want = old_letterbox_canvas(frame, spec)[..., order].transpose(2, 0, 1).astype(np.float32)
        np.testing.assert_array_equal(tensor[0], want)


@pytest.mark.parametrize("region", [(0, 0, 640, 480), (100, 50, 420, 250), (10, 20, 74, 52), (300, 100, 331, 400)])
def test_crop_scale_pad_draws_the_pixels_it_drew_before(region: Tuple[int, int, int, int]) -> None:
    frame = photos()[0]
    for shape in ((96, 160), (384, 640), (32, 64)):
        out = np.zeros(shape + (3,), np.uint8)
        g.crop_scale_pad(frame, region, out, pad_value=7)
        np.testing.assert_array_equal(out, old_crop_scale_pad(frame, region, shape, 7))


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25, 1.5])
def test_paste_draws_the_pixels_it_drew_before(scale: float) -> None:
    frame = photos()[3]
    canvas = np.zeros((384, 640, 3), np.uint8)
    p = Placement.region((900, 400, 1100, 560), 17, 9, scale)
    g.paste(frame, p, canvas)
    x0, y0, x1, y1 = p.dst
    crop = frame[400:560, 900:1100]
    if scale == 1.0:
        want = crop
    else:
        want = cv2.resize(crop, (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    np.testing.assert_array_equal(canvas[y0:y1, x0:x1], want)
    canvas[y0:y1, x0:x1] = 0
    assert not canvas.any()  # nothing drawn outside the placement


@pytest.mark.parametrize("input_size", [(640, 384), (160, 96), (2000, 1200)])
def test_the_schedulers_shrunk_copy_is_the_one_it_made_before(input_size: Tuple[int, int]) -> None:
    sched = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=input_size,
                         config=RoiConfig(sweep_tiles=0, motion=False))
    for frame in photos():
        small, enlarge = sched._shrink(frame)
        np.testing.assert_array_equal(small, old_shrink(frame, *input_size))
        assert enlarge.src == (0, 0, small.shape[1], small.shape[0])
        assert enlarge.dst == (0, 0, frame.shape[1], frame.shape[0])


def test_resize_into_pads_the_rest_and_refuses_what_does_not_fit() -> None:
    frame = photos()[0]
    out = np.zeros((50, 80, 3), np.uint8)
    view = resize_into(frame, Placement.region((0, 0, 40, 20), 30, 10), out, cv2.INTER_LINEAR, pad_value=3)
    np.testing.assert_array_equal(view, frame[:20, :40])
    assert np.shares_memory(view, out)
    out[10:30, 30:70] = 3
    assert (out == 3).all()
    with pytest.raises(ValueError, match="more than the 80x50 buffer"):
        resize_into(frame, Placement.region((0, 0, 60, 20), 30, 10), out, cv2.INTER_LINEAR)


# -- the placement type ----------------------------------------------------------------------------
@pytest.mark.parametrize("frame,net,where,want", [
    ((1280, 720), (640, 384), "center", (0, 12, 640, 372, 0.5, 0.5)),
    ((1280, 720), (640, 384), "top-left", (0, 0, 640, 360, 0.5, 0.5)),
    ((480, 640), (320, 320), "center", (40, 0, 280, 320, 0.5, 0.5)),
    ((1000, 1000), (333, 200), "center", (66, 0, 266, 200, 0.2, 0.2)),
    # a strip whose short side scales below one pixel is drawn one pixel thick, no more
    ((4000, 2), (640, 640), "top-left", (0, 0, 640, 1, 0.16, 0.5)),
    ((2, 4000), (640, 640), "top-left", (0, 0, 1, 640, 0.5, 0.16)),
    ((4000, 2), (640, 640), "center", (0, 319, 640, 320, 0.16, 0.5)),
    ((2, 4000), (640, 640), "center", (319, 0, 320, 640, 0.5, 0.16)),
])
def test_letterbox_by_hand(frame, net, where, want) -> None:
    p = Placement.letterbox(*frame, *net, where)
    assert p.dst == want[:4] and (p.scale_x, p.scale_y) == pytest.approx(want[4:])
    assert p.src == (0, 0) + frame


def test_stretch_scales_each_axis_by_its_own_factor() -> None:
    p = Placement.stretch(1280, 720, 640, 480)
    assert (p.scale_x, p.scale_y, p.dst) == (0.5, 480 / 720, (0, 0, 640, 480))
    np.testing.assert_allclose(p.forward([[128, 72, 1280, 720]]), [[64, 48, 640, 480]], rtol=1e-6)


def test_inverse_clips_to_the_source_rectangle_only_when_asked() -> None:
    p = Placement.region((100, 50, 200, 150), 10, 10, 2.0)
    boxes = np.array([[0, 0, 300, 300]], np.float32)
    np.testing.assert_allclose(p.inverse(boxes), [[95, 45, 245, 195]])
    np.testing.assert_allclose(p.inverse(boxes, clip=True), [[100, 50, 200, 150]])
    np.testing.assert_allclose(p.inverse_points(np.array([[[0, 300]]], np.float32), clip=True), [[[100, 150]]])


region_st = st.tuples(st.integers(0, 3000), st.integers(0, 2000), st.integers(1, 900), st.integers(1, 900))


@settings(max_examples=80, deadline=None)
@given(src=region_st, at=st.tuples(st.integers(0, 600), st.integers(0, 300)), scale=st.sampled_from([1.0, 0.5, 0.25, 0.8, 2.0]),
       net=st.sampled_from([(640, 384), (320, 320), (608, 608)]), where=st.sampled_from(["center", "top-left", "stretch"]),
       raw=st.lists(st.tuples(st.floats(0, 600), st.floats(0, 600), st.floats(1, 200), st.floats(1, 200)), min_size=1, max_size=5))
def test_then_maps_in_one_step_what_two_placements_map_in_two(src, at, scale, net, where, raw) -> None:
    crop = Placement.region((src[0], src[1], src[0] + src[2], src[1] + src[3]), at[0], at[1], scale)
    canvas_w, canvas_h = crop.dst[2] + 5, crop.dst[3] + 3
    into_net = (Placement.stretch(canvas_w, canvas_h, *net) if where == "stretch"
                else Placement.letterbox(canvas_w, canvas_h, *net, where))
    both = crop.then(into_net)
    net_boxes = np.array([[x, y, x + w, y + h] for x, y, w, h in raw], np.float32)
    np.testing.assert_allclose(both.inverse(net_boxes), crop.inverse(into_net.inverse(net_boxes)), rtol=1e-4, atol=1e-2)
    frame_boxes = crop.inverse(net_boxes)
    np.testing.assert_allclose(both.forward(frame_boxes), into_net.forward(crop.forward(frame_boxes)), rtol=1e-4, atol=1e-2)
    points = net_boxes.reshape(-1, 2, 2)
    np.testing.assert_allclose(both.inverse_points(points), crop.inverse_points(into_net.inverse_points(points)), rtol=1e-4, atol=1e-2)


# -- the one detection mapping ---------------------------------------------------------------------
def test_move_detections_moves_every_geometric_field_and_keeps_the_rest() -> None:
    det = Detections(
        np.array([[10, 20, 30, 40], [0, 0, 8, 8]], np.float32), np.array([0.9, 0.4]), np.array([2, 0]),
        {"landmarks": np.array([[[10, 20], [30, 40]], [[0, 0], [8, 8]]], np.float32),
         "keypoints": np.array([[[20, 30, 0.5]], [[4, 4, 0.25]]], np.float32),
         "label": np.array(["cat", "dog"])},
        {"source": "canvas 0"},
    )
    p = Placement.region((1000, 500, 1100, 600), 10, 20, 0.5)  # canvas = (frame - (1000, 500)) * 0.5 + (10, 20)
    out = move_detections(det, p)
    assert out.xyxy.tolist() == [[1000, 500, 1040, 540], [980, 460, 996, 476]]
    assert out.data["landmarks"].tolist() == [[[1000, 500], [1040, 540]], [[980, 460], [996, 476]]]
    assert out.data["keypoints"].tolist() == [[[1020, 520, 0.5]], [[988, 468, 0.25]]]  # visibility untouched
    assert out.data["label"].tolist() == ["cat", "dog"] and out.metadata == {"source": "canvas 0"}
    assert out.confidence.tolist() == pytest.approx([0.9, 0.4]) and out.class_id.tolist() == [2, 0]
    assert det.xyxy.tolist() == [[10, 20, 30, 40], [0, 0, 8, 8]]  # the input is left alone
    clipped = move_detections(det, p, clip=True)
    assert clipped.xyxy.tolist() == [[1000, 500, 1040, 540], [1000, 500, 1000, 500]]
    assert clipped.data["landmarks"][1].tolist() == [[1000, 500], [1000, 500]]
    assert len(move_detections(Detections.empty(), p)) == 0


def test_move_detections_forward_scales_a_small_copys_detections_up_to_the_frame() -> None:
    det = Detections(np.array([[10, 20, 30, 40]], np.float32), np.array([0.9]), np.array([0]),
                     {"landmarks": np.array([[[10, 20], [30, 40]]], np.float32)})
    up = Placement.stretch(640, 360, 1920, 1080)  # the coarse copy stretched back to the frame
    out = move_detections(det, up, forward=True)
    assert out.xyxy.tolist() == [[30, 60, 90, 120]] and out.data["landmarks"].tolist() == [[[30, 60], [90, 120]]]
    with pytest.raises(ValueError, match="mapping back only"):
        move_detections(det, up, clip=True, forward=True)


def test_inverse_in_float64_divides_exactly() -> None:
    p = Placement.stretch(1366, 771, 640, 361)
    regions = np.array([[683, 129, 730, 171], [7, 700, 61, 771]], np.float64)
    got = p.inverse(regions, dtype=np.float64)
    assert got.dtype == np.float64
    assert got.tolist() == (regions / np.array([p.scale_x, p.scale_y] * 2)).tolist()
    assert p.inverse(regions).dtype == np.float32


def test_affine_is_a_whole_frame_by_scale_and_pad() -> None:
    p = Placement.affine(0.5, 0.25, 3.0, 4.0, 640, 480)  # net = frame * scale + pad
    assert (p.src, p.x, p.y, p.scale_x, p.scale_y) == ((0, 0, 640, 480), 3.0, 4.0, 0.5, 0.25)
    np.testing.assert_allclose(p.forward([[0, 0, 640, 480]]), [[3, 4, 323, 124]])
    np.testing.assert_allclose(p.inverse([[0, 0, 400, 400]], clip=True), [[0, 0, 640, 480]])
