"""`edge-sdk verify BUNDLE`: a backend against FP32 on the bundle's held-back gate inputs.

Parameters use Typer's `typer.Option(default, ...)` form (see edge_sdk/cli/engine.py: Python 3.8).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from edge_sdk.cli._common import cli_errors
from edge_sdk.errors import AccuracyGateError
from edge_sdk.precision import RUNTIME_PRECISIONS


@cli_errors
def verify(
    bundle: Path = typer.Argument(..., help="Bundle folder made by `edge-sdk build` (verified before use)."),
    backend: str = typer.Option(
        "tensorrt", "--backend",
        help="Backend to verify: tensorrt (the engine), or auto, onnxruntime, onnxruntime-cpu/-cuda/-tensorrt.",
    ),
    precision: str = typer.Option(
        "auto", "--precision",
        help=f"{', '.join(RUNTIME_PRECISIONS)}: the variant to verify (auto: what `edge-sdk run` would run).",
    ),
    reference: str = typer.Option(
        "auto", "--reference",
        help="FP32 reference: onnxruntime (model.onnx run here), bundle (the stored outputs), or auto (onnxruntime "
        "when installed).",
    ),
    min_f1: Optional[float] = typer.Option(
        None, "--min-f1", help="Lowest f1_vs_fp32 that passes (default: the bundle's gate, min_f1 of its build)."
    ),
    min_cosine: Optional[float] = typer.Option(
        None, "--min-cosine", help="Lowest cosine similarity of each output that passes (default: checked, at 0.99, only "
        "for a model without a decoder; a detector is judged by f1_vs_fp32, as the build's gate does)."
    ),
    max_abs_err: Optional[float] = typer.Option(
        None, "--max-abs-err", help="Largest absolute error of any output value that passes (default: not checked)."
    ),
    dla_core: Optional[int] = typer.Option(None, "--dla-core", help="tensorrt: the engine built for this DLA core."),
    cache_dir: Optional[Path] = typer.Option(
        None, "--cache-dir", help="tensorrt: engine cache folder (default: $EDGE_SDK_ENGINE_CACHE or ~/.cache/edge-sdk/engines)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout only."),
) -> None:
    """Run BUNDLE's model on a backend and FP32 on the bundle's gate inputs; compare them.

    Per output: max and mean absolute error and cosine similarity; per task: f1_vs_fp32 (the
    decoder's detections matched with FP32's, as the build's accuracy gate scores them). Exits
    6 when a tolerance is exceeded, 8 for a bundle without gate inputs (rebuild it).
    """
    from edge_sdk.manifest import Bundle
    from edge_sdk.verify import report_lines, verify_bundle

    options = {"dla_core": dla_core, "cache_dir": cache_dir} if backend == "tensorrt" else {}
    report = verify_bundle(Bundle.load(bundle), backend=backend, precision=precision, reference=reference,
                           min_f1=min_f1, min_cosine=min_cosine, max_abs_err=max_abs_err, **options)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for line in report_lines(report):
            typer.echo(line)
    if not report.passed:
        typer.secho(f"error: verify failed: {'; '.join(report.failures)}", fg=typer.colors.RED, err=True)
        raise typer.Exit(AccuracyGateError.exit_code)
