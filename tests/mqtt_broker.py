"""A real Mosquitto broker for tests: started from a generated config on 127.0.0.1 and a free
port, ready when it accepts a connection, stoppable and restartable on the same port.

Fixtures: `mosquitto` (path of the binary; skips without it, fails when CI is set),
`broker` (a running plain broker), `broker_factory` (build brokers with TLS, client
certificates required, passwords, persistence, QoS-0 queueing for offline sessions), plus
`MessageLog`, a subscriber that records what arrives.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

MOSQUITTO_PATHS = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")


def find_mosquitto() -> Optional[str]:
    found = shutil.which("mosquitto")
    if found:
        return found
    for path in MOSQUITTO_PATHS:
        if os.access(path, os.X_OK):
            return path
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """One Mosquitto process with its own config; `url` is what clients use."""

    def __init__(self, binary: str, workdir: Path, tls: Optional[Dict[str, Path]] = None,
                 password_file: Optional[Path] = None, persistence: bool = False,
                 require_certificate: bool = False, queue_qos0: bool = False) -> None:
        self.binary = binary
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.tls = tls
        self.password_file = password_file
        self.persistence = persistence
        self.require_certificate = require_certificate
        self.queue_qos0 = queue_qos0
        self.proc: Optional[subprocess.Popen] = None
        self.log = self.workdir / "mosquitto.log"
        self.config = self.workdir / "mosquitto.conf"
        self.config.write_text(self._config_text())

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://127.0.0.1:{self.port}"

    def _config_text(self) -> str:
        lines = [f"listener {self.port} 127.0.0.1"]
        if os.geteuid() == 0:
            lines.append("user root")  # keep root, so the broker can read files in the test's private tmp dir
        if self.tls:
            lines += [f"cafile {self.tls['ca']}", f"certfile {self.tls['server_cert']}",
                      f"keyfile {self.tls['server_key']}", "tls_version tlsv1.2"]
            if self.require_certificate:
                lines.append("require_certificate true")  # a client without a certificate signed by the CA is refused
        elif self.require_certificate:
            raise ValueError("require_certificate needs tls")
        if self.password_file:
            lines += ["allow_anonymous false", f"password_file {self.password_file}"]
        else:
            lines.append("allow_anonymous true")
        if self.persistence:
            lines += ["persistence true", f"persistence_location {self.workdir}/", "autosave_interval 0"]
        else:
            lines.append("persistence false")
        if self.queue_qos0:
            lines.append("queue_qos0_messages true")  # offline persistent sessions keep QoS-0 messages too
        lines += [f"log_dest file {self.log}", "log_type error", "log_type warning", "log_type notice",
                  "max_queued_messages 100000"]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 10.0) -> "Broker":
        assert self.proc is None, "broker already running"
        self.proc = subprocess.Popen([self.binary, "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                log = self.log.read_text() if self.log.exists() else ""
                self.proc = None
                raise RuntimeError(f"mosquitto exited at start: {err}\n{log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"mosquitto did not accept connections on port {self.port} within {timeout}s")
                # the next connect attempt is the poll; a short pause keeps it from spinning
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def mosquitto() -> str:
    binary = find_mosquitto()
    if binary is None:
        reason = "mosquitto is not installed (apt-get install -y mosquitto)"
        if os.environ.get("CI"):
            pytest.fail(reason + "; CI must run the MQTT tests against a real broker")
        pytest.skip(reason)
    return binary


@pytest.fixture
def broker_factory(mosquitto: str, tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    made: List[Broker] = []

    def make(**kwargs: Any) -> Broker:
        b = Broker(mosquitto, tmp_path / f"broker{len(made)}", **kwargs)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., Broker]) -> Broker:
    return broker_factory()


class SlowLink:
    """A TCP relay to a broker on 127.0.0.1 that holds back what the broker sends by `delay_s`,
    as a slow uplink does: acknowledgements arrive late, and a client that does not wait for
    them shows it. Clients connect to `url`."""

    def __init__(self, broker: Broker, delay_s: float) -> None:
        self.broker = broker
        self.delay_s = float(delay_s)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.sockets: List[socket.socket] = [self.server]
        self.closed = threading.Event()
        threading.Thread(target=self._accept, name="slow-link", daemon=True).start()

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.server.accept()
                upstream = socket.create_connection(("127.0.0.1", self.broker.port))
            except OSError:
                return  # closed
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._delayed, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass  # one side closed: the relay ends
        self._close(src, dst)

    def _delayed(self, src: socket.socket, dst: socket.socket) -> None:
        import queue

        due: "queue.Queue[Any]" = queue.Queue()

        def send() -> None:
            hold = threading.Event()  # never set: a timed wait that models the link's latency
            while True:
                item = due.get()
                if item is None:
                    break
                at, data = item
                hold.wait(max(at - time.monotonic(), 0.0))
                try:
                    dst.sendall(data)
                except OSError:
                    break

        threading.Thread(target=send, daemon=True).start()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                due.put((time.monotonic() + self.delay_s, data))
        except OSError:
            pass
        due.put(None)
        self._close(src, dst)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for sock in socks:
            try:
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        self.closed.set()
        self._close(*self.sockets)


# -- TLS material and password files -----------------------------------------------------------
def make_tls_material(folder: Path) -> Dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (openssl CLI,
    P-256 keys: fast to make)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    p = {name: folder / name for name in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem",
                                           "client.key", "client.csr", "client.pem", "san.cnf")}
    p["san.cnf"].write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *key, "-days", "2", "-subj", "/CN=edge-sdk test CA",
        "-keyout", str(p["ca.key"]), "-out", str(p["ca.pem"]))
    for who, cn in (("server", "127.0.0.1"), ("client", "edge-sdk-device")):
        run("req", *key, "-subj", f"/CN={cn}", "-keyout", str(p[f"{who}.key"]),
            "-out", str(p[f"{who}.csr"]))
        extra = ["-extfile", str(p["san.cnf"])] if who == "server" else []
        run("x509", "-req", "-in", str(p[f"{who}.csr"]), "-CA", str(p["ca.pem"]), "-CAkey", str(p["ca.key"]),
            "-CAcreateserial", "-days", "2", "-out", str(p[f"{who}.pem"]), *extra)
    return {"ca": p["ca.pem"], "server_cert": p["server.pem"], "server_key": p["server.key"],
            "client_cert": p["client.pem"], "client_key": p["client.key"]}


def make_password_file(path: Path, users: Dict[str, str]) -> Path:
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        pytest.skip("mosquitto_passwd is not installed")
    first = True
    for user, password in users.items():
        args = [tool, "-b"] + (["-c"] if first else []) + [str(path), user, password]
        subprocess.run(args, check=True, capture_output=True)
        first = False
    return path


# -- a recording subscriber --------------------------------------------------------------------
class MessageLog:
    """Subscribes to `topics` and records (topic, payload, retain) as they arrive.

    `wait(predicate)` blocks on a Condition until the predicate over the log holds.
    """

    def __init__(self, url: str, topics: List[str], client_id: Optional[str] = None, clean: bool = True,
                 username: Optional[str] = None, password: Optional[str] = None,
                 ca: Optional[Path] = None, cert: Optional[Path] = None, key: Optional[Path] = None) -> None:
        import paho.mqtt.client as mqtt

        from edge_sdk.telemetry.broker import BrokerConfig

        self.cfg = BrokerConfig(url=url)
        self.messages: List[Dict[str, Any]] = []
        self.cond = threading.Condition()
        self.connected = threading.Event()
        self.refused: Optional[str] = None
        self.topics = topics
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or "",
                                  protocol=mqtt.MQTTv311, clean_session=clean)
        if username is not None:
            self.client.username_pw_set(username, password)
        if ca is not None:
            self.client.tls_set(ca_certs=str(ca), certfile=str(cert) if cert else None,
                                keyfile=str(key) if key else None, cert_reqs=ssl.CERT_REQUIRED)
        self.client.reconnect_delay_set(0.1, 0.5)  # type: ignore[arg-type]
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            with self.cond:
                self.refused = str(reason)
                self.cond.notify_all()
            return
        for t in self.topics:
            client.subscribe(t, qos=1)
        self.connected.set()
        with self.cond:
            self.cond.notify_all()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        try:
            payload: Any = json.loads(msg.payload)
        except ValueError:
            payload = msg.payload
        with self.cond:
            self.messages.append({"topic": msg.topic, "payload": payload, "retain": bool(msg.retain)})
            self.cond.notify_all()

    def start(self, wait: bool = True, timeout: float = 10.0) -> "MessageLog":
        self.client.connect_async(self.cfg.host, self.cfg.port, keepalive=10)
        self.client.loop_start()
        if wait:
            ok = self.wait(lambda _m: self.connected.is_set() or self.refused is not None, timeout)
            assert ok and self.refused is None, f"test subscriber could not connect: {self.refused}"
            # a SUBACK round trip: the subscription is active once a ping to ourselves comes back
            probe = f"edge-sdk-test/probe/{id(self)}"
            self.client.subscribe(probe, qos=1)
            self.client.publish(probe, b"probe", qos=1)
            assert self.wait(lambda m: any(x["topic"] == probe for x in m), timeout), "subscription never became active"
        return self

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def wait(self, predicate: Callable[[List[Dict[str, Any]]], bool], timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.messages), timeout)

    def on(self, suffix: str) -> List[Dict[str, Any]]:
        with self.cond:
            return [m["payload"] for m in self.messages if m["topic"].endswith("/" + suffix)]

    def __enter__(self) -> "MessageLog":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@pytest.fixture
def message_log() -> Iterator[Callable[..., MessageLog]]:
    made: List[MessageLog] = []

    def make(url: str, topics: List[str], wait: bool = True, **kwargs: Any) -> MessageLog:
        log = MessageLog(url, topics, **kwargs)
        made.append(log)
        return log.start(wait=wait)

    yield make
    for log in made:
        log.stop()
