"""ROI geometry at the frame's edges, on frames that are not square, against hand-computed regions."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.roi import geometry as g


def test_clip_regions_clips_x_to_the_width_and_y_to_the_height() -> None:
    # a 200 x 100 frame: x in [0, 200], y in [0, 100]
    regions = [[-5, -5, 300, 300], [150, 80, 260, 140], [10, 20, 30, 40]]
    assert g.clip_regions(np.array(regions), 200, 100).tolist() == [[0, 0, 200, 100], [150, 80, 200, 100], [10, 20, 30, 40]]


@pytest.mark.parametrize(
    "region, window",
    [
        # 20 x 20 windows in a 200 x 100 frame, centred, then shifted back inside
        ((0, 90, 10, 100), (0, 80, 20, 100)),  # bottom-left corner: y0 = 100 - 20
        ((190, 0, 200, 10), (180, 0, 200, 20)),  # top-right corner: x0 = 200 - 20
        ((95, 45, 105, 55), (90, 40, 110, 60)),  # middle: centred
    ],
)
def test_fit_window_stays_inside_a_wide_frame(region, window) -> None:
    assert g.fit_window(region, 20, 20, 200, 100) == window


def test_crop_scale_pad_fits_the_region_and_pads_the_rest() -> None:
    """A 100 x 50 region into a 64 x 64 canvas: scale min(64/100, 64/50) = 0.64 -> 64 x 32 at the top."""
    frame = np.full((120, 160, 3), 200, np.uint8)
    out = np.zeros((64, 64, 3), np.uint8)
    placement = g.crop_scale_pad(frame, (10, 20, 110, 70), out, pad_value=9)
    assert placement.scale == pytest.approx(0.64) and placement.size == (64, 32)
    assert (out[:32] == 200).all() and (out[32:] == 9).all()
    np.testing.assert_allclose(placement.inverse(np.array([[0, 0, 64, 32]], np.float32)), [[10, 20, 110, 70]], atol=1e-4)


@pytest.mark.parametrize(
    "gap, expected",
    [
        # half-open regions [0, 10) and [10, 20) touch but share no pixel: apart at gap 0 ...
        (0, [[0, 0, 10, 10], [10, 0, 20, 10]]),
        # ... and within 1 pixel of each other at gap 1: joined
        (1, [[0, 0, 20, 10]]),
    ],
)
@pytest.mark.parametrize("order", [(0, 1), (1, 0)], ids=["left first", "right first"])
def test_regions_that_only_touch_merge_only_within_the_gap(gap: int, expected, order) -> None:
    regions = np.array([[0, 0, 10, 10], [10, 0, 20, 10]])[list(order)]
    got = g.merge_regions(regions, 100, 100, gap=gap).tolist()
    assert sorted(got) == expected
    # the same in y: [0, 10) above [10, 20)
    assert sorted(g.merge_regions(regions[:, [1, 0, 3, 2]], 100, 100, gap=gap).tolist()) == sorted(
        [r[1], r[0], r[3], r[2]] for r in expected)
