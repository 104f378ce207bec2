"""Shared fixtures for the builder tests: tiny ONNX models and image folders made on the fly."""
from __future__ import annotations

from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
from detector_factory import make_detector, write_images  # noqa: E402


@pytest.fixture
def detector_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_detector.onnx"
    onnx.save(make_detector(), str(path))
    return path


@pytest.fixture
def calib_dir(tmp_path: Path) -> Path:
    return write_images(tmp_path / "calib", 16)
