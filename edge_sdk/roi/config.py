"""Parameters of the `tiles` and `roi` modes (TOML table ``[roi]``), validated once.

The output score threshold is not one of them: it belongs to the model that runs (the
bundle's decoder setting, the pipeline's top-level ``score_threshold`` or the daemon's
``set score_threshold`` command), and the runtime's detector hands it to the strategy as
``RoiConfig.score_threshold``. A ``[roi]`` table that sets it is refused by the runtime's
config loader with that advice.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping

from edge_sdk.errors import ConfigError
from edge_sdk.roi.merge import METHODS, METRICS

MAX_SWEEP_LEVEL = 4
MODES = ("full", "tiles", "roi")  # the per-frame strategies (edge_sdk.roi.strategies.STRATEGIES)


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
    proposal_threshold: float = 0.05  # coarse-pass (and zoomed-out sweep) score that makes a candidate region
    sweep_tiles: int = 2  # sweep tiles per frame; every tile is seen within ceil(tiles / sweep_tiles) frames
    sweep_level: int = 1  # sweep tiles cover 2**sweep_level model inputs a side, zoomed out to one; what they suspect is examined at full resolution
    roi_margin: float = 0.25  # a region grows by this many box sizes on each side
    roi_min_size: int = 64  # smallest region side, in frame pixels
    fine_object_size: int = 64  # a known object larger than this (pixels) is examined zoomed out by powers of 2 to at most this size; one the coarse pass already sees this large gets no region. 0 = every region at full resolution
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
        for key, low in (("sweep_tiles", 0), ("sweep_level", 0), ("roi_min_size", 1), ("fine_object_size", 0), ("track_ttl", 0), ("max_tracks", 1), ("motion_width", 16), ("motion_threshold", 1), ("max_fine_pixels", 0), ("max_fine_inputs", 0), ("pack_gap", 0)):
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
        if self.sweep_level > MAX_SWEEP_LEVEL:
            raise bad("sweep_level", f"must be at most {MAX_SWEEP_LEVEL} (tiles of {2 ** MAX_SWEEP_LEVEL} model inputs a side), got {self.sweep_level}")
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
