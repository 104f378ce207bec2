"""The systemd units of device_images/: `systemd-analyze verify` accepts them (in a fake root that
holds the programs they run, so that the check does not depend on this machine), and the service
is what the daemon and the provisioning expect: notify + watchdog, hardened, writable only where
the engine cache, the queue and the health file live."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "device_images"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")


def entries(unit: Path) -> List[Tuple[str, str, str]]:
    """(section, key, value) in file order; repeated keys stay repeated, as systemd reads them."""
    out: List[Tuple[str, str, str]] = []
    section = ""
    for line in unit.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def service(unit: Path) -> Dict[str, List[str]]:
    found: Dict[str, List[str]] = {}
    for section, key, value in entries(unit):
        if section == "Service":
            found.setdefault(key, []).append(value)
    return found


def environment(values: List[str]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for value in values:
        for word in value.split():
            key, _, v = word.partition("=")
            env[key] = v
    return env


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None or not SYSTEM_UNITS.is_dir():
        pytest.skip("systemd-analyze is not installed here (Debian/Ubuntu: apt-get install systemd)")
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    units = sorted(UNITS.glob("*.service"))
    assert {u.name for u in units} == {"edge-sdk.service", "edge-sdk-clocks.service"}
    for unit in units:
        for section, key, value in entries(unit):
            if key.startswith("Exec"):  # verify checks that each program exists and is executable
                program = root / value.lstrip("-@!+:").split()[0].lstrip("/")
                program.parent.mkdir(parents=True, exist_ok=True)
                program.write_text("#!/bin/sh\n")
                program.chmod(0o755)
        (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
    result = subprocess.run([analyze, "verify", f"--root={root}"] + [f"/etc/systemd/system/{u.name}" for u in units],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ, SYSTEMD_LOG_COLOR="0"))
    # verify exits 0 on unknown keys and bad values, but says so: any message is a failure
    assert result.returncode == 0 and result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr


def test_the_service_is_notify_with_a_watchdog_and_restarts_on_failure() -> None:
    s = service(UNITS / "edge-sdk.service")
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    assert int(s["WatchdogSec"][0]) >= 10  # the daemon pings every 5 s at most
    assert s["Restart"] == ["on-failure"]
    assert set(s["RestartPreventExitStatus"][0].split()) == {"2", "7", "8"}  # config, target, bundle errors
    assert s["ExecStart"][0].split()[:2] == ["/opt/edge-sdk/venv/bin/edge-sdk", "run"]  # where provision.sh installs it
    assert "edge-sdk/venv" in (UNITS / "provision.sh").read_text()


def test_the_service_is_hardened_and_writes_only_where_its_state_lives() -> None:
    s = service(UNITS / "edge-sdk.service")
    assert s["NoNewPrivileges"] == ["yes"] and s["ProtectSystem"] == ["strict"] and s["ProtectHome"] == ["yes"]
    assert s["User"] == ["edge-sdk"] and s["CapabilityBoundingSet"] == [""]
    assert "PrivateDevices" not in s  # the GPU (/dev/nvhost-*, /dev/nvmap) and cameras must stay visible
    writable = s["ReadWritePaths"][0].split()
    assert writable == ["/var/lib/edge-sdk"]
    state = ["/var/lib/" + d for d in s["StateDirectory"][0].split()]
    runtime = ["/run/" + d for d in s["RuntimeDirectory"][0].split()]
    env = environment(s["Environment"])

    def inside(path: str, folders: List[str]) -> bool:
        return any(path == f or path.startswith(f + "/") for f in folders)

    # the engine cache, the kernel cache, the telemetry queue (XDG state) and temporary files
    for key in ("EDGE_SDK_ENGINE_CACHE", "EDGE_SDK_KERNEL_CACHE", "XDG_STATE_HOME", "XDG_CACHE_HOME", "TMPDIR", "HOME"):
        assert inside(env[key], writable), f"{key}={env[key]} is not writable under ProtectSystem=strict"
    assert inside(env["TMPDIR"], state), "TMPDIR must exist: systemd creates the StateDirectory entries"
    assert inside(env["EDGE_SDK_HEALTH_FILE"].rsplit("/", 1)[0], runtime)
    # reload by URL and rollouts download into models_dir: it must be writable, and made by systemd
    from edge_sdk.fsutil import read_toml

    device = read_toml(UNITS / "device.toml")
    assert device["device"]["models_dir"] in state and inside(device["device"]["models_dir"], writable)
    assert inside(device["bundle"], [device["device"]["models_dir"]])  # a rollback reloads it by name


def test_the_clocks_unit_runs_jetson_clocks_once_per_boot() -> None:
    s = service(UNITS / "edge-sdk-clocks.service")
    assert s["Type"] == ["oneshot"] and s["RemainAfterExit"] == ["yes"]
    assert s["ExecStart"] == ["/usr/bin/jetson_clocks"]
    unit = {key: value for section, key, value in entries(UNITS / "edge-sdk-clocks.service") if section == "Unit"}
    assert "nvpmodel.service" in unit["After"]
