"""Rolling frame metrics: FPS and latency percentiles per stage over a time window, counters.

`observe()` runs on the frame loop for every result: it writes a handful of numbers into
preallocated ring buffers under an uncontended lock and allocates no arrays. `snapshot()` runs
on the reporter thread once per telemetry interval and does the sorting.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from edge_sdk.runtime.types import RESULT_STAGES, FrameResult, PipelineStats

TOTAL = "total"
DEFAULT_STAGES = RESULT_STAGES + (TOTAL,)
PERCENTILES = (50.0, 95.0, 99.0)


class RollingMetrics:
    """FPS and latency percentiles over the last `window_s` seconds, plus running counters.

    The ring holds `capacity` frames; when more frames than that arrive within the window
    (a fast pipeline), rates and percentiles cover the newest `capacity` frames instead, and
    FPS stays exact because it is measured over the span those frames cover.
    """

    def __init__(
        self,
        window_s: float = 10.0,
        capacity: int = 16384,
        stages: Sequence[str] = DEFAULT_STAGES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = float(window_s)
        self.capacity = int(capacity)
        self.stages = tuple(stages)
        self._col = {name: i for i, name in enumerate(self.stages)}
        self._clock = clock
        self._ts = np.zeros(self.capacity, dtype=np.float64)
        self._lat = np.full((self.capacity, len(self.stages)), np.nan, dtype=np.float32)
        self._lock = threading.Lock()
        self._n = 0  # frames observed since start (ring write position = _n % capacity)
        self.started = clock()
        # running totals
        self.detections = 0
        self.cached = 0
        self.batch_filled = 0
        self.batch_slots = 0
        self.last_info: Dict[str, Any] = {}

    def observe(self, result: FrameResult, now: Optional[float] = None,
                extra: Optional[Mapping[str, float]] = None) -> None:
        """Record one FrameResult (frame loop; no array allocation); `extra`: more figures of
        the frame, by stage name, beside its latencies."""
        t = self._clock() if now is None else now
        lat = result.latency_ms
        info = result.info
        with self._lock:
            i = self._n % self.capacity
            self._ts[i] = t
            self._lat[i, :] = np.nan
            for name, value in lat.items():
                j = self._col.get(name)
                if j is not None:
                    self._lat[i, j] = value
            if extra:
                for name, value in extra.items():
                    j = self._col.get(name)
                    if j is not None:
                        self._lat[i, j] = value
            self._n += 1
            self.detections += len(result.detections)
            if result.cached:
                self.cached += 1
            if info:
                batch = info.get("batch")
                if isinstance(batch, Mapping):
                    self.batch_filled += int(batch.get("filled", 0))
                    self.batch_slots += int(batch.get("size", 0))
                self.last_info = info

    @property
    def frames(self) -> int:
        return self._n

    def snapshot(self, now: Optional[float] = None) -> Dict[str, Any]:
        """FPS, per-stage latency percentiles over the window, and the running totals."""
        t = self._clock() if now is None else now
        with self._lock:
            n = min(self._n, self.capacity)
            ts = self._ts[:n].copy()
            lat = self._lat[:n].copy()
            totals = {
                "frames": self._n,
                "detections": self.detections,
                "cached": self.cached,
                "batch_filled": self.batch_filled,
                "batch_slots": self.batch_slots,
            }
            info = self.last_info
        keep = ts > t - self.window_s
        k = int(keep.sum())
        if n == self.capacity and k == n:
            # the ring is full of in-window frames: measure over the span they cover
            span = max(t - float(ts.min()), 1e-9)
        else:
            span = min(self.window_s, max(t - self.started, 1e-9))
        latency: Dict[str, Dict[str, float]] = {}
        if k:
            window = lat[keep]
            for j, name in enumerate(self.stages):
                col = window[:, j]
                col = col[~np.isnan(col)]
                if len(col):
                    p = np.percentile(col, PERCENTILES)
                    latency[name] = {
                        "p50": round(float(p[0]), 3),
                        "p95": round(float(p[1]), 3),
                        "p99": round(float(p[2]), 3),
                        "mean": round(float(col.mean()), 3),
                        "max": round(float(col.max()), 3),
                        "count": int(len(col)),
                    }
        return {
            "window_s": self.window_s,
            "fps": round(k / span, 3),
            "frames_in_window": k,
            "latency_ms": latency,
            "totals": totals,
            "info": info,
        }


class IntervalCounters:
    """Differences of PipelineStats counters between two telemetry messages."""

    FIELDS = ("frames_captured", "frames_processed", "frames_dropped", "cache_hits")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: Dict[str, int] = {f: 0 for f in self.FIELDS}
        self._last_detections = 0
        self._last_t = clock()

    def step(self, stats: PipelineStats, detections_total: int, now: Optional[float] = None) -> Dict[str, Any]:
        t = self._clock() if now is None else now
        cur = {f: int(getattr(stats, f)) for f in self.FIELDS}
        d = {f: max(cur[f] - self._last[f], 0) for f in self.FIELDS}
        det = max(detections_total - self._last_detections, 0)
        seconds = max(t - self._last_t, 0.0)
        self._last, self._last_detections, self._last_t = cur, detections_total, t
        seen = d["frames_captured"]
        return {
            "seconds": round(seconds, 3),
            "captured": d["frames_captured"],
            "processed": d["frames_processed"],
            "dropped": d["frames_dropped"],
            "cached": d["cache_hits"],
            "drop_ratio": round(min(d["frames_dropped"] / seen, 1.0), 4) if seen else 0.0,
            "detections": det,
        }


def frames_block(stats: PipelineStats) -> Dict[str, int]:
    return {
        "captured": int(stats.frames_captured),
        "processed": int(stats.frames_processed),
        "dropped": int(stats.frames_dropped),
        "cached": int(stats.cache_hits),
        "source_errors": int(stats.source_errors),
        "reconnects": int(stats.reconnects),
    }
