"""What a JetPack 5 install resolves to: the pins in pyproject.toml against the device's facts.

TensorRT 8.5 (JetPack 5, Python 3.8, from apt) breaks on numpy >= 1.24 (NVIDIA/TensorRT #2557);
jtop's client must be the version of the host's jtop service, which device_images installs.
.ci/run resolves the device-side install for linux aarch64 / Python 3.8 against PyPI; these tests
check the pins themselves, offline.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

import pytest

from edge_sdk.telemetry.system import JETSON_STATS

try:
    import tomllib
except ImportError:  # Python < 3.11: tomli is a base dependency there
    import tomli as tomllib

packaging_requirements = pytest.importorskip("packaging.requirements")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _env(python: str) -> Dict[str, str]:
    return {"python_version": python, "python_full_version": python + ".0", "platform_system": "Linux",
            "platform_machine": "aarch64", "sys_platform": "linux", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def _numpy_allows(python: str, version: str) -> bool:
    """Whether every base requirement on numpy that applies under `python` allows `version`."""
    applying = []
    for text in PROJECT["dependencies"]:
        req = packaging_requirements.Requirement(text)
        if req.name == "numpy" and (req.marker is None or req.marker.evaluate(_env(python))):
            applying.append(req)
    assert applying, f"no numpy requirement applies on Python {python}"
    return all(req.specifier.contains(version) for req in applying)


@pytest.mark.parametrize("python, version, allowed", [
    ("3.8", "1.23.5", True),   # the newest numpy TensorRT 8.5's Python code works with
    ("3.8", "1.24.4", False),  # what `numpy>=1.21` resolved to on JetPack 5
    ("3.8", "1.21.0", True),
    ("3.10", "1.26.4", True),  # the cap is for Python 3.8 (JetPack 5) only
    ("3.11", "2.1.0", True),
])
def test_numpy_is_capped_below_1_24_on_python_3_8(python: str, version: str, allowed: bool) -> None:
    assert _numpy_allows(python, version) is allowed


def _target_envs() -> List[Dict[str, str]]:
    out = []
    for path in sorted((ROOT / "device_images").glob("*/target.env")):
        out.append(dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")))
    assert out, "no device_images/*/target.env"
    return out


def test_jetson_extra_pins_the_jetson_stats_the_devices_get() -> None:
    (pin,) = PROJECT["optional-dependencies"]["jetson"]
    req = packaging_requirements.Requirement(pin)
    assert req.name == "jetson-stats" and str(req.specifier) == f"=={JETSON_STATS}"
    assert {env["JETSON_STATS_VERSION"] for env in _target_envs()} == {JETSON_STATS}
    dockerfile = (ROOT / "Dockerfile.l4t").read_text()
    assert set(re.findall(r"^ARG JETSON_STATS_VERSION=(\S+)$", dockerfile, re.MULTILINE)) == {JETSON_STATS}


def test_the_cuda_extra_stays_on_the_cuda_11_bindings() -> None:
    """cuda-python >= 12 needs CUDA 12 (JetPack 6); on Python 3.8 aarch64 the 11.8 line ends at
    11.8.2 (later 11.8.x need cuda-bindings, which has no cp38 aarch64 wheel)."""
    (pin,) = PROJECT["optional-dependencies"]["cuda"]
    req = packaging_requirements.Requirement(pin)
    assert req.specifier.contains("11.8.2") and not req.specifier.contains("12.0.0")
