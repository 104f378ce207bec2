"""`edge-sdk monitor`: watch every device on a broker — table, JSON stream, recorder, Prometheus."""
from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import typer

from edge_sdk.cli._common import cli_errors

log = logging.getLogger("edge_sdk.monitor")
MAX_MESSAGE = 1024 * 1024  # a per-frame detections message with many boxes is ~100 KB


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render_table(fleet: Any) -> Any:
    from rich.table import Table

    table = Table(title="edge-sdk fleet", expand=False)
    for col in ("device", "status", "FPS", "p50 ms", "p99 ms", "dropped", "temp °C", "power W", "alerts", "bundle"):
        table.add_column(col, no_wrap=True)
    for row in fleet.rows():
        status = row["status"]
        style = {"online": "green", "offline": "red"}.get(status, "yellow")
        table.add_row(
            row["device"], f"[{style}]{status}[/{style}]", _fmt(row["fps"]), _fmt(row["p50"]), _fmt(row["p99"]),
            _fmt(row["dropped"]), _fmt(row["temperature_c"]), _fmt(row["power_w"]),
            ("[red]" + ", ".join(row["alerts"]) + "[/red]") if row["alerts"] else "-", _fmt(row["bundle"]),
        )
    return table


@cli_errors
def monitor(
    broker: str = typer.Option("mqtt://127.0.0.1:1883", "--broker", help="Broker URL: mqtt://host:1883 or mqtts://host:8883 (user:password@ allowed)."),
    device: Optional[str] = typer.Option(None, "--device", help="Watch only this device id. [default: all]"),
    as_json: bool = typer.Option(False, "--json", help="Stream every message as one JSON line {topic, payload} instead of the table."),
    record: Optional[Path] = typer.Option(None, "--record", help="Append every message to this JSONL file (input of `edge-sdk report`)."),
    prometheus: Optional[int] = typer.Option(None, "--prometheus", help="Serve the fleet as Prometheus metrics on this port (/metrics)."),
    share: Optional[str] = typer.Option(None, "--share", help="Join the MQTT 5 shared subscription $share/<GROUP>/... so several monitors split a fleet."),
    ca_file: Optional[Path] = typer.Option(None, "--ca-file", help="CA certificate for mqtts://."),
    cert_file: Optional[Path] = typer.Option(None, "--cert-file", help="Client certificate (mqtts)."),
    key_file: Optional[Path] = typer.Option(None, "--key-file", help="Client key (mqtts)."),
    duration: float = typer.Option(0.0, "--duration", help="Stop after this many seconds (0: until Ctrl-C)."),
) -> None:
    """Watch devices: a live table of status, FPS, p50/p99, drops, temperature, power and open
    alerts. With a shared subscription (--share) each group member receives a part of the
    fleet's telemetry; status messages are read by every member. Messages that do not validate
    against their topic's schema are dropped (counted, and logged once a minute)."""
    from edge_sdk import _imports
    from edge_sdk.errors import ConfigError
    from edge_sdk.telemetry.fleet import Fleet, prometheus_collector
    from edge_sdk.telemetry.guard import CallbackGuard
    from edge_sdk.telemetry.mqtt import BrokerConfig, make_client
    from edge_sdk.validate import UntrustedInput, dumps, loads_untrusted

    mqtt = _imports.mqtt()
    cfg = BrokerConfig(url=broker, protocol="5", ca_file=str(ca_file) if ca_file else None,
                       cert_file=str(cert_file) if cert_file else None, key_file=str(key_file) if key_file else None)
    fleet = Fleet()
    who = device or "+"
    topics = [f"edge-sdk/{who}/status", f"edge-sdk/{who}/telemetry", f"edge-sdk/{who}/alerts",
              f"edge-sdk/{who}/detections", f"edge-sdk/{who}/cmd/response"]
    if share:
        if "/" in share or "+" in share or "#" in share:
            raise ConfigError(f"--share group {share!r} may not contain '/', '+' or '#'")
        # status is retained and small: every member reads all of it; the rest is split
        topics = topics[:1] + [f"$share/{share}/{t}" for t in topics[1:]]
    if prometheus is not None:
        prom = _imports.require("prometheus_client")
        prom.REGISTRY.register(prometheus_collector(fleet))
        prom.start_http_server(prometheus)
        typer.echo(f"Prometheus metrics on http://0.0.0.0:{prometheus}/metrics", err=True)
    out_lock = threading.Lock()
    record_file = open(record, "a", encoding="utf-8") if record else None
    connected = threading.Event()
    refused: list = []

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            refused.append(str(reason))
            return
        client.subscribe([(t, 1) for t in topics])
        connected.set()

    last_warning = [-1e18]

    def refuse(topic: str, why: str) -> None:
        now = time.monotonic()
        if now - last_warning[0] >= 60.0:
            last_warning[0] = now
            log.warning("dropped a message on %s: %s (%d dropped so far)", topic, why, fleet.invalid)

    def on_message(client: Any, userdata: Any, msg: Any) -> None:
        try:
            payload = loads_untrusted(msg.payload, MAX_MESSAGE)
        except UntrustedInput as exc:
            fleet.invalid += 1
            refuse(msg.topic, str(exc))
            return
        if fleet.update(msg.topic, payload) is None:
            refuse(msg.topic, fleet.check(msg.topic, payload) or "too many devices")
            return
        line = dumps({"topic": msg.topic, "received": int(time.time() * 1000), "payload": payload})
        with out_lock:
            if record_file is not None:
                record_file.write(line + "\n")
                record_file.flush()
            if as_json:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()

    client = make_client(cfg, f"edge-sdk-monitor-{int(time.time() * 1000) % 10**9}", mqtt)
    guard = CallbackGuard("monitor")  # a message that breaks a callback must not end the network thread
    client.on_connect = guard(on_connect)
    client.on_message = guard(on_message)
    client.connect_async(cfg.host, cfg.port, keepalive=cfg.keepalive)
    client.loop_start()
    deadline = time.monotonic() + duration if duration > 0 else None
    stop = threading.Event()
    try:
        if as_json or (prometheus is not None and not sys.stdout.isatty()):
            while not stop.wait(0.2):
                if refused:
                    raise ConfigError(f"broker {cfg.redacted_url()} refused the monitor: {refused[0]}")
                if deadline is not None and time.monotonic() > deadline:
                    break
        else:
            from rich.live import Live

            with Live(render_table(fleet), refresh_per_second=2, screen=False) as live:
                while not stop.wait(0.5):
                    if refused:
                        raise ConfigError(f"broker {cfg.redacted_url()} refused the monitor: {refused[0]}")
                    live.update(render_table(fleet))
                    if deadline is not None and time.monotonic() > deadline:
                        break
    finally:
        client.disconnect()
        client.loop_stop()
        if record_file is not None:
            record_file.close()
