"""Per-stage latency bookkeeping: a monotonic clock and a fixed-size window of samples.

`LatencyWindow` keeps the last `capacity` frames' latencies per stage in one preallocated
array, so recording costs no allocation; percentiles are computed only when asked.
"""
from __future__ import annotations

import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from edge_sdk.runtime.types import RESULT_STAGES

clock = time.perf_counter  # monotonic, high resolution: every duration in the runtime uses it

SUMMARY_STAGES = RESULT_STAGES + ("total",)


def ms_since(t0: float) -> float:
    return (clock() - t0) * 1000.0


class LatencyWindow:
    """Latencies (ms) of the last `capacity` frames for each stage, plus a frame counter and
    the first/last times, for FPS."""

    def __init__(self, stages: Sequence[str] = SUMMARY_STAGES, capacity: int = 10000) -> None:
        self.stages = tuple(stages)
        self._col = {s: i for i, s in enumerate(self.stages)}
        self.capacity = int(capacity)
        self._data = np.full((self.capacity, len(self.stages)), np.nan, np.float64)
        self._n = 0
        self.t_first: Optional[float] = None
        self.t_last: Optional[float] = None

    def record(self, latency_ms: Mapping[str, float], t: Optional[float] = None) -> None:
        row = self._data[self._n % self.capacity]
        row[:] = np.nan
        for stage, value in latency_ms.items():
            col = self._col.get(stage)
            if col is not None:
                row[col] = value
        self._n += 1
        now = clock() if t is None else t
        if self.t_first is None:
            self.t_first = now
        self.t_last = now

    def __len__(self) -> int:
        return min(self._n, self.capacity)

    @property
    def count(self) -> int:
        return self._n

    def fps(self) -> float:
        """Frames per second between the first and the last recorded frame."""
        if self._n < 2 or self.t_first is None or self.t_last is None or self.t_last <= self.t_first:
            return 0.0
        return (self._n - 1) / (self.t_last - self.t_first)

    def percentiles(self, qs: Iterable[float] = (50, 95, 99)) -> Dict[str, Dict[str, float]]:
        """{stage: {"p50": ms, ...}} over the window, for stages that have samples."""
        qs = list(qs)
        data = self._data[: len(self)]
        out: Dict[str, Dict[str, float]] = {}
        for stage, col in self._col.items():
            values = data[:, col]
            values = values[~np.isnan(values)]
            if len(values):
                out[stage] = {f"p{q:g}": float(np.percentile(values, q)) for q in qs}
        return out


def median(values: List[float]) -> float:
    return float(np.median(np.asarray(values, np.float64))) if values else float("nan")
