"""apps/zone_counter: point-in-polygon against hand-checked points, counts against boxes counted
by plain comparisons, and the app end to end on synthetic 4K video in roi mode with a real
Mosquitto broker (its published counts against an independent run of the same pipeline)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.errors import ConfigError

from app_loader import APPS, load_app
from tiny_bundle import make_tiny_bundle

zc = load_app("zone_counter")

L_SHAPE = np.array([[0, 0], [4, 0], [4, 1], [1, 1], [1, 4], [0, 4]], float)  # concave


@pytest.mark.parametrize("point,inside", [
    ((0.5, 0.5), True), ((3.5, 0.5), True), ((0.5, 3.5), True),
    ((2, 2), False),  # in the notch
    ((4, 0.5), True), ((1, 2), True), ((0, 0), True),  # on edges and a vertex
    ((5, 0.5), False), ((-0.1, 2), False), ((2, 1.0001), False),
])
def test_points_in_a_concave_polygon(point, inside) -> None:
    assert bool(zc.points_in_polygon(np.array([point], float), L_SHAPE)[0]) is inside


def test_counts_match_plain_comparisons_on_ground_truth_boxes() -> None:
    from edge_sdk.runtime.synthetic import SyntheticFaces

    scene = SyntheticFaces.from_uri("synthetic://faces?width=3840&height=2160&count=40&seed=3")
    zones = zc.load_zones(APPS / "zone_counter" / "zones.json")
    counter = zc.ZoneCounter(zones)
    for i in range(3):
        boxes = scene.ground_truth(i).xyxy
        got = counter.count(boxes)
        cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
        assert got["left_half"] == int(((cx <= 1919) & (cx >= 0)).sum())
        assert got["top_right"] == int(((cx >= 2880) & (cy <= 1079)).sum())
        diamond = np.abs(cx - 1920) / 960 + np.abs(cy - 1080) / 540 <= 1  # |x|/a + |y|/b <= 1
        assert got["centre_diamond"] == int(diamond.sum())
        assert len(boxes) > 10


@pytest.mark.parametrize("data", [
    {}, {"zones": {}}, {"zones": {"a": [[0, 0], [1, 1]]}}, {"zones": {"a": [[0, 0], [1, "x"], [2, 2]]}},
    {"zones": {"a": [[0, 0], [1, True], [2, 2]]}}, {"zones": {"": [[0, 0], [1, 0], [1, 1]]}}, [],
])
def test_bad_zone_files_are_refused(data) -> None:
    with pytest.raises(ConfigError, match="zone"):
        zc.parse_zones(data, "zones.json")


def test_app_publishes_zone_counts_over_mqtt(tmp_path: Path, broker, message_log) -> None:
    pytest.importorskip("onnxruntime")
    bundle = make_tiny_bundle(tmp_path / "bundle")
    source = "synthetic://faces?width=3840&height=2160&count=20&seed=1"
    log = message_log(broker.url, ["edge-sdk-apps/#"])
    argv = ["--bundle", str(bundle), "--source", source, "--zones", str(APPS / "zone_counter" / "zones.json"),
            "--broker", broker.url, "--device", "cam-9", "--every", "4", "--max-frames", "10",
            "--backend", "onnxruntime-cpu", "--threads", "1"]
    assert zc.main(argv) == 0
    assert log.wait(lambda m: len(log.on("zones")) == 3, timeout=20)
    sent = log.on("zones")
    assert [m["frame"] for m in sent] == [3, 7, 9] and [m["frames"] for m in sent] == [4, 4, 2]
    assert all(m["counting"] == "tracks" and "lines" in m for m in sent)  # the pipeline tracks by default

    # the same pipeline run independently: count the tracked boxes of each message's last frame by hand
    from edge_sdk.detections import TRACK_ID
    from edge_sdk.runtime.config import config_from_dict
    from edge_sdk.runtime.pipeline import Pipeline

    cfg = config_from_dict({"bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "mode": "roi",
                            "max_frames": 10, "source": {"uri": source}, "cache": {"enabled": False}})
    with Pipeline(cfg) as pipeline:
        boxes = {r.index: (r.detections.xyxy.copy(), r.detections.data[TRACK_ID].copy()) for r in pipeline}
    for message in sent:
        xyxy, ids = boxes[message["frame"]]
        cx = (xyxy[:, 0] + xyxy[:, 2]) / 2
        assert message["zones"]["left_half"]["now"] == int(((cx <= 1919) & (ids >= 0)).sum())
        for zone in message["zones"].values():
            assert zone["now"] <= zone["total"] and zone["new"] <= zone["total"]
    assert any((ids >= 0).any() for _, ids in boxes.values()), "no confirmed track: the counts above prove little"
    assert sum(len(b) for b, _ in boxes.values()) > 0, "the tiny model found nothing: the check above proves nothing"


# --- tracks: unique per zone, line crossings with their direction ------------------------------------

# a vertical line x = 10 from y = 0 to y = 20; "in" starts on the left (the side of [0, 10])
GATE = {"points": [[10, 0], [10, 20]], "from": {"in": [0, 10], "out": [20, 10]}}


def boxes_at(*points) -> np.ndarray:
    """Boxes 2 px wide centred on `points`."""
    return np.array([[x - 1, y - 1, x + 1, y + 1] for x, y in points], float).reshape(-1, 4)


def crossings(path, line=GATE) -> dict:
    """Line counts for one track (id 7) moving through `path`, one point per frame (None: not seen)."""
    counter = zc.TrackCounter({}, zc.parse_lines({"lines": {"gate": line}}, "test"))
    for point in path:
        if point is None:
            counter.count(boxes_at(), np.zeros(0, np.int64))
        else:
            counter.count(boxes_at(point), np.array([7]))
    gate = counter.message("cam", len(path))["lines"]["gate"]
    assert gate["total"] == {"in": gate["in"], "out": gate["out"]}  # one message: since the start = since the last
    return {"in": gate["in"], "out": gate["out"]}


@pytest.mark.parametrize("path,expected", [
    ([(5, 10), (8, 10), (12, 10), (15, 10)], {"in": 1, "out": 0}),              # crossing left to right
    ([(15, 10), (12, 10), (8, 10)], {"in": 0, "out": 1}),                       # right to left
    ([(5, 10), (10, 10), (5, 10)], {"in": 0, "out": 0}),                        # touches the line, goes back
    ([(5, 10), (10, 10), (10, 12), (15, 10)], {"in": 1, "out": 0}),             # along the line, then across
    ([(5, 10), (15, 10), (5, 10), (15, 10)], {"in": 2, "out": 1}),              # across, back, across
    ([(2, 10), (18, 10)], {"in": 1, "out": 0}),                                 # jumps over between two frames
    ([(2, 25), (18, -5)], {"in": 1, "out": 0}),                                 # jumps over, diagonally through it
    ([(2, 30), (18, 30)], {"in": 0, "out": 0}),                                 # passes below its end
    ([(2, 10), None, None, (18, 10)], {"in": 1, "out": 0}),                     # crossed while not seen
    ([(10, 10), (15, 10)], {"in": 0, "out": 0}),                                # first seen on it: no side to come from
    ([(10, 0), (10, 20)], {"in": 0, "out": 0}),                                 # moves along it
])
def test_line_crossings_counted_by_hand(path, expected) -> None:
    assert crossings(path) == expected


@pytest.mark.parametrize("points", [[[10, 0], [10, 20]], [[10, 20], [10, 0]]])
@pytest.mark.parametrize("sides", [{"in": [0, 10], "out": [20, 10]}, {"out": [20, 10], "in": [0, 10]}])
def test_the_directions_follow_the_side_points_whatever_order_the_file_gives(points, sides) -> None:
    line = {"points": points, "from": sides}
    assert crossings([(5, 10), (15, 10), (5, 10), (15, 10)], line) == {"in": 2, "out": 1}


SQUARE = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], float)


def test_a_track_is_counted_once_per_zone_however_often_it_comes_back() -> None:
    counter = zc.TrackCounter({"sq": SQUARE}, {})
    frames = [  # (points, ids)
        ([(5, 5), (50, 50)], [1, 2]),        # 1 in; 2 out
        ([(50, 5), (5, 6)], [1, 2]),         # 1 leaves, 2 comes in
        ([(5, 5), (6, 6), (7, 7)], [1, 2, -1]),  # 1 is back; an unconfirmed detection in the square
        ([], []),                            # nobody seen
        ([(4, 4), (3, 3)], [1, 3]),          # 1 again; 3 is new
    ]
    nows = [counter.count(boxes_at(*points), np.array(ids, np.int64))["sq"] for points, ids in frames[:3]]
    first = counter.message("cam", 2)
    for points, ids in frames[3:]:
        counter.count(boxes_at(*points), np.array(ids, np.int64))
    second = counter.message("cam", 4)
    assert nows == [1, 1, 2]  # the unconfirmed detection is not a track
    assert first["zones"]["sq"] == {"now": 2, "new": 2, "total": 2} and first["outside"] == 0
    assert second["zones"]["sq"] == {"now": 2, "new": 1, "total": 3}
    assert first["counting"] == second["counting"] == "tracks" and (first["frames"], second["frames"]) == (3, 2)


def test_a_track_away_longer_than_forget_after_is_forgotten() -> None:
    counter = zc.TrackCounter({"sq": SQUARE}, {}, forget_after=3)
    counter.count(boxes_at((5, 5)), np.array([1]))
    for _ in range(3):
        counter.count(boxes_at((6, 6)), np.array([2]))
    counter.message("cam", 3)
    assert set(counter.tracks) == {1, 2}  # away 3 frames: kept
    counter.count(boxes_at((6, 6)), np.array([2]))
    counter.message("cam", 4)
    assert set(counter.tracks) == {2}


def test_unique_tracks_and_crossings_on_synthetic_ground_truth_against_plain_comparisons() -> None:
    from edge_sdk.runtime.synthetic import SyntheticFaces

    scene = SyntheticFaces.from_uri("synthetic://faces?width=3840&height=2160&count=30&seed=5&max_size=120")
    zones, lines = zc.load_layout(APPS / "zone_counter" / "zones.json")
    counter = zc.TrackCounter(zones, lines)
    seen_left, last_x, moves = set(), {}, {"rightward": 0, "leftward": 0}
    for i in range(60):
        truth = scene.ground_truth(i)
        counter.count(truth.xyxy, truth.data["track_id"])
        cx = (truth.xyxy[:, 0] + truth.xyxy[:, 2]) / 2
        for track_id, x in zip(truth.data["track_id"].tolist(), cx.tolist()):
            if x <= 1919:
                seen_left.add(track_id)
            if x != 1920:  # a centre on the line leaves the side it came from unchanged
                if track_id in last_x and (last_x[track_id] < 1920) != (x < 1920):
                    moves["rightward" if x > 1920 else "leftward"] += 1
                last_x[track_id] = x
    message = counter.message("cam", 59)
    assert message["zones"]["left_half"]["total"] == len(seen_left) > 5
    assert {k: message["lines"]["middle"][k] for k in moves} == moves and sum(moves.values()) > 0


def test_without_track_ids_it_counts_detections_per_frame_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    counter = zc.Counter({"sq": SQUARE}, zc.parse_lines({"lines": {"gate": GATE}}, "test"))
    counter.count(boxes_at(), None)  # nothing yet: undecided
    for points in ([(5, 5), (6, 6)], [(5, 5), (50, 50)], [(15, 10)]):
        counter.count(boxes_at(*points), None)
    message = counter.message("cam", 3)
    assert message["counting"] == "detections" and "lines" not in message
    assert message["zones"]["sq"] == {"now": 0, "max": 2, "mean": 0.75} and message["frames"] == 4
    assert "no track ids" in caplog.text and "no line crossings" in caplog.text


def test_with_track_ids_the_counter_counts_tracks() -> None:
    counter = zc.Counter({"sq": SQUARE}, {})
    counter.count(boxes_at(), None)
    counter.count(boxes_at((5, 5), (6, 6)), np.array([4, 4]))
    counter.count(boxes_at((5, 5)), np.array([4]))
    message = counter.message("cam", 2)
    assert message["counting"] == "tracks" and message["zones"]["sq"]["total"] == 1 and message["frames"] == 3


@pytest.mark.parametrize("line,words", [
    ({"points": [[0, 0], [0, 0]], "from": {"a": [1, 0], "b": [-1, 0]}}, "two distinct points"),
    ({"points": [[0, 0], [0, 9]], "from": {"a": [1, 0]}}, "two sides"),
    ({"points": [[0, 0], [0, 9]], "from": {"a": [1, 0], "b": [2, 0]}}, "opposite sides"),
    ({"points": [[0, 0], [0, 9]], "from": {"a": [0, 4], "b": [2, 0]}}, "opposite sides"),
    ({"points": [[0, 0], [0, 9]], "from": {"": [1, 0], "b": [-1, 0]}}, "side name"),
    ({"points": [[0, 0], [0, 9]]}, "two sides"),
    ([[0, 0], [0, 9]], "two distinct points"),
])
def test_bad_lines_are_refused(line, words) -> None:
    with pytest.raises(ConfigError, match=words):
        zc.parse_lines({"lines": {"gate": line}}, "zones.json")


def test_a_file_of_lines_alone_needs_no_zones(tmp_path: Path) -> None:
    path = tmp_path / "zones.json"
    path.write_text('{"lines": {"gate": %s}}' % __import__("json").dumps(GATE))
    zones, lines = zc.load_layout(path)
    assert zones == {} and list(lines) == ["gate"]


def jsonl_row(frame: int, points, ids=None, stream: str = "0") -> str:
    import json

    detections = [{"xyxy": box.tolist(), "score": 0.9, "class_id": 0} for box in boxes_at(*points)]
    for d, i in zip(detections, ids or []):
        d["track_id"] = i
    return json.dumps({"stream": stream, "frame": frame, "ts": 0.0, "detections": detections, "latency_ms": {}})


def test_the_app_counts_the_rows_of_a_jsonl_file(tmp_path: Path) -> None:
    import json

    (tmp_path / "zones.json").write_text(json.dumps({"zones": {"sq": SQUARE.tolist()}, "lines": {"gate": GATE}}))
    path = tmp_path / "rows.jsonl"
    rows = [jsonl_row(0, [(5, 5), (30, 10)], [1, 2]), jsonl_row(0, [(1, 1)], [9], stream="other"),
            jsonl_row(1, [(12, 5), (30, 10)], [1, 2]), jsonl_row(2, [(5, 5)], [-1]), jsonl_row(3, [(8, 5)], [1])]
    path.write_text("\n".join(rows) + "\n")
    sent = []
    args = zc.parse_args(["--jsonl", str(path), "--stream", "0", "--zones", str(tmp_path / "zones.json"), "--every", "2"])
    assert zc.run(args, publish=lambda topic, payload: sent.append((topic, json.loads(payload)))) == 0
    assert [topic for topic, _ in sent] == ["edge-sdk-apps/cam-1/zones"] * 2
    first, second = (m for _, m in sent)
    assert (first["frame"], second["frame"]) == (1, 3)
    assert first["zones"]["sq"] == {"now": 0, "new": 1, "total": 1} and first["lines"]["gate"]["in"] == 1
    assert second["zones"]["sq"] == {"now": 1, "new": 0, "total": 1}
    assert second["lines"]["gate"] == {"in": 0, "out": 1, "total": {"in": 1, "out": 1}}


def test_a_jsonl_file_of_several_streams_needs_stream(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(jsonl_row(0, [(5, 5)], [1]) + "\n" + jsonl_row(0, [(5, 5)], [1], stream="door") + "\n")
    with pytest.raises(ConfigError, match="line 2.*--stream"):
        list(zc.read_jsonl(path))
    assert [frame for frame, _, _ in zc.read_jsonl(path, "door")] == [0]


def test_the_app_counts_the_detections_messages_of_a_device_over_mqtt(tmp_path: Path, broker, message_log,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    import json
    import threading

    from edge_sdk.telemetry.broker import BrokerConfig, make_client

    (tmp_path / "zones.json").write_text(json.dumps({"zones": {"sq": SQUARE.tolist()}, "lines": {"gate": GATE}}))
    log = message_log(broker.url, ["edge-sdk-apps/#"])
    args = zc.parse_args(["--listen", "cam-7", "--zones", str(tmp_path / "zones.json"), "--broker", broker.url,
                          "--device", "door-counter", "--every", "2", "--max-frames", "4"])
    subscribed, done = threading.Event(), []
    app = threading.Thread(target=lambda: done.append(zc.run(args, subscribed=subscribed)), daemon=True)
    app.start()
    assert subscribed.wait(10), "the app did not subscribe"

    def frame(i: int, points, ids, stream: str = "0") -> str:
        row = json.loads(jsonl_row(i, points, ids, stream))
        return json.dumps({"schema": "edge-sdk/detections/1", "device_id": "cam-7", "ts": 0, "seq": i, "kind": "frame",
                           "stream": row["stream"], "frame": i, "detections": row["detections"]})

    settings = BrokerConfig(url=broker.url)
    device = make_client(settings, "cam-7-daemon")
    device.connect(settings.host, settings.port)
    device.loop_start()
    try:
        for payload in [frame(0, [(5, 5)], [1]), "not json",
                        json.dumps({"schema": "edge-sdk/detections/1", "device_id": "cam-7", "ts": 0, "seq": 9,
                                    "kind": "summary", "frames": 3, "count": 4}),
                        frame(1, [(15, 5)], [1]), frame(1, [(5, 5), (6, 6)], [4, 5], stream="yard"),
                        frame(2, [(5, 6), (6, 5)], [1, 2]), frame(3, [(15, 15)], [2])]:
            device.publish("edge-sdk/cam-7/detections", payload, qos=1).wait_for_publish(5)
        app.join(20)
    finally:
        device.loop_stop()
        device.disconnect()
    assert done == [0]
    assert log.wait(lambda m: len(log.on("zones")) == 2, timeout=10)
    first, second = log.on("zones")
    assert first["zones"]["sq"] == {"now": 0, "new": 1, "total": 1} and first["lines"]["gate"]["in"] == 1
    assert second["zones"]["sq"] == {"now": 0, "new": 1, "total": 2}
    assert second["lines"]["gate"] == {"in": 1, "out": 1, "total": {"in": 2, "out": 1}}
    assert (first["frame"], second["frame"], first["device_id"]) == (1, 3, "door-counter")
    assert "1 messages skipped (not detections rows), 0 frames dropped" in caplog.text  # the summary is no frame, not skipped
