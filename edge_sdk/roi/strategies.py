"""Per-frame detection strategies: `full`, `tiles` and the coarse-to-fine `roi` scheduler.

Each strategy is a callable ``strategy(frame) -> StrategyResult`` built around a detector
callback ``detect(images: List[np.ndarray]) -> List[Detections]`` (boxes in each image's
pixels; the runtime's is :class:`edge_sdk.runtime.detectors.base.BatchDetector`). The result carries the frame's detections and a
JSON-ready report of what the strategy did, meant for ``FrameResult.info``.

- :class:`FullFrame`: one pass on the frame shrunk to the model input.
- :class:`Tiles`: SAHI-style sliced inference at full resolution: model-input-sized tiles with
  overlap, run in batches, an optional extra full-frame pass, merged.
- :class:`RoiScheduler`: a coarse pass on the shrunk frame and a few tiles of a sweep that
  visits the whole frame within a bounded number of frames, then a fine pass at full
  resolution only where something is or may be: around candidates of the first two, around
  tracked objects where the stream's tracker expects them, around moving pixels, in configured zones.
  Large objects are examined zoomed out; fine-pass regions are packed into few model inputs
  (a mosaic), under a per-frame budget.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError
from edge_sdk.geometry import Placement, move_detections
from edge_sdk.roi import geometry as geo
from edge_sdk.roi.base import DetectFn, StrategyResult, above, check_frame, clip_to_frame, model_input_size
from edge_sdk.roi.config import RoiConfig
from edge_sdk.roi.merge import merge
from edge_sdk.roi.motion import MotionDetector
from edge_sdk.roi.scheduler import ROI_SOURCES, RoiScheduler

__all__ = ["DetectFn", "FullFrame", "MotionDetector", "ROI_SOURCES", "RoiConfig", "RoiScheduler", "STRATEGIES",
           "StrategyResult", "Tiles", "make_strategy", "register_strategy"]


class FullFrame:
    """One pass on the whole frame, shrunk to the model input (the classic pipeline)."""

    mode = "full"
    follows_tracks = False

    def __init__(self, detect: DetectFn, config: Optional[RoiConfig] = None, input_size: Optional[Tuple[int, int]] = None) -> None:
        """`input_size` is not needed: the detector shrinks the whole frame to its input itself."""
        self.detect = detect
        self.config = (config or RoiConfig()).validate()

    def __call__(self, frame: np.ndarray) -> StrategyResult:
        check_frame(frame)
        det = above(self.detect([frame])[0], self.config.score_threshold)
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
    follows_tracks = False

    def __init__(self, detect: DetectFn, input_size: Optional[Tuple[int, int]] = None, config: Optional[RoiConfig] = None) -> None:
        self.detect = detect
        self.input_size = model_input_size(detect, input_size)
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
        w, h = check_frame(frame)
        cfg = self.config
        tiles = self.grid(w, h)
        images = [frame[y0:y1, x0:x1] for x0, y0, x1, y1 in tiles]
        if cfg.full_frame_pass:
            images.append(frame)
        found = self.detect(images)
        parts = [move_detections(above(d, cfg.score_threshold), Placement.region(tile)) for d, tile in zip(found, tiles)]
        if cfg.full_frame_pass:
            parts.append(above(found[-1], cfg.score_threshold))
        det = merge(Detections.merge(parts), cfg.merge_method, cfg.merge_metric, cfg.merge_threshold)
        return StrategyResult(clip_to_frame(det, w, h), {"mode": self.mode, "tiles": int(len(tiles)), "images": len(images)})

    def reset(self) -> None:
        """Nothing to forget between frames (the tile grid only depends on the frame size)."""


# mode -> strategy class, constructed as cls(detect, input_size=..., config=...)
STRATEGIES: Dict[str, Type[Any]] = {"full": FullFrame, "tiles": Tiles, "roi": RoiScheduler}


def register_strategy(name: str, cls: Type[Any]) -> None:
    """Make `cls` the strategy of mode `name` for :func:`make_strategy`: a callable
    ``strategy(frame) -> StrategyResult`` with ``reset()``, constructed as
    ``cls(detect, input_size=..., config=...)``. One whose class says ``follows_tracks = True``
    is called ``strategy(frame, tracker=...)`` with the stream's ByteTracker (or None), updates
    it itself and returns the detections with their track ids (as RoiScheduler does). A name
    taken by another class is refused."""
    if STRATEGIES.get(name, cls) is not cls:
        raise ConfigError(f"strategy {name!r} is registered already ({STRATEGIES[name].__name__}); pick another name")
    STRATEGIES[name] = cls


def make_strategy(mode: str, detect: DetectFn, input_size: Optional[Tuple[int, int]] = None, config: Optional[RoiConfig] = None) -> Any:
    """The strategy for `mode` (a name in STRATEGIES: "full", "tiles", "roi" or a registered one)
    around one detector callback."""
    cls = STRATEGIES.get(mode)
    if cls is None:
        raise ConfigError(f"mode must be one of {', '.join(STRATEGIES)}, got {mode!r}")
    return cls(detect, input_size=input_size, config=config)
