"""The hand-written ONNX bytes of the test models are the models onnx.helper makes."""
from __future__ import annotations

import numpy as np
import pytest

from onnx_proto import make_graph, make_model, make_node, make_tensor, value_info
from runtime_factories import tiny_centerface_bytes
from tiny_bundle import tiny_model_bytes

pytestmark = pytest.mark.host  # onnx is imported inside the tests: the device set deselects them


@pytest.fixture(autouse=True)
def onnx_here():
    pytest.importorskip("onnx")


def helper_tiny_centerface(height: int, width: int):
    from onnx import TensorProto, helper

    h4, w4 = height // 4, width // 4
    nodes = [
        helper.make_node("AveragePool", ["input.1"], ["pooled"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("ReduceMean", ["pooled"], ["gray"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["gray", "c128"], ["centred"]),
        helper.make_node("Mul", ["centred", "c025"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["537"]),
        helper.make_node("Mul", ["pooled", "zero"], ["z3"]),
        helper.make_node("Concat", ["z3", "z3"], ["z6"], axis=1),
        helper.make_node("Slice", ["z6", "s0", "s2", "s_axis"], ["538"]),
        helper.make_node("Slice", ["z6", "s0", "s2", "s_axis"], ["539"]),
        helper.make_node("Concat", ["z6", "z3", "z3"], ["z12"], axis=1),
        helper.make_node("Slice", ["z12", "s0", "s10", "s_axis"], ["540"]),
    ]
    inits = [
        helper.make_tensor("c128", TensorProto.FLOAT, [], [128.0]),
        helper.make_tensor("c025", TensorProto.FLOAT, [], [0.25]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("s0", TensorProto.INT64, [1], [0]),
        helper.make_tensor("s2", TensorProto.INT64, [1], [2]),
        helper.make_tensor("s10", TensorProto.INT64, [1], [10]),
        helper.make_tensor("s_axis", TensorProto.INT64, [1], [1]),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, h4, w4]) for n, c in (("537", 1), ("538", 2), ("539", 2), ("540", 10))]
    graph = helper.make_graph(nodes, "tiny_centerface", [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, height, width])], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return model


def helper_tiny_model(seed: int, height: int = 32, width: int = 32):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = rng.normal(0, 0.02, size=(15, 3, 1, 1)).astype(np.float32)
    bias = np.zeros(15, np.float32)
    bias[0] = -1.0 + 0.1 * seed
    nodes = [
        helper.make_node("AveragePool", ["input"], ["pooled"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Conv", ["pooled", "w", "b"], ["maps"]),
        helper.make_node("Split", ["maps"], ["logits", "scale", "offset", "landmarks"], axis=1, split=[1, 2, 2, 10]),
        helper.make_node("Sigmoid", ["logits"], ["heatmap"]),
    ]
    graph = helper.make_graph(
        nodes, f"tiny_centerface_{seed}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, height // 4, width // 4])
         for n, c in (("heatmap", 1), ("scale", 2), ("offset", 2), ("landmarks", 10))],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    return model


def same_model(ours: bytes, reference) -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(ours)
    onnx.checker.check_model(model, full_check=True)
    reference.ClearField("producer_name")
    for m in (model, reference):  # raw_data and float_data hold the same numbers: compare values
        for init in m.graph.initializer:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init), init.name))
    assert model == reference


@pytest.mark.parametrize("hw", [(32, 64), (384, 640)])
def test_tiny_centerface_is_the_helper_model(hw) -> None:
    same_model(tiny_centerface_bytes(*hw), helper_tiny_centerface(*hw))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiny_bundle_model_is_the_helper_model(seed: int) -> None:
    same_model(tiny_model_bytes(seed), helper_tiny_model(seed))


def test_attributes_of_every_kind_and_negative_ints() -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    tensor = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = make_node("Op", ["a"], ["b"], name="n", alpha=0.5, axis=-1, pads=[0, -2, 3], value=tensor)
    ours = make_model(make_graph([node], "g", [value_info("a", [2, 3])], [value_info("b", [2, 3])],
                                 [make_tensor("k", np.array([-5, 7], np.int64))]), opset=13, producer_name="p")
    ref_node = helper.make_node("Op", ["a"], ["b"], name="n", alpha=0.5, axis=-1, pads=[0, -2, 3],
                                value=numpy_helper.from_array(tensor, "value"))
    ref = helper.make_model(
        helper.make_graph([ref_node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.array([-5, 7], np.int64), "k")]),
        opset_imports=[helper.make_opsetid("", 13)], producer_name="p")
    ref.ir_version = 7
    assert onnx.load_from_string(ours) == ref
