"""device_images/mosquitto/bridge.conf, run: a device-local Mosquitto bridged to a fleet broker
(two real Mosquittos; TLS is left out here, tests/device_images/test_mosquitto_acl.py covers it).
What the device publishes while the fleet broker is down arrives, in order, when it is back;
commands come in; the link's will says "0" when the device's broker dies."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.telemetry import schemas

from mqtt_broker import Broker, MessageLog

pytest.importorskip("paho.mqtt.client")
EXAMPLE = Path(__file__).resolve().parents[2] / "device_images" / "mosquitto" / "bridge.conf"


def bridged(mosquitto: str, folder: Path, fleet: Broker, device: str) -> Broker:
    """A local broker of Broker's own settings plus the example's bridge section, pointed at `fleet`."""
    local = Broker(mosquitto, folder, persistence=True)
    text = EXAMPLE.read_text().replace("DEVICE_ID", device).replace("FLEET_BROKER", f"127.0.0.1:{fleet.port}")
    section = text[text.index("connection "):]
    section = re.sub(r"^bridge_(cafile|certfile|keyfile) .*\n", "", section, flags=re.M)
    section = section.replace("restart_timeout 2 60", "restart_timeout 1")  # the test's patience, not the link's
    local.config.write_text(local.config.read_text() + section)
    return local


def telemetry(device: str, seq: int) -> bytes:
    return json.dumps({"schema": "edge-sdk/telemetry/1", "device_id": device, "ts": schemas.now_ms(), "seq": seq,
                       "window_s": 10, "fps": 30.0, "latency_ms": {"total": {"p50": 5, "p95": 8, "p99": 9}},
                       "frames": {"captured": seq, "processed": seq, "dropped": 0, "cached": 0},
                       "interval": {"seconds": 1, "captured": 1, "processed": 1, "dropped": 0,
                                    "drop_ratio": 0.0}}).encode()


def seqs(log: MessageLog) -> Any:
    return [p["seq"] for p in log.on("telemetry")]


def test_the_bridge_stores_and_forwards_and_carries_commands(mosquitto: str, tmp_path: Path, broker_factory) -> None:
    fleet = broker_factory(persistence=True)  # the watcher's session survives the outage: no race on resubscribing
    local = bridged(mosquitto, tmp_path / "local", fleet, "cam-1").start()
    watcher = MessageLog(fleet.url, ["edge-sdk/cam-1/#"], client_id="watcher", clean=False).start()
    device = MessageLog(local.url, ["edge-sdk/cam-1/cmd"]).start()
    try:
        assert watcher.wait(lambda m: any(x["topic"] == "edge-sdk/cam-1/bridge" and x["payload"] == 1 for x in m), 30)
        device.client.publish("edge-sdk/cam-1/telemetry", telemetry("cam-1", 1), qos=1).wait_for_publish(5)
        assert watcher.wait(lambda m: seqs(watcher) == [1], 30)
        fleet.stop()  # the link is down: the device goes on publishing to its own broker
        for seq in range(2, 12):
            device.client.publish("edge-sdk/cam-1/telemetry", telemetry("cam-1", seq), qos=1).wait_for_publish(5)
        fleet.start()
        assert watcher.wait(lambda m: seqs(watcher) == list(range(1, 12)), 60), seqs(watcher)
        # a command from the fleet side reaches the device
        watcher.client.publish("edge-sdk/cam-1/cmd", b'{"cmd":"ping"}', qos=1).wait_for_publish(5)
        assert device.wait(lambda m: any(x["topic"] == "edge-sdk/cam-1/cmd" for x in m), 30)
        # the device's broker dies (power loss): the link's will on the fleet broker says so
        local.proc.kill()
        local.proc.wait(10)
        local.proc = None
        assert watcher.wait(lambda m: [x["payload"] for x in m if x["topic"] == "edge-sdk/cam-1/bridge"][-1] == 0, 60)
    finally:
        watcher.stop()
        device.stop()
        local.stop()
