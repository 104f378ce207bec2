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


def _upsampler(opset: int, scales_from: str) -> "onnx.ModelProto":
    """x [1, 3, 5, 7] → Conv 3x3 → ×(2, 3) nearest = y [1, 4, 10, 21], in the form of `opset`:
    Upsample (9), Resize(x, scales) (10), Resize(x, roi, scales) (11), Resize(x, "", scales)
    (13, 19); `scales_from` "initializer", or "computed": a Concat of two Constant nodes."""
    from onnx import helper, numpy_helper

    w = np.random.default_rng(6).standard_normal((4, 3, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv")]
    scales = np.array([1, 1, 2, 3], np.float32)
    if scales_from == "computed":
        nodes += [helper.make_node("Constant", [], ["s_a"], value=numpy_helper.from_array(scales[:2], "s_a"), name="s_a"),
                  helper.make_node("Constant", [], ["s_b"], value=numpy_helper.from_array(scales[2:], "s_b"), name="s_b"),
                  helper.make_node("Concat", ["s_a", "s_b"], ["scales"], axis=0, name="s_cat")]
    else:
        inits.append(numpy_helper.from_array(scales, "scales"))
    if opset < 10:
        nodes.append(helper.make_node("Upsample", ["c", "scales"], ["y"], mode="nearest", name="up"))
    elif opset == 10:
        nodes.append(helper.make_node("Resize", ["c", "scales"], ["y"], mode="nearest", name="up"))
    elif opset < 13:
        inits.append(numpy_helper.from_array(np.zeros(0, np.float32), "roi"))
        nodes.append(helper.make_node("Resize", ["c", "roi", "scales"], ["y"], mode="nearest", name="up"))
    else:
        nodes.append(helper.make_node("Resize", ["c", "", "scales"], ["y"], mode="nearest", name="up"))
    g = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 21])], inits)
    ops = [helper.make_opsetid("", opset)]
    model = helper.make_model(g, opset_imports=ops, ir_version=helper.find_min_ir_version_for(ops))
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("opset,scales_from", [(9, "initializer"), (10, "initializer"), (11, "initializer"),
                                               (13, "initializer"), (19, "initializer"), (13, "computed")])
def test_a_resize_reads_float32_scales_in_the_fp16_model(opset: int, scales_from: str) -> None:
    """A Resize's (an Upsample's) scales are float32 at every opset, also in a float16 graph: the
    scales stay float32 (or are cast back when computed), the rest turns float16, and ONNX Runtime
    runs the result close to FP32 (the oracle: the FP32 model in ONNX Runtime)."""
    model = _upsampler(opset, scales_from)
    half = to_fp16(model)
    types = {i.name: i.data_type for i in half.graph.initializer}
    assert types["w"] == TensorProto.FLOAT16
    if scales_from == "initializer":
        assert types["scales"] == TensorProto.FLOAT
    x = np.random.default_rng(8).uniform(-1, 1, (1, 3, 5, 7)).astype(np.float32)
    ref = graph.session_from_model(model, "none").run(None, {"x": x})[0]
    out = graph.session_from_model(half, "none").run(None, {"x": x})[0]
    assert out.shape == ref.shape == (1, 4, 10, 21)
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2 * float(np.abs(ref).max()))


def test_non_max_suppression_reads_float32_boxes_and_scores_in_the_fp16_model() -> None:
    """NonMaxSuppression takes float32 boxes, scores and thresholds only (every opset): in the
    float16 graph its computed boxes and scores are cast back to float32 and its threshold
    constants stay float32, so ONNX Runtime runs it and selects what FP32 selects. By hand: box 1
    overlaps box 0 at IoU 81 / 119 > 0.5 and goes; boxes 0 and 2 stay."""
    from heads_factory import nms_rows_model, onnx_nms_model, run

    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], np.float32)
    model = onnx_nms_model(boxes, np.array([[0.9, 0.8, 0.7]], np.float32), iou=0.5, score_threshold=0.3)
    half = to_fp16(model)
    nms = next(n for n in half.graph.node if n.op_type == "NonMaxSuppression")
    producers = {o: n for n in half.graph.node for o in n.output}
    types = {i.name: i.data_type for i in half.graph.initializer}
    for name in (nms.input[0], nms.input[1]):  # computed in float16, then cast
        cast = producers[name]
        assert cast.op_type == "Cast" and cast.attribute[0].i == TensorProto.FLOAT
    assert types[nms.input[3]] == types[nms.input[4]] == TensorProto.FLOAT
    ref, out = run(model), run(half)
    np.testing.assert_array_equal(out[2], ref[2])
    np.testing.assert_array_equal(out[2], [[0, 0, 0], [0, 0, 2]])
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-3)
    rows = np.zeros((300, 6), np.float32)
    rows[0] = [10, 20, 110, 220, 0.875, 2]  # values float16 holds exactly
    ultralytics = nms_rows_model(rows)  # NMS on constant boxes: they stay float32
    out = run(to_fp16(ultralytics))[0]
    np.testing.assert_array_equal(out, run(ultralytics)[0])
    np.testing.assert_array_equal(out[0, 0], rows[0])


def _forms():
    """(case, opset, nodes, initializers, output shape) for x [1, 3, 6, 8]: operators whose
    attributes became inputs at some opset (Clip 11, Pad 11, Slice 10, Squeeze and Unsqueeze 13,
    Split 13, ReduceMean 18), in both forms."""
    from onnx import helper, numpy_helper

    def i64(values, name: str):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    def f32(value, name: str):
        return numpy_helper.from_array(np.array(value, np.float32), name)

    n = helper.make_node
    pads = [0, 0, 1, 2, 0, 0, 1, 2]
    return [
        ("clip-attributes", 10, [n("Clip", ["x"], ["y"], min=0.0, max=6.0)], [], [1, 3, 6, 8]),
        ("clip-inputs", 11, [n("Clip", ["x", "lo", "hi"], ["y"])], [f32(0.0, "lo"), f32(6.0, "hi")], [1, 3, 6, 8]),
        ("pad-attributes", 9, [n("Pad", ["x"], ["y"], pads=pads, value=1.5)], [], [1, 3, 8, 12]),
        ("pad-inputs", 13, [n("Pad", ["x", "p", "v"], ["y"])], [i64(pads, "p"), f32(1.5, "v")], [1, 3, 8, 12]),
        ("slice-attributes", 9, [n("Slice", ["x"], ["y"], starts=[1], ends=[5], axes=[3])], [], [1, 3, 6, 4]),
        ("slice-inputs", 10, [n("Slice", ["x", "st", "en", "ax"], ["y"])], [i64([1], "st"), i64([5], "en"), i64([3], "ax")],
         [1, 3, 6, 4]),
        ("squeeze-attributes", 11, [n("Unsqueeze", ["x"], ["u"], axes=[0]), n("Squeeze", ["u"], ["y"], axes=[0])], [],
         [1, 3, 6, 8]),
        ("squeeze-inputs", 13, [n("Unsqueeze", ["x", "ax"], ["u"]), n("Squeeze", ["u", "ax"], ["y"])], [i64([0], "ax")],
         [1, 3, 6, 8]),
        ("split-attributes", 11, [n("Split", ["x"], ["a", "b"], axis=3, split=[3, 5]), n("Concat", ["b", "a"], ["y"], axis=3)],
         [], [1, 3, 6, 8]),
        ("split-inputs", 13, [n("Split", ["x", "sp"], ["a", "b"], axis=3), n("Concat", ["b", "a"], ["y"], axis=3)],
         [i64([3, 5], "sp")], [1, 3, 6, 8]),
        ("reducemean-attributes", 13, [n("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)], [], [1, 3, 1, 1]),
        ("reducemean-inputs", 18, [n("ReduceMean", ["x", "ax"], ["y"], keepdims=1)], [i64([2, 3], "ax")], [1, 3, 1, 1]),
    ]


@pytest.mark.parametrize("case,opset,nodes,inits,shape", _forms(), ids=[f[0] for f in _forms()])
def test_operators_in_either_form_upgrade_and_convert_to_fp16_unchanged(case, opset, nodes, inits, shape) -> None:
    """Each form through the build's graph steps (the upgrade to opset 13, then FP16): its int64
    pads, axes and splits stay int64, its float bounds turn float16 with the data, and ONNX Runtime
    gives the original model's outputs (the oracle; within float16 rounding for the FP16 model)."""
    from onnx import helper

    g = helper.make_graph(nodes, case, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    ops = [helper.make_opsetid("", opset)]
    model = helper.make_model(g, opset_imports=ops, ir_version=helper.find_min_ir_version_for(ops))
    onnx.checker.check_model(model, full_check=True)
    upgraded = graph.upgrade_opset(model)
    half = to_fp16(upgraded)
    assert all(i.data_type in (TensorProto.INT64, TensorProto.FLOAT16) for i in half.graph.initializer)
    x = np.random.default_rng(5).uniform(-3, 9, (1, 3, 6, 8)).astype(np.float32)
    ref = graph.session_from_model(model, "none").run(None, {"x": x})[0]
    assert ref.shape == tuple(shape)
    np.testing.assert_array_equal(graph.session_from_model(upgraded, "none").run(None, {"x": x})[0], ref)
    np.testing.assert_allclose(graph.session_from_model(half, "none").run(None, {"x": x})[0], ref, rtol=1e-3, atol=1e-2)
