"""What a consumer knows about every device: the latest status, telemetry and open alerts.

Used by `edge-sdk monitor` (table, Prometheus bridge) and testable without a broker: feed it
(topic, payload) pairs with `update()`.

Nothing from the network is trusted: a message is kept only when it validates against its
topic's schema and names the device of its topic (others are counted in `invalid`); the number
of devices and of open alerts per device are bounded. Status messages are ordered by
`status_ts` (the device's connection stamp), not `seq`: an older one is ignored (`stale`), and
for equal stamps `offline` (the will, the goodbye) wins over `online`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.schemas import split_topic

MAX_DEVICES = 10000
MAX_ALERTS = 256  # open alerts kept per device


@dataclass
class DeviceView:
    device_id: str
    status: Dict[str, Any] = field(default_factory=dict)
    telemetry: Dict[str, Any] = field(default_factory=dict)
    alerts: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # open alerts by name
    last_seen_ms: int = 0
    messages: int = 0
    repeats: int = 0  # QoS 1 redeliveries recognised by seq

    @property
    def state(self) -> str:
        return str(self.status.get("state", "unknown"))

    def row(self) -> Dict[str, Any]:
        t = self.telemetry
        total = (t.get("latency_ms") or {}).get("total") or {}
        frames = t.get("frames") or {}
        system = t.get("system") or {}
        power = system.get("power_mw") or {}
        return {
            "device": self.device_id,
            "status": self.state,
            "fps": t.get("fps"),
            "p50": total.get("p50"),
            "p99": total.get("p99"),
            "dropped": frames.get("dropped"),
            "drop_ratio": (t.get("interval") or {}).get("drop_ratio"),
            "temperature_c": system.get("temperature_max_c"),
            "power_w": (power.get("TOT") / 1000.0) if isinstance(power.get("TOT"), (int, float)) else None,
            "alerts": sorted(self.alerts),
            "bundle": self.status.get("bundle_hash"),
        }


class Fleet:
    """Thread-safe: the MQTT thread updates, the display and the exporter read."""

    def __init__(self, max_devices: int = MAX_DEVICES) -> None:
        self._lock = threading.Lock()
        self.devices: Dict[str, DeviceView] = {}
        self._last_seq: Dict[Tuple[str, str], int] = {}
        self.max_devices = int(max_devices)
        self.invalid = 0  # refused: not valid against the topic's schema, or another device's id
        self.stale = 0  # status messages older than the one shown
        self.overflow = 0  # messages of devices beyond max_devices

    def check(self, topic: str, payload: Any) -> Optional[str]:
        """Why (topic, payload) is not a message of ours, or None when it is one."""
        parsed = split_topic(topic)
        if parsed is None:
            return "not an edge-sdk topic"
        device_id, suffix = parsed
        schema_id = schemas.TOPICS.get(suffix)
        if schema_id is None:
            return f"unknown topic suffix {suffix!r}"
        if not isinstance(payload, dict):
            return "payload is not a JSON object"
        if payload.get("schema") != schema_id:
            return f"schema {payload.get('schema')!r} is not {schema_id}"
        if payload.get("device_id") != device_id:
            return "device_id differs from the topic's"
        if not schemas.validator(schema_id).is_valid(payload):
            return "; ".join(schemas.errors(payload, schema_id)[:3])
        return None

    def update(self, topic: str, payload: Any) -> Optional[DeviceView]:
        """Apply a valid message; None (and counted in `invalid`) for anything else."""
        if self.check(topic, payload) is not None:
            with self._lock:
                self.invalid += 1
            return None
        device_id, suffix = split_topic(topic)  # type: ignore[misc]
        with self._lock:
            view = self.devices.get(device_id)
            if view is None:
                if len(self.devices) >= self.max_devices:
                    self.overflow += 1
                    return None
                view = self.devices[device_id] = DeviceView(device_id)
            view.messages += 1
            seq = payload.get("seq")
            if isinstance(seq, int) and suffix != "status":
                key = (device_id, suffix)
                if seq <= self._last_seq.get(key, 0) and seq > self._last_seq.get(key, 0) - 1000:
                    view.repeats += 1
                    return view
                self._last_seq[key] = seq
            ts = payload.get("ts")
            if isinstance(ts, int):
                view.last_seen_ms = max(view.last_seen_ms, ts)
            if suffix == "status" and not _newer_status(payload, view.status):
                self.stale += 1
                return view
            if suffix == "status":
                started = payload.get("started_ts")
                if payload.get("state") == "online" and started != view.status.get("started_ts"):
                    # a new run of the daemon: its seq may have restarted (fresh queue)
                    for key in [k for k in self._last_seq if k[0] == device_id]:
                        del self._last_seq[key]
                view.status = payload
            elif suffix == "telemetry":
                view.telemetry = payload
            elif suffix == "alerts":
                name = str(payload.get("alert"))
                if payload.get("state") == "raised":
                    if name in view.alerts or len(view.alerts) < MAX_ALERTS:
                        view.alerts[name] = payload
                else:
                    view.alerts.pop(name, None)
        return view

    def rows(self) -> List[Dict[str, Any]]:
        with self._lock:
            return [self.devices[k].row() for k in sorted(self.devices)]

    def __iter__(self) -> Iterator[DeviceView]:
        with self._lock:
            views = list(self.devices.values())
        return iter(views)


def _newer_status(new: Dict[str, Any], shown: Dict[str, Any]) -> bool:
    """Whether status `new` replaces `shown`: a later `status_ts`, or the same one going offline
    (or staying in the same state). Messages without `status_ts` (older devices) always apply."""
    a, b = new.get("status_ts"), shown.get("status_ts")
    if not isinstance(a, int) or not isinstance(b, int):
        return True
    if a != b:
        return a > b
    return new.get("state") == "offline" or shown.get("state") != "offline"


def prometheus_collector(fleet: Fleet) -> Any:
    """A prometheus_client collector that renders the fleet at scrape time."""
    from prometheus_client.core import GaugeMetricFamily

    class FleetCollector:
        def collect(self) -> Iterator[Any]:
            up = GaugeMetricFamily("edge_sdk_up", "1 when the device's status is online", labels=["device"])
            fps = GaugeMetricFamily("edge_sdk_fps", "frames per second over the telemetry window", labels=["device"])
            lat = GaugeMetricFamily("edge_sdk_latency_ms", "latency percentile per stage (ms)",
                                    labels=["device", "stage", "quantile"])
            frames = GaugeMetricFamily("edge_sdk_frames", "frame counters since the daemon started",
                                       labels=["device", "kind"])
            alerts = GaugeMetricFamily("edge_sdk_alert_open", "1 while an alert is open", labels=["device", "alert"])
            system = GaugeMetricFamily("edge_sdk_system", "host figures (CPU %, memory, GPU %, temperature)",
                                       labels=["device", "metric"])
            for view in fleet:
                d = view.device_id
                up.add_metric([d], 1.0 if view.state == "online" else 0.0)
                t = view.telemetry
                if isinstance(t.get("fps"), (int, float)):
                    fps.add_metric([d], float(t["fps"]))
                for stage, p in (t.get("latency_ms") or {}).items():
                    for q in ("p50", "p95", "p99"):
                        if isinstance(p.get(q), (int, float)):
                            lat.add_metric([d, stage, q], float(p[q]))
                for kind, value in (t.get("frames") or {}).items():
                    frames.add_metric([d, kind], float(value))
                for name in view.alerts:
                    alerts.add_metric([d, name], 1.0)
                for key, value in (t.get("system") or {}).items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        system.add_metric([d, key], float(value))
            yield from (up, fps, lat, frames, alerts, system)

    return FleetCollector()
