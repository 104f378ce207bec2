"""`edge-sdk run --metrics`: the daemon's own /metrics, for sites that scrape devices directly —
the names the monitor exports, from the daemon's latest telemetry, clean for `promtool`."""
from __future__ import annotations

import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from mqtt_broker import free_port
from polling import wait_until
from test_prometheus import tool
from test_run_process import start
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("prometheus_client")


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return reply.read().decode()
    except OSError:
        return ""


def test_the_daemon_serves_its_own_metrics(tmp_path: Path) -> None:
    bundle = make_tiny_bundle(tmp_path / "bundle")
    config = tmp_path / "device.toml"
    config.write_text(f'bundle = "{bundle}"\nbackend = "onnxruntime-cpu"\nthreads = 1\n'
                      '[source]\nuri = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30"\n'
                      '[device]\nid = "cam-3"\n[telemetry]\ninterval_s = 0.2\n')  # no broker: JSON lines on stdout
    port = free_port()
    proc = start(config, "--metrics", f"127.0.0.1:{port}")
    try:
        fps = re.compile(r'^edge_sdk_frames_per_second\{device="cam-3"\} ([0-9.e+]+)$', re.M)
        assert wait_until(lambda: (lambda m: m is not None and float(m.group(1)) > 0)(fps.search(scrape(port))), 60), \
            proc.stderr.read() if proc.poll() is not None else scrape(port)
        text = scrape(port)
        assert re.search(r'^edge_sdk_up\{device="cam-3"\} 1\.0$', text, re.M)
        assert re.search(r'^edge_sdk_frames_total\{device="cam-3",kind="processed"\} [1-9]', text, re.M)
        assert re.search(r'^edge_sdk_latency_seconds\{device="cam-3",quantile="0.99",stage="total"\} ', text, re.M)
        check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_a_bad_metrics_address_is_a_config_error(tmp_path: Path) -> None:
    proc = start(tmp_path / "none.toml", "--metrics", "host:port")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--metrics 'host:port'" in err, err
