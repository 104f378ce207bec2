"""CenterFace decoding on hand-built outputs that encode known boxes and landmarks."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import pytest

from edge_sdk.decoders import CENTERFACE_DEFAULT, make_decoder
from edge_sdk.errors import BackendError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec, plan_transform

H, W, S = 384, 640, 4
SPEC = InputSpec(name="input.1", shape=[1, 3, H, W])
IDENTITY = Placement.affine(1.0, 1.0, 0.0, 0.0, W, H)


def encode(
    boxes: np.ndarray,
    scores: Sequence[float],
    landmarks: Optional[np.ndarray] = None,
    batch: int = 1,
    item: int = 0,
    outs: Optional[List[np.ndarray]] = None,
) -> List[np.ndarray]:
    """Raw CenterFace outputs whose decode is `boxes` (net pixels) with `landmarks` (K, 5, 2)."""
    if outs is None:
        outs = [
            np.zeros((batch, 1, H // S, W // S), np.float32),
            np.zeros((batch, 2, H // S, W // S), np.float32),
            np.zeros((batch, 2, H // S, W // S), np.float32),
            np.zeros((batch, 10, H // S, W // S), np.float32),
        ]
    heat, scale, offset, lms = outs
    for k, (box, score) in enumerate(zip(np.asarray(boxes, np.float64), scores)):
        x1, y1, x2, y2 = box
        w, h = x2 - x1, y2 - y1
        gx, gy = (x1 + x2) / 2 / S - 0.5, (y1 + y2) / 2 / S - 0.5
        cx, cy = int(np.floor(gx)), int(np.floor(gy))
        heat[item, 0, cy, cx] = score
        scale[item, :, cy, cx] = np.log(h / S), np.log(w / S)
        offset[item, :, cy, cx] = gy - cy, gx - cx
        if landmarks is not None:
            pts = np.asarray(landmarks[k], np.float64)
            lms[item, 0::2, cy, cx] = (pts[:, 1] - y1) / h
            lms[item, 1::2, cy, cx] = (pts[:, 0] - x1) / w
    return outs


def face_landmarks(box: np.ndarray) -> np.ndarray:
    x1, y1, x2, y2 = box
    fx = np.array([0.3, 0.7, 0.5, 0.35, 0.65])
    fy = np.array([0.35, 0.35, 0.55, 0.75, 0.75])
    return np.stack([x1 + fx * (x2 - x1), y1 + fy * (y2 - y1)], axis=1)


BOXES = np.array([[100.3, 50.7, 160.1, 130.9], [400.0, 200.0, 431.5, 241.25], [10.0, 300.0, 30.0, 326.0]], np.float32)


def test_decodes_boxes_scores_and_landmarks_exactly() -> None:
    lms = np.stack([face_landmarks(b) for b in BOXES])
    outs = encode(BOXES, [0.9, 0.8, 0.7], lms)
    [det] = make_decoder(CENTERFACE_DEFAULT, SPEC)(outs, [IDENTITY])
    np.testing.assert_allclose(det.xyxy, BOXES, atol=1e-3)
    np.testing.assert_allclose(det.confidence, [0.9, 0.8, 0.7], atol=1e-6)
    assert det.class_id.tolist() == [0, 0, 0]
    np.testing.assert_allclose(det.data["landmarks"], lms, atol=1e-3)


@pytest.mark.parametrize("frame_w, frame_h", [(1920, 1080), (480, 640), (640, 384), (3840, 2160)])
@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
def test_boxes_come_back_in_frame_pixels(frame_w: int, frame_h: int, resize: str) -> None:
    transform, _ = plan_transform(frame_w, frame_h, W, H, resize)
    sx, sy = frame_w / W, frame_h / H
    frame_boxes = np.array([[0.1 * frame_w, 0.2 * frame_h, 0.3 * frame_w, 0.45 * frame_h], [0.6 * frame_w, 0.5 * frame_h, 0.7 * frame_w, 0.62 * frame_h]], np.float32)
    frame_lms = np.stack([face_landmarks(b) for b in frame_boxes])
    net_boxes = transform.forward(frame_boxes)
    net_lms = np.stack([frame_lms[..., 0] * transform.scale_x + transform.x, frame_lms[..., 1] * transform.scale_y + transform.y], axis=2)
    outs = encode(net_boxes, [0.95, 0.85], net_lms)
    [det] = make_decoder(CENTERFACE_DEFAULT, SPEC)(outs, [transform])
    tol = 1e-3 * max(sx, sy, 1.0)
    np.testing.assert_allclose(det.xyxy, frame_boxes, atol=tol)
    np.testing.assert_allclose(det.data["landmarks"], frame_lms, atol=tol)


def test_a_stride_8_model_decodes_with_its_own_stride() -> None:
    """Hand-built outputs of a stride-8 model on a 64 x 96 input (maps of 8 x 12 cells).

    Peak at cell (y=3, x=5): scale (log 2, log 3) -> h = 2 * 8 = 16, w = 3 * 8 = 24; offset
    (dy, dx) = (0.25, 0.5) -> cy = (3 + 0.25 + 0.5) * 8 = 30, cx = (5 + 0.5 + 0.5) * 8 = 48;
    box (48 - 12, 30 - 8, 48 + 12, 30 + 8) = (36, 22, 60, 38). First landmark at (0.5, 0.25) of
    the box from its top-left: (36 + 0.25 * 24, 22 + 0.5 * 16) = (42, 30).
    """
    spec = InputSpec(name="input.1", shape=[1, 3, 64, 96])
    heat, scale, offset, lms = (np.zeros((1, c, 8, 12), np.float32) for c in (1, 2, 2, 10))
    heat[0, 0, 3, 5] = 0.9
    scale[0, :, 3, 5] = np.log(2.0), np.log(3.0)
    offset[0, :, 3, 5] = 0.25, 0.5
    lms[0, :2, 3, 5] = 0.5, 0.25
    [det] = make_decoder(dict(CENTERFACE_DEFAULT, stride=8), spec)([heat, scale, offset, lms], [Placement.affine(1.0, 1.0, 0.0, 0.0, 96, 64)])
    np.testing.assert_allclose(det.xyxy, [[36.0, 22.0, 60.0, 38.0]], atol=1e-4)
    np.testing.assert_allclose(det.data["landmarks"][0, 0], [42.0, 30.0], atol=1e-4)
    with pytest.raises(BackendError, match=r"\[N, 1, 16, 24\] for a 64x96 input"):  # stride 4 wants 16 x 24 maps
        make_decoder(CENTERFACE_DEFAULT, spec)([heat, scale, offset, lms], [Placement.affine(1.0, 1.0, 0.0, 0.0, 96, 64)])


def test_batch_items_are_decoded_independently() -> None:
    outs = encode(BOXES[:2], [0.9, 0.8], batch=3, item=0)
    encode(BOXES[2:], [0.6], outs=outs, item=2)
    t0, t2 = IDENTITY, Placement.affine(0.5, 0.5, 0.0, 12.0, 1280, 720)
    dets = make_decoder(CENTERFACE_DEFAULT, SPEC)(outs, [t0, IDENTITY, t2])
    assert [len(d) for d in dets] == [2, 0, 1]
    np.testing.assert_allclose(dets[0].xyxy, BOXES[:2], atol=1e-3)
    np.testing.assert_allclose(dets[2].xyxy, t2.inverse(BOXES[2:], clip=True), atol=2e-3)
    assert dets[1].data["landmarks"].shape == (0, 5, 2)


@pytest.mark.parametrize(
    "threshold, expected",
    [(0.5, [0.9, 0.8, 0.7]), (0.75, [0.9, 0.8]), (0.85, [0.9]), (0.95, [])],
)
def test_score_threshold(threshold: float, expected: List[float]) -> None:
    outs = encode(BOXES, [0.9, 0.8, 0.7])
    [det] = make_decoder({"type": "centerface", "score_threshold": threshold}, SPEC)(outs, [IDENTITY])
    np.testing.assert_allclose(det.confidence, expected, atol=1e-6)


def test_nms_removes_a_weaker_duplicate_of_the_same_face() -> None:
    dup = BOXES[0] + np.float32(6.0)  # same face, centre 1.5 cells away: IoU ~0.7
    outs = encode(np.stack([BOXES[0], dup]), [0.9, 0.6])
    for local_max in (True, False):
        [det] = make_decoder({"type": "centerface", "local_max": local_max}, SPEC)(outs, [IDENTITY])
        np.testing.assert_allclose(det.xyxy, BOXES[:1], atol=1e-3)


def test_local_max_keeps_only_the_peak_of_a_blob() -> None:
    """A neighbouring cell with a lower score predicting a small, non-overlapping box."""
    small = np.array([[124.0, 86.0, 132.0, 94.0]], np.float32)  # IoU with BOXES[0] < 0.3
    outs = encode(BOXES[:1], [0.9])
    heat = outs[0][0, 0]
    cy, cx = np.unravel_index(np.argmax(heat), heat.shape)
    tmp = encode(small, [0.6])
    ty, tx = np.unravel_index(np.argmax(tmp[0][0, 0]), tmp[0][0, 0].shape)
    assert abs(ty - cy) <= 1 and abs(tx - cx) <= 1, "the factory must put the two peaks side by side"
    for k in range(4):
        outs[k][0, :, ty, tx] = tmp[k][0, :, ty, tx]
    [with_peak] = make_decoder({"type": "centerface", "local_max": True}, SPEC)(outs, [IDENTITY])
    [without] = make_decoder({"type": "centerface", "local_max": False}, SPEC)(outs, [IDENTITY])
    assert len(with_peak) == 1 and len(without) == 2


def test_a_plateau_of_equal_peaks_is_kept() -> None:
    """Two side-by-side cells with the same score (a saturated heatmap does this): each is >= all
    its neighbours, so both are local maxima; their boxes overlap with IoU 1/3 < 0.5, so NMS keeps both."""
    left, right = np.array([[96.0, 96.0, 104.0, 104.0]], np.float32), np.array([[100.0, 96.0, 108.0, 104.0]], np.float32)
    outs = encode(left, [0.8])
    encode(right, [0.8], outs=outs)
    heat = outs[0][0, 0]
    assert sorted(zip(*np.nonzero(heat))) == [(24, 24), (24, 25)], "the factory must put the two peaks side by side"
    [det] = make_decoder({"type": "centerface", "local_max": True, "nms_iou": 0.5}, SPEC)(outs, [IDENTITY])
    np.testing.assert_allclose(sorted(det.xyxy.tolist()), [left[0], right[0]], atol=1e-3)


def test_output_roles_can_be_reordered() -> None:
    outs = encode(BOXES, [0.9, 0.8, 0.7])
    order = ["landmarks", "heatmap", "offset", "scale"]
    roles = {"heatmap": 0, "scale": 1, "offset": 2, "landmarks": 3}
    permuted = [outs[roles[r]] for r in order]
    [det] = make_decoder({"type": "centerface", "outputs": order}, SPEC)(permuted, [IDENTITY])
    np.testing.assert_allclose(det.xyxy, BOXES, atol=1e-3)


def test_landmarks_are_optional() -> None:
    outs = encode(BOXES, [0.9, 0.8, 0.7])[:3]
    [det] = make_decoder({"type": "centerface", "outputs": ["heatmap", "scale", "offset"]}, SPEC)(outs, [IDENTITY])
    np.testing.assert_allclose(det.xyxy, BOXES, atol=1e-3)
    assert "landmarks" not in det.data


def test_half_precision_outputs_decode() -> None:
    outs = [o.astype(np.float16) for o in encode(BOXES, [0.9, 0.8, 0.7])]
    [det] = make_decoder(CENTERFACE_DEFAULT, SPEC)(outs, [IDENTITY])
    np.testing.assert_allclose(det.xyxy, BOXES, atol=0.2)  # fp16 keeps ~3 significant digits
    assert det.xyxy.dtype == np.float32 and det.confidence.dtype == np.float32


def test_max_detections_keeps_the_best() -> None:
    outs = encode(BOXES, [0.7, 0.9, 0.8])
    [det] = make_decoder({"type": "centerface", "max_detections": 2}, SPEC)(outs, [IDENTITY])
    np.testing.assert_allclose(det.confidence, [0.9, 0.8], atol=1e-6)


def test_garbage_sizes_stay_finite() -> None:
    outs = encode(BOXES[:1], [0.9])
    outs[1][...] = 1e4
    [det] = make_decoder(CENTERFACE_DEFAULT, SPEC)(outs, [IDENTITY])
    assert np.isfinite(det.xyxy).all() and np.isfinite(det.data["landmarks"]).all()


def _outputs(shapes):
    return [np.zeros(s, np.float32) for s in shapes]


GOOD = [(1, 1, 96, 160), (1, 2, 96, 160), (1, 2, 96, 160), (1, 10, 96, 160)]


@pytest.mark.parametrize(
    "shapes, transforms, message",
    [
        (GOOD[:2], 1, r"expects 4 outputs"),
        (GOOD + [(1, 1, 96, 160)], 1, r"expects 4 outputs"),
        ([(1, 1, 48, 80)] + GOOD[1:], 1, r"should have shape \[N, 1, 96, 160\].*got \[1, 1, 48, 80\]"),
        (GOOD[:3] + [(1, 8, 96, 160)], 1, r"landmarks.*\[N, 10, 96, 160\]"),
        ([(1, 96, 160)] + GOOD[1:], 1, r"heatmap"),
        ([(2, 1, 96, 160)] + GOOD[1:], 1, r"batch 2"),
        ([(2,) + s[1:] for s in GOOD], 1, r"1 transform\(s\) for a batch of 2"),
    ],
)
def test_wrong_outputs_say_what_was_expected(shapes, transforms, message) -> None:
    decoder = make_decoder(CENTERFACE_DEFAULT, SPEC)
    with pytest.raises(BackendError, match=message):
        decoder(_outputs(shapes), [IDENTITY] * transforms)
