"""Home Assistant MQTT discovery for the devices a consumer sees (`edge-sdk monitor --homeassistant`).

For each device, retained config messages under `<prefix>/<component>/<object_id>/config`
(https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery, one message per entity, the
single-component schema every Home Assistant since 2019 reads): connectivity from the device's
retained status, which the broker's will turns `offline`; fps, p99 latency, detections per
telemetry interval and open alerts from its telemetry, available while the status says
`online`. The entities read the device's own topics, so Home Assistant needs no bridge: the
configs only say where to look. When the consumer forgets a device (silent for `--expire`, or
making room at `--max-devices`) it publishes an empty retained payload on each config topic,
which removes the entities and the retained configs.

Topic levels allow `[a-zA-Z0-9_-]` only: a device id with other characters gets them replaced
and a short hash of the id appended, so two ids never share an object id.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Any, Callable, Dict, List, Set, Tuple

from edge_sdk import __version__
from edge_sdk.telemetry.schemas import topic

PREFIX = "homeassistant"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")

# (component, entity key, name, value template, extra config)
ENTITIES: Tuple[Tuple[str, str, str, str, Dict[str, Any]], ...] = (
    ("sensor", "fps", "Frame rate", "{{ value_json.fps }}",
     {"unit_of_measurement": "fps", "state_class": "measurement", "icon": "mdi:speedometer"}),
    ("sensor", "latency_p99", "Latency p99", "{{ value_json.latency_ms.total.p99 }}",
     {"unit_of_measurement": "ms", "device_class": "duration", "state_class": "measurement"}),
    ("sensor", "detections", "Detections per interval", "{{ value_json.interval.detections }}",
     {"state_class": "measurement", "icon": "mdi:face-recognition"}),
    ("sensor", "alerts_open", "Open alerts", "{{ (value_json.alerts_open or []) | count }}",
     {"state_class": "measurement", "icon": "mdi:alert"}),
)


def object_id(device_id: str) -> str:
    """`device_id` as a topic level Home Assistant accepts ([a-zA-Z0-9_-]), unique per id."""
    safe = _UNSAFE.sub("_", device_id)
    if safe == device_id:
        return safe
    return f"{safe[:64]}_{hashlib.sha256(device_id.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def configs(device_id: str, prefix: str = PREFIX) -> List[Tuple[str, Dict[str, Any]]]:
    """The (config topic, payload) of every entity of `device_id`."""
    oid = object_id(device_id)
    status, telemetry = topic(device_id, "status"), topic(device_id, "telemetry")
    device = {"identifiers": [f"edge_sdk_{oid}"], "name": device_id, "manufacturer": "edge-sdk",
              "model": "edge-sdk daemon"}
    origin = {"name": "edge-sdk", "sw_version": __version__}
    out: List[Tuple[str, Dict[str, Any]]] = [(
        f"{prefix}/binary_sensor/edge_sdk_{oid}_connectivity/config",
        {"name": "Connectivity", "unique_id": f"edge_sdk_{oid}_connectivity", "state_topic": status,
         "value_template": "{{ value_json.state }}", "payload_on": "online", "payload_off": "offline",
         "device_class": "connectivity", "device": device, "origin": origin})]
    for component, key, name, template, extra in ENTITIES:
        body: Dict[str, Any] = {
            "name": name, "unique_id": f"edge_sdk_{oid}_{key}", "state_topic": telemetry,
            "value_template": template, "availability_topic": status,
            "availability_template": "{{ value_json.state }}", "payload_available": "online",
            "payload_not_available": "offline", "device": device, "origin": origin}
        body.update(extra)
        out.append((f"{prefix}/{component}/edge_sdk_{oid}_{key}/config", body))
    return out


class Discovery:
    """Announces each device once and removes what it announced when the device is forgotten.
    `publish(topic, payload)` must publish retained (QoS 1) and be callable from any thread."""

    def __init__(self, publish: Callable[[str, bytes], None], prefix: str = PREFIX) -> None:
        if not prefix or _UNSAFE.sub("", prefix.replace("/", "")) != prefix.replace("/", ""):
            raise ValueError(f"discovery prefix {prefix!r}: use letters, digits, '_', '-' and '/'")
        self.prefix = prefix.strip("/")
        self._publish = publish
        self._announced: Set[str] = set()
        self._lock = threading.Lock()

    def seen(self, device_id: str) -> None:
        with self._lock:
            if device_id in self._announced:
                return
            self._announced.add(device_id)
        for name, body in configs(device_id, self.prefix):
            self._publish(name, json.dumps(body, separators=(",", ":")).encode())

    def forget(self, device_id: str) -> None:
        with self._lock:
            if device_id not in self._announced:
                return
            self._announced.discard(device_id)
        for name, _ in configs(device_id, self.prefix):
            self._publish(name, b"")

    def announced(self) -> int:
        with self._lock:
            return len(self._announced)
