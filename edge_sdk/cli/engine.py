"""`edge-sdk engine BUNDLE`: compile the bundle's TensorRT engine on this device and cache it.

Parameters use Typer's `typer.Option(default, ...)` form: on Python 3.8 (JetPack 5), Typer
drops `Annotated[...]` metadata from postponed annotations, silently renaming options.
"""
from __future__ import annotations

import json
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from edge_sdk.cli._common import cli_errors
from edge_sdk.precision import BEST, BUILD_PRECISIONS, PRECISIONS

if TYPE_CHECKING:
    from edge_sdk.trt.profiles import BatchRange

# Typer takes a choice of values as an Enum: one member per build precision, named as its value.
Precision = Enum("Precision", [(p, p) for p in BUILD_PRECISIONS], type=str)  # type: ignore[misc]


@cli_errors
def engine(
    bundle: Path = typer.Argument(..., help="Bundle folder made by `edge-sdk build` (verified before use)."),
    precision: Precision = typer.Option(
        Precision(BEST),
        "--precision",
        help=f"{', '.join(PRECISIONS)}, or {BEST}: build FP16 and INT8, time and verify both here, keep the fastest "
        "that passes the bundle's gate (a bundle without gate inputs: one FP16+INT8 engine). INT8 on TensorRT 8.x uses "
        "the bundle's calibration cache; on TensorRT >= 10 the bundle's Q/DQ model.",
    ),
    dla_core: Optional[int] = typer.Option(
        None, "--dla-core", help="Run on this DLA core, falling back to the GPU per layer (FP16/INT8 only)."
    ),
    workspace: Optional[int] = typer.Option(None, "--workspace", help="Workspace memory pool limit in MiB."),
    timing_cache: Optional[Path] = typer.Option(
        None, "--timing-cache", help="Timing cache file: read if present, updated after the build."
    ),
    cache_dir: Optional[Path] = typer.Option(
        None, "--cache-dir", help="Engine cache folder (default: $EDGE_SDK_ENGINE_CACHE or ~/.cache/edge-sdk/engines)."
    ),
    save_engine: Optional[Path] = typer.Option(
        None, "--save-engine", help="Also copy the engine to this file (for trtexec --loadEngine)."
    ),
    recalibrate: bool = typer.Option(
        False,
        "--recalibrate",
        help="Ignore the shipped calib.cache and let TensorRT calibrate on the bundle's calib/ tensors (TensorRT 8.x).",
    ),
    max_batch: Optional[int] = typer.Option(
        None,
        "--max-batch",
        help="Largest batch of the engine's optimization profile when the model's batch is dynamic "
        "(default: the bundle's range from `edge-sdk build --max-batch`, else the ROI setting max_fine_inputs; "
        "at most the bundle's). A model with a fixed batch is built without a profile.",
    ),
    opt_batch: Optional[int] = typer.Option(
        None, "--opt-batch", help="Batch TensorRT tunes its kernels for (default: the bundle's --opt-batch, else --max-batch; on a "
        "DLA core, which runs one batch size only, 1)."
    ),
    warmup: int = typer.Option(10, "--warmup", help=f"{BEST}: runs before timing each engine."),
    iterations: int = typer.Option(100, "--iterations", help=f"{BEST}: timed runs per engine (the median counts)."),
    reference: str = typer.Option(
        "auto", "--reference", help=f"{BEST}: FP32 reference of the verification (see `edge-sdk verify --help`)."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the cache holds this engine."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout only."),
) -> None:
    """Compile BUNDLE's TensorRT engine for this device's GPU and cache it (run this on the device).

    The engine is cached under (bundle hash, TensorRT version, GPU SM, precision, DLA core):
    a second run with the same inputs finds it instead of building again.
    """
    from rich.console import Console

    from edge_sdk import _imports
    from edge_sdk.trt.engine import build_engine
    from edge_sdk.trt.loaders import SaveEngine
    from edge_sdk.trt.options import BuildOptions
    from edge_sdk.trt.report import report_lines, report_warnings

    _imports.tensorrt()  # before anything else: says how to get TensorRT when it is missing
    batch = _batch(bundle, max_batch, opt_batch, dla_core is not None)
    console = Console(stderr=True)
    choice = None
    options = BuildOptions(precision=precision.value, dla_core=dla_core, workspace_mib=workspace, timing_cache=timing_cache,
                           cache_dir=cache_dir, recalibrate=recalibrate, force=force, batch=batch)
    if precision.value == BEST and _has_reference(bundle):
        from edge_sdk.precision_choice import choose_engine

        with console.status("choosing the precision on this device") as status:
            choice = choose_engine(bundle, options if as_json else replace(options, progress=status.update),
                                   warmup=warmup, iterations=iterations, reference=reference)
        result = choice.engine
    elif as_json:
        result = build_engine(bundle, options)
    else:
        with console.status("checking the bundle and the engine cache") as status:
            result = build_engine(bundle, replace(options, progress=status.update))
    if save_engine is not None:
        SaveEngine(result.path.read_bytes(), save_engine)()
    if as_json:
        out = result.to_dict()
        out["saved"] = str(save_engine) if save_engine is not None else None
        out["device_choice"] = choice.to_dict() if choice is not None else None
        typer.echo(json.dumps(out, indent=2))
        return
    how = "found in the cache" if result.cached else f"built in {result.build_seconds:.1f} s"
    where = "GPU" if dla_core is None else f"DLA core {dla_core} + GPU fallback"
    if choice is not None:
        typer.echo(f"precision chosen on this device: {choice.chosen} (device report: {choice.path})")
        typer.echo(f"  {'precision':<9}  {'median ms':>9}  {'f1_vs_fp32':>10}  passed  chosen")
        for row in choice.candidates:
            f1 = "-" if row.f1_vs_fp32 is None else f"{row.f1_vs_fp32:.4f}"
            typer.echo(f"  {row.precision:<9}  {row.median_ms:>9.3f}  {f1:>10}  {'yes' if row.passed else 'no':<6}  "
                       f"{'*' if row.chosen else ''}")
        frames = choice.info.get("frame_memory")
        if frames:
            times = ", ".join(f"{k} {v:.3f} ms" for k, v in frames["gpu_ms"].items())
            typer.echo(f"frame memory measured on this device: {frames['chosen']} ({times} per {frames['frame']} frame; "
                       "frame_memory = auto uses it)")
        for note in choice.notes:
            typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)
    elif precision.value == BEST:
        typer.secho("note: this bundle carries no gate inputs (reference.npz), so FP16 and INT8 cannot be timed and "
                    "verified here: built one FP16+INT8 engine (TensorRT picks per layer). Rebuild the bundle with "
                    "`edge-sdk build` to choose on the device", fg=typer.colors.YELLOW, err=True)
    typer.echo(f"engine: {result.path} ({how})")
    typer.echo(
        f"  {result.gpu.name} (SM {result.gpu.sm}), TensorRT {result.tensorrt}, {result.plan.precision} "
        f"from {result.plan.to_dict()['model']}, {where}"
    )
    if result.calibration:
        cal = result.calibration
        if cal["cache_read"]:
            typer.echo(f"  INT8 scales from {cal['cache_read']}")
        else:
            typer.echo(f"  INT8 calibrated here on {cal['batches']} batch(es) ({cal['calibrator']}); cache: {cal['cache_written']}")
    if result.constrained_layers:
        typer.echo(f"  {result.constrained_layers} layer(s) pinned to the bundle's INT8 fallback precision (FP32 or FP16)")
    profile = (result.batch or {}).get("profile")
    if profile:
        typer.echo("  dynamic batch: " + ", ".join(f"{name} {low[0]}..{high[0]} (opt {mid[0]})" for name, (low, mid, high) in profile.items()))
    if result.layers is not None:
        for line in report_lines(result.layers):
            typer.echo(f"  {line}")
        if result.layer_report is not None:
            typer.echo(f"  layer report: {result.layer_report}")
    if save_engine is not None:
        typer.echo(f"  copied to {save_engine}")
    for note in result.notes:
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)
    for warning in report_warnings(result.layers or {}):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)


def _batch(bundle: Path, max_batch: Optional[int], opt_batch: Optional[int], dla: bool) -> "BatchRange":
    """The engine's batch range: --max-batch / --opt-batch, else the bundle's recorded range
    (`edge-sdk build --max-batch`), else the ROI settings'. A --max-batch beyond the range the
    bundle's models were checked for is a ConfigError that says how to rebuild the bundle."""
    from edge_sdk.manifest import Bundle
    from edge_sdk.manifest_check import check_batch
    from edge_sdk.trt.profiles import batch_range

    loaded = Bundle.load(bundle, verify=False)
    recorded = loaded.get("batch")
    if max_batch is not None and recorded is not None:
        check_batch(loaded, max_batch)
    return batch_range(max_batch, opt_batch, dla=dla, recorded=recorded)


def _has_reference(bundle: Path) -> bool:
    """Does the bundle carry the gate inputs the device choice verifies against?"""
    from edge_sdk.manifest import REFERENCE, Bundle

    return REFERENCE in Bundle.load(bundle, verify=False).files
