"""The manifest's `input_stats`: statistics of the calibration images (per-channel mean and
standard deviation, brightness and saturation histograms, the spread of the set and up to
:data:`MAX_PROTOTYPES` of its images' histograms), read from a manifest trusting nothing and
compared with live statistics by Hellinger distance.

The builder measures it (edge_sdk.builder.input_stats) and the daemon watches live frames against
it (edge_sdk.daemon.drift); the manifest reads and checks it here, without either's code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Tuple, Type

import numpy as np

from edge_sdk.errors import EdgeSdkError

STATS_VERSION = 1
BINS = 32
SAMPLE_WIDTH = 160  # pixels; a 4K frame becomes 160×90 before anything is measured
MAX_PROTOTYPES = 64  # calibration images whose histograms the manifest keeps


def hellinger(p: np.ndarray, q: np.ndarray) -> float:
    """Hellinger distance between two histograms (normalized here): 0 the same, 1 disjoint."""
    sp, sq = float(p.sum()), float(q.sum())
    if sp <= 0 or sq <= 0:
        return 1.0
    bc = float(np.sqrt((p / sp) * (q / sq)).sum())
    return math.sqrt(max(0.0, 1.0 - min(bc, 1.0)))


@dataclass(frozen=True)
class InputStats:
    """The calibration images' statistics as the manifest records them (`input_stats`)."""

    images: int
    mean: Tuple[float, float, float]  # B, G, R on 0..255
    std: Tuple[float, float, float]
    brightness: np.ndarray  # normalized histogram, BINS bins over 0..255
    saturation: np.ndarray
    brightness_mean: float
    saturation_mean: float
    spread: Dict[str, float]  # each image's distance to its nearest other image: p50, p95, max
    prototypes: np.ndarray  # (P, 2, BINS): brightness and saturation histograms of calibration images

    @property
    def bins(self) -> int:
        return int(self.brightness.shape[0])

    def to_dict(self) -> Dict[str, Any]:
        return {
            "version": STATS_VERSION,
            "images": self.images,
            "sample_width": SAMPLE_WIDTH,
            "channels": "bgr",
            "mean": [round(v, 3) for v in self.mean],
            "std": [round(v, 3) for v in self.std],
            "brightness": {"bins": self.bins, "range": [0, 256], "hist": [round(float(v), 6) for v in self.brightness],
                           "mean": round(self.brightness_mean, 3)},
            "saturation": {"bins": self.bins, "range": [0, 256], "hist": [round(float(v), 6) for v in self.saturation],
                           "mean": round(self.saturation_mean, 3)},
            "spread": {k: round(v, 4) for k, v in self.spread.items()},
            "prototypes": {"brightness": [[round(float(v), 5) for v in p[0]] for p in self.prototypes],
                           "saturation": [[round(float(v), 5) for v in p[1]] for p in self.prototypes]},
        }

    @classmethod
    def from_dict(cls, data: Any, origin: str, error: Type[EdgeSdkError]) -> "InputStats":
        """Read `input_stats` from a manifest, trusting nothing: `error` naming the key otherwise."""
        def bad(key: str, what: str) -> EdgeSdkError:
            return error(f"{origin}: input_stats.{key} {what}; rebuild the bundle")

        if not isinstance(data, dict):
            raise error(f"{origin}: input_stats must be an object, got {type(data).__name__}; rebuild the bundle")
        if data.get("version") != STATS_VERSION:
            raise bad("version", f"must be {STATS_VERSION}, got {data.get('version')!r:.40}")
        images = data.get("images")
        if isinstance(images, bool) or not isinstance(images, int) or images < 1:
            raise bad("images", f"must be an image count >= 1, got {images!r:.40}")
        triples = {}
        for key in ("mean", "std"):
            value = data.get(key)
            if not isinstance(value, list) or len(value) != 3 or not all(_number(v, 0.0, 255.0) for v in value):
                raise bad(key, f"must be 3 numbers in 0..255 (B, G, R), got {value!r:.60}")
            triples[key] = tuple(float(v) for v in value)
        hists = {}
        for key in ("brightness", "saturation"):
            block = data.get(key)
            if not isinstance(block, dict):
                raise bad(key, "must be an object with bins, hist and mean")
            hist = block.get("hist")
            if not isinstance(hist, list) or len(hist) != BINS or not all(_number(v, 0.0, 1.0) for v in hist):
                raise bad(f"{key}.hist", f"must be {BINS} numbers in 0..1")
            total = sum(float(v) for v in hist)
            if not 0.99 <= total <= 1.01:
                raise bad(f"{key}.hist", f"must sum to 1, sums to {total:.4f}")
            if block.get("bins") != BINS:
                raise bad(f"{key}.bins", f"must be {BINS}, got {block.get('bins')!r:.20}")
            if not _number(block.get("mean"), 0.0, 255.0):
                raise bad(f"{key}.mean", f"must be a number in 0..255, got {block.get('mean')!r:.20}")
            hists[key] = (np.asarray(hist, np.float64) / total, float(block["mean"]))
        spread_in = data.get("spread", {})
        if not isinstance(spread_in, dict) or len(spread_in) > 8 \
                or not all(isinstance(k, str) and _number(v, 0.0, 1.0) for k, v in spread_in.items()):
            raise bad("spread", "must map a few names to distances in 0..1")
        protos = data.get("prototypes", {"brightness": [], "saturation": []})
        rows = []
        for key in ("brightness", "saturation"):
            lists = protos.get(key) if isinstance(protos, dict) else None
            if not isinstance(lists, list) or len(lists) > MAX_PROTOTYPES or not all(
                    isinstance(h, list) and len(h) == BINS and all(_number(v, 0.0, 1.0) for v in h) for h in lists):
                raise bad(f"prototypes.{key}", f"must be a list of at most {MAX_PROTOTYPES} histograms of {BINS} numbers in 0..1")
            rows.append(lists)
        if len(rows[0]) != len(rows[1]):
            raise bad("prototypes", "must hold as many brightness as saturation histograms")
        prototypes = np.asarray(rows, np.float64).reshape(2, len(rows[0]), BINS).transpose(1, 0, 2).copy()
        sums = prototypes.sum(axis=2, keepdims=True)
        if np.any(sums < 0.99) or np.any(sums > 1.01):
            raise bad("prototypes", "histograms must each sum to 1")
        return cls(images, triples["mean"], triples["std"], hists["brightness"][0], hists["saturation"][0],  # type: ignore[arg-type]
                   hists["brightness"][1], hists["saturation"][1], {k: float(v) for k, v in spread_in.items()},
                   prototypes / sums)

    def distances(self, brightness: np.ndarray, saturation: np.ndarray) -> Tuple[float, float]:
        """(brightness, saturation) distances of normalized histograms to the nearest of the
        average and the prototypes (nearest by the larger of the two)."""
        best = (hellinger(brightness, self.brightness), hellinger(saturation, self.saturation))
        if len(self.prototypes):
            bc_b = np.sqrt(self.prototypes[:, 0] * brightness).sum(axis=1)
            bc_s = np.sqrt(self.prototypes[:, 1] * saturation).sum(axis=1)
            d_b = np.sqrt(np.maximum(0.0, 1.0 - np.minimum(bc_b, 1.0)))
            d_s = np.sqrt(np.maximum(0.0, 1.0 - np.minimum(bc_s, 1.0)))
            i = int(np.argmin(np.maximum(d_b, d_s)))
            if max(d_b[i], d_s[i]) < max(best):
                best = (float(d_b[i]), float(d_s[i]))
        return best


def _number(value: Any, low: float, high: float) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and low <= value <= high)
