"""What a shadow run costs the live stream: the daemon's live fps without a shadow, then with the
same bundle in its shadow on every k-th frame, then again after `abort`.

    python bench/bench_shadow.py                       # the default CenterFace bundle, k = 5, 4 s a phase
    python bench/bench_shadow.py --every 1,5 --seconds 3 --bundle DIR

One daemon (ONNX Runtime on the CPU, --threads threads per model, telemetry as JSON lines to
nowhere) reads an unpaced synthetic 640x480 scene of faces; commands go through its command
inbox, as MQTT would deliver them. Per phase: live frames per second over the phase, the
shadow's frames compared and skipped. The shadow runs on its own thread: on a machine whose
cores the live model already fills, its share is taken from the live stream, which is what the
ratio shows; the machine's load average is printed with the table.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict

URI = "synthetic://faces?width=640&height=480&count=4&min_size=30&max_size=120&seed=1"


def phase(daemon: Any, seconds: float) -> float:
    """Live frames per second over `seconds` (the frame loop's own counter)."""
    start_frames, t0 = daemon.frames, time.perf_counter()
    threading.Event().wait(seconds)
    return (daemon.frames - start_frames) / (time.perf_counter() - t0)


def send(daemon: Any, cid: str, cmd: str, args: Dict[str, Any]) -> None:
    daemon._on_command(json.dumps({"schema": "edge-sdk/cmd/1", "id": cid, "cmd": cmd, "args": args}).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path)
    parser.add_argument("--every", default="5", help="k values, comma-separated")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from edge_sdk.daemon import Daemon, daemon_config_from_dict

    if args.bundle is None:
        from edge_sdk.default_bundle import ensure_default_bundle

        args.bundle = ensure_default_bundle("fp32")
    print(f"load average {os.getloadavg()[0]:.2f}, bundle {args.bundle}")
    print("k  | live fps before | with shadow | after abort | overhead | compared | skipped")
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        shutil.copytree(args.bundle, models / "live")
        shutil.copytree(args.bundle, models / "candidate")
        for k in [int(x) for x in args.every.split(",")]:
            config = daemon_config_from_dict({
                "bundle": str(models / "live"), "backend": "onnxruntime-cpu", "threads": args.threads,
                "source": {"uri": URI}, "cache": {"enabled": False},
                "device": {"id": "bench", "models_dir": str(models)},
                "telemetry": {"interval_s": 1.0, "system": False},
                "shadow": {"every_n_frames": k, "watch_s": 0}})
            daemon = Daemon(config, stream=io.StringIO())
            runner = threading.Thread(target=daemon.run, daemon=True)
            runner.start()
            while daemon.frames < 20:
                threading.Event().wait(0.05)
            before = phase(daemon, args.seconds)
            send(daemon, f"s{k}", "reload", {"bundle": "candidate", "shadow": True})
            while daemon.shadow.run is None:
                threading.Event().wait(0.05)
            run = daemon.shadow.run
            during = phase(daemon, args.seconds)
            compared, skipped = run.compared, run.skipped
            send(daemon, f"a{k}", "abort", {})
            while daemon.shadow.run is not None:
                threading.Event().wait(0.05)
            after = phase(daemon, args.seconds)
            daemon.request_stop("bench")
            runner.join(30)
            base = (before + after) / 2
            print(f"{k:<2} | {before:15.1f} | {during:11.1f} | {after:11.1f} | {100 * (1 - during / base):7.1f}% "
                  f"| {compared:8d} | {skipped:7d}")


if __name__ == "__main__":
    main()
