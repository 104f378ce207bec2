"""The gate inputs and FP32 outputs a build writes into the bundle (reference.npz), and
`edge-sdk verify` on them with real ONNX Runtime: the tiny detector built to every variant, with
an INT8 that loses some detections (kept by --allow-accuracy-loss)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Tuple

import numpy as np
import pytest
from detector_factory import TINY_DECODER, TINY_HW, make_detector, write_images
from typer.testing import CliRunner

from edge_sdk.builder import pipeline
from edge_sdk.builder.project import BuildConfig
from edge_sdk.cli import app
from edge_sdk.errors import AccuracyGateError, BundleError
from edge_sdk.manifest import MANIFEST, REFERENCE, Bundle
from edge_sdk.verify import load_reference

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Bundle, Path]:
    root = tmp_path_factory.mktemp("reference")
    model = root / "detector.onnx"
    onnx.save(make_detector(), str(model))
    config = BuildConfig(model=model, out=root / "bundle", precision="best", calib=write_images(root / "calib", 16),
                         input_size=(TINY_HW[1], TINY_HW[0]), decoder=dict(TINY_DECODER), allow_accuracy_loss=True)
    return pipeline.build(config).bundle, root


def verify(bundle: Path, *args: str):
    result = CliRunner().invoke(app, ["verify", str(bundle), "--backend", "onnxruntime-cpu", "--json", *args])
    return result, (json.JSONDecoder().raw_decode(result.stdout)[0] if result.stdout.startswith("{") else None)


def ort_outputs(path: Path, inputs: np.ndarray):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return [session.run(None, {name: inputs[i : i + 1]}) for i in range(len(inputs))]


def test_the_bundle_carries_the_gate_inputs_and_fp32_outputs(built) -> None:
    bundle, _ = built
    section = bundle.manifest["reference"]
    assert REFERENCE in bundle.files and bundle.files[REFERENCE].size == (bundle.root / REFERENCE).stat().st_size
    gate = bundle.manifest["calibration"]["split"]["gate"]["images"]
    ref = load_reference(bundle)
    assert section["images"] == ref.images == gate and section["min_f1"] == 0.97
    assert ref.output_names == [o["name"] for o in bundle.manifest["outputs"]]
    # the stored outputs are FP32's on the stored inputs (to the precision they are stored in)
    fresh = ort_outputs(bundle.root / "model.onnx", np.concatenate(ref.inputs))
    for stored, mine in zip(ref.outputs, fresh):
        for a, b in zip(stored, mine):
            np.testing.assert_allclose(a, b, atol=1e-3 * max(1.0, float(np.abs(b).max())))


def test_an_unlisted_reference_file_is_refused(built, tmp_path: Path) -> None:
    bundle, _ = built
    copy = tmp_path / "copy"
    shutil.copytree(bundle.root, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    del manifest["files"][REFERENCE]
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="reference.npz, which its manifest does not list"):
        Bundle.load(copy)


def test_verify_fp32_is_exact(built) -> None:
    bundle, _ = built
    result, out = verify(bundle.root, "--precision", "fp32")
    assert result.exit_code == 0, result.output
    assert out["f1_vs_fp32"] == 1.0 and out["reference_detections"] > 0
    assert all(o["max_abs_err"] == 0.0 and o["cosine"] == 1.0 for o in out["outputs"].values())


def test_verify_int8_reports_its_own_errors_and_the_builders_f1(built) -> None:
    bundle, _ = built
    result, out = verify(bundle.root, "--precision", "int8", "--min-f1", "0.5", "--min-cosine", "0.5")
    assert result.exit_code == 0, result.output
    # task level: the same f1 the build's accuracy gate measured on the same gate images
    assert out["f1_vs_fp32"] == pytest.approx(bundle.manifest["accuracy"]["int8"]["f1_vs_fp32"], abs=1e-4)
    assert out["f1_vs_fp32"] < 1.0
    # per output: the INT8 model's difference from FP32, computed here with ONNX Runtime and numpy
    ref = load_reference(bundle)
    x = np.concatenate(ref.inputs)
    fp32, int8 = ort_outputs(bundle.root / "model.onnx", x), ort_outputs(bundle.root / "model.int8.qdq.onnx", x)
    for k, name in enumerate(ref.output_names):
        diff = max(float(np.abs(a[k] - b[k]).max()) for a, b in zip(fp32, int8))
        assert out["outputs"][name]["max_abs_err"] == pytest.approx(diff, rel=1e-5, abs=1e-9)
    assert max(o["max_abs_err"] for o in out["outputs"].values()) > 0


def test_verify_fails_beyond_the_gate_and_the_tolerances(built) -> None:
    bundle, _ = built
    result, out = verify(bundle.root, "--precision", "int8")  # the manifest's gate: 0.97
    assert result.exit_code == AccuracyGateError.exit_code
    assert out["passed"] is False and any(f.startswith("f1_vs_fp32") for f in out["failures"])
    result, out = verify(bundle.root, "--precision", "fp16", "--max-abs-err", "1e-9")
    assert result.exit_code == AccuracyGateError.exit_code and "max abs error" in " ".join(out["failures"])


def test_the_stored_reference_gives_the_same_verdict(built) -> None:
    bundle, _ = built
    _, live = verify(bundle.root, "--precision", "int8", "--min-f1", "0.5", "--min-cosine", "0.5")
    _, stored = verify(bundle.root, "--precision", "int8", "--min-f1", "0.5", "--min-cosine", "0.5",
                       "--reference", "bundle")
    assert stored["reference"].startswith("the bundle's stored FP32 outputs")
    assert stored["f1_vs_fp32"] == live["f1_vs_fp32"] and stored["reference_detections"] == live["reference_detections"]


def test_a_detector_is_judged_by_its_detections_unless_a_cosine_is_asked_for(built) -> None:
    """As the build's gate: an INT8 output far from FP32 in cosine does not fail a detector whose
    detections agree; `--min-cosine` makes the outputs count too."""
    bundle, _ = built
    result, out = verify(bundle.root, "--precision", "int8", "--min-f1", "0.5")
    worst = min(o["cosine"] for o in out["outputs"].values())
    assert worst < 0.999 and result.exit_code == 0, (worst, out["failures"])
    assert out["tolerances"]["min_cosine"] is None
    result, out = verify(bundle.root, "--precision", "int8", "--min-f1", "0.5", "--min-cosine", f"{worst + 1e-4:.6f}")
    assert result.exit_code == AccuracyGateError.exit_code and any("cosine" in f for f in out["failures"])
