"""`edge-sdk rollout BUNDLE`: a bundle to a fleet, canary first, then wave by wave, each device
gated on its shadow run's figures; undone on the first failure (edge_sdk.rollout)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, Optional

import typer

from edge_sdk.cli._common import cli_errors
from edge_sdk.rollout.plan import DEFAULT_GATES, DEFAULT_MIN_DETECTIONS

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
STOPPED_EXIT = 14  # stopped by SIGTERM or SIGINT before every device ran the bundle


@cli_errors
def rollout(
    bundle: str = typer.Argument(..., help="The bundle's folder name in each device's models_dir (with --url: the name it gets there)."),
    broker: str = typer.Option("mqtt://127.0.0.1:1883", "--broker", help="Broker URL: mqtt://host:1883 or mqtts://host:8883 (user:password@ allowed)."),
    devices: str = typer.Option(..., "--devices", help="Device ids to update, a glob over the online devices' retained status (e.g. 'cam-*')."),
    canary: int = typer.Option(1, "--canary", min=0, help="Devices (first by id) that take the bundle before any wave."),
    waves: str = typer.Option("10%,50%,100%", "--waves", help="Cumulative shares of the other devices, one wave each, the last 100%."),
    promote_if: str = typer.Option(DEFAULT_GATES, "--promote-if", help="Gates on each device's shadow figures: agreement, precision, recall, detection_rate, score_shift, latency (ratio), with >=, <=, >, <."),
    shadow_frames: int = typer.Option(50, "--shadow-frames", min=1, help="Frames the shadow compares on a device before its gates are read."),
    min_detections: int = typer.Option(DEFAULT_MIN_DETECTIONS, "--min-detections", min=0, help="Detections (live and candidate together) a device's window must hold before a gate on detections (all but latency) decides; fewer: undecided, waited for."),
    evidence_timeout: Optional[float] = typer.Option(None, "--evidence-timeout", min=1.0, help="Seconds a device may stay undecided (too few live detections) before the step stops undecided (exit 15); default: --timeout."),
    state: Optional[Path] = typer.Option(None, "--state", help="State file: run the same command again after a stop and it goes on where it stopped."),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="Seconds to wait for a step's devices (offline, loading, comparing) before stopping (exit 13)."),
    url: Optional[str] = typer.Option(None, "--url", help="HTTP(S) URL each device downloads the bundle from (with --sha256); devices without it need the bundle in models_dir."),
    sha256: Optional[str] = typer.Option(None, "--sha256", help="The sha256 of the bundle archive at --url."),
    secret_env: Optional[str] = typer.Option(None, "--secret-env", help="Sign commands with the secret in this environment variable (the devices' hmac_secret_env)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per step on stdout instead of text."),
) -> None:
    """Roll BUNDLE out to the devices: shadow, gate, promote, canary first; exit 0 when every
    device runs it, 6 when a device failed (every promoted device rolled back), 13 when devices
    stayed offline or busy past --timeout, 15 when a device's scene showed too few detections to
    decide its gates within --evidence-timeout, 14 when stopped by SIGTERM or SIGINT (in these
    three cases the step's shadows are aborted, nothing of the step is promoted, and the same
    command with --state goes on where it stopped)."""
    from edge_sdk.cli._stop import stop_signals
    from edge_sdk.errors import ConfigError, Stopped
    from edge_sdk.rollout.driver import Rollout
    from edge_sdk.rollout.link import Link
    from edge_sdk.rollout.plan import RolloutState, parse_gates, parse_waves, rollout_key
    from edge_sdk.telemetry.broker import BrokerConfig

    gates, shares = parse_gates(promote_if), parse_waves(waves)
    if (url is None) != (sha256 is None):
        raise ConfigError("--url and --sha256 go together: the devices verify the download against the sha256")
    if sha256 is not None and not _SHA256.match(sha256):
        raise ConfigError(f"--sha256 must be 64 lowercase hex digits, got {sha256!r}")
    secret = None
    if secret_env is not None:
        if secret_env not in os.environ:
            raise ConfigError(f"--secret-env names ${secret_env}, which is not set")
        secret = os.environ[secret_env].encode()
    key = rollout_key(bundle=bundle, devices=devices, canary=canary, waves=shares, gates=[str(g) for g in gates],
                      shadow_frames=shadow_frames, url=url, sha256=sha256)
    progress = RolloutState.open(state, key)

    def say(event: Dict[str, Any]) -> None:
        typer.echo(json.dumps(event) if as_json else f"[{event['t']:7.1f}s] {event['text']}")

    link = Link(BrokerConfig(url=broker), secret)
    with stop_signals(link.interrupt):  # raised from the rollout's next wait (Link.interrupt)
        try:
            if not link.start(min(timeout, 30.0)):
                raise ConfigError(f"no answer from the broker at {BrokerConfig(url=broker).redacted_url()}; check --broker")
            fetch = {"url": url, "sha256": sha256} if url is not None and sha256 is not None else None
            Rollout(link, bundle, gates, shadow_frames, timeout, progress, say, fetch, min_detections=min_detections,
                    evidence_timeout_s=evidence_timeout).run(devices, canary, shares)
        except Stopped as exc:
            if exc.forced:
                raise
            if not progress.steps:
                again = "no step had started; run the same command again to start it"
            elif state is not None:
                again = f"run the same command again to go on from step {progress.done + 1} of {len(progress.steps)}"
            else:
                again = f"{progress.done} of {len(progress.steps)} steps done; without --state it cannot be resumed"
            typer.secho(f"rollout {str(exc)}: {again}", fg=typer.colors.YELLOW, err=True)
            raise typer.Exit(STOPPED_EXIT) from None
        finally:
            link.stop()
