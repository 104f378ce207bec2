"""Fixtures of the engine tests: tiny bundles and fake TensorRT installs."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from fakes.fake_tensorrt import FAKES, FakeTensorRT
from trt_bundles import write_bundle


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
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "engine-cache"
