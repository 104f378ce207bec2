"""The default model with a free batch dimension, for the tests of one backend call per batch of
frames: a fixture (import it into the test module) over the 384 x 640 model of tests/conftest.py."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def dynamic_batch_path(centerface_384x640_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default model at 384 x 640 with a symbolic batch dimension on its input and outputs."""
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(centerface_384x640_path))
    for value in list(model.graph.input) + list(model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "batch"
    del model.graph.value_info[:]
    onnx.checker.check_model(model)
    path = tmp_path_factory.mktemp("batch") / "centerface_batch.onnx"
    onnx.save(model, str(path))
    return path
