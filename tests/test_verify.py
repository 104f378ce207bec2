"""`edge-sdk verify`'s comparison against an oracle written out here with numpy: per output, over
all gate images pooled, the max and mean absolute error and the cosine sum(a*b) /
sqrt(sum(a*a) * sum(b*b)) (signed: an exactly negated output scores -1 and fails); outputs matched
to the reference by name, whatever order the backend lists them in; the gate "at least" min_f1
and min_cosine and "at most" max_abs_err, each at its limit. Non-square inputs throughout."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import MANIFEST, REFERENCE, Bundle
from edge_sdk.verify import (DEFAULT_MIN_COSINE, DEFAULT_MIN_F1, Verifier, gate_threshold, load_reference,
                             report_lines)

H, W = 24, 40  # not square
OUTPUTS = {"heatmap": (1, 1, H // 4, W // 4), "scale": (1, 2, H // 4, W // 4), "offset": (1, 2, H // 4, W // 4),
           "landmarks": (1, 10, H // 4, W // 4)}
CENTERFACE = {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3}


def write_reference_bundle(root: Path, outputs: List[Dict[str, np.ndarray]], decoder: Optional[Dict] = None,
                           min_f1: Optional[float] = None, arrays: Optional[Dict[str, np.ndarray]] = None,
                           manifest_outputs: Optional[Dict[str, Sequence[int]]] = None,
                           manifest: Optional[Dict[str, Any]] = None) -> Bundle:
    """A bundle whose reference.npz holds these FP32 outputs (one dict per gate image, by name)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.onnx").write_bytes(b"not run here")
    names = list(outputs[0])
    n = len(outputs)
    data = {
        "inputs": np.arange(n * 3 * H * W, dtype=np.float32).reshape(n, 3, H, W) % 251,
        "transforms": np.tile(np.array([[1.0, 1.0, 0.0, 0.0, W, H]]), (n, 1)),
        "output_names": np.array(names, dtype=str),
    }
    for k, name in enumerate(names):
        data[f"output_{k}"] = np.concatenate([o[name] for o in outputs]).astype(np.float32)
    data.update(arrays or {})
    np.savez_compressed(root / REFERENCE, **data)
    shapes = {name: list(outputs[0][name].shape) for name in names} if manifest_outputs is None else manifest_outputs
    body: Dict[str, Any] = {
        "schema_version": 1,
        "model": {"name": "ref", "source_sha256": "0" * 64},
        "target": {"name": "cpu", "sm": None, "tensorrt": None},
        "inputs": [{"name": "input", "shape": [1, 3, H, W], "dtype": "float32", "layout": "NCHW", "color": "BGR",
                    "mean": [0, 0, 0], "scale": [1, 1, 1], "resize": "stretch", "pad_value": 0}],
        "outputs": [{"name": k, "shape": list(v), "dtype": "float32"} for k, v in shapes.items()],
        "precision": "fp32",
        "reference": {"file": REFERENCE, "images": n},
    }
    if decoder:
        body["decoder"] = decoder
    if min_f1 is not None:
        body["reference"]["min_f1"] = min_f1
    body.update(manifest or {})
    body["files"] = {p.name: sha256_file(p) for p in sorted(root.iterdir()) if p.name != MANIFEST}
    (root / MANIFEST).write_text(json.dumps(body))
    return Bundle.load(root)


def rewrite_reference(root: Path, arrays: Dict[str, np.ndarray]) -> None:
    """Replace reference.npz by these arrays, the manifest's checksum of it updated."""
    np.savez_compressed(root / REFERENCE, **arrays)
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["files"][REFERENCE] = sha256_file(root / REFERENCE)
    (root / MANIFEST).write_text(json.dumps(manifest))


class Runner:
    """A backend (activate / infer / deactivate) that lists its outputs in `order` (an engine's
    order, not necessarily the manifest's) and returns, for the i-th input, `make(i)` by name, in
    one reused buffer per output as TensorRT's backend does."""

    def __init__(self, order: Sequence[str], make: Callable[[int], Dict[str, np.ndarray]]) -> None:
        self.output_names = list(order)
        self.make = make
        self.is_active = False
        self.activations = 0
        self.calls = 0
        self._buffers: Dict[str, np.ndarray] = {}

    def activate(self) -> None:
        self.is_active = True
        self.activations += 1

    def describe(self) -> Dict[str, Any]:
        return {"backend": "test-runner", "precision": "fp16"}

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        assert list(feed) == ["input"] and feed["input"].shape == (1, 3, H, W)
        values = self.make(self.calls)
        self.calls += 1
        out = []
        for name in self.output_names:
            buf = self._buffers.setdefault(name, np.empty_like(values[name], dtype=np.float32))
            buf[...] = values[name]
            out.append(buf)
        return out


def random_outputs(n: int, seed: int = 0) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{k: rng.normal(size=s).astype(np.float32) for k, s in OUTPUTS.items()} for _ in range(n)]


def oracle(ref: List[Dict[str, np.ndarray]], test: List[Dict[str, np.ndarray]], name: str) -> Dict[str, float]:
    a = np.concatenate([r[name].ravel() for r in ref]).astype(np.float64)
    b = np.concatenate([t[name].ravel() for t in test]).astype(np.float64)
    if not a.any() and not b.any():
        cosine = 1.0
    elif not a.any() or not b.any():
        cosine = 0.0
    else:
        cosine = float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
    return {"max": float(np.abs(a - b).max()), "mean": float(np.abs(a - b).mean()), "cosine": cosine}


@pytest.mark.parametrize("order", [list(OUTPUTS), list(reversed(OUTPUTS)), ["scale", "landmarks", "heatmap", "offset"]])
def test_outputs_are_matched_to_the_reference_by_name_in_any_engine_order(tmp_path: Path, order: List[str]) -> None:
    ref = random_outputs(3)
    verifier = Verifier(write_reference_bundle(tmp_path / "b", ref), reference="bundle")
    runner = Runner(order, lambda i: ref[i])
    report = verifier.check(runner)
    assert runner.activations == 1 and runner.calls == 3
    assert report.passed, report.failures
    assert [o.name for o in report.outputs] == list(OUTPUTS)  # the reference's order
    assert all(o.max_abs_err == 0.0 and o.mean_abs_err == 0.0 and o.cosine == pytest.approx(1.0) for o in report.outputs)


def test_an_output_put_in_another_outputs_place_is_seen(tmp_path: Path) -> None:
    ref = random_outputs(2)
    swapped = [dict(r, scale=r["offset"], offset=r["scale"]) for r in ref]  # same shapes, values exchanged
    verifier = Verifier(write_reference_bundle(tmp_path / "b", ref), reference="bundle")
    report = verifier.check(Runner(list(reversed(OUTPUTS)), lambda i: swapped[i]))
    assert not report.passed
    assert {f.split(":")[0] for f in report.failures} == {"scale", "offset"}


def test_an_exactly_negated_output_scores_minus_one_and_fails(tmp_path: Path) -> None:
    ref = random_outputs(2, seed=3)
    negated = [dict(r, landmarks=-r["landmarks"]) for r in ref]
    verifier = Verifier(write_reference_bundle(tmp_path / "b", ref), reference="bundle")
    report = verifier.check(Runner(list(OUTPUTS), lambda i: negated[i]))
    cosines = {o.name: o.cosine for o in report.outputs}
    assert cosines["landmarks"] == pytest.approx(-1.0) and cosines["heatmap"] == pytest.approx(1.0)
    assert not report.passed and report.failures == ["landmarks: cosine -1.000000 < 0.99"]
    assert report.to_dict()["outputs"]["landmarks"]["cosine"] == -1.0
    assert report_lines(report)[-1] == "  FAILED: landmarks: cosine -1.000000 < 0.99"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 3), scale=st.sampled_from([0.0, 1e-3, 0.1, 1.0, -1.0, 3.0]),
       zero=st.sampled_from([None, "ref", "test", "both"]))
def test_errors_and_cosines_against_numpy(tmp_path_factory, seed: int, n: int, scale: float, zero: Optional[str]) -> None:
    rng = np.random.default_rng(seed)
    ref = random_outputs(n, seed)
    test = [{k: (v * np.float32(rng.uniform(0.5, 1.5)) + np.float32(scale) * rng.normal(size=v.shape).astype(np.float32))
             for k, v in r.items()} for r in ref]
    if zero in ("ref", "both"):
        ref = [dict(r, offset=np.zeros_like(r["offset"])) for r in ref]
    if zero in ("test", "both"):
        test = [dict(t, offset=np.zeros_like(t["offset"])) for t in test]
    verifier = Verifier(write_reference_bundle(tmp_path_factory.mktemp("v"), ref), reference="bundle", min_cosine=-1.0)
    report = verifier.check(Runner(list(reversed(OUTPUTS)), lambda i: test[i]))
    for out in report.outputs:
        want = oracle(ref, test, out.name)
        assert out.max_abs_err == pytest.approx(want["max"], rel=1e-9, abs=1e-12)
        assert out.mean_abs_err == pytest.approx(want["mean"], rel=1e-9, abs=1e-12)
        assert out.cosine == pytest.approx(want["cosine"], rel=1e-9, abs=1e-12)
    assert report.passed  # min_cosine -1: nothing can fail


def test_the_tolerances_hold_at_their_limits(tmp_path: Path) -> None:
    ref = [{"y": np.array([[1.0, 0.0, 0.0, 0.0]], np.float32)}]
    test = [{"y": np.array([[1.0, 1.0, 0.0, 0.0]], np.float32)}]  # cosine 1/sqrt(2), max error 1, mean 0.25
    bundle = write_reference_bundle(tmp_path / "b", ref)
    at = 1.0 / np.sqrt(2.0)
    for min_cosine, max_abs_err, failures in [
        (at, 1.0, []),  # "at least" min_cosine, "at most" max_abs_err: both at the limit pass
        (at + 1e-9, 1.0, ["y: cosine 0.707107 < 0.707107"]),
        (at, 0.999, ["y: max abs error 1 > 0.999"]),
        (None, None, ["y: cosine 0.707107 < 0.99"]),  # no decoder: the default cosine gate
    ]:
        report = Verifier(bundle, "bundle", min_cosine=min_cosine, max_abs_err=max_abs_err).check(
            Runner(["y"], lambda i: test[i]))
        assert report.failures == failures
        assert report.min_cosine == (DEFAULT_MIN_COSINE if min_cosine is None else min_cosine)
    report = Verifier(bundle, "bundle", min_cosine=at).check(Runner(["y"], lambda i: test[i]))
    assert report.to_dict()["outputs"]["y"] == {"max_abs_err": 1.0, "mean_abs_err": 0.25, "cosine": round(at, 6)}


def test_outputs_are_copied_out_of_the_backends_reused_buffers(tmp_path: Path) -> None:
    ref = random_outputs(3, seed=5)
    verifier = Verifier(write_reference_bundle(tmp_path / "b", ref), reference="bundle")
    report = verifier.check(Runner(list(OUTPUTS), lambda i: ref[i]))  # one buffer per output, overwritten
    assert report.passed and all(o.max_abs_err == 0.0 for o in report.outputs)


def test_an_active_runner_is_not_activated_again(tmp_path: Path) -> None:
    ref = random_outputs(1)
    runner = Runner(list(OUTPUTS), lambda i: ref[i])
    runner.is_active = True
    Verifier(write_reference_bundle(tmp_path / "b", ref), reference="bundle").check(runner)
    assert runner.activations == 0


@pytest.mark.parametrize("names", [["heatmap", "scale", "offset"], ["heatmap", "scale", "offset", "landmarks", "extra"],
                                   ["heatmap", "scale", "offset", "landmark"]])
def test_a_backend_with_other_outputs_is_refused(tmp_path: Path, names: List[str]) -> None:
    ref = random_outputs(1)
    verifier = Verifier(write_reference_bundle(tmp_path / "b", ref), reference="bundle")
    with pytest.raises(BundleError, match="are not the reference's"):
        verifier.check(Runner(names, lambda i: dict(ref[0], extra=ref[0]["heatmap"], landmark=ref[0]["heatmap"])))


@pytest.mark.parametrize("kwargs,ok", [
    ({"min_f1": 0.0}, True), ({"min_f1": 1.0}, True), ({"min_f1": -0.01}, False), ({"min_f1": 1.01}, False),
    ({"min_cosine": -1.0}, True), ({"min_cosine": 1.0}, True), ({"min_cosine": -1.01}, False), ({"min_cosine": 1.001}, False),
    ({"max_abs_err": 0.0}, True), ({"max_abs_err": -1e-9}, False), ({"max_abs_err": float("nan")}, False),
    ({"reference": "fp32"}, False),
])
def test_the_tolerances_given_are_checked(tmp_path: Path, kwargs: Dict[str, Any], ok: bool) -> None:
    bundle = write_reference_bundle(tmp_path / "b", random_outputs(1))
    if ok:
        verifier = Verifier(bundle, **dict({"reference": "bundle"}, **kwargs))
        for key, value in kwargs.items():
            assert getattr(verifier, key) == value
    else:
        with pytest.raises(ConfigError):
            Verifier(bundle, **dict({"reference": "bundle"}, **kwargs))


# --- the task gate: f1 against FP32's detections, at least min_f1 ------------------------------


def faces(cells: Sequence[tuple]) -> Dict[str, np.ndarray]:
    """CenterFace outputs with one face per (row, col) cell of the stride-4 grid."""
    out = {k: np.zeros(s, np.float32) for k, s in OUTPUTS.items()}
    for r, c in cells:
        out["heatmap"][0, 0, r, c] = 0.9
    return out


FOUR = [(1, 1), (1, 7), (4, 3), (4, 8)]


@pytest.mark.parametrize("gate,passed", [("at", True), ("above", False), (0.0, True), (1.0, False)])
def test_the_f1_gate_is_at_least_min_f1(tmp_path: Path, gate: Any, passed: bool) -> None:
    ref = [faces(FOUR), faces(FOUR[:2])]
    test = [faces(FOUR[:3]), faces(FOUR[:2] + [(2, 5), (5, 1)])]  # one face lost, two found that FP32 did not
    bundle = write_reference_bundle(tmp_path / "b", ref, decoder=CENTERFACE)
    f1 = Verifier(bundle, "bundle", min_f1=0.0).check(Runner(list(OUTPUTS), lambda i: test[i])).f1
    assert f1 == pytest.approx(2 * 5 / (2 * 5 + 2 + 1))
    min_f1 = {"at": f1, "above": float(np.nextafter(f1, 1.0))}.get(gate, gate)
    report = Verifier(bundle, "bundle", min_f1=min_f1).check(Runner(list(reversed(OUTPUTS)), lambda i: test[i]))
    assert report.match is not None
    assert (report.match["tp"], report.match["fp"], report.match["fn"]) == (5, 2, 1)
    assert report.match["precision"] == pytest.approx(5 / 7) and report.match["recall"] == pytest.approx(5 / 6)
    assert (report.detections, report.reference_detections) == (7, 6)
    assert report.passed is passed
    assert report.min_cosine is None  # a decoder: the outputs' cosine is not part of the gate


@pytest.mark.parametrize("reference_min_f1,accuracy,want", [
    (0.5, {"int8": {"gate": {"threshold": 0.8}}}, 0.5),
    (None, {"int8": {"gate": {"threshold": 0.8}}}, 0.8),
    (None, {"int8": {"gate": {"threshold": 0.0}}}, 0.0),
    (None, {"int8": {"gate": {"threshold": 1.0}}}, 1.0),
    (None, None, DEFAULT_MIN_F1),
    (0.0, None, 0.0), (1.0, None, 1.0),
])
def test_the_gate_threshold(tmp_path: Path, reference_min_f1: Optional[float], accuracy: Any, want: float) -> None:
    extra = {"accuracy": accuracy} if accuracy is not None else {}
    bundle = write_reference_bundle(tmp_path / "b", random_outputs(1), min_f1=reference_min_f1, manifest=extra)
    assert gate_threshold(bundle, load_reference(bundle)) == want
    assert Verifier(bundle, "bundle").min_f1 == want


# --- reference.npz against the manifest --------------------------------------------------------


@pytest.mark.parametrize("arrays,manifest_outputs,message", [
    ({"transforms": np.tile(np.array([[1.0, 0.0, 0.0, 0.0, W, H]]), (2, 1))}, None, "positive scales"),
    ({"transforms": np.tile(np.array([[1.0, 1.0, 0.0, 0.0, W, 0]]), (2, 1))}, None, "positive scales"),
    ({"transforms": np.tile(np.array([[1.0, 1.0, 0.0, 0.0, 0, H]]), (2, 1))}, None, "positive scales"),
    ({"transforms": np.tile(np.array([[0.0, 1.0, 0.0, 0.0, W, H]]), (2, 1))}, None, "positive scales"),
    ({"transforms": np.tile(np.array([[1.0, 1.0, -3.0, -2.0, W, H]]), (2, 1))}, None, None),  # pads may be negative
    ({"transforms": np.tile(np.array([[1.0, 1.0, np.inf, 0.0, W, H]]), (2, 1))}, None, "finite"),
    ({"transforms": np.ones((3, 6))}, None, "transforms must be"),
    ({"inputs": np.zeros((2, 3, W, H), np.float32)}, None, "inputs are"),
    ({"output_1": np.zeros((1, 2, H // 4, W // 4), np.float32)}, None, "with 2 rows"),
    ({"extra": np.zeros(1)}, None, "unexpected arrays"),
    ({"output_0": np.array(0.5, np.float32)}, None, "output_0 must be float16/float32 with 2 rows"),  # 0-d
    ({"output_names": np.array(["heatmap", "heatmap", "offset", "landmarks"])}, None, "distinct"),
    ({}, {"heatmap": [1, 1, H // 4, W // 4], "scale": [1, 2, H // 4, W // 4], "offset": [1, 2, H // 4, W // 4]}, "differ from the manifest"),
    ({}, dict(OUTPUTS, scale=[1, 2, W // 4, H // 4]), "output_1 \\(scale\\) has shape"),
])
def test_a_reference_that_does_not_fit_the_manifest_is_refused(tmp_path: Path, arrays, manifest_outputs, message) -> None:
    if message is None:
        assert load_reference(write_reference_bundle(tmp_path / "b", random_outputs(2), arrays=arrays)).images == 2
        return
    with pytest.raises(BundleError, match=message):
        bundle = write_reference_bundle(tmp_path / "b", random_outputs(2), arrays=arrays, manifest_outputs=manifest_outputs)
        load_reference(bundle)


def test_the_reference_loads_as_stored(tmp_path: Path) -> None:
    ref = random_outputs(2, seed=9)
    data = load_reference(write_reference_bundle(tmp_path / "b", ref, min_f1=0.9))
    assert data.images == 2 and data.output_names == list(OUTPUTS) and data.min_f1 == 0.9
    assert data.stored_dtypes == ["float32"]
    assert [x.shape for x in data.inputs] == [(1, 3, H, W)] * 2
    assert (data.transforms[1].src[2], data.transforms[1].src[3]) == (W, H)
    for i in range(2):
        for k, name in enumerate(OUTPUTS):
            np.testing.assert_array_equal(data.outputs[i][k], ref[i][name])


def test_a_bundle_without_a_reference_says_how_to_get_one(tmp_path: Path) -> None:
    bundle = write_reference_bundle(tmp_path / "b", random_outputs(1))
    (bundle.root / REFERENCE).unlink()
    manifest = json.loads((bundle.root / MANIFEST).read_text())
    del manifest["files"][REFERENCE]
    (bundle.root / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="Rebuild it with `edge-sdk build --precision best`"):
        Verifier(Bundle.load(bundle.root), "bundle")


def test_the_report_as_json_and_as_lines(tmp_path: Path) -> None:
    ref = [{"y": np.array([[1.0, 0.0, 0.0, 0.0]], np.float32), "longer_name": np.array([[2.0, 2.0]], np.float32)}]
    test = [{"y": np.array([[1.0, 1.0, 0.0, 0.0]], np.float32), "longer_name": np.array([[2.0, 2.0]], np.float32)}]
    bundle = write_reference_bundle(tmp_path / "b", ref)
    report = Verifier(bundle, "bundle", min_cosine=0.5, max_abs_err=2.0).check(Runner(["longer_name", "y"], lambda i: test[i]))
    assert report.passed and report.f1 is None and report.match is None
    d = report.to_dict()
    assert d == {
        "passed": True, "backend": "test-runner", "precision": "fp16", "precision_reason": None, "engine": None,
        "reference": "the bundle's stored FP32 outputs (reference.npz, float32)", "images": 1, "f1_vs_fp32": None,
        "match": None, "detections": 0, "reference_detections": 0,
        "outputs": {"y": {"max_abs_err": 1.0, "mean_abs_err": 0.25, "cosine": 0.707107},
                    "longer_name": {"max_abs_err": 0.0, "mean_abs_err": 0.0, "cosine": 1.0}},
        "tolerances": {"min_f1": DEFAULT_MIN_F1, "min_cosine": 0.5, "max_abs_err": 2.0}, "failures": []}
    assert report_lines(report) == [
        "test-runner fp16 against the bundle's stored FP32 outputs (reference.npz, float32) on 1 gate image(s)",
        "  output        max |err|  mean |err|     cosine",
        "  y                     1        0.25   0.707107",
        "  longer_name           0           0   1.000000",
        "  passed",
    ]


@pytest.mark.parametrize("images,ok", [(256, True), (257, False)])
def test_the_reference_holds_at_most_256_images(tmp_path: Path, images: int, ok: bool) -> None:
    from edge_sdk.verify import MAX_IMAGES

    assert MAX_IMAGES == 256
    ref = [{"y": np.full((1, 2), float(i), np.float32)} for i in range(images)]
    bundle = write_reference_bundle(tmp_path / "b", ref)
    if ok:
        assert load_reference(bundle).images == images
    else:
        with pytest.raises(BundleError, match="inputs are float32 \\[257, 3, 24, 40\\], expected \\(N <= 256"):
            load_reference(bundle)


@pytest.mark.parametrize("length,ok", [(32768, True), (32769, False)])
def test_the_output_names_hold_at_most_64_times_4096_bytes(tmp_path: Path, length: int, ok: bool) -> None:
    # two names stored as unicode of the longer one's length: 2 x length x 4 bytes against 64 x 4096
    ref = [{"a" * length: np.zeros((1, 2), np.float32), "b": np.ones((1, 2), np.float32)}]
    bundle = write_reference_bundle(tmp_path / "b", ref, manifest_outputs={})
    if ok:
        assert [len(n) for n in load_reference(bundle).output_names] == [length, 1]
    else:
        with pytest.raises(BundleError, match="output_names must be a list of 1 to 64 names"):
            load_reference(bundle)


@pytest.mark.parametrize("dtype,ok", [(np.uint8, True), (np.float16, True), (np.float32, True), (np.float64, False),
                                      (np.int32, False)])
def test_the_gate_inputs_dtypes(tmp_path: Path, dtype, ok: bool) -> None:
    ref = random_outputs(2)
    arrays = {"inputs": (np.arange(2 * 3 * H * W).reshape(2, 3, H, W) % 200).astype(dtype)}
    bundle = write_reference_bundle(tmp_path / "b", ref, arrays=arrays)
    if ok:
        data = load_reference(bundle)
        assert all(x.dtype == np.float32 for x in data.inputs)
        np.testing.assert_array_equal(data.inputs[1][0], arrays["inputs"][1].astype(np.float32))
    else:
        with pytest.raises(BundleError, match="inputs are"):
            load_reference(bundle)


@pytest.mark.parametrize("dtype,ok", [(np.float16, True), (np.float32, True), (np.float64, False), (np.int8, False)])
def test_the_stored_outputs_dtypes(tmp_path: Path, dtype, ok: bool) -> None:
    ref = random_outputs(2)
    arrays = {"output_0": np.concatenate([r["heatmap"] for r in ref]).astype(dtype)}
    bundle = write_reference_bundle(tmp_path / "b", ref, arrays=arrays)
    if ok:
        data = load_reference(bundle)
        assert data.stored_dtypes == sorted({np.dtype(dtype).name, "float32"})
        assert data.outputs[1][0].dtype == np.float32
    else:
        with pytest.raises(BundleError, match="output_0 must be float16/float32"):
            load_reference(bundle)


def test_the_reference_is_read_within_the_readmes_budget_of_1_gib(tmp_path: Path, monkeypatch) -> None:
    # README: "the whole within a budget (1 GiB for the reference, ...)"
    from edge_sdk import verify as verify_mod

    budgets = []
    real = verify_mod.npz_headers

    def recording(path, budget, error):
        budgets.append(budget)
        return real(path, budget, error)

    monkeypatch.setattr(verify_mod, "npz_headers", recording)
    load_reference(write_reference_bundle(tmp_path / "b", random_outputs(1)))
    assert budgets == [1 << 30]


def test_a_reference_without_output_names_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "b"
    write_reference_bundle(root, random_outputs(1), manifest_outputs={})
    data = {k: v for k, v in np.load(root / REFERENCE).items() if not k.startswith("output_")}
    rewrite_reference(root, dict(data, output_names=np.array([], dtype="<U8")))
    with pytest.raises(BundleError, match="output_names must be a list of 1 to 64 names"):
        load_reference(Bundle.load(root))


def test_an_output_dimension_the_manifest_leaves_open_is_not_compared(tmp_path: Path) -> None:
    ref = random_outputs(1)
    shapes = {k: list(s) for k, s in OUTPUTS.items()}
    shapes["landmarks"] = [1, -1, H // 4, W // 4]  # a dimension the manifest does not fix
    data = load_reference(write_reference_bundle(tmp_path / "b", ref, manifest_outputs=shapes))
    assert data.outputs[0][3].shape == (1, 10, H // 4, W // 4)


def test_64_names_are_allowed_and_the_first_missing_output_is_named(tmp_path: Path) -> None:
    root = tmp_path / "b"
    ref = [{f"o{k}": np.full((1, 2), float(k), np.float32) for k in range(61)}]  # 61 outputs + 3 arrays: the npz's 64
    write_reference_bundle(root, ref, manifest_outputs={})
    data = dict(np.load(root / REFERENCE).items())
    rewrite_reference(root, dict(data, output_names=np.array([f"o{k}" for k in range(64)])))
    with pytest.raises(BundleError, match="output_61 must be float16/float32 with 1 rows"):
        load_reference(Bundle.load(root))


def test_one_value_per_image_and_each_transform_field_in_its_place(tmp_path: Path) -> None:
    ref = [{"score": np.array([0.25 * (i + 1)], np.float32)} for i in range(2)]  # outputs of one dimension
    rows = np.array([[2.0, 3.0, 4.0, 5.0, W, H], [0.5, 0.25, 1.5, 2.5, 2 * W, 3 * H]])
    data = load_reference(write_reference_bundle(tmp_path / "b", ref, arrays={"transforms": rows}))
    assert [o[0].tolist() for o in data.outputs] == [[0.25], [0.5]]
    got = [(t.scale_x, t.scale_y, t.x, t.y, t.src[2], t.src[3]) for t in data.transforms]
    assert got == [tuple(r) for r in rows.tolist()]
