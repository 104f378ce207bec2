"""`edge-sdk report`: PNG plots of FPS and latency percentiles over time from recorded telemetry."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

from edge_sdk.cli._common import cli_errors


def read_telemetry(path: Path) -> Dict[str, List[Dict[str, Any]]]:
    """Telemetry payloads per device from a JSONL file written by `edge-sdk monitor --record`
    or by `edge-sdk run` without a broker (lines of {"topic": ..., "payload": ...})."""
    from edge_sdk.errors import ConfigError
    from edge_sdk.telemetry.schemas import split_topic

    per_device: Dict[str, List[Dict[str, Any]]] = {}
    seen = set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ConfigError(f"{path}:{n} is not JSON; record with `edge-sdk monitor --record FILE`") from None
        parsed = split_topic(str(record.get("topic", ""))) if isinstance(record, dict) else None
        payload = record.get("payload") if isinstance(record, dict) else None
        if parsed is None or parsed[1] != "telemetry" or not isinstance(payload, dict):
            continue
        key = (parsed[0], payload.get("seq"))
        if key in seen:  # a QoS 1 repeat
            continue
        seen.add(key)
        per_device.setdefault(parsed[0], []).append(payload)
    for items in per_device.values():
        items.sort(key=lambda p: p.get("ts", 0))
    return per_device


@cli_errors
def report(
    file: Path = typer.Argument(..., help="JSONL recorded by `edge-sdk monitor --record` (or `edge-sdk run` stdout)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for the PNG files. [default: next to FILE]"),
    stage: str = typer.Option("total", "--stage", help="Latency stage to plot (total, infer, preprocess, ...)."),
) -> None:
    """Render one PNG per device: FPS, and latency p50/p95/p99 of a stage, over time."""
    from edge_sdk import _imports
    from edge_sdk.errors import ConfigError

    data = read_telemetry(file)
    if not data:
        raise ConfigError(f"{file} holds no telemetry messages")
    matplotlib = _imports.require("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out or file.parent
    folder.mkdir(parents=True, exist_ok=True)
    for device, items in sorted(data.items()):
        t0 = items[0]["ts"]
        t = [(p["ts"] - t0) / 1000.0 for p in items]
        fig, (ax_fps, ax_lat) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
        ax_fps.plot(t, [p.get("fps", 0) for p in items], color="tab:blue", label="FPS")
        targets = [p.get("target_fps") for p in items if p.get("target_fps")]
        if targets:
            ax_fps.axhline(targets[-1], color="grey", linestyle="--", label="target")
        ax_fps.set_ylabel("FPS")
        ax_fps.legend(loc="lower right")
        ax_fps.set_title(f"{device}: FPS and {stage} latency over a {items[0].get('window_s', 10):g} s window")
        for q, color in (("p50", "tab:green"), ("p95", "tab:orange"), ("p99", "tab:red")):
            ax_lat.plot(t, [((p.get("latency_ms") or {}).get(stage) or {}).get(q, float("nan")) for p in items],
                        color=color, label=q)
        ax_lat.set_ylabel(f"{stage} latency (ms)")
        ax_lat.set_xlabel("seconds since first message")
        ax_lat.legend(loc="upper right")
        fig.tight_layout()
        target = folder / f"{device}.png"
        tmp = target.with_name(f".{target.name}.tmp.png")
        fig.savefig(tmp, dpi=100)
        plt.close(fig)
        tmp.replace(target)
        typer.echo(f"{target}  ({len(items)} messages)")
