"""Per-frame detection strategies: `full`, `tiles` and the coarse-to-fine `roi` scheduler.

Each strategy is a callable ``strategy(frame) -> StrategyResult`` built around a detector
callback ``detect(images: List[np.ndarray]) -> List[Detections]`` (boxes in each image's
pixels; the runtime's is :class:`edge_sdk.runtime.detector.BatchDetector`). The result carries the frame's detections and a
JSON-ready report of what the strategy did, meant for ``FrameResult.info``.

- :class:`FullFrame`: one pass on the frame shrunk to the model input.
- :class:`Tiles`: SAHI-style sliced inference at full resolution: model-input-sized tiles with
  overlap, run in batches, an optional extra full-frame pass, merged.
- :class:`RoiScheduler`: a coarse pass on the shrunk frame and a few tiles of a sweep that
  visits the whole frame within a bounded number of frames, then a fine pass at full
  resolution only where something is or may be: around candidates of the first two, around
  tracked objects carried forward with their motion, around moving pixels, in configured zones.
  Large objects are examined zoomed out; fine-pass regions are packed into few model inputs
  (a mosaic), under a per-frame budget.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.detections import Detections, box_iou
from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.geometry import Placement, move_detections, resize_into
from edge_sdk.roi import geometry as geo
from edge_sdk.roi.config import RoiConfig
from edge_sdk.roi.merge import merge

DetectFn = Callable[[List[np.ndarray]], List[Detections]]
ROI_SOURCES = ("track", "candidate", "zone", "motion")  # in priority order


@dataclass
class StrategyResult:
    """Detections of one frame in frame pixels, and what the strategy did (for FrameResult.info)."""

    detections: Detections
    info: Dict[str, Any] = field(default_factory=dict)


def _input_size(detect: Any, input_size: Optional[Tuple[int, int]]) -> Tuple[int, int]:
    size = input_size or getattr(detect, "input_size", None)
    if size is None:
        raise ConfigError("the strategy needs the model input size (width, height): pass input_size=")
    w, h = int(size[0]), int(size[1])
    if w <= 0 or h <= 0:
        raise ConfigError(f"model input size must be positive, got {size}")
    return w, h


def _check_frame(frame: np.ndarray) -> Tuple[int, int]:
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise SourceError(f"expected a BGR uint8 frame (H, W, 3), got shape {getattr(frame, 'shape', None)}")
    return frame.shape[1], frame.shape[0]


def _above(det: Detections, threshold: float) -> Detections:
    return det[det.confidence >= threshold]


def _clip_to_frame(det: Detections, w: int, h: int) -> Detections:
    det.xyxy[:, [0, 2]] = np.clip(det.xyxy[:, [0, 2]], 0, w)
    det.xyxy[:, [1, 3]] = np.clip(det.xyxy[:, [1, 3]], 0, h)
    return det


class FullFrame:
    """One pass on the whole frame, shrunk to the model input (the classic pipeline)."""

    mode = "full"

    def __init__(self, detect: DetectFn, config: Optional[RoiConfig] = None) -> None:
        self.detect = detect
        self.config = (config or RoiConfig()).validate()

    def __call__(self, frame: np.ndarray) -> StrategyResult:
        _check_frame(frame)
        det = _above(self.detect([frame])[0], self.config.score_threshold)
        return StrategyResult(det, {"mode": self.mode, "images": 1})

    def reset(self) -> None:
        """Nothing to forget: full-frame detection keeps no state between frames."""


class Tiles:
    """Sliced inference over the full-resolution frame, SAHI style.

    Tiles have the model's input size (no scaling: every pixel is seen at full resolution) and
    overlap by `config.tile_overlap`; they go to the detector as one list, which batches them.
    With `config.full_frame_pass`, the shrunk whole frame is added to catch objects larger than
    a tile. Detections are mapped back and merged by `config.merge_*`.
    """

    mode = "tiles"

    def __init__(self, detect: DetectFn, input_size: Optional[Tuple[int, int]] = None, config: Optional[RoiConfig] = None) -> None:
        self.detect = detect
        self.input_size = _input_size(detect, input_size)
        self.config = (config or RoiConfig()).validate()
        self._grid_key: Optional[Tuple[int, int]] = None
        self._grid = np.zeros((0, 4), np.int32)

    def grid(self, frame_w: int, frame_h: int) -> np.ndarray:
        if self._grid_key != (frame_w, frame_h):
            sw, sh = self.input_size
            self._grid = geo.slice_grid(frame_w, frame_h, sw, sh, self.config.tile_overlap, self.config.tile_overlap)
            self._grid_key = (frame_w, frame_h)
        return self._grid

    def __call__(self, frame: np.ndarray) -> StrategyResult:
        w, h = _check_frame(frame)
        cfg = self.config
        tiles = self.grid(w, h)
        images = [frame[y0:y1, x0:x1] for x0, y0, x1, y1 in tiles]
        if cfg.full_frame_pass:
            images.append(frame)
        found = self.detect(images)
        parts = [move_detections(_above(d, cfg.score_threshold), Placement.region(tile)) for d, tile in zip(found, tiles)]
        if cfg.full_frame_pass:
            parts.append(_above(found[-1], cfg.score_threshold))
        det = merge(Detections.merge(parts), cfg.merge_method, cfg.merge_metric, cfg.merge_threshold)
        return StrategyResult(_clip_to_frame(det, w, h), {"mode": self.mode, "tiles": int(len(tiles)), "images": len(images)})

    def reset(self) -> None:
        """Nothing to forget between frames (the tile grid only depends on the frame size)."""


class MotionDetector:
    """Moving regions from a running-average background on a small grey copy of the frame.

    Buffers are created for the first frame size and reused. Returns boxes in frame pixels;
    when more than `max_fraction` of the copy moves (camera shake, a light switched on) it
    returns nothing and sets `saturated`, since such motion says nothing about where to look.
    """

    def __init__(self, width: int = 480, threshold: int = 18, learning_rate: float = 0.05, max_fraction: float = 0.2) -> None:
        self.width = width
        self.threshold = threshold
        self.learning_rate = learning_rate
        self.max_fraction = max_fraction
        self.saturated = False
        self._key: Optional[Tuple[int, int]] = None
        self._cv2 = _imports.cv2()
        self._kernel = np.ones((3, 3), np.uint8)

    def reset(self) -> None:
        self._key = None

    def _allocate(self, w: int, h: int) -> None:
        mw = min(self.width, w)
        mh = max(1, int(round(h * mw / w)))
        self._small = np.zeros((mh, mw, 3), np.uint8)
        self._grey = np.zeros((mh, mw), np.uint8)
        self._background = np.zeros((mh, mw), np.float32)
        self._background_u8 = np.zeros((mh, mw), np.uint8)
        self._diff = np.zeros((mh, mw), np.uint8)
        self._mask = np.zeros((mh, mw), np.uint8)
        self._scale = (w / mw, h / mh)
        self._key = (w, h)

    def absorb(self, regions: np.ndarray) -> None:
        """Take the last image's pixels inside `regions` (xyxy in that image's pixels) into the
        background at once: motion there is explained (it was examined), and a moving object
        leaves no trail of stale background behind it."""
        if self._key is None:
            return
        sx, sy = self._scale
        mh, mw = self._grey.shape
        for x0, y0, x1, y1 in np.asarray(regions, np.float64).reshape(-1, 4):
            a0, b0 = max(0, int(math.ceil(x0 / sx))), max(0, int(math.ceil(y0 / sy)))
            a1, b1 = min(mw, int(x1 // sx)), min(mh, int(y1 // sy))
            if a1 > a0 and b1 > b0:
                self._background[b0:b1, a0:a1] = self._grey[b0:b1, a0:a1]

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        cv2 = self._cv2
        h, w = frame.shape[:2]
        first = self._key != (w, h)
        if first:
            self._allocate(w, h)
        mh, mw = self._grey.shape
        cv2.resize(frame, (mw, mh), dst=self._small, interpolation=cv2.INTER_AREA)
        cv2.cvtColor(self._small, cv2.COLOR_BGR2GRAY, dst=self._grey)
        self.saturated = False
        if first:
            self._background[...] = self._grey
            return np.zeros((0, 4), np.float32)
        cv2.convertScaleAbs(self._background, dst=self._background_u8)
        cv2.absdiff(self._grey, self._background_u8, dst=self._diff)
        cv2.accumulateWeighted(self._grey, self._background, self.learning_rate)
        cv2.threshold(self._diff, self.threshold, 255, cv2.THRESH_BINARY, dst=self._mask)
        moving = cv2.countNonZero(self._mask)
        if moving == 0:
            return np.zeros((0, 4), np.float32)
        if moving > self.max_fraction * mw * mh:
            self.saturated = True
            return np.zeros((0, 4), np.float32)
        cv2.dilate(self._mask, self._kernel, dst=self._mask, iterations=1)
        n, _labels, stats, _centroids = cv2.connectedComponentsWithStats(self._mask, connectivity=8)
        boxes = stats[1:n, :4].astype(np.float32)  # x, y, w, h on the small copy
        boxes[:, 2] += boxes[:, 0]
        boxes[:, 3] += boxes[:, 1]
        boxes[:, [0, 2]] *= self._scale[0]
        boxes[:, [1, 3]] *= self._scale[1]
        return boxes


@dataclass
class _Track:
    box: np.ndarray  # float32 (4,) frame pixels, as last seen
    velocity: np.ndarray  # float32 (2,) pixels per frame
    last_seen: int
    score: float

    def predict(self, frame_index: int) -> np.ndarray:
        dt = frame_index - self.last_seen
        return self.box + np.tile(self.velocity * dt, 2)


class RoiScheduler:
    """Coarse-to-fine detection: full-resolution recall at a fraction of full-resolution cost.

    Per frame:

    1. coarse pass and sweep, in one batch: the whole frame shrunk to the model input, and
       `sweep_tiles` tiles of a grid visited round robin, so every part of the frame is
       examined at least every ``ceil(tiles / sweep_tiles)`` frames (:attr:`sweep_bound`).
       Sweep tiles are ``2**sweep_level`` model inputs a side, zoomed out to one (level 0: full
       resolution). Detections at or above `score_threshold` are results; those at or above
       `proposal_threshold` (of the coarse pass, and of a zoomed-out sweep) are candidates;
    2. regions of interest, in priority order: tracked objects (where they were, moved on by
       their velocity), candidates, configured zones, moving areas (background subtraction on
       the coarse pass's copy). A known object larger than `fine_object_size` is examined zoomed
       out by a power of two, to at most that size; one the coarse pass already sees that large
       needs no region at all;
    3. fine pass: regions of one zoom level are merged where that saves pixels, cut where larger
       than a model input, dropped where a full-resolution sweep tile holds them, and packed
       into as few model-input canvases as the budget allows (`max_fine_pixels`, and
       `max_fine_ms` when set); regions beyond the budget wait for a later frame (they are
       counted in the report);
    4. all detections go back to frame pixels and are merged; tracks are updated from them;
       what the fine pass (and a full-resolution sweep) examined is taken into the motion
       background, so motion already looked at asks for no more regions.

    The report in :attr:`StrategyResult.info` lists the regions examined, their zoom scales and
    sources, the sweep tiles and the budget used.
    """

    mode = "roi"

    def __init__(
        self,
        detect: DetectFn,
        input_size: Optional[Tuple[int, int]] = None,
        config: Optional[RoiConfig] = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.detect = detect
        self.input_size = _input_size(detect, input_size)
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
        """Forget tracks, motion history, sweep position and timing (a new clip or camera)."""
        self.frame_index = 0
        self._tracks: List[_Track] = []
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
    def __call__(self, frame: np.ndarray) -> StrategyResult:
        w, h = _check_frame(frame)
        cfg = self.config
        grid = self.grid(w, h)
        index = self.frame_index
        cw, ch = self.input_size

        # 1. coarse pass and sweep tiles, in one batch. The coarse pass sees the frame shrunk once
        # (motion detection reuses the small copy); the sweep visits the tile grid round robin.
        small, enlarge = self._shrink(frame)
        k = min(cfg.sweep_tiles, len(grid))
        sweep = [(self._cursor + i) % len(grid) for i in range(k)]
        self._cursor = (self._cursor + k) % len(grid) if len(grid) else 0
        sweep_regions = grid[sweep] if sweep else np.zeros((0, 4), np.int32)
        # a tile is 2**level inputs a side unless the frame is smaller: each is zoomed out to fit
        sweep_places = [Placement.region(r, 0, 0, min(1.0, cw / (r[2] - r[0]), ch / (r[3] - r[1]))) for r in sweep_regions]
        sweep_full = all(p.scale == 1.0 for p in sweep_places)  # at full resolution (level 0, or a small frame)
        if sweep_full:
            sweep_images = [frame[y0:y1, x0:x1] for x0, y0, x1, y1 in sweep_regions]
        else:
            sweep_images = []
            for p, buffer in zip(sweep_places, self._sweep_canvases):
                tw, th = p.size
                geo.paste(frame, p, buffer)
                sweep_images.append(buffer[:th, :tw])
        t0 = self.clock()
        found = self.detect([small] + sweep_images)
        detect_ms = (self.clock() - t0) * 1000.0
        coarse = move_detections(found[0], enlarge, forward=True)
        swept = [move_detections(d, p) for d, p in zip(found[1:], sweep_places)]
        results = [_above(coarse, cfg.score_threshold)] + [_above(d, cfg.score_threshold) for d in swept]
        # what the coarse pass and a zoomed-out sweep only suspect is examined at full resolution
        candidates = _above(Detections.merge([coarse] + ([] if sweep_full else swept)), cfg.proposal_threshold)

        # 2. regions of interest, in priority order, each with its zoom level
        regions, levels, sources, left_to_coarse = self._regions(small, enlarge, candidates, w, h, index)
        regions, levels, sources = self._pieces(regions, levels, sources)
        # a full-resolution sweep tile examines what it holds already
        covered = geo.covered_by(regions, sweep_regions if sweep_full else np.zeros((0, 4), np.int32))
        dropped_covered = int(covered.sum())
        regions, levels = regions[~covered], levels[~covered]
        sources = [s for s, c in zip(sources, covered) if not c]

        # 3. budget and packing
        budget_images = self.max_images
        if cfg.max_fine_ms > 0 and self._ms_per_image:
            budget_images = min(budget_images, max(k, int(cfg.max_fine_ms // self._ms_per_image)))
        room = max(0, budget_images - k)
        unplaced = [Placement.region(r, 0, 0, 0.5 ** int(lv)) for r, lv in zip(regions, levels)]
        sizes = [p.size for p in unplaced]
        packer = geo.ShelfPacker(cw, ch, cfg.pack_gap, max_canvases=room)
        placements: List[Placement] = []
        used_sources: Dict[str, int] = {s: 0 for s in ROI_SOURCES}
        over_budget = 0
        # tallest first packs tightest; when that does not fit the budget, priority order decides
        # which regions wait for a later frame
        tallest_first = sorted(range(len(sizes)), key=lambda i: (-sizes[i][1], -sizes[i][0], i))
        trial = geo.ShelfPacker(cw, ch, cfg.pack_gap, max_canvases=room)
        spots = [trial.add(*sizes[i]) for i in tallest_first]
        if all(spot is not None for spot in spots):
            packer, order, fixed = trial, tallest_first, spots
        else:
            order, fixed = list(range(len(sizes))), [None] * len(sizes)
        for i, spot in zip(order, fixed):
            if spot is None:
                spot = packer.add(*sizes[i])
            if spot is None:
                over_budget += 1
                continue
            placements.append(Placement.region(unplaced[i].src, spot[1], spot[2], unplaced[i].scale, spot[0]))
            used_sources[sources[i]] += 1
        n_canvases = packer.canvases
        canvases = self._canvases[:n_canvases]
        canvases[...] = 0
        for p in placements:
            geo.paste(frame, p, canvases[p.canvas])
        t0 = self.clock()
        found = self.detect(list(canvases)) if n_canvases else []
        detect_ms += (self.clock() - t0) * 1000.0
        # the sweep shares a batch with the coarse pass: the fine pass's time (sweep included) is
        # its share of the frame's model time, by inputs
        per = detect_ms / (1 + k + n_canvases)
        self._ms_per_image = per if self._ms_per_image is None else 0.7 * self._ms_per_image + 0.3 * per
        fine_ms = per * (k + n_canvases)

        for c, d in enumerate(found):
            d = _above(d, cfg.score_threshold)
            mine = [p for p in placements if p.canvas == c]
            owner = geo.assign_to_placements(d.xyxy, mine)
            for j, p in enumerate(mine):
                part = d[owner == j]
                if len(part):
                    results.append(move_detections(part, p))

        # 4. merge, track; what was examined explains the motion in it
        det = merge(Detections.merge(results), cfg.merge_method, cfg.merge_metric, cfg.merge_threshold)
        det = _clip_to_frame(det, w, h)
        self._update_tracks(det, index)
        if self._motion is not None:
            examined = [np.array([p.src for p in placements], np.float64).reshape(-1, 4)]
            if sweep_full:
                examined.append(sweep_regions.astype(np.float64))
            self._motion.absorb(enlarge.inverse(np.concatenate(examined)))
        if sweep:
            self.last_examined[sweep] = index
        self.frame_index += 1

        fine_pixels = (k + n_canvases) * self.canvas_area
        info: Dict[str, Any] = {
            "mode": self.mode,
            "rois": [list(p.src) for p in placements],
            "roi_scales": [p.scale for p in placements],
            "roi_sources": {s: n for s, n in used_sources.items() if n},
            "rois_over_budget": over_budget,
            "rois_in_sweep": dropped_covered,
            "left_to_coarse": left_to_coarse,
            "sweep_tiles": [int(i) for i in sweep],
            "sweep_bound": self.sweep_bound,
            "candidates": int(len(candidates)),
            "tracks": len(self._tracks),
            "images": 1 + k + n_canvases,
            "fine_pixels": int(fine_pixels),
            "budget_pixels": int(cfg.max_fine_pixels),
            "budget_used": round(fine_pixels / cfg.max_fine_pixels, 3) if cfg.max_fine_pixels else 0.0,
            "fine_ms": round(fine_ms, 2),
        }
        if cfg.max_fine_ms > 0:
            info["budget_ms"] = cfg.max_fine_ms
        if self._motion is not None and self._motion.saturated:
            info["motion_saturated"] = True
        return StrategyResult(det, info)

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

    def _regions(
        self, small: np.ndarray, enlarge: Placement, candidates: Detections, w: int, h: int, index: int
    ) -> Tuple[np.ndarray, np.ndarray, List[str], int]:
        """Regions (K, 4), their zoom levels (K,) and sources, in priority order, and how many
        tracks and candidates were left to the coarse pass."""
        cfg = self.config
        cw, ch = self.input_size
        coarse_scale = 1.0 / max(enlarge.scale_x, enlarge.scale_y)
        groups: List[Tuple[str, np.ndarray, np.ndarray]] = []
        left = 0
        if self._tracks:
            order = sorted(self._tracks, key=lambda t: -t.score)
            boxes = np.array([t.predict(index) for t in order], np.float32)
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
        if cfg.zones:
            zones = geo.clip_regions(np.array(cfg.zones, np.int64), w, h)
            zones = zones[(zones[:, 2] > zones[:, 0]) & (zones[:, 3] > zones[:, 1])]
            parts = [geo.split_region(tuple(z), cw, ch, cfg.tile_overlap) for z in zones]
            if parts:
                regions = np.concatenate(parts)
                groups.append(("zone", regions, np.zeros(len(regions), np.int64)))
        if self._motion is not None:
            moving = enlarge.forward(self._motion(small))
            earlier = [g for _, g, _ in groups if len(g)]
            if len(moving) and earlier:
                # moving pixels at a tracked object or a candidate are examined already
                prior = np.concatenate(earlier).astype(np.float32)
                centres = (moving[:, :2] + moving[:, 2:]) / 2
                hit = (
                    (centres[:, None, 0] >= prior[None, :, 0]) & (centres[:, None, 0] < prior[None, :, 2])
                    & (centres[:, None, 1] >= prior[None, :, 1]) & (centres[:, None, 1] < prior[None, :, 3])
                ).any(axis=1)
                moving = moving[~hit]
            if len(moving):
                # biggest movers first: a small blob is more often noise
                moving = moving[np.argsort(-geo.region_area(np.round(moving).astype(np.int64)), kind="stable")]
                regions = geo.expand_boxes(moving, w, h, margin=0.25, min_size=(cfg.roi_min_size, cfg.roi_min_size))
                groups.append(("motion", regions, np.zeros(len(regions), np.int64)))
        groups = [g for g in groups if len(g[1])]
        if not groups:
            return np.zeros((0, 4), np.int32), np.zeros(0, np.int64), [], left
        regions = np.concatenate([g for _, g, _ in groups]).astype(np.int32)
        levels = np.concatenate([lv for _, _, lv in groups]).astype(np.int64)
        sources = [name for name, g, _ in groups for _ in range(len(g))]
        return regions, levels, sources, left

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

    def _update_tracks(self, det: Detections, index: int) -> None:
        cfg = self.config
        tracks = self._tracks
        unmatched = np.ones(len(det), dtype=bool)
        if tracks and len(det):
            predicted = np.array([t.predict(index) for t in tracks], np.float32)
            ious = box_iou(predicted, det.xyxy)
            for ti in np.argsort(-ious.max(axis=1), kind="stable"):
                row = np.where(unmatched, ious[ti], -1.0)
                j = int(np.argmax(row))
                if row[j] < cfg.track_iou:
                    continue
                t = tracks[ti]
                dt = max(1, index - t.last_seen)
                old_c = (t.box[:2] + t.box[2:]) / 2
                new_c = (det.xyxy[j, :2] + det.xyxy[j, 2:]) / 2
                t.velocity = (0.5 * t.velocity + 0.5 * (new_c - old_c) / dt).astype(np.float32)
                t.box = det.xyxy[j].copy()
                t.last_seen = index
                t.score = float(det.confidence[j])
                unmatched[j] = False
        for j in np.flatnonzero(unmatched):
            tracks.append(_Track(det.xyxy[j].copy(), np.zeros(2, np.float32), index, float(det.confidence[j])))
        tracks = [t for t in tracks if index - t.last_seen <= cfg.track_ttl]
        if len(tracks) > cfg.max_tracks:
            tracks = sorted(tracks, key=lambda t: (-t.last_seen, -t.score))[: cfg.max_tracks]
        self._tracks = tracks


STRATEGIES = {"full": FullFrame, "tiles": Tiles, "roi": RoiScheduler}


def make_strategy(mode: str, detect: DetectFn, input_size: Optional[Tuple[int, int]] = None, config: Optional[RoiConfig] = None) -> Any:
    """The strategy for `mode` ("full", "tiles" or "roi") around one detector callback."""
    if mode == "full":
        return FullFrame(detect, config)
    if mode == "tiles":
        return Tiles(detect, input_size, config)
    if mode == "roi":
        return RoiScheduler(detect, input_size, config)
    raise ConfigError(f"mode must be one of {', '.join(STRATEGIES)}, got {mode!r}")
