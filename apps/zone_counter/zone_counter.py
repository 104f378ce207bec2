"""Zone counter: detections per polygon zone on a 4K stream in `roi` mode, published over MQTT.

    python apps/zone_counter/zone_counter.py --bundle bundle \\
        --source "synthetic://faces?width=3840&height=2160" --zones apps/zone_counter/zones.json \\
        --broker mqtt://127.0.0.1:1883 --device cam-1 --every 30

Every `--every` frames one JSON message goes to `<topic root>/<device>/zones` (QoS 1):

    {"device_id": "cam-1", "ts": 1718000000000, "frame": 59, "frames": 30,
     "zones": {"door": {"now": 3, "max": 5, "mean": 2.4}, ...}, "outside": 7}

`now` counts the objects of the last frame whose box centre lies inside the zone (a point on
the edge counts), `max` and `mean` are over the frames since the previous message; `outside`
counts the last frame's objects in no zone. Zones overlap freely: an object counts in each zone
that holds it. Zones are polygons in frame pixels in a JSON file:

    {"zones": {"door": [[0, 0], [1919, 0], [1919, 2159], [0, 2159]], "till": [[2400, 900], ...]}}

Built on the public runtime API only: `config_from_dict` and `Pipeline` (edge_sdk.runtime), the
broker settings and client of the daemon (`BrokerConfig`, `make_client`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from edge_sdk.errors import ConfigError, EdgeSdkError
from edge_sdk.validate import dumps

TOPIC_ROOT = "edge-sdk-apps"
MAX_ZONES = 64
MAX_VERTICES = 256


def points_in_polygon(points: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """(N,) bool: which of `points` (N, 2) lie inside or on the edge of `polygon` (M, 2), by
    ray casting (even-odd rule), vectorized over the points."""
    x, y = points[:, 0:1], points[:, 1:2]
    x0, y0 = polygon[:, 0], polygon[:, 1]
    x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
    crosses = (y0 > y) != (y1 > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        at_x = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
    inside = np.logical_xor.reduce(crosses & (x < at_x), axis=1)
    # on an edge: collinear with it and within its bounding box
    cross = (x1 - x0) * (y - y0) - (y1 - y0) * (x - x0)
    within = (np.minimum(x0, x1) <= x) & (x <= np.maximum(x0, x1)) & (np.minimum(y0, y1) <= y) & (y <= np.maximum(y0, y1))
    on_edge = np.any((np.abs(cross) < 1e-6) & within, axis=1)
    return inside | on_edge


def load_zones(path: Path) -> Dict[str, np.ndarray]:
    """The zones file, checked: ConfigError naming the zone and the fix otherwise."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"zones file {path} cannot be read as JSON ({exc}); see apps/zone_counter/README.md") from None
    return parse_zones(data, str(path))


def parse_zones(data: Any, origin: str) -> Dict[str, np.ndarray]:
    zones = data.get("zones") if isinstance(data, dict) else None
    if not isinstance(zones, dict) or not zones or len(zones) > MAX_ZONES:
        raise ConfigError(f"{origin}: `zones` must map 1 to {MAX_ZONES} names to polygons")
    out: Dict[str, np.ndarray] = {}
    for name, polygon in zones.items():
        if not isinstance(name, str) or not name or len(name) > 64:
            raise ConfigError(f"{origin}: zone name {name!r:.40} must be a string of 1 to 64 characters")
        ok = (isinstance(polygon, list) and 3 <= len(polygon) <= MAX_VERTICES
              and all(isinstance(p, list) and len(p) == 2 and all(
                  isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in p) for p in polygon))
        if not ok:
            raise ConfigError(f"{origin}: zone {name!r} must be a list of 3 to {MAX_VERTICES} [x, y] points in frame pixels")
        out[name] = np.asarray(polygon, np.float64)
    return out


class ZoneCounter:
    """Counts per zone, frame by frame; `message()` summarizes the frames since the last one."""

    def __init__(self, zones: Mapping[str, np.ndarray]) -> None:
        self.zones = dict(zones)
        self._now: Dict[str, int] = {name: 0 for name in self.zones}
        self._max: Dict[str, int] = dict(self._now)
        self._sum: Dict[str, int] = dict(self._now)
        self._outside = 0
        self.frames = 0

    def count(self, xyxy: np.ndarray) -> Dict[str, int]:
        """Objects per zone for one frame's boxes (N, 4) xyxy; also accumulated for `message`."""
        centres = np.stack([(xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2], axis=1) \
            if len(xyxy) else np.zeros((0, 2))
        anywhere = np.zeros(len(centres), bool)
        for name, polygon in self.zones.items():
            hit = points_in_polygon(centres, polygon) if len(centres) else np.zeros(0, bool)
            anywhere |= hit
            n = int(hit.sum())
            self._now[name] = n
            self._max[name] = max(self._max[name], n)
            self._sum[name] += n
        self._outside = int((~anywhere).sum())
        self.frames += 1
        return dict(self._now)

    def message(self, device_id: str, frame: int) -> Dict[str, Any]:
        frames = max(self.frames, 1)
        out = {"device_id": device_id, "ts": int(time.time() * 1000), "frame": int(frame), "frames": self.frames,
               "zones": {name: {"now": self._now[name], "max": self._max[name], "mean": round(self._sum[name] / frames, 3)}
                         for name in self.zones},
               "outside": self._outside}
        self._max = {name: 0 for name in self.zones}
        self._sum = dict(self._max)
        self.frames = 0
        return out


def run(args: argparse.Namespace, publish: Optional[Callable[[str, bytes], Any]] = None) -> int:
    from edge_sdk.runtime.config import config_from_dict
    from edge_sdk.runtime.pipeline import Pipeline

    zones = load_zones(args.zones)
    config = config_from_dict({
        "bundle": str(args.bundle), "backend": args.backend, "threads": args.threads, "mode": "roi",
        "max_frames": args.max_frames, "source": {"uri": args.source}, "cache": {"enabled": False},
    }, "zone counter")
    client = None
    if publish is None:
        from edge_sdk.telemetry.broker import BrokerConfig, make_client

        broker = BrokerConfig(url=args.broker)
        client = make_client(broker, f"zone-counter-{args.device}")
        client.connect(broker.host, broker.port)
        client.loop_start()

        def publish(topic: str, payload: bytes) -> Any:
            return client.publish(topic, payload, qos=1)

    topic = f"{args.topic_root}/{args.device}/zones"
    counter = ZoneCounter(zones)
    last = None
    sent = []
    try:
        with Pipeline(config) as pipeline:
            for result in pipeline:
                counter.count(result.detections.xyxy)
                last = result.index
                if counter.frames >= args.every:
                    sent.append(publish(topic, dumps(counter.message(args.device, last)).encode()))
            if counter.frames and last is not None:
                sent.append(publish(topic, dumps(counter.message(args.device, last)).encode()))
    finally:
        if client is not None:
            for info in sent:
                if info is not None and hasattr(info, "wait_for_publish"):
                    info.wait_for_publish(5)
            client.loop_stop()
            client.disconnect()
    return 0


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Count detections per polygon zone (roi mode) and publish them over MQTT.")
    p.add_argument("--bundle", type=Path, required=True, help="bundle folder (edge-sdk build)")
    p.add_argument("--source", default="synthetic://faces?width=3840&height=2160", help="source URI")
    p.add_argument("--zones", type=Path, required=True, help="zones JSON file (see the README)")
    p.add_argument("--broker", default="mqtt://127.0.0.1:1883", help="mqtt://host:1883 or mqtts://host:8883")
    p.add_argument("--device", default="cam-1", help="device id in the topic")
    p.add_argument("--topic-root", default=TOPIC_ROOT, help="topic root (not edge-sdk/: those topics are the daemon's)")
    p.add_argument("--every", type=int, default=30, help="frames per message")
    p.add_argument("--backend", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--max-frames", type=int, default=0, help="stop after this many frames (0: until the source ends)")
    args = p.parse_args(argv)
    if args.every < 1:
        p.error("--every must be >= 1")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except EdgeSdkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
