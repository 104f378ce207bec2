"""Zone counter: objects per polygon zone and line crossings on a 4K stream in `roi` mode,
published over MQTT.

    python apps/zone_counter/zone_counter.py --bundle bundle \\
        --source "synthetic://faces?width=3840&height=2160" --zones apps/zone_counter/zones.json \\
        --broker mqtt://127.0.0.1:1883 --device cam-1 --every 30

With track ids in the detections (`data["track_id"]`, -1 for a detection without a confirmed
track; `"track_id"` in `edge-sdk detect --jsonl` rows) it counts objects: each track once per
zone, however often it leaves and comes back, and each crossing of a line with its direction.
Every `--every` frames one JSON message goes to `<topic root>/<device>/zones` (QoS 1):

    {"device_id": "cam-1", "ts": 1718000000000, "frame": 59, "frames": 30, "counting": "tracks",
     "zones": {"door": {"now": 3, "new": 2, "total": 41}, ...},
     "lines": {"gate": {"in": 1, "out": 0, "total": {"in": 12, "out": 9}}}, "outside": 7}

`now`: tracks whose box centre lies in the zone (a point on the edge counts) in the last frame;
`new`: tracks seen in the zone for the first time since the previous message; `total`: since the
start. A line counts a track that moves from one side to the other across it (between two
frames, however far it jumped): under the name of the side it came from. Touching the line and
going back is no crossing; crossing back is one crossing the other way. `outside`: the last
frame's tracks in no zone.

Without track ids (tracking off, or an older device) it counts detections per frame, as before
tracks existed, and says so in the log and in the message (`"counting": "detections"`):

    {"device_id": "cam-1", "ts": 1718000000000, "frame": 59, "frames": 30, "counting": "detections",
     "zones": {"door": {"now": 3, "max": 5, "mean": 2.4}, ...}, "outside": 7}

`now` is the last frame's count, `max` and `mean` over the frames since the previous message;
lines are not counted. Zones overlap freely: an object counts in each zone that holds it. Zones
are polygons in frame pixels, lines two points and the names of their sides, in a JSON file:

    {"zones": {"door": [[0, 0], [1919, 0], [1919, 2159], [0, 2159]], "till": [[2400, 900], ...]},
     "lines": {"gate": {"points": [[1920, 0], [1920, 2159]], "from": {"in": [0, 1080], "out": [3839, 1080]}}}}

`from` names the two sides by a point on each: a crossing that starts on the side of the `in`
point counts as `in`.

Frames come from the pipeline (`edge_sdk.Pipeline`), from the rows `edge-sdk detect --jsonl`
wrote (`--jsonl FILE`), or from the detections messages a device's daemon publishes
(`--listen DEVICE_ID`); the broker settings and client are the daemon's (`BrokerConfig`,
`make_client`).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.detections import TRACK_ID
from edge_sdk.errors import ConfigError, EdgeSdkError
from edge_sdk.validate import dumps

log = logging.getLogger("zone_counter")

TOPIC_ROOT = "edge-sdk-apps"
MAX_ZONES = 64
MAX_LINES = 64
MAX_VERTICES = 256
LISTEN_QUEUE = 256  # frames received and not counted yet, with --listen
FORGET_AFTER = 900  # frames a track may be away before it is forgotten (a tracker ends it long before)


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


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"zones file {path} cannot be read as JSON ({exc}); see apps/zone_counter/README.md") from None


def load_zones(path: Path) -> Dict[str, np.ndarray]:
    """The zones of a zones file, checked: ConfigError naming the zone and the fix otherwise."""
    return parse_zones(read_json(path), str(path))


def load_layout(path: Path) -> Tuple[Dict[str, np.ndarray], Dict[str, "Line"]]:
    """The zones and lines of a zones file, checked (a file of lines alone needs no zones)."""
    data = read_json(path)
    lines = parse_lines(data, str(path))
    return parse_zones(data, str(path), required=not lines), lines


def is_point(p: Any) -> bool:
    return (isinstance(p, list) and len(p) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in p))


def parse_zones(data: Any, origin: str, required: bool = True) -> Dict[str, np.ndarray]:
    zones = data.get("zones", None if required else {}) if isinstance(data, dict) else None
    if not isinstance(zones, dict) or (required and not zones) or len(zones) > MAX_ZONES:
        raise ConfigError(f"{origin}: `zones` must map 1 to {MAX_ZONES} names to polygons")
    out: Dict[str, np.ndarray] = {}
    for name, polygon in zones.items():
        check_name(name, "zone", origin)
        if not (isinstance(polygon, list) and 3 <= len(polygon) <= MAX_VERTICES and all(map(is_point, polygon))):
            raise ConfigError(f"{origin}: zone {name!r} must be a list of 3 to {MAX_VERTICES} [x, y] points in frame pixels")
        out[name] = np.asarray(polygon, np.float64)
    return out


def check_name(name: Any, what: str, origin: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 64:
        raise ConfigError(f"{origin}: {what} name {name!r:.40} must be a string of 1 to 64 characters")


class Line:
    """A counting line: the segment `a`-`b` in frame pixels, its two sides named. `names[0]` is
    the name of a crossing that starts on the positive side (:meth:`side`), `names[1]` of one
    that starts on the negative side."""

    def __init__(self, a: Sequence[float], b: Sequence[float], names: Tuple[str, str]) -> None:
        self.a, self.b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        self.names = names

    def side(self, points: np.ndarray) -> np.ndarray:
        """(N,) int: +1 or -1 for the side of the line (extended) each point (N, 2) lies on, 0 on it."""
        d = self.b - self.a
        cross = d[0] * (points[:, 1] - self.a[1]) - d[1] * (points[:, 0] - self.a[0])
        return np.where(np.abs(cross) < 1e-9 * max(1.0, float(d @ d)), 0, np.sign(cross)).astype(np.int64)

    def meets(self, p: np.ndarray, q: np.ndarray) -> bool:
        """Whether the move p -> q (two points on opposite sides of the line) passes through the
        segment a-b itself, not beside its ends."""
        d = q - p
        ends = d[0] * (np.array([self.a[1], self.b[1]]) - p[1]) - d[1] * (np.array([self.a[0], self.b[0]]) - p[0])
        return bool(ends[0] * ends[1] <= 0)


def parse_lines(data: Any, origin: str) -> Dict[str, Line]:
    lines = data.get("lines", {}) if isinstance(data, dict) else {}
    if not isinstance(lines, dict) or len(lines) > MAX_LINES:
        raise ConfigError(f"{origin}: `lines` must map at most {MAX_LINES} names to lines")
    out: Dict[str, Line] = {}
    for name, spec in lines.items():
        check_name(name, "line", origin)
        shape = (f'{origin}: line {name!r} must be {{"points": [[x, y], [x, y]], "from": {{"in": [x, y], "out": [x, y]}}}}: '
                 "two distinct points in frame pixels, and the names of its two sides with a point on each")
        if not (isinstance(spec, dict) and set(spec) == {"points", "from"} and isinstance(spec["points"], list)
                and len(spec["points"]) == 2 and all(map(is_point, spec["points"])) and spec["points"][0] != spec["points"][1]
                and isinstance(spec["from"], dict) and len(spec["from"]) == 2 and all(map(is_point, spec["from"].values()))):
            raise ConfigError(shape)
        (first, p), (second, q) = spec["from"].items()
        for side in (first, second):
            check_name(side, f"line {name!r}: side", origin)
        line = Line(spec["points"][0], spec["points"][1], (first, second))
        sides = line.side(np.array([p, q], np.float64))
        if sides[0] * sides[1] != -1:
            raise ConfigError(f"{origin}: line {name!r}: the points of {first!r} and {second!r} must lie on opposite "
                              "sides of the line, neither on it")
        if sides[0] < 0:
            line.names = (second, first)
        out[name] = line
    return out


def centres_of(xyxy: np.ndarray) -> np.ndarray:
    """(N, 2) box centres of boxes (N, 4) xyxy."""
    xyxy = np.asarray(xyxy, np.float64).reshape(-1, 4)
    return np.stack([(xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2], axis=1)


def zone_hits(zones: Mapping[str, np.ndarray], centres: np.ndarray) -> Dict[str, np.ndarray]:
    """Per zone, which of `centres` it holds ((N,) bool)."""
    return {name: points_in_polygon(centres, polygon) if len(centres) else np.zeros(0, bool)
            for name, polygon in zones.items()}


def outside(hits: Mapping[str, np.ndarray], n: int) -> int:
    anywhere = np.zeros(n, bool)
    for hit in hits.values():
        anywhere |= hit
    return int((~anywhere).sum())


class ZoneCounter:
    """Detections per zone, frame by frame (no track ids); `message()` summarizes the frames
    since the last one."""

    counting = "detections"

    def __init__(self, zones: Mapping[str, np.ndarray]) -> None:
        self.zones = dict(zones)
        self._now: Dict[str, int] = {name: 0 for name in self.zones}
        self._max: Dict[str, int] = dict(self._now)
        self._sum: Dict[str, int] = dict(self._now)
        self._outside = 0
        self.frames = 0

    def count(self, xyxy: np.ndarray, track_ids: Optional[np.ndarray] = None) -> Dict[str, int]:
        """Objects per zone for one frame's boxes (N, 4) xyxy; also accumulated for `message`.
        Track ids are not read."""
        centres = centres_of(xyxy)
        hits = zone_hits(self.zones, centres)
        for name, hit in hits.items():
            n = int(hit.sum())
            self._now[name] = n
            self._max[name] = max(self._max[name], n)
            self._sum[name] += n
        self._outside = outside(hits, len(centres))
        self.frames += 1
        return dict(self._now)

    def message(self, device_id: str, frame: int) -> Dict[str, Any]:
        frames = max(self.frames, 1)
        out = {"device_id": device_id, "ts": int(time.time() * 1000), "frame": int(frame), "frames": self.frames,
               "counting": self.counting,
               "zones": {name: {"now": self._now[name], "max": self._max[name], "mean": round(self._sum[name] / frames, 3)}
                         for name in self.zones},
               "outside": self._outside}
        self._max = {name: 0 for name in self.zones}
        self._sum = dict(self._max)
        self.frames = 0
        return out


class _Track:
    """What the counter remembers of one track: the zones it has been counted in, per line the
    side it was last strictly on and where, and the frame it was last seen in."""

    __slots__ = ("zones", "sides", "seen")

    def __init__(self) -> None:
        self.zones: set = set()
        self.sides: Dict[str, Tuple[int, np.ndarray]] = {}
        self.seen = 0


class TrackCounter:
    """Unique tracks per zone and line crossings with their direction, from each frame's boxes
    and track ids (-1: no confirmed track, not counted); `message()` summarizes the frames since
    the last one. A track unseen for `forget_after` frames is forgotten (bounded memory; a
    tracker ends a lost track, and never reuses its id, long before)."""

    counting = "tracks"

    def __init__(self, zones: Mapping[str, np.ndarray], lines: Mapping[str, Line],
                 forget_after: int = FORGET_AFTER) -> None:
        self.zones, self.lines = dict(zones), dict(lines)
        self.forget_after = forget_after
        self.tracks: Dict[int, _Track] = {}
        self._now: Dict[str, int] = {name: 0 for name in self.zones}
        self._new: Dict[str, int] = dict(self._now)
        self._total: Dict[str, int] = dict(self._now)
        self._crossed = {name: {side: 0 for side in line.names} for name, line in self.lines.items()}
        self._crossed_total = {name: dict(sides) for name, sides in self._crossed.items()}
        self._outside = 0
        self.frames = 0
        self._frame = 0

    def count(self, xyxy: np.ndarray, track_ids: Optional[np.ndarray]) -> Dict[str, int]:
        """Count one frame: boxes (N, 4) xyxy and their track ids (N,); returns the tracks per
        zone in this frame. Without ids (None) nothing in the frame has a track."""
        self._frame += 1
        self.frames += 1
        ids = np.asarray(track_ids if track_ids is not None else np.full(len(xyxy), -1), np.int64).reshape(-1)
        confirmed = ids >= 0
        centres, ids = centres_of(xyxy)[confirmed], ids[confirmed]
        tracks = [self._track(int(i)) for i in ids]
        hits = zone_hits(self.zones, centres)
        for name, hit in hits.items():
            self._now[name] = int(hit.sum())
            for track in (t for t, h in zip(tracks, hit) if h and name not in t.zones):
                track.zones.add(name)
                self._new[name] += 1
                self._total[name] += 1
        self._outside = outside(hits, len(centres))
        for name, line in self.lines.items():
            for track, side, centre in zip(tracks, line.side(centres), centres):
                if side == 0:
                    continue  # on the line: a crossing is decided by the side it leaves to
                last = track.sides.get(name)
                if last is not None and last[0] != side and line.meets(last[1], centre):
                    direction = line.names[0] if last[0] > 0 else line.names[1]
                    self._crossed[name][direction] += 1
                    self._crossed_total[name][direction] += 1
                track.sides[name] = (int(side), centre)
        return dict(self._now)

    def _track(self, track_id: int) -> _Track:
        track = self.tracks.get(track_id)
        if track is None:
            track = self.tracks[track_id] = _Track()
        track.seen = self._frame
        return track

    def message(self, device_id: str, frame: int) -> Dict[str, Any]:
        out = {"device_id": device_id, "ts": int(time.time() * 1000), "frame": int(frame), "frames": self.frames,
               "counting": self.counting,
               "zones": {name: {"now": self._now[name], "new": self._new[name], "total": self._total[name]}
                         for name in self.zones},
               "lines": {name: dict(self._crossed[name], total=dict(self._crossed_total[name])) for name in self.lines},
               "outside": self._outside}
        self._new = {name: 0 for name in self.zones}
        self._crossed = {name: {side: 0 for side in line.names} for name, line in self.lines.items()}
        self.frames = 0
        stale = [i for i, t in self.tracks.items() if self._frame - t.seen > self.forget_after]
        for track_id in stale:
            del self.tracks[track_id]
        return out


class Counter:
    """Counts tracks when the detections carry track ids, detections per frame otherwise (said
    once in the log, and in every message's `counting`). The first frame with detections or
    track ids decides; frames before it are counted by both."""

    def __init__(self, zones: Mapping[str, np.ndarray], lines: Mapping[str, Line],
                 forget_after: int = FORGET_AFTER) -> None:
        self.by_track = TrackCounter(zones, lines, forget_after)
        self.by_frame = ZoneCounter(zones)
        self.chosen: Optional[Any] = None

    @property
    def frames(self) -> int:
        return (self.chosen or self.by_frame).frames

    def count(self, xyxy: np.ndarray, track_ids: Optional[np.ndarray]) -> Dict[str, int]:
        if self.chosen is None and (track_ids is not None or len(xyxy)):
            self.chosen = self.by_track if track_ids is not None else self.by_frame
            if self.chosen is self.by_frame:
                log.warning("the detections carry no track ids (tracking is off, or the device predates it): counting "
                            "detections per frame%s", ", and no line crossings" if self.by_track.lines else "")
        if self.chosen is not None:
            return self.chosen.count(xyxy, track_ids)
        self.by_track.count(xyxy, track_ids)
        return self.by_frame.count(xyxy)

    def message(self, device_id: str, frame: int) -> Dict[str, Any]:
        if self.chosen is None:
            self.by_track.message(device_id, frame)
        return (self.chosen or self.by_frame).message(device_id, frame)


Row = Tuple[int, np.ndarray, Optional[np.ndarray]]  # frame, boxes (N, 4) xyxy, track ids (N,) or None


def parse_row(row: Any, where: str) -> Tuple[str, Row]:
    """(stream, row) of one `edge-sdk detect --jsonl` row or daemon detections message of kind
    frame; ConfigError naming `where` otherwise. Track ids are None unless every detection
    carries one (a device without tracking gives none)."""
    try:
        found = row["detections"]
        xyxy = np.array([d["xyxy"] for d in found], np.float64).reshape(-1, 4)
        ids = [d.get(TRACK_ID) for d in found]
        frame, stream = int(row["frame"]), str(row.get("stream", "0"))  # no stream: a device from before streams
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{where}: not a row of detections ({exc!r:.80})") from None
    has_ids = bool(found) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    return stream, (frame, xyxy, np.array(ids, np.int64) if has_ids else None)


def read_jsonl(path: Path, stream: Optional[str] = None) -> Iterator[Row]:
    """The rows of one stream of an `edge-sdk detect --jsonl` file: `stream`'s, the others
    skipped (None: the file must hold one stream); ConfigError naming the line otherwise."""
    chosen = stream
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--jsonl {path}: {exc.strerror or exc}") from None
    with f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            where = f"--jsonl {path} line {number}"
            try:
                row = json.loads(text)
            except ValueError as exc:
                raise ConfigError(f"{where}: not JSON ({exc})") from None
            row_stream, parsed = parse_row(row, where)
            if chosen is not None and row_stream != chosen:
                continue
            if stream is None:
                stream = row_stream
            elif row_stream != stream:
                raise ConfigError(f"{where}: a row of stream {row_stream!r} after rows of {stream!r}: zones are drawn "
                                  "on one camera's frames; pick its stream with --stream")
            yield parsed


def listen_frames(client: Any, device: str, stream: str, subscribed: Optional[threading.Event] = None) -> Iterator[Row]:
    """The frames of `stream` in the detections messages a device's daemon publishes
    (`edge-sdk/<device>/detections`, kind frame: `[telemetry] detections = "frame"` on the
    device), through `client`: its callbacks are set here, before the caller connects it, so
    that it subscribes on every connect. Messages that are not detections rows are skipped and
    counted (a warning for the first); frames that arrive faster than they are counted wait in
    a bounded queue, and beyond it are dropped and counted."""
    topic = f"edge-sdk/{device}/detections"
    frames: "queue.Queue[Row]" = queue.Queue(maxsize=LISTEN_QUEUE)
    skipped, dropped = [0], [0]

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, properties: Any = None) -> None:
        client.subscribe(topic, qos=0)

    def on_subscribe(client: Any, userdata: Any, mid: Any, reasons: Any, properties: Any = None) -> None:
        if subscribed is not None:
            subscribed.set()

    def on_message(client: Any, userdata: Any, msg: Any) -> None:
        try:
            row = json.loads(msg.payload)
            if not isinstance(row, dict) or row.get("kind") != "frame":
                return  # a summary, or another kind of message
            row_stream, parsed = parse_row(row, f"message on {topic}")
        except (ValueError, ConfigError) as exc:
            skipped[0] += 1
            if skipped[0] == 1:
                log.warning("skipping messages on %s that are not detections rows: %s", topic, exc)
            return
        if row_stream != stream:
            return
        try:
            frames.put_nowait(parsed)
        except queue.Full:
            dropped[0] += 1
            if dropped[0] == 1:
                log.warning("frames arrive faster than they are counted: dropping (counted in the log at the end)")

    def received() -> Iterator[Row]:
        try:
            while True:
                yield frames.get()
        finally:
            if skipped[0] or dropped[0]:
                log.warning("%s: %d messages skipped (not detections rows), %d frames dropped", topic, skipped[0], dropped[0])

    client.on_connect, client.on_subscribe, client.on_message = on_connect, on_subscribe, on_message
    return received()


def pipeline_frames(args: argparse.Namespace) -> Iterator[Row]:
    """(frame, boxes, track ids or None) of each frame of `--source` in roi mode."""
    import edge_sdk

    with edge_sdk.Pipeline(args.source, bundle=args.bundle, backend=args.backend, threads=args.threads, mode="roi",
                           max_frames=args.max_frames, cache={"enabled": False}) as pipeline:
        for result in pipeline:
            yield result.index, result.detections.xyxy, result.detections.data.get(TRACK_ID)


def connect(args: argparse.Namespace) -> Any:
    """A client of `--broker` (TLS and credentials as the daemon's [mqtt]), not connected yet."""
    from edge_sdk.telemetry.broker import BrokerConfig, make_client

    return make_client(BrokerConfig(url=args.broker), f"zone-counter-{args.device}")


def run(args: argparse.Namespace, publish: Optional[Callable[[str, bytes], Any]] = None,
        subscribed: Optional[threading.Event] = None) -> int:
    """Count the frames of `--source` (or `--jsonl`, or `--listen`) and publish the counts with
    `publish` (default: QoS 1 on `--broker`). `subscribed` is set once `--listen` subscribed."""
    zones, lines = load_layout(args.zones)
    client = connect(args) if publish is None or args.listen else None
    if args.listen:
        frames = listen_frames(client, args.listen, args.stream or "0", subscribed)
    elif args.jsonl is not None:
        frames = read_jsonl(args.jsonl, args.stream)
    else:
        frames = pipeline_frames(args)
    if client is not None:
        from edge_sdk.telemetry.broker import BrokerConfig

        broker = BrokerConfig(url=args.broker)
        client.connect(broker.host, broker.port)
        client.loop_start()
    if publish is None:
        def publish(topic: str, payload: bytes) -> Any:
            return client.publish(topic, payload, qos=1)

    topic = f"{args.topic_root}/{args.device}/zones"
    counter = Counter(zones, lines, args.forget_after)
    last = None
    counted = 0
    sent: List[Any] = []
    try:
        for index, xyxy, track_ids in frames:
            counter.count(xyxy, track_ids)
            last, counted = index, counted + 1
            if counter.frames >= args.every:
                sent.append(publish(topic, dumps(counter.message(args.device, last)).encode()))
            if args.max_frames and counted >= args.max_frames:
                break
        if counter.frames and last is not None:
            sent.append(publish(topic, dumps(counter.message(args.device, last)).encode()))
    finally:
        frames.close()
        if client is not None:
            for info in sent:
                if info is not None and hasattr(info, "wait_for_publish"):
                    info.wait_for_publish(5)
            client.loop_stop()
            client.disconnect()
    return 0


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Count tracks per polygon zone and line crossings (or, without track ids, "
                                            "detections per zone and frame) in roi mode and publish them over MQTT.")
    p.add_argument("--bundle", type=Path, default=Path("bundle"), help="bundle folder (edge-sdk build)")
    p.add_argument("--source", default="synthetic://faces?width=3840&height=2160", help="source URI")
    p.add_argument("--jsonl", type=Path, default=None,
                   help="count the rows of this `edge-sdk detect --jsonl` file instead of running --source")
    p.add_argument("--listen", metavar="DEVICE_ID", default=None,
                   help="count the detections messages this device's daemon publishes on --broker instead of running --source")
    p.add_argument("--stream", default=None,
                   help="the stream to count: with --jsonl, default the file's only one; with --listen, default 0")
    p.add_argument("--zones", type=Path, required=True, help="zones (and lines) JSON file (see the README)")
    p.add_argument("--broker", default="mqtt://127.0.0.1:1883", help="mqtt://host:1883 or mqtts://host:8883")
    p.add_argument("--device", default="cam-1", help="device id in the topic")
    p.add_argument("--topic-root", default=TOPIC_ROOT, help="topic root (not edge-sdk/: those topics are the daemon's)")
    p.add_argument("--every", type=int, default=30, help="frames per message")
    p.add_argument("--backend", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--max-frames", type=int, default=0, help="stop after this many frames (0: until the source ends)")
    p.add_argument("--forget-after", type=int, default=FORGET_AFTER,
                   help="frames a track may be away before it is forgotten (counted again if its id came back)")
    args = p.parse_args(argv)
    if args.every < 1:
        p.error("--every must be >= 1")
    if args.forget_after < 1:
        p.error("--forget-after must be >= 1")
    if args.listen is not None and args.jsonl is not None:
        p.error("--listen and --jsonl are two inputs: give one")
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
