"""Frame-loop cost of telemetry, side by side in one run.

Runs the same frame loop (synthetic frames -> Preprocessor -> ONNX Runtime -> CenterFace
decoder, on a tiny CenterFace-shaped model or on --bundle DIR) in three configurations, interleaved
in rounds so that machine noise hits all of them alike:

  off      no telemetry at all
  broker   telemetry every --interval s to a live Mosquitto (started here on a free port)
  down     the same, with the broker stopped: everything goes to the on-disk queue

and prints the median FPS of each, their ratio to `off`, and the CPU time the telemetry
threads used per second of run (reporter + publisher + paho network thread).

    python bench/bench_telemetry.py --seconds 5 --rounds 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

def build_model(folder: Path) -> Path:
    """A CenterFace-shaped model at 96x160 (heatmap/scale/offset/landmarks at stride 4)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edge_sdk.fsutil import sha256_file
    from edge_sdk.preprocess import InputSpec

    h, w = 96, 160
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["maps"]),
        helper.make_node("Split", ["maps"], ["logits", "scale", "offset", "landmarks"], axis=1, split=[1, 2, 2, 10]),
        helper.make_node("Sigmoid", ["logits"], ["heatmap"]),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.05, (16, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.zeros(16, np.float32), "b1"),
        numpy_helper.from_array(rng.normal(0, 0.05, (32, 16, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.zeros(32, np.float32), "b2"),
        numpy_helper.from_array(rng.normal(0, 0.05, (15, 32, 1, 1)).astype(np.float32), "w3"),
        numpy_helper.from_array(np.full(15, -2.0, np.float32), "b3"),
    ]
    outs = [("heatmap", 1), ("scale", 2), ("offset", 2), ("landmarks", 10)]
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, h // 4, w // 4]) for n, c in outs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    import json

    digest = sha256_file(folder / "model.onnx")
    (folder / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "model": {"name": "bench", "source_sha256": digest},
        "target": {"name": "cpu"}, "inputs": [InputSpec(name="input", shape=[1, 3, h, w]).to_dict()],
        "outputs": [{"name": n, "shape": [1, c, h // 4, w // 4], "dtype": "float32"} for n, c in outs],
        "decoder": {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3}, "precision": "fp32",
        "files": {"model.onnx": digest}}))
    return folder


class Broker:
    def __init__(self, workdir: Path) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.conf = workdir / "mosquitto.conf"
        self.conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                             + ("user root\n" if os.geteuid() == 0 else ""))
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        import socket

        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        self.proc = subprocess.Popen([binary, "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close()
                return
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("mosquitto did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None


def run_loop(model: Any, seconds: float, telemetry: Optional[Dict[str, Any]]) -> Dict[str, float]:
    from edge_sdk.decoders import make_decoder
    from edge_sdk.preprocess import Preprocessor
    from edge_sdk.runtime.synthetic import SyntheticFaces
    from edge_sdk.runtime.types import FrameResult, PipelineStats

    source = SyntheticFaces(width=640, height=360, fps=30, count=6, seed=0, min_size=16, max_size=48)
    pre = Preprocessor(model.input_spec)
    decoder = make_decoder(model.decoder_spec, model.input_spec)
    stats = PipelineStats()
    reporter = None
    if telemetry is not None:
        from edge_sdk.telemetry.health import HealthConfig, HealthMonitor
        from edge_sdk.telemetry.broker import BrokerConfig
        from edge_sdk.telemetry.publisher import MqttPublisher
        from edge_sdk.telemetry.reporter import Reporter
        from edge_sdk.telemetry.system import SystemStats

        pub = MqttPublisher(BrokerConfig(url=telemetry["url"], reconnect_min_s=0.5, reconnect_max_s=1.0),
                            "bench", telemetry["queue"])
        pub.set_status({"started_ts": 0})
        pub.start()
        reporter = Reporter(pub, HealthMonitor(HealthConfig().rules()), lambda: stats, interval_s=telemetry["interval"],
                            model=lambda: {"bundle_hash": "bench"}, system=SystemStats(use_jtop=False)).start()
    feed_name = model.input_spec.name
    n = 0
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    end = t0 + seconds
    i = 0
    while True:
        f0 = time.perf_counter()
        frame, _ = source.read()
        tensor, transform = pre(frame)
        f1 = time.perf_counter()
        outputs = model.backend.infer({feed_name: tensor})
        f2 = time.perf_counter()
        dets = decoder(outputs, [transform])[0]
        f3 = time.perf_counter()
        stats.frames_captured += 1
        stats.frames_processed += 1
        if reporter is not None:
            reporter.observe(FrameResult(i, time.time(), dets, {"preprocess": (f1 - f0) * 1e3, "infer": (f2 - f1) * 1e3,
                                                               "decode": (f3 - f2) * 1e3, "total": (f3 - f0) * 1e3}))
        i += 1
        n += 1
        if f3 >= end:
            break
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    out = {"fps": n / wall, "cpu_s": cpu, "wall_s": wall, "reports": 0.0, "report_cpu_ms": 0.0, "queued": 0.0}
    if reporter is not None:
        out["reports"] = float(reporter.reports)
        out["report_cpu_ms"] = reporter.busy_s * 1e3
        reporter.stop(final_report=False)
        out["queued"] = float(pub.stats()["queued"])
        pub.stop(timeout=1.0)
    return out


def observe_cost_us() -> float:
    """What the frame loop pays per frame for telemetry: one RollingMetrics.observe()."""
    from edge_sdk.detections import Detections
    from edge_sdk.runtime.types import FrameResult
    from edge_sdk.telemetry.metrics import RollingMetrics

    m = RollingMetrics()
    r = FrameResult(0, 0.0, Detections.empty(), {"capture_wait": 0.1, "preprocess": 1.0, "infer": 2.0, "decode": 0.3,
                                                 "merge": 0.0, "total": 3.5})
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20000):
            m.observe(r)
        runs.append((time.perf_counter() - t0) / 20000 * 1e6)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="per configuration and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0, help="telemetry interval (s)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    ap.add_argument("--bundle", type=Path, default=None, help="a bundle from `edge-sdk build` (default: a tiny model)")
    args = ap.parse_args()

    from edge_sdk.runtime.model import load_model

    work = Path(tempfile.mkdtemp(prefix="bench-telemetry-"))
    broker: Optional[Broker] = None
    try:
        bundle = args.bundle or build_model(work / "bundle")
        model = load_model(bundle, backend="onnxruntime-cpu", precision="fp32", threads=args.threads)
        broker = Broker(work)
        broker.start()
        results: Dict[str, List[Dict[str, float]]] = {"off": [], "broker": [], "down": []}
        run_loop(model, 1.0, None)  # warm-up
        for r in range(args.rounds):
            for name in ("off", "broker", "down"):
                if name == "down":
                    broker.stop()
                tel = None if name == "off" else {"url": f"mqtt://127.0.0.1:{broker.port}", "interval": args.interval,
                                                   "queue": work / f"q-{name}-{r}.sqlite3"}
                results[name].append(run_loop(model, args.seconds, tel))
                if name == "down":
                    broker.start()
        broker.stop()
        base = statistics.median(x["fps"] for x in results["off"])
        spec = model.input_spec
        what = f"bundle {args.bundle}" if args.bundle else "CenterFace-shaped tiny model"
        print(f"frame loop: synthetic 640x360 -> {spec.width}x{spec.height} {what}, ORT CPU threads={args.threads}, "
              f"{args.rounds} rounds x {args.seconds:g} s, telemetry every {args.interval:g} s")
        print(f"{'config':<8} {'median FPS':>11} {'vs off':>8} {'process CPU %':>14} {'reports':>8} {'report CPU ms/report':>21} {'left on disk':>13}")
        for name, runs in results.items():
            fps = statistics.median(x["fps"] for x in runs)
            cpu = statistics.median(100 * x["cpu_s"] / x["wall_s"] for x in runs)
            reports = statistics.median(x["reports"] for x in runs)
            per = statistics.median((x["report_cpu_ms"] / x["reports"]) if x["reports"] else 0.0 for x in runs)
            queued = statistics.median(x["queued"] for x in runs)
            print(f"{name:<8} {fps:>11.1f} {fps / base:>8.3f} {cpu:>14.1f} {reports:>8.0f} {per:>21.2f} {queued:>13.0f}")
        model.close()
        print(f"observe() per frame: {observe_cost_us():.2f} us (median of 5 x 20000 calls)")
    finally:
        if broker is not None:  # whatever failed above, the broker does not outlive the bench
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
