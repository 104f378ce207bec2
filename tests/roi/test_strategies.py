"""The strategies with a transparent fake detector: exact mapping, sweep bound, budget, tracks."""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import pytest

from edge_sdk.detections import Detections, match_detections
from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.roi import geometry as g
from edge_sdk.roi import strategies
from edge_sdk.roi.strategies import FullFrame, MotionDetector, RoiConfig, RoiScheduler, Tiles, make_strategy, register_strategy

INPUT = (64, 48)  # a small "model input" keeps these tests fast


class FakeBlobDetector:
    """Finds white squares: every 8-connected blob of pixels > 127 is one detection.

    Boxes are in the pixels of the image it is given, exactly; a bigger blob scores higher (a
    whole object beats a part of it cut by a tile edge). `score_by_width` overrides the score
    by blob width, so a test can make weak "proposals". Like a real model, it misses objects
    smaller than `min_size` pixels (both sides) in the image it is given, so small squares
    vanish from a shrunk frame; and it sees nothing in images larger than its input unless
    `sees_large`. Records calls.
    """

    def __init__(self, input_size: Tuple[int, int] = INPUT, score_by_width: Optional[dict] = None, clock=None, ms_per_image: float = 0.0, sees_large: bool = False, min_size: int = 4) -> None:
        self.input_size = input_size
        self.sees_large = sees_large
        self.min_size = min_size
        self.calls: List[List[Tuple[int, int]]] = []
        self.score_by_width = score_by_width or {}
        self.clock = clock
        self.ms_per_image = ms_per_image

    def __call__(self, images: List[np.ndarray]) -> List[Detections]:
        import cv2

        self.calls.append([img.shape[:2] for img in images])
        if self.clock is not None:
            self.clock.advance(self.ms_per_image * len(images) / 1000.0)
        out = []
        for img in images:
            if not self.sees_large and (img.shape[1] > self.input_size[0] or img.shape[0] > self.input_size[1]):
                out.append(Detections.empty())
                continue
            mask = (img[..., 0] > 127).astype(np.uint8)
            n, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
            stats = stats[1:n]
            stats = stats[(stats[:, 2] >= self.min_size) | (stats[:, 3] >= self.min_size)]
            boxes = stats[:, :4].astype(np.float32)
            boxes[:, 2:] += boxes[:, :2]
            widths = (boxes[:, 2] - boxes[:, 0]).astype(int)
            areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
            scores = [self.score_by_width.get(int(w), 0.5 + 0.5 * float(a) / (float(a) + 50.0)) for w, a in zip(widths, areas)]
            out.append(Detections(boxes, np.array(scores, np.float32), np.zeros(len(boxes))))
        return out


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def _frame(w: int, h: int, squares) -> np.ndarray:
    frame = np.zeros((h, w, 3), np.uint8)
    for x0, y0, x1, y1 in squares:
        frame[y0:y1, x0:x1] = 255
    return frame


def _boxes(det: Detections) -> List[List[float]]:
    return sorted(det.xyxy.tolist())


SQUARES = [(10, 10, 20, 20), (58, 30, 70, 42), (150, 100, 160, 112), (290, 200, 300, 210)]


def test_tiles_maps_back_exactly_and_merges_cut_objects() -> None:
    # the second square straddles the first tile edge (x = 64): each tile sees a part of it
    det = FakeBlobDetector()
    tiles = Tiles(det, config=RoiConfig(full_frame_pass=False))
    out = tiles(_frame(320, 240, SQUARES))
    assert _boxes(out.detections) == sorted([list(map(float, s)) for s in SQUARES])
    n_tiles = len(g.slice_grid(320, 240, 64, 48, 0.2, 0.2))
    assert out.info == {"mode": "tiles", "tiles": n_tiles, "images": n_tiles}
    assert det.calls == [[(48, 64)] * n_tiles]


def test_tiles_full_frame_pass_adds_one_image() -> None:
    det = FakeBlobDetector(sees_large=True)
    out = Tiles(det, config=RoiConfig(full_frame_pass=True))(_frame(320, 240, SQUARES[:2] + [(100, 60, 300, 200)]))
    assert det.calls[0][-1] == (240, 320)
    # the large object is bigger than a tile: only the full-frame pass sees it whole, and the
    # merge folds the tiles' pieces of it into that box
    assert _boxes(out.detections) == [[10.0, 10.0, 20.0, 20.0], [58.0, 30.0, 70.0, 42.0], [100.0, 60.0, 300.0, 200.0]]


def test_full_frame_is_one_pass_with_output_threshold() -> None:
    det = FakeBlobDetector(score_by_width={10: 0.3}, sees_large=True)  # 10-wide squares are weak
    out = FullFrame(det, RoiConfig(score_threshold=0.5))(_frame(320, 240, SQUARES))
    assert det.calls == [[(240, 320)]]
    assert _boxes(out.detections) == [[58.0, 30.0, 70.0, 42.0]]


def _scheduler(det, **cfg) -> RoiScheduler:
    base = dict(motion=False, sweep_tiles=2, sweep_level=0, max_fine_pixels=4 * INPUT[0] * INPUT[1], roi_min_size=16, roi_margin=0.5, pack_gap=4)
    base.update(cfg)
    return RoiScheduler(det, config=RoiConfig(**base))


@pytest.mark.parametrize("sweep_level", [0, 1])
@pytest.mark.parametrize("sweep_tiles", [1, 2, 3, 5])
def test_sweep_examines_every_tile_within_its_bound(sweep_tiles, sweep_level) -> None:
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=sweep_tiles, sweep_level=sweep_level, max_fine_pixels=sweep_tiles * INPUT[0] * INPUT[1])
    frame = _frame(320, 240, [])
    n_tiles = len(sched.grid(320, 240))
    f = 2 ** sweep_level
    assert n_tiles == len(g.slice_grid(320, 240, 64 * f, 48 * f, 0.2, 0.2))
    bound = g.sweep_bound(n_tiles, sweep_tiles)
    history = []
    for i in range(3 * bound + 1):
        info = sched(frame).info
        assert info["sweep_bound"] == bound
        history.append(set(info["sweep_tiles"]))
        window = history[-bound:]
        if len(window) == bound:
            assert set().union(*window) == set(range(n_tiles)), f"frames {i - bound + 1}..{i} left tiles unseen"
        assert (i - sched.last_examined).max() < bound or i < bound - 1
    # every tile of the grid went to the detector as one model input (48x64, zoomed out at level 1)
    assert all(shape == (48, 64) for call in det.calls for shape in call[1:])


def test_zones_are_examined_and_mapped_back_exactly() -> None:
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=0, max_fine_pixels=4 * INPUT[0] * INPUT[1], zones=[[140, 90, 170, 120], [280, 190, 310, 220]])
    out = sched(_frame(320, 240, SQUARES))
    assert _boxes(out.detections) == [[150.0, 100.0, 160.0, 112.0], [290.0, 200.0, 300.0, 210.0]]
    assert out.info["roi_sources"] == {"zone": 2}
    assert out.info["rois"] == [[140, 90, 170, 120], [280, 190, 310, 220]]
    # both zones packed side by side into a single model input
    assert det.calls[1] == [(48, 64)]


@pytest.mark.parametrize("budget_inputs, sweep_tiles", [(1, 1), (2, 1), (3, 0), (4, 2)])
def test_pixel_budget_is_respected(budget_inputs, sweep_tiles) -> None:
    # many zones spread over the frame: more regions than the budget holds
    zones = [[x, y, x + 30, y + 30] for x in range(0, 290, 40) for y in range(0, 210, 40)]
    det = FakeBlobDetector()
    budget = budget_inputs * INPUT[0] * INPUT[1]
    sched = _scheduler(det, sweep_tiles=sweep_tiles, max_fine_pixels=budget, zones=zones)
    squares = [(x + 10, y + 10, x + 16, y + 16) for x, y, _, _ in zones]
    frame = _frame(320, 240, squares)
    for _ in range(4):
        before = sum(len(call) for call in det.calls)
        info = sched(frame).info
        assert info["fine_pixels"] <= budget
        assert sum(len(call) for call in det.calls) - before - 1 <= budget_inputs  # all but the coarse pass
        assert info["rois_over_budget"] > 0
        assert info["budget_used"] <= 1.0


def test_millisecond_budget_uses_measured_cost() -> None:
    clock = FakeClock()
    zones = [[x, y, x + 30, y + 30] for x in range(0, 290, 40) for y in range(0, 210, 40)]
    squares = [(x + 10, y + 10, x + 16, y + 16) for x, y, _, _ in zones]
    det = FakeBlobDetector(clock=clock, ms_per_image=10.0)
    sched = RoiScheduler(det, config=RoiConfig(motion=False, sweep_tiles=1, max_fine_pixels=8 * INPUT[0] * INPUT[1], max_fine_ms=25.0, zones=zones), clock=clock)
    frame = _frame(320, 240, squares)
    first = sched(frame).info
    assert first["images"] - 1 == 8  # no measurement yet: the pixel budget alone
    for _ in range(3):
        info = sched(frame).info
        assert info["images"] - 1 == 2  # 10 ms per model input, 25 ms allowed
        assert info["budget_ms"] == 25.0


def test_budget_smaller_than_the_sweep_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_fine_pixels"):
        _scheduler(FakeBlobDetector(), sweep_tiles=3, max_fine_pixels=2 * INPUT[0] * INPUT[1])


def test_tracks_carry_a_moving_object_between_sweeps() -> None:
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=1, max_fine_pixels=2 * INPUT[0] * INPUT[1])
    found_from = None
    for i in range(40):
        x = 20 + 3 * i  # moves 3 px per frame to the right
        square = (x, 100, x + 8, 108)
        out = sched(_frame(320, 240, [square]))
        truth = Detections(np.array([square], np.float32), [1.0], [0])
        hit = match_detections(out.detections, truth, 0.9)["tp"] == 1
        if hit and found_from is None:
            found_from = i
            assert out.info["roi_sources"].get("track", 0) == 0  # first found by the sweep
        elif found_from is not None:
            assert hit, f"lost the object at frame {i}"
            assert out.info["roi_sources"].get("track", 0) >= 1 or out.info["rois_in_sweep"] >= 1
    assert found_from is not None and found_from < sched.sweep_bound


def test_scheduler_report_is_json_ready() -> None:
    import json

    sched = _scheduler(FakeBlobDetector(), zones=[[0, 0, 30, 30]])
    info = sched(_frame(320, 240, SQUARES)).info
    assert json.loads(json.dumps(info)) == info
    for key in ("rois", "roi_sources", "sweep_tiles", "sweep_bound", "fine_pixels", "budget_pixels", "budget_used", "images"):
        assert key in info


def test_frame_size_change_resets_state() -> None:
    sched = _scheduler(FakeBlobDetector())
    sched(_frame(320, 240, SQUARES))
    sched(_frame(320, 240, SQUARES))
    assert sched.frame_index == 2
    sched(_frame(200, 100, []))
    assert sched.frame_index == 1 and len(sched.last_examined) == len(g.slice_grid(200, 100, 64, 48, 0.2, 0.2))


def test_motion_detector_finds_what_moved() -> None:
    md = MotionDetector(width=160, threshold=20)
    still = _frame(320, 240, [(100, 100, 120, 120)])
    assert len(md(still)) == 0  # first frame: learns the background
    assert len(md(still)) == 0
    moved = _frame(320, 240, [(200, 60, 220, 80)])
    boxes = md(moved)
    assert len(boxes) >= 1
    assert g.covered_by(np.array([[200, 60, 220, 80]]), g.expand_boxes(boxes, 320, 240, margin=0.3)).all()
    assert not md.saturated
    md(np.full((240, 320, 3), 255, np.uint8))  # the lights go on
    assert md.saturated


@pytest.mark.parametrize(
    "data, key",
    [
        ({"sweep_tiles": -1}, "sweep_tiles"),
        ({"sweep_level": 5}, "sweep_level"),
        ({"fine_object_size": -1}, "fine_object_size"),
        ({"merge_method": "wbf"}, "merge_method"),
        ({"proposal_threshold": 0.6, "score_threshold": 0.5}, "proposal_threshold"),
        ({"zones": [[0, 0, 0, 10]]}, "zones"),
        ({"tile_overlap": 1.0}, "tile_overlap"),
        ({"motion": "yes"}, "motion"),
        ({"budget": 3}, "unknown key"),
    ],
)
def test_config_errors_name_the_key(data, key) -> None:
    with pytest.raises(ConfigError, match=key):
        RoiConfig.from_dict(data, origin="edge.toml [roi]")


def test_config_round_trip() -> None:
    cfg = RoiConfig(zones=[[0, 0, 10, 10]], sweep_tiles=3)
    assert RoiConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("mode, cls", [("full", FullFrame), ("tiles", Tiles), ("roi", RoiScheduler)])
def test_make_strategy(mode, cls) -> None:
    assert isinstance(make_strategy(mode, FakeBlobDetector()), cls)


def test_make_strategy_rejects_unknown_mode() -> None:
    with pytest.raises(ConfigError, match="mode"):
        make_strategy("pyramid", FakeBlobDetector())


class EveryOtherFrame:
    """A strategy of the registry's contract: cls(detect, input_size=..., config=...)."""

    mode = "every-other"

    def __init__(self, detect, input_size=None, config=None) -> None:
        self.detect, self.input_size, self.config = detect, input_size, config

    def __call__(self, frame):
        raise NotImplementedError

    def reset(self) -> None:
        pass


def test_make_strategy_builds_what_the_registry_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategies, "STRATEGIES", dict(strategies.STRATEGIES))
    detect = FakeBlobDetector()
    config = RoiConfig(sweep_tiles=2)
    strategies.STRATEGIES["every-other"] = EveryOtherFrame  # as a plugin that edits the table would
    made = make_strategy("every-other", detect, input_size=(32, 16), config=config)
    assert isinstance(made, EveryOtherFrame) and (made.detect, made.input_size, made.config) == (detect, (32, 16), config)
    del strategies.STRATEGIES["every-other"]
    register_strategy("every-other", EveryOtherFrame)
    register_strategy("every-other", EveryOtherFrame)  # the same class again: nothing changes
    assert isinstance(make_strategy("every-other", detect), EveryOtherFrame)
    with pytest.raises(ConfigError, match="every-other.*registered already"):
        register_strategy("every-other", Tiles)
    with pytest.raises(ConfigError, match="full, tiles, roi, every-other"):
        make_strategy("pyramid", detect)


def test_strategies_reject_non_frames() -> None:
    with pytest.raises(SourceError):
        Tiles(FakeBlobDetector())(np.zeros((10, 10), np.uint8))


def test_work_per_frame_stays_bounded_when_a_model_floods_detections() -> None:
    """A model that reports hundreds of objects (a bad or untrained model, a crowd) must not make
    the scheduler's tracks, regions or model inputs grow from frame to frame."""
    rng = np.random.default_rng(0)
    squares = []
    for _ in range(400):
        x, y = int(rng.integers(0, 630)), int(rng.integers(0, 470))
        squares.append((x, y, x + 4, y + 4))
    frame = _frame(640, 480, squares)
    det = FakeBlobDetector(sees_large=True)
    sched = _scheduler(det, max_fine_pixels=10 ** 9, max_fine_inputs=5, max_tracks=32, zones=[[0, 0, 640, 480]])
    for _ in range(6):
        info = sched(frame).info
        assert info["tracks"] <= 32
        assert len(det.calls[-1]) <= 5  # fine-pass inputs, whatever the pixel budget says
        assert info["rois_over_budget"] > 0


def test_coarse_pass_sees_the_frame_shrunk_to_the_input_and_maps_back_exactly() -> None:
    # 320x240 shrinks by 5 to 64x48: a 40x40 square at (100, 60) is an 8x8 blob at (20, 12)
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=0)
    out = sched(_frame(320, 240, [(100, 60, 140, 100)]))
    assert det.calls[0] == [(48, 64)]
    assert _boxes(out.detections) == [[100.0, 60.0, 140.0, 100.0]]


@pytest.mark.parametrize("fine_object_size, scales, inputs", [(16, [0.25], 1), (0, [1.0] * 4, 4)])
def test_large_known_objects_are_examined_zoomed_out_in_one_input(fine_object_size, scales, inputs) -> None:
    # 640x480 shrinks by 10: a 40x40 object is a 4x4 blob in the coarse pass, a candidate. Its
    # region (80x80 with the margin) exceeds a 64x48 input: at full resolution it takes 4 cut
    # pieces; zoomed out to a quarter (40 px -> 10 px, at most fine_object_size) it takes one.
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=0, fine_object_size=fine_object_size, max_fine_pixels=8 * INPUT[0] * INPUT[1])
    truth = (300, 200, 340, 240)
    out = sched(_frame(640, 480, [truth]))
    assert out.info["roi_scales"] == scales
    assert len(det.calls[1]) == inputs
    assert len(out.detections) == 1
    np.testing.assert_allclose(out.detections.xyxy[0], truth, atol=4)


def test_objects_the_coarse_pass_sees_well_get_no_fine_region() -> None:
    # a 200x200 object is 20 px in the coarse pass, more than fine_object_size: nothing to add
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=0, fine_object_size=16)
    for _ in range(3):  # as a candidate, then as a tracked object
        out = sched(_frame(640, 480, [(200, 100, 400, 300)]))
        assert out.info["rois"] == [] and out.info["left_to_coarse"] >= 1
        assert len(det.calls[-1]) == 1  # the coarse pass only
        assert _boxes(out.detections) == [[200.0, 100.0, 400.0, 300.0]]


def test_motion_of_a_tracked_object_leaves_no_trail_of_regions() -> None:
    # a background model that learns slowly keeps a moving object's old places "moving" for
    # many frames; what the fine pass examined is taken into the background, so once the object
    # is tracked, its motion asks for no further regions
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=1, motion=True, motion_width=320, motion_learning_rate=0.05, max_fine_pixels=3 * INPUT[0] * INPUT[1])
    tracked_since = None
    for i in range(30):
        x = 40 + 5 * i
        out = sched(_frame(320, 240, [(x, 100, x + 12, 112)]))
        truth = Detections(np.array([[x, 100, x + 12, 112]], np.float32), [1.0], [0])
        hit = match_detections(out.detections, truth, 0.8)["tp"] == 1
        if tracked_since is None and out.info["roi_sources"].get("track"):
            tracked_since = i
        if tracked_since is not None and i > tracked_since:
            assert hit, f"lost the object at frame {i}"
            assert "motion" not in out.info["roi_sources"], (i, out.info["rois"])
    assert tracked_since is not None and tracked_since <= 3


def test_scheduler_allocates_nothing_frame_sized_per_frame() -> None:
    import gc
    import tracemalloc

    w, h = 1280, 720
    rng = np.random.default_rng(1)
    squares = [(int(x), int(y), int(x) + 12, int(y) + 12) for x, y in zip(rng.integers(0, w - 12, 12), rng.integers(0, h - 12, 12))]
    frames = [_frame(w, h, [(x0 + 3 * i, y0, x1 + 3 * i, y1) for x0, y0, x1, y1 in squares]) for i in range(12)]
    sched = _scheduler(FakeBlobDetector(), sweep_tiles=1, motion=True, fine_object_size=16, max_fine_pixels=6 * INPUT[0] * INPUT[1])
    for frame in frames[:4]:
        sched(frame)
    gc.collect()
    tracemalloc.start()
    try:
        for frame in frames[4:]:
            sched(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < w * h * 3 // 8, f"peak {peak} B while a frame is {w * h * 3} B"


def test_zoomed_out_sweep_proposes_and_the_fine_pass_confirms_at_full_resolution() -> None:
    # sweep tiles of 128x96 zoomed out to the 64x48 input: a 12x12 square is a 6x6 blob there,
    # a weak proposal (score 0.3 < 0.5); the fine pass examines it at full resolution, where it
    # scores high, in the same frame, and its box comes back exact
    det = FakeBlobDetector(score_by_width={6: 0.3})
    sched = _scheduler(det, sweep_tiles=1, sweep_level=1, max_fine_pixels=2 * INPUT[0] * INPUT[1])
    square = (40, 30, 52, 42)
    out = sched(_frame(320, 240, [square]))
    assert out.info["sweep_tiles"] == [0] and sched.grid(320, 240)[0].tolist() == [0, 0, 128, 96]
    assert det.calls[0] == [(48, 64), (48, 64)]  # the coarse pass and the sweep tile, in one batch
    assert out.info["roi_sources"] == {"candidate": 1} and out.info["roi_scales"] == [1.0]
    assert _boxes(out.detections) == [list(map(float, square))]


def test_zoomed_out_sweep_reports_what_it_finds_with_confidence() -> None:
    # a 16x16 square: too small for the coarse pass (3 px), an 8x8 blob in the sweep tile and a
    # confident find there; with no room left for a fine pass, the sweep's box is the result
    det = FakeBlobDetector()
    sched = _scheduler(det, sweep_tiles=1, sweep_level=1, max_fine_pixels=1 * INPUT[0] * INPUT[1])
    out = sched(_frame(320, 240, [(40, 30, 56, 46)]))
    assert out.info["rois"] == [] and out.info["rois_over_budget"] == 1
    assert _boxes(out.detections) == [[40.0, 30.0, 56.0, 46.0]]
