"""The strategies at their stated limits: "detections below score_threshold are not reported"
(at the threshold: reported), tiles and full-frame boxes clipped to a non-square frame (x to its
width, y to its height), every tile offset back by its own origin."""
from __future__ import annotations

from typing import List

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.roi import geometry as g
from edge_sdk.roi.strategies import FullFrame, RoiConfig, RoiScheduler, Tiles


class Fixed:
    """A detector that returns the same detections (in each image's pixels) for every image."""

    def __init__(self, boxes, scores, input_size=(64, 48)) -> None:
        self.boxes = np.array(boxes, np.float32).reshape(-1, 4)
        self.scores = np.array(scores, np.float32)
        self.input_size = input_size
        self.calls: List[List[tuple]] = []

    def __call__(self, images: List[np.ndarray]) -> List[Detections]:
        self.calls.append([im.shape[:2] for im in images])
        return [Detections(self.boxes.copy(), self.scores.copy(), np.zeros(len(self.boxes))) for _ in images]


@pytest.mark.parametrize("threshold", [0.5, 0.25, 0.75])
def test_full_frame_reports_from_the_threshold_up(threshold: float) -> None:
    scores = [threshold, np.nextafter(np.float32(threshold), np.float32(0)), 0.9]
    det = Fixed([[0, 0, 4, 4], [10, 10, 14, 14], [20, 20, 24, 24]], scores)
    out = FullFrame(det, RoiConfig(score_threshold=threshold))(np.zeros((30, 50, 3), np.uint8))
    assert sorted(out.detections.confidence.tolist()) == sorted([float(np.float32(threshold)), float(np.float32(0.9))])
    assert out.info == {"mode": "full", "images": 1}


def test_tiles_offset_each_detection_by_its_tiles_origin_and_clip_to_the_frame() -> None:
    w, h = 200, 90  # not square, not a multiple of the tile
    det = Fixed([[30, 20, 34, 24], [60, 40, 80, 60]], [0.9, 0.8])  # the second runs past every tile's edge
    out = Tiles(det, input_size=(64, 48), config=RoiConfig(full_frame_pass=False, merge_method="nms", merge_threshold=1.0))(
        np.zeros((h, w, 3), np.uint8))
    grid = g.slice_grid(w, h, 64, 48, 0.2, 0.2)
    want = []
    for x0, y0, _, _ in grid:
        want.append([x0 + 30, y0 + 20, x0 + 34, y0 + 24])
        want.append([min(x0 + 60, w), min(y0 + 40, h), min(x0 + 80, w), min(y0 + 60, h)])
    got = out.detections.xyxy
    assert (got[:, [0, 2]] <= w).all() and (got[:, [1, 3]] <= h).all() and (got >= 0).all()
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, np.array(want, np.float32).tolist()))
    assert out.info == {"mode": "tiles", "tiles": len(grid), "images": len(grid)}


def test_the_full_frame_pass_is_the_last_image_and_is_clipped_too() -> None:
    det = Fixed([[-10, -5, 300, 120]], [0.9], input_size=(64, 48))
    out = Tiles(det, input_size=(64, 48), config=RoiConfig(full_frame_pass=True))(np.zeros((90, 200, 3), np.uint8))
    assert det.calls[0][-1] == (90, 200)
    assert out.detections.xyxy.min() >= 0 and out.detections.xyxy[:, 2].max() == 200 and out.detections.xyxy[:, 3].max() == 90


@pytest.mark.parametrize("threshold,reported", [(0.5, 1), (0.5001, 0)])
def test_the_scheduler_reports_from_the_threshold_up(threshold: float, reported: int) -> None:
    det = Fixed([[4, 4, 12, 12]], [0.5], input_size=(64, 48))
    sched = RoiScheduler(det, config=RoiConfig(score_threshold=threshold, proposal_threshold=0.05, sweep_tiles=0,
                                               motion=False))
    out = sched(np.zeros((48, 64, 3), np.uint8))  # fits the input: the coarse pass sees it at full size
    assert len(out.detections) == reported


@pytest.mark.parametrize("rows,saturated", [(25, False), (26, True)])  # 40 x 25 = 1000 px = 0.2 of 100 x 50
def test_motion_over_more_than_max_fraction_of_the_copy_is_ignored(rows: int, saturated: bool) -> None:
    from edge_sdk.roi.strategies import MotionDetector

    motion = MotionDetector(width=100, threshold=18, max_fraction=0.2)
    still = np.full((50, 100, 3), 60, np.uint8)
    assert motion(still).shape == (0, 4)  # the first frame only sets the background
    moved = still.copy()
    moved[10:10 + rows, 30:70] = 200
    boxes = motion(moved)
    assert motion.saturated is saturated
    if saturated:
        assert boxes.shape == (0, 4)
    else:  # the moving block, grown by the one-pixel dilation
        assert boxes.tolist() == [[29.0, 9.0, 71.0, 10.0 + rows + 1]]


def test_motion_boxes_come_back_in_frame_pixels_on_each_axis() -> None:
    from edge_sdk.roi.strategies import MotionDetector

    motion = MotionDetector(width=50, threshold=18, max_fraction=0.5)
    still = np.full((60, 200, 3), 60, np.uint8)  # copy 50 x 15: x scaled by 4, y by 4
    motion(still)
    moved = still.copy()
    moved[20:40, 80:120] = 220
    (x0, y0, x1, y1), = motion(moved).tolist()
    assert (x0, y0, x1, y1) == (pytest.approx(76.0), pytest.approx(16.0), pytest.approx(124.0), pytest.approx(44.0))
