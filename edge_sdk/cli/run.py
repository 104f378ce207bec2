"""`edge-sdk run`: the device daemon (pipeline + telemetry + commands + hot reload)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import typer

from edge_sdk.cli._common import cli_errors


@cli_errors
def run(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Device config (TOML): pipeline keys plus tables device, mqtt, telemetry, health."),
    source: Optional[str] = typer.Option(None, "--source", help="Source URI: csi://0, v4l2:///dev/video0, rtsp://..., a file, a folder, synthetic://faces?..."),
    bundle: Optional[Path] = typer.Option(None, "--bundle", help="Bundle folder. [default: the config's, else the embedded default bundle]"),
    broker: Optional[str] = typer.Option(None, "--broker", help="MQTT broker URL: mqtt://host:1883 or mqtts://host:8883. Without one (here or in the mqtt table) telemetry goes to stdout as JSON lines."),
    device_id: Optional[str] = typer.Option(None, "--device-id", help="Device id, the <id> in edge-sdk/<id>/... topics. [default: host name]"),
    telemetry_interval: Optional[float] = typer.Option(None, "--telemetry-interval", help="Seconds between telemetry messages. [default: 5]"),
    models_dir: Optional[Path] = typer.Option(None, "--models-dir", help="Folder the `reload` command may load bundles from."),
    max_frames: Optional[int] = typer.Option(None, "--max-frames", help="Stop after this many frames (0: run until stopped)."),
    log_level: str = typer.Option("info", "--log-level", help="debug | info | warning | error"),
    metrics: Optional[str] = typer.Option(None, "--metrics", metavar="[HOST:]PORT", help="Serve this device's own Prometheus metrics (/metrics, the names edge-sdk monitor uses) on PORT of every interface, or on HOST:PORT only, for sites that scrape devices directly."),
) -> None:
    """Run the pipeline continuously and report: telemetry, health alerts and command responses
    over MQTT (or JSON lines on stdout without a broker).

    SIGTERM/SIGINT stop cleanly (last telemetry flushed, status offline); SIGHUP re-reads the
    config. Exit code 0 after a clean stop, the error's code otherwise (2 config, 8 bundle,
    9 source, 10 backend, 11 telemetry).
    """
    from edge_sdk.cli.monitor import listen_address
    from edge_sdk.daemon import Daemon, load_daemon_config

    address = listen_address(metrics, "--metrics") if metrics is not None else None

    logging.basicConfig(stream=sys.stderr, level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: Dict[str, Any] = {}
    if source is not None:
        overrides.setdefault("source", {})["uri"] = source
    if bundle is not None:
        overrides["bundle"] = str(bundle.resolve())
    if max_frames is not None:
        overrides["max_frames"] = max_frames
    if broker is not None:
        overrides.setdefault("mqtt", {})["url"] = broker
    if device_id is not None:
        overrides.setdefault("device", {})["id"] = device_id
    if models_dir is not None:
        overrides.setdefault("device", {})["models_dir"] = str(models_dir.resolve())
    if telemetry_interval is not None:
        overrides.setdefault("telemetry", {})["interval_s"] = telemetry_interval
    cfg = load_daemon_config(config, overrides)
    if not cfg.pipeline.bundle:
        from edge_sdk.default_bundle import ensure_default_bundle

        cfg.pipeline.bundle = str(ensure_default_bundle(cfg.pipeline.precision, echo=lambda m: typer.echo(m, err=True)))
    daemon = Daemon(cfg, config_path=config, overrides=overrides)
    if address is not None:
        serve_metrics(daemon, address)
    code = daemon.run()
    if code:
        raise typer.Exit(code)


def serve_metrics(daemon: Any, address: Tuple[str, int]) -> None:
    """`--metrics`: the device's latest telemetry and open alerts, rendered at scrape time."""
    from edge_sdk import _imports
    from edge_sdk.errors import ConfigError
    from edge_sdk.telemetry.exposition import device_families

    host, port = address
    prom = _imports.require("prometheus_client")

    class DeviceCollector:
        def collect(self) -> Any:
            reporter = daemon.reporter
            yield from device_families([(daemon.config.device.id, "online", reporter.last, reporter.health.open)])

    registry = prom.CollectorRegistry()
    registry.register(DeviceCollector())
    try:
        prom.start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"--metrics {host}:{port}: cannot listen on {host} port {port}: {exc}") from exc
