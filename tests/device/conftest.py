"""tests/device: checks that need a real Jetson (marked `jetson`); skipped on any other machine.

Run them on the device: `pytest -m jetson tests/device -s` (the tables are printed).
"""
from __future__ import annotations

from pathlib import Path

import pytest


def on_jetson() -> bool:
    model = Path("/proc/device-tree/model")
    if model.is_file() and b"jetson" in model.read_bytes().lower():
        return True
    return Path("/etc/nv_tegra_release").is_file()


def pytest_collection_modifyitems(config, items) -> None:
    if on_jetson():
        return
    skip = pytest.mark.skip(reason="needs a real Jetson (tests/device)")
    for item in items:
        if "jetson" in item.keywords:
            item.add_marker(skip)
