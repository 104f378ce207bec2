"""A fleet you can simulate: N devices through a real Mosquitto to `edge-sdk monitor`.

Each simulated device publishes what a daemon does, schema-valid: a retained status when it
starts, then telemetry every --interval seconds (the daemon's default: 5 s) with its own seq,
fps and latencies. The monitor runs as its own process (`edge-sdk monitor --json --prometheus`)
on a Mosquitto started here on a free port; every message it handled comes out on its stdout,
read here and stamped on arrival: end-to-end lag is that stamp minus the message's `ts`
(publisher, broker, the monitor's intake, parse, validation). Prints one table:

    N   offered msg/s   handled msg/s   lag p50 ms   lag p99 ms   monitor RSS MiB   refused

    python bench/bench_fleet.py                      # N = 100, 1000, 5000 for 20 s each
    python bench/bench_fleet.py --devices 1000 --seconds 10 --interval 0.5
    python bench/bench_fleet.py --quick              # a few seconds: what the tests run
    python bench/bench_fleet.py --validate           # per-message cost: parse + validate, one core

`--validate` measures the monitor's per-message work on one core without a broker: parsing
(`loads_untrusted`) and validating a daemon's telemetry message with jsonschema and with the
compiled check (`schemas.compiled`), and the whole of `Fleet.apply`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge_sdk.telemetry import schemas  # noqa: E402

MONITOR = "import sys; from edge_sdk.cli import main; sys.argv[0] = 'edge-sdk'; main()"
TS = re.compile(rb'"payload":\{[^{]*?"ts":(\d+)')


def percentiles(ms: float) -> Dict[str, Any]:
    return {"p50": round(ms, 3), "p95": round(ms * 1.4, 3), "p99": round(ms * 1.9, 3), "mean": round(ms * 1.1, 3),
            "max": round(ms * 3, 3), "count": 150}


def telemetry(device: str, seq: int, interval: float) -> Dict[str, Any]:
    """A daemon's telemetry message, as `Reporter` sends it on a Jetson (about 1.7 KB)."""
    frames = int(seq * interval * 30)
    stages = (("capture_wait", 1.2), ("preprocess", 2.1), ("infer", 12.5), ("decode", 1.1), ("merge", 0.2),
              ("total", 17.3))
    return {"schema": "edge-sdk/telemetry/1", "device_id": device, "ts": schemas.now_ms(), "seq": seq,
            "uptime_s": round(seq * interval, 1), "window_s": 10, "fps": 29.9, "target_fps": 30,
            "latency_ms": {name: percentiles(ms) for name, ms in stages},
            "frames": {"captured": frames, "processed": frames - seq, "dropped": seq, "cached": 0,
                       "source_errors": 0, "reconnects": 0},
            "interval": {"seconds": interval, "captured": 150, "processed": 149, "dropped": 1, "cached": 0,
                         "drop_ratio": 0.0067, "detections": 420},
            "system": {"cpu_percent": 41.0, "load_1m": 1.2, "memory_percent": 33.0, "memory_used_mb": 2400.0,
                       "process_rss_mb": 310.0, "gpu_percent": 61.0,
                       "temperature_c": {"CPU": 51.0, "GPU": 49.5, "AUX": 48.0}, "temperature_max_c": 51.0,
                       "power_mw": {"VDD_IN": 9100, "VDD_CPU_GPU_CV": 4100, "VDD_SOC": 1500},
                       "nvpmodel": "MODE_15W_6CORE", "jetson_clocks": False},
            "publisher": {"connected": True, "queued": 0, "queued_bytes": 0, "overflow": 0, "telemetry_dropped": 0,
                          "detections_dropped": 0, "reconnects": 0}}


def status(device: str) -> Dict[str, Any]:
    now = schemas.now_ms()
    return {"schema": "edge-sdk/status/1", "device_id": device, "ts": now, "seq": 0, "state": "online",
            "status_ts": now, "instance_id": f"{device}-run", "started_ts": now}


def per_message(count: int) -> List[str]:
    """The monitor's work per message on one core, in microseconds."""
    from edge_sdk.telemetry.fleet import Fleet
    from edge_sdk.validate import loads_untrusted

    message = telemetry("cam-0001", 1, 5.0)
    raw = json.dumps(message).encode()
    sid = "edge-sdk/telemetry/1"
    jsonschema_v, compiled = schemas.validator(sid), schemas.compiled(sid)
    assert compiled(message) is None and next(jsonschema_v.iter_errors(message), None) is None

    def cost(fn: Any, n: int) -> float:
        start = time.process_time()
        for _ in range(n):
            fn()
        return (time.process_time() - start) / n * 1e6

    from edge_sdk.telemetry import fastcheck

    topics = [f"edge-sdk/cam-{i:05d}/telemetry" for i in range(count)]
    raws = [json.dumps(dict(message, device_id=f"cam-{i:05d}")).encode() for i in range(count)]

    def worker(fast: bool) -> float:
        """What the monitor's worker does per message: parse, then Fleet.apply (validation included)."""
        fleet = Fleet(max_devices=count + 1)
        start = time.process_time()
        for topic, r in zip(topics, raws):
            if fast:
                fleet.apply(topic, fastcheck.parse(r, 1 << 20), raw=r)
            else:
                fleet.apply(topic, loads_untrusted(r, 1 << 20))
        assert fleet.accepted == count and fleet.invalid == 0
        return (time.process_time() - start) / count * 1e6

    rows = [("parse: loads_untrusted", cost(lambda: loads_untrusted(raw, 1 << 20), count)),
            ("parse: fastcheck.parse (msgspec)", cost(lambda: fastcheck.parse(raw, 1 << 20), count)),
            ("validate: jsonschema", cost(lambda: next(jsonschema_v.iter_errors(message), None), max(200, count // 20))),
            ("validate: compiled (fastjsonschema)", cost(lambda: compiled(message), count)),
            ("validate: fastcheck.valid (msgspec types)", cost(lambda: fastcheck.valid(raw, "telemetry"), count)),
            ("worker: loads_untrusted + compiled + apply", worker(False)),
            ("worker: fastcheck parse + valid + apply", worker(True))]
    out = [f"telemetry message of {len(raw)} bytes; CPU time per message on one core (Python "
           f"{sys.version_info[0]}.{sys.version_info[1]}, {count} messages)"]
    out += [f"  {name:<44} {us:8.1f} us   {1e6 / us:9,.0f} /s" for name, us in rows]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(folder: Path) -> Any:
    binary = shutil.which("mosquitto") or next((p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")
                                                if os.path.exists(p)), None)
    if binary is None:
        sys.exit("mosquitto is not installed (apt-get install -y mosquitto)")
    port = free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                    "max_queued_messages 100000\nmax_inflight_messages 0\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("mosquitto did not start")


class Reader(threading.Thread):
    """The monitor's stdout: every handled message, stamped on arrival."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lags: List[float] = []
        self.lines = 0

    def run(self) -> None:
        for line in self.stream:
            now = time.time() * 1000
            self.lines += 1
            m = TS.search(line)
            if m and b'/telemetry"' in line[:300]:
                self.lags.append(now - int(m.group(1)))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def run_fleet(devices: int, seconds: float, interval: float, publishers: int) -> Dict[str, Any]:
    import paho.mqtt.client as mqtt

    folder = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    broker, port = start_broker(folder)
    monitor = subprocess.Popen(
        [sys.executable, "-c", MONITOR, "monitor", "--broker", f"mqtt://127.0.0.1:{port}", "--json",
         "--prometheus", f"127.0.0.1:{free_port()}", "--max-devices", str(max(devices, 1) + 10)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(ROOT),
        env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    reader = Reader(monitor.stdout)
    reader.start()
    clients = []
    try:
        for i in range(publishers):
            c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-fleet-{i}", protocol=mqtt.MQTTv311)
            c.max_queued_messages_set(0)
            c.max_inflight_messages_set(1000)
            c.connect("127.0.0.1", port)
            c.loop_start()
            clients.append(c)
        names = [f"sim-{i:05d}" for i in range(devices)]
        # every device comes online first (retained status); telemetry starts once the monitor has them all
        for i, name in enumerate(names):
            clients[i % publishers].publish(schemas.topic(name, "status"), json.dumps(status(name)), qos=1, retain=True)
        deadline = time.monotonic() + 60
        while reader.lines < devices and time.monotonic() < deadline:
            time.sleep(0.05)
        start = time.monotonic()
        sent, seq = 0, 0
        while time.monotonic() - start < seconds:
            seq += 1
            round_start = time.monotonic()
            for i, name in enumerate(names):  # a round: every device once, spread over the interval
                clients[i % publishers].publish(schemas.topic(name, "telemetry"),
                                                json.dumps(telemetry(name, seq, interval)), qos=1)
                sent += 1
                due = round_start + interval * (i + 1) / devices
                if due - time.monotonic() > 0.002:
                    time.sleep(due - time.monotonic())
        elapsed = time.monotonic() - start
        handled_at_end = reader.lines
        drain = time.monotonic() + 30
        while reader.lines < sent + devices and time.monotonic() < drain:
            time.sleep(0.1)
        rss = rss_mib(monitor.pid)
    finally:
        err = b""
        try:
            for c in clients:
                c.disconnect()
                c.loop_stop()
            monitor.send_signal(signal.SIGTERM)  # the monitor prints its counters at exit
            try:
                _, err = monitor.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                monitor.kill()
                _, err = monitor.communicate(timeout=10)
                err += b"\nthe monitor did not exit within 60 s of its SIGTERM (killed)"
        finally:  # whatever went wrong above, the broker does not outlive the bench
            broker.terminate()
            try:
                broker.wait(10)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait(10)
            shutil.rmtree(folder, ignore_errors=True)
    lags = sorted(reader.lags)
    refused = re.search(rb"^monitor: (?:stopped by \w+; )?(.*)$", err, re.M)
    return {"devices": devices, "offered": sent / elapsed, "handled": len(lags) / max(elapsed, 1e-9),
            "handled_in_run": handled_at_end, "sent": sent, "received": len(lags),
            "p50": statistics.median(lags) if lags else float("nan"),
            "p99": lags[int(0.99 * (len(lags) - 1))] if lags else float("nan"), "rss": rss,
            "summary": refused.group(1).decode() if refused else err.decode()[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, nargs="*", default=[100, 1000, 5000])
    ap.add_argument("--seconds", type=float, default=20.0, help="publishing time per fleet size")
    ap.add_argument("--interval", type=float, default=5.0, help="telemetry interval of each device (s)")
    ap.add_argument("--publishers", type=int, default=4, help="MQTT connections the devices share")
    ap.add_argument("--quick", action="store_true", help="20 devices at 0.2 s for 3 s")
    ap.add_argument("--validate", action="store_true", help="per-message parse and validation cost only")
    ap.add_argument("--count", type=int, default=5000, help="messages for --validate")
    args = ap.parse_args()
    if args.validate:
        print("\n".join(per_message(args.count)))
        return
    if args.quick:
        args.devices, args.seconds, args.interval, args.publishers = [20], 3.0, 0.2, 2
    print(f"telemetry every {args.interval:g} s per device, {args.seconds:g} s per size, {args.publishers} "
          f"publishing connections, one monitor process")
    print(f"{'N':>6} {'offered msg/s':>14} {'handled msg/s':>14} {'lag p50 ms':>11} {'lag p99 ms':>11} "
          f"{'monitor RSS MiB':>16} {'received/sent':>14}")
    for n in args.devices:
        r = run_fleet(n, args.seconds, args.interval, args.publishers)
        print(f"{n:>6} {r['offered']:>14.0f} {r['handled']:>14.0f} {r['p50']:>11.1f} {r['p99']:>11.1f} "
              f"{r['rss']:>16.1f} {r['received']:>7}/{r['sent']:<6}", flush=True)
        print(f"       monitor: {r['summary']}", flush=True)


if __name__ == "__main__":
    main()
