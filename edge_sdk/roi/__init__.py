"""Multi-scale detection on large frames: tiles at full resolution and the coarse-to-fine ROI scheduler.

- :mod:`edge_sdk.roi.geometry`: slicing, crops, packing and mapping boxes back (pure geometry);
- :mod:`edge_sdk.roi.merge`: NMS, NMM and greedy NMM with IoU or IoS, one `merge()` entry point;
- :mod:`edge_sdk.roi.strategies`: `FullFrame`, `Tiles`, `RoiScheduler` around a detector callback;
- :mod:`edge_sdk.roi.detector`: the callback built from a backend, the preprocessor and a decoder;
- :mod:`edge_sdk.roi.runtime`: the adapter the pipeline uses for `--mode tiles|roi`.
"""
from __future__ import annotations

from edge_sdk.roi.merge import merge
from edge_sdk.roi.strategies import FullFrame, RoiConfig, RoiScheduler, StrategyResult, Tiles, make_strategy

__all__ = ["FullFrame", "RoiConfig", "RoiScheduler", "StrategyResult", "Tiles", "make_strategy", "merge"]
