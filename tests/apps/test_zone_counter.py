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

    # the same pipeline run independently: count the last frame of each message by hand
    from edge_sdk.runtime.config import config_from_dict
    from edge_sdk.runtime.pipeline import Pipeline

    cfg = config_from_dict({"bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "mode": "roi",
                            "max_frames": 10, "source": {"uri": source}, "cache": {"enabled": False}})
    with Pipeline(cfg) as pipeline:
        boxes = {r.index: r.detections.xyxy.copy() for r in pipeline}
    for message in sent:
        xyxy = boxes[message["frame"]]
        cx = (xyxy[:, 0] + xyxy[:, 2]) / 2
        assert message["zones"]["left_half"]["now"] == int((cx <= 1919).sum())
        for zone in message["zones"].values():
            assert zone["now"] <= zone["max"] and zone["mean"] <= zone["max"]
    assert sum(len(b) for b in boxes.values()) > 0, "the tiny model found nothing: the check above proves nothing"
