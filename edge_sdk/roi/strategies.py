"""Per-frame detection strategies: `full`, `tiles` and the coarse-to-fine `roi` scheduler.

Each strategy is a callable ``strategy(frame) -> StrategyResult`` built around a detector
callback ``detect(images: List[np.ndarray]) -> List[Detections]`` (boxes in each image's
pixels; see :mod:`edge_sdk.roi.detector`). The result carries the frame's detections and a
JSON-ready report of what the strategy did, meant for ``FrameResult.info``.

- :class:`FullFrame`: one pass on the frame shrunk to the model input.
- :class:`Tiles`: SAHI-style sliced inference at full resolution: model-input-sized tiles with
  overlap, run in batches, an optional extra full-frame pass, merged.
- :class:`RoiScheduler`: a coarse pass on the shrunk frame, then a fine pass at full resolution
  only where something is or may be: around coarse candidates, around tracked objects carried
  forward with their motion, around moving pixels, in configured zones, plus a few tiles of a
  sweep that visits the whole frame within a bounded number of frames. Fine-pass regions are
  packed into few model inputs, under a per-frame budget.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.detections import Detections, box_iou
from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.roi import geometry as geo
from edge_sdk.roi.merge import METHODS, METRICS, merge

DetectFn = Callable[[List[np.ndarray]], List[Detections]]
ROI_SOURCES = ("track", "candidate", "zone", "motion")  # in priority order


@dataclass
class RoiConfig:
    """Parameters of the `tiles` and `roi` modes (TOML table ``[roi]``).

    Defaults come from ``bench/bench_roi.py`` on synthetic 4K clips with the default CenterFace
    model at 640x384 (see the README's ROI section for the measured trade-offs).
    """

    # -- shared ---------------------------------------------------------------------------------
    score_threshold: float = 0.5  # detections below this are not reported
    tile_overlap: float = 0.2  # overlap of neighbouring full-resolution tiles (tiles mode, roi sweep)
    merge_method: str = "greedy_nmm"  # nms | nmm | greedy_nmm
    merge_metric: str = "ios"  # iou | ios
    merge_threshold: float = 0.5
    # -- tiles ----------------------------------------------------------------------------------
    full_frame_pass: bool = True  # tiles mode: add a pass on the whole shrunk frame (large objects)
    # -- roi ------------------------------------------------------------------------------------
    proposal_threshold: float = 0.2  # coarse-pass score that makes a candidate region
    sweep_tiles: int = 2  # full-resolution sweep tiles per frame; every tile is seen within ceil(tiles / sweep_tiles) frames
    roi_margin: float = 0.5  # a region grows by this many box sizes on each side
    roi_min_size: int = 64  # smallest region side, in frame pixels
    track_ttl: int = 8  # frames a lost object keeps its region
    track_iou: float = 0.1  # overlap linking a detection to a tracked object's predicted box
    max_tracks: int = 128  # objects tracked at once (most recent, then most confident, kept): bounds per-frame work
    motion: bool = True  # regions from background subtraction on a small copy
    motion_width: int = 480  # width of the small copy (height follows the frame's aspect)
    motion_threshold: int = 18  # grey-level difference that counts as motion
    motion_learning_rate: float = 0.05  # background update rate
    motion_max_fraction: float = 0.2  # more moving area than this (camera shake, light change) is ignored
    zones: List[List[int]] = field(default_factory=list)  # static regions [x0, y0, x1, y1] in frame pixels, always examined
    max_fine_pixels: int = 6 * 640 * 384  # fine-pass budget: model-input pixels per frame (sweep included)
    max_fine_ms: float = 0.0  # optional fine-pass budget in milliseconds, estimated from past frames; 0 = off
    max_fine_inputs: int = 12  # fine-pass model inputs per frame at most, whatever the model's input size
    pack_gap: int = 8  # pixels between crops packed into one model input

    def validate(self, origin: str = "roi") -> "RoiConfig":
        def bad(key: str, msg: str) -> ConfigError:
            return ConfigError(f"{origin}.{key} {msg}")

        for key in ("score_threshold", "proposal_threshold", "merge_threshold", "tile_overlap", "motion_learning_rate", "motion_max_fraction", "track_iou"):
            value = getattr(self, key)
            hi_open = key == "tile_overlap"
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= value < 1.0 if hi_open else 0.0 <= value <= 1.0):
                raise bad(key, f"must be a number in [0, 1{')' if hi_open else ']'}, got {value!r}")
        for key, low in (("sweep_tiles", 0), ("roi_min_size", 1), ("track_ttl", 0), ("max_tracks", 1), ("motion_width", 16), ("motion_threshold", 1), ("max_fine_pixels", 0), ("max_fine_inputs", 0), ("pack_gap", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise bad(key, f"must be an integer >= {low}, got {value!r}")
        for key in ("roi_margin", "max_fine_ms"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise bad(key, f"must be a number >= 0, got {value!r}")
        if self.merge_method not in METHODS:
            raise bad("merge_method", f"must be one of {', '.join(METHODS)}, got {self.merge_method!r}")
        if self.merge_metric not in METRICS:
            raise bad("merge_metric", f"must be one of {', '.join(METRICS)}, got {self.merge_metric!r}")
        if self.proposal_threshold > self.score_threshold:
            raise bad("proposal_threshold", f"({self.proposal_threshold}) must not exceed score_threshold ({self.score_threshold})")
        for key in ("full_frame_pass", "motion"):
            if not isinstance(getattr(self, key), bool):
                raise bad(key, f"must be true or false, got {getattr(self, key)!r}")
        if not isinstance(self.zones, (list, tuple)):
            raise bad("zones", f"must be a list of [x0, y0, x1, y1], got {self.zones!r}")
        for zone in self.zones:
            ok = isinstance(zone, (list, tuple)) and len(zone) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in zone)
            if not ok or zone[2] <= zone[0] or zone[3] <= zone[1] or min(zone) < 0:
                raise bad("zones", f"entries must be [x0, y0, x1, y1] integers with x1 > x0 >= 0 and y1 > y0 >= 0, got {zone!r}")
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "roi") -> "RoiConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{origin}: unknown key(s) {unknown}; known keys: {', '.join(sorted(known))}")
        return cls(**dict(data)).validate(origin)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


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
        parts = [geo.offset_detections(_above(d, cfg.score_threshold), x0, y0) for d, (x0, y0, _, _) in zip(found, tiles)]
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

    1. coarse pass: the whole frame shrunk to the model input; detections at or above
       `proposal_threshold` become candidate regions, those at or above `score_threshold` are
       kept as results (large, near objects);
    2. regions of interest, in priority order: tracked objects (where they were, moved on by
       their velocity), coarse candidates, configured zones, moving areas;
    3. sweep: `sweep_tiles` tiles of the full-resolution tile grid, round robin, so every part
       of the frame is examined at full resolution at least every ``ceil(tiles / sweep_tiles)``
       frames (:attr:`sweep_bound`);
    4. fine pass: sweep tiles go to the detector as they are; regions (merged where they
       overlap, cut where larger than a model input, dropped where a sweep tile already covers
       them) are cropped at full resolution and packed into as few model-input canvases as the
       budget allows (`max_fine_pixels`, and `max_fine_ms` when set); regions beyond the budget
       wait for a later frame (they are counted in the report);
    5. all detections go back to frame pixels and are merged; tracks are updated from them.

    The report in :attr:`StrategyResult.info` lists the regions examined, their sources, the
    sweep tiles and the budget used.
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
            self._grid = geo.slice_grid(frame_w, frame_h, cw, ch, self.config.tile_overlap, self.config.tile_overlap)
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

        # 1. coarse pass
        coarse = self.detect([frame])[0]
        candidates = _above(coarse, cfg.proposal_threshold)
        results = [_above(coarse, cfg.score_threshold)]

        # 3. sweep tiles (chosen first: regions they cover need no crop)
        k = min(cfg.sweep_tiles, len(grid))
        sweep = [(self._cursor + i) % len(grid) for i in range(k)]
        self._cursor = (self._cursor + k) % len(grid) if len(grid) else 0
        sweep_regions = grid[sweep] if sweep else np.zeros((0, 4), np.int32)

        # 2. regions of interest, in priority order
        regions, sources = self._regions(frame, candidates, w, h, index)
        dropped_covered = 0
        if len(regions):
            merged, first = geo.merge_regions_indexed(regions, cw, ch, gap=cfg.pack_gap)
            pieces: List[np.ndarray] = []
            piece_sources: List[str] = []
            for region, src in zip(merged, first):
                for part in geo.split_region(tuple(region), cw, ch, cfg.tile_overlap):
                    pieces.append(part)
                    piece_sources.append(sources[int(src)])
            regions = np.array(pieces, np.int32).reshape(-1, 4)
            sources = piece_sources
            covered = geo.covered_by(regions, sweep_regions)
            dropped_covered = int(covered.sum())
            regions = regions[~covered]
            sources = [s for s, c in zip(sources, covered) if not c]

        # 4. budget and packing
        budget_images = self.max_images
        if cfg.max_fine_ms > 0 and self._ms_per_image:
            budget_images = min(budget_images, max(k, int(cfg.max_fine_ms // self._ms_per_image)))
        room = max(0, budget_images - k)
        sizes = [(int(r[2] - r[0]), int(r[3] - r[1])) for r in regions]
        packer = geo.ShelfPacker(cw, ch, cfg.pack_gap, max_canvases=room)
        placements: List[geo.Placement] = []
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
            region = regions[i]
            placements.append(geo.Placement(tuple(int(v) for v in region), spot[1], spot[2], 1.0, spot[0]))
            used_sources[sources[i]] += 1
        n_canvases = packer.canvases
        canvases = self._canvases[:n_canvases]
        canvases[...] = 0
        for p in placements:
            x0, y0, x1, y1 = p.src
            canvases[p.canvas, p.y : p.y + (y1 - y0), p.x : p.x + (x1 - x0)] = frame[y0:y1, x0:x1]
        images = [frame[y0:y1, x0:x1] for x0, y0, x1, y1 in sweep_regions] + list(canvases)
        t0 = self.clock()
        found = self.detect(images) if images else []
        fine_ms = (self.clock() - t0) * 1000.0
        if images:
            per = fine_ms / len(images)
            self._ms_per_image = per if self._ms_per_image is None else 0.7 * self._ms_per_image + 0.3 * per

        for d, (x0, y0, _, _) in zip(found[:k], sweep_regions):
            results.append(geo.offset_detections(_above(d, cfg.score_threshold), x0, y0))
        for c, d in enumerate(found[k:]):
            d = _above(d, cfg.score_threshold)
            mine = [p for p in placements if p.canvas == c]
            owner = geo.assign_to_placements(d.xyxy, mine)
            for j, p in enumerate(mine):
                part = d[owner == j]
                if len(part):
                    results.append(geo.detections_to_frame(part, p))

        # 5. merge, track
        det = merge(Detections.merge(results), cfg.merge_method, cfg.merge_metric, cfg.merge_threshold)
        det = _clip_to_frame(det, w, h)
        self._update_tracks(det, index)
        if sweep:
            self.last_examined[sweep] = index
        self.frame_index += 1

        fine_pixels = len(images) * self.canvas_area
        info: Dict[str, Any] = {
            "mode": self.mode,
            "rois": [list(p.src) for p in placements],
            "roi_sources": {s: n for s, n in used_sources.items() if n},
            "rois_over_budget": over_budget,
            "rois_in_sweep": dropped_covered,
            "sweep_tiles": [int(i) for i in sweep],
            "sweep_bound": self.sweep_bound,
            "candidates": int(len(candidates)),
            "tracks": len(self._tracks),
            "images": 1 + len(images),
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
    def _regions(self, frame: np.ndarray, candidates: Detections, w: int, h: int, index: int) -> Tuple[np.ndarray, List[str]]:
        cfg = self.config
        cw, ch = self.input_size
        grow = dict(margin=cfg.roi_margin, min_size=(cfg.roi_min_size, cfg.roi_min_size))
        groups: List[Tuple[str, np.ndarray]] = []
        if self._tracks:
            order = sorted(self._tracks, key=lambda t: -t.score)
            boxes = np.array([t.predict(index) for t in order], np.float32)
            groups.append(("track", geo.expand_boxes(boxes, w, h, **grow)))
        if len(candidates):
            order_idx = np.argsort(-candidates.confidence, kind="stable")
            groups.append(("candidate", geo.expand_boxes(candidates.xyxy[order_idx], w, h, **grow)))
        if cfg.zones:
            zones = geo.clip_regions(np.array(cfg.zones, np.int64), w, h)
            zones = zones[(zones[:, 2] > zones[:, 0]) & (zones[:, 3] > zones[:, 1])]
            parts = [geo.split_region(tuple(z), cw, ch, cfg.tile_overlap) for z in zones]
            if parts:
                groups.append(("zone", np.concatenate(parts)))
        if self._motion is not None:
            moving = self._motion(frame)
            if len(moving) and groups:
                # moving pixels at a tracked object or a candidate are examined already
                earlier = np.concatenate([g for _, g in groups]).astype(np.float32)
                centres = (moving[:, :2] + moving[:, 2:]) / 2
                inside = (
                    (centres[:, None, 0] >= earlier[None, :, 0]) & (centres[:, None, 0] < earlier[None, :, 2])
                    & (centres[:, None, 1] >= earlier[None, :, 1]) & (centres[:, None, 1] < earlier[None, :, 3])
                ).any(axis=1)
                moving = moving[~inside]
            if len(moving):
                # biggest movers first: a small blob is more often noise
                moving = moving[np.argsort(-geo.region_area(np.round(moving).astype(np.int64)), kind="stable")]
                groups.append(("motion", geo.expand_boxes(moving, w, h, margin=0.25, min_size=(cfg.roi_min_size, cfg.roi_min_size))))
        if not groups:
            return np.zeros((0, 4), np.int32), []
        regions = np.concatenate([g for _, g in groups]).astype(np.int32)
        sources = [name for name, g in groups for _ in range(len(g))]
        return regions, sources

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
