"""The reporter: turns frame results into a telemetry message every interval, checks the health
rules and publishes both. It runs on its own thread; the frame loop only calls `observe()`."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from edge_sdk.runtime.types import FrameResult, PipelineStats
from edge_sdk.telemetry.disk_queue import PublisherError
from edge_sdk.telemetry.health import HealthMonitor
from edge_sdk.telemetry.metrics import IntervalCounters, RollingMetrics, frames_block
from edge_sdk.telemetry.publisher import Publisher

log = logging.getLogger(__name__)

DETECTIONS_MODES = ("off", "summary", "frame")


class Reporter:
    """Publishes `telemetry` every `interval_s` and `alerts` when a health rule changes state.

    `stats` returns the pipeline's current PipelineStats; `model` returns the identity of the
    running model (bundle hash, backend, precision); `system` reads host figures (or None).
    """

    def __init__(
        self,
        publisher: Publisher,
        health: HealthMonitor,
        stats: Callable[[], PipelineStats],
        interval_s: float = 5.0,
        window_s: float = 10.0,
        target_fps: float = 0.0,
        model: Optional[Callable[[], Dict[str, Any]]] = None,
        system: Optional[Any] = None,
        detections: str = "off",
        clock: Callable[[], float] = time.monotonic,
        commands: Optional[Callable[[], Dict[str, int]]] = None,
        drift: Optional[Any] = None,
    ) -> None:
        self.publisher = publisher
        self.health = health
        self.last: Dict[str, Any] = {}  # the latest telemetry message
        self.metrics = RollingMetrics(window_s=window_s, clock=clock)
        self.interval = IntervalCounters(clock=clock)
        self._stats = stats
        self.interval_s = float(interval_s)
        self.target_fps = float(target_fps)
        self._model = model
        self._commands = commands
        self.system = system
        self.detections = detections
        self.drift = drift  # an edge_sdk.daemon.drift.DriftMonitor: fed frames here, its figures in `drift`
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one report at a time (timer thread, final flush, `set`)
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None
        self.reports = 0
        self.busy_s = 0.0  # CPU time spent building reports (thread time)
        self._summary: Dict[str, Dict[str, int]] = {}  # per stream id

    # -- frame loop ------------------------------------------------------------------------------
    def observe(self, result: FrameResult) -> None:
        self.metrics.observe(result)
        if self.drift is not None:
            change = self.drift.observe(result.frame)  # samples one frame per drift_sample_s
            if change is not None:
                self.raise_alert("calibration_drift", change.active, change.message, "warning",
                                 metric="drift.distance", value=change.value, threshold=change.threshold)
        mode = self.detections
        if mode == "off":
            return
        n = len(result.detections)
        if mode == "frame":
            self.publisher.publish("detections", {
                "kind": "frame", "stream": result.stream, "frame": int(result.index),
                "frame_ts": round(result.timestamp, 3), "cached": bool(result.cached),
                "detections": result.detections.to_records()}, qos=0)
        else:
            s = self._summary.get(result.stream)
            if s is None:
                s = self._summary[result.stream] = {"frames": 0, "count": 0, "max_per_frame": 0}
            s["frames"] += 1
            s["count"] += n
            if n > s["max_per_frame"]:
                s["max_per_frame"] = n

    # -- configuration ---------------------------------------------------------------------------
    def set_interval(self, seconds: float) -> None:
        self.interval_s = float(seconds)
        self._wake.set()  # restart the wait with the new interval

    def raise_alert(self, name: str, active: bool, message: str, severity: str = "warning",
                    repeat: bool = False, metric: Optional[str] = None, value: Optional[float] = None,
                    threshold: Optional[float] = None) -> None:
        """Raise or clear a condition outside the threshold rules (a failed reload, say);
        `repeat` raises an open one again; `metric`, `value`, `threshold` give its numbers."""
        with self._lock:
            events = self.health.set(name, active, message, severity, repeat, metric, value, threshold)
        for event in events:
            self.publisher.publish("alerts", event)

    # -- report ----------------------------------------------------------------------------------
    def build(self) -> Dict[str, Any]:
        now = self._clock()
        snap = self.metrics.snapshot(now)
        stats = self._stats()
        totals = snap["totals"]
        message: Dict[str, Any] = {
            "uptime_s": round(now - self.metrics.started, 3),
            "window_s": snap["window_s"],
            "fps": snap["fps"],
        }
        if self.target_fps > 0:
            message["target_fps"] = self.target_fps
        message["latency_ms"] = snap["latency_ms"]
        message["frames"] = frames_block(stats)
        message["interval"] = self.interval.step(stats, totals["detections"], now)
        if totals["batch_slots"]:
            message["batch"] = {
                "efficiency": round(totals["batch_filled"] / totals["batch_slots"], 4),
                "filled": totals["batch_filled"],
                "slots": totals["batch_slots"],
            }
        info = snap["info"] or {}
        if isinstance(info.get("roi"), dict):
            message["roi"] = info["roi"]
        if isinstance(info.get("queue_depth"), int):
            message["queue_depth"] = info["queue_depth"]
        if self._model is not None:
            message["model"] = self._model()
        if self._commands is not None:
            message["commands"] = self._commands()
        if self.system is not None:
            message["system"] = self.system.read()
        drift = self.drift.snapshot() if self.drift is not None else None
        if drift is not None:
            message["drift"] = drift
        message["publisher"] = self.publisher.stats()
        return message

    def report(self) -> Dict[str, Any]:
        """Build and publish one telemetry message (and any alert transitions); returns it."""
        t0 = time.thread_time()
        with self._lock:
            message = self.build()
            probe = dict(message)
            if self.target_fps > 0:
                probe["fps_ratio"] = message["fps"] / self.target_fps
            events = self.health.evaluate(probe)
            message["alerts_open"] = self.health.open
            if self.detections == "summary" and self._summary:
                summaries, self._summary = self._summary, {}
                for stream, s in summaries.items():  # one message per stream that had frames
                    self.publisher.publish("detections", dict(s, kind="summary", stream=stream))
            self.publisher.publish("telemetry", message)
            for event in events:
                self.publisher.publish("alerts", event)
            self.reports += 1
            self.last = message  # what a scrape of the daemon's own /metrics shows
        self.busy_s += time.thread_time() - t0
        return message

    # -- thread ----------------------------------------------------------------------------------
    def start(self) -> "Reporter":
        """Start reporting. The figures cover the time from here on, not the set-up between
        construction and start (loading a model, opening a source)."""
        self.metrics = RollingMetrics(window_s=self.metrics.window_s, clock=self._clock)
        self.interval = IntervalCounters(clock=self._clock)
        self._thread = threading.Thread(target=self._run, name="telemetry-reporter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._wake.wait(self.interval_s):
                    self._wake.clear()
                    continue
                self.report()
        except BaseException as exc:  # surfaced to the daemon by check()
            log.exception("telemetry reporter failed")
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise PublisherError(f"telemetry reporter stopped: {self.error}") from self.error
        self.publisher.check()

    def stop(self, final_report: bool = True) -> Optional[Dict[str, Any]]:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        last = self.report() if final_report else None
        if self.system is not None:
            self.system.close()
        return last

    def alerts(self) -> List[str]:
        return self.health.open
