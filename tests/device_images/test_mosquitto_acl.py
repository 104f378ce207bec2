"""The fleet broker's configuration (device_images/mosquitto): the shipped edge-sdk.conf and
edge-sdk.acl run in a real Mosquitto on 127.0.0.1 and a free port, with certificates made by the
shipped make-certs.sh; only the port and the file locations are changed for the test."""
from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from mqtt_broker import free_port

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "device_images" / "mosquitto"

mqtt = pytest.importorskip("paho.mqtt.client")


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("certs")
    script = str(FOLDER / "make-certs.sh")
    for args in (["ca"], ["server", "127.0.0.1", "localhost"], ["client", "cam-1"], ["client", "cam-2"],
                 ["client", "monitor"]):
        subprocess.run(["bash", script, str(folder), *args], check=True, capture_output=True, timeout=60)
    return folder


def test_make_certs_keeps_what_exists_and_refuses_a_name_that_is_not_a_topic_level(certs: Path) -> None:
    before = {p.name: p.read_bytes() for p in certs.iterdir()}
    again = subprocess.run(["bash", str(FOLDER / "make-certs.sh"), str(certs), "client", "cam-1"],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.startswith("kept")
    assert {p.name: p.read_bytes() for p in certs.iterdir()} == before
    bad = subprocess.run(["bash", str(FOLDER / "make-certs.sh"), str(certs), "client", "cam/#"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "letters, digits" in bad.stderr
    assert (certs / "cam-1.key").stat().st_mode & 0o077 == 0  # private keys are the owner's only


def _test_config(folder: Path, certs: Path, port: int) -> Path:
    """The shipped config with the listener on 127.0.0.1:port and the files in `folder`; every
    other directive as shipped."""
    shutil.copy(FOLDER / "edge-sdk.acl", folder / "edge-sdk.acl")
    text = (FOLDER / "edge-sdk.conf").read_text()
    assert "listener 8883\n" in text and "/etc/mosquitto/certs/" in text
    text = text.replace("listener 8883\n", f"listener {port} 127.0.0.1\n")
    text = text.replace("/etc/mosquitto/certs/", f"{certs}/").replace("/etc/mosquitto/edge-sdk.acl", str(folder / "edge-sdk.acl"))
    assert "/etc/mosquitto" not in re.sub(r"#.*", "", text)
    extra = [f"log_dest file {folder / 'mosquitto.log'}", "log_type all", "persistence false"]
    if os.geteuid() == 0:
        extra.append("user root")  # else the broker drops to `mosquitto`, who cannot read the test's files
    path = folder / "mosquitto.conf"
    path.write_text(text + "\n" + "\n".join(extra) + "\n")
    return path


class Broker:
    def __init__(self, binary: str, config: Path, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen([binary, "-c", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(500):
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode() if self.proc.stdout else ""
                log = (config.parent / "mosquitto.log")
                raise AssertionError(f"mosquitto refused the config: {out}\n{log.read_text() if log.exists() else ''}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                threading.Event().wait(0.02)  # the next connect attempt is the poll
        raise AssertionError("mosquitto did not listen")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def fleet_broker(certs: Path, tmp_path_factory) -> Iterator[Broker]:
    from mqtt_broker import find_mosquitto

    binary = find_mosquitto()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("mosquitto is not installed; CI must test the broker config")
        pytest.skip("mosquitto is not installed (apt-get install -y mosquitto)")
    port = free_port()
    b = Broker(binary, _test_config(tmp_path_factory.mktemp("broker"), certs, port), port)
    yield b
    b.stop()


class Client:
    """A paho client authenticated by `name`'s certificate, recording what it receives."""

    def __init__(self, broker: Broker, certs: Path, name: str) -> None:
        self.cond = threading.Condition()
        self.messages: List[Any] = []
        self.granted: Dict[int, List[int]] = {}
        self.connected = False
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-{name}", protocol=mqtt.MQTTv311)
        self.client.tls_set(ca_certs=str(certs / "ca.pem"), certfile=str(certs / f"{name}.pem"),
                            keyfile=str(certs / f"{name}.key"), cert_reqs=ssl.CERT_REQUIRED)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.connect("127.0.0.1", broker.port, keepalive=10)
        self.client.loop_start()
        assert self.wait(lambda: self.connected), f"{name} could not connect"

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        with self.cond:
            self.connected = not reason.is_failure
            self.cond.notify_all()

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any, properties: Any) -> None:
        with self.cond:
            self.granted[mid] = [int(r.value) for r in reasons]
            self.cond.notify_all()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self.cond:
            self.messages.append((msg.topic, msg.payload.decode()))
            self.cond.notify_all()

    def wait(self, predicate: Any, timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def subscribe(self, topic: str) -> int:
        """The granted QoS (128: refused by the broker)."""
        _, mid = self.client.subscribe(topic, qos=1)
        assert self.wait(lambda: mid in self.granted)
        return self.granted[mid][0]

    def publish(self, topic: str, payload: str) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(10)

    def received(self) -> List[Any]:
        with self.cond:
            return list(self.messages)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def clients(fleet_broker: Broker, certs: Path) -> Iterator[Any]:
    made: List[Client] = []

    def make(name: str) -> Client:
        made.append(Client(fleet_broker, certs, name))
        return made[-1]

    yield make
    for c in made:
        c.close()


def test_a_device_publishes_only_under_its_own_id(clients) -> None:
    monitor, cam1 = clients("monitor"), clients("cam-1")
    assert monitor.subscribe("edge-sdk/#") == 1
    cam1.publish("edge-sdk/cam-2/telemetry", "forged")  # pretending to be another device
    cam1.publish("edge-sdk/cam-2/cmd", "attack")  # commanding another device
    cam1.publish("elsewhere/topic", "outside the tree")
    cam1.publish("edge-sdk/cam-1/telemetry", "mine")  # the broker keeps one publisher's order
    assert monitor.wait(lambda: ("edge-sdk/cam-1/telemetry", "mine") in monitor.messages)
    assert monitor.received() == [("edge-sdk/cam-1/telemetry", "mine")]


@pytest.mark.parametrize("topic", ["edge-sdk/cam-2/cmd", "edge-sdk/cam-2/#", "edge-sdk/+/cmd", "edge-sdk/#", "#"])
def test_a_device_reads_only_its_own_commands(clients, topic: str) -> None:
    monitor, cam1 = clients("monitor"), clients("cam-1")
    cam1.subscribe(topic)  # whatever the broker grants, nothing of cam-2 may arrive
    assert cam1.subscribe("edge-sdk/cam-1/cmd") == 1
    monitor.publish("edge-sdk/cam-2/cmd", "for cam-2")
    monitor.publish("edge-sdk/cam-2/telemetry", "cam-2's numbers")
    monitor.publish("edge-sdk/cam-1/cmd", "for cam-1")
    assert cam1.wait(lambda: ("edge-sdk/cam-1/cmd", "for cam-1") in cam1.messages)
    assert all(t == "edge-sdk/cam-1/cmd" for t, _ in cam1.received()), cam1.received()


def test_the_operator_commands_any_device_and_the_device_answers(clients) -> None:
    monitor, cam2 = clients("monitor"), clients("cam-2")
    assert cam2.subscribe("edge-sdk/cam-2/cmd") == 1
    assert monitor.subscribe("edge-sdk/+/cmd/response") == 1
    monitor.publish("edge-sdk/cam-2/cmd", '{"cmd": "ping"}')
    assert cam2.wait(lambda: ("edge-sdk/cam-2/cmd", '{"cmd": "ping"}') in cam2.messages)
    cam2.publish("edge-sdk/cam-2/cmd/response", '{"ok": true}')
    assert monitor.wait(lambda: ("edge-sdk/cam-2/cmd/response", '{"ok": true}') in monitor.messages)


def _handshake(port: int, certs: Path, cert: Optional[Path] = None, key: Optional[Path] = None) -> bytes:
    """A TLS connection sending an MQTT CONNECT; what the broker answers (b"" when it hangs up)."""
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    connect = bytes([0x10, 16, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 10, 0, 4]) + b"anon"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(connect)
            return tls.recv(4)


def test_a_client_without_a_certificate_of_the_fleet_ca_is_refused(fleet_broker: Broker, certs: Path, tmp_path: Path) -> None:
    port = fleet_broker.port
    assert _handshake(port, certs, certs / "cam-1.pem", certs / "cam-1.key")[:1] == b"\x20"  # CONNACK
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        answer = _handshake(port, certs)
        if answer == b"":
            raise ConnectionResetError("closed without CONNACK")
    other = tmp_path / "other"
    subprocess.run(["bash", str(FOLDER / "make-certs.sh"), str(other), "ca"], check=True, capture_output=True, timeout=60)
    subprocess.run(["bash", str(FOLDER / "make-certs.sh"), str(other), "client", "cam-1"], check=True,
                   capture_output=True, timeout=60)
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):  # cam-1's name, another CA
        answer = _handshake(port, certs, other / "cam-1.pem", other / "cam-1.key")
        if answer == b"":
            raise ConnectionResetError("closed without CONNACK")
