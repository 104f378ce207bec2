"""`edge-sdk monitor`: watch every device on a broker — table, JSON stream, recorder, Prometheus."""
from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Tuple

import typer

from edge_sdk.cli._common import cli_errors
from edge_sdk.telemetry.fleet import EXPIRE_S, MAX_DEVICES
from edge_sdk.telemetry.schemas import MAX_BYTES

log = logging.getLogger("edge_sdk.monitor")
DEFAULT_BIND = "0.0.0.0"  # --prometheus PORT: every interface, as Prometheus scrapes from another host
MAX_PAYLOAD = max(MAX_BYTES.values())  # the largest topic's bound; Intake.put checks each topic's own
# announced to the broker (MQTT 5): beside the largest payload, the topic, properties and headers
MAX_PACKET = MAX_PAYLOAD + 64 * 1024


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _percent(ratio: Any) -> str:
    """A ratio 0..1 as a percentage ("75%"); "-" when there is none (a device with one source)."""
    return "-" if ratio is None else f"{ratio:.0%}"


def render_table(fleet: Any) -> Any:
    from rich.table import Table

    table = Table(title="edge-sdk fleet", expand=False)
    for col in ("device", "status", "FPS", "p50 ms", "p99 ms", "dropped", "batch eff", "temp °C", "power W", "alerts",
                "bundle"):
        table.add_column(col, no_wrap=True)
    for row in fleet.rows():
        status = row["status"]
        style = {"online": "green", "offline": "red"}.get(status, "yellow")
        table.add_row(
            row["device"], f"[{style}]{status}[/{style}]", _fmt(row["fps"]), _fmt(row["p50"]), _fmt(row["p99"]),
            _fmt(row["dropped"]), _percent(row["batch_efficiency"]), _fmt(row["temperature_c"]), _fmt(row["power_w"]),
            ("[red]" + ", ".join(row["alerts"]) + "[/red]") if row["alerts"] else "-", _fmt(row["bundle"]),
        )
        for s in row["streams"]:  # a device with several sources: a row per stream under it
            camera = s["camera"] or "-"
            style = {"ok": "green", "lost": "red"}.get(camera, "yellow")
            table.add_row(f"  └ {s['stream']}", f"[{style}]{camera}[/{style}]", _fmt(s["fps"]), _fmt(s["p50"]),
                          _fmt(s["p99"]), _fmt(s["dropped"]), "", "", "", "", "")
    return table


def listen_address(value: str, option: str = "--prometheus") -> Tuple[str, int]:
    """`--prometheus` (or `option`) as (host, port): `PORT` (on DEFAULT_BIND), `HOST:PORT` or `[IPV6]:PORT`."""
    from edge_sdk.errors import ConfigError

    host, sep, port = value.rpartition(":")
    if not sep:
        host = DEFAULT_BIND
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or ":" in host and not value.startswith("["):
        raise ConfigError(f"{option} {value!r}: give PORT, HOST:PORT or [IPV6]:PORT (e.g. 127.0.0.1:9108)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{option} {value!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def client_id() -> str:
    """The monitor's MQTT client id, its own whenever it starts: two monitors with one id take
    the connection from each other in turn (the broker closes the older one), as two members of
    a --share group started in the same millisecond did with an id made from the clock."""
    import secrets

    return f"edge-sdk-monitor-{secrets.token_hex(5)}"


def summary(fleet: Any, intake: Any) -> str:
    """The monitor's counters in one line (logged at exit, and with each warning)."""
    c, i = fleet.counters(), intake.counters()
    return (f"{c['devices']} devices; messages: {c['accepted']} accepted, {c['invalid']} invalid, "
            f"{i['oversize']} over their size bound, {i['backlog']} dropped from a full backlog, "
            f"{c['stale']} stale and {c['skewed']} skewed status; devices forgotten: {c['expired']} silent "
            f"beyond --expire, {c['evicted']} to make room (--max-devices {fleet.max_devices})")


@cli_errors
def monitor(
    broker: str = typer.Option("mqtt://127.0.0.1:1883", "--broker", help="Broker URL: mqtt://host:1883 or mqtts://host:8883 (user:password@ allowed)."),
    device: Optional[str] = typer.Option(None, "--device", help="Watch only this device id. [default: all]"),
    as_json: bool = typer.Option(False, "--json", help="Stream every message as one JSON line {topic, payload} instead of the table."),
    record: Optional[Path] = typer.Option(None, "--record", help="Append every message to this JSONL file (input of `edge-sdk report`)."),
    prometheus: Optional[str] = typer.Option(None, "--prometheus", metavar="[HOST:]PORT", help="Serve the fleet as Prometheus metrics (/metrics) on PORT of every interface (0.0.0.0), or on HOST:PORT only (127.0.0.1:9108, [::1]:9108)."),
    max_devices: int = typer.Option(MAX_DEVICES, "--max-devices", min=1, help="Track at most this many devices; a new one takes the place of the one silent longest."),
    expire: float = typer.Option(EXPIRE_S, "--expire", min=0.0, help="Forget a device silent for this many seconds (0: never)."),
    homeassistant: bool = typer.Option(False, "--homeassistant", help="Publish Home Assistant MQTT discovery configs (retained) for every device seen, and remove them when a device is forgotten (--expire, --max-devices)."),
    homeassistant_prefix: str = typer.Option("homeassistant", "--homeassistant-prefix", help="Home Assistant's discovery prefix."),
    protocol: str = typer.Option("5", "--protocol", help="MQTT version: 5, or 3.1.1 for a broker without MQTT 5 (RabbitMQ before 3.13); with 3.1.1 the broker is not told the largest packet the monitor takes, which then refuses oversize messages after receiving them."),
    share: Optional[str] = typer.Option(None, "--share", help="Join the MQTT 5 shared subscription $share/<GROUP>/... so several monitors split a fleet."),
    ca_file: Optional[Path] = typer.Option(None, "--ca-file", help="CA certificate for mqtts://."),
    cert_file: Optional[Path] = typer.Option(None, "--cert-file", help="Client certificate (mqtts)."),
    key_file: Optional[Path] = typer.Option(None, "--key-file", help="Client key (mqtts)."),
    duration: float = typer.Option(0.0, "--duration", help="Stop after this many seconds (0: until SIGINT or SIGTERM; either prints the summary and exits 0)."),
) -> None:
    """Watch devices: a live table of status, FPS, p50/p99, drops, batch efficiency (several
    sources), temperature, power and open alerts. With a shared subscription (--share) each group member receives a part of the
    fleet's telemetry; status messages are read by every member. Messages over their topic's
    size bound or that do not validate against its schema are dropped (counted, and logged once a
    minute); they are read on a thread of their own, one device at a time in turn."""
    from edge_sdk.cli._stop import stop_signals

    stop = threading.Event()
    # installed first: a SIGINT or SIGTERM from here on stops the monitor with its summary,
    # also when it inherited SIGINT ignored (started as a background job)
    with stop_signals(lambda signum: stop.set()) as stopping:
        from edge_sdk import _imports
        from edge_sdk.errors import ConfigError
        from edge_sdk.telemetry.discovery import Discovery
        from edge_sdk.telemetry.fleet import Fleet, prometheus_collector
        from edge_sdk.telemetry.guard import CallbackGuard
        from edge_sdk.telemetry.intake import Intake
        from edge_sdk.telemetry.broker import BrokerConfig, make_client
        from edge_sdk.telemetry import fastcheck
        from edge_sdk.validate import UntrustedInput, dumps

        address = listen_address(prometheus) if prometheus is not None else None
        mqtt = _imports.mqtt()
        if protocol not in ("5", "3.1.1"):
            raise ConfigError(f"--protocol {protocol!r}: give 5 or 3.1.1")
        cfg = BrokerConfig(url=broker, protocol=protocol, ca_file=str(ca_file) if ca_file else None,
                           cert_file=str(cert_file) if cert_file else None, key_file=str(key_file) if key_file else None)
        discovery: Optional[Discovery] = None
        if homeassistant and share:
            raise ConfigError("--homeassistant cannot be combined with --share: a group member sees only part of each "
                              "device's messages, forgets devices that still run and would remove them from Home "
                              "Assistant; run one monitor with --homeassistant outside the group")
        if homeassistant:
            try:
                discovery = Discovery(lambda name, body: client.publish(name, body, qos=1, retain=True), homeassistant_prefix)
            except ValueError as exc:
                raise ConfigError(f"--homeassistant-prefix: {exc}") from None
        fleet = Fleet(max_devices=max_devices, expire_s=expire, on_forget=discovery.forget if discovery else None)
        who = device or "+"
        topics = [f"edge-sdk/{who}/status", f"edge-sdk/{who}/telemetry", f"edge-sdk/{who}/alerts",
                  f"edge-sdk/{who}/detections", f"edge-sdk/{who}/cmd/response"]
        if share:
            if "/" in share or "+" in share or "#" in share:
                raise ConfigError(f"--share group {share!r} may not contain '/', '+' or '#'")
            # status is retained and small: every member reads all of it; the rest is split
            topics = topics[:1] + [f"$share/{share}/{t}" for t in topics[1:]]
        out_lock = threading.Lock()
        last_warning = [-1e18]

        def refuse(topic: str, why: str) -> None:
            now = time.monotonic()
            with out_lock:
                if now - last_warning[0] < 60.0:
                    return
                last_warning[0] = now
            log.warning("dropped a message on %s: %s (%s)", topic[:200], why, summary(fleet, intake))

        def handle(topic: str, raw: bytes, received_ms: int) -> None:
            """The worker thread: parse, validate, apply, record."""
            try:
                payload = fastcheck.parse(raw, MAX_PAYLOAD)
            except UntrustedInput as exc:
                fleet.refuse()
                refuse(topic, str(exc))
                return
            view, why = fleet.apply(topic, payload, received_ms, raw=raw)
            if view is None:
                refuse(topic, why or "refused")
                return
            if discovery is not None:
                discovery.seen(view.device_id)
            line = dumps({"topic": topic, "received": received_ms, "payload": payload})
            with out_lock:
                if record_file is not None:
                    record_file.write(line + "\n")
                    record_file.flush()
                if as_json:
                    sys.stdout.write(line + "\n")
                    sys.stdout.flush()

        intake = Intake(handle, name="monitor")
        if address is not None:
            prom = _imports.require("prometheus_client")
            prom.REGISTRY.register(prometheus_collector(fleet, intake))
            try:
                prom.start_http_server(address[1], addr=address[0])
            except OSError as exc:
                raise ConfigError(f"--prometheus {prometheus}: cannot listen on {address[0]} port {address[1]}: {exc}") from exc
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            typer.echo(f"Prometheus metrics on http://{host}:{address[1]}/metrics", err=True)
        record_file = open(record, "a", encoding="utf-8") if record else None
        connected = threading.Event()
        refused: list = []

        def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
            if reason.is_failure:
                refused.append(str(reason))
                return
            # QoS 0 on the broker's hop to us: Mosquitto (to 2.1 at least) drops a QoS 1 delivery
            # over our Maximum Packet Size without giving back its inflight slot, so 20 oversized
            # messages would stop every later delivery; QoS 1 buys nothing here (a clean session
            # redelivers nothing after a reconnect) and the devices still publish with QoS 1
            client.subscribe([(t, 0) for t in topics])
            connected.set()

        def on_message(client: Any, userdata: Any, msg: Any) -> None:
            """paho's network thread: a size check and a queue, nothing that parses."""
            why = intake.put(msg.topic, msg.payload)
            if why is not None:
                refuse(msg.topic, why)

        client = make_client(cfg, client_id(), mqtt)
        guard = CallbackGuard("monitor")  # a message that breaks a callback must not end the network thread
        client.on_connect = guard(on_connect)
        client.on_message = guard(on_message)
        intake.start()
        connect = None
        if protocol == "5":
            connect = mqtt.Properties(mqtt.PacketTypes.CONNECT)
            # the broker does not send this client anything larger (it drops it, uncounted here)
            connect.MaximumPacketSize = MAX_PACKET
        client.connect_async(cfg.host, cfg.port, keepalive=cfg.keepalive, properties=connect)
        client.loop_start()
        deadline = time.monotonic() + duration if duration > 0 else None
        forgotten = [0, -1e18]  # devices forgotten when last logged, and when

        def note_forgotten() -> None:
            """A warning when devices were forgotten since the last one (at most once a minute)."""
            c = fleet.counters()
            now = time.monotonic()
            if c["expired"] + c["evicted"] > forgotten[0] and now - forgotten[1] >= 60.0:
                forgotten[:] = [c["expired"] + c["evicted"], now]
                log.warning("forgot devices: %s", summary(fleet, intake))

        def tick() -> bool:
            """The main thread's round: False once --duration is over."""
            if refused:
                raise ConfigError(f"broker {cfg.redacted_url()} refused the monitor: {refused[0]}")
            fleet.expire()
            note_forgotten()
            return deadline is None or time.monotonic() <= deadline

        try:
            if as_json or (prometheus is not None and not sys.stdout.isatty()):
                while not stop.wait(0.2) and tick():
                    pass
            else:
                from rich.live import Live

                with Live(render_table(fleet), refresh_per_second=2, screen=False) as live:
                    while not stop.wait(0.5) and tick():
                        live.update(render_table(fleet))
        finally:
            client.disconnect()
            client.loop_stop()
            # a recording gets every message already taken in before its file closes
            intake.stop(timeout=None if record_file is not None else 10.0)
            if record_file is not None:
                record_file.close()
            note_forgotten()
            how = f"stopped by {stopping.name}; " if stopping.requested else ""
            typer.echo(f"monitor: {how}{summary(fleet, intake)}", err=True)
