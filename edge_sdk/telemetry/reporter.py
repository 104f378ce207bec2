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
from edge_sdk.telemetry.metrics import DEFAULT_STAGES, IntervalCounters, RollingMetrics, frames_block
from edge_sdk.telemetry.publisher import Publisher

log = logging.getLogger(__name__)

DETECTIONS_MODES = ("off", "summary", "frame")
STREAM_STAGES = DEFAULT_STAGES + ("queue", "frame_age")  # a stream's figures: its stages, batcher wait, frame age
LOST_STATES = ("retrying", "given_up")  # a stream in these states has lost its camera


class Reporter:
    """Publishes `telemetry` every `interval_s` and `alerts` when a health rule changes state.

    `stats` returns the pipeline's current PipelineStats; `model` returns the identity of the
    running model (bundle hash, backend, precision); `system` reads host figures (or None);
    `streams`, with several sources, returns the batcher's figures and each stream's state and
    counters (StreamsPipeline.report): the message then has a `streams` block and the batcher's
    `batch` block, and a camera that is lost or back raises or clears `camera_lost` for its stream.
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
        streams: Optional[Callable[[], Optional[Dict[str, Any]]]] = None,
        outputs: Optional[Callable[[], List[Dict[str, Any]]]] = None,
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
        self._outputs = outputs  # the video outputs' figures (edge_sdk.output.video.VideoOutput.stats), in `output`
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one report at a time (timer thread, final flush, `set`)
        self._pending_alerts: List[Dict[str, Any]] = []  # camera alerts found while building a report
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None
        self.reports = 0
        self.busy_s = 0.0  # CPU time spent building reports (thread time)
        self._summary: Dict[str, Dict[str, int]] = {}  # per stream id
        self._streams = streams
        self.stream_metrics: Dict[str, RollingMetrics] = {}  # per stream id, with several sources
        self._cameras: Dict[str, Dict[str, Any]] = {}  # per stream id: state ("ok", "lost"), lost, back

    # -- frame loop ------------------------------------------------------------------------------
    def observe(self, result: FrameResult) -> None:
        self.metrics.observe(result)
        if self._streams is not None:
            self._observe_stream(result)
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

    def _observe_stream(self, result: FrameResult) -> None:
        metrics = self.stream_metrics.get(result.stream)
        if metrics is None:
            metrics = self.stream_metrics[result.stream] = RollingMetrics(
                window_s=self.metrics.window_s, capacity=4096, stages=STREAM_STAGES, clock=self._clock)
        age = getattr(result, "frame_age_ms", None)
        metrics.observe(result, extra={"frame_age": age} if age is not None else None)

    # -- configuration ---------------------------------------------------------------------------
    def set_interval(self, seconds: float) -> None:
        self.interval_s = float(seconds)
        self._wake.set()  # restart the wait with the new interval

    def raise_alert(self, name: str, active: bool, message: str, severity: str = "warning",
                    repeat: bool = False, metric: Optional[str] = None, value: Optional[float] = None,
                    threshold: Optional[float] = None, stream: Optional[str] = None) -> None:
        """Raise or clear a condition outside the threshold rules (a failed reload, say);
        `repeat` raises an open one again; `metric`, `value`, `threshold` give its numbers;
        `stream`: the condition is that stream's."""
        with self._lock:
            events = self.health.set(name, active, message, severity, repeat, metric, value, threshold, stream)
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
        report = self._streams() if self._streams is not None else None
        if report is not None:
            message["batch"] = batch_block(report["batcher"])
            message["streams"] = self._streams_block(report["streams"], now)
        if self._model is not None:
            message["model"] = self._model()
        if self._commands is not None:
            message["commands"] = self._commands()
        if self.system is not None:
            message["system"] = self.system.read()
        drift = self.drift.snapshot() if self.drift is not None else None
        if drift is not None:
            message["drift"] = drift
        outputs = self._outputs() if self._outputs is not None else None
        if outputs:
            message["output"] = outputs
        message["publisher"] = self.publisher.stats()
        return message

    def _streams_block(self, streams: Dict[str, Dict[str, Any]], now: float) -> Dict[str, Any]:
        """Each stream's figures over the window; a camera lost or back since the last report
        raises or clears its `camera_lost` (called under the report lock: alerts go out with the
        report)."""
        out: Dict[str, Any] = {}
        for sid, state in streams.items():
            metrics = self.stream_metrics.get(sid)
            snap = metrics.snapshot(now) if metrics is not None else {"fps": 0.0, "latency_ms": {}}
            latency = dict(snap["latency_ms"])
            age = latency.pop("frame_age", None)
            stats = state["stats"]
            block: Dict[str, Any] = {"fps": snap["fps"], "latency_ms": latency, "frames": {
                "captured": stats.frames_captured, "processed": stats.frames_processed,
                "dropped": stats.frames_dropped, "cached": 0}}
            if age is not None:
                block["frame_age_ms"] = age
            block["camera"] = self._camera(sid, state)
            out[sid] = block
        return out

    def _camera(self, sid: str, state: Dict[str, Any]) -> Dict[str, Any]:
        """The camera block of stream `sid` from its pipeline state and its `losses` so far: each
        loss raises `camera_lost` for the stream, a return to "running" clears it; a camera lost
        and back within one interval is counted and alerted both ways."""
        camera = self._cameras.setdefault(sid, {"state": "ok", "lost": 0, "back": 0})
        now = state.get("state")
        losses = int(state.get("losses", 0))
        if now in LOST_STATES and losses <= camera["lost"] and camera["state"] == "ok":
            losses = camera["lost"] + 1  # lost without a failure counted yet
        while camera["lost"] < losses:
            if camera["state"] == "lost":  # it came back between two reports, then was lost again
                self._camera_back(sid, camera)
            camera["lost"] += 1
            camera["state"] = "lost"
            self._pending_alerts.extend(self.health.set(
                "camera_lost", True, f"stream {sid}: camera lost ({now}, {state.get('failures', 0)} failures in a "
                "row); the other streams run on", "warning", stream=sid))
        if camera["state"] == "lost" and now == "running":
            self._camera_back(sid, camera)
        return dict(camera)

    def _camera_back(self, sid: str, camera: Dict[str, Any]) -> None:
        camera["state"] = "ok"
        camera["back"] += 1
        self._pending_alerts.extend(self.health.set("camera_lost", False, f"stream {sid}: camera back", "warning",
                                                    stream=sid))

    def report(self) -> Dict[str, Any]:
        """Build and publish one telemetry message (and any alert transitions); returns it."""
        t0 = time.thread_time()
        with self._lock:
            self._pending_alerts = []
            message = self.build()
            probe = dict(message)
            if self.target_fps > 0:
                probe["fps_ratio"] = message["fps"] / self.target_fps
            events = self._pending_alerts + self.health.evaluate(probe)
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


def batch_block(stats: Dict[str, Any]) -> Dict[str, Any]:
    """The telemetry `batch` block of a DynamicBatcher's statistics (its window of batches)."""
    block: Dict[str, Any] = {"efficiency": round(float(stats["efficiency"]), 4), "batches": int(stats["batches"]),
                             "max_batch_size": int(stats["max_batch_size"]),
                             "filled": sum(size * n for size, n in stats["histogram"].items()),
                             "slots": int(stats["max_batch_size"]) * int(stats["batches"]),
                             "histogram": {str(size): int(n) for size, n in stats["histogram"].items()}}
    delay = stats.get("queue_delay_ms") or {}
    if delay:
        block["queue_delay_ms"] = {"p50": round(float(delay["p50"]), 3), "p99": round(float(delay["p99"]), 3)}
    return block
