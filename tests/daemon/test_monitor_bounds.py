"""What one device (or one client pretending to be many) can do to `edge-sdk monitor`, and the
bounds that stop it: message shape and size, the intake that keeps parsing off paho's network
thread and serves devices in turn, devices forgotten by age and to make room, status stamps from
the future, and where the Prometheus endpoint listens. Real Mosquitto where MQTT is involved."""
from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.cli.monitor import listen_address
from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.fleet import MAX_ALERTS, Fleet, prometheus_collector
from edge_sdk.telemetry.intake import Intake

from mqtt_broker import free_port
from polling import wait_until
from processes import kill_group, spawn
from test_commands import Clock

pytest.importorskip("paho.mqtt.client")
pytest.importorskip("jsonschema")

CODE = "import sys; from edge_sdk.cli import main; sys.argv[0] = 'edge-sdk'; main()"
YEAR_MS = 365 * 24 * 3600 * 1000


def telemetry(device: str, seq: int, fps: float = 30.0, latency: Optional[Dict[str, Any]] = None,
              **extra: Any) -> Dict[str, Any]:
    return dict({"schema": "edge-sdk/telemetry/1", "device_id": device, "ts": schemas.now_ms(), "seq": seq,
                 "window_s": 10, "fps": fps,
                 "latency_ms": latency if latency is not None else {"total": {"p50": 5.0, "p95": 8.0, "p99": 9.0}},
                 "frames": {"captured": seq, "processed": seq, "dropped": 0, "cached": 0},
                 "interval": {"seconds": 1, "captured": 1, "processed": 1, "dropped": 0, "drop_ratio": 0.0}}, **extra)


def stages(n: int) -> Dict[str, Any]:
    """`n` made-up stage names, as the hostile device of the report sent (24,000: 840 KB)."""
    return {f"s{i}": {"p50": 1, "p95": 2, "p99": 3} for i in range(n)}


def alert(device: str, seq: int, name: str, state: str = "raised", message: str = "m") -> Dict[str, Any]:
    return {"schema": "edge-sdk/alert/1", "device_id": device, "ts": schemas.now_ms(), "seq": seq, "alert": name,
            "state": state, "severity": "warning", "message": message}


def status(device: str, seq: int, state: str, status_ts: int, instance: Optional[str], **extra: Any) -> Dict[str, Any]:
    body = {"schema": "edge-sdk/status/1", "device_id": device, "ts": status_ts, "seq": seq, "state": state,
            "status_ts": status_ts}
    if instance is not None:
        body["instance_id"] = instance
    return dict(body, **extra)


def exposition(fleet: Fleet, intake: Any = None) -> str:
    prom = pytest.importorskip("prometheus_client")
    registry = prom.CollectorRegistry()
    registry.register(prometheus_collector(fleet, intake))
    return prom.generate_latest(registry).decode()


def series(text: str) -> List[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


# -- 3. the shape and size of a message ---------------------------------------------------------

@pytest.mark.parametrize("message", [
    telemetry("d", 1, latency=stages(24000)),  # the report's 840 KB message
    telemetry("d", 1, latency=stages(17)),  # more stages than the schema allows
    telemetry("d", 1, latency={"x" * 33: {"p50": 1.0, "p95": 1.0, "p99": 1.0}}),  # a stage name too long
    telemetry("d", 1, latency={"Total Latency": {"p50": 1.0, "p95": 1.0, "p99": 1.0}}),  # not a stage name
    telemetry("d", 1, alerts_open=[f"a{i}" for i in range(65)]),
    telemetry("d", 1, system={"temperature_c": {f"zone{i}": 40.0 for i in range(33)}}),
    alert("d", 1, "x" * 65),  # an alert name is at most 64 characters (it becomes a label value)
    dict(telemetry("d", 1), device_id="d" * 129),
    status("d", 1, "online", 1, "i" * 65),
], ids=["24000-stages", "17-stages", "long-stage", "odd-stage", "alerts-open", "temperature-zones", "alert-name",
        "device-id", "instance-id"])
def test_the_schemas_bound_every_name_and_list_that_becomes_a_series(message: Dict[str, Any]) -> None:
    assert schemas.errors(message) != []


def test_what_a_real_device_sends_fits_the_bounds() -> None:
    """The largest messages the daemon's own code paths give (every stage, the model, system and
    publisher blocks, a 64-character alert name) validate and fit their topic's size bound."""
    tel = telemetry("cam-1", 1, latency={s: {"p50": 1.0, "p95": 2.0, "p99": 3.0, "mean": 1.5, "max": 9.0, "count": 300}
                                         for s in ("capture_wait", "preprocess", "infer", "decode", "merge", "total")},
                    target_fps=30.0, uptime_s=5.0, queue_depth=1, alerts_open=["a" * 64] * 8,
                    system={"cpu_percent": 50.0, "temperature_c": {f"zone{i}": 40.0 for i in range(8)},
                            "power_mw": {"TOT": 5000.0, "VDD_CPU": 1000.0}, "nvpmodel": "MODE_15W_6CORE"})
    for suffix, message in (("telemetry", tel), ("alerts", alert("cam-1", 1, "a" * 64, message="m" * 2000))):
        assert schemas.errors(message) == []
        assert len(json.dumps(message).encode()) < schemas.MAX_BYTES[suffix] / 4


def test_a_flood_of_series_stays_bounded_in_the_exporter() -> None:
    """Everything the schema lets through is bounded: 100 alerts of valid names keep MAX_ALERTS
    open, stages the schema's 16; the exposition of one device stays under 300 series."""
    fleet = Fleet()
    assert fleet.update("edge-sdk/evil/telemetry", telemetry("evil", 1, latency=stages(24000))) is None
    assert fleet.update("edge-sdk/evil/telemetry", telemetry("evil", 2, latency=stages(16))) is not None
    for i in range(100):
        fleet.update("edge-sdk/evil/alerts", alert("evil", 3 + i, f"{i:03d}" + "x" * 61, message="m" * 100_000))
    view = fleet.devices["evil"]
    assert len(view.alerts) == MAX_ALERTS
    assert max(len(a["message"]) for a in view.alerts.values()) <= 256  # not 100,000 characters per alert kept
    text = exposition(fleet)
    assert len(series(text)) < 300 and len(text) < 64 * 1024


def test_the_intake_refuses_by_size_before_parsing_and_serves_devices_in_turn() -> None:
    """A device that floods waits behind its own messages: with 200 of the flooder's queued ahead
    (its queue holds `per_device`, the rest are counted in `backlog`), the other device's message is
    handled next but one. Oversized payloads never reach the handler."""
    release, handled = threading.Event(), []

    def handle(topic: str, payload: bytes, received_ms: int) -> None:
        release.wait(10)  # the first message blocks the worker, as an expensive validation would
        handled.append(topic)

    intake = Intake(handle, per_device=50).start()
    try:
        assert intake.put("edge-sdk/evil/telemetry", b"x" * (schemas.MAX_BYTES["telemetry"] + 1)) is not None
        assert intake.put("edge-sdk/evil/alerts", b"{}" * (1 << 20)) is not None
        refusals = [intake.put("edge-sdk/evil/telemetry", b"{}") for _ in range(200)]
        assert intake.put("edge-sdk/good/telemetry", b"{}") is None
        release.set()
        assert wait_until(lambda: intake.counters()["queued"] == 0, 10)
    finally:
        intake.stop()
    assert intake.oversize == 2 and refusals.count(None) == 50 and intake.backlog == 150
    assert handled.index("edge-sdk/good/telemetry") <= 2, handled[:5]
    assert len(handled) == 51


def test_the_intake_bounds_all_devices_together() -> None:
    intake = Intake(lambda *a: None, per_device=10, max_messages=25, max_bytes=1000)  # not started: nothing drains
    kept = [intake.put(f"edge-sdk/d{i}/status", b"{}") is None for i in range(40)]
    assert kept.count(True) == 25 and intake.backlog == 15
    big = Intake(lambda *a: None, max_bytes=1000)
    assert [big.put(f"edge-sdk/d{i}/telemetry", b"x" * 300) is None for i in range(4)] == [True, True, True, False]


# -- 4. the monitor forgets ------------------------------------------------------------------------

def test_a_real_device_appears_after_ten_thousand_fake_ids() -> None:
    fleet = Fleet()
    for i in range(10_000):
        fleet.update(f"edge-sdk/fake-{i}/status", status(f"fake-{i}", 1, "online", 1, None))
    fleet.update("edge-sdk/real/telemetry", telemetry("real", 1, fps=12.5))
    assert [r["fps"] for r in fleet.rows() if r["device"] == "real"] == [12.5]
    assert len(fleet.devices) == 10_000 and fleet.evicted == 1 and "fake-0" not in fleet.devices
    text = exposition(fleet)
    assert 'edge_sdk_frames_per_second{device="real"} 12.5' in text
    assert 'edge_sdk_monitor_evictions_total{reason="capacity"} 1.0' in text


def test_devices_are_forgotten_by_age_and_the_least_recently_heard_makes_room() -> None:
    clock = Clock()
    fleet = Fleet(max_devices=3, expire_s=60, clock=clock)
    for i, name in enumerate(("a", "b", "c")):
        fleet.update(f"edge-sdk/{name}/telemetry", telemetry(name, 1))
        clock.t += 1
    fleet.update("edge-sdk/a/telemetry", telemetry("a", 2))  # a is heard again: b is now the oldest
    fleet.update("edge-sdk/d/telemetry", telemetry("d", 1))
    assert sorted(fleet.devices) == ["a", "c", "d"] and fleet.evicted == 1
    clock.t += 59.5  # c was last heard 60.5 s ago, a and d 59.5 s ago
    assert [r["device"] for r in fleet.rows()] == ["a", "d"] and fleet.expired == 1
    clock.t += 1
    assert fleet.rows() == [] and fleet.expired == 3
    assert 'edge_sdk_monitor_evictions_total{reason="expired"} 3.0' in exposition(fleet)
    never = Fleet(expire_s=0, clock=clock)
    never.update("edge-sdk/a/telemetry", telemetry("a", 1))
    clock.t += 10 * 365 * 86400
    assert len(never.rows()) == 1


# -- 5. status stamps from the future --------------------------------------------------------------

NOW = 1_700_000_000_000


def apply(fleet: Fleet, *messages: Dict[str, Any]) -> str:
    for m in messages:
        fleet.update(f"edge-sdk/{m['device_id']}/status", m, received_ms=NOW)
    return fleet.devices["d"].state


def test_a_forged_status_from_the_future_pins_nothing() -> None:
    fleet = Fleet()
    online = status("d", 1, "online", NOW - 1000, "real")
    forged = status("d", 2, "online", NOW + 5 * YEAR_MS, "forged")
    assert apply(fleet, online, forged) == "online" and fleet.skewed == 1 and fleet.stale == 1
    assert apply(fleet, status("d", 0, "offline", NOW - 1000, None, reason="connection lost")) == "offline"  # the will
    assert apply(fleet, status("d", 1, "online", NOW, "restart")) == "online"
    assert apply(fleet, status("d", 2, "offline", NOW, "restart", reason="stopped")) == "offline"  # a clean stop
    # forged with the live instance's id: shown, but whatever comes next replaces it
    assert apply(fleet, status("d", 1, "online", NOW + 100, "next")) == "online"
    assert apply(fleet, status("d", 3, "offline", NOW + 5 * YEAR_MS, "next", reason="stopped")) == "offline"
    assert apply(fleet, status("d", 0, "online", NOW + 100, "next")) == "online"


def test_a_device_whose_clock_jumped_recovers() -> None:
    fleet = Fleet()
    ahead = NOW + 5 * YEAR_MS
    assert apply(fleet, status("d", 1, "offline", NOW - 5000, "old", reason="stopped"),
                 status("d", 1, "online", ahead, "jumped")) == "online"  # shown: nothing later to hide
    assert apply(fleet, status("d", 2, "offline", ahead, "jumped", reason="stopped")) == "offline"
    assert apply(fleet, status("d", 1, "online", NOW, "fixed")) == "online"  # restarted with the clock set right
    # the jumped instance's will, delayed by the broker, cannot take the state of the live one
    assert apply(fleet, status("d", 0, "offline", ahead, None, reason="connection lost")) == "online"
    assert apply(fleet, status("d", 2, "offline", NOW, "fixed", reason="stopped")) == "offline"
    within = Fleet(max_skew_s=300)
    assert apply(within, status("d", 1, "online", NOW + 299_000, "a"),
                 status("d", 0, "offline", NOW - 1000, None)) == "online"  # within the skew: stamps order


# -- the monitor process against a real broker -------------------------------------------------------

class Monitor:
    """`edge-sdk monitor --json --record --prometheus` as a subprocess."""

    def __init__(self, url: str, tmp_path: Path, *args: str, prometheus: Optional[str] = None) -> None:
        self.port = free_port()
        self.host = "127.0.0.1"
        self.record = tmp_path / "fleet.jsonl"
        self.proc = spawn(
            [sys.executable, "-c", CODE, "monitor", "--broker", url, "--json", "--record", str(self.record),
             "--prometheus", prometheus or str(self.port), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err = ""
        self._said: List[str] = []  # its stderr so far, read by a thread
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._said.append(line)

    def said(self) -> str:
        return "".join(self._said)

    def metrics(self, host: Optional[str] = None) -> str:
        try:
            with urllib.request.urlopen(f"http://{host or self.host}:{self.port}/metrics", timeout=10) as reply:
                return reply.read().decode()
        except (urllib.error.URLError, ConnectionError):
            return ""

    def value(self, name: str, labels: str) -> Optional[float]:
        m = re.search(re.escape(f"{name}{{{labels}}}") + r" (\S+)", self.metrics())
        return float(m.group(1)) if m else None

    def lines(self) -> List[Dict[str, Any]]:
        return [json.loads(x) for x in self.record.read_text().splitlines()] if self.record.exists() else []

    def stop(self, sig: int = signal.SIGTERM) -> str:
        """Stop it as a service manager does (SIGTERM); past a minute its group is killed and
        the test fails. Its stderr, the exit summary included."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"the monitor did not exit within 60 s of {signal.Signals(sig).name}: "
                                         f"{self.said()[-2000:]}") from None
        finally:
            kill_group(self.proc)
            self._reader.join(10)
            self.err = self.said()
        return self.err


@pytest.fixture
def monitor_factory():
    made: List[Monitor] = []

    def make(*args: Any, **kwargs: Any) -> Monitor:
        made.append(Monitor(*args, **kwargs))
        return made[-1]

    yield make
    failed = []
    for m in made:  # every monitor stopped, even when one of them does not stop
        try:
            m.stop()
        except AssertionError as exc:
            failed.append(str(exc))
    assert not failed, failed


def publish(client: Any, topic: str, message: Any, retain: bool = False) -> None:
    payload = message if isinstance(message, bytes) else json.dumps(message).encode()
    client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)


def subscribed(mon: Monitor, log: Any, name: str) -> None:
    """Wait until the monitor has subscribed: it shows the retained status of `name`."""
    publish(log.client, f"edge-sdk/{name}/status", status(name, 1, "online", schemas.now_ms(), name), retain=True)
    assert wait_until(lambda: mon.value("edge_sdk_up", f'device="{name}"') == 1.0, 30), "the monitor never subscribed"


def test_a_flooding_device_neither_shuts_out_another_nor_bloats_metrics(broker, tmp_path: Path, message_log,
                                                                         monitor_factory) -> None:
    """The report's attack through Mosquitto: 830 KB telemetry with 24,000 stage names (over the
    packet size the monitor announces: the broker drops it), 105 KB telemetry and alerts with huge
    names (over their topic's bound: dropped unparsed), many-key telemetry under the bound and 100
    valid alerts. Afterwards a good device's telemetry reaches the monitor, and /metrics stays
    small."""
    log = message_log(broker.url, [])
    mon = monitor_factory(broker.url, tmp_path)
    subscribed(mon, log, "good")
    huge = json.dumps(telemetry("evil", 1, latency=stages(24000)), separators=(",", ":")).encode()
    assert 800_000 < len(huge) < 1 << 20  # under the 1 MiB that every topic used to allow
    big = json.dumps(telemetry("evil", 2, latency=stages(3000)), separators=(",", ":")).encode()
    assert schemas.MAX_BYTES["telemetry"] < len(big) < 200_000
    for i in range(20):
        log.client.publish("edge-sdk/evil/telemetry", huge, qos=1)  # the broker drops it: over the monitor's packet size
        log.client.publish("edge-sdk/evil/telemetry", big, qos=1)  # the monitor drops it unparsed
        log.client.publish("edge-sdk/evil/alerts", json.dumps(alert("evil", 100 + i, f"{i}" + "n" * 100_000)), qos=1)
        log.client.publish("edge-sdk/evil/telemetry", json.dumps(telemetry("evil", 200 + i, latency=stages(300))), qos=1)
    for i in range(100):
        log.client.publish("edge-sdk/evil/alerts", json.dumps(alert("evil", 300 + i, f"{i:03d}" + "x" * 61)), qos=1)
    publish(log.client, "edge-sdk/evil/telemetry", telemetry("evil", 400, fps=1.0, latency=stages(16)))
    publish(log.client, "edge-sdk/good/telemetry", telemetry("good", 2, fps=42.5))
    # that devices are served in turn is checked without a clock by the intake's own test above;
    # here: the good device's telemetry gets through the flood at all
    assert wait_until(lambda: mon.value("edge_sdk_frames_per_second", 'device="good"') == 42.5, 120)
    assert wait_until(lambda: mon.value("edge_sdk_frames_per_second", 'device="evil"') == 1.0, 30)
    text = mon.metrics()
    assert len(text) < 64 * 1024 and len(series(text)) < 300, (len(text), len(series(text)))
    assert len(re.findall(r'edge_sdk_alert_open\{alert="[^"]*",device="evil"\}', text)) == MAX_ALERTS
    assert mon.value("edge_sdk_monitor_messages_total", 'outcome="oversize"') == 40.0
    assert mon.value("edge_sdk_monitor_messages_total", 'outcome="invalid"') == 20.0  # the 300 stages
    err = mon.stop()
    assert "40 over their size bound" in err, err


def test_messages_the_broker_drops_as_too_large_for_the_monitor_do_not_stall_it(broker, tmp_path: Path,
                                                                               message_log, monitor_factory) -> None:
    """Mosquitto drops a message over the packet size the monitor announces, but a QoS 1
    delivery dropped so still takes one of the client's inflight slots for good (20 by default;
    src/database.c, MOSQ_ERR_OVERSIZE_PACKET, up to 2.1): 40 in a row would stop every later
    delivery to a QoS 1 subscriber. The monitor's good device still gets through afterwards."""
    log = message_log(broker.url, [])
    mon = monitor_factory(broker.url, tmp_path)
    subscribed(mon, log, "good")
    huge = json.dumps(telemetry("evil", 1, latency=stages(24000)), separators=(",", ":")).encode()
    for _ in range(40):
        publish(log.client, "edge-sdk/evil/telemetry", huge)
    publish(log.client, "edge-sdk/good/telemetry", telemetry("good", 2, fps=42.5))
    assert wait_until(lambda: mon.value("edge_sdk_frames_per_second", 'device="good"') == 42.5, 30)
    assert mon.value("edge_sdk_frames_per_second", 'device="evil"') is None  # none of the 40 reached it


def test_a_flood_of_device_ids_leaves_room_for_a_real_device(broker, tmp_path: Path, message_log,
                                                             monitor_factory) -> None:
    log = message_log(broker.url, [])
    mon = monitor_factory(broker.url, tmp_path, "--max-devices", "100")
    subscribed(mon, log, "first")
    for i in range(300):
        log.client.publish(f"edge-sdk/fake-{i}/status", json.dumps(status(f"fake-{i}", 1, "online", 1, None)), qos=1)
    publish(log.client, "edge-sdk/real/telemetry", telemetry("real", 1, fps=12.5))
    assert wait_until(lambda: mon.value("edge_sdk_frames_per_second", 'device="real"') == 12.5, 30)
    assert re.search(r"^edge_sdk_monitor_devices 100\.0$", mon.metrics(), re.M)
    assert mon.value("edge_sdk_monitor_evictions_total", 'reason="capacity"') == 202.0  # 302 ids, 100 kept
    err = mon.stop()
    assert "202 to make room (--max-devices 100)" in err and "forgot devices" in err, err


DEVICE = """
import sys
from pathlib import Path
from edge_sdk.telemetry.broker import BrokerConfig
from edge_sdk.telemetry.publisher import MqttPublisher
url, device, queue, instance = sys.argv[1:5]
pub = MqttPublisher(BrokerConfig(url=url), device, Path(queue))
pub.set_status({"started_ts": 1, "versions": {"edge_sdk": "t"}, "instance_id": instance})
pub.start()
sys.stdin.readline()
pub.stop(final_status={"reason": "stopped"})
"""


def device(url: str, tmp_path: Path, instance: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", DEVICE, url, "cam-9", str(tmp_path / f"{instance}.sqlite3"), instance],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_status_from_the_future_pins_nobody_online(broker, tmp_path: Path, message_log, monitor_factory) -> None:
    """One forged status five years ahead; afterwards the will of the killed daemon, a restart and a
    clean stop each show, through Mosquitto and the monitor's /metrics."""
    log = message_log(broker.url, [])
    mon = monitor_factory(broker.url, tmp_path)
    up = lambda: mon.value("edge_sdk_up", 'device="cam-9"')  # noqa: E731
    first = device(broker.url, tmp_path, "first")
    try:
        assert wait_until(lambda: up() == 1.0, 30), mon.proc.stderr
        now = schemas.now_ms()
        publish(log.client, "edge-sdk/cam-9/status", status("cam-9", 99, "online", now + 5 * YEAR_MS, "forged"),
                retain=True)
        assert wait_until(lambda: any(x["payload"].get("instance_id") == "forged" for x in mon.lines()), 30)
        first.kill()  # no goodbye: the broker publishes the will
        first.communicate(timeout=10)
        assert wait_until(lambda: up() == 0.0, 30), "the will was taken for stale"
        second = device(broker.url, tmp_path, "second")
        assert wait_until(lambda: up() == 1.0, 30), "the restart was taken for stale"
        second.communicate("stop\n", timeout=30)
        assert second.returncode == 0, second.stderr
        assert wait_until(lambda: up() == 0.0, 30), "the clean stop was taken for stale"
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate(timeout=10)
    assert mon.value("edge_sdk_monitor_messages_total", 'outcome="skewed"') == 1.0


# -- 12. where /metrics listens ---------------------------------------------------------------------

@pytest.mark.parametrize("value,want", [
    ("9108", ("0.0.0.0", 9108)), ("127.0.0.1:9108", ("127.0.0.1", 9108)), ("localhost:1", ("localhost", 1)),
    ("[::1]:9108", ("::1", 9108)), ("0.0.0.0:65535", ("0.0.0.0", 65535)),
])
def test_listen_address(value: str, want: tuple) -> None:
    assert listen_address(value) == want


@pytest.mark.parametrize("value", ["", ":9108", "host:", "host:port", "70000", "0", "::1:9108", "127.0.0.1:-1", "[::1]"])
def test_a_bad_prometheus_address_is_exit_2_naming_the_forms(value: str) -> None:
    out = CliRunner().invoke(app, ["monitor", "--broker", "mqtt://127.0.0.1:1", "--prometheus", value, "--json",
                                   "--duration", "0.1"])
    assert out.exit_code == 2 and "--prometheus" in out.output, out.output


def test_prometheus_host_port_listens_on_that_host_only(broker, tmp_path: Path, monitor_factory) -> None:
    port = free_port()
    bound = monitor_factory(broker.url, tmp_path, prometheus=f"127.0.0.2:{port}")
    bound.port = port
    assert wait_until(lambda: "# HELP" in bound.metrics("127.0.0.2"), 30), bound.said()
    # the address is said once the server listens: wait for the line, not only for the server
    assert wait_until(lambda: f"http://127.0.0.2:{port}/metrics" in bound.said(), 30), bound.said()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    bound.stop()


def test_monitors_started_in_the_same_millisecond_get_client_ids_of_their_own(monkeypatch) -> None:
    """Two members of a --share group started together once had one client id (made from the
    clock): the broker closed each one's connection when the other connected, in turn."""
    import time as clock

    from edge_sdk.cli.monitor import client_id

    monkeypatch.setattr(clock, "time", lambda: 1796238154.490)
    ids = {client_id() for _ in range(200)}
    assert len(ids) == 200 and all(i.startswith("edge-sdk-monitor-") for i in ids)
