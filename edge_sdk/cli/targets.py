"""`edge-sdk targets`: list the deployment profiles."""
from __future__ import annotations

import json

import typer

from edge_sdk.cli._common import cli_errors


@cli_errors
def targets(
    as_json: bool = typer.Option(False, "--json", help="Print the profiles as JSON."),
) -> None:
    """List deployment targets and what each one implies for the bundle."""
    from rich.console import Console
    from rich.table import Table

    from edge_sdk.targets import TARGETS

    if as_json:
        typer.echo(json.dumps([t.to_dict() for t in TARGETS.values()], indent=2))
        return
    table = Table(title="edge-sdk targets")
    for col in ("target", "GPU SM", "TensorRT", "JetPack", "Python", "DLA", "memory", "INT8"):
        table.add_column(col, no_wrap=col in ("target", "TensorRT"))
    for t in TARGETS.values():
        table.add_row(
            t.name,
            t.sm or "detected",
            t.tensorrt or "installed",
            t.jetpack or "-",
            t.python,
            str(t.dla_cores),
            f"{t.memory_gb:g} GB shared" if t.memory_gb and t.shared_memory else (f"{t.memory_gb:g} GB" if t.memory_gb else "-"),
            "calibration cache" if t.quantization == "implicit" else "Q/DQ ONNX",
        )
    Console().print(table)
