"""Graph preparation: CenterFace's quirks, validation errors, optimisation and counting."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from detector_factory import make_detector

from edge_sdk.builder import graph
from edge_sdk.errors import ModelError

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

SHAPE = [1, 3, 64, 96]


def test_fix_input_drops_weight_inputs_and_sets_real_dims() -> None:
    model = make_detector()
    assert len(model.graph.input) > 1
    fixed = graph.fix_input(model, "input.1", SHAPE)
    assert [i.name for i in fixed.graph.input] == ["input.1"]
    assert graph.input_dims(fixed.graph.input[0]) == SHAPE
    assert {o.name: graph.input_dims(o) for o in fixed.graph.output} == {
        "537": [1, 1, 16, 24], "538": [1, 2, 16, 24], "539": [1, 2, 16, 24], "540": [1, 10, 16, 24],
    }
    out = graph.session_from_model(fixed).run(None, graph.random_feed(fixed))
    assert out[0].shape == (1, 1, 16, 24)


def test_fix_input_without_name_uses_the_only_input() -> None:
    fixed = graph.fix_input(make_detector(), None, SHAPE)
    assert fixed.graph.input[0].name == "input.1"


def test_wrong_input_name_lists_the_real_inputs() -> None:
    with pytest.raises(ModelError, match=r"no input 'images'.*input\.1.*--input-name"):
        graph.fix_input(make_detector(), "images", SHAPE)


@pytest.mark.parametrize(
    "content, message",
    [(b"", "not a readable ONNX model|graph has no nodes"), (b"\x00\x01garbage" * 50, "not a readable ONNX model|graph has no nodes"),
     (b"name,value\n1,2\n", "not a readable ONNX model|graph has no nodes")],
)
def test_non_onnx_file_is_a_model_error_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=message) as info:
        graph.model_from_path(path)
    assert "broken.onnx" in str(info.value)


def test_missing_file_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        graph.model_from_path(tmp_path / "nope.onnx")


def custom_op_model() -> "onnx.ModelProto":
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    node = helper.make_node("FancyNorm", ["x"], ["y"], domain="com.example")
    return helper.make_model(helper.make_graph([node], "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])


def test_custom_domain_op_is_rejected() -> None:
    with pytest.raises(ModelError, match="com.example::FancyNorm"):
        graph.check_supported(custom_op_model(), trt_major=8)


def test_opset_above_trt85_parser_is_rejected_for_trt8_only() -> None:
    model = graph.fix_input(make_detector(opset=18), "input.1", SHAPE)
    with pytest.raises(ModelError, match="opset <= 17"):
        graph.check_supported(model, trt_major=8)
    graph.check_supported(model, trt_major=10)  # TensorRT 10 parses newer opsets


def test_op_onnx_runtime_cannot_run_is_rejected() -> None:
    # A standard op with a type ORT's CPU provider has no kernel for.
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [2])
    node = helper.make_node("Sigmoid", ["x"], ["y"])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ModelError, match="ONNX Runtime cannot run"):
        graph.session_from_model(model)


def test_upgrade_opset_keeps_outputs() -> None:
    fixed = graph.fix_input(make_detector(opset=9), "input.1", SHAPE)
    upgraded = graph.upgrade_opset(fixed)
    assert graph.default_opset(upgraded) == 13
    assert graph.outputs_match(fixed, upgraded, rtol=1e-6, atol=1e-6)


def _resize_model(opset: int, mode: str, scales) -> "onnx.ModelProto":
    """x [1, 3, 6, 8] → Conv 3x3 → Upsample (opset 9) or Resize (opset 10) by `scales` = y."""
    rng = np.random.default_rng(4)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             onnx.numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Upsample" if opset < 10 else "Resize", ["c", "scales"], ["y"], mode=mode, name="up")]
    out = [1, 4, int(6 * scales[2]), int(8 * scales[3])]
    g = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model, x: np.ndarray) -> np.ndarray:
    return graph.session_from_model(model, "none").run(None, {"x": x})[0]


@pytest.mark.parametrize("opset", [9, 10])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 1.25, 1.1]])
def test_an_upsample_or_a_resize_before_opset_11_resizes_as_before_after_the_upgrade(opset: int, mode: str, scales) -> None:
    """Before opset 11, Upsample and Resize map output pixel x to input x / scale (asymmetric);
    opset 11's Resize without coordinate_transformation_mode takes half_pixel. The oracle is
    ONNX Runtime running the original opset-9/10 model."""
    model = _resize_model(opset, mode, scales)
    upgraded = graph.upgrade_opset(model)
    assert graph.default_opset(upgraded) == 13 and [n.op_type for n in upgraded.graph.node][-1] == "Resize"
    x = np.random.default_rng(11).uniform(-3, 9, (1, 3, 6, 8)).astype(np.float32)
    ref, got = _run(model, x), _run(upgraded, x)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_an_upgrade_that_changes_the_outputs_is_refused() -> None:
    """Hardmax's axis meant "flatten from here" before opset 13 and one axis from 13 on; the
    converter keeps the attribute as it is, so the upgraded model marks another maximum. The
    upgrade refuses it (ModelError) rather than build from a model that computes something else;
    the Q/DQ pass's upgrade says the same unless told not to check."""
    from edge_sdk.builder import qdq

    nodes = [helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hardmax")]
    g = helper.make_graph(nodes, "hm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    unchecked = graph.upgrade_opset(model, verify=False)
    x = np.random.default_rng(2).standard_normal((1, 3, 6, 8)).astype(np.float32)
    assert _run(model, x).sum() == 1.0 and _run(unchecked, x).sum() == 6 * 8  # one maximum of all, or one per pixel
    with pytest.raises(ModelError, match="upgrading the model from opset 11 to 13 changed its outputs"):
        graph.upgrade_opset(model)
    with pytest.raises(ModelError, match="changed its outputs"):
        qdq.upgrade_for_qdq(model)
    assert graph.default_opset(qdq.upgrade_for_qdq(model, verify=False)) == 13


def test_optimize_folds_constants_and_keeps_outputs() -> None:
    fixed = graph.upgrade_opset(graph.fix_input(make_detector(foldable=True), "input.1", SHAPE))
    optimized, method = graph.optimize(fixed)
    assert method in ("onnxslim", "onnxruntime-basic")
    assert len(optimized.graph.node) < len(fixed.graph.node)
    assert not any(n.op_type == "Constant" for n in optimized.graph.node)
    assert all(n.domain in ("", "ai.onnx") for n in optimized.graph.node)
    assert graph.outputs_match(fixed, optimized)


def test_optimize_falls_back_to_onnx_runtime_without_onnxslim(monkeypatch: pytest.MonkeyPatch) -> None:
    real = graph._imports.available
    monkeypatch.setattr(graph._imports, "available", lambda name: False if name == "onnxslim" else real(name))
    fixed = graph.upgrade_opset(graph.fix_input(make_detector(foldable=True), "input.1", SHAPE))
    optimized, method = graph.optimize(fixed)
    assert method == "onnxruntime-basic"
    assert graph.outputs_match(fixed, optimized)


def test_optimize_rejects_a_result_with_different_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = graph.upgrade_opset(graph.fix_input(make_detector(), "input.1", SHAPE))

    def broken(model):
        bad = onnx.ModelProto()
        bad.CopyFrom(model)
        for init in bad.graph.initializer:
            if init.name == "scale.b":
                init.CopyFrom(onnx.numpy_helper.from_array(np.full(2, 5.0, np.float32), "scale.b"))
        return bad

    monkeypatch.setattr(graph, "_slim", broken)
    monkeypatch.setattr(graph, "_ort_basic", broken)
    optimized, method = graph.optimize(fixed)
    assert method == "none"
    assert optimized is fixed


def conv_model(cin: int, cout: int, k: int, hw: int, group: int = 1, transpose: bool = False) -> "onnx.ModelProto":
    op = "ConvTranspose" if transpose else "Conv"
    wshape = [cin, cout // group, k, k] if transpose else [cout, cin // group, k, k]
    w = onnx.numpy_helper.from_array(np.ones(wshape, np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    kwargs = {"kernel_shape": [k, k], "group": group}
    if transpose:
        kwargs["strides"] = [2, 2]
    else:
        kwargs["pads"] = [k // 2] * 4
    node = helper.make_node(op, ["x", "w"], ["y"], **kwargs)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 13)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(
    "model, flops, params",
    [
        # Conv: out elements x (Cin/group x k x k) MACs, 2 FLOPs each
        (conv_model(3, 8, 3, 16), 2 * (8 * 16 * 16) * (3 * 3 * 3), 8 * 3 * 3 * 3),
        (conv_model(8, 8, 3, 16, group=8), 2 * (8 * 16 * 16) * (1 * 3 * 3), 8 * 1 * 3 * 3),
        # ConvTranspose: input elements x (Cout/group x k x k)
        (conv_model(4, 2, 2, 8, transpose=True), 2 * (4 * 8 * 8) * (2 * 2 * 2), 4 * 2 * 2 * 2),
    ],
)
def test_graph_stats_counts_flops_and_parameters(model, flops: int, params: int) -> None:
    stats = graph.graph_stats(model)
    assert (stats.flops, stats.parameters, stats.nodes) == (flops, params, 1)


def test_graph_stats_of_a_gemm() -> None:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = onnx.numpy_helper.from_array(np.ones((16, 10), np.float32), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("Gemm", ["a", "w"], ["y"])], "g", [a], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 13)])
    assert graph.graph_stats(model).flops == 2 * 4 * 10 * 16


def test_layer_flops_are_two_macs_per_output_value(convnet) -> None:
    """The conftest convnet by hand (x 3x16x16): Conv 3x3 → 8 ch, depthwise 3x3, ConvTranspose
    8 → 4 ch k2 (MACs per input value: 4·2·2), Gemm 8 → 2."""
    from edge_sdk.builder.qdq import name_nodes

    flops = graph.layer_flops(name_nodes(convnet))
    assert flops == {"Conv_c1": 2 * 8 * 16 * 16 * 27, "Conv_c2": 2 * 8 * 16 * 16 * 9,
                     "ConvTranspose_up": 2 * 8 * 16 * 16 * 16, "Gemm_z": 2 * 2 * 8}
