"""A second broker: RabbitMQ with its MQTT plugin (Debian's `rabbitmq-server`), started here on
free ports with its data in tmp. The daemon as a real process publishes its retained status and
telemetry, answers a command, and its will says `offline` when it is killed; a newcomer reads
the retained status; `edge-sdk monitor --protocol 3.1.1` (RabbitMQ before 3.13 speaks MQTT
3.1.1 only) shows the device. One broker for the module: the Erlang VM takes ~14 s to start on
the 2-core CI machine, the test itself ~10 s."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from edge_sdk.telemetry import schemas

from mqtt_broker import MessageLog, free_port
from polling import wait_until
from processes import carrying
from test_monitor_bounds import Monitor
from test_run_process import start, write_config
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")
SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitMQ:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port, amqp, dist, self.epmd_port = free_port(), free_port(), free_port(), free_port()
        (folder / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = {amqp}\nmqtt.listeners.tcp.default = {self.port}\n"
            "mqtt.allow_anonymous = true\nloopback_users = none\n")
        (folder / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        env = dict(os.environ, HOME=str(folder), RABBITMQ_MNESIA_BASE=str(folder / "mnesia"),
                   RABBITMQ_LOG_BASE=str(folder / "log"), RABBITMQ_CONFIG_FILE=str(folder / "rabbitmq"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=str(folder / "enabled_plugins"),
                   RABBITMQ_PLUGINS_EXPAND_DIR=str(folder / "plugins"), RABBITMQ_PID_FILE=str(folder / "pid"),
                   RABBITMQ_NODENAME=f"edge-sdk-test-{self.port}@localhost", RABBITMQ_DIST_PORT=str(dist),
                   ERL_EPMD_PORT=str(self.epmd_port))  # a port mapper of the test's own, stopped with it
        self.out = open(folder / "server.log", "w")
        self.proc = subprocess.Popen([SERVER], env=env, stdout=self.out, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def accepting(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return self.proc.poll() is not None  # exited: stop waiting, the assertion below says why

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
        finally:
            # the Erlang port mapper the server started runs detached, on this test's own port
            for pid in carrying("ERL_EPMD_PORT", str(self.epmd_port)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            self.out.close()


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory) -> Iterator[RabbitMQ]:
    if not os.path.exists(SERVER):
        reason = "rabbitmq-server is not installed (apt-get install -y rabbitmq-server)"
        if os.environ.get("CI"):
            pytest.fail(reason + "; CI must run the second-broker tests")
        pytest.skip(reason)
    broker = RabbitMQ(tmp_path_factory.mktemp("rabbitmq"))
    started = time.monotonic()
    try:
        ok = wait_until(broker.accepting, 120) and broker.proc.poll() is None
        assert ok, (broker.folder / "server.log").read_text()[-3000:]
        print(f"RabbitMQ accepted MQTT after {time.monotonic() - started:.1f} s")
        yield broker
    finally:
        broker.stop()


def test_daemon_commands_retained_status_will_and_monitor_on_rabbitmq(rabbitmq: RabbitMQ, tmp_path: Path) -> None:
    config = write_config(tmp_path / "device.toml", make_tiny_bundle(tmp_path / "bundle"), rabbitmq.url, 0.3)
    log = MessageLog(rabbitmq.url, ["edge-sdk/proc-1/#"]).start()
    monitor = Monitor(rabbitmq.url, tmp_path, "--protocol", "3.1.1")
    try:
        proc = start(config)
        try:
            assert log.wait(lambda m: any(s["state"] == "online" for s in log.on("status")) and
                            len(log.on("telemetry")) >= 2, 120), proc.stderr
            for m in log.messages:
                if m["topic"].endswith(("/status", "/telemetry")):
                    assert schemas.errors(m["payload"]) == [], m
            # a command and its response
            log.client.publish(schemas.topic("proc-1", "cmd"),
                               json.dumps({"schema": "edge-sdk/cmd/1", "id": "p1", "cmd": "ping"}), qos=1)
            assert log.wait(lambda m: any(r["id"] == "p1" for r in log.on("cmd/response")), 90)
            reply = next(r for r in log.on("cmd/response") if r["id"] == "p1")
            assert reply["ok"] and reply["result"]["pong"] is True
            # a newcomer on the status topic gets the retained online status
            late = MessageLog(rabbitmq.url, ["edge-sdk/proc-1/status"]).start()
            try:
                assert late.wait(lambda m: any(x["retain"] and x["payload"]["state"] == "online" for x in m), 90)
            finally:
                late.stop()
            # the monitor over MQTT 3.1.1 shows the device's telemetry and status
            assert wait_until(lambda: (monitor.value("edge_sdk_frames_per_second", 'device="proc-1"') or 0) > 0, 90), \
                monitor.stop()
        finally:
            proc.kill()
            proc.communicate(timeout=10)
        assert log.wait(lambda m: log.on("status")[-1]["state"] == "offline", 90)  # the will
        assert log.on("status")[-1]["reason"] == "connection lost"
        late = MessageLog(rabbitmq.url, ["edge-sdk/proc-1/status"]).start()
        try:
            assert late.wait(lambda m: any(x["retain"] and x["payload"]["state"] == "offline" for x in m), 90)
        finally:
            late.stop()
        assert wait_until(lambda: monitor.value("edge_sdk_up", 'device="proc-1"') == 0.0, 90)
        err = monitor.stop()
        assert "0 invalid" in err, err
    finally:
        monitor.stop()  # its group killed too, should it not stop
    log.stop()
