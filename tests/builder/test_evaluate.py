"""The accuracy gate: per-output errors, detection agreement with FP32, pass/fail messages."""
from __future__ import annotations

from typing import List

import numpy as np
import pytest
from detector_factory import TINY_DECODER, TINY_HW, make_detector, square_image

from edge_sdk.builder import graph
from edge_sdk.builder.evaluate import (
    GateResult, Reference, VariantReport, agreement, enforce, gate, output_errors, OutputError,
)
from edge_sdk.decoders import make_decoder
from edge_sdk.detections import Detections
from edge_sdk.errors import AccuracyGateError
from edge_sdk.preprocess import InputSpec, Preprocessor

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")

SPEC = InputSpec(name="input.1", shape=[1, 3, TINY_HW[0], TINY_HW[1]])


def dets(*boxes: List[float]) -> Detections:
    return Detections(np.array(boxes, np.float32).reshape(-1, 4), np.ones(len(boxes)), np.zeros(len(boxes)))


@pytest.mark.parametrize(
    "pred, ref, expected",
    [
        ([dets([0, 0, 10, 10])], [dets([0, 0, 10, 10])], (1, 0, 0, 1.0)),
        ([dets([0, 0, 10, 10]), dets()], [dets([0, 0, 10, 10]), dets([5, 5, 9, 9])], (1, 0, 1, 2 / 3)),
        ([dets([50, 50, 60, 60])], [dets([0, 0, 10, 10])], (0, 1, 1, 0.0)),
        ([dets()], [dets()], (0, 0, 0, 1.0)),
        # a box clipped flat at the frame's edge has no area: it agrees with itself, not with another
        ([dets([0, 0, 96, 30.4], [0, 0, 96, 0])], [dets([0, 0, 96, 30.4], [0, 0, 96, 0])], (2, 0, 0, 1.0)),
        ([dets([0, 0, 96, 0])], [dets([0, 5, 96, 5])], (0, 1, 1, 0.0)),
    ],
)
def test_agreement_pools_matches_over_images(pred, ref, expected) -> None:
    m = agreement(pred, ref)
    assert (m["tp"], m["fp"], m["fn"]) == expected[:3]
    assert m["f1"] == pytest.approx(expected[3])


def test_output_errors_on_known_arrays() -> None:
    ref = [[np.array([1.0, 0.0, 0.0])], [np.array([0.0, 2.0, 0.0])]]
    test = [[np.array([1.0, 0.0, 0.5])], [np.array([0.0, 2.0, 0.0])]]
    (err,) = output_errors(["y"], ref, test)
    assert err.max_abs_err == pytest.approx(0.5)
    assert err.mean_abs_err == pytest.approx(0.5 / 6)
    assert err.cosine == pytest.approx(5.0 / np.sqrt(5.0 * 5.25))


def test_output_errors_of_all_zero_outputs() -> None:
    zero = [[np.zeros(3)]]
    assert output_errors(["y"], zero, zero)[0].cosine == 1.0
    assert output_errors(["y"], zero, [[np.ones(3)]])[0].cosine == 0.0


def test_an_exactly_negated_output_scores_minus_one() -> None:
    """The cosine is signed: an output that is the exact negation of FP32's points the other way
    (-1, by definition), not the same way; pooled over images, one image negated and one kept
    gives sum(a*b) / sqrt(sum(a*a) * sum(b*b)) over both, computed here with numpy."""
    rng = np.random.default_rng(3)
    a1, a2 = rng.standard_normal(12), rng.standard_normal(12) * 3.0
    kept = rng.standard_normal(5)
    ref = [[a1, kept], [a2, kept]]
    (neg, same) = output_errors(["y", "z"], ref, [[-a1, kept], [-a2, kept]])
    assert neg.cosine == pytest.approx(-1.0, abs=1e-12) and same.cosine == pytest.approx(1.0, abs=1e-12)
    assert neg.max_abs_err == pytest.approx(2 * max(np.abs(a1).max(), np.abs(a2).max()))
    (half,) = output_errors(["y"], [[a1], [a2]], [[-a1], [a2]])
    a, b = np.concatenate([a1, a2]), np.concatenate([-a1, a2])
    assert half.cosine == pytest.approx(float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))), rel=1e-12)
    assert half.cosine > 0  # |a2| dominates: positive, yet below 1
    assert half.cosine < 0.9


def negated(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """`model` with a Neg after each graph output: the same numbers, the other sign."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for o in out.graph.output:
        for node in out.graph.node:
            node.output[:] = [f"{name}.pos" if name == o.name else name for name in node.output]
        out.graph.node.append(onnx.helper.make_node("Neg", [f"{o.name}.pos"], [o.name], name=f"neg_{o.name}"))
    return out


def test_a_variant_with_negated_outputs_fails_the_cosine_gate(held_back) -> None:
    """Without a decoder the gate and the INT8 search's score are the worst output's cosine: a
    variant whose every output is FP32's negated scores -1 there and is refused."""
    model = prepared()
    ref = Reference(model, "input.1", *held_back, None)
    flipped = negated(model)
    report = ref.compare("flipped", flipped)
    x = held_back[0][0]
    for fp32, got in zip(run_model_once(model, x), run_model_once(flipped, x)):
        np.testing.assert_array_equal(got, -fp32)  # the variant really is FP32 negated
    assert [o.cosine for o in report.outputs] == pytest.approx([-1.0] * len(report.outputs), abs=1e-6)
    result = gate(report, 0.97)
    assert (result.metric, result.passed) == ("cosine", False) and result.value == pytest.approx(-1.0, abs=1e-6)
    assert ref.score(flipped) == pytest.approx(-1.0, abs=1e-6) and ref.score(model) == pytest.approx(1.0)


def run_model_once(model: "onnx.ModelProto", tensor: np.ndarray) -> List[np.ndarray]:
    return graph.session_from_model(model, "none").run(None, {"input.1": tensor})


@pytest.fixture(scope="module")
def held_back():
    rng = np.random.default_rng(5)
    pre = Preprocessor(SPEC)
    tensors, transforms = [], []
    for _ in range(4):
        t, tr = pre(square_image(rng))
        tensors.append(t.copy())
        transforms.append(tr)
    return tensors, transforms


def prepared(**kwargs):
    return graph.fix_input(make_detector(**kwargs), "input.1", SPEC.shape)


def test_reference_against_itself_agrees_perfectly(held_back) -> None:
    model = prepared()
    ref = Reference(model, "input.1", *held_back, make_decoder(TINY_DECODER, SPEC))
    assert sum(len(d) for d in ref.detections) >= 8
    report = ref.compare("same", model)
    assert report.f1 == 1.0 and report.cosine == pytest.approx(1.0) and report.max_abs_err == 0.0
    assert report.to_dict()["reference_detections"] == report.to_dict()["detections"]


def test_a_worse_variant_scores_lower(held_back) -> None:
    model = prepared()
    worse = onnx.ModelProto()
    worse.CopyFrom(model)
    for init in worse.graph.initializer:
        if init.name == "scale.b":  # boxes twice as large: IoU with FP32's boxes 0.25
            init.CopyFrom(onnx.numpy_helper.from_array(np.full(2, np.log(4.0), np.float32), "scale.b"))
    ref = Reference(model, "input.1", *held_back, make_decoder(TINY_DECODER, SPEC))
    report = ref.compare("worse", worse)
    assert report.f1 == 0.0
    assert report.outputs[1].max_abs_err == pytest.approx(np.log(2.0), rel=1e-5)
    assert ref.score(worse) == 0.0 and ref.score(model) == 1.0


def test_without_decoder_the_gate_uses_cosine(held_back) -> None:
    model = prepared()
    ref = Reference(model, "input.1", *held_back, None)
    report = ref.compare("same", model)
    assert report.f1 is None
    result = gate(report, 0.97)
    assert (result.metric, result.passed) == ("cosine", True)


def report(f1: float) -> VariantReport:
    return VariantReport("int8", [OutputError("y", 0.1, 0.01, 0.99)], {"tp": 1, "fp": 0, "fn": 0, "precision": 1.0, "recall": 1.0, "f1": f1})


@pytest.mark.parametrize("f1, passed", [(0.97, True), (0.99, True), (0.9699, False), (0.0, False)])
def test_gate_threshold(f1: float, passed: bool) -> None:
    result = gate(report(f1), 0.97)
    assert (result.metric, result.passed) == ("f1_vs_fp32", passed)


@pytest.mark.parametrize(
    "allow, fallback, raises, hint",
    [
        (False, False, True, "--int8-fallback auto"),
        (False, True, True, "even after keeping the most sensitive layers out of INT8"),
        (True, False, False, ""),
    ],
)
def test_enforce_messages(allow: bool, fallback: bool, raises: bool, hint: str) -> None:
    failed = GateResult(False, "f1_vs_fp32", 0.5, 0.97)
    if raises:
        with pytest.raises(AccuracyGateError, match="--allow-accuracy-loss") as info:
            enforce(failed, "int8", allow, fallback)
        assert hint in str(info.value)
    else:
        enforce(failed, "int8", allow, fallback)
    enforce(GateResult(True, "f1_vs_fp32", 0.99, 0.97), "int8", False, False)
