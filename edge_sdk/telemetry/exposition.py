"""Devices and consumers as Prometheus metrics, by Prometheus' conventions.

One owner of the metric names: `edge-sdk monitor --prometheus` renders every device it tracks
with `device_families()`, the daemon's optional `[metrics] listen` renders its own device with
the same function, so a dashboard reads the same series from either.

The conventions (https://prometheus.io/docs/practices/naming/): base units (seconds, bytes,
ratios 0..1, celsius, watts) named in the suffix; counters end in `_total` and only ever grow
(a daemon restart resets them, which `rate()` and `increase()` handle); one metric per quantity,
the label telling the instance (stage, sensor, rail), never the quantity; latency percentiles as
a summary with `quantile="0.5"`. The device computes its percentiles over its rolling window
(`window_s`) and sends no running sum, so the summary has quantiles only: OpenMetrics allows a
summary without `_sum` and `_count`, and none is invented here. Label values are escaped by
prometheus_client (backslash, double quote, newline), and the telemetry schema bounds how many
there are.

The names, by device (`device` label on each):

    edge_sdk_up                               1 while the device's status is online
    edge_sdk_frames_per_second                over the device's window
    edge_sdk_latency_seconds{stage,quantile}  summary: 0.5, 0.95, 0.99 per pipeline stage
    edge_sdk_frames_total{kind}               captured, processed, dropped, cached, source_errors, reconnects
    edge_sdk_alert_open{alert}                1 while the alert is open
    edge_sdk_cpu_usage_ratio, edge_sdk_gpu_usage_ratio, edge_sdk_memory_usage_ratio
    edge_sdk_load1, edge_sdk_memory_used_bytes, edge_sdk_process_resident_memory_bytes
    edge_sdk_temperature_celsius{sensor}, edge_sdk_power_watts{rail}, edge_sdk_jetson_clocks_enabled

With several sources (the telemetry's `streams` and the batcher's `batch` blocks), per stream
(`stream` label beside `device`) and for the batcher:

    edge_sdk_stream_frames_per_second{stream}
    edge_sdk_stream_latency_seconds{stream,stage,quantile}   summary, as edge_sdk_latency_seconds
    edge_sdk_stream_frame_age_seconds{stream,quantile}       summary: capture to the frame's batch
    edge_sdk_stream_frames_total{stream,kind}                captured, processed, dropped, cached
    edge_sdk_stream_camera_up{stream}                        1 while the camera delivers, 0 while lost
    edge_sdk_stream_camera_lost_total{stream}                losses since start
    edge_sdk_batch_efficiency_ratio                          filled slots / slots over the window
    edge_sdk_batch_queue_delay_seconds{quantile}             summary: 0.5, 0.99
    edge_sdk_batches_in_window{size}                         the batch-size histogram of the window
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Tuple

QUANTILES = (("p50", "0.5"), ("p95", "0.95"), ("p99", "0.99"))
MIB = float(2 ** 20)

# system key -> (metric, help, how many of its unit make the base unit)
_SYSTEM = (
    ("cpu_percent", "edge_sdk_cpu_usage_ratio", "CPU busy, all cores (0..1)", 100.0),
    ("gpu_percent", "edge_sdk_gpu_usage_ratio", "GPU busy (0..1)", 100.0),
    ("memory_percent", "edge_sdk_memory_usage_ratio", "system memory in use (0..1)", 100.0),
    ("load_1m", "edge_sdk_load1", "1-minute load average", 1.0),
    ("memory_used_mb", "edge_sdk_memory_used_bytes", "system memory in use (bytes)", 1 / MIB),
    ("process_rss_mb", "edge_sdk_process_resident_memory_bytes", "the daemon's resident memory (bytes)", 1 / MIB),
)

# (device_id, state, telemetry message, names of the open alerts)
Device = Tuple[str, str, Dict[str, Any], Iterable[str]]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def device_families(devices: Iterable[Device]) -> Iterator[Any]:
    """The metric families of `devices` (needs prometheus_client)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

    up = GaugeMetricFamily("edge_sdk_up", "1 while the device's status is online", labels=["device"])
    fps = GaugeMetricFamily("edge_sdk_frames_per_second", "frames processed per second over the device's "
                            "telemetry window", labels=["device"])
    latency = Metric("edge_sdk_latency_seconds", "latency per pipeline stage: percentiles over the device's "
                     "telemetry window", "summary")
    frames = CounterMetricFamily("edge_sdk_frames", "frames since the daemon started, by what became of them",
                                 labels=["device", "kind"])
    alerts = GaugeMetricFamily("edge_sdk_alert_open", "1 while the alert is open", labels=["device", "alert"])
    system = {key: GaugeMetricFamily(name, text, labels=["device"]) for key, name, text, _ in _SYSTEM}
    temperature = GaugeMetricFamily("edge_sdk_temperature_celsius", "temperature per sensor",
                                    labels=["device", "sensor"])
    power = GaugeMetricFamily("edge_sdk_power_watts", "power per rail", labels=["device", "rail"])
    clocks = GaugeMetricFamily("edge_sdk_jetson_clocks_enabled", "1 while jetson_clocks pins the clocks",
                               labels=["device"])
    devices = list(devices)
    for device, state, t, open_alerts in devices:
        up.add_metric([device], 1.0 if state == "online" else 0.0)
        if _number(t.get("fps")):
            fps.add_metric([device], float(t["fps"]))
        for stage, p in (t.get("latency_ms") or {}).items():
            _summary(latency, "edge_sdk_latency_seconds", {"device": device, "stage": stage}, p)
        for kind, value in (t.get("frames") or {}).items():
            if _number(value):
                frames.add_metric([device, kind], float(value))
        for name in open_alerts:
            alerts.add_metric([device, name], 1.0)
        s = t.get("system") or {}
        for key, _, _, per_base in _SYSTEM:
            if _number(s.get(key)):
                system[key].add_metric([device], float(s[key]) / per_base)
        for sensor, value in (s.get("temperature_c") or {}).items():
            if _number(value):
                temperature.add_metric([device, sensor], float(value))
        for rail, value in (s.get("power_mw") or {}).items():
            if _number(value):
                power.add_metric([device, rail], float(value) / 1000.0)
        if isinstance(s.get("jetson_clocks"), bool):
            clocks.add_metric([device], 1.0 if s["jetson_clocks"] else 0.0)
    yield from (up, fps, latency, frames, alerts)
    yield from system.values()
    yield from (temperature, power, clocks)
    yield from stream_families((device, t) for device, _, t, _ in devices)


def _summary(metric: Any, name: str, labels: Dict[str, str], p: Any) -> None:
    if not isinstance(p, dict):
        return
    for key, quantile in QUANTILES:
        if _number(p.get(key)):
            metric.add_sample(name, dict(labels, quantile=quantile), p[key] / 1000.0)


def stream_families(devices: Iterable[Tuple[str, Dict[str, Any]]]) -> Iterator[Any]:
    """The per-stream and batcher families of (device id, telemetry message) pairs."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

    fps = GaugeMetricFamily("edge_sdk_stream_frames_per_second", "one stream's frames processed per second over "
                            "the device's telemetry window", labels=["device", "stream"])
    latency = Metric("edge_sdk_stream_latency_seconds", "one stream's latency per stage: percentiles over the "
                     "device's telemetry window", "summary")
    age = Metric("edge_sdk_stream_frame_age_seconds", "one stream's frame age, from capture to its batch: "
                 "percentiles over the device's telemetry window", "summary")
    frames = CounterMetricFamily("edge_sdk_stream_frames", "one stream's frames since the daemon started, by what "
                                 "became of them", labels=["device", "stream", "kind"])
    camera = GaugeMetricFamily("edge_sdk_stream_camera_up", "1 while the stream's camera delivers, 0 while lost",
                               labels=["device", "stream"])
    lost = CounterMetricFamily("edge_sdk_stream_camera_lost", "times the stream's camera was lost since the daemon "
                               "started", labels=["device", "stream"])
    efficiency = GaugeMetricFamily("edge_sdk_batch_efficiency_ratio", "filled batch slots / slots over the "
                                   "batcher's window (0..1)", labels=["device"])
    delay = Metric("edge_sdk_batch_queue_delay_seconds", "how long frames waited for their batch: percentiles "
                   "over the batcher's window", "summary")
    sizes = GaugeMetricFamily("edge_sdk_batches_in_window", "batches of the batcher's window by their size",
                              labels=["device", "size"])
    for device, t in devices:
        for stream, s in (t.get("streams") or {}).items():
            if _number(s.get("fps")):
                fps.add_metric([device, stream], float(s["fps"]))
            for stage, p in (s.get("latency_ms") or {}).items():
                _summary(latency, "edge_sdk_stream_latency_seconds", {"device": device, "stream": stream, "stage": stage}, p)
            _summary(age, "edge_sdk_stream_frame_age_seconds", {"device": device, "stream": stream}, s.get("frame_age_ms"))
            for kind, value in (s.get("frames") or {}).items():
                if _number(value):
                    frames.add_metric([device, stream, kind], float(value))
            cam = s.get("camera") or {}
            if cam.get("state") in ("ok", "lost"):
                camera.add_metric([device, stream], 1.0 if cam["state"] == "ok" else 0.0)
            if _number(cam.get("lost")):
                lost.add_metric([device, stream], float(cam["lost"]))
        b = t.get("batch") or {}
        if _number(b.get("efficiency")):
            efficiency.add_metric([device], float(b["efficiency"]))
        q = b.get("queue_delay_ms")
        if isinstance(q, dict):
            for key, quantile in (("p50", "0.5"), ("p99", "0.99")):
                if _number(q.get(key)):
                    delay.add_sample("edge_sdk_batch_queue_delay_seconds", {"device": device, "quantile": quantile},
                                     q[key] / 1000.0)
        for size, n in (b.get("histogram") or {}).items():
            if _number(n):
                sizes.add_metric([device, str(size)], float(n))
    yield from (fps, latency, age, frames, camera, lost, efficiency, delay, sizes)
