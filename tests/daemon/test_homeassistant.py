"""Home Assistant MQTT discovery from `edge-sdk monitor --homeassistant`: config messages as Home
Assistant's discovery schema has them (topic levels, unique ids, the device block, availability
from the status that the will turns offline), templates that read fields the schemas define,
published retained through a real Mosquitto when a device appears and removed (empty retained
payload) when the monitor forgets it."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict

import pytest

from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.discovery import Discovery, configs, object_id
from edge_sdk.telemetry.fleet import Fleet

from mqtt_broker import MessageLog
from test_monitor_bounds import monitor_factory, publish, status, telemetry  # noqa: F401

pytest.importorskip("paho.mqtt.client")
TOPIC = re.compile(r"^homeassistant/(sensor|binary_sensor)/[a-zA-Z0-9_-]+/config$")


def field_exists(schema: Dict[str, Any], path: str) -> bool:
    """Whether `a.b.c` names a property the schema defines (through additionalProperties too)."""
    node = schema
    for part in path.split("."):
        props = node.get("properties", {})
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return True


@pytest.mark.parametrize("device", ["cam-1", "a.b", "a_b", 'we"ird id\\', "ü"])
def test_configs_follow_the_discovery_schema(device: str) -> None:
    found = configs(device)
    assert len(found) == 5
    ids = set()
    tel, st = schemas.load_schema("edge-sdk/telemetry/1"), schemas.load_schema("edge-sdk/status/1")
    for name, body in found:
        assert TOPIC.match(name), name
        assert name.split("/")[2] == body["unique_id"]  # object id = unique id, as HA recommends
        ids.add(body["unique_id"])
        assert body["device"]["identifiers"] == [f"edge_sdk_{object_id(device)}"] and body["device"]["name"] == device
        assert body["origin"]["name"] == "edge-sdk"
        assert body["state_topic"] in (f"edge-sdk/{device}/telemetry", f"edge-sdk/{device}/status")
        for template in re.findall(r"value_json\.([a-z_.0-9]+)", body["value_template"]):
            on = st if body["state_topic"].endswith("/status") else tel
            assert field_exists(on, template), (template, body)
        if name.startswith("homeassistant/binary_sensor/"):
            assert body["device_class"] == "connectivity" and (body["payload_on"], body["payload_off"]) == \
                ("online", "offline") and set(st["properties"]["state"]["enum"]) >= {"online", "offline"}
        else:
            assert body["availability_topic"] == f"edge-sdk/{device}/status"
            assert (body["payload_available"], body["payload_not_available"]) == ("online", "offline")
    assert len(ids) == 5
    assert {b["name"] for _, b in found} == {"Connectivity", "Frame rate", "Latency p99", "Detections per interval",
                                             "Open alerts"}


def test_distinct_ids_never_share_an_object_id() -> None:
    ids = ["a.b", "a_b", "a/b", "a b", "a:b", "ä_b"]
    assert len({object_id(i) for i in ids}) == len(ids)
    assert object_id("cam-1_X") == "cam-1_X"
    with pytest.raises(ValueError):
        Discovery(lambda *a: None, "home assistant")


def test_a_forgotten_device_has_its_configs_removed() -> None:
    published = []
    now = [0.0]
    d = Discovery(lambda name, body: published.append((name, body)))
    fleet = Fleet(max_devices=2, expire_s=10, clock=lambda: now[0], on_forget=d.forget)
    for name in ("a", "b", "c"):  # c takes the place of a
        fleet.update(f"edge-sdk/{name}/telemetry", telemetry(name, 1))
        d.seen(name)
    d.seen("b")  # announced once
    removed = [n for n, body in published if body == b""]
    assert removed == [n for n, _ in configs("a")]
    assert len(published) == 3 * 5 + 5
    now[0] = 11.0
    fleet.expire()
    assert [n for n, body in published[20:]] == [n for n, _ in configs("b")] + [n for n, _ in configs("c")]
    assert all(body == b"" for _, body in published[20:]) and d.announced() == 0


def test_the_monitor_announces_and_removes_through_a_real_broker(broker, tmp_path: Path, monitor_factory) -> None:
    mon = monitor_factory(broker.url, tmp_path, "--homeassistant", "--expire", "2")
    log = MessageLog(broker.url, ["homeassistant/#"]).start()
    try:
        publish(log.client, "edge-sdk/cam-9/status", status("cam-9", 1, "online", schemas.now_ms(), "i9"), retain=True)
        want = {name: body for name, body in configs("cam-9")}

        def announced(messages: Any) -> bool:
            return {m["topic"] for m in messages if isinstance(m["payload"], dict)} >= set(want)

        assert log.wait(announced, 30), [m["topic"] for m in log.messages]
        for m in log.messages:
            if isinstance(m["payload"], dict):
                assert m["payload"] == json.loads(json.dumps(want[m["topic"]]))

        def removed(messages: Any) -> bool:
            return {m["topic"] for m in messages if m["payload"] == b""} >= set(want)

        # the retained status was its only message: after 2 s of silence the monitor forgets it
        assert log.wait(removed, 30), [(m["topic"], m["payload"]) for m in log.messages][-10:]
        assert all(m["retain"] is False for m in log.messages if m["payload"] == b"")  # live, not replayed
    finally:
        log.stop()


def test_discovery_is_refused_in_a_shared_subscription_group() -> None:
    """A group member sees part of each device's messages and would remove live devices."""
    from typer.testing import CliRunner

    from edge_sdk.cli import app

    result = CliRunner().invoke(app, ["monitor", "--broker", "mqtt://127.0.0.1:1", "--homeassistant", "--share", "g"])
    assert result.exit_code == 2
    assert "--homeassistant cannot be combined with --share" in result.output
