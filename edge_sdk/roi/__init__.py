"""Multi-scale detection on large frames: tiles at full resolution and the coarse-to-fine ROI scheduler.

- :mod:`edge_sdk.roi.geometry`: slicing, crops, packing and mapping boxes back (pure geometry);
- :mod:`edge_sdk.roi.merge`: NMS, NMM and greedy NMM with IoU or IoS, one `merge()` entry point;
- :mod:`edge_sdk.roi.config`: `RoiConfig`, the parameters of modes tiles and roi;
- :mod:`edge_sdk.roi.strategies`: `FullFrame`, `Tiles`, `RoiScheduler` around a detector callback,
  looked up by mode in `STRATEGIES` (`register_strategy` adds one);
- :mod:`edge_sdk.roi.scheduler`: the `roi` mode's `RoiScheduler` (coarse pass, propose, pack,
  fine pass), with :mod:`edge_sdk.roi.motion` and the stream's tracker (:mod:`edge_sdk.tracking`)
  telling it where to look.

Crops and canvases are placed with :class:`edge_sdk.geometry.Placement`, and what is found in
them is mapped back with :func:`edge_sdk.geometry.move_detections`.

The package is pure strategy and geometry: it imports nothing from :mod:`edge_sdk.runtime`.
The runtime plugs a model in (:mod:`edge_sdk.runtime.detectors.base`: `BatchDetector` is the
callback, `StrategyDetector` the per-frame detector of modes tiles and roi).
"""
from __future__ import annotations

from edge_sdk.roi.merge import merge
from edge_sdk.roi.config import RoiConfig
from edge_sdk.roi.strategies import FullFrame, RoiScheduler, StrategyResult, Tiles, make_strategy

__all__ = ["FullFrame", "RoiConfig", "RoiScheduler", "StrategyResult", "Tiles", "make_strategy", "merge"]
