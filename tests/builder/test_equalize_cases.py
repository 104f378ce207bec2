"""Cross-layer equalization on the configurations the docstring names one by one: which pairs are
equalized (Relu, LeakyRelu, one-slope PRelu, Clip(0) without a max, nothing in between; a
depthwise second conv), which are left and why (a clip with a max, a per-channel PRelu, a tensor
read twice or a graph output, shared weights, a grouped conv), BatchNormalization folded with or
without a conv bias. Oracles: ONNX Runtime gives the same outputs (the change is exact), an
equalized pair ends with equal per-channel ranges (Nagel et al.'s closed form), and a pair that
is left keeps its weights bit for bit."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

from edge_sdk.builder.equalize import equalize

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge_sdk.builder.graph import session_from_model  # noqa: E402

C_IN, C_MID, C_OUT, H, W = 3, 6, 4, 7, 10  # non-square input, non-square kernels below


def build(middle: str = "Relu", second: str = "conv", bias: Any = True, bn: bool = False, extra_reader: bool = False,
          mid_is_output: bool = False, seed: int = 0, opset: int = 13) -> "onnx.ModelProto":
    """bias: True, False (two inputs) or "" (an empty third input, as some exporters write)."""
    rng = np.random.default_rng(seed)
    spread = np.logspace(-2, 1.5, C_MID)[rng.permutation(C_MID)]
    w1 = (rng.standard_normal((C_MID, C_IN, 3, 1)) * spread[:, None, None, None]).astype(np.float32)
    inits = {"w1": w1}
    if bias is True:
        inits["b1"] = rng.standard_normal(C_MID).astype(np.float32)
    conv_in = ["x", "w1"] + (["b1"] if bias is True else [""] if bias == "" else [])
    nodes = [helper.make_node("Conv", conv_in, ["c1"], pads=[1, 0, 1, 0], name="A")]
    t = "c1"
    if bn:
        inits.update(gamma=rng.uniform(0.5, 2, C_MID).astype(np.float32), beta=rng.standard_normal(C_MID).astype(np.float32),
                     mean=rng.standard_normal(C_MID).astype(np.float32), var=rng.uniform(0.5, 2, C_MID).astype(np.float32))
        nodes.append(helper.make_node("BatchNormalization", [t, "gamma", "beta", "mean", "var"], ["bn"], name="BN",
                                      epsilon=0.25))  # far from the default 1e-5: folding must read it
        t = "bn"
    if middle != "none":
        ins = [t]
        attrs: Dict[str, object] = {}
        if middle == "LeakyRelu":
            attrs["alpha"] = 0.1
        if middle in ("PRelu", "PRelu-per-channel"):
            inits["slope"] = (np.full(1, 0.2, np.float32) if middle == "PRelu"
                              else rng.uniform(0.05, 0.3, (C_MID, 1, 1)).astype(np.float32))
            ins.append("slope")
        if middle in ("ClipAttr0", "ClipAttrHalf", "ClipAttr6"):  # opset < 11: the bounds are attributes
            attrs["min"] = 0.5 if middle == "ClipAttrHalf" else 0.0
            if middle == "ClipAttr6":  # ReLU6 as exporters of opset < 11 write it
                attrs["max"] = 6.0
        if middle in ("Clip0", "Clip0-empty-max", "Clip6", "ClipHalf"):
            inits["lo"] = np.array(0.5 if middle == "ClipHalf" else 0.0, np.float32)
            ins.append("lo")
            if middle == "Clip6":
                inits["hi"] = np.array(6.0, np.float32)
                ins.append("hi")
            if middle == "Clip0-empty-max":  # max given as an empty input: no max, as some exporters write
                ins.append("")
        op = {"Clip0": "Clip", "Clip0-empty-max": "Clip", "Clip6": "Clip", "ClipHalf": "Clip", "ClipAttr0": "Clip",
              "ClipAttrHalf": "Clip", "ClipAttr6": "Clip", "PRelu-per-channel": "PRelu"}.get(middle, middle)
        nodes.append(helper.make_node(op, ins, ["m"], name="mid", **attrs))
        t = "m"
    if second == "depthwise":
        inits["w2"] = (rng.standard_normal((C_MID, 1, 1, 3)) * spread[::-1, None, None, None]).astype(np.float32)
        nodes.append(helper.make_node("Conv", [t, "w2"], ["c2"], pads=[0, 1, 0, 1], group=C_MID, name="B"))
        inits["w3"] = rng.standard_normal((C_OUT, C_MID, 1, 1)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["c2", "w3"], ["y"], name="P"))
    elif second == "grouped":
        inits["w2"] = rng.standard_normal((C_OUT * 2, C_MID // 2, 1, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", [t, "w2"], ["y"], pads=[0, 1, 0, 1], group=2, name="B"))
    else:
        inits["w2"] = rng.standard_normal((C_OUT, C_MID, 1, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", [t, "w2"], ["y"], pads=[0, 1, 0, 1], name="B"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", [t], ["side"], name="side"))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    if mid_is_output:
        outputs.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, H, W])],
                              outputs, [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def outputs(model, x: np.ndarray) -> List[np.ndarray]:
    return session_from_model(model, "none").run(None, {"x": x})


def weights(model) -> Dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def probe_input() -> np.ndarray:
    return np.random.default_rng(7).uniform(-50, 255, (1, C_IN, H, W)).astype(np.float32)


def check_exact(model, eq) -> None:
    x = probe_input()
    for ref, out in zip(outputs(model, x), outputs(eq, x)):
        assert np.max(np.abs(out - ref)) <= 2e-4 * max(1.0, float(np.max(np.abs(ref))))


def ranges(eq, second: str) -> Tuple[np.ndarray, np.ndarray]:
    w = weights(eq)
    r1 = np.abs(w["w1"]).reshape(C_MID, -1).max(axis=1)
    w2 = w["w2"]
    r2 = np.abs(w2).reshape(C_MID, -1).max(axis=1) if second == "depthwise" else \
        np.abs(np.moveaxis(w2, 1, 0)).reshape(C_MID, -1).max(axis=1)
    return r1, r2


@pytest.mark.parametrize("middle", ["Relu", "LeakyRelu", "PRelu", "Clip0", "Clip0-empty-max", "none"])
@pytest.mark.parametrize("second", ["conv", "depthwise"])
@pytest.mark.parametrize("bias", [True, False])
def test_homogeneous_pairs_are_equalized_exactly(middle: str, second: str, bias: bool) -> None:
    model = build(middle, second, bias)
    eq, report = equalize(model)
    assert ("A", "B") in report.pairs and report.applied, report.to_dict()
    check_exact(model, eq)
    r1, r2 = ranges(eq, second)
    if second == "conv":  # one pair: converged in one sweep to the closed form
        np.testing.assert_allclose(r1, r2, rtol=1e-5)
        before1, before2 = ranges(model, second)
        np.testing.assert_allclose(r1, np.sqrt(before1 * before2), rtol=1e-5)
    else:
        np.testing.assert_allclose(r1, r2, rtol=1e-2)
    if not bias:
        assert "b1" not in weights(eq)


@pytest.mark.parametrize("case,why", [
    (dict(middle="Clip6"), "clipped activation Clip"),
    (dict(middle="PRelu-per-channel"), None),
    (dict(middle="ClipHalf"), None),  # Clip(min=0.5): max(x / s, 0.5) != max(x, 0.5) / s
    (dict(middle="Sigmoid"), None),
    (dict(extra_reader=True), None),
    (dict(mid_is_output=True), None),
    (dict(middle="none", extra_reader=True), None),
    (dict(second="grouped"), "grouped convolution (group 2)"),
])
def test_pairs_that_cannot_be_scaled_exactly_are_left_bit_for_bit(case: Dict[str, object], why: Optional[str]) -> None:
    model = build(**case)  # type: ignore[arg-type]
    eq, report = equalize(model)
    assert ("A", "B") not in report.pairs
    if why is not None:
        assert why in report.skipped.get("A → B", ""), report.skipped
    before, after = weights(model), weights(eq)
    for name in ("w1", "w2"):
        assert after[name].tobytes() == before[name].tobytes()
    check_exact(model, eq)


def test_weights_shared_between_two_nodes_are_not_scaled() -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((C_MID, C_MID, 1, 1)).astype(np.float32) * np.logspace(-2, 1, C_MID)[:, None, None, None]
    w0 = rng.standard_normal((C_MID, C_IN, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="pre"),
             helper.make_node("Conv", ["a", "w"], ["b"], name="A"), helper.make_node("Relu", ["b"], ["c"], name="r"),
             helper.make_node("Conv", ["c", "w"], ["y"], name="B")]  # the same initializer twice
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w0.astype(np.float32), "w0"), numpy_helper.from_array(w.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    eq, report = equalize(model)
    assert ("A", "B") not in report.pairs and report.skipped.get("A → B") == "weights shared with another node"
    assert weights(eq)["w"].tobytes() == weights(model)["w"].tobytes()
    check_exact(model, eq)


@pytest.mark.parametrize("bias", [True, False])
def test_batchnorm_is_folded_with_or_without_a_conv_bias(bias: bool) -> None:
    model = build("Relu", bn=True, bias=bias)
    eq, report = equalize(model)
    assert report.folded_bn == 1 and "BatchNormalization" not in [n.op_type for n in eq.graph.node]
    assert "1 BatchNormalization folded" in report.describe()
    check_exact(model, eq)


def test_a_batchnorm_whose_conv_output_is_read_elsewhere_is_not_folded() -> None:
    model = build("Relu", bn=True, mid_is_output=False)
    # make the conv output a graph output too: folding would change what that output shows
    model.graph.output.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, None))
    eq, report = equalize(model)
    assert report.folded_bn == 0 and "BatchNormalization" in [n.op_type for n in eq.graph.node]
    check_exact(model, eq)


def test_sweeps_stop_when_the_scales_settle_and_at_the_limit() -> None:
    model = build("Relu", "depthwise")
    _, settled = equalize(model)
    assert 1 < settled.sweeps < 20
    _, one = equalize(model, max_sweeps=1)
    assert one.sweeps == 1
    _, single = equalize(build("Relu", "conv"))
    assert single.sweeps == 2  # the second sweep finds every scale at 1: settled


@pytest.mark.parametrize("middle,equalized", [("ClipAttr0", True), ("ClipAttrHalf", False)])
def test_clip_with_its_bounds_as_attributes(middle: str, equalized: bool) -> None:
    """Opset 10's Clip(min=0) is a Relu; Clip(min=0.5) is not homogeneous."""
    model = build(middle, opset=10)
    eq, report = equalize(model)
    assert (("A", "B") in report.pairs) is equalized
    check_exact(model, eq)


@pytest.mark.parametrize("middle,opset", [("ClipAttr6", 10), ("ClipAttr6", 6), ("Clip6", 11), ("Clip6", 13)])
def test_a_clip_with_a_max_is_left_whether_the_max_is_an_attribute_or_an_input(middle: str, opset: int) -> None:
    """ReLU6 as Clip(min=0, max=6): attributes up to opset 10 (how older exporters write it),
    inputs from opset 11. min(x / s, 6) != min(x, 6) / s, so either form is left as it is. The
    oracle is the original graph in ONNX Runtime, on an input that drives most of the clip's
    inputs above 6 (where scaling through it would show)."""
    model = build(middle, opset=opset)
    clip = next(n for n in model.graph.node if n.op_type == "Clip")
    context = onnx.checker.C.CheckerContext()
    context.ir_version, context.opset_imports = model.ir_version, {"": opset}
    onnx.checker.check_node(clip, context)  # a valid Clip of that opset (max an attribute at 11 is not)
    assert (sorted(a.name for a in clip.attribute) == ["max", "min"]) is (middle == "ClipAttr6")
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, None))
    before_clip = outputs(probe, probe_input())[-1]
    assert np.mean(before_clip > 6.0) > 0.25, np.mean(before_clip > 6.0)
    eq, report = equalize(model)
    check_exact(model, eq)
    assert ("A", "B") not in report.pairs and "clipped activation Clip" in report.skipped["A → B"]
    before, after = weights(model), weights(eq)
    assert all(after[name].tobytes() == before[name].tobytes() for name in ("w1", "b1", "w2"))


def test_batchnorm_folds_into_a_conv_whose_bias_input_is_empty() -> None:
    model = build("Relu", bn=True, bias="")
    eq, report = equalize(model)
    assert report.folded_bn == 1
    conv = next(n for n in eq.graph.node if n.name == "A")
    assert len(conv.input) == 3 and conv.input[2] in weights(eq)
    check_exact(model, eq)


def test_a_pair_reports_how_far_its_largest_scale_moved_either_way() -> None:
    """Channel 0 shrinks by 4 (s = 0.25), channel 1 grows by 1.5: the pair moved 0.75, and each
    channel's range in both convolutions becomes sqrt(r1 * r2)."""
    from edge_sdk.builder.equalize import _equalize_pair, _Pair

    arrays = {"w1": np.array([1.0, 9.0], np.float32).reshape(2, 1, 1, 1),  # r1 = 1, 9
              "b1": np.array([2.0, 3.0], np.float32),
              "w2": np.array([[16.0, 4.0]], np.float32).reshape(1, 2, 1, 1)}  # r2 = 16, 4 (per input channel)
    moved = _equalize_pair(_Pair("a", "b", "w1", "b1", "w2", depthwise=False), arrays)
    assert moved == pytest.approx(0.75)
    np.testing.assert_allclose(arrays["w1"].ravel(), [4.0, 6.0])
    np.testing.assert_allclose(arrays["w2"].ravel(), [4.0, 6.0])
    np.testing.assert_allclose(arrays["b1"], [8.0, 2.0])


def test_a_channel_the_second_convolution_never_reads_is_left_as_it_is() -> None:
    """Channel 1's weights in the second convolution are all zero (r2 = 0): no scale can balance
    it, so it keeps s = 1 instead of an infinite one; channel 0 is balanced."""
    from edge_sdk.builder.equalize import _equalize_pair, _Pair

    arrays = {"w1": np.array([1.0, 9.0], np.float32).reshape(2, 1, 1, 1),
              "w2": np.array([[16.0, 0.0]], np.float32).reshape(1, 2, 1, 1)}
    moved = _equalize_pair(_Pair("a", "b", "w1", None, "w2", depthwise=False), arrays)
    assert moved == pytest.approx(0.75)
    np.testing.assert_allclose(arrays["w1"].ravel(), [4.0, 9.0])
    np.testing.assert_allclose(arrays["w2"].ravel(), [4.0, 0.0])


def test_a_convolution_without_its_weight_input_is_passed_over() -> None:
    """A malformed Conv (one input, no weights) beside a good pair: no error, the pair still equalized."""
    model = build("Relu", "conv")
    model.graph.node.append(helper.make_node("Conv", ["x"], ["lone"], name="lone"))
    _, report = equalize(model)
    assert report.pairs == [("A", "B")]
