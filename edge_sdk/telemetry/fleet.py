"""What a consumer knows about every device: the latest status, telemetry and open alerts.

Used by `edge-sdk monitor` (table, Prometheus bridge) and testable without a broker: feed it
(topic, payload) pairs with `update()`.

Nothing from the network is trusted: a message is kept only when it validates against its
topic's schema and names the device of its topic (others are counted in `invalid`). What is kept
is bounded: the schemas bound every name and list that becomes a table cell or a Prometheus
series; at most `max_devices` devices are tracked — a device silent for `expire_s` is forgotten
(`expired`), and a new device at capacity takes the place of the one silent longest (`evicted`);
at most MAX_ALERTS open alerts per device, each kept as its name, severity and the start of its
message.

Status messages are ordered by the device's session first, then by `status_ts` (the device's
connection stamp), not `seq`. A session is a run of the daemon (`instance_id`); sessions are
ordered by when their first status arrived, not by their clocks: a daemon restarted with its
clock an hour behind stamps every status before the last will of the run before it, and is
still the newer session. A first status of a session never seen before that says `offline`
while another session shows online is the late will of an older run (the broker sends it when
the new run takes the connection over): ignored. Within a session an older stamp is ignored
(`stale`), and for equal stamps `offline` (the will, the goodbye) wins over `online`. A stamp more than `max_skew_s` ahead of the time the message arrived is not trusted
(`skewed`): such a status is shown only where it cannot hide a later one — over an offline
status or one of its own instance — and whatever arrives after it replaces it, so neither a
forged status from the future nor a device whose clock jumped pins the state.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from edge_sdk.telemetry import fastcheck, schemas
from edge_sdk.telemetry.intake import Histogram
from edge_sdk.telemetry.schemas import split_topic

MAX_DEVICES = 10000
MAX_ALERTS = 64  # open alerts kept per device
ALERT_NOTE = 256  # characters of an open alert's message kept
EXPIRE_S = 24 * 3600.0  # a device silent this long is forgotten
MAX_SKEW_S = 300.0  # how far ahead of the arrival time a status_ts is trusted
MAX_SESSIONS = 16  # sessions (instance ids) of a device whose order is kept


@dataclass
class DeviceView:
    device_id: str
    status: Dict[str, Any] = field(default_factory=dict)
    telemetry: Dict[str, Any] = field(default_factory=dict)
    alerts: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # open alerts by name
    last_seen_ms: int = 0  # wall clock (ms) when its last valid message arrived
    messages: int = 0
    repeats: int = 0  # QoS 1 redeliveries recognised by seq
    received: float = 0.0  # the consumer's monotonic clock at its last valid message
    status_trusted: bool = True  # the shown status's status_ts was within the skew
    last_seq: Dict[str, int] = field(default_factory=dict)  # by topic suffix (not status)
    # the device's sessions (instance ids), in the order their first status arrived
    sessions: "OrderedDict[str, None]" = field(default_factory=OrderedDict)

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
            "batch_efficiency": (t.get("batch") or {}).get("efficiency"),  # several sources: the batcher's
            "drop_ratio": (t.get("interval") or {}).get("drop_ratio"),
            "temperature_c": system.get("temperature_max_c"),
            "power_w": (power.get("TOT") / 1000.0) if isinstance(power.get("TOT"), (int, float)) else None,
            "alerts": sorted(self.alerts),
            "bundle": self.status.get("bundle_hash"),
            "streams": stream_rows(t),
        }


def stream_rows(telemetry: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A row per stream of a device that runs several (its telemetry's `streams`), by stream id:
    the camera's state, fps, total latency p50/p99, frames dropped."""
    rows = []
    for stream, s in sorted((telemetry.get("streams") or {}).items()):
        total = (s.get("latency_ms") or {}).get("total") or {}
        rows.append({"stream": stream, "camera": (s.get("camera") or {}).get("state"), "fps": s.get("fps"),
                     "p50": total.get("p50"), "p99": total.get("p99"), "dropped": (s.get("frames") or {}).get("dropped")})
    return rows


class Fleet:
    """Thread-safe: the consumer's worker thread updates, the display and the exporter read.

    `clock` (monotonic seconds) orders devices by their last message and expires them;
    `received_ms` given to `update()` (default: the wall clock now) bounds `status_ts`;
    `on_forget(device_id)` is called for each device expired or evicted (under the lock: it
    must not block, nor call back into the fleet)."""

    def __init__(self, max_devices: int = MAX_DEVICES, expire_s: float = EXPIRE_S, max_skew_s: float = MAX_SKEW_S,
                 clock: Callable[[], float] = time.monotonic,
                 on_forget: Optional[Callable[[str], None]] = None) -> None:
        if int(max_devices) < 1:
            raise ValueError(f"max_devices must be >= 1, got {max_devices}")
        self._lock = threading.Lock()
        self.devices: "OrderedDict[str, DeviceView]" = OrderedDict()  # least recently heard first
        self.max_devices = int(max_devices)
        self.expire_s = float(expire_s)  # 0: never
        self.max_skew_ms = int(max_skew_s * 1000)
        self._clock = clock
        self._on_forget = on_forget
        self.accepted = 0  # valid messages
        self.invalid = 0  # refused: not JSON, not valid against the topic's schema, or another device's id
        self.stale = 0  # status messages older than the one shown
        self.skewed = 0  # status messages with a status_ts beyond the skew
        self.expired = 0  # devices forgotten after expire_s of silence
        self.evicted = 0  # devices forgotten to make room for a new one
        self.age = Histogram()  # seconds from a message's ts to its arrival (not status: retained)

    def check(self, topic: str, payload: Any, raw: Optional[bytes] = None) -> Optional[str]:
        """Why (topic, payload) is not a message of ours, or None when it is one. With `raw`, the
        bytes `payload` was parsed from, the fast path (`fastcheck.valid`) may decide first."""
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
            return f"schema {str(payload.get('schema'))[:80]!r} is not {schema_id}"
        if payload.get("device_id") != device_id:
            return "device_id differs from the topic's"
        if raw is not None and fastcheck.valid(raw, suffix):
            return None
        problem = schemas.compiled(schema_id)(payload)
        return problem[:300] if problem is not None else None

    def refuse(self) -> None:
        """Count a message refused before it reached `update()` (it did not parse)."""
        with self._lock:
            self.invalid += 1

    def update(self, topic: str, payload: Any, received_ms: Optional[int] = None) -> Optional[DeviceView]:
        """Apply a valid message; None (and counted in `invalid`) for anything else.
        `received_ms`: when it arrived (wall clock, ms)."""
        return self.apply(topic, payload, received_ms)[0]

    def apply(self, topic: str, payload: Any, received_ms: Optional[int] = None,
              raw: Optional[bytes] = None) -> Tuple[Optional[DeviceView], Optional[str]]:
        """`update()`, with why a refused message was refused: (view, None) or (None, why).
        `raw`: the bytes `payload` was parsed from (see `check`)."""
        why = self.check(topic, payload, raw)
        if why is not None:
            self.refuse()
            return None, why
        device_id, suffix = split_topic(topic)  # type: ignore[misc]
        if received_ms is None:
            received_ms = schemas.now_ms()
        now = self._clock()
        if suffix != "status" and isinstance(payload.get("ts"), int):
            self.age.observe(max(0.0, (received_ms - payload["ts"]) / 1000.0))
        with self._lock:
            self.accepted += 1
            self._expire(now)
            view = self.devices.get(device_id)
            if view is None:
                if len(self.devices) >= self.max_devices:
                    gone, _ = self.devices.popitem(last=False)  # the device silent longest
                    self.evicted += 1
                    if self._on_forget is not None:
                        self._on_forget(gone)
                view = self.devices[device_id] = DeviceView(device_id)
            else:
                self.devices.move_to_end(device_id)
            view.messages += 1
            view.received = now
            view.last_seen_ms = received_ms
            seq = payload.get("seq")
            if isinstance(seq, int) and suffix != "status":
                last = view.last_seq.get(suffix, 0)
                if last - 1000 < seq <= last:
                    view.repeats += 1
                    return view, None
                view.last_seq[suffix] = seq
            if suffix == "status":
                self._apply_status(view, payload, received_ms)
            elif suffix == "telemetry":
                view.telemetry = payload
            elif suffix == "alerts":
                name = payload["alert"]
                if payload["state"] == "raised":
                    if name in view.alerts or len(view.alerts) < MAX_ALERTS:
                        view.alerts[name] = {"severity": payload["severity"], "ts": payload["ts"],
                                             "message": payload["message"][:ALERT_NOTE]}
                else:
                    view.alerts.pop(name, None)
        return view, None

    def _apply_status(self, view: DeviceView, payload: Dict[str, Any], received_ms: int) -> None:
        stamp = payload.get("status_ts")
        trusted = not isinstance(stamp, int) or stamp <= received_ms + self.max_skew_ms
        shown = view.status
        session, shown_session = _session(payload), _session(shown)
        first_of_session = session is not None and session not in view.sessions
        if first_of_session:
            view.sessions[session] = None
            while len(view.sessions) > MAX_SESSIONS:
                view.sessions.popitem(last=False)
        if not trusted:
            self.skewed += 1
            same_instance = payload.get("instance_id") is not None and \
                payload.get("instance_id") == shown.get("instance_id")
            applies = not shown or not view.status_trusted or same_instance or shown.get("state") != "online"
        elif session is not None and shown_session is not None and session != shown_session:
            if first_of_session:  # a run seen now for the first time: the newer one, unless it is a late will
                applies = not (payload.get("state") == "offline" and shown.get("state") == "online")
            else:
                order = list(view.sessions)
                applies = shown_session not in order or order.index(session) > order.index(shown_session)
        else:
            # a shown status whose stamp was not trusted says nothing about order: what arrives later wins
            applies = not view.status_trusted or _newer_status(payload, shown)
        if not applies:
            self.stale += 1
            return
        if payload.get("state") == "online" and payload.get("started_ts") != shown.get("started_ts"):
            view.last_seq.clear()  # a new run of the daemon: its seq may have restarted (fresh queue)
        view.status = payload
        view.status_trusted = trusted

    def _expire(self, now: float) -> None:
        """Forget devices silent for expire_s (under the lock; oldest first, so it stops early)."""
        if self.expire_s <= 0:
            return
        while self.devices:
            device_id, view = next(iter(self.devices.items()))
            if now - view.received < self.expire_s:
                return
            del self.devices[device_id]
            self.expired += 1
            if self._on_forget is not None:
                self._on_forget(device_id)

    def expire(self) -> None:
        """Forget the devices silent for expire_s now (the monitor calls it on its own clock)."""
        with self._lock:
            self._expire(self._clock())

    def counters(self) -> Dict[str, int]:
        with self._lock:
            return {"devices": len(self.devices), "accepted": self.accepted, "invalid": self.invalid,
                    "stale": self.stale, "skewed": self.skewed, "expired": self.expired, "evicted": self.evicted}

    def rows(self) -> List[Dict[str, Any]]:
        with self._lock:
            self._expire(self._clock())
            return [self.devices[k].row() for k in sorted(self.devices)]

    def __iter__(self) -> Iterator[DeviceView]:
        with self._lock:
            self._expire(self._clock())
            views = list(self.devices.values())
        return iter(views)


def _session(status: Dict[str, Any]) -> Optional[str]:
    value = status.get("instance_id")
    return value if isinstance(value, str) and value else None


def _newer_status(new: Dict[str, Any], shown: Dict[str, Any]) -> bool:
    """Whether status `new` replaces `shown`: a later `status_ts`, or the same one going offline
    (or staying in the same state). Messages without `status_ts` (older devices) always apply."""
    a, b = new.get("status_ts"), shown.get("status_ts")
    if not isinstance(a, int) or not isinstance(b, int):
        return True
    if a != b:
        return a > b
    return new.get("state") == "offline" or shown.get("state") != "offline"


def prometheus_collector(fleet: Fleet, intake: Any = None) -> Any:
    """A prometheus_client collector that renders the fleet at scrape time (names:
    `edge_sdk.telemetry.exposition`), and the consumer's own counters: devices tracked and
    forgotten, messages by outcome, the age of messages on arrival; with an `Intake`, also those
    refused by size or dropped from a full backlog, the backlog now and how long messages waited."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    from edge_sdk.telemetry.exposition import device_families

    class FleetCollector:
        def collect(self) -> Iterator[Any]:
            yield from device_families((v.device_id, v.state, v.telemetry, list(v.alerts)) for v in fleet)
            yield from _own_metrics(fleet, intake, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)

    return FleetCollector()


def _own_metrics(fleet: Fleet, intake: Any, counter: Any, gauge: Any, histogram: Any) -> Iterator[Any]:
    c = fleet.counters()
    devices = gauge("edge_sdk_monitor_devices", "devices the monitor tracks now")
    devices.add_metric([], float(c["devices"]))
    forgotten = counter("edge_sdk_monitor_evictions", "devices forgotten: silent for --expire (expired), or "
                        "to make room for a new one at --max-devices (capacity)", labels=["reason"])
    forgotten.add_metric(["expired"], float(c["expired"]))
    forgotten.add_metric(["capacity"], float(c["evicted"]))
    messages = counter("edge_sdk_monitor_messages", "messages received, by outcome (stale and skewed status "
                       "messages are among the accepted)", labels=["outcome"])
    for outcome in ("accepted", "invalid", "stale", "skewed"):
        messages.add_metric([outcome], float(c[outcome]))
    buckets, total, _ = fleet.age.snapshot()
    age = histogram("edge_sdk_monitor_message_age_seconds", "from a message's ts (the device's clock) to its "
                    "arrival here, telemetry, alerts and detections; a device clock ahead counts as 0")
    age.add_metric([], buckets, total)
    if intake is not None:
        i = intake.counters()
        messages.add_metric(["oversize"], float(i["oversize"]))
        messages.add_metric(["backlog"], float(i["backlog"]))
    yield from (devices, forgotten, messages, age)
    if intake is not None:
        queued = gauge("edge_sdk_monitor_queued_messages", "messages received and waiting to be validated")
        queued.add_metric([], float(i["queued"]))
        buckets, total, _ = intake.waited.snapshot()
        waited = histogram("edge_sdk_monitor_queue_wait_seconds", "how long a received message waited to be "
                           "validated (the monitor's own lag)")
        waited.add_metric([], buckets, total)
        yield from (queued, waited)
