"""Publishing telemetry: an MQTT client (paho-mqtt 2.x) behind an on-disk queue, or JSON lines.

The frame loop and the reporter only ever call :meth:`Publisher.publish`, which puts a dict on a
bounded in-memory queue and returns at once. A publisher thread stamps the per-topic ``seq``,
appends the message to an SQLite queue on disk and hands queued messages to paho while the
broker is connected; a row leaves the disk queue only when the broker acknowledged it (QoS 1).
While the broker is unreachable messages wait on disk and go out in order when it returns;
when the queue is full the oldest messages are dropped and counted (``publisher.overflow``).
Delivery is at-least-once: after a crash, unacknowledged messages are sent again, with the
same ``seq``, so consumers can drop repeats.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import queue
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Deque, Dict, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

from edge_sdk import _imports
from edge_sdk.errors import ConfigError, EdgeSdkError
from edge_sdk.telemetry.schemas import TOPICS, now_ms, topic

log = logging.getLogger(__name__)

SCHEMES = {"mqtt": 1883, "mqtts": 8883}


class PublisherError(EdgeSdkError):
    """The publisher thread failed (e.g. its on-disk queue cannot be written)."""

    exit_code = 11


@dataclass
class BrokerConfig:
    """The `[mqtt]` table of the device config; `url` may carry user:password@."""

    url: str = "mqtt://127.0.0.1:1883"
    username: Optional[str] = None
    password: Optional[str] = None
    password_env: Optional[str] = None  # read the password from this environment variable
    client_id: Optional[str] = None  # default: edge-sdk-<device_id>
    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    tls_insecure: bool = False  # skip the server host name check (self-signed lab setups only)
    qos: int = 1
    keepalive: int = 30
    protocol: str = "3.1.1"  # or "5"
    reconnect_min_s: float = 0.5
    reconnect_max_s: float = 30.0
    queue_dir: Optional[str] = None  # default: <user state dir>/edge-sdk/queue
    queue_max_messages: int = 100000
    inflight: int = 64

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, origin: str = "[mqtt]") -> "BrokerConfig":
        parts = urlsplit(self.url)
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ConfigError(f"{origin} url must look like mqtt://host:1883 or mqtts://host:8883, got {self.url!r}")
        if self.qos not in (0, 1, 2):
            raise ConfigError(f"{origin} qos must be 0, 1 or 2, got {self.qos!r}")
        if self.protocol not in ("3.1.1", "5"):
            raise ConfigError(f"{origin} protocol must be \"3.1.1\" or \"5\", got {self.protocol!r}")
        if not (0 < self.reconnect_min_s <= self.reconnect_max_s):
            raise ConfigError(f"{origin} reconnect_min_s must be > 0 and <= reconnect_max_s")
        if self.queue_max_messages < 1 or self.inflight < 1 or self.keepalive < 1:
            raise ConfigError(f"{origin} queue_max_messages, inflight and keepalive must be >= 1")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(f"{origin} cert_file and key_file go together (the client certificate and its key)")
        for key in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, key)
            if value is not None and not Path(value).is_file():
                raise ConfigError(f"{origin} {key}: no such file {value}")
        if self.password_env and self.password_env not in os.environ:
            raise ConfigError(f"{origin} password_env names ${self.password_env}, which is not set")
        return self

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or SCHEMES[parts.scheme]

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "mqtts" or self.ca_file is not None

    def credentials(self) -> Tuple[Optional[str], Optional[str]]:
        parts = urlsplit(self.url)
        user = self.username or (unquote(parts.username) if parts.username else None)
        password = self.password
        if password is None and self.password_env:
            password = os.environ[self.password_env]
        if password is None and parts.password:
            password = unquote(parts.password)
        return user, password

    def redacted_url(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}:{self.port}"


def make_client(cfg: BrokerConfig, client_id: str, mqtt: Any = None) -> Any:
    """A configured paho client (not connected): protocol, TLS, credentials, backoff."""
    mqtt = mqtt or _imports.mqtt()
    protocol = mqtt.MQTTv5 if cfg.protocol == "5" else mqtt.MQTTv311
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
    if cfg.tls:
        import ssl

        try:
            client.tls_set(ca_certs=cfg.ca_file, certfile=cfg.cert_file, keyfile=cfg.key_file,
                           cert_reqs=ssl.CERT_REQUIRED)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"[mqtt] TLS files cannot be used ({exc}); check ca_file, cert_file and key_file") from exc
        if cfg.tls_insecure:
            client.tls_insecure_set(True)
    user, password = cfg.credentials()
    if user is not None:
        client.username_pw_set(user, password)
    client.reconnect_delay_set(min_delay=cfg.reconnect_min_s, max_delay=cfg.reconnect_max_s)  # type: ignore[arg-type]
    client.max_inflight_messages_set(cfg.inflight)
    client.max_queued_messages_set(0)
    return client


class DiskQueue:
    """A bounded FIFO of (topic, payload, qos) rows in SQLite, with per-topic seq counters.

    Used from one thread at a time (built on the caller's, then owned by the publisher thread).
    """

    def __init__(self, path: Path, max_messages: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_messages = int(max_messages)
        try:
            self.db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL)")
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            self.size = int(self.db.execute("SELECT COUNT(*) FROM q").fetchone()[0])
        except sqlite3.Error as exc:
            raise PublisherError(f"cannot open the telemetry queue {self.path} ({exc}); check the folder's permissions or set [mqtt] queue_dir") from exc
        self.overflow = self._meta("overflow")

    def _meta(self, key: str) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def next_seq(self, suffix: str) -> int:
        key = "seq:" + suffix
        value = self._meta(key) + 1
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
        return value

    def append(self, messages: List[Tuple[str, Dict[str, Any], int]]) -> None:
        """Stamp seq on each message, serialise and append, all in one transaction."""
        db = self.db
        db.execute("BEGIN")
        try:
            for suffix, message, qos in messages:
                message["seq"] = self.next_seq(suffix)
                db.execute("INSERT INTO q (topic, payload, qos) VALUES (?, ?, ?)",
                           (message.pop("_topic"), json.dumps(message, separators=(",", ":")).encode(), qos))
            self.size += len(messages)
            excess = self.size - self.max_messages
            if excess > 0:
                db.execute("DELETE FROM q WHERE id IN (SELECT id FROM q ORDER BY id LIMIT ?)", (excess,))
                self.size -= excess
                self.overflow += excess
                db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('overflow', ?)", (self.overflow,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def after(self, cursor: int, limit: int) -> List[Tuple[int, str, bytes, int]]:
        return self.db.execute("SELECT id, topic, payload, qos FROM q WHERE id > ? ORDER BY id LIMIT ?",
                               (cursor, limit)).fetchall()

    def delete(self, ids: List[int]) -> None:
        if not ids:
            return
        self.db.execute("BEGIN")
        n = 0
        for rowid in ids:
            n += self.db.execute("DELETE FROM q WHERE id = ?", (rowid,)).rowcount
        self.db.execute("COMMIT")
        self.size -= n

    def close(self) -> None:
        self.db.close()


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
        """Deliver what is queued (up to `timeout`), say goodbye, and stop the thread."""
        self._final_status = final_status
        self._stop_deadline = time.monotonic() + timeout
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout + 2.0)
        self.check()

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
            self.stream.write(json.dumps({"topic": name, "payload": message}, separators=(",", ":")) + "\n")
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
    """MQTT with a retained status, an offline will, the disk queue and the `cmd` subscription."""

    def __init__(
        self,
        cfg: BrokerConfig,
        device_id: str,
        queue_path: Path,
        on_command: Optional[Callable[[bytes], None]] = None,
    ) -> None:
        super().__init__(device_id)
        self.cfg = cfg
        self.mqtt = _imports.mqtt()
        self.queue = DiskQueue(queue_path, cfg.queue_max_messages)
        self.on_command = on_command
        self.client = make_client(cfg, cfg.client_id or f"edge-sdk-{device_id}", self.mqtt)
        self._status: Dict[str, Any] = {}
        self._connected = threading.Event()
        self._need_status = threading.Event()
        self._acked: Deque[int] = collections.deque()
        self._ack_event = threading.Event()
        self._inflight: Dict[int, Optional[int]] = {}  # mid -> disk row id (None: status)
        self._cursor = 0  # highest row id handed to paho in this process
        self.reconnects = 0
        self._last_error = ""
        will = self.envelope("status", {"state": "offline", "reason": "connection lost"})
        will["seq"] = self.queue.next_seq("status")
        will_topic = will.pop("_topic")
        self.client.will_set(will_topic, json.dumps(will, separators=(",", ":")), qos=1, retain=True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self.client.on_message = self._on_message

    # -- paho callbacks (network thread) -------------------------------------------------------
    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            msg = f"broker {self.cfg.redacted_url()} refused the connection: {reason}"
            if msg != self._last_error:
                log.error("%s; check [mqtt] username/password and TLS settings", msg)
                self._last_error = msg
            return
        log.info("connected to %s", self.cfg.redacted_url())
        self._last_error = ""
        self.reconnects += 1
        client.subscribe(topic(self.device_id, "cmd"), qos=1)
        self._need_status.set()
        self._connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if self._connected.is_set() and not self._stop.is_set():
            log.warning("lost the broker %s (%s); queueing telemetry on disk", self.cfg.redacted_url(), reason)
        self._connected.clear()

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        self._acked.append(mid)
        self._ack_event.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        if self.on_command is not None and msg.topic == topic(self.device_id, "cmd"):
            self.on_command(bytes(msg.payload))

    # -- publisher thread ----------------------------------------------------------------------
    def set_status(self, status: Dict[str, Any]) -> None:
        self._status = dict(status)
        self._need_status.set()

    def stats(self) -> Dict[str, Any]:
        return {
            "connected": self._connected.is_set(),
            "queued": int(self.queue.size),
            "overflow": int(self.queue.overflow + self.dropped),
            "reconnects": max(self.reconnects - 1, 0),
        }

    def _publish_status(self, state: str, reason: Optional[str] = None) -> Any:
        body = dict(self._status, state=state)
        if reason:
            body["reason"] = reason
        message = self.envelope("status", body)
        message["seq"] = self.queue.next_seq("status")
        name = message.pop("_topic")
        info = self.client.publish(name, json.dumps(message, separators=(",", ":")), qos=1, retain=True)
        self._inflight[info.mid] = None
        return info

    def _settle_acks(self) -> None:
        done = []
        while self._acked:
            rowid = self._inflight.pop(self._acked.popleft(), None)
            if rowid is not None:
                done.append(rowid)
        self.queue.delete(done)
        self.published += len(done)

    def _hand_over(self) -> None:
        if not self._connected.is_set():
            return
        if self._need_status.is_set() and self._status:
            self._need_status.clear()
            self._publish_status("online")
        room = self.cfg.inflight - len(self._inflight)
        if room <= 0:
            return
        for rowid, name, payload, qos in self.queue.after(self._cursor, room):
            info = self.client.publish(name, payload, qos=qos)
            if info.rc != self.mqtt.MQTT_ERR_SUCCESS and info.rc != self.mqtt.MQTT_ERR_NO_CONN:
                raise PublisherError(f"paho refused to queue a message: {self.mqtt.error_string(info.rc)}")
            self._cursor = rowid
            if qos == 0:
                self.queue.delete([rowid])
            else:
                self._inflight[info.mid] = rowid

    def _run(self) -> None:
        self.client.connect_async(self.cfg.host, self.cfg.port, keepalive=self.cfg.keepalive)
        self.client.loop_start()
        try:
            while not self._stop.is_set():
                batch = self._drain(0.05)
                if batch:
                    self.queue.append(batch)
                self._settle_acks()
                self._hand_over()
            self._finish()
        finally:
            self.client.loop_stop()
            self.queue.close()

    def _finish(self) -> None:
        batch = self._drain(0, limit=10**9)
        if batch:
            self.queue.append(batch)
        deadline = getattr(self, "_stop_deadline", time.monotonic())
        while time.monotonic() < deadline and self._connected.is_set() and (self.queue.size or self._inflight):
            self._settle_acks()
            self._hand_over()
            self._ack_event.wait(0.05)
            self._ack_event.clear()
        self._settle_acks()
        if self.queue.size:
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


def default_queue_path(device_id: str, queue_dir: Optional[str] = None) -> Path:
    if queue_dir:
        base = Path(queue_dir)
    else:
        from platformdirs import user_state_dir

        base = Path(user_state_dir("edge-sdk")) / "queue"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device_id)
    return base / f"{safe}.sqlite3"
