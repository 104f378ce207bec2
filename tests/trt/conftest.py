"""Fixtures of the engine tests: tiny bundles and fake TensorRT installs."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from edge_sdk.trt import calibrator as calibrator_mod
from edge_sdk.trt import engine as engine_mod
from fakes.fake_tensorrt import FAKES, FakeTensorRT
from trt_bundles import XAVIER, write_bundle


@pytest.fixture
def make_bundle(tmp_path: Path) -> Callable[..., Path]:
    counter = [0]

    def make(**kwargs: Any) -> Path:
        counter[0] += 1
        return write_bundle(tmp_path / f"bundle{counter[0]}", **kwargs)

    return make


@pytest.fixture
def install_trt(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeTensorRT]:
    """install_trt("8.5", **kwargs) puts a fresh fake in sys.modules['tensorrt'] and returns it."""

    def install(version: str, **kwargs: Any) -> FakeTensorRT:
        fake = FAKES[version](**kwargs)
        monkeypatch.setitem(sys.modules, "tensorrt", fake)
        return fake

    return install


@pytest.fixture
def no_trt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import tensorrt` fail, whether or not TensorRT is installed."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)


@pytest.fixture
def on_xavier(monkeypatch: pytest.MonkeyPatch, install_trt: Callable[..., FakeTensorRT]) -> FakeTensorRT:
    """A fake TensorRT 8.5 on a Xavier NX (calibration buffers from the fake's device memory)."""
    fake = install_trt("8.5")
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: XAVIER)
    monkeypatch.setattr(calibrator_mod, "allocate_device_buffer", fake.device_memory.allocate)
    return fake


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "engine-cache"
