"""The manifest's `input_stats` for a calibration folder: statistics of the calibration images,
the reference the daemon watches live frames against for calibration drift (edge_sdk.daemon.drift).

Each image is measured as :class:`~edge_sdk.frame_stats.FrameStats` says; the statistics average
the images' normalized histograms (each image counts once, whatever its size). A diverse
calibration set (a moon photo, grass, an office) has an average histogram that no single scene
matches, so up to :data:`~edge_sdk.input_stats.MAX_PROTOTYPES` of the images' own histograms are
kept too, chosen farthest-first so they span the set, with the spread of the set (each image's
distance to its nearest other image).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from edge_sdk.frame_stats import FrameStats
from edge_sdk.input_stats import MAX_PROTOTYPES, InputStats


def stats_of_frames(frames: Iterable[np.ndarray]) -> Optional[InputStats]:
    """The statistics of a set of BGR frames (each counts once); None when no frame has content."""
    fs = FrameStats()
    bright: List[np.ndarray] = []
    sat: List[np.ndarray] = []
    means: List[np.ndarray] = []
    squares: List[np.ndarray] = []
    vmeans: List[float] = []
    smeans: List[float] = []
    for frame in frames:
        if not fs.compute(frame):
            continue
        bright.append(fs.brightness.copy())
        sat.append(fs.saturation.copy())
        means.append(fs.mean.copy())
        squares.append(fs.std ** 2 + fs.mean ** 2)
        vmeans.append(fs.brightness_mean)
        smeans.append(fs.saturation_mean)
    if not bright:
        return None
    mean = np.mean(means, axis=0)
    std = np.sqrt(np.maximum(np.mean(squares, axis=0) - mean ** 2, 0.0))
    hists = np.stack([np.stack(bright), np.stack(sat)], axis=1)  # (N, 2, BINS)
    pair = _pair_distances(hists)
    np.fill_diagonal(pair, np.inf)
    nearest = pair.min(axis=1) if len(hists) > 1 else np.zeros(1)
    spread = {"p50": float(np.percentile(nearest, 50)), "p95": float(np.percentile(nearest, 95)),
              "max": float(nearest.max())}
    np.fill_diagonal(pair, 0.0)
    chosen = _farthest_first(pair, MAX_PROTOTYPES)
    return InputStats(len(hists), tuple(float(v) for v in mean), tuple(float(v) for v in std),  # type: ignore[arg-type]
                      hists[:, 0].mean(axis=0), hists[:, 1].mean(axis=0), float(np.mean(vmeans)),
                      float(np.mean(smeans)), spread, hists[chosen])


def _pair_distances(hists: np.ndarray) -> np.ndarray:
    """(N, N) distances (larger of brightness and saturation) between N (2, BINS) histograms."""
    roots = np.sqrt(hists)
    bc = np.einsum("icb,jcb->ijc", roots, roots)
    return np.sqrt(np.maximum(0.0, 1.0 - np.minimum(bc, 1.0))).max(axis=2)


def _farthest_first(pair: np.ndarray, k: int) -> List[int]:
    """Up to `k` indices spanning the set: start with the first image, then repeatedly the one
    farthest from all chosen (deterministic)."""
    n = pair.shape[0]
    chosen = [0]
    nearest = pair[0].copy()
    while len(chosen) < min(k, n):
        i = int(np.argmax(nearest))
        if nearest[i] <= 0:
            break  # the rest are duplicates of chosen images
        chosen.append(i)
        nearest = np.minimum(nearest, pair[i])
    return chosen


def input_stats(paths: Sequence[Path]) -> Optional[Dict[str, Any]]:
    """The manifest's `input_stats` for the calibration images at `paths` (read as the runtime
    reads image files); None when none of them has content."""
    from edge_sdk.preprocess import load_image

    stats = stats_of_frames(load_image(str(p)) for p in paths)
    return stats.to_dict() if stats is not None else None
