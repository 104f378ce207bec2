"""The coarse-to-fine ROI scheduler: a coarse pass and a sweep propose where to look, the regions
are packed into model-input canvases under a budget, and a fine pass examines them."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.detections import TRACK_ID, Detections
from edge_sdk.errors import ConfigError
from edge_sdk.geometry import Placement, move_detections, resize_into
from edge_sdk.roi import geometry as geo
from edge_sdk.roi.base import DetectFn, StrategyResult, above, check_frame, clip_to_frame, model_input_size
from edge_sdk.roi.config import RoiConfig
from edge_sdk.roi.merge import merge
from edge_sdk.roi.motion import MotionDetector
from edge_sdk.tracking.tracker import ByteTracker

ROI_SOURCES = ("track", "candidate", "zone", "motion")  # in priority order
Group = Tuple[str, np.ndarray, np.ndarray]  # (source, regions (K, 4), zoom levels (K,))


@dataclass
class CoarsePass:
    """What the coarse pass and the sweep found, in frame pixels."""

    small: np.ndarray  # the frame shrunk to fit the model input (motion detection reads it too)
    enlarge: Placement  # `small` stretched back to the frame (forward: small pixels -> frame pixels)
    sweep: List[int]  # the grid tiles swept
    sweep_regions: np.ndarray  # (k, 4) their frame regions
    sweep_full: bool  # swept at full resolution (level 0, or a frame smaller than a tile)
    results: List[Detections]  # at or above score_threshold
    candidates: Detections  # at or above proposal_threshold: to be examined at full resolution
    detect_ms: float


@dataclass
class Proposal:
    """Fine-pass regions in priority order, each with its zoom level and source."""

    regions: np.ndarray
    levels: np.ndarray
    sources: List[str]
    left_to_coarse: int  # known objects the coarse pass sees large enough
    in_sweep: int  # regions a full-resolution sweep tile held


@dataclass
class Packing:
    """Where the proposed regions lie in the fine pass's canvases."""

    placements: List[Placement]
    canvases: int
    sources: Dict[str, int]  # regions placed, per source
    over_budget: int  # regions left for a later frame


class RoiScheduler:
    """Coarse-to-fine detection: full-resolution recall at a fraction of full-resolution cost.

    Per frame (:meth:`coarse_pass`, :meth:`propose`, :meth:`pack`, :meth:`fine_pass`):

    1. coarse pass and sweep, in one batch: the whole frame shrunk to the model input, and
       `sweep_tiles` tiles of a grid visited round robin, so every part of the frame is
       examined at least every ``ceil(tiles / sweep_tiles)`` frames (:attr:`sweep_bound`).
       Sweep tiles are ``2**sweep_level`` model inputs a side, zoomed out to one (level 0: full
       resolution). Detections at or above `score_threshold` are results; those at or above
       `proposal_threshold` (of the coarse pass, and of a zoomed-out sweep) are candidates;
    2. regions of interest, in priority order: tracked objects (where the tracker looks for
       them in this frame: its Kalman prediction; lost ones for `track_ttl` frames; and where
       the last frame found what the tracker keeps no track of, a score below its
       `new_track_score`; at most `max_tracks`), candidates, configured zones, moving areas (background subtraction on
       the coarse pass's copy). A known object larger than `fine_object_size` is examined zoomed
       out by a power of two, to at most that size; one the coarse pass already sees that large
       needs no region at all;
    3. packing: regions of one zoom level are merged where that saves pixels, cut where larger
       than a model input, dropped where a full-resolution sweep tile holds them, and packed
       into as few model-input canvases as the budget allows (`max_fine_pixels`, and
       `max_fine_ms` when set); regions beyond the budget wait for a later frame (they are
       counted in the report);
    4. fine pass: the packed canvases in one batch; each detection goes back to frame pixels
       through the placement of the region it lies in;
    5. all detections go back to frame pixels and are merged; the tracker is updated with them;
       what the fine pass (and a full-resolution sweep) examined is taken into the motion
       background, so motion already looked at asks for no more regions.

    The tracker is the stream's (:class:`edge_sdk.tracking.tracker.ByteTracker`, passed per
    frame: ``scheduler(frame, tracker=...)``), whose track ids the result then carries
    (``data["track_id"]``, :attr:`StrategyResult.track_ms` its time), so that the regions and
    the ids come from one notion of a track. Without one the scheduler follows a tracker of
    its own (default [tracking] settings) and reports no ids.

    The report in :attr:`StrategyResult.info` lists the regions examined, their zoom scales and
    sources, the sweep tiles and the budget used.
    """

    mode = "roi"
    follows_tracks = True  # called with tracker= (make_strategy's protocol)

    def __init__(
        self,
        detect: DetectFn,
        input_size: Optional[Tuple[int, int]] = None,
        config: Optional[RoiConfig] = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.detect = detect
        self.input_size = model_input_size(detect, input_size)
        self.config = (config or RoiConfig()).validate()
        self.clock = clock
        cw, ch = self.input_size
        self.canvas_area = cw * ch
        self.max_images = min(self.config.max_fine_pixels // self.canvas_area, self.config.max_fine_inputs)
        if self.max_images < self.config.sweep_tiles:
            raise ConfigError(
                f"roi.max_fine_pixels ({self.config.max_fine_pixels}) and roi.max_fine_inputs "
                f"({self.config.max_fine_inputs}) allow fewer than roi.sweep_tiles ({self.config.sweep_tiles}) "
                f"model inputs of {cw}x{ch}; raise the budget to at least {self.config.sweep_tiles * self.canvas_area} "
                "pixels and as many inputs, or sweep fewer tiles"
            )
        self._canvases = np.zeros((max(0, self.max_images), ch, cw, 3), np.uint8)
        self._small: Optional[np.ndarray] = None  # the coarse pass's copy of the frame
        self._sweep_canvases = np.zeros((self.config.sweep_tiles if self.config.sweep_level else 0, ch, cw, 3), np.uint8)  # zoomed-out sweep tiles
        self._motion = (
            MotionDetector(self.config.motion_width, self.config.motion_threshold, self.config.motion_learning_rate, self.config.motion_max_fraction)
            if self.config.motion
            else None
        )
        self.reset()

    # -- state ----------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget its own tracks, motion history, sweep position and timing (a new clip or
        camera); a stream's tracker is its owner's to reset."""
        self.frame_index = 0
        self._own = ByteTracker()
        self.tracker = self._own  # the tracker followed in the last frame
        self._followed = 0  # tracks that asked for regions in the last frame
        self._untracked = (np.zeros((0, 4), np.float32), np.zeros(0, np.float32))  # the last frame's, that no track took
        self._cursor = 0
        self._grid_key: Optional[Tuple[int, int]] = None
        self._grid = np.zeros((0, 4), np.int32)
        self.last_examined = np.zeros(0, np.int64)  # per sweep tile: frame index it was last swept
        self._ms_per_image: Optional[float] = None
        if self._motion is not None:
            self._motion.reset()

    @property
    def sweep_bound(self) -> int:
        """Frames within which the sweep examines every tile of the current grid (0: no sweep)."""
        if self.config.sweep_tiles == 0 or len(self._grid) == 0:
            return 0
        return geo.sweep_bound(len(self._grid), min(self.config.sweep_tiles, len(self._grid)))

    def grid(self, frame_w: int, frame_h: int) -> np.ndarray:
        if self._grid_key != (frame_w, frame_h):
            if self._grid_key is not None:
                self.reset()
            cw, ch = self.input_size
            f = 1 << self.config.sweep_level
            self._grid = geo.slice_grid(frame_w, frame_h, cw * f, ch * f, self.config.tile_overlap, self.config.tile_overlap)
            self._grid_key = (frame_w, frame_h)
            self.last_examined = np.full(len(self._grid), -1, np.int64)
        return self._grid

    # -- one frame ------------------------------------------------------------------------------
    def __call__(self, frame: np.ndarray, tracker: Optional[ByteTracker] = None) -> StrategyResult:
        """The frame's detections; `tracker`: the stream's, followed and updated, its ids in the
        result (None: the scheduler's own, no ids)."""
        w, h = check_frame(frame)
        cfg = self.config
        grid = self.grid(w, h)  # a new frame size starts over (frame index 0)
        self.tracker = tracker if tracker is not None else self._own
        index = self.frame_index
        coarse = self.coarse_pass(frame, grid)
        proposal = self.propose(coarse, w, h)
        packing = self.pack(proposal, len(coarse.sweep))
        fine, fine_ms = self.fine_pass(frame, coarse, packing)
        det = merge(Detections.merge(coarse.results + fine), cfg.merge_method, cfg.merge_metric, cfg.merge_threshold)
        det = clip_to_frame(det, w, h)
        t0 = self.clock()
        ids = self.tracker.update(det)
        track_ms = (self.clock() - t0) * 1000.0
        left = (ids < 0) & ~self.tracker.config.starts_track(det.confidence)
        self._untracked = (det.xyxy[left], det.confidence[left])
        self._remember(coarse, packing, index)
        if tracker is None:
            return StrategyResult(det, self._report(coarse, proposal, packing, fine_ms))
        det.data[TRACK_ID] = ids
        return StrategyResult(det, self._report(coarse, proposal, packing, fine_ms), track_ms=track_ms)

    def coarse_pass(self, frame: np.ndarray, grid: np.ndarray) -> CoarsePass:
        """The frame shrunk once to the model input and the next sweep tiles of `grid`, in one
        batch; what they found in frame pixels."""
        cfg = self.config
        cw, ch = self.input_size
        small, enlarge = self._shrink(frame)
        k = min(cfg.sweep_tiles, len(grid))
        sweep = [(self._cursor + i) % len(grid) for i in range(k)]
        self._cursor = (self._cursor + k) % len(grid) if len(grid) else 0
        sweep_regions = grid[sweep] if sweep else np.zeros((0, 4), np.int32)
        # a tile is 2**level inputs a side unless the frame is smaller: each is zoomed out to fit
        places = [Placement.region(r, 0, 0, min(1.0, cw / (r[2] - r[0]), ch / (r[3] - r[1]))) for r in sweep_regions]
        full = all(p.scale == 1.0 for p in places)
        if full:
            images = [frame[y0:y1, x0:x1] for x0, y0, x1, y1 in sweep_regions]
        else:
            images = []
            for p, buffer in zip(places, self._sweep_canvases):
                tw, th = p.size
                geo.paste(frame, p, buffer)
                images.append(buffer[:th, :tw])
        t0 = self.clock()
        found = self.detect([small] + images)
        detect_ms = (self.clock() - t0) * 1000.0
        coarse = move_detections(found[0], enlarge, forward=True)
        swept = [move_detections(d, p) for d, p in zip(found[1:], places)]
        results = [above(coarse, cfg.score_threshold)] + [above(d, cfg.score_threshold) for d in swept]
        # what the coarse pass and a zoomed-out sweep only suspect is examined at full resolution
        candidates = above(Detections.merge([coarse] + ([] if full else swept)), cfg.proposal_threshold)
        return CoarsePass(small, enlarge, sweep, sweep_regions, full, results, candidates, detect_ms)

    def propose(self, coarse: CoarsePass, w: int, h: int) -> Proposal:
        """Regions of interest in priority order, merged and cut per zoom level; those a
        full-resolution sweep tile examines already are dropped."""
        regions, levels, sources, left = self._regions(coarse, w, h)
        regions, levels, sources = self._pieces(regions, levels, sources)
        covered = geo.covered_by(regions, coarse.sweep_regions if coarse.sweep_full else np.zeros((0, 4), np.int32))
        kept = [s for s, c in zip(sources, covered) if not c]
        return Proposal(regions[~covered], levels[~covered], kept, left, int(covered.sum()))

    def pack(self, proposal: Proposal, k: int) -> Packing:
        """The regions placed in as few canvases as the budget (less the `k` sweep tiles) allows."""
        cfg = self.config
        budget_images = self.max_images
        if cfg.max_fine_ms > 0 and self._ms_per_image:
            budget_images = min(budget_images, max(k, int(cfg.max_fine_ms // self._ms_per_image)))
        room = max(0, budget_images - k)
        unplaced = [Placement.region(r, 0, 0, 0.5 ** int(lv)) for r, lv in zip(proposal.regions, proposal.levels)]
        sizes = [p.size for p in unplaced]
        packer, order, fixed = self._shelves(sizes, room)
        placements: List[Placement] = []
        used_sources: Dict[str, int] = {s: 0 for s in ROI_SOURCES}
        over_budget = 0
        for i, spot in zip(order, fixed):
            if spot is None:
                spot = packer.add(*sizes[i])
            if spot is None:
                over_budget += 1
                continue
            placements.append(Placement.region(unplaced[i].src, spot[1], spot[2], unplaced[i].scale, spot[0]))
            used_sources[proposal.sources[i]] += 1
        return Packing(placements, packer.canvases, used_sources, over_budget)

    def fine_pass(self, frame: np.ndarray, coarse: CoarsePass, packing: Packing) -> Tuple[List[Detections], float]:
        """The packed canvases in one batch: what was found, in frame pixels, and the fine pass's
        share of the frame's model time."""
        cfg = self.config
        canvases = self._canvases[:packing.canvases]
        canvases[...] = 0
        for p in packing.placements:
            geo.paste(frame, p, canvases[p.canvas])
        t0 = self.clock()
        found = self.detect(list(canvases)) if packing.canvases else []
        detect_ms = coarse.detect_ms + (self.clock() - t0) * 1000.0
        # the sweep shares a batch with the coarse pass: the fine pass's time (sweep included) is
        # its share of the frame's model time, by inputs
        k = len(coarse.sweep)
        per = detect_ms / (1 + k + packing.canvases)
        self._ms_per_image = per if self._ms_per_image is None else 0.7 * self._ms_per_image + 0.3 * per
        results = []
        for c, d in enumerate(found):
            d = above(d, cfg.score_threshold)
            mine = [p for p in packing.placements if p.canvas == c]
            owner = geo.assign_to_placements(d.xyxy, mine)
            for j, p in enumerate(mine):
                part = d[owner == j]
                if len(part):
                    results.append(move_detections(part, p))
        return results, per * (k + packing.canvases)

    def _remember(self, coarse: CoarsePass, packing: Packing, index: int) -> None:
        """What was examined explains the motion in the frame; the sweep moves on."""
        if self._motion is not None:
            examined = [np.array([p.src for p in packing.placements], np.float64).reshape(-1, 4)]
            if coarse.sweep_full:
                examined.append(coarse.sweep_regions.astype(np.float64))
            self._motion.absorb(coarse.enlarge.inverse(np.concatenate(examined), dtype=np.float64))
        if coarse.sweep:
            self.last_examined[coarse.sweep] = index
        self.frame_index += 1

    def _report(self, coarse: CoarsePass, proposal: Proposal, packing: Packing, fine_ms: float) -> Dict[str, Any]:
        cfg = self.config
        k = len(coarse.sweep)
        fine_pixels = (k + packing.canvases) * self.canvas_area
        info: Dict[str, Any] = {
            "mode": self.mode,
            "rois": [list(p.src) for p in packing.placements],
            "roi_scales": [p.scale for p in packing.placements],
            "roi_sources": {s: n for s, n in packing.sources.items() if n},
            "rois_over_budget": packing.over_budget,
            "rois_in_sweep": proposal.in_sweep,
            "left_to_coarse": proposal.left_to_coarse,
            "sweep_tiles": [int(i) for i in coarse.sweep],
            "sweep_bound": self.sweep_bound,
            "candidates": int(len(coarse.candidates)),
            "tracks": self._followed,
            "images": 1 + k + packing.canvases,
            "fine_pixels": int(fine_pixels),
            "budget_pixels": int(cfg.max_fine_pixels),
            "budget_used": round(fine_pixels / cfg.max_fine_pixels, 3) if cfg.max_fine_pixels else 0.0,
            "fine_ms": round(fine_ms, 2),
        }
        if cfg.max_fine_ms > 0:
            info["budget_ms"] = cfg.max_fine_ms
        if self._motion is not None and self._motion.saturated:
            info["motion_saturated"] = True
        return info

    # -- helpers --------------------------------------------------------------------------------
    def _shrink(self, frame: np.ndarray) -> Tuple[np.ndarray, Placement]:
        """The frame shrunk to fit the model input (aspect kept), and the placement of that copy
        stretched back to the frame (its forward mapping takes the copy's pixels to the frame's).

        The copy lives in a buffer made once per frame size; a frame that already fits is used as is.
        """
        h, w = frame.shape[:2]
        cw, ch = self.input_size
        s = min(cw / w, ch / h)
        if s >= 1.0:
            return frame, Placement.region((0, 0, w, h))
        sw, sh = min(cw, max(1, int(round(w * s)))), min(ch, max(1, int(round(h * s))))
        if self._small is None or self._small.shape[:2] != (sh, sw):
            self._small = np.zeros((sh, sw, 3), np.uint8)
        resize_into(frame, Placement.stretch(w, h, sw, sh), self._small, _imports.cv2().INTER_AREA)
        return self._small, Placement.stretch(sw, sh, w, h)

    def _shelves(self, sizes: List[Tuple[int, int]], room: int) -> Tuple[geo.ShelfPacker, List[int], List[Any]]:
        """A packer of `room` canvases, the order to place the regions in and the spots found
        already: tallest first packs tightest; when that does not fit the budget, priority order
        decides which regions wait for a later frame (no spots yet)."""
        cw, ch = self.input_size
        gap = self.config.pack_gap
        tallest_first = sorted(range(len(sizes)), key=lambda i: (-sizes[i][1], -sizes[i][0], i))
        trial = geo.ShelfPacker(cw, ch, gap, max_canvases=room)
        spots = [trial.add(*sizes[i]) for i in tallest_first]
        if all(spot is not None for spot in spots):
            return trial, tallest_first, spots
        return geo.ShelfPacker(cw, ch, gap, max_canvases=room), list(range(len(sizes))), [None] * len(sizes)

    def _objects(self, boxes: np.ndarray, coarse_scale: float, w: int, h: int) -> Tuple[np.ndarray, np.ndarray, int]:
        """Regions and zoom levels around known objects; those the coarse pass sees at
        `fine_object_size` or more need none (their count is returned)."""
        cfg = self.config
        size = np.max(boxes[:, 2:] - boxes[:, :2], axis=1) if len(boxes) else np.zeros(0, np.float32)
        settled = 0
        if cfg.fine_object_size > 0:
            seen = size * coarse_scale >= cfg.fine_object_size
            settled = int(seen.sum())
            boxes, size = boxes[~seen], size[~seen]
        regions = geo.expand_boxes(boxes, w, h, margin=cfg.roi_margin, min_size=(cfg.roi_min_size, cfg.roi_min_size))
        return regions, geo.scale_levels(size, cfg.fine_object_size), settled

    def _regions(self, coarse: CoarsePass, w: int, h: int) -> Tuple[np.ndarray, np.ndarray, List[str], int]:
        """Regions (K, 4), their zoom levels (K,) and sources, in priority order, and how many
        tracks and candidates were left to the coarse pass."""
        groups, left = self._known(coarse, w, h)
        groups += self._zones(w, h)
        if self._motion is not None:
            groups += self._moving(coarse, [g for _, g, _ in groups if len(g)], w, h)
        groups = [g for g in groups if len(g[1])]
        if not groups:
            return np.zeros((0, 4), np.int32), np.zeros(0, np.int64), [], left
        regions = np.concatenate([g for _, g, _ in groups]).astype(np.int32)
        levels = np.concatenate([lv for _, _, lv in groups]).astype(np.int64)
        sources = [name for name, g, _ in groups for _ in range(len(g))]
        return regions, levels, sources, left

    def _known(self, coarse: CoarsePass, w: int, h: int) -> Tuple[List[Group], int]:
        """Regions around tracked objects (where the tracker expects them) and candidates, and
        how many of them the coarse pass sees large enough already."""
        coarse_scale = 1.0 / max(coarse.enlarge.scale_x, coarse.enlarge.scale_y)
        candidates = coarse.candidates
        groups: List[Group] = []
        left = 0
        boxes = self._followed_boxes()
        self._followed = len(boxes)
        if len(boxes):
            regions, levels, settled = self._objects(boxes, coarse_scale, w, h)
            groups.append(("track", regions, levels))
            left += settled
        if len(candidates):
            boxes = candidates.xyxy[np.argsort(-candidates.confidence, kind="stable")]
            regions, levels, settled = self._objects(boxes, coarse_scale, w, h)
            left += settled
            if groups and len(regions):
                # a candidate inside a tracked object's region, examined as finely, is examined already
                _, track_regions, track_levels = groups[0]
                dup = (geo.inside(regions, track_regions) & (track_levels[None, :] <= levels[:, None])).any(axis=1)
                regions, levels = regions[~dup], levels[~dup]
            groups.append(("candidate", regions, levels))
        return groups, left

    def _zones(self, w: int, h: int) -> List[Group]:
        """The configured zones, clipped to the frame and cut to model-input size."""
        cfg = self.config
        if not cfg.zones:
            return []
        cw, ch = self.input_size
        zones = geo.clip_regions(np.array(cfg.zones, np.int64), w, h)
        zones = zones[(zones[:, 2] > zones[:, 0]) & (zones[:, 3] > zones[:, 1])]
        parts = [geo.split_region(tuple(z), cw, ch, cfg.tile_overlap) for z in zones]
        if not parts:
            return []
        regions = np.concatenate(parts)
        return [("zone", regions, np.zeros(len(regions), np.int64))]

    def _moving(self, coarse: CoarsePass, earlier: List[np.ndarray], w: int, h: int) -> List[Group]:
        """Regions around moving pixels of the coarse pass's copy, but where earlier regions
        examine them already."""
        assert self._motion is not None
        cfg = self.config
        moving = coarse.enlarge.forward(self._motion(coarse.small))
        if len(moving) and earlier:
            # moving pixels at a tracked object or a candidate are examined already
            prior = np.concatenate(earlier).astype(np.float32)
            centres = (moving[:, :2] + moving[:, 2:]) / 2
            hit = (
                (centres[:, None, 0] >= prior[None, :, 0]) & (centres[:, None, 0] < prior[None, :, 2])
                & (centres[:, None, 1] >= prior[None, :, 1]) & (centres[:, None, 1] < prior[None, :, 3])
            ).any(axis=1)
            moving = moving[~hit]
        if not len(moving):
            return []
        # biggest movers first: a small blob is more often noise
        moving = moving[np.argsort(-geo.region_area(np.round(moving).astype(np.int64)), kind="stable")]
        regions = geo.expand_boxes(moving, w, h, margin=0.25, min_size=(cfg.roi_min_size, cfg.roi_min_size))
        return [("motion", regions, np.zeros(len(regions), np.int64))]

    def _pieces(self, regions: np.ndarray, levels: np.ndarray, sources: List[str]) -> Tuple[np.ndarray, np.ndarray, List[str]]:
        """Regions of one zoom level merged where their union has no more pixels than they have
        apart (and still fits one model input at that zoom), cut where larger than one input;
        priority order kept."""
        cfg = self.config
        cw, ch = self.input_size
        pieces: List[Tuple[int, np.ndarray, int]] = []  # (index of the first region, piece, level)
        for level in np.unique(levels):
            idx = np.flatnonzero(levels == level)
            f = 1 << int(level)
            merged, first = geo.merge_regions_indexed(regions[idx], cw * f, ch * f, gap=cfg.pack_gap * f, thrifty=True)
            for region, j in zip(merged, first):
                for part in geo.split_region(tuple(region), cw * f, ch * f, cfg.tile_overlap):
                    pieces.append((int(idx[j]), part, int(level)))
        pieces.sort(key=lambda piece: piece[0])
        return (
            np.array([p for _, p, _ in pieces], np.int32).reshape(-1, 4),
            np.array([lv for _, _, lv in pieces], np.int64),
            [sources[i] for i, _, _ in pieces],
        )

    def _followed_boxes(self) -> np.ndarray:
        """The boxes to look for, most confident first: the tracker's predictions of its tracks
        unseen for at most `track_ttl` frames and the last frame's detections it keeps no
        track of, at most `max_tracks` of them (the most recently seen, then the most confident)."""
        cfg = self.config
        boxes, scores, unseen, _ = self.tracker.predicted()
        recent = unseen <= cfg.track_ttl
        untracked, untracked_scores = self._untracked
        boxes = np.concatenate([boxes[recent], untracked])
        scores = np.concatenate([scores[recent], untracked_scores])
        unseen = np.concatenate([unseen[recent], np.zeros(len(untracked), np.int64)])
        kept = np.lexsort((-scores, unseen))[:cfg.max_tracks]  # by frames unseen, then score
        kept = kept[np.argsort(-scores[kept], kind="stable")]
        return boxes[kept]
