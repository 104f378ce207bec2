"""`edge-sdk detect` says which variant ran and why, in one summary line (real ONNX Runtime)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.manifest import MANIFEST
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends import onnxruntime as ort_backend
from runtime_factories import CENTERFACE_DECODER, tiny_centerface_model, write_bundle

runner = CliRunner()
SOURCE = "synthetic://faces?width=160&height=120&count=2&min_size=16&max_size=32"


@pytest.fixture(scope="module")
def gated_int8_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All three variants (copies of one tiny model); the builder's gated choice is INT8."""
    tmp = tmp_path_factory.mktemp("detect-precision")
    model = tiny_centerface_model(tmp / "tiny.onnx")
    root = write_bundle(tmp / "bundle", model, InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER,
                        extra_variants=("fp16", "int8"))
    manifest = json.loads((root / MANIFEST).read_text())
    manifest.update(precision="int8", variants=["fp32", "fp16", "int8"])
    (root / MANIFEST).write_text(json.dumps(manifest))
    return root


@pytest.fixture(autouse=True)
def cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setattr(ort_backend, "available_providers", lambda: ["CPUExecutionProvider"])


def summary_line(output: str) -> str:
    flat = " ".join(output.split())
    found = re.search(r"ran (\S+) on (\S+): (.*?) latency \(ms\)", flat)
    assert found, output
    return found.group(0)


@pytest.mark.parametrize(
    "args, variant, reason",
    [
        ([], "fp32", "FP32 is fastest on ONNX Runtime's CPU provider (measured: INT8 Q/DQ 2.6x slower"),
        (["--precision", "auto"], "fp32", "FP32 is fastest on ONNX Runtime's CPU provider"),
        (["--precision", "int8"], "int8", "requested"),
        (["--precision", "fp16"], "fp16", "requested"),
    ],
)
def test_the_summary_says_which_variant_ran_and_why(gated_int8_bundle: Path, args: Any, variant: str, reason: str) -> None:
    result = runner.invoke(app, ["detect", SOURCE, "--bundle", str(gated_int8_bundle), "--max-frames", "2",
                                 "--threads", "1", *args])
    assert result.exit_code == 0, result.output
    line = summary_line(result.output)
    assert line.startswith(f"ran {variant} on onnxruntime: {reason}"), line


def test_quiet_prints_no_summary(gated_int8_bundle: Path) -> None:
    result = runner.invoke(app, ["detect", SOURCE, "--bundle", str(gated_int8_bundle), "--max-frames", "1", "-q"])
    assert result.exit_code == 0, result.output
    assert "ran fp32" not in result.output
