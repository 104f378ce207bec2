"""`edge-sdk doctor`: probes over a fake root (a folder standing in for `/`), fake modules and
commands for what a Jetson has, the real CLI on this machine (none of it), a real Mosquitto for
broker reachability."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Optional, Sequence

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.doctor import MISSING, OK, Env, diagnose, plan_for, ready
from edge_sdk.daemon.config import daemon_config_from_dict
from edge_sdk.trt.device import probe_jetson

runner = CliRunner()

XAVIER_RELEASE = ("# R35 (release), REVISION: 3.1, GCID: 32827747, BOARD: t186ref, EABI: aarch64, "
                  "DATE: Sun Mar 19 15:19:21 UTC 2023\n")


def jetson_root(tmp_path: Path) -> Path:
    """The files a Xavier NX with a CSI camera, jtop and the Argus daemon shows."""
    root = tmp_path / "root"
    for rel, content in {
        "etc/nv_tegra_release": XAVIER_RELEASE,
        "proc/device-tree/model": "NVIDIA Jetson Xavier NX Developer Kit\x00",
        "proc/812/comm": "nvargus-daemon\n",
        "proc/1/comm": "systemd\n",
        "dev/video0": "", "dev/nvhost-nvdla0": "", "dev/nvhost-nvdla1": "", "dev/nvhost-ctrl-nvdla0": "",
        "run/jtop.sock": "", "usr/sbin/nvargus-daemon": "",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def jetson_modules(name: str) -> Optional[Any]:
    """What JetPack's Python offers: TensorRT 8.5, pycuda, OpenCV with GStreamer, jetson-stats."""
    return {
        "tensorrt": SimpleNamespace(__version__="8.5.2.2"),
        "pycuda": SimpleNamespace(),
        "cv2": SimpleNamespace(__version__="4.5.4", getBuildInformation=lambda: "  Video I/O:\n    GStreamer:   YES (1.16.3)\n"),
        "jtop": SimpleNamespace(),
        "paho.mqtt.client": SimpleNamespace(),
    }.get(name)


def jetson_commands(cmd: Sequence[str], timeout_s: float) -> Optional[str]:
    return {
        "nvpmodel": "NV Power Mode: MODE_20W_6CORE\n8\n",
        "jetson_clocks": "SOC family:tegra194  Machine:NVIDIA Jetson Xavier NX Developer Kit\n"
                         "GPU MinFreq=1109250000 MaxFreq=1109250000 CurrentFreq=1109250000\n",
    }.get(cmd[0])


def jetson_env(root: Path, connect: Any = None) -> Env:
    return Env(root=root, run=jetson_commands, module=jetson_modules, gpu_probes=[lambda: probe_jetson(root)],
               connect=connect or (lambda *a: None))


def by_key(checks: Sequence[Any]) -> Dict[str, Any]:
    return {c.key: c for c in checks}


def device_config(**data: Any):
    base: Dict[str, Any] = {"backend": "tensorrt", "source": {"uri": "csi://0"}, "device": {"id": "cam-1"}}
    base.update(data)
    return daemon_config_from_dict(base)


def test_a_xavier_nx_with_everything_is_ready(tmp_path: Path) -> None:
    root = jetson_root(tmp_path)
    checks = by_key(diagnose(jetson_env(root), plan_for(device_config(mqtt={"url": "mqtt://broker.lan:1883"}))))
    assert checks["l4t"].ok and checks["l4t"].found.startswith("L4T R35.3.1 (JetPack 5.1.1), NVIDIA Jetson Xavier NX")
    assert checks["gpu"].ok and "SM 7.2" in checks["gpu"].found
    assert checks["dla"].ok and checks["dla"].found.startswith("2 ")  # the ctrl node is not a core
    assert checks["gstreamer"].ok and checks["camera"].ok and "nvargus-daemon running" in checks["camera"].found
    assert checks["jtop"].ok and checks["broker"].ok
    assert checks["power"].found == "MODE_20W_6CORE, GPU 1109 MHz (pinned)"
    assert ready(list(checks.values()))


def test_an_engine_cache_others_can_write_into_fails_the_disk_check(tmp_path: Path) -> None:
    root = jetson_root(tmp_path)
    plan = plan_for(device_config())
    plan.cache_dir = tmp_path / "engines"
    plan.cache_dir.mkdir(mode=0o700)
    assert by_key(diagnose(jetson_env(root), plan))["disk"].ok
    plan.cache_dir.chmod(0o777)
    disk = by_key(diagnose(jetson_env(root), plan))["disk"]
    assert disk.status == MISSING and f"chmod go-w {plan.cache_dir}" in disk.fix


@pytest.mark.parametrize("remove,key", [
    ("etc/nv_tegra_release", "l4t"),
    ("proc/812/comm", "camera"),  # the Argus daemon is not running: csi:// cannot open
    ("dev/video0", "camera"),
])
def test_a_missing_file_makes_its_check_fail(tmp_path: Path, remove: str, key: str) -> None:
    root = jetson_root(tmp_path)
    (root / remove).unlink()
    checks = by_key(diagnose(jetson_env(root), plan_for(device_config())))
    assert checks[key].status == MISSING and checks[key].needed and checks[key].fix
    assert not ready(list(checks.values()))


@pytest.mark.parametrize("text,word", [
    ("# R32 (release), REVISION: 7.4, GCID: 1\n", "R35"),
    ("garbage\x00\xff", "not an L4T release line"),
])
def test_wrong_or_garbled_release(tmp_path: Path, text: str, word: str) -> None:
    root = jetson_root(tmp_path)
    (root / "etc/nv_tegra_release").write_text(text, errors="surrogateescape")
    check = by_key(diagnose(jetson_env(root), plan_for()))["l4t"]
    assert check.status == MISSING and word in check.found


def test_opencv_without_gstreamer_fails_a_csi_config_only(tmp_path: Path) -> None:
    root = jetson_root(tmp_path)

    def pip_wheel(name: str) -> Any:
        if name == "cv2":
            return SimpleNamespace(__version__="4.10", getBuildInformation=lambda: "    GStreamer:   NO\n")
        return jetson_modules(name)

    env = Env(root=root, run=jetson_commands, module=pip_wheel, gpu_probes=[lambda: probe_jetson(root)])
    csi = by_key(diagnose(env, plan_for(device_config())))
    assert csi["gstreamer"].status == MISSING and csi["gstreamer"].needed and "python3-opencv" in csi["gstreamer"].fix
    usb = by_key(diagnose(env, plan_for(device_config(source={"uri": "v4l2:///dev/video0"}))))
    assert not usb["gstreamer"].needed and ready(list(usb.values()))


def test_a_probe_that_raises_becomes_a_row(tmp_path: Path) -> None:
    def broken(name: str) -> Any:
        raise RuntimeError("libnvinfer.so.8: cannot open shared object file")

    env = Env(root=tmp_path, run=lambda c, t: None, module=broken, gpu_probes=[])
    checks = by_key(diagnose(env, plan_for()))
    assert checks["tensorrt"].status == MISSING and "RuntimeError: libnvinfer.so.8" in checks["tensorrt"].found
    assert len(checks) == 18 and not ready(list(checks.values()))


def test_broker_reachability_against_a_real_broker(tmp_path: Path, broker) -> None:
    cfg = device_config(mqtt={"url": broker.url})
    up = by_key(diagnose(Env(root=jetson_root(tmp_path)), plan_for(cfg)))["broker"]
    assert up.ok and "reachable" in up.found
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = by_key(diagnose(Env(root=tmp_path), plan_for(device_config(mqtt={"url": f"mqtt://127.0.0.1:{port}"}))))["broker"]
    assert down.status == MISSING and down.needed and "ConnectionRefusedError" in down.found


def test_cli_on_a_machine_with_none_of_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["doctor", "--root", str(empty)])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback: a clean exit
    assert "Traceback" not in result.output
    for name in ("L4T / JetPack", "TensorRT", "GPU and SM", "DLA cores", "OpenCV", "jtop service", "engine cache disk"):
        assert name in result.output
    assert "not ready" in result.output and "MISSING" in result.output

    as_json = runner.invoke(app, ["doctor", "--json", "--root", str(empty)])
    assert as_json.exit_code == 1
    data = json.loads(as_json.output)
    rows = {c["key"]: c for c in data["checks"]}
    assert data["ready"] is False and rows["l4t"]["status"] == MISSING and rows["l4t"]["needed"] is True


def test_cli_exit_0_when_the_config_has_what_it_needs(tmp_path: Path, broker) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("cv2")
    config = tmp_path / "device.toml"
    config.write_text(f'backend = "onnxruntime-cpu"\n[source]\nuri = "synthetic://faces"\n'
                      f'[device]\nid = "cam-1"\n[mqtt]\nurl = "{broker.url}"\n')
    result = runner.invoke(app, ["doctor", "--json", "--config", str(config), "--root", str(tmp_path)])
    rows = {c["key"]: c for c in json.loads(result.output)["checks"]}
    assert result.exit_code == 0, result.output
    assert rows["broker"]["status"] == OK and not rows["l4t"]["needed"] and not rows["tensorrt"]["needed"]
    broker.stop()
    down = runner.invoke(app, ["doctor", "--config", str(config), "--root", str(tmp_path)])
    assert down.exit_code == 1 and "broker" in down.output


def test_cli_reports_a_bad_config_as_a_row(tmp_path: Path) -> None:
    config = tmp_path / "device.toml"
    config.write_text('backend = "warp-drive"\n')
    result = runner.invoke(app, ["doctor", "--json", "--config", str(config), "--root", str(tmp_path)])
    assert result.exit_code == 1
    rows = {c["key"]: c for c in json.loads(result.output)["checks"]}
    assert rows["config"]["status"] == MISSING and "backend" in rows["config"]["found"]


def test_the_model_folder_must_be_writable_when_one_is_set(tmp_path: Path) -> None:
    """Reload by URL and `rollout --url` download into models_dir: a folder the daemon cannot
    create files in fails the check, naming the fix; a writable one passes; none is information."""
    root = jetson_root(tmp_path)
    models = tmp_path / "bundles"
    models.mkdir()
    cfg = device_config()
    cfg.device.models_dir = str(models)
    checks = by_key(diagnose(jetson_env(root), plan_for(cfg)))
    assert checks["models"].ok and checks["models"].needed and checks["models"].found == f"{models}: writable"
    cfg.device.models_dir = str(tmp_path / "missing")
    checks = by_key(diagnose(jetson_env(root), plan_for(cfg)))
    assert checks["models"].status == MISSING and "is not a folder" in checks["models"].found
    assert "/var/lib/edge-sdk/bundles" in checks["models"].fix and not ready(list(checks.values()))
    cfg.device.models_dir = None
    assert by_key(diagnose(jetson_env(root), plan_for(cfg)))["models"].status == "info"
