"""The MQTT publisher against a real Mosquitto: delivery, the on-disk queue across a broker
restart, TLS with a CA made here, a password file."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.mqtt import BrokerConfig, MqttPublisher

from mqtt_broker import make_password_file, make_tls_material
from polling import wait_until

pytest.importorskip("paho.mqtt.client")

STATUS = {"started_ts": 1, "versions": {"edge_sdk": "test"}, "target": None, "backend": "onnxruntime",
          "bundle_hash": "abc", "source": "synthetic://faces"}


def publisher(cfg: BrokerConfig, tmp_path: Path, device: str = "dev-1") -> MqttPublisher:
    pub = MqttPublisher(cfg, device, tmp_path / f"{device}.sqlite3")
    pub.set_status(STATUS)
    return pub.start()


def body(i: int) -> Dict[str, Any]:
    return {"window_s": 10, "fps": float(i), "latency_ms": {}, "interval": {"seconds": 1, "captured": 0, "processed": 0,
            "dropped": 0, "drop_ratio": 0.0},
            "frames": {"captured": i, "processed": i, "dropped": 0, "cached": 0}}


@pytest.mark.parametrize("url,problem", [
    ("http://127.0.0.1:1883", "url"), ("mqtt://", "url"),
])
def test_bad_urls_are_config_errors(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        BrokerConfig(url=url)


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


@pytest.mark.parametrize("creds", [(None, None), ("ops", "wrong")])
def test_without_the_password_the_broker_refuses(secure_broker, message_log, creds) -> None:
    broker, tls = secure_broker
    log = message_log(broker.url, ["edge-sdk/#"], wait=False, username=creds[0], password=creds[1], ca=tls["ca"])
    assert log.wait(lambda m: log.refused is not None, timeout=10)
    assert not log.connected.is_set()
