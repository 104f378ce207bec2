"""The MQTT publisher against a real Mosquitto: delivery, the on-disk queue across a broker
restart, QoS-0 messages kept off the disk, the in-flight window, a full disk and a corrupt queue
file, TLS with a CA made here and client certificates, a password file. Oracles: a subscriber of
the test's own, the SQLite file read on a connection of the test's own, a spy on paho's API."""
from __future__ import annotations

import socket
import sqlite3
import ssl
import threading
from contextlib import closing
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.broker import BrokerConfig
from edge_sdk.telemetry.publisher import MqttPublisher

from full_disk import FullDisk, page_count
from mqtt_broker import SlowLink, free_port, make_password_file, make_tls_material
from polling import wait_until

pytest.importorskip("paho.mqtt.client")

STATUS = {"started_ts": 1, "versions": {"edge_sdk": "test"}, "target": None, "backend": "onnxruntime",
          "bundle_hash": "abc", "source": "synthetic://faces"}


def publisher(cfg: BrokerConfig, tmp_path: Path, device: str = "dev-1", **kwargs: Any) -> MqttPublisher:
    pub = MqttPublisher(cfg, device, tmp_path / f"{device}.sqlite3", **kwargs)
    pub.set_status(STATUS)
    return pub.start()


class Alerts(list):
    """Records what the publisher hands its on_alert hook: (name, active, message, severity)."""

    def __call__(self, name: str, active: bool, message: str, severity: str) -> None:
        self.append((name, active, message, severity))

    def states(self, name: str) -> List[bool]:
        return [a[1] for a in list(self) if a[0] == name]


def dead_url() -> str:
    """A broker address where nothing listens: the broker is away."""
    return f"mqtt://127.0.0.1:{free_port()}"


def on_disk(path: Path) -> List[Tuple[str, int]]:
    """(topic, qos) of every queued row, read without the queue's code."""
    with closing(sqlite3.connect(str(path))) as db:
        return [(str(t), int(q)) for t, q in db.execute("SELECT topic, qos FROM q ORDER BY id")]


def frame(i: int) -> Dict[str, Any]:
    return {"kind": "frame", "frame": i, "frame_ts": i / 30, "cached": False, "detections": []}


def body(i: int) -> Dict[str, Any]:
    return {"window_s": 10, "fps": float(i), "latency_ms": {}, "interval": {"seconds": 1, "captured": 0, "processed": 0,
            "dropped": 0, "drop_ratio": 0.0},
            "frames": {"captured": i, "processed": i, "dropped": 0, "cached": 0}}


@pytest.mark.parametrize("kwargs,problem", [
    ({"url": "http://127.0.0.1:1883"}, "url"), ({"url": "mqtt://"}, "url"),
    ({"queue_max_bytes": 0}, "queue_max_bytes"), ({"inflight": 0}, "inflight"),
])
def test_bad_settings_are_config_errors(kwargs: Dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        BrokerConfig(**kwargs)


def test_url_credentials_and_ports() -> None:
    cfg = BrokerConfig(url="mqtts://alice:s%40cret@broker.example")
    assert (cfg.host, cfg.port, cfg.tls) == ("broker.example", 8883, True)
    assert cfg.credentials() == ("alice", "s@cret")
    assert "s@cret" not in cfg.redacted_url()


def test_telemetry_arrives_in_order_and_validates(broker, message_log, tmp_path: Path) -> None:
    log = message_log(broker.url, ["edge-sdk/#"])
    pub = publisher(BrokerConfig(url=broker.url), tmp_path)
    for i in range(50):
        pub.publish("telemetry", body(i))
    assert log.wait(lambda m: len([x for x in m if x["topic"].endswith("/telemetry")]) == 50)
    pub.stop(final_status=dict(STATUS, reason="stopped"))
    tel = log.on("telemetry")
    assert [t["seq"] for t in tel] == list(range(1, 51))
    assert [t["fps"] for t in tel] == [float(i) for i in range(50)]
    for message in tel + log.on("status"):
        assert schemas.errors(message) == []
    assert log.wait(lambda m: any(x["payload"].get("state") == "offline" for x in m if x["topic"].endswith("/status")))
    assert pub.stats()["queued"] == 0


def test_broker_restart_loses_nothing(broker_factory, message_log, tmp_path: Path) -> None:
    broker = broker_factory(persistence=True)
    # a persistent session: the broker keeps queuing for the subscriber across its restart
    log = message_log(broker.url, ["edge-sdk/+/telemetry"], client_id="edge-sdk-test-sub", clean=False)
    cfg = BrokerConfig(url=broker.url, reconnect_min_s=0.1, reconnect_max_s=0.5)
    pub = publisher(cfg, tmp_path)
    for i in range(20):
        pub.publish("telemetry", body(i))
    assert log.wait(lambda m: len(m) >= 21)  # 20 + the probe
    broker.stop()
    for i in range(20, 220):  # broker down: these wait on disk
        pub.publish("telemetry", body(i))
    assert _wait_for(lambda: pub.stats()["queued"] >= 150)
    broker.start()
    assert log.wait(lambda m: len([x for x in m if x["topic"].endswith("/telemetry")]) >= 220, timeout=30)
    pub.stop()
    seqs = [t["seq"] for t in log.on("telemetry")]
    unique = list(dict.fromkeys(seqs))  # QoS 1 may repeat a message; consumers drop repeats by seq
    assert unique == list(range(1, 221)), "seq must be contiguous and in order"
    assert pub.stats()["overflow"] == 0


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    return wait_until(predicate, timeout)


@pytest.fixture
def secure_broker(broker_factory, tmp_path: Path):
    tls = make_tls_material(tmp_path / "tls")
    pw = make_password_file(tmp_path / "passwd", {"device": "dev-pass", "ops": "ops-pass"})
    return broker_factory(tls=tls, password_file=pw), tls


def test_tls_with_password(secure_broker, message_log, tmp_path: Path) -> None:
    broker, tls = secure_broker
    assert broker.url.startswith("mqtts://")
    log = message_log(broker.url, ["edge-sdk/#"], username="ops", password="ops-pass", ca=tls["ca"])
    cfg = BrokerConfig(url=broker.url, username="device", password="dev-pass", ca_file=str(tls["ca"]),
                       cert_file=str(tls["client_cert"]), key_file=str(tls["client_key"]))
    pub = publisher(cfg, tmp_path)
    pub.publish("telemetry", body(1))
    assert log.wait(lambda m: any(x["topic"] == "edge-sdk/dev-1/telemetry" for x in m))
    pub.stop()


@pytest.mark.parametrize("creds", [(None, None), ("device", "wrong")])
def test_a_refused_login_is_a_typed_error_an_alert_and_a_status(secure_broker, tmp_path: Path, creds) -> None:
    from edge_sdk.telemetry.publisher import BrokerRefusedError

    broker, tls = secure_broker
    cfg = BrokerConfig(url=broker.url, username=creds[0], password=creds[1], ca_file=str(tls["ca"]),
                       reconnect_min_s=0.1, reconnect_max_s=0.5)
    pub = MqttPublisher(cfg, "dev-1", tmp_path / "dev-1.sqlite3")
    alerts = Alerts()
    pub.on_alert = alerts
    pub.start()
    try:
        with pytest.raises(BrokerRefusedError, match="refused the connection.*check \\[mqtt\\] username and password"):
            pub.wait_connected(10)
        stats = pub.stats()
        assert stats["connected"] is False and "refused the connection" in stats["refused"]
        # paho retries every 0.1-0.5 s: let the broker refuse several more attempts first
        assert wait_until(lambda: broker.log.read_text().count("not authorised") >= 3, 10), broker.log.read_text()[-2000:]
        assert alerts.states("broker_refused") == [True]  # raised once, however often paho retries
        assert pub.error is None  # detection goes on; telemetry waits on disk
    finally:
        pub.stop()


@pytest.fixture
def cert_broker(broker_factory, tmp_path: Path):
    tls = make_tls_material(tmp_path / "tls")
    return broker_factory(tls=tls, require_certificate=True), tls


def test_the_client_certificate_reaches_a_broker_that_requires_one(cert_broker, message_log, tmp_path: Path) -> None:
    broker, tls = cert_broker
    # the broker really refuses a client without a certificate: a bare TLS handshake fails
    context = ssl.create_default_context(cafile=str(tls["ca"]))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                conn.recv(1)
    log = message_log(broker.url, ["edge-sdk/#"], ca=tls["ca"], cert=tls["client_cert"], key=tls["client_key"])
    cfg = BrokerConfig(url=broker.url, ca_file=str(tls["ca"]), cert_file=str(tls["client_cert"]),
                       key_file=str(tls["client_key"]))
    pub = publisher(cfg, tmp_path)
    pub.publish("telemetry", body(7))
    assert log.wait(lambda m: any(x["topic"] == "edge-sdk/dev-1/telemetry" for x in m), timeout=10)
    pub.stop()
    assert [t["fps"] for t in log.on("telemetry")] == [7.0]


@pytest.mark.parametrize("broker_up", [False, True])
def test_qos0_messages_never_reach_the_disk(broker_factory, message_log, tmp_path: Path, broker_up: bool) -> None:
    url = dead_url()
    log = None
    if broker_up:
        url = broker_factory().url
        log = message_log(url, ["edge-sdk/#"])
    pub = publisher(BrokerConfig(url=url), tmp_path)
    for i in range(40):
        pub.publish("detections", frame(i), qos=0)
        if i % 8 == 0:
            pub.publish("telemetry", body(i))
    if log is not None:
        assert log.wait(lambda m: len(log.on("detections")) == 40 and len(log.on("telemetry")) == 5)
    pub.stop(timeout=1.0)
    rows = on_disk(tmp_path / "dev-1.sqlite3")
    assert all(qos == 1 for _t, qos in rows), rows
    if broker_up:
        assert rows == []  # everything acknowledged
        assert [d["frame"] for d in log.on("detections")] == list(range(40))
    else:
        assert rows == [("edge-sdk/dev-1/telemetry", 1)] * 5  # the durable ones wait for the next run
        assert pub.stats()["detections_dropped"] == 40  # never sent, and said so


def test_qos0_buffer_keeps_the_newest_while_the_broker_is_away(broker_factory, message_log, tmp_path: Path) -> None:
    broker = broker_factory(persistence=True, queue_qos0=True)
    # a persistent session that the broker keeps, QoS-0 messages included, across its restart
    log = message_log(broker.url, ["edge-sdk/+/detections"], client_id="edge-sdk-test-q0", clean=False)
    broker.stop()
    pub = publisher(BrokerConfig(url=broker.url, reconnect_min_s=0.1, reconnect_max_s=0.5), tmp_path, volatile_max=10)
    for i in range(30):
        pub.publish("detections", frame(i), qos=0)
    assert wait_until(lambda: pub.stats()["detections_dropped"] == 20, 10)
    broker.start()
    assert log.wait(lambda m: len(log.on("detections")) >= 10, timeout=20)
    pub.stop()
    assert [d["frame"] for d in log.on("detections")] == list(range(20, 30))
    assert pub.stats()["detections_dropped"] == 20


class InflightSpy:
    """Counts QoS >= 1 messages handed to paho and not yet acknowledged, through paho's API."""

    def __init__(self, client: Any) -> None:
        self.lock = threading.Lock()
        self.open: set = set()
        self.early: set = set()  # acknowledged before publish() returned its mid
        self.peak = 0
        self.handed = 0
        real_publish, real_ack = client.publish, client.on_publish

        def publish(topic: str, payload: Any = None, qos: int = 0, retain: bool = False, properties: Any = None) -> Any:
            info = real_publish(topic, payload, qos=qos, retain=retain, properties=properties)
            if qos > 0:
                with self.lock:
                    self.handed += 1
                    if info.mid in self.early:
                        self.early.discard(info.mid)
                    else:
                        self.open.add(info.mid)
                    self.peak = max(self.peak, len(self.open))
            return info

        def on_publish(c: Any, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
            with self.lock:
                if mid in self.open:
                    self.open.discard(mid)
                else:
                    self.early.add(mid)
            real_ack(c, userdata, mid, reason, properties)

        client.publish = publish
        client.on_publish = on_publish


@pytest.mark.parametrize("delay_s,n", [(0.0, 200), (0.12, 12)], ids=["loopback", "slow link"])
def test_inflight_limit_holds_under_load(broker, message_log, tmp_path: Path, delay_s: float, n: int) -> None:
    log = message_log(broker.url, ["edge-sdk/+/telemetry"])
    # on a slow link acknowledgements take longer than the publisher thread's wake-up: a window
    # that does not count what is still unacknowledged shows there
    link = SlowLink(broker, delay_s) if delay_s else None
    pub = MqttPublisher(BrokerConfig(url=link.url if link else broker.url, inflight=1), "dev-1", tmp_path / "dev-1.sqlite3")
    spy = InflightSpy(pub.client)
    pub.set_status(STATUS)
    pub.start()
    try:
        half = n // 2
        for part in range(2):  # at once: a backlog; a status update in the middle of it waits its turn too
            for i in range(half * part, half * part + half):
                pub.publish("telemetry", body(i))
            assert log.wait(lambda m: len(log.on("telemetry")) >= half * part + max(half // 10, 1), timeout=30)
            pub.set_status(dict(STATUS, bundle_hash=f"hash-{part}"))
        assert log.wait(lambda m: len(log.on("telemetry")) == n, timeout=30)
        pub.stop()
    finally:
        if link is not None:
            link.close()
    assert spy.handed >= n + 2  # the telemetry + the status at least twice: the spy saw the traffic
    assert spy.peak == 1, f"{spy.peak} messages were unacknowledged at once with inflight = 1"
    assert [t["seq"] for t in log.on("telemetry")] == list(range(1, n + 1))


def test_full_disk_with_the_broker_away_drops_the_oldest_and_goes_on(broker_factory, message_log, tmp_path: Path,
                                                                     monkeypatch) -> None:
    broker = broker_factory(persistence=True)
    log = message_log(broker.url, ["edge-sdk/+/telemetry"], client_id="edge-sdk-test-full", clean=False)
    broker.stop()
    FullDisk(monkeypatch, tmp_path / "queue", pages=10)  # 5 pages of tables, ~20 KB for messages
    cfg = BrokerConfig(url=broker.url, reconnect_min_s=0.1, reconnect_max_s=0.5)
    pub = MqttPublisher(cfg, "dev-1", tmp_path / "queue" / "dev-1.sqlite3")
    alerts = Alerts()
    pub.on_alert = alerts
    pub.set_status(STATUS)
    pub.start()
    for i in range(300):  # ~75 KB of telemetry
        pub.publish("telemetry", body(i))
    assert wait_until(lambda: sum(pub.stats()[k] for k in ("queued", "telemetry_dropped", "overflow")) == 300, 20)
    assert pub.error is None, "the publisher must survive a full disk"
    dropped = pub.stats()["telemetry_dropped"]
    assert dropped > 0 and alerts.states("telemetry_queue") == [True]
    assert "full" in [a for a in alerts if a[0] == "telemetry_queue"][0][2]
    assert page_count(tmp_path / "queue" / "dev-1.sqlite3") <= 10
    broker.start()
    kept = 300 - dropped
    assert log.wait(lambda m: len({t["seq"] for t in log.on("telemetry")}) >= kept, timeout=30)
    pub.stop()
    seqs = sorted({t["seq"] for t in log.on("telemetry")})
    assert seqs == list(range(301 - kept, 301)), "the newest messages arrive; the oldest were dropped"


def test_start_on_a_full_disk_delivers_from_memory_and_recovers(broker, message_log, tmp_path: Path, monkeypatch) -> None:
    log = message_log(broker.url, ["edge-sdk/+/telemetry"])
    disk = FullDisk(monkeypatch, tmp_path / "queue", pages=1)  # not one page to spare
    path = tmp_path / "queue" / "dev-1.sqlite3"
    pub = MqttPublisher(BrokerConfig(url=broker.url), "dev-1", path, disk_retry_s=0.3)
    alerts = Alerts()
    pub.on_alert = alerts
    pub.set_status(STATUS)
    pub.start()
    for i in range(20):
        pub.publish("telemetry", body(i))
    assert log.wait(lambda m: len(log.on("telemetry")) == 20, timeout=10)
    assert [t["seq"] for t in log.on("telemetry")] == list(range(1, 21))
    assert alerts.states("telemetry_queue") == [True]
    disk.free()  # the publisher tries the disk again by itself and clears the alert
    assert wait_until(lambda: alerts.states("telemetry_queue") == [True, False], 10), alerts
    for i in range(20, 25):
        pub.publish("telemetry", body(i))
    assert log.wait(lambda m: len(log.on("telemetry")) == 25, timeout=10)
    pub.stop()
    assert pub.error is None and on_disk(path) == []  # the queue file works again, and is drained


@pytest.mark.parametrize("damage", ["garbage", "deleted"])
def test_seq_stays_monotonic_when_the_queue_file_is_lost(broker, message_log, tmp_path: Path, damage: str, caplog) -> None:
    log = message_log(broker.url, ["edge-sdk/+/telemetry"])
    cfg = BrokerConfig(url=broker.url)
    pub = publisher(cfg, tmp_path)
    for i in range(5):
        pub.publish("telemetry", body(i))
    assert log.wait(lambda m: len(log.on("telemetry")) == 5)
    pub.stop()
    path = tmp_path / "dev-1.sqlite3"
    for leftover in tmp_path.glob("dev-1.sqlite3-*"):
        leftover.unlink()
    if damage == "garbage":
        path.write_bytes(b"\x13\x37 not a database " * 500)
    else:
        path.unlink()
    pub = publisher(cfg, tmp_path)  # starts: a corrupt file is moved aside
    for i in range(5, 10):
        pub.publish("telemetry", body(i))
    assert log.wait(lambda m: len(log.on("telemetry")) == 10)
    pub.stop()
    assert [t["seq"] for t in log.on("telemetry")] == list(range(1, 11))
    assert [t["fps"] for t in log.on("telemetry")] == [float(i) for i in range(10)]
    if damage == "garbage":
        assert len(list(tmp_path.glob("dev-1.sqlite3.corrupt-*"))) == 1


class GoneBad:
    """Stands in for the queue's connection once its file went bad under it: every statement
    fails as SQLite fails on a corrupt file (sqlite_sequence unreadable too)."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real
        self.in_transaction = False

    def execute(self, *args: Any) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    def close(self) -> None:
        self.real.close()


def test_a_queue_file_gone_bad_while_running_loses_nothing_sent_after_it(broker, message_log, tmp_path: Path) -> None:
    log = message_log(broker.url, ["edge-sdk/+/telemetry"])
    # acknowledgements arrive late: rows of the old file are still in flight when it goes bad
    link = SlowLink(broker, 0.3)
    pub = publisher(BrokerConfig(url=link.url), tmp_path)
    try:
        for i in range(30):  # the cursor passes 30 in the old file
            pub.publish("telemetry", body(i))
        assert log.wait(lambda m: len(log.on("telemetry")) >= 20, timeout=20)
        for i in range(30, 40):
            pub.publish("telemetry", body(i))  # in flight behind the slow link
        assert wait_until(lambda: pub._cursor >= 40, 10)
        pub.queue.db = GoneBad(pub.queue.db)  # the next write finds the file corrupt and starts a new one
        for i in range(40, 80):
            pub.publish("telemetry", body(i))
        # neither skipped by the cursor nor deleted unsent by the late acks of old rows with the same ids
        assert log.wait(lambda m: {t["fps"] for t in log.on("telemetry")} >= {float(i) for i in range(40, 80)},
                        timeout=20), "telemetry queued after the replacement must all be sent"
        pub.stop()
    finally:
        link.close()
    assert pub.error is None
    assert len(list(tmp_path.glob("dev-1.sqlite3.corrupt-*"))) == 1
    assert on_disk(tmp_path / "dev-1.sqlite3") == []
