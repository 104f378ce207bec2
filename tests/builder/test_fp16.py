"""FP16 conversion: float16 inside, float32 at the boundaries, runnable and close to FP32."""
from __future__ import annotations

import numpy as np
import pytest
from detector_factory import make_detector

from edge_sdk.builder import graph
from edge_sdk.builder.fp16 import to_fp16

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")
from onnx import TensorProto  # noqa: E402


@pytest.fixture(scope="module")
def fp32_model():
    return graph.upgrade_opset(graph.fix_input(make_detector(), "input.1", [1, 3, 64, 96]))


def test_boundaries_stay_float32_and_weights_become_float16(fp32_model) -> None:
    half = to_fp16(fp32_model)
    assert [i.type.tensor_type.elem_type for i in half.graph.input] == [TensorProto.FLOAT]
    assert {o.type.tensor_type.elem_type for o in half.graph.output} == {TensorProto.FLOAT}
    assert {i.data_type for i in half.graph.initializer} == {TensorProto.FLOAT16}
    assert half.graph.node[0].op_type == "Cast" and half.graph.node[-1].op_type == "Cast"
    assert [o.name for o in half.graph.output] == [o.name for o in fp32_model.graph.output]


def test_runs_in_onnx_runtime_close_to_fp32(fp32_model) -> None:
    half = to_fp16(fp32_model)
    feed = graph.random_feed(fp32_model, seed=3)
    ref = graph.session_from_model(fp32_model).run(None, feed)
    out = graph.session_from_model(half).run(None, feed)
    for r, o in zip(ref, out):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, r, rtol=1e-2, atol=1e-2)


def test_input_model_is_not_changed(fp32_model) -> None:
    before = fp32_model.SerializeToString()
    to_fp16(fp32_model)
    assert fp32_model.SerializeToString() == before


def test_out_of_range_weights_are_clipped_not_infinite() -> None:
    model = graph.fix_input(make_detector(weights_as_inputs=False), "input.1", [1, 3, 64, 96])
    for init in model.graph.initializer:
        if init.name == "lm.b":
            init.CopyFrom(onnx.numpy_helper.from_array(np.full(10, 1e6, np.float32), "lm.b"))
    half = to_fp16(model)
    lm_b = next(onnx.numpy_helper.to_array(i) for i in half.graph.initializer if i.name == "lm.b")
    assert np.all(np.isfinite(lm_b)) and float(lm_b.max()) == float(np.finfo(np.float16).max)
