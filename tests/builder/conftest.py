"""Shared fixtures for the builder tests: tiny ONNX models and image folders made on the fly."""
from __future__ import annotations

from pathlib import Path

import pytest

try:
    import onnx
except ImportError:  # the device test set (no host extra): nothing here can even be imported
    onnx = None
    collect_ignore_glob = ["test_*.py"]
else:
    from detector_factory import make_detector, write_images


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """The builder is the host's: every test in this folder is part of the `host` set."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.host)


@pytest.fixture
def detector_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_detector.onnx"
    onnx.save(make_detector(), str(path))
    return path


@pytest.fixture
def calib_dir(tmp_path: Path) -> Path:
    return write_images(tmp_path / "calib", 16)


# --- tiny models for the calibration / Q/DQ / sensitivity tests -------------------------------


def _convnet(opset: int = 13, seed: int = 0, hw: int = 16) -> "onnx.ModelProto":
    """x[1,3,hw,hw] → Conv 3x3 → Relu → depthwise Conv 3x3 → Add (residual) → ConvTranspose
    k2 s2 → Sigmoid = "y"; and Add → GlobalAveragePool → Flatten → Gemm (transB) = "z".
    Nodes are unnamed, as many exporters leave them."""
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    rng = np.random.default_rng(seed)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1),
        init("w2", 8, 1, 3, 3), init("b2", 8, scale=0.1),
        init("w3", 8, 4, 2, 2), init("b3", 4, scale=0.1),
        init("w4", 2, 8), init("b4", 2, scale=0.1),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        n("Add", ["r1", "c2"], ["s"]),
        n("ConvTranspose", ["s", "w3", "b3"], ["up"], strides=[2, 2], kernel_shape=[2, 2]),
        n("Sigmoid", ["up"], ["y"]),
        n("GlobalAveragePool", ["s"], ["gap"]),
        n("Flatten", ["gap"], ["flat"]),
        n("Gemm", ["flat", "w4", "b4"], ["z"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2 * hw, 2 * hw]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def _feeds(count: int, seed: int = 1, shape=(1, 3, 16, 16), name: str = "x", scale: float = 1.0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [{name: (rng.standard_normal(shape) * scale).astype(np.float32)} for _ in range(count)]


@pytest.fixture
def make_convnet():
    """Factory: make_convnet(opset=13, seed=0, hw=16) -> a tiny unnamed Conv/ConvTranspose/Gemm model."""
    return _convnet


@pytest.fixture
def make_feeds():
    """Factory: make_feeds(count, seed=1, shape=(1,3,16,16), name="x", scale=1.0) -> list of feeds."""
    return _feeds


@pytest.fixture
def convnet():
    return _convnet()


@pytest.fixture
def convnet_feeds():
    return _feeds(6)
