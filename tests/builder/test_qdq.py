"""Explicit Q/DQ: structure TensorRT wants, outputs close to FP32 in ONNX Runtime, exclusions."""
from __future__ import annotations

from typing import Dict

import numpy as np
import pytest

from edge_sdk.builder import calibration as cal
from edge_sdk.builder import qdq
from edge_sdk.errors import CalibrationError, ModelError

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402


def _ranges(model, feeds) -> Dict[str, float]:
    return cal.collect_ranges(model, feeds, method="minmax").ranges


def _run(model, feeds):
    session = cal.make_session(model)
    return [session.run(None, f) for f in feeds]


def _by_output(model):
    return {o: n for n in model.graph.node for o in n.output}


def _inits(model):
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def _dq_feeding(model, node_name: str, index: int):
    producer = _by_output(model)
    node = next(n for n in model.graph.node if n.name == node_name)
    return producer.get(node.input[index])


def test_name_nodes_is_stable_and_unique(convnet) -> None:
    named = qdq.name_nodes(convnet)
    names = [n.name for n in named.graph.node]
    assert names[:3] == ["Conv_c1", "Relu_r1", "Conv_c2"]
    assert len(set(names)) == len(names)
    again = qdq.name_nodes(onnx.ModelProto.FromString(named.SerializeToString()))
    assert [n.name for n in again.graph.node] == names


def test_name_nodes_renames_duplicates_only(convnet) -> None:
    convnet.graph.node[0].name = "dup"
    convnet.graph.node[1].name = "dup"
    names = [n.name for n in qdq.name_nodes(convnet).graph.node]
    assert names[0] == "dup" and names[1] == "Relu_r1"


def test_qdq_model_is_valid_and_close_to_fp32(convnet, convnet_feeds) -> None:
    ranges = _ranges(convnet, convnet_feeds)
    model = qdq.quantize_qdq(convnet, ranges)
    onnx.checker.check_model(model, full_check=True)
    assert qdq.qdq_summary(model)["quantized_ops"] == 4
    for ref, got in zip(_run(convnet, convnet_feeds), _run(model, convnet_feeds)):
        for a, b in zip(ref, got):
            assert not np.array_equal(a, b)  # quantization did something...
            assert np.abs(a - b).max() <= 0.05 * np.abs(a).max()  # ...within int8 error


def test_activation_scales_and_zero_points_are_as_specified(convnet, convnet_feeds) -> None:
    ranges = _ranges(convnet, convnet_feeds)
    model = qdq.quantize_qdq(convnet, ranges)
    inits = _inits(model)
    producer = _by_output(model)
    for node_name, tensor in [("Conv_c1", "x"), ("Conv_c2", "r1"), ("ConvTranspose_up", "s"), ("Gemm_z", "flat")]:
        dq = _dq_feeding(model, node_name, 0)
        assert dq.op_type == "DequantizeLinear"
        q = producer[dq.input[0]]
        assert q.op_type == "QuantizeLinear" and q.input[0] == tensor
        scale, zp = inits[dq.input[1]], inits[dq.input[2]]
        assert scale.dtype == np.float32 and scale.shape == ()
        assert scale == np.float32(ranges[tensor] / 127)
        assert zp.dtype == np.int8 and zp == 0


@pytest.mark.parametrize(
    "node_name, weight, axis, channels",
    [("Conv_c1", "w1", 0, 8), ("Conv_c2", "w2", 0, 8), ("ConvTranspose_up", "w3", None, None), ("Gemm_z", "w4", 0, 2)],
)
@pytest.mark.parametrize("weight_format", ["qdq", "dq"])
def test_weights_are_symmetric_per_channel_except_convtranspose(convnet, convnet_feeds, node_name, weight, axis, channels, weight_format) -> None:
    model = qdq.quantize_qdq(convnet, _ranges(convnet, convnet_feeds), weight_format=weight_format)
    inits = _inits(model)
    dq = _dq_feeding(model, node_name, 1)
    assert dq.op_type == "DequantizeLinear"
    attrs = {a.name: a.i for a in dq.attribute}
    scale, zp = inits[dq.input[1]], inits[dq.input[2]]
    assert zp.dtype == np.int8 and not zp.any()
    w = numpy_helper.to_array(next(i for i in convnet.graph.initializer if i.name == weight))
    if axis is None:
        assert "axis" not in attrs and scale.shape == ()
        assert scale == np.float32(np.abs(w).max() / 127)
    else:
        assert attrs["axis"] == axis and scale.shape == (channels,)
        others = tuple(d for d in range(w.ndim) if d != axis)
        np.testing.assert_array_equal(scale, (np.abs(w).max(axis=others) / 127).astype(np.float32))
    if weight_format == "dq":
        q = inits[dq.input[0]]
        assert q.dtype == np.int8 and np.abs(q).max() == 127
        assert weight not in inits  # the FP32 copy is gone
    else:
        assert _by_output(model)[dq.input[0]].input[0] == weight


def test_biases_stay_fp32(convnet, convnet_feeds) -> None:
    model = qdq.quantize_qdq(convnet, _ranges(convnet, convnet_feeds))
    for node in model.graph.node:
        if node.op_type in qdq.QUANTIZABLE:
            assert node.input[2] in {"b1", "b2", "b3", "b4"}


def test_excluded_nodes_stay_fp32_and_layer_precisions_say_so(convnet, convnet_feeds) -> None:
    ranges = _ranges(convnet, convnet_feeds)
    model = qdq.quantize_qdq(convnet, ranges, exclude_nodes=["Conv_c2", "Gemm_z"])
    node = {n.name: n for n in model.graph.node}
    assert node["Conv_c2"].input[:2] == ["r1", "w2"]
    assert node["Gemm_z"].input[:2] == ["flat", "w4"]
    assert _dq_feeding(model, "Conv_c1", 0).op_type == "DequantizeLinear"
    assert qdq.qdq_summary(model)["quantized_ops"] == 2
    assert qdq.layer_precisions(convnet, ["Conv_c2", "Gemm_z"]) == {
        "Conv_c1": "int8", "Conv_c2": "fp32", "ConvTranspose_up": "int8", "Gemm_z": "fp32"}


def test_excluding_everything_gives_the_fp32_outputs(convnet, convnet_feeds) -> None:
    model = qdq.quantize_qdq(convnet, {}, exclude_nodes=qdq.quantizable_nodes(convnet))
    assert qdq.qdq_summary(model)["QuantizeLinear"] == 0
    for ref, got in zip(_run(convnet, convnet_feeds), _run(model, convnet_feeds)):
        for a, b in zip(ref, got):
            np.testing.assert_array_equal(a, b)


def test_input_model_is_left_unchanged(convnet, convnet_feeds) -> None:
    before = convnet.SerializeToString()
    qdq.quantize_qdq(convnet, _ranges(convnet, convnet_feeds))
    assert convnet.SerializeToString() == before


def test_opset_9_model_is_upgraded_first(make_convnet, convnet_feeds) -> None:
    old = make_convnet(opset=9)
    ranges = _ranges(old, convnet_feeds)
    model = qdq.quantize_qdq(old, ranges)
    assert qdq._opset(model) == 13
    for ref, got in zip(_run(old, convnet_feeds), _run(model, convnet_feeds)):
        for a, b in zip(ref, got):
            assert np.abs(a - b).max() <= 0.05 * np.abs(a).max()


def test_matmul_weights_are_per_tensor() -> None:
    from onnx import TensorProto, helper

    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["b"])], "mm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "w")],
    )
    model = qdq.quantize_qdq(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7), {"a": 2.0})
    dq = _dq_feeding(model, "MatMul_b", 1)
    assert _inits(model)[dq.input[1]] == np.float32(6 / 127)
    a = np.full((2, 4), 0.5, np.float32)
    np.testing.assert_allclose(cal.make_session(model).run(None, {"a": a})[0], a @ w, atol=0.1)


@pytest.mark.parametrize(
    "axis, expected_scale",
    [(None, [4 / 127]), (0, [1 / 127, 4 / 127]), (1, [2 / 127, 4 / 127])],
)
def test_quantize_weight(axis, expected_scale) -> None:
    w = np.array([[1.0, -0.5], [-2.0, 4.0]], np.float32)
    q, scale = qdq.quantize_weight(w, axis)
    np.testing.assert_array_equal(np.atleast_1d(scale), np.float32(expected_scale))
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    shaped = scale if axis is None else scale.reshape([-1 if d == axis else 1 for d in range(2)])
    assert np.abs(q * shaped - w).max() <= np.max(scale) / 2 + 1e-7


def test_zero_weight_channel_gets_a_usable_scale() -> None:
    q, scale = qdq.quantize_weight(np.zeros((2, 3), np.float32), 0)
    assert np.all(scale > 0) and not q.any()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"exclude_nodes": ["nope"]}, ModelError, "unknown nodes"),
        ({"weight_format": "int4"}, ModelError, "weight_format"),
    ],
)
def test_bad_arguments_raise(convnet, convnet_feeds, kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        qdq.quantize_qdq(convnet, _ranges(convnet, convnet_feeds), **kwargs)


def test_missing_range_names_the_tensor(convnet) -> None:
    with pytest.raises(CalibrationError, match="'r1'"):
        qdq.quantize_qdq(convnet, {"x": 1.0, "s": 1.0, "flat": 1.0})


def test_real_centerface_quantizes_and_keeps_its_heatmap(centerface_384x640_path) -> None:
    rng = np.random.default_rng(0)
    feeds = [{"input.1": rng.uniform(0, 255, (1, 3, 384, 640)).astype(np.float32)} for _ in range(2)]
    model = cal.load_model(centerface_384x640_path)
    ranges = cal.collect_ranges(model, feeds, method="minmax").ranges
    int8 = qdq.quantize_qdq(model, ranges)
    assert qdq._opset(int8) >= 13
    summary = qdq.qdq_summary(int8)
    assert summary["quantized_ops"] == len(qdq.quantizable_nodes(model)) == 63
    ref = cal.make_session(model).run(None, feeds[0])
    got = cal.make_session(int8).run(None, feeds[0])
    from edge_sdk.builder.sensitivity import cosine_distance

    # random pixels are harder than faces; still every output must point the same way
    assert cosine_distance(ref, got) < 0.1
    assert cosine_distance(ref[:1], got[:1]) < 0.05  # heatmap
