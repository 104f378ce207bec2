"""Calibration drift: is the live input still like the images the INT8 ranges were calibrated on?

INT8 ranges hold for inputs like the calibration set; a camera at night, a colour cast or a new
scene moves activations outside them and accuracy falls without any error. The builder records
statistics of its calibration images in the manifest (`input_stats`, :func:`input_stats`; the
record itself, :class:`~edge_sdk.input_stats.InputStats`, lives beside the manifest); the
daemon keeps the same statistics over live frames (:class:`DriftMonitor`) and raises the
`calibration_drift` alert when they leave the calibrated range.

What is measured, on a copy downscaled to :data:`SAMPLE_WIDTH` pixels wide (area interpolation):
per-channel mean and standard deviation (B, G, R on 0..255) and two histograms of
:data:`BINS` bins, brightness (HSV value, max(B, G, R)) and saturation (HSV saturation). The
calibration statistics average the images' normalized histograms (each image counts once, whatever
its size); the live ones average the last `window` samples.

Distances are Hellinger distances between histograms, ``sqrt(1 - sum(sqrt(p * q)))`` (0: the
same, 1: no bin in common); the distance between two inputs is the larger of the brightness and
the saturation distance. A diverse calibration set (a moon photo, grass, an office) has an
average histogram that no single scene matches (one scene of the default set is 0.3 to 0.6 from
it), so the live input is compared with the calibration *images* too: the drift distance is its
distance to the nearest of the average and up to :data:`MAX_PROTOTYPES` calibration images
(chosen farthest-first, so they span the set). A camera watching one of the calibrated scenes is
close to that scene's images; the same scene at night, or under a strong colour cast, is close
to none. Measured on the default set (`tests/test_drift.py`): in-range scenes 0.02 to 0.23,
the same scenes at a quarter of their brightness 0.48 to 0.75.

    monitor = DriftMonitor(lambda: bundle.input_stats, threshold=0.35, sample_s=1.0, window=60)
    event = monitor.observe(frame)      # every frame; samples one frame per `sample_s`
    if event is not None: ...           # raised or cleared, with the numbers
    monitor.snapshot()                  # the telemetry's `drift` block

Cost: a frame that is not sampled costs one clock read and allocates nothing. A sampled frame
(one a second by default) is downscaled into buffers reused from sample to sample.

Decisions: none before the window holds `window` samples. Raised when the distance is above
`threshold`, cleared when it falls to `CLEAR_RATIO * threshold` or below (no flapping around the
limit). The window is the sustain: a shift must persist for a good part of it to move the average
(with a disjoint histogram, about a quarter of the window for the default 0.35).

A paused or black source raises nothing, by design: no frames means no samples (and no decision),
and a near-constant frame — a black, grey or blue "no signal" picture, brightness standard
deviation below :data:`NO_CONTENT_STD` — is skipped as "no content" (counted in `skipped`),
since it says nothing of the scene the model will see when the picture returns. After a gap of
more than :data:`STALL_S` (or three sample periods) without a sample — a source that stalled or
was paused — the old samples are dropped and a new window starts.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.input_stats import BINS, MAX_PROTOTYPES, SAMPLE_WIDTH, InputStats

NO_CONTENT_STD = 3.0  # brightness std (0..255) below which a frame is "no content"
CLEAR_RATIO = 0.9  # an open alert clears at or below this share of the threshold
STALL_S = 60.0  # seconds without a sample after which the window starts again
CHANNELS = ("b", "g", "r")


class FrameStats:
    """Statistics of one frame, into buffers reused from call to call (sized on the first frame
    and again only when the frame size changes)."""

    def __init__(self, bins: int = BINS, width: int = SAMPLE_WIDTH) -> None:
        self.bins = int(bins)
        self.width = int(width)
        self.brightness = np.zeros(self.bins, np.float64)  # normalized histogram
        self.saturation = np.zeros(self.bins, np.float64)
        self.mean = np.zeros(3, np.float64)  # B, G, R
        self.std = np.zeros(3, np.float64)
        self.brightness_mean = 0.0
        self.brightness_std = 0.0
        self.saturation_mean = 0.0
        self._shape: Optional[Tuple[int, ...]] = None
        self._small: Optional[np.ndarray] = None
        self._hsv: Optional[np.ndarray] = None

    def compute(self, frame: np.ndarray) -> bool:
        """Measure `frame` (BGR uint8, H×W×3); False when it is not such a frame or carries no
        content (brightness std below NO_CONTENT_STD), and the statistics are then not updated."""
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8 \
                or frame.shape[0] < 1 or frame.shape[1] < 1:
            return False
        cv2 = _imports.cv2()
        if frame.shape != self._shape:
            h, w = frame.shape[:2]
            sw = min(self.width, w)
            sh = max(1, int(round(h * sw / w)))
            self._small = np.empty((sh, sw, 3), np.uint8)
            self._hsv = np.empty((sh, sw, 3), np.uint8)
            self._shape = frame.shape
        small = cv2.resize(frame, (self._small.shape[1], self._small.shape[0]), dst=self._small,
                           interpolation=cv2.INTER_AREA)
        hsv = cv2.cvtColor(small, cv2.COLOR_BGR2HSV, dst=self._hsv)
        hsv_mean, hsv_std = cv2.meanStdDev(hsv)
        if float(hsv_std[2, 0]) < NO_CONTENT_STD:
            return False
        mean, std = cv2.meanStdDev(small)
        self.mean[:] = mean[:, 0]
        self.std[:] = std[:, 0]
        self.brightness_mean = float(hsv_mean[2, 0])
        self.brightness_std = float(hsv_std[2, 0])
        self.saturation_mean = float(hsv_mean[1, 0])
        for out, channel in ((self.saturation, 1), (self.brightness, 2)):
            hist = cv2.calcHist([hsv], [channel], None, [self.bins], [0, 256])
            out[:] = hist[:, 0]
            out /= max(float(out.sum()), 1.0)
        return True


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


class DriftEvent(NamedTuple):
    """A change of the `calibration_drift` condition, with the numbers behind it."""

    active: bool
    message: str
    value: Optional[float]
    threshold: float


class DriftMonitor:
    """Live statistics against the running bundle's `input_stats`; see the module docstring.

    `reference()` returns the running bundle's InputStats or None (a bundle that records none:
    nothing is measured); a new reference (a reload) starts a new window. `observe` runs on the
    frame loop; `snapshot` may be called from another thread.
    """

    def __init__(self, reference: Callable[[], Optional[InputStats]], threshold: float = 0.35,
                 sample_s: float = 1.0, window: int = 60, clock: Callable[[], float] = time.monotonic) -> None:
        self._reference = reference
        self._clock = clock
        self.stats = FrameStats()
        self.alarmed = False
        self.skipped = 0  # sampled frames with no content
        self.sampled = 0
        self._latest: Optional[Dict[str, Any]] = None
        self.configure(threshold, sample_s, window)

    def configure(self, threshold: float, sample_s: float, window: int) -> None:
        """New settings (a re-read config); the window starts again, an open alert stays open
        until a full window decides (or clears at once when monitoring is switched off). The same
        settings again change nothing."""
        settings = (float(threshold), float(sample_s), int(window))
        if settings == getattr(self, "_settings", None):
            return
        self._settings = settings
        self.threshold = float(threshold)
        self.sample_s = float(sample_s)
        self.window = int(window)
        self._ring = np.zeros((max(self.window, 1), 2, BINS), np.float64)
        self._means = np.zeros((max(self.window, 1), 2), np.float64)  # brightness, saturation means
        self._count = 0
        self._next = 0
        self._ref: Optional[InputStats] = None
        self._due = -math.inf
        self._last_sample = -math.inf

    def observe(self, frame: Optional[np.ndarray]) -> Optional[DriftEvent]:
        """Sample `frame` when one is due; a raised or cleared condition, or None."""
        if self.threshold <= 0:
            if self.alarmed:
                self.alarmed = False
                return DriftEvent(False, "calibration drift monitoring switched off", None, self.threshold)
            return None
        now = self._clock()
        if now < self._due or frame is None:
            return None
        self._due = now + self.sample_s
        ref = self._reference()
        if ref is None:
            self._latest = None
            return None
        if ref is not self._ref or now - self._last_sample > max(STALL_S, 3 * self.sample_s):
            self._ref, self._count, self._next = ref, 0, 0  # a new bundle, or a stalled source: start again
        if not self.stats.compute(frame):
            self.skipped += 1
            self._publish(ref, None)
            return None
        self._last_sample = now
        self.sampled += 1
        i = self._next
        self._ring[i, 0] = self.stats.brightness
        self._ring[i, 1] = self.stats.saturation
        self._means[i] = (self.stats.brightness_mean, self.stats.saturation_mean)
        self._next = (i + 1) % self.window
        self._count = min(self._count + 1, self.window)
        live = self._ring[:self._count].mean(axis=0)
        dist_b, dist_s = ref.distances(live[0], live[1])
        distance = max(dist_b, dist_s)
        means = self._means[:self._count].mean(axis=0)
        figures = {"distance": round(distance, 4), "brightness": round(dist_b, 4), "saturation": round(dist_s, 4),
                   "brightness_mean": round(float(means[0]), 1), "calibrated_brightness_mean": round(ref.brightness_mean, 1),
                   "saturation_mean": round(float(means[1]), 1), "calibrated_saturation_mean": round(ref.saturation_mean, 1)}
        event = None
        if self._count < self.window:
            pass  # no decision before the window is full
        elif not self.alarmed and distance > self.threshold:
            self.alarmed = True
            event = DriftEvent(True, self._message(figures, "left the calibrated range", ">"), distance, self.threshold)
        elif self.alarmed and distance <= CLEAR_RATIO * self.threshold:
            self.alarmed = False
            event = DriftEvent(False, self._message(figures, "is back within the calibrated range", "<="),
                               distance, self.threshold)
        self._publish(ref, figures)
        return event

    def _message(self, f: Dict[str, Any], what: str, op: str) -> str:
        limit = self.threshold if op == ">" else CLEAR_RATIO * self.threshold
        text = (f"live input {what}: histogram distance {f['distance']:.3f} {op} {limit:.3g} (brightness {f['brightness']:.3f}, "
                f"saturation {f['saturation']:.3f}) over the last {self._count} samples; mean brightness "
                f"{f['brightness_mean']:.0f} vs {f['calibrated_brightness_mean']:.0f} calibrated, mean saturation "
                f"{f['saturation_mean']:.0f} vs {f['calibrated_saturation_mean']:.0f}")
        if op == ">":
            text += ("; INT8 ranges may no longer fit: record images of the scene as it is now "
                     "(apps/calibration_recorder) and rebuild the bundle with them")
        return text

    def _publish(self, ref: InputStats, figures: Optional[Dict[str, Any]]) -> None:
        block: Dict[str, Any] = dict(self._latest or {}) if figures is None else dict(figures)
        block.update({"threshold": self.threshold, "samples": self._count, "window": self.window,
                      "skipped": self.skipped, "alarmed": self.alarmed})
        block.setdefault("distance", None)
        self._latest = block  # one reference assignment: the reporter's thread reads a whole dict

    def snapshot(self) -> Optional[Dict[str, Any]]:
        """The telemetry's `drift` block, or None before anything was measured (no frame yet, or a
        bundle without `input_stats`, or monitoring off)."""
        if self.threshold <= 0:
            return None
        return self._latest
