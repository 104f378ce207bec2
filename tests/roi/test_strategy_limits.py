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


@pytest.mark.parametrize("size", [(0, 48), (64, 0), (-64, 48), (0, 0)])
def test_a_model_input_size_that_is_not_positive_is_refused(size) -> None:
    from edge_sdk.errors import ConfigError

    with pytest.raises(ConfigError, match="model input size must be positive"):
        Tiles(Fixed([], []), input_size=size)
    with pytest.raises(ConfigError, match="needs the model input size"):
        RoiScheduler(lambda images: [], config=RoiConfig())


def _tracked(sched: RoiScheduler, boxes, scores) -> None:
    """The scheduler's tracker has found `boxes` (tracks from the tracker's first frame are confirmed at once)."""
    sched.tracker.update(Detections(np.array(boxes, np.float32), np.array(scores, np.float32), np.zeros(len(boxes))))
    sched.frame_index = 1


def test_under_a_budget_the_most_confident_track_is_examined_first() -> None:
    def nothing(images):
        return [Detections.empty() for _ in images]

    sched = RoiScheduler(nothing, input_size=(64, 48), config=RoiConfig(
        sweep_tiles=0, motion=False, roi_margin=0.0, roi_min_size=1, max_fine_inputs=1, max_fine_pixels=64 * 48))
    _tracked(sched, [[10, 10, 50, 40], [200, 100, 240, 130]], [0.6, 0.9])  # two 40 x 30 regions: one canvas holds one
    out = sched(np.zeros((240, 320, 3), np.uint8))
    assert out.info["rois"] == [[200, 100, 240, 130]] and out.info["rois_over_budget"] == 1
    assert out.info["roi_sources"] == {"track": 1}
    assert out.info["images"] == 2 and out.info["fine_pixels"] == 64 * 48 and out.info["budget_used"] == 1.0


@pytest.mark.parametrize("sweep_tiles,budget_inputs", [(1, 4), (2, 3)])
def test_the_report_counts_the_fine_pixels_against_the_budget(sweep_tiles: int, budget_inputs: int) -> None:
    def nothing(images):
        return [Detections.empty() for _ in images]

    sched = RoiScheduler(nothing, input_size=(64, 48), config=RoiConfig(
        sweep_tiles=sweep_tiles, motion=False, roi_margin=0.0, roi_min_size=1, max_fine_pixels=budget_inputs * 64 * 48))
    _tracked(sched, [[10, 10, 30, 30]], [0.9])
    out = sched(np.zeros((240, 320, 3), np.uint8))
    canvases = out.info["images"] - 1 - sweep_tiles
    assert canvases == (0 if out.info["rois_in_sweep"] else 1)
    assert out.info["fine_pixels"] == (sweep_tiles + canvases) * 64 * 48
    assert out.info["budget_used"] == round((sweep_tiles + canvases) / budget_inputs, 3)
    assert out.info["budget_pixels"] == budget_inputs * 64 * 48


def _tracked_with_motion():
    """A scheduler (no sweep, a model that finds nothing) with its motion background set on a
    still grey 320 x 240 frame and one tracked object at (100, 100, 150, 140)."""
    sched = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=(64, 48), config=RoiConfig(
        sweep_tiles=0, motion=True, motion_width=320, roi_margin=0.0, roi_min_size=1, track_ttl=10))
    still = np.full((240, 320, 3), 60, np.uint8)
    sched(still)
    _tracked(sched, [[100, 100, 150, 140]], [0.9])
    return sched, still


def test_motion_at_a_tracked_object_asks_for_no_region_but_motion_elsewhere_does() -> None:
    sched, still = _tracked_with_motion()
    moving = still.copy()
    moving[110:130, 130:150] = 220  # at the tracked object: its centre (140, 120) inside the region, near its right edge
    moving[20:35, 250:265] = 220  # elsewhere
    out = sched(moving)
    assert out.info["roi_sources"] == {"track": 1, "motion": 1}, out.info["rois"]
    (x0, y0, x1, y1), = [r for r in out.info["rois"] if r != [100, 100, 150, 140]]
    assert x0 <= 250 and x1 >= 265 and y0 <= 20 and y1 >= 35 and x0 > 150


@pytest.mark.parametrize("block", [(0, 0, 20, 10), (80, 40, 100, 50), (40, 20, 60, 30)])  # at the top-left, bottom-right, inside
def test_an_absorbed_region_stops_asking_for_motion_to_its_edges(block) -> None:
    from edge_sdk.roi.strategies import MotionDetector

    motion = MotionDetector(width=100, threshold=18, learning_rate=0.05, max_fraction=0.5)
    still = np.full((50, 100, 3), 60, np.uint8)
    motion(still)
    moved = still.copy()
    x0, y0, x1, y1 = block
    moved[y0:y1, x0:x1] = 220
    assert len(motion(moved)) == 1
    motion.absorb(np.array([block], np.float64))  # examined: the object is part of the scene now
    assert len(motion(moved)) == 0


def test_an_absorbed_region_of_a_frame_wider_than_the_motion_copy_is_absorbed_there_only() -> None:
    """A 400x100 frame on a 100-wide copy (4 frame pixels a cell): the examined block, given in
    frame pixels, stops asking for motion; a block that moved elsewhere still does."""
    from edge_sdk.roi.strategies import MotionDetector

    motion = MotionDetector(width=100, threshold=18, learning_rate=0.05, max_fraction=0.5)
    still = np.full((100, 400, 3), 60, np.uint8)
    motion(still)
    moved = still.copy()
    moved[40:80, 200:280] = 220  # examined
    moved[8:32, 20:60] = 220  # not examined
    assert len(motion(moved)) == 2
    motion.absorb(np.array([[200, 40, 280, 80]], np.float64))
    (x0, y0, x1, y1), = motion(moved).tolist()
    assert x0 <= 20 and x1 >= 60 and y0 <= 8 and y1 >= 32 and x1 < 200, (x0, y0, x1, y1)


def test_the_motion_detectors_defaults_are_the_documented_roi_defaults() -> None:
    # docs/configuration.md, [roi]: motion_width 480, motion_threshold 18, motion_learning_rate 0.05, motion_max_fraction 0.2
    from edge_sdk.roi.strategies import MotionDetector

    motion, config = MotionDetector(), RoiConfig()
    assert (motion.width, motion.threshold, motion.learning_rate, motion.max_fraction) == (480, 18, 0.05, 0.2)
    assert (config.motion_width, config.motion_threshold, config.motion_learning_rate, config.motion_max_fraction) == (
        480, 18, 0.05, 0.2)


@pytest.mark.parametrize("threshold,moving", [(18, False), (17, True)])
def test_motion_is_a_difference_above_the_threshold(threshold: int, moving: bool) -> None:
    from edge_sdk.roi.strategies import MotionDetector

    motion = MotionDetector(width=100, threshold=threshold, max_fraction=0.5)
    still = np.full((50, 100, 3), 60, np.uint8)
    motion(still)
    moved = still.copy()
    moved[10:20, 10:20] = 78  # 18 grey levels brighter
    assert (len(motion(moved)) == 1) is moving


def test_without_sweep_tiles_there_is_no_sweep_bound() -> None:
    sched = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=(64, 48),
                         config=RoiConfig(sweep_tiles=0, motion=False))
    out = sched(np.zeros((240, 320, 3), np.uint8))
    assert out.info["sweep_bound"] == 0 and out.info["sweep_tiles"] == [] and out.info["images"] == 1
    swept = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=(64, 48),
                         config=RoiConfig(sweep_tiles=2, motion=False))
    n = len(swept.grid(320, 240))
    assert swept(np.zeros((240, 320, 3), np.uint8)).info["sweep_bound"] == -(-n // 2)


def test_motion_centred_on_a_track_regions_top_left_corner_is_at_the_object() -> None:
    sched, still = _tracked_with_motion()
    moving = still.copy()
    moving[95:105, 95:105] = 220  # copy pixels 19 and 20 (1:5), grown by one: 18..22, centred on (100, 100)
    out = sched(moving)
    assert out.info["roi_sources"] == {"track": 1}, out.info["rois"]


def test_motion_centred_on_a_track_regions_right_edge_is_outside_it() -> None:
    sched, still = _tracked_with_motion()
    moving = still.copy()
    moving[115:125, 145:155] = 220  # copy pixels 29..30 (1:5), grown by one: 28..32, centred on x = 150
    out = sched(moving)
    assert out.info["roi_sources"] == {"track": 1, "motion": 1}, out.info["rois"]


def test_the_biggest_mover_is_examined_first_under_a_budget() -> None:
    sched = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=(64, 48), config=RoiConfig(
        sweep_tiles=0, motion=True, motion_width=320, roi_min_size=1, max_fine_inputs=1, max_fine_pixels=64 * 48))
    still = np.full((240, 320, 3), 60, np.uint8)
    sched(still)
    moving = still.copy()
    moving[20:30, 30:40] = 220  # small, and first in the frame
    moving[150:170, 200:220] = 220  # big: its region and the small one's do not fit one input together
    out = sched(moving)
    assert out.info["rois_over_budget"] == 1
    (x0, y0, x1, y1), = out.info["rois"]
    assert x0 <= 200 and x1 >= 220 and y0 <= 150 and y1 >= 170


@pytest.mark.parametrize("frame_wh,coarse_hw", [((640, 120), (12, 64)), ((100, 480), (48, 10)), ((320, 240), (48, 64)),
                                                 ((64, 48), (48, 64))])
def test_the_coarse_pass_sees_the_frame_shrunk_to_fit_with_its_aspect(frame_wh, coarse_hw) -> None:
    seen = []

    def record(images):
        seen.append([im.shape[:2] for im in images])
        return [Detections.empty() for _ in images]

    RoiScheduler(record, input_size=(64, 48), config=RoiConfig(sweep_tiles=0, motion=False))(
        np.zeros((frame_wh[1], frame_wh[0], 3), np.uint8))
    assert seen[0] == [coarse_hw]


@pytest.mark.parametrize("max_fine_ms", [0.0, 0.5, 3.0])
def test_a_millisecond_budget_is_reported_when_set(max_fine_ms: float) -> None:
    sched = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=(64, 48),
                         config=RoiConfig(sweep_tiles=0, motion=False, max_fine_ms=max_fine_ms))
    info = sched(np.zeros((240, 320, 3), np.uint8)).info
    assert info.get("budget_ms") == (max_fine_ms or None)


def test_under_a_budget_the_most_confident_candidate_is_examined_first() -> None:
    def coarse_only(images):  # proposals in the coarse pass (a 1:5 copy), nothing anywhere else
        first = Detections(np.array([[2, 2, 10, 8], [40, 30, 48, 38]], np.float32), np.array([0.3, 0.4], np.float32),
                           np.zeros(2))
        return [first if im.shape[:2] == (48, 64) and len(images) == 1 else Detections.empty() for im in images]

    sched = RoiScheduler(coarse_only, input_size=(64, 48), config=RoiConfig(
        sweep_tiles=0, motion=False, roi_margin=0.0, roi_min_size=1, max_fine_inputs=1, max_fine_pixels=64 * 48))
    out = sched(np.zeros((240, 320, 3), np.uint8))
    assert out.info["candidates"] == 2 and out.info["rois_over_budget"] == 1
    assert out.info["rois"] == [[200, 150, 240, 190]] and out.info["roi_sources"] == {"candidate": 1}


def test_a_new_frame_size_starts_the_frame_count_and_the_sweep_over() -> None:
    sched = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=(64, 48),
                         config=RoiConfig(sweep_tiles=1, sweep_level=0, tile_overlap=0.0, motion=False))
    for _ in range(3):
        sched(np.zeros((96, 128, 3), np.uint8))
    assert sched.frame_index == 3 and sched.last_examined.tolist() == [0, 1, 2, -1]
    out = sched(np.zeros((48, 128, 3), np.uint8))  # another camera: two tiles, counted from frame 0
    assert sched.frame_index == 1 and sched.last_examined.tolist() == [0, -1]
    assert out.info["sweep_tiles"] == [0]


def test_what_was_examined_reaches_the_motion_background_in_exact_coarse_pixels() -> None:
    class Recorder:
        saturated = False

        def __init__(self) -> None:
            self.absorbed: List[np.ndarray] = []

        def __call__(self, small: np.ndarray) -> np.ndarray:
            return np.zeros((0, 4), np.float32)

        def absorb(self, regions: np.ndarray) -> None:
            self.absorbed.append(regions)

        def reset(self) -> None:
            pass

    w, h = 1366, 771  # shrinks by factors with no exact binary fraction
    sched = RoiScheduler(lambda images: [Detections.empty() for _ in images], input_size=(64, 48),
                         config=RoiConfig(sweep_tiles=0, motion=True, zones=[[683, 129, 730, 171], [7, 700, 61, 771]]))
    sched._motion = Recorder()
    out = sched(np.zeros((h, w, 3), np.uint8))
    sw, sh = 64, int(round(h * 64 / w))  # the coarse copy: 64 wide
    want = np.array(out.info["rois"], np.float64) / np.array([w / sw, h / sh, w / sw, h / sh])
    [got] = sched._motion.absorbed
    assert got.dtype == np.float64 and got.tolist() == want.tolist()


def test_a_frame_that_fits_the_model_input_is_looked_at_as_is() -> None:
    seen = []

    def once(images):  # one face in the coarse pass, nothing in the fine pass
        seen.append([im.shape for im in images])
        found = Detections(np.array([[3.5, 7.25, 20, 30]], np.float32), np.array([0.9], np.float32), np.zeros(1))
        return [found if len(seen) == 1 else Detections.empty() for _ in images]

    sched = RoiScheduler(once, input_size=(64, 48), config=RoiConfig(sweep_tiles=0, motion=False))
    out = sched(np.zeros((40, 50, 3), np.uint8))
    assert seen[0] == [(40, 50, 3)]  # neither shrunk nor grown
    assert out.detections.xyxy.tolist() == [[3.5, 7.25, 20, 30]]
