"""The daemon with its telemetry queue on a full disk and the broker away: detection goes on.

The real Pipeline (synthetic source, ONNX Runtime, a tiny CenterFace-shaped model) and the real
publisher built from the config; the disk is made full with SQLite's page limit (tests/full_disk.py).
"""
from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Optional

import pytest

from edge_sdk.daemon import Daemon, daemon_config_from_dict

from full_disk import FullDisk, page_count
from mqtt_broker import free_port
from polling import wait_until
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

SOURCE = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return make_tiny_bundle(tmp_path_factory.mktemp("models") / "a", seed=0)


def test_a_full_disk_with_the_broker_away_never_stops_detection(bundle: Path, tmp_path: Path, monkeypatch) -> None:
    queue = tmp_path / "queue"
    FullDisk(monkeypatch, queue, pages=8)  # a few KB of room: full within a second of telemetry
    cfg = daemon_config_from_dict({
        "bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "source": {"uri": SOURCE},
        "cache": {"enabled": False},
        "device": {"id": "cam-1", "instance_check_s": 0},  # no broker to ask about a twin
        "telemetry": {"interval_s": 0.05, "detections": "frame"},
        "mqtt": {"url": f"mqtt://127.0.0.1:{free_port()}", "queue_dir": str(queue),  # nothing listens there
                 "reconnect_min_s": 0.1, "reconnect_max_s": 0.5},
    })
    daemon = Daemon(cfg)
    code: Optional[int] = None

    def run() -> None:
        nonlocal code
        code = daemon.run()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        # before the fix the daemon exited 11 about 1.4 s after the disk filled up
        assert wait_until(lambda: daemon.reporter is not None and "telemetry_queue" in daemon.reporter.alerts()
                          or not thread.is_alive(), 30)
        assert thread.is_alive(), f"the daemon stopped (exit {code})"
        frames_at_alert = daemon.frames
        assert wait_until(lambda: daemon.frames >= frames_at_alert + 90 or not thread.is_alive(), 30)
        assert thread.is_alive() and daemon.publisher.error is None, f"the daemon stopped (exit {code})"
        stats = daemon.publisher.stats()
        assert stats["telemetry_dropped"] > 0 and stats["connected"] is False
    finally:
        daemon.request_stop("test")
        thread.join(30)
    assert code == 0
    path = queue / "cam-1.sqlite3"
    assert page_count(path) <= 8
    with closing(sqlite3.connect(str(path))) as db:
        topics = {(t, q) for t, q in db.execute("SELECT topic, qos FROM q")}
    # telemetry and alerts wait on disk; the per-frame detections (QoS 0) never went there
    assert ("edge-sdk/cam-1/telemetry", 1) in topics
    assert all(q == 1 and not t.endswith("/detections") for t, q in topics), topics
