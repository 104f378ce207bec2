"""The rollout's one connection to the broker: what every device says (retained status through
edge_sdk.telemetry.fleet.Fleet, the latest `shadow` message, command responses, alerts) and the
signed commands it sends.

Every message is checked by the fleet (schema, the topic's device) before it is kept. paho
reconnects on its own after the broker goes away; each connect subscribes again, and the devices
publish their status again on their own reconnect, so a broker restart loses nothing the
rollout reads. Waiting is on a condition signalled by each message (`wait`); a stop request
(`interrupt`, what SIGTERM or SIGINT calls) is raised from the next wait as Stopped.
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from edge_sdk.errors import Stopped
from edge_sdk.telemetry.broker import BrokerConfig, make_client
from edge_sdk.telemetry.fleet import Fleet
from edge_sdk.telemetry.guard import CallbackGuard
from edge_sdk.telemetry.schemas import MAX_BYTES, split_topic, topic
from edge_sdk.telemetry.signing import sign
from edge_sdk.validate import UntrustedInput, dumps, loads_untrusted

SUFFIXES = ("status", "shadow", "cmd/response", "alerts")
Arrived = Tuple[Dict[str, Any], float]  # a message and when it arrived (monotonic seconds)
STOP_CHECK_S = 0.5  # the longest a wait goes without looking for a stop request (interrupt)


class Link:
    """`start()` connects and returns once the retained statuses are in; `stop()` disconnects."""

    def __init__(self, cfg: BrokerConfig, secret: Optional[bytes] = None, mqtt: Any = None) -> None:
        self.cfg = cfg
        self.secret = secret
        self.fleet = Fleet(expire_s=0)
        self.run_id = uuid.uuid4().hex[:10]  # command ids are accepted once: each run has its own
        self._cond = threading.Condition()
        self._views: Dict[str, Any] = {}  # device -> its DeviceView (the fleet updates it in place)
        self._shadows: Dict[str, Arrived] = {}
        self._responses: Dict[str, List[Dict[str, Any]]] = {}
        self._alerts: Dict[str, List[Arrived]] = {}
        self._synced = threading.Event()
        self._sent = 0
        self._stop: Optional[int] = None  # a stop request's signal, raised from the next wait
        self._stop_raised = False
        guard = CallbackGuard("rollout")
        self._client = make_client(cfg, f"edge-sdk-rollout-{self.run_id}", mqtt)
        self._client.on_connect = guard(self._on_connect)
        self._client.on_unsubscribe = guard(self._on_unsubscribe)
        self._client.on_message = guard(self._on_message)

    # -- connection ----------------------------------------------------------------------------
    def start(self, timeout_s: float) -> bool:
        """Connect; True once the retained statuses have arrived, False when the broker did not
        answer within `timeout_s` (the connection keeps trying)."""
        self._client.connect_async(self.cfg.host, self.cfg.port, keepalive=self.cfg.keepalive)
        self._client.loop_start()
        deadline = time.monotonic() + timeout_s
        while not self._synced.wait(max(0.0, min(deadline - time.monotonic(), STOP_CHECK_S))):
            self._stopped()
            if time.monotonic() >= deadline:
                return False
        return True

    def interrupt(self, signum: int) -> None:
        """A stop request (from a signal handler: it only sets a flag): the next wait raises
        Stopped, within STOP_CHECK_S; the waits after that (the cleanup's) wait as before."""
        self._stop = signum

    def _stopped(self) -> None:
        if self._stop is not None and not self._stop_raised:
            self._stop_raised = True
            raise Stopped(self._stop)

    def stop(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            return
        client.subscribe([(f"edge-sdk/+/{suffix}", 1) for suffix in SUFFIXES])
        # retained messages come right after the SUBACK: once a later packet is answered, they are in
        client.unsubscribe(f"edge-sdk/rollout-{self.run_id}/sync")

    def _on_unsubscribe(self, client: Any, userdata: Any, mid: Any, reasons: Any, properties: Any) -> None:
        self._synced.set()
        with self._cond:
            self._cond.notify_all()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        parsed = split_topic(msg.topic)
        if parsed is None or parsed[1] not in SUFFIXES:
            return
        device, suffix = parsed
        try:
            payload = loads_untrusted(msg.payload, MAX_BYTES[suffix], what=suffix)
        except UntrustedInput:
            self.fleet.refuse()
            return
        view, _ = self.fleet.apply(msg.topic, payload, raw=msg.payload)
        if view is None:
            return
        now = time.monotonic()
        with self._cond:
            self._views[device] = view
            if suffix == "shadow":
                self._shadows[device] = (payload, now)
            elif suffix == "cmd/response":
                self._responses.setdefault(str(payload.get("id")), []).append(payload)
            elif suffix == "alerts" and payload.get("state") == "raised":
                self._alerts.setdefault(device, []).append((payload, now))
            self._cond.notify_all()

    # -- reading -------------------------------------------------------------------------------
    def wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `predicate()` holds, checked after each message (and once a second)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                self._stopped()
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, STOP_CHECK_S))
            return True

    def idle(self, timeout_s: float) -> None:
        """Wait for the next message (at most `timeout_s`)."""
        self._stopped()
        with self._cond:
            self._cond.wait(min(timeout_s, STOP_CHECK_S))
        self._stopped()

    def status(self, device: str) -> Dict[str, Any]:
        """The device's retained status ({} when none was seen)."""
        with self._cond:
            view = self._views.get(device)
        return view.status if view is not None else {}

    def online(self) -> List[str]:
        with self._cond:
            views = list(self._views.values())
        return sorted(v.device_id for v in views if v.state == "online")

    def shadow(self, device: str) -> Optional[Arrived]:
        with self._cond:
            return self._shadows.get(device)

    def responses(self, cid: str) -> List[Dict[str, Any]]:
        with self._cond:
            return list(self._responses.get(cid, []))

    def alerts(self, device: str, name: str, since: float) -> List[Dict[str, Any]]:
        """The `name` alerts the device raised after `since` (monotonic seconds)."""
        with self._cond:
            return [a for a, at in self._alerts.get(device, []) if a.get("alert") == name and at >= since]

    # -- commands ------------------------------------------------------------------------------
    def send(self, device: str, cmd: str, args: Optional[Dict[str, Any]] = None) -> str:
        """Publish a command (signed with the secret) for one device; its id."""
        self._sent += 1
        cid = f"rollout-{self.run_id}-{self._sent}"
        command: Dict[str, Any] = {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": cmd}
        if args:
            command["args"] = args
        if self.secret is not None:
            command = sign(command, self.secret, device)
        self._client.publish(topic(device, "cmd"), dumps(command), qos=1)
        return cid
