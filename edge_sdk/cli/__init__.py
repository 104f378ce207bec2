"""`edge-sdk` command line. One module per command; heavy imports happen inside commands."""
from __future__ import annotations

import typer

from edge_sdk import __version__
from edge_sdk.cli import build as _build
from edge_sdk.cli import targets as _targets
from edge_sdk.cli import detect as _detect
from edge_sdk.cli import engine as _engine
from edge_sdk.cli import run as _run
from edge_sdk.cli import monitor as _monitor
from edge_sdk.cli import rollout as _rollout
from edge_sdk.cli import report as _report
from edge_sdk.cli import doctor as _doctor
from edge_sdk.cli import verify as _verify

app = typer.Typer(
    name="edge-sdk",
    help="Build, run and watch vision models on NVIDIA Jetson and other embedded devices.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edge-sdk {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Build, run and watch vision models on NVIDIA Jetson and other embedded devices."""


app.command("targets")(_targets.targets)
app.command("engine")(_engine.engine)
app.command("build")(_build.build)
app.command("detect")(_detect.detect)
app.command("run")(_run.run)
app.command("monitor")(_monitor.monitor)
app.command("rollout")(_rollout.rollout)
app.command("report")(_report.report)
app.command("doctor")(_doctor.doctor)
app.command("verify")(_verify.verify)


def main() -> None:
    app()
