"""Two daemons with one device id fight: each connect with the shared client id kicks the other
off the broker, and every kick publishes a false `offline` will. This finds such a clash before
the daemon connects for real.

A probe connection with a client id of its own (so nobody is kicked) reads the retained status.
Nothing, or `offline`: the id is free. `online`: either another daemon is alive, or one died in a
way the broker has not noticed yet (power cut: the will comes after 1.5 keepalives). The probe
tells them apart by asking: it sends a `ping` (signed when the device has a secret) and waits
`wait_s` for the answer. An answer means a live instance; silence means a stale status, and the
start goes on with a warning. Where the broker's ACL refuses the probe, the check is skipped with
a warning.
"""
from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, Dict, Optional

from edge_sdk.telemetry.signing import sign
from edge_sdk.telemetry.guard import CallbackGuard
from edge_sdk.telemetry.broker import BrokerConfig, make_client
from edge_sdk.telemetry.schemas import topic
from edge_sdk.validate import UntrustedInput, dumps, loads_untrusted

log = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 1024


def live_instance(cfg: BrokerConfig, device_id: str, secret: Optional[bytes], wait_s: float,
                  mqtt: Any = None) -> Optional[Dict[str, Any]]:
    """The retained status of another live daemon that uses `device_id`, or None."""
    probe = f"instance-check-{uuid.uuid4().hex[:12]}"
    status_topic, response_topic = topic(device_id, "status"), topic(device_id, "cmd/response")
    cond = threading.Condition()
    state: Dict[str, Any] = {"connected": False, "refused": None, "synced": False, "status": None, "answered": False}
    guard = CallbackGuard("instance check")

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        with cond:
            if reason.is_failure:
                state["refused"] = str(reason)
            else:
                state["connected"] = True
                client.subscribe([(status_topic, 0), (response_topic, 0)])
                # the broker sends retained messages right after the SUBACK, so once the answer
                # to a later packet is back, the retained status (if any) has arrived
                client.unsubscribe(topic(device_id, "check/" + probe))
            cond.notify_all()

    def on_unsubscribe(client: Any, userdata: Any, mid: Any, reasons: Any, properties: Any) -> None:
        with cond:
            state["synced"] = True
            cond.notify_all()

    def on_message(client: Any, userdata: Any, msg: Any) -> None:
        try:
            body = loads_untrusted(msg.payload, MAX_MESSAGE, what="status")
        except UntrustedInput:
            return
        if not isinstance(body, dict):
            return
        with cond:
            if msg.topic == status_topic:
                state["status"] = body
            elif body.get("id") == probe:
                state["answered"] = True
            cond.notify_all()

    client = make_client(cfg, f"edge-sdk-{device_id}-check-{probe[-6:]}", mqtt)
    client.on_connect = guard(on_connect)
    client.on_unsubscribe = guard(on_unsubscribe)
    client.on_message = guard(on_message)
    try:
        client.connect_async(cfg.host, cfg.port, keepalive=cfg.keepalive)
        client.loop_start()
        with cond:
            cond.wait_for(lambda: state["synced"] or state["refused"] is not None, max(wait_s, 2.0))
            if not state["synced"]:
                log.warning("could not check whether another daemon uses device id %s (%s); starting anyway",
                            device_id, state["refused"] or f"no answer from {cfg.redacted_url()}")
                return None
            status = state["status"]
            if not isinstance(status, dict) or status.get("state") != "online":
                return None
        command = {"schema": "edge-sdk/cmd/1", "id": probe, "cmd": "ping"}
        if secret is not None:
            command = sign(command, secret, device_id)
        client.publish(topic(device_id, "cmd"), dumps(command), qos=1)
        with cond:
            cond.wait_for(lambda: state["answered"] or (state["status"] or {}).get("state") != "online", wait_s)
            if state["answered"]:
                return status
        log.warning("the retained status of %s says online (instance %s) but nothing answered a ping within %g s; "
                    "taking it for a stale status", device_id, status.get("instance_id"), wait_s)
        return None
    finally:
        client.disconnect()
        client.loop_stop()
