"""Fixtures for runtime tests (factories live in tests/runtime_factories.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from edge_sdk.preprocess import InputSpec
from runtime_factories import CENTERFACE_DECODER, CENTERFACE_SPEC, tiny_centerface_model, write_bundle, write_video


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("tiny")
    model = tiny_centerface_model(tmp / "tiny.onnx")
    spec = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
    return write_bundle(tmp / "bundle", model, spec, CENTERFACE_DECODER, extra_variants=("fp16",))


@pytest.fixture(scope="session")
def centerface_bundle(centerface_384x640_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bundle(tmp_path_factory.mktemp("cf") / "bundle", Path(centerface_384x640_path), CENTERFACE_SPEC, CENTERFACE_DECODER)


@pytest.fixture
def video_factory(tmp_path: Path) -> Callable[..., Path]:
    def make(frames: int = 12, name: str = "clip.avi", **kw: Any) -> Path:
        return write_video(tmp_path / name, frames, **kw)

    return make
