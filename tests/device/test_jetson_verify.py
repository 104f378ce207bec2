"""`edge-sdk verify` and the on-device precision choice on a real Jetson, on the default bundle
(or $EDGE_SDK_BUNDLE): the FP16 and INT8 engines within the bundle's gate against FP32, and the
choice's table printed.

    pytest -m jetson tests/device -s -k verify

The bundle must carry reference.npz (made by an `edge-sdk build` that has it); the FP32
reference is ONNX Runtime when installed on the device, else the bundle's stored outputs.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_sdk.errors import EdgeSdkError
from edge_sdk.manifest import REFERENCE, Bundle

pytestmark = pytest.mark.jetson


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    from edge_sdk.default_bundle import default_bundle_dir

    root = Path(os.environ.get("EDGE_SDK_BUNDLE") or default_bundle_dir())
    if not (root / "manifest.json").is_file():
        pytest.skip(f"no bundle at {root}: set EDGE_SDK_BUNDLE or copy the default bundle there")
    loaded = Bundle.load(root)
    if REFERENCE not in loaded.files:
        pytest.skip(f"{root} carries no {REFERENCE}: rebuild it with `edge-sdk build`")
    return loaded


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_the_engine_passes_verify(bundle, precision: str) -> None:
    from edge_sdk.verify import report_lines, verify_bundle

    try:
        report = verify_bundle(bundle, backend="tensorrt", precision=precision)
    except EdgeSdkError as exc:
        pytest.skip(f"the tensorrt backend cannot run here: {exc}")
    print("\n" + "\n".join(report_lines(report)))
    if precision == "fp16":
        assert report.passed, report.failures
    else:  # INT8 passes where the build's gate passed it (the manifest's verdict)
        gate = ((bundle.get("accuracy") or {}).get("int8") or {}).get("gate") or {}
        if gate.get("passed"):
            assert report.f1 is not None and report.f1 >= report.min_f1 - 0.02, report.failures


def test_the_precision_choice_keeps_the_fastest_that_passes(bundle) -> None:
    from edge_sdk.precision_choice import choose_engine

    try:
        choice = choose_engine(bundle.root)
    except EdgeSdkError as exc:
        pytest.skip(f"the precision choice cannot run here: {exc}")
    print("\n| precision | median GPU ms | f1_vs_fp32 | passed | chosen |\n|---|---|---|---|---|")
    for row in choice.candidates:
        print(f"| {row.precision} | {row.median_ms:.3f} | {row.f1_vs_fp32} | {row.passed} | {row.chosen} |")
    passing = [r for r in choice.candidates if r.passed]
    assert choice.chosen == min(passing, key=lambda r: r.median_ms).precision
    assert choice.path.is_file()
