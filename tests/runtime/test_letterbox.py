"""Letterbox geometry against hand-computed numbers, never against the code's own inverse.

For a frame of fw x fh into the 640 x 384 network input, letterbox scales by
r = min(640 / fw, 384 / fh), rounds the content to w x h pixels (at least 1) and centres it:
x = floor((640 - w) / 2), y = floor((384 - h) / 2). The table below was worked out by hand from
that rule; the tests compare the transform, the preprocessed tensor and decoded boxes with it.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest

from edge_sdk.decoders import CENTERFACE_DEFAULT, make_decoder
from edge_sdk.preprocess import InputSpec, Preprocessor, plan_transform

NET_W, NET_H = 640, 384

# (frame w, frame h) -> content (x, y, w, h) in the network input, by hand:
#   1920x1080: r = 1/3         -> 640 x 360, pads (0, 12)
#   3840x2160: r = 1/6         -> 640 x 360, pads (0, 12)
#   641x479:   r = 384/479     -> 641 * 384/479 = 513.87 -> 514 x 384, x = 126 // 2 = 63
#   1x1:       r = 384         -> 384 x 384, x = 256 // 2 = 128
#   480x640:   r = 0.6 (tall)  -> 288 x 384, x = 352 // 2 = 176
#   4000x100:  r = 0.16 (wide) -> 640 x 16, y = 368 // 2 = 184
#   640x383:   r = 1           -> 640 x 383, y = 1 // 2 = 0 (the odd pixel goes to the bottom)
#   640x381:   r = 1           -> 640 x 381, y = 3 // 2 = 1
#   1279x1:    r = 640/1279    -> 640 x 1 (0.5004 rounds to 1), y = 383 // 2 = 191
#   1x2161:    r = 384/2161    -> 1 x 384 (0.18 px, at least 1), x = 639 // 2 = 319
LETTERBOX = [
    ((1920, 1080), (0, 12, 640, 360)),
    ((3840, 2160), (0, 12, 640, 360)),
    ((641, 479), (63, 0, 514, 384)),
    ((1, 1), (128, 0, 384, 384)),
    ((480, 640), (176, 0, 288, 384)),
    ((4000, 100), (0, 184, 640, 16)),
    ((640, 383), (0, 0, 640, 383)),
    ((640, 381), (0, 1, 640, 381)),
    ((1279, 1), (0, 191, 640, 1)),
    ((1, 2161), (319, 0, 1, 384)),
]
IDS = [f"{fw}x{fh}" for (fw, fh), _ in LETTERBOX]


@pytest.mark.parametrize("frame, content", LETTERBOX, ids=IDS)
def test_plan_transform_matches_the_hand_computed_letterbox(frame: Tuple[int, int], content: Tuple[int, int, int, int]) -> None:
    fw, fh = frame
    x, y, w, h = content
    transform, region = plan_transform(fw, fh, NET_W, NET_H, "letterbox")
    assert region == content
    assert (transform.x, transform.y) == (x, y)
    assert transform.scale_x == pytest.approx(w / fw, rel=1e-12) and transform.scale_y == pytest.approx(h / fh, rel=1e-12)
    assert (transform.src[2], transform.src[3]) == (fw, fh)


@pytest.mark.parametrize("frame, content", LETTERBOX, ids=IDS)
def test_the_content_corners_map_to_the_frame_corners(frame: Tuple[int, int], content: Tuple[int, int, int, int]) -> None:
    """A box on the content's right and bottom edges is a box on the frame's right and bottom edges."""
    fw, fh = frame
    x, y, w, h = content
    transform, _ = plan_transform(fw, fh, NET_W, NET_H, "letterbox")
    net = np.array(
        [
            [x, y, x + w, y + h],  # the whole content: the whole frame
            [x + w / 2, y + h / 2, x + w, y + h],  # bottom-right quarter
            [x, y, x + w / 4, y + h / 4],  # top-left sixteenth
            [0, 0, NET_W, NET_H],  # the padding too: clipped to the frame
        ],
        np.float32,
    )
    want = np.array([[0, 0, fw, fh], [fw / 2, fh / 2, fw, fh], [0, 0, fw / 4, fh / 4], [0, 0, fw, fh]], np.float32)
    tol = 1e-4 * max(fw, fh)
    np.testing.assert_allclose(transform.inverse(net, clip=True), want, atol=tol)
    # unclipped, the padding lies outside the frame by pad / scale on each side
    left, top = -x * fw / w, -y * fh / h
    right, bottom = fw + (NET_W - x - w) * fw / w, fh + (NET_H - y - h) * fh / h
    np.testing.assert_allclose(transform.inverse(net[3:]), [[left, top, right, bottom]], atol=tol, rtol=1e-5)


@pytest.mark.parametrize("frame, content", LETTERBOX, ids=IDS)
def test_the_preprocessed_tensor_puts_the_frame_where_the_hand_computed_letterbox_says(
    frame: Tuple[int, int], content: Tuple[int, int, int, int]
) -> None:
    """A one-colour frame: the content rectangle holds the colour, everything else the pad value."""
    fw, fh = frame
    x, y, w, h = content
    colour = (11, 200, 77)  # B, G, R
    spec = InputSpec(name="x", shape=[1, 3, NET_H, NET_W], pad_value=114)
    tensor, _ = Preprocessor(spec)(np.full((fh, fw, 3), colour, np.uint8))
    want = np.full((3, NET_H, NET_W), 114, np.float32)
    want[:, y : y + h, x : x + w] = np.array(colour, np.float32).reshape(3, 1, 1)
    np.testing.assert_array_equal(tensor[0], want)


QUADRANTS = ((11, 200, 77), (90, 30, 250), (200, 120, 5), (40, 40, 160))  # TL, TR, BL, BR (B, G, R)


@pytest.mark.parametrize("frame, content", [c for c in LETTERBOX if min(c[0]) >= 4 and min(c[1][2:]) >= 8],
                         ids=[i for i, c in zip(IDS, LETTERBOX) if min(c[0]) >= 4 and min(c[1][2:]) >= 8])
def test_each_frame_quadrant_lands_in_its_hand_computed_quarter(
    frame: Tuple[int, int], content: Tuple[int, int, int, int]
) -> None:
    """Four colours, one per frame quadrant: a crop, a mirror or a wrong source region shows up
    (a one-colour frame hides them). Pixels within 2 of a seam may blend and are not checked."""
    fw, fh = frame
    x, y, w, h = content
    image = np.empty((fh, fw, 3), np.uint8)
    image[: fh // 2, : fw // 2], image[: fh // 2, fw // 2 :] = QUADRANTS[0], QUADRANTS[1]
    image[fh // 2 :, : fw // 2], image[fh // 2 :, fw // 2 :] = QUADRANTS[2], QUADRANTS[3]
    tensor, _ = Preprocessor(InputSpec(name="x", shape=[1, 3, NET_H, NET_W], pad_value=114))(image)
    # the seams in network pixels, from the content rectangle (fw // 2 of fw columns -> x + w * (fw // 2) / fw)
    sx, sy = x + w * (fw // 2) / fw, y + h * (fh // 2) / fh
    quarters = [(x, sx, y, sy), (sx, x + w, y, sy), (x, sx, sy, y + h), (sx, x + w, sy, y + h)]
    for colour, (x0, x1, y0, y1) in zip(QUADRANTS, quarters):
        region = tensor[0, :, int(np.ceil(y0)) + 2 : int(y1) - 2, int(np.ceil(x0)) + 2 : int(x1) - 2]
        assert region.size > 0
        np.testing.assert_array_equal(region, np.broadcast_to(np.array(colour, np.float32).reshape(3, 1, 1), region.shape))


# Faces at the frame's edges in network pixels, and the same boxes in frame pixels by hand
# (1920x1080: frame = (net - (0, 12)) * 3; 641x479: frame x = (net x - 63) * 641/514,
# frame y = net y * 479/384; 257 and 128.5 are 1/2 and 1/4 of the 514 px content width).
EDGE_FACES = [
    ((1920, 1080), [[600, 342, 640, 372], [0, 12, 40, 42]], [[1800, 990, 1920, 1080], [0, 0, 120, 90]]),
    ((641, 479), [[63 + 257, 192, 63 + 514, 384], [63, 0, 63 + 128.5, 96]], [[320.5, 239.5, 641, 479], [0, 0, 160.25, 119.75]]),
]


@pytest.mark.parametrize("frame, net_boxes, frame_boxes", EDGE_FACES, ids=["1920x1080", "641x479"])
def test_decoded_faces_at_the_right_and_bottom_edges_land_on_the_frame_edges(frame, net_boxes, frame_boxes) -> None:
    """CenterFace outputs encoding known network-pixel boxes decode to the hand-mapped frame boxes."""
    fw, fh = frame
    stride = 4
    spec = InputSpec(name="input.1", shape=[1, 3, NET_H, NET_W])
    outs = [np.zeros((1, c, NET_H // stride, NET_W // stride), np.float32) for c in (1, 2, 2, 10)]
    for (x1, y1, x2, y2), score in zip(net_boxes, (0.9, 0.8)):
        cx, cy = (x1 + x2) / 2 / stride - 0.5, (y1 + y2) / 2 / stride - 0.5
        gx, gy = int(np.floor(cx)), int(np.floor(cy))
        outs[0][0, 0, gy, gx] = score
        outs[1][0, :, gy, gx] = np.log((y2 - y1) / stride), np.log((x2 - x1) / stride)
        outs[2][0, :, gy, gx] = cy - gy, cx - gx
    transform, _ = plan_transform(fw, fh, NET_W, NET_H, "letterbox")
    [det] = make_decoder(CENTERFACE_DEFAULT, spec)(outs, [transform])
    np.testing.assert_allclose(det.xyxy, np.array(frame_boxes, np.float32), atol=0.05)
