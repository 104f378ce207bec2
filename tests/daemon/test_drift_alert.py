"""The daemon's calibration-drift wiring: a bundle calibrated on a colour scene, run on the same
scene in colour (no alert) and from a monochrome camera (a night-time IR camera: the saturation
histogram collapses), through the real Pipeline, telemetry and alert topics (JSON lines)."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from edge_sdk.builder.input_stats import input_stats
from edge_sdk.daemon import Daemon, daemon_config_from_dict
from edge_sdk.telemetry import schemas

from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

SCENE = "synthetic://faces?width=320&height=192&count=3&min_size=12&max_size=40&fps=1000&background=coffee"


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> Path:
    """A tiny bundle whose input_stats come from colour frames of SCENE, as a build records them."""
    from edge_sdk.runtime.synthetic import SyntheticFaces

    root = tmp_path_factory.mktemp("drift")
    scene = SyntheticFaces.from_uri(SCENE.replace("fps=1000", "fps=30") + "&seed=7")
    images = []
    for i in range(0, 60, 6):
        path = root / f"calib_{i:02d}.png"
        cv2.imwrite(str(path), scene.render(i))
        images.append(path)
    folder = make_tiny_bundle(root / "bundle")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["input_stats"] = input_stats(images)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def run(bundle: Path, source: str, **health: Any) -> List[Dict[str, Any]]:
    data: Dict[str, Any] = {
        "bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "max_frames": 80,
        "source": {"uri": source}, "cache": {"enabled": False},
        "device": {"id": "cam-1"}, "telemetry": {"interval_s": 0.05, "system": False},
        "health": dict({"drift_sample_s": 0.0005, "drift_window": 8, "latency_p99_ms": 0}, **health),
    }
    return daemon_lines(data)


def daemon_lines(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The messages of a daemon run with config `data`, each checked against its schema."""
    stream = io.StringIO()
    assert Daemon(daemon_config_from_dict(data), stream=stream).run() == 0
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    for line in lines:
        assert schemas.errors(line["payload"]) == [], line
    return lines


def on(lines: List[Dict[str, Any]], suffix: str) -> List[Dict[str, Any]]:
    return [x["payload"] for x in lines if x["topic"].endswith("/" + suffix)]


def test_the_calibrated_scene_raises_no_drift(calibrated: Path) -> None:
    lines = run(calibrated, SCENE)
    assert not [a for a in on(lines, "alerts") if a["alert"] == "calibration_drift"]
    drift = on(lines, "telemetry")[-1]["drift"]
    assert drift["samples"] == 8 and drift["distance"] < 0.4 and drift["alarmed"] is False


def test_a_monochrome_camera_raises_calibration_drift_with_its_numbers(calibrated: Path) -> None:
    lines = run(calibrated, SCENE + "&gray=1")
    raised = [a for a in on(lines, "alerts") if a["alert"] == "calibration_drift"]
    assert len(raised) == 1 and raised[0]["state"] == "raised" and raised[0]["severity"] == "warning"
    assert raised[0]["metric"] == "drift.distance" and raised[0]["threshold"] == 0.4
    assert raised[0]["value"] > 0.4 and "saturation" in raised[0]["message"]
    last = on(lines, "telemetry")[-1]
    assert last["drift"]["alarmed"] is True and last["drift"]["saturation"] > 0.4
    assert last["drift"]["saturation_mean"] == 0.0  # grey pixels have no saturation
    assert "calibration_drift" in last["alerts_open"]


def test_drift_monitoring_off_and_bundles_without_stats_publish_no_drift(calibrated: Path, tmp_path: Path) -> None:
    off = run(calibrated, SCENE + "&gray=1", drift_distance=0)
    assert all("drift" not in t for t in on(off, "telemetry"))
    assert not [a for a in on(off, "alerts") if a["alert"] == "calibration_drift"]
    plain = run(make_tiny_bundle(tmp_path / "plain"), SCENE + "&gray=1")
    assert all("drift" not in t for t in on(plain, "telemetry"))


@pytest.mark.parametrize("health,key", [
    ({"drift_distance": 1.5}, "drift_distance"),
    ({"drift_distance": -0.1}, "drift_distance"),
    ({"drift_sample_s": 0}, "drift_sample_s"),
    ({"drift_window": 0}, "drift_window"),
    ({"drift_window": 2.5}, "drift_window"),
    ({"drift_window": True}, "drift_window"),
])
def test_bad_drift_settings_name_the_key(health: Dict[str, Any], key: str) -> None:
    from edge_sdk.errors import ConfigError

    with pytest.raises(ConfigError, match=key):
        daemon_config_from_dict({"source": {"uri": SCENE}, "device": {"id": "cam-1"}, "health": health})


def run_streams(bundle: Path, sources: Dict[str, str]) -> List[Dict[str, Any]]:
    """A daemon with several [[sources]] and no snapshot_dir (its frames are not kept for snapshots)."""
    data: Dict[str, Any] = {
        "bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "cache": {"enabled": False},
        "sources": [{"id": sid, "uri": uri + "&frames=120"} for sid, uri in sources.items()],
        "device": {"id": "cam-1"}, "telemetry": {"interval_s": 0.05, "system": False},
        "health": {"drift_sample_s": 0.0005, "drift_window": 8, "latency_p99_ms": 0},
    }
    return daemon_lines(data)


def test_several_streams_feed_the_drift_monitor_each_in_turn(calibrated: Path) -> None:
    """Two colour cameras: the drift window fills from their frames (no snapshot_dir needed).
    One colour and one monochrome camera: the window holds both alike, so its mean saturation is
    about half the colour cameras' (each sample is one camera's frame)."""
    colour = on(run_streams(calibrated, {"door": SCENE + "&seed=1", "yard": SCENE + "&seed=2"}), "telemetry")[-1]
    assert colour["drift"]["samples"] == 8 and colour["drift"]["alarmed"] is False
    mixed = on(run_streams(calibrated, {"door": SCENE + "&seed=1", "ir": SCENE + "&seed=2&gray=1"}), "telemetry")[-1]
    assert mixed["drift"]["samples"] == 8
    ratio = mixed["drift"]["saturation_mean"] / colour["drift"]["saturation_mean"]
    assert 0.3 < ratio < 0.7, (mixed["drift"], colour["drift"])
