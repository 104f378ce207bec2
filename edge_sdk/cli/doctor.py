"""`edge-sdk doctor`: what this machine offers the SDK, and how to fix what is missing."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from edge_sdk.cli._common import cli_errors


@cli_errors
def doctor(
    config: Optional[Path] = typer.Option(None, "--config", help="Device config (TOML) whose needs are checked: backend, source, broker, bundle. [default: a Jetson with the TensorRT backend]"),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
    root: Path = typer.Option(Path("/"), "--root", help="Read the system's files (etc/nv_tegra_release, dev/, run/jtop.sock) under this folder: a mounted device image.", hidden=True),
) -> None:
    """Check L4T/JetPack, TensorRT, CUDA bindings, GPU and SM, DLA, OpenCV and GStreamer, cameras,
    the jtop service, the broker, engine-cache disk space, power mode and the bundle. Exit 0 when
    everything the config needs is there, 1 when something is missing."""
    from edge_sdk.doctor import MISSING, OK, Env, diagnose, plan_for, ready
    from edge_sdk.errors import EdgeSdkError

    loaded = None
    error = ""
    if config is not None:
        from edge_sdk.daemon.config import load_daemon_config

        try:
            loaded = load_daemon_config(config)
        except EdgeSdkError as exc:
            error = str(exc)
    checks = diagnose(Env(root=root), plan_for(loaded, config, error))
    good = ready(checks)
    if as_json:
        typer.echo(json.dumps({"ready": good, "config": str(config) if config else None,
                               "checks": [c.to_dict() for c in checks]}, indent=2))
        raise typer.Exit(0 if good else 1)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="edge-sdk doctor" + (f" ({config})" if config else ""), show_lines=False)
    for col in ("check", "status", "found", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        if c.status == OK:
            status = "[green]ok[/green]"
        elif c.status == MISSING and c.needed:
            status = "[red]MISSING[/red]"
        elif c.status == MISSING:
            status = "[yellow]missing[/yellow]"
        else:
            status = "[dim]-[/dim]"
        table.add_row(c.name + (" *" if c.needed else ""), status, escape(c.found), escape(c.fix) if not c.ok else "")
    console = Console()
    console.print(table)
    missing = [c.name for c in checks if c.needed and not c.ok]
    if missing:
        console.print(f"[red]not ready[/red]: missing {', '.join(missing)} (* = needed by "
                      f"{'the config' if config else 'a Jetson with the TensorRT backend'})", highlight=False)
    else:
        console.print("[green]ready[/green]: everything the config needs is here (* = needed)", highlight=False)
    raise typer.Exit(0 if good else 1)
