"""Parameters of the `tiles` and `roi` modes (TOML table ``[roi]``), validated once.

The output score threshold is not one of them: it belongs to the model that runs (the
bundle's decoder setting, the pipeline's top-level ``score_threshold`` or the daemon's
``set score_threshold`` command), and the runtime's detector hands it to the strategy as
``RoiConfig.score_threshold``. A ``[roi]`` table that sets it is refused by the runtime's
config loader with that advice.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping

from edge_sdk.config_schema import Bounds, check_fields, from_table, key
from edge_sdk.errors import ConfigError
from edge_sdk.roi.merge import METHODS, METRICS

MAX_SWEEP_LEVEL = 4
MAX_PIXELS = 65536  # a frame coordinate or size, in pixels
MODES = ("full", "tiles", "roi")  # the per-frame strategies (edge_sdk.roi.strategies.STRATEGIES)


@dataclass
class RoiConfig:
    """Parameters of the `tiles` and `roi` modes (TOML table ``[roi]``).

    Defaults come from ``bench/bench_roi.py`` on synthetic 4K clips with the default CenterFace
    model at 640x384 (see the README's ROI section for the measured trade-offs).
    """

    # -- shared ---------------------------------------------------------------------------------
    score_threshold: float = key(0.5, low=0, high=1)  # detections below this are not reported
    tile_overlap: float = key(0.2, low=0, high=1, high_open=True)  # overlap of neighbouring full-resolution tiles (tiles mode, roi sweep)
    merge_method: str = key("greedy_nmm", choices=METHODS)  # how overlapping boxes of neighbouring tiles are merged
    merge_metric: str = key("ios", choices=METRICS)  # overlap measure: over the union, or over the smaller box
    merge_threshold: float = key(0.5, low=0, high=1)
    # -- tiles ----------------------------------------------------------------------------------
    full_frame_pass: bool = True  # tiles mode: add a pass on the whole shrunk frame (large objects)
    # -- roi ------------------------------------------------------------------------------------
    proposal_threshold: float = key(0.05, low=0, high=1)  # coarse-pass (and zoomed-out sweep) score that makes a candidate region
    sweep_tiles: int = key(2, low=0, high=1024)  # sweep tiles per frame; every tile is seen within ceil(tiles / sweep_tiles) frames
    sweep_level: int = key(1, low=0, high=MAX_SWEEP_LEVEL)  # sweep tiles cover 2**sweep_level model inputs a side, zoomed out to one; what they suspect is examined at full resolution
    roi_margin: float = key(0.25, low=0, high=100)  # a region grows by this many box sizes on each side
    roi_min_size: int = key(64, low=1, high=MAX_PIXELS)  # smallest region side, in frame pixels
    fine_object_size: int = key(64, low=0, high=MAX_PIXELS)  # a known object larger than this (pixels) is examined zoomed out by powers of 2 to at most this size; one the coarse pass already sees this large gets no region. 0 = every region at full resolution
    track_ttl: int = key(8, low=0, high=100000)  # frames a lost track keeps its region (within the [tracking] buffer)
    max_tracks: int = key(128, low=1, high=100000)  # tracks given regions per frame (most recently seen, then most confident): bounds per-frame work
    motion: bool = True  # regions from background subtraction on a small copy
    motion_width: int = key(480, low=16, high=8192)  # width of the small copy (height follows the frame's aspect)
    motion_threshold: int = key(18, low=1, high=255)  # grey-level difference that counts as motion
    motion_learning_rate: float = key(0.05, low=0, high=1)  # background update rate
    motion_max_fraction: float = key(0.2, low=0, high=1)  # more moving area than this (camera shake, light change) is ignored
    zones: List[List[int]] = key(factory=list, max_len=256, item=Bounds(max_len=4, item=Bounds(low=0, high=MAX_PIXELS)))  # static regions [x0, y0, x1, y1] in frame pixels, always examined
    max_fine_pixels: int = key(6 * 640 * 384, low=0, high=2 ** 32)  # fine-pass budget: model-input pixels per frame (sweep included)
    max_fine_ms: float = key(0.0, low=0, high=60000)  # optional fine-pass budget in milliseconds, estimated from past frames; 0 = off
    max_fine_inputs: int = key(12, low=0, high=4096)  # fine-pass model inputs per frame at most, whatever the model's input size
    pack_gap: int = key(8, low=0, high=4096)  # pixels between crops packed into one model input

    def validate(self, origin: str = "config", path: str = "roi") -> "RoiConfig":
        """Each key against its type and bounds (edge_sdk.config_schema), then what keys say together."""
        check_fields(self, origin, path)

        def bad(key: str, msg: str) -> ConfigError:
            return ConfigError(f"{origin}: {path}.{key} {msg}")

        if self.proposal_threshold > self.score_threshold:
            raise bad("proposal_threshold", f"({self.proposal_threshold}) must not exceed score_threshold ({self.score_threshold})")
        for zone in self.zones:
            if len(zone) != 4 or zone[2] <= zone[0] or zone[3] <= zone[1]:
                raise bad("zones", f"entries must be [x0, y0, x1, y1] integers with x1 > x0 >= 0 and y1 > y0 >= 0, got {zone!r}")
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "config") -> "RoiConfig":
        return from_table(cls, data, origin, "roi").validate(origin)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)
