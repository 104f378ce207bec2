"""Cross-layer equalization: an exact re-parametrization (outputs equal in ONNX Runtime), which
evens out the per-channel weight ranges of each pair as the closed form says, leaves clipped
activations and shared tensors alone, and says so when there is nothing to equalize."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.builder.equalize import equalize

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge_sdk.builder.graph import session_from_model  # noqa: E402


def _conv_bn_relu_dw(clip_max=None, seed: int = 0) -> "onnx.ModelProto":
    """x[1,3,9,11] → Conv 3x3 (8 ch) → BatchNormalization → Relu (or Clip 0..clip_max) → depthwise
    Conv 3x3 → Relu → Conv 1x1 (5 ch) = y. Channel ranges differ by orders of magnitude, as in a
    real depthwise-separable network, so equalization has work to do."""
    rng = np.random.default_rng(seed)
    spread = np.logspace(-2, 1, 8).astype(np.float32)[rng.permutation(8)]
    w1 = (rng.standard_normal((8, 3, 3, 3)) * spread[:, None, None, None]).astype(np.float32)
    w2 = (rng.standard_normal((8, 1, 3, 3)) * spread[::-1, None, None, None]).astype(np.float32)
    w3 = rng.standard_normal((5, 8, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w1", w1), ("b1", rng.standard_normal(8).astype(np.float32)),
        ("gamma", rng.uniform(0.5, 2, 8).astype(np.float32)), ("beta", rng.standard_normal(8).astype(np.float32)),
        ("mean", rng.standard_normal(8).astype(np.float32)), ("var", rng.uniform(0.5, 2, 8).astype(np.float32)),
        ("w2", w2), ("b2", rng.standard_normal(8).astype(np.float32)), ("w3", w3), ("b3", np.zeros(5, np.float32)),
    ]]
    if clip_max is not None:
        inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(clip_max, np.float32), "hi")]
    act = (helper.make_node("Clip", ["bn", "lo", "hi"], ["a1"], name="clip") if clip_max is not None
           else helper.make_node("Relu", ["bn"], ["a1"], name="relu1"))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"], name="bn1"),
        act,
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8, name="dw"),
        helper.make_node("Relu", ["c2"], ["a2"], name="relu2"),
        helper.make_node("Conv", ["a2", "w3", "b3"], ["y"], name="project"),
    ]
    graph = helper.make_graph(nodes, "cbrd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 11])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 9, 11])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model, x):
    return session_from_model(model, "none").run(None, {"x": x})[0]


def _weights(model):
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def _colour_like(seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 255, (1, 3, 9, 11)).astype(np.float32)


def test_equalized_model_computes_the_same_outputs() -> None:
    model = _conv_bn_relu_dw()
    eq, report = equalize(model)
    assert report.folded_bn == 1 and [p for p in report.pairs] == [("conv1", "dw"), ("dw", "project")]
    assert "BatchNormalization" not in [n.op_type for n in eq.graph.node]
    x = _colour_like()
    ref, out = _run(model, x), _run(eq, x)
    assert np.max(np.abs(out - ref)) <= 1e-4 * np.max(np.abs(ref))
    assert _weights(model)["w1"] is not None and "bn1" in [n.name for n in model.graph.node]  # input untouched


def test_each_pair_ends_with_equal_per_channel_ranges() -> None:
    """Closed form (Nagel et al. eq. 9): after convergence, output channel c of the first conv and
    the input channel c of the second have the same max |w|; before, they differed by up to 1000x."""
    model = _conv_bn_relu_dw()
    eq, _ = equalize(model)
    w = _weights(eq)
    r1 = np.abs(w["w1"]).reshape(8, -1).max(axis=1)
    r_dw = np.abs(w["w2"]).reshape(8, -1).max(axis=1)
    r3 = np.abs(w["w3"]).transpose(1, 0, 2, 3).reshape(8, -1).max(axis=1)
    # the depthwise layer sits in two pairs: its range per channel meets both neighbours'
    assert np.allclose(r1, r_dw, rtol=1e-2) and np.allclose(r_dw, r3, rtol=1e-2)
    before = np.abs(_weights(model)["w1"]).reshape(8, -1).max(axis=1)
    assert before.max() / before.min() > 50 and r1.max() / r1.min() < before.max() / before.min()


def test_a_clipped_activation_is_not_scaled_through() -> None:
    """ReLU6-like Clip(0, 6): min(x / s, 6) != min(x, 6) / s, so that pair is skipped (the next one,
    behind a plain Relu, is still equalized) and the outputs stay exact."""
    model = _conv_bn_relu_dw(clip_max=6.0)
    eq, report = equalize(model)
    assert report.pairs == [("dw", "project")]
    assert "clipped activation Clip" in report.skipped["conv1 → dw"]
    x = _colour_like(5)
    ref = _run(model, x)
    assert np.max(np.abs(_run(eq, x) - ref)) <= 1e-4 * np.max(np.abs(ref))


def test_a_model_with_nothing_to_equalize_is_left_alone_and_says_so(convnet) -> None:
    """The conftest convnet: its first Relu also feeds a residual Add, so no pair qualifies."""
    eq, report = equalize(convnet)
    assert not report.applied and report.to_dict()["pairs"] == 0
    assert "no Conv → (Relu) → Conv pair to equalize; skipped" in report.describe()
    assert eq.SerializeToString() == convnet.SerializeToString()


def test_real_centerface_equalized_gives_the_same_outputs_on_colour_photos(centerface_384x640_path) -> None:
    """The default model (MobileNetV2-like: expand → depthwise → project) equalized: on two of the
    repository's colour calibration scenes every output stays within 2e-4 of its largest value."""
    from edge_sdk.builder.default_model import DEFAULT_MODEL
    from edge_sdk.builder.graph import optimize, upgrade_opset
    from edge_sdk.builder.images import default_calib_dir, list_images
    from edge_sdk.preprocess import Preprocessor, load_image

    model, _ = optimize(upgrade_opset(onnx.load(str(centerface_384x640_path))))
    eq, report = equalize(model)
    assert len(report.pairs) >= 30  # two per inverted-residual block, and the stem
    pre = Preprocessor(DEFAULT_MODEL.input_spec)
    a, b = session_from_model(model), session_from_model(eq)
    for path in [p for p in list_images(default_calib_dir()) if p.name.startswith("scene")][:2]:
        tensor, _ = pre(load_image(str(path)))
        assert tensor[0].std(axis=(1, 2)).min() > 0 and not np.allclose(tensor[0, 0], tensor[0, 2])  # colour
        feed = {DEFAULT_MODEL.input_spec.name: tensor}
        for ref, out in zip(a.run(None, feed), b.run(None, feed)):
            assert np.max(np.abs(out - ref)) <= 2e-4 * np.max(np.abs(ref)), path.name  # measured: <= 6e-5
