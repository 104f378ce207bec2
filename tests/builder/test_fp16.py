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


def test_layers_in_fp16_runs_the_named_layer_through_float16() -> None:
    """One 1x1 Conv whose input and weight are not float16 numbers: FP32 keeps them, the simulated
    FP16 layer gives exactly what numpy gives with input, weight and output rounded to float16
    (accumulating in float32), even under ONNX Runtime's full graph optimisation."""
    from onnx import helper, numpy_helper

    from edge_sdk.builder.fp16 import layers_in_fp16

    w = np.array([1.0 + 2.0 ** -12, -3.0 - 2.0 ** -11, 0.1], np.float32).reshape(1, 3, 1, 1)
    b = np.array([2.0 ** -14 + 1e-6], np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]), opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    x = (np.random.default_rng(2).uniform(0, 255, (1, 3, 2, 5)) + 1.0 / 3.0).astype(np.float32)
    half = layers_in_fp16(model, ["conv"])
    got = graph.session_from_model(half).run(None, {"x": x})[0]
    exact = graph.session_from_model(model).run(None, {"x": x})[0]

    def f16(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float16).astype(np.float32)

    conv = (f16(x) * f16(w).reshape(1, 3, 1, 1)).sum(axis=1, keepdims=True, dtype=np.float32) + f16(b)
    expected = np.maximum(f16(conv), 0)
    assert np.array_equal(got, expected)
    assert not np.array_equal(got, exact)  # the rounding shows: FP32 would hide a missing cast
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == w.tolist()  # the input model is untouched
    with pytest.raises(Exception, match="no node named nope"):
        layers_in_fp16(model, ["nope"])
