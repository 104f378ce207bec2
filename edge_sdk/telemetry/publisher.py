"""Publishing telemetry: an MQTT client (paho-mqtt 2.x) behind an on-disk queue, or JSON lines.

The frame loop and the reporter only ever call :meth:`Publisher.publish`, which puts a dict on a
bounded in-memory queue and returns at once. A publisher thread stamps the per-topic ``seq``,
appends durable messages (QoS >= 1) to an SQLite queue on disk and hands queued messages to paho
while the broker is connected; a row leaves the disk queue only when the broker acknowledged it.
While the broker is unreachable messages wait on disk and go out in order when it returns;
the queue is bounded by messages and by payload bytes, beyond either the oldest messages are
dropped and counted (``publisher.overflow``). Delivery is at-least-once: after a crash,
unacknowledged messages are sent again, with the same ``seq``, so consumers can drop repeats.

QoS-0 messages (per-frame detections) are never written to disk: they wait in a small buffer in
memory that drops its oldest (``publisher.detections_dropped``). A full disk never stops the
frame loop: the queue drops its oldest rows to make room (``publisher.telemetry_dropped``),
messages the disk cannot take at all wait in a bounded buffer in memory, and the
``telemetry_queue`` alert is raised. A queue file that is not a readable database is moved aside
(``<name>.corrupt-<UTC time>``) and a fresh one started; ``seq`` lives in a separate small file
(:class:`~edge_sdk.telemetry.sequence.SeqCounter`), so it stays monotonic when the queue file is lost
or replaced. The broker settings and the paho client are edge_sdk.telemetry.broker's; the queue is
edge_sdk.telemetry.disk_queue's.
"""
from __future__ import annotations

import collections
import json
import logging
import queue
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, Deque, Dict, List, Optional, Tuple

from edge_sdk import _imports
from edge_sdk.telemetry.broker import BrokerConfig, make_client
from edge_sdk.telemetry.disk_queue import DiskQueue, PublisherError, QueueError
from edge_sdk.telemetry.guard import CallbackGuard
from edge_sdk.telemetry.schemas import TOPICS, now_ms, topic
from edge_sdk.telemetry.sequence import SeqCounter, seq_path
from edge_sdk.validate import dumps_outgoing

log = logging.getLogger(__name__)


class BrokerRefusedError(PublisherError):
    """The broker answered the connection with a refusal (bad credentials, not authorised)."""


_AUTH_REFUSALS = (134, 135, 140)  # bad user name or password, not authorized, bad authentication method
_NO_ROW, _STATUS = 0, -1  # in-flight markers: a message from memory, the retained status


class Publisher:
    """Base: a bounded inbox and a thread that delivers; subclasses say how."""

    def __init__(self, device_id: str, inbox_size: int = 10000) -> None:
        self.device_id = device_id
        self._inbox: "queue.Queue[Tuple[str, Dict[str, Any], int]]" = queue.Queue(maxsize=inbox_size)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.dropped = 0  # inbox full: the publisher thread fell behind
        self.error: Optional[BaseException] = None
        self.published = 0
        # on_alert(name, active, message, severity): a condition of the publisher itself was
        # raised or cleared (full disk, broker refusal); called from the publisher's threads
        self.on_alert: Optional[Callable[[str, bool, str, str], None]] = None
        self._conditions: Dict[str, str] = {}
        self._conditions_lock = threading.Lock()

    # -- frame-loop side ---------------------------------------------------------------------
    def envelope(self, suffix: str, body: Dict[str, Any]) -> Dict[str, Any]:
        message: Dict[str, Any] = {"schema": TOPICS[suffix], "device_id": self.device_id, "ts": now_ms(), "seq": 0}
        message.update(body)
        message["_topic"] = topic(self.device_id, suffix)
        return message

    def publish(self, suffix: str, body: Dict[str, Any], qos: int = 1) -> None:
        """Queue a message for `edge-sdk/<device>/<suffix>`; never blocks."""
        try:
            self._inbox.put_nowait((suffix, self.envelope(suffix, body), qos))
        except queue.Full:
            self.dropped += 1

    def check(self) -> None:
        """Re-raise, in the caller's thread, an error that stopped the publisher thread."""
        if self.error is not None:
            raise PublisherError(f"telemetry publisher stopped: {self.error}") from self.error

    def stats(self) -> Dict[str, Any]:
        return {"connected": True, "queued": 0, "overflow": self.dropped}

    def _condition(self, name: str, active: bool, message: str, severity: str = "critical") -> None:
        """Record a condition and tell `on_alert` when it changes (raised once, cleared once)."""
        with self._conditions_lock:
            if (name in self._conditions) == active:
                return
            if active:
                self._conditions[name] = message
            else:
                del self._conditions[name]
            hook = self.on_alert
            if hook is not None:
                hook(name, active, message, severity)

    @property
    def conditions(self) -> Dict[str, str]:
        """Open conditions of the publisher itself: name -> message."""
        with self._conditions_lock:
            return dict(self._conditions)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "Publisher":
        self._thread = threading.Thread(target=self._guarded, name=f"{type(self).__name__}", daemon=True)
        self._thread.start()
        return self

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced to the daemon by check()
            log.exception("telemetry publisher failed")
            self.error = exc

    def _run(self) -> None:
        raise NotImplementedError

    def _drain(self, timeout: float, limit: int = 1024) -> List[Tuple[str, Dict[str, Any], int]]:
        batch = []
        try:
            batch.append(self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait())
            while len(batch) < limit:
                batch.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        return batch

    def stop(self, final_status: Optional[Dict[str, Any]] = None, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to `timeout`), say goodbye, and stop the thread. A publisher
        that was never started releases what it opened (its files) and keeps what was queued."""
        self._final_status = final_status
        self._stop_deadline = time.monotonic() + timeout
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout + 2.0)
        else:
            self._release()
        self.check()

    def _release(self) -> None:
        """Close what the publisher opened at construction; the thread does it when it ends."""

    def set_status(self, status: Dict[str, Any]) -> None:
        """Replace the retained online status body (re-published on every connect)."""

    def __enter__(self) -> "Publisher":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class LinePublisher(Publisher):
    """The default without a broker: one JSON line per message, `{"topic": ..., "payload": ...}`.

    The same format `edge-sdk monitor --record` writes, so `edge-sdk report` reads both.
    """

    def __init__(self, device_id: str, stream: Optional[IO[str]] = None) -> None:
        super().__init__(device_id)
        self.stream = stream if stream is not None else sys.stdout
        self._seq: Dict[str, int] = collections.defaultdict(int)
        self._status: Dict[str, Any] = {}

    def set_status(self, status: Dict[str, Any]) -> None:
        self._status = dict(status)
        self.publish("status", dict(status, state="online"))

    def _write(self, batch: List[Tuple[str, Dict[str, Any], int]]) -> None:
        for suffix, message, _qos in batch:
            self._seq[suffix] += 1
            message["seq"] = self._seq[suffix]
            name = message.pop("_topic")
            self.stream.write(dumps_outgoing({"topic": name, "payload": message}, f"telemetry {suffix}", log) + "\n")
            self.published += 1
        if batch:
            self.stream.flush()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._write(self._drain(0.1))
        self._write(self._drain(0, limit=10**9))
        final = getattr(self, "_final_status", None)
        if final is not None:
            self._write([("status", self.envelope("status", dict(final, state="offline")), 1)])


class MqttPublisher(Publisher):
    """MQTT with a retained status, an offline will, the disk queue and the `cmd` subscription.

    `volatile_max` bounds the in-memory buffer of QoS-0 messages, `spill_max` the in-memory
    buffer of durable messages the disk cannot take; both drop their oldest. While the disk
    fails, writing it is tried again every `disk_retry_s`; the `telemetry_queue` alert clears
    once the disk took everything for that long.
    """

    def __init__(
        self,
        cfg: BrokerConfig,
        device_id: str,
        queue_path: Path,
        on_command: Optional[Callable[[bytes], None]] = None,
        volatile_max: int = 256,
        spill_max: int = 2000,
        disk_retry_s: float = 10.0,
    ) -> None:
        super().__init__(device_id)
        self.cfg = cfg
        self.mqtt = _imports.mqtt()
        self.queue_path = Path(queue_path)
        self.disk_retry_s = float(disk_retry_s)
        self.seq = SeqCounter(seq_path(self.queue_path))
        self.queue: Optional[DiskQueue] = None
        self._disk_error: Optional[str] = None
        self._disk_event_at = -1e18
        self._disk_retry_at = 0.0
        try:
            self.queue = self._open_queue()
        except QueueError as exc:  # a full disk: start anyway, the messages wait in memory
            log.error("%s; telemetry waits in memory until the disk has room", exc)
            self._disk_error = str(exc)
        self.on_command = on_command
        self.client = make_client(cfg, cfg.client_id or f"edge-sdk-{device_id}", self.mqtt)
        self._status: Dict[str, Any] = {}
        self._connected = threading.Event()
        self._answered = threading.Event()  # the broker accepted or refused at least once
        self._need_status = threading.Event()
        self._acked: Deque[int] = collections.deque()
        self._ack_event = threading.Event()
        self._inflight: Dict[int, int] = {}  # mid -> disk row id (_NO_ROW: from memory, _STATUS: status)
        self._cursor = 0  # highest row id handed to paho in this process
        self._backlog = False  # the last hand-over filled the in-flight window
        self._unsettled: List[int] = []  # acknowledged rows the disk could not delete yet
        self._volatile: Deque[Tuple[str, bytes]] = collections.deque(maxlen=max(int(volatile_max), 1))
        self._spill: Deque[Tuple[str, bytes, int]] = collections.deque(maxlen=max(int(spill_max), 1))
        self.telemetry_dropped = 0  # durable messages lost to a full or failing disk
        self.detections_dropped = 0  # QoS-0 messages dropped from their buffer or not sent by the stop
        self.refused: Optional[BrokerRefusedError] = None
        self.reconnects = 0
        self._last_error = ""
        self._will_seq = self.seq.next("status")
        self._set_will()
        # nothing received from the network may raise out of a callback (paho's thread would end)
        self.guard = CallbackGuard(f"publisher {device_id}")
        self.client.on_connect = self.guard(self._on_connect)
        self.client.on_disconnect = self.guard(self._on_disconnect)
        self.client.on_publish = self.guard(self._on_publish)
        self.client.on_message = self.guard(self._on_message)
        self.retained_commands = 0  # retained payloads on `cmd`: ignored (and cleared)

    def _set_will(self) -> None:
        """The offline will for the next connection. `status_ts` orders status messages: every
        status of one connection (online, the will, the goodbye) carries the connection's stamp,
        set here before it connects, so a will that arrives after an outage is never older than
        the online status it replaces (its `seq` is from start-up and may be)."""
        self._status_ts = now_ms()
        will = self.envelope("status", {"state": "offline", "reason": "connection lost", "status_ts": self._status_ts})
        will["seq"] = self._will_seq
        will_topic = will.pop("_topic")
        self.client.will_set(will_topic, json.dumps(will, separators=(",", ":"), allow_nan=False), qos=1, retain=True)

    def _open_queue(self) -> DiskQueue:
        q = DiskQueue(self.queue_path, self.cfg.queue_max_messages, self.cfg.queue_max_bytes)
        self.seq.raise_floor(q.legacy_seq())
        return q

    # -- paho callbacks (network thread) -------------------------------------------------------
    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            if getattr(reason, "value", None) in _AUTH_REFUSALS:
                hint = "check [mqtt] username and password (or password_env) and the broker's ACL"
            else:
                hint = "check [mqtt] url, client_id and the broker's log"
            msg = f"broker {self.cfg.redacted_url()} refused the connection: {reason}; {hint}"
            self.refused = BrokerRefusedError(msg)
            if msg != self._last_error:
                log.error("%s", msg)
                self._last_error = msg
            self._condition("broker_refused", True, msg)
            self._answered.set()
            return
        log.info("connected to %s", self.cfg.redacted_url())
        self._last_error = ""
        self.refused = None
        self.reconnects += 1
        client.subscribe(topic(self.device_id, "cmd"), qos=1)
        self._need_status.set()
        self._connected.set()
        self._answered.set()
        self._ack_event.set()  # wake the publisher thread: there may be a backlog to hand over
        self._condition("broker_refused", False, f"connected to {self.cfg.redacted_url()}")

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if self._connected.is_set() and not self._stop.is_set():
            log.warning("lost the broker %s (%s); queueing telemetry on disk", self.cfg.redacted_url(), reason)
        self._connected.clear()
        self._set_will()  # paho sends it with the next connect

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        self._acked.append(mid)
        self._ack_event.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        if self.on_command is None or msg.topic != topic(self.device_id, "cmd") or not msg.payload:
            return  # an empty payload is how a retained message is cleared: not a command
        if msg.retain:
            # commands are never retained: one would run again on every connect. Ignore it and
            # clear it (an empty retained payload), where the broker's ACL allows.
            self.retained_commands += 1
            log.warning("ignored a retained message on %s (commands are never retained); clearing it", msg.topic)
            client.publish(msg.topic, b"", qos=1, retain=True)
            return
        self.on_command(bytes(msg.payload))

    # -- publisher thread ----------------------------------------------------------------------
    def set_status(self, status: Dict[str, Any]) -> None:
        self._status = dict(status)
        self._need_status.set()

    def wait_connected(self, timeout: float) -> bool:
        """True once connected; raises BrokerRefusedError if the broker refused; False on timeout."""
        self._answered.wait(timeout)
        if self.refused is not None and not self._connected.is_set():
            raise self.refused
        return self._connected.is_set()

    def stats(self) -> Dict[str, Any]:
        q = self.queue
        out: Dict[str, Any] = {
            "connected": self._connected.is_set(),
            "queued": int((q.size if q is not None else 0) + len(self._spill)),
            "queued_bytes": int(q.bytes if q is not None else 0),
            "overflow": int((q.overflow if q is not None else 0) + self.dropped),
            "telemetry_dropped": int(self.telemetry_dropped),
            "detections_dropped": int(self.detections_dropped),
            "reconnects": max(self.reconnects - 1, 0),
        }
        refused = self.refused
        if refused is not None:
            out["refused"] = str(refused)
        return out

    def _serialise(self, suffix: str, message: Dict[str, Any]) -> Tuple[str, bytes]:
        message["seq"] = self.seq.next(suffix)
        name = message.pop("_topic")
        return name, dumps_outgoing(message, f"telemetry {suffix}", log).encode()

    def _accept(self, batch: List[Tuple[str, Dict[str, Any], int]]) -> None:
        """Stamp seq and serialise; QoS-0 messages to memory, the rest to the disk queue."""
        durable: List[Tuple[str, bytes, int]] = []
        volatile = self._volatile
        for suffix, message, qos in batch:
            name, payload = self._serialise(suffix, message)
            if qos == 0:
                if len(volatile) == volatile.maxlen:
                    self.detections_dropped += 1  # the deque drops its oldest
                volatile.append((name, payload))
            else:
                durable.append((name, payload, qos))
        if durable:
            self._store(durable)

    def _store(self, rows: List[Tuple[str, bytes, int]]) -> None:
        if self._spill or self.queue is None:  # the disk failed before: keep the order
            self._keep_in_memory(rows)
            if time.monotonic() >= self._disk_retry_at:
                self._flush_spill()
            return
        try:
            dropped = self.queue.append(rows)
        except QueueError as exc:
            self._disk_failed(exc)
            self._keep_in_memory(rows)
            return
        if dropped:
            self._disk_full(dropped)

    def _keep_in_memory(self, rows: List[Tuple[str, bytes, int]]) -> None:
        spill = self._spill
        for row in rows:
            if len(spill) == spill.maxlen:
                self.telemetry_dropped += 1  # the deque drops its oldest
            spill.append(row)

    def _flush_spill(self) -> None:
        """Try the disk again with what waits in memory (oldest first)."""
        try:
            if self.queue is None:
                self.queue = self._open_queue()
                log.info("the telemetry queue %s is writable again", self.queue_path)
            rows = list(self._spill)
            dropped = self.queue.append(rows)
        except PublisherError as exc:  # QueueError, or the file cannot be opened at all
            self._disk_failed(exc)
            return
        self._spill.clear()
        if dropped:
            self._disk_full(dropped)

    def _disk_full(self, dropped: int) -> None:
        self.telemetry_dropped += dropped
        self._disk_event(f"the disk holding the telemetry queue {self.queue_path} is full: dropped the "
                         f"{dropped} oldest messages to make room; free space there or lower [mqtt] queue_max_bytes")

    def _disk_failed(self, exc: BaseException) -> None:
        self._disk_retry_at = time.monotonic() + self.disk_retry_s
        self._disk_event(f"{exc}; telemetry waits in memory (at most {self._spill.maxlen} messages)")

    def _disk_event(self, message: str) -> None:
        self._disk_event_at = time.monotonic()
        if "telemetry_queue" not in self._conditions:
            log.error("%s", message)
        self._condition("telemetry_queue", True, message)

    def _check_disk_clear(self) -> None:
        if ("telemetry_queue" in self._conditions and not self._spill and self.queue is not None
                and time.monotonic() - self._disk_event_at >= self.disk_retry_s):
            self._condition("telemetry_queue", False, f"the telemetry queue {self.queue_path} takes every message again")

    def _publish_status(self, state: str, reason: Optional[str] = None) -> Any:
        body = dict(self._status, state=state, status_ts=self._status_ts)
        if reason:
            body["reason"] = reason
        name, payload = self._serialise("status", self.envelope("status", body))
        info = self.client.publish(name, payload, qos=1, retain=True)
        self._inflight[info.mid] = _STATUS
        return info

    def _settle_acks(self) -> None:
        done = self._unsettled
        while self._acked:
            rowid = self._inflight.pop(self._acked.popleft(), _STATUS)
            if rowid != _STATUS:
                self.published += 1
            if rowid > 0:
                done.append(rowid)
        if done and self.queue is not None:
            try:
                self.queue.delete(done)
            except QueueError as exc:  # sent again after a restart if never deleted: at-least-once
                self._disk_failed(exc)
                del done[:-100000]
                return
            done.clear()

    def _hand_over(self) -> None:
        self._backlog = False
        if not self._connected.is_set():
            return
        volatile = self._volatile
        while volatile:
            name, payload = volatile.popleft()
            self.client.publish(name, payload, qos=0)
            self.published += 1
        room = self.cfg.inflight - len(self._inflight)
        if room > 0 and self._need_status.is_set() and self._status:  # first in line, inside the window
            self._need_status.clear()
            self._publish_status("online")
            room -= 1
        if room <= 0:
            self._backlog = True
            return
        rows: List[Tuple[int, str, bytes, int]] = []
        if self.queue is not None:
            try:
                rows = self.queue.after(self._cursor, room)
            except QueueError as exc:
                self._disk_failed(exc)
        for rowid, name, payload, qos in rows:
            self._cursor = rowid
            self._inflight[self._publish(name, payload, qos)] = rowid
        room -= len(rows)
        while room > 0 and self._spill:  # the disk holds nothing older: what waits in memory
            name, payload, qos = self._spill.popleft()
            self._inflight[self._publish(name, payload, qos)] = _NO_ROW
            room -= 1
        self._backlog = room <= 0

    def _publish(self, name: str, payload: bytes, qos: int) -> int:
        info = self.client.publish(name, payload, qos=qos)
        if info.rc != self.mqtt.MQTT_ERR_SUCCESS and info.rc != self.mqtt.MQTT_ERR_NO_CONN:
            raise PublisherError(f"paho refused to queue a message: {self.mqtt.error_string(info.rc)}")
        return int(info.mid)

    def _wait(self) -> List[Tuple[str, Dict[str, Any], int]]:
        """The next batch from the inbox; while a backlog waits for acks, wake on an ack too."""
        if self._backlog and self._connected.is_set():
            self._ack_event.clear()
            if not self._acked:
                self._ack_event.wait(0.05)
            return self._drain(0)
        return self._drain(0.05)

    def _run(self) -> None:
        if self._disk_error is not None:
            self._disk_failed(QueueError(self._disk_error))
        self.client.connect_async(self.cfg.host, self.cfg.port, keepalive=self.cfg.keepalive)
        self.client.loop_start()
        try:
            while not self._stop.is_set():
                batch = self._wait()
                if batch:
                    self._accept(batch)
                elif (self._spill or self.queue is None) and time.monotonic() >= self._disk_retry_at:
                    self._flush_spill()  # try the disk again, also with nothing waiting: the alert can clear
                self._settle_acks()
                self._hand_over()
                self._check_disk_clear()
            self._finish()
        finally:
            self.client.loop_stop()
            self._release()

    def _release(self) -> None:
        if self.queue is not None:
            self.queue.close()
        self.seq.close()

    def _pending(self) -> bool:
        q = self.queue
        return bool((q is not None and q.size) or self._spill or self._inflight or self._volatile)

    def _finish(self) -> None:
        batch = self._drain(0, limit=10**9)
        if batch:
            self._accept(batch)
        deadline = getattr(self, "_stop_deadline", time.monotonic())
        while time.monotonic() < deadline and self._connected.is_set() and self._pending():
            self._settle_acks()
            self._hand_over()
            self._ack_event.wait(0.05)
            self._ack_event.clear()
        self._settle_acks()
        if self._volatile:  # QoS 0 is not kept across a restart
            self.detections_dropped += len(self._volatile)
            log.info("%d QoS-0 messages not sent before the stop", len(self._volatile))
            self._volatile.clear()
        if self._spill:
            self._flush_spill()
            if self._spill:
                self.telemetry_dropped += len(self._spill)
                log.warning("%d telemetry messages lost: the disk could not keep them", len(self._spill))
                self._spill.clear()
        if self.queue is not None and self.queue.size:
            log.warning("%d telemetry messages stay queued in %s for the next run", self.queue.size, self.queue.path)
        final = getattr(self, "_final_status", None)
        if final is not None and self._connected.is_set():
            self._status.update(final)
            info = self._publish_status("offline", final.get("reason", "stopped"))
            try:
                info.wait_for_publish(max(deadline - time.monotonic(), 0.5))
            except (RuntimeError, ValueError) as exc:
                log.warning("could not publish the offline status: %s", exc)
        self.client.disconnect()
