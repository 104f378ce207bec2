"""Calibration drift: is the live input still like the images the INT8 ranges were calibrated on?

INT8 ranges hold for inputs like the calibration set; a camera at night, a colour cast or a new
scene moves activations outside them and accuracy falls without any error. The builder records
statistics of its calibration images in the manifest (`input_stats`,
:func:`edge_sdk.builder.input_stats.input_stats`; the record itself,
:class:`~edge_sdk.input_stats.InputStats`, lives beside the manifest); the daemon keeps the same
statistics over live frames (:class:`DriftMonitor`, measured by
:class:`~edge_sdk.frame_stats.FrameStats`) and raises the `calibration_drift` alert when they
leave the calibrated range. The live statistics average the last `window` samples.

Distances are Hellinger distances between histograms, ``sqrt(1 - sum(sqrt(p * q)))`` (0: the
same, 1: no bin in common); the distance between two inputs is the larger of the brightness and
the saturation distance. A diverse calibration set (a moon photo, grass, an office) has an
average histogram that no single scene matches (one scene of the default set is 0.3 to 0.6 from
it), so the live input is compared with the calibration *images* too: the drift distance is its
distance to the nearest of the average and up to :data:`~edge_sdk.input_stats.MAX_PROTOTYPES`
calibration images (chosen farthest-first, so they span the set). A camera watching one of the
calibrated scenes is close to that scene's images; the same scene at night, or under a strong
colour cast, is close to none. Measured on the default set (`tests/test_drift.py`): in-range
scenes 0.02 to 0.23, the same scenes at a quarter of their brightness 0.48 to 0.75.

    monitor = DriftMonitor(lambda: bundle.input_stats, threshold=0.35, sample_s=1.0, window=60)
    event = monitor.observe(frame)      # every frame; samples one frame per `sample_s`
    if event is not None: ...           # raised or cleared, with the numbers
    monitor.snapshot()                  # the telemetry's `drift` block

With several sources the frames the monitor sees are copies (a MultiStreamPipeline gives each
frame's slot back to its ring once decoded): :class:`StreamTurns` has one frame copied when a
sample is due, the streams in turn, so the window holds every camera's frames alike and drift is
the cameras' average (one camera of four that goes to night moves it about a quarter of the way).

Cost: a frame that is not sampled costs one clock read and allocates nothing. A sampled frame
(one a second by default) is downscaled into buffers reused from sample to sample.

Decisions: none before the window holds `window` samples. Raised when the distance is above
`threshold`, cleared when it falls to `CLEAR_RATIO * threshold` or below (no flapping around the
limit). The window is the sustain: a shift must persist for a good part of it to move the average
(with a disjoint histogram, about a quarter of the window for the default 0.35).

A paused or black source raises nothing, by design: no frames means no samples (and no decision),
and a near-constant frame — a black, grey or blue "no signal" picture, brightness standard
deviation below :data:`~edge_sdk.frame_stats.NO_CONTENT_STD` — is skipped as "no content"
(counted in `skipped`), since it says nothing of the scene the model will see when the picture
returns. After a gap of more than :data:`STALL_S` (or three sample periods) without a sample — a
source that stalled or was paused — the old samples are dropped and a new window starts.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

import numpy as np

from edge_sdk.frame_stats import FrameStats
from edge_sdk.input_stats import BINS, InputStats

CLEAR_RATIO = 0.9  # an open alert clears at or below this share of the threshold
STALL_S = 60.0  # seconds without a sample after which the window starts again


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
        self.taken = 0  # frames taken when due (sampled, skipped, or with no reference to compare)
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
        self.taken += 1
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

    def overdue(self) -> Optional[float]:
        """Seconds since the next sample was due (negative: not yet); None while monitoring is off."""
        return None if self.threshold <= 0 else self._clock() - self._due

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


class StreamTurns:
    """Which frames of several streams are copied for `monitor` (a MultiStreamPipeline's
    `keep_frames`, called with the stream id of each frame on its batch thread): one frame when a
    sample is due, none while that copy is on its way to `observe`, and the streams in turn: the
    frame copied is one of the live stream copied longest ago (live: a frame within the last
    `live_s`, so that a lost camera holds up no one). One copy of one frame per sample period;
    none while monitoring is off."""

    def __init__(self, monitor: DriftMonitor, stream_ids: Sequence[str], clock: Callable[[], float] = time.monotonic,
                 live_s: float = 2.0) -> None:
        self._monitor = monitor
        self._clock = clock
        self.live_s = float(live_s)
        self._order = {str(sid): i for i, sid in enumerate(stream_ids)}
        self._seen = {sid: -math.inf for sid in self._order}  # each stream's latest frame
        self._last = {sid: -math.inf for sid in self._order}  # each stream's latest copy
        self._copied: Optional[int] = None  # monitor.taken when the latest copy was made

    def __call__(self, stream_id: str) -> bool:
        now = self._clock()
        self._seen[stream_id] = now
        overdue = self._monitor.overdue()
        if overdue is None or overdue < 0:
            return False
        latest = max(self._last.values())
        if self._monitor.taken == self._copied and now - latest < self._monitor.sample_s + 1.0:
            return False  # the copy made for this sample has not reached the monitor yet
        live = [sid for sid, seen in self._seen.items() if now - seen <= self.live_s]
        if min(live, key=lambda sid: (self._last[sid], self._order[sid])) != stream_id:
            return False
        self._copied, self._last[stream_id] = self._monitor.taken, now
        return True
