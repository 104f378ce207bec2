"""`edge-sdk detect` end to end with CliRunner: a video made here, a tiny model, real ONNX Runtime."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk import default_bundle
from edge_sdk.errors import BundleError
from edge_sdk.preprocess import InputSpec
from runtime_factories import CENTERFACE_DECODER, tiny_centerface_model, write_bundle, write_video

runner = CliRunner()
STAGE_KEYS = {"capture_wait", "preprocess", "infer", "decode", "merge", "track", "total"}  # track: [tracking] is on by default


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cli")
    model = tiny_centerface_model(tmp / "tiny.onnx")
    return write_bundle(tmp / "bundle", model, InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER)


def invoke(*args: Any) -> Any:
    return runner.invoke(app, ["detect", *[str(a) for a in args]])


def test_video_to_jsonl_and_video(bundle: Path, tmp_path: Path) -> None:
    import cv2

    clip = write_video(tmp_path / "clip.avi", 9, width=128, height=96)
    out, video = tmp_path / "out.jsonl", tmp_path / "boxes.avi"
    result = invoke(clip, "--bundle", bundle, "--jsonl", out, "--save-video", video, "--threads", "1", "--no-cache")
    assert result.exit_code == 0, result.output
    lines: List[str] = out.read_text().splitlines()
    assert len(lines) == 9
    for i, line in enumerate(lines):
        record = json.loads(line)
        # "info" rides along only when capture reports an event (e.g. leaving SCHED_IDLE on a busy machine)
        assert [k for k in record if k != "info"] == ["stream", "frame", "ts", "detections", "latency_ms"]
        assert record["stream"] == "0"  # the one source
        assert all(e["event"].startswith("capture_") for e in record.get("info", {}).get("events", [])), record
        assert record["frame"] == i and isinstance(record["ts"], float) and record["ts"] > 1.6e9
        assert set(record["latency_ms"]) == STAGE_KEYS
        assert all(isinstance(v, float) for v in record["latency_ms"].values())
        for det in record["detections"]:
            assert list(det) == ["xyxy", "score", "class_id", "track_id"]
            assert isinstance(det["track_id"], int) and det["track_id"] >= -1
            assert len(det["xyxy"]) == 4 and 0 <= det["score"] <= 1 and det["class_id"] == 0
            x1, y1, x2, y2 = det["xyxy"]
            assert 0 <= x1 <= x2 <= 128 and 0 <= y1 <= y2 <= 96
    for i, line in enumerate(lines):
        # scene(i) puts a 16x16 bright square at ((8i) % 112, (4i) % 80): a detection is centred in it
        x, y = (i * 8) % (128 - 16), (i * 4) % (96 - 16)
        centres = [((d["xyxy"][0] + d["xyxy"][2]) / 2, (d["xyxy"][1] + d["xyxy"][3]) / 2) for d in json.loads(line)["detections"]]
        assert any(x <= cx <= x + 16 and y <= cy <= y + 16 for cx, cy in centres), (i, centres)
    cap = cv2.VideoCapture(str(video))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 9
    ok, frame = cap.read()
    cap.release()
    assert ok and frame.shape == (96, 128, 3)
    assert "frames 9" in result.output and "p99" in result.output
    from edge_sdk.runtime.pipeline import available_cores

    said = " ".join(result.output.split())  # the console wraps long lines
    if available_cores() > 1:  # one inference thread leaves a core free: the model gets its own thread
        assert "infer on the infer thread (its own, one frame ahead of decode), decode on the consumer" in said, said
    else:
        assert "infer and decode on the inference thread" in said, said


def test_synthetic_source_with_max_frames(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "syn.jsonl"
    result = invoke("synthetic://faces?width=320&height=240&count=3&min_size=16&max_size=32", "--bundle", bundle,
                    "--max-frames", "4", "--jsonl", out, "-q")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["frame"] for line in out.read_text().splitlines()] == [0, 1, 2, 3]


def test_jsonl_to_stdout(bundle: Path, tmp_path: Path) -> None:
    clip = write_video(tmp_path / "clip.avi", 3)
    result = invoke(clip, "--bundle", bundle, "--jsonl", "-", "-q")
    assert result.exit_code == 0, result.output
    frames = [json.loads(line)["frame"] for line in result.stdout.splitlines() if line.startswith("{")]
    assert frames == [0, 1, 2]


def _corrupt(bundle: Path, tmp: Path) -> Path:
    root = write_bundle(tmp / "corrupt", bundle / "model.onnx", InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER)
    (root / "model.onnx").write_bytes(b"tampered")
    return root


@pytest.mark.parametrize(
    "case, code, message",
    [
        ("missing file", 9, "does not exist"),
        ("empty video", 9, "has no readable frames|cannot open video"),
        ("unknown scheme", 9, "unknown source scheme 'ftp://'"),
        ("corrupt bundle", 8, "fails its sha256 check"),
        ("newer schema", 8, "newer than this runtime"),
        ("missing variant", 8, "has no int8 variant"),
        ("bad precision", 2, "precision must be one of"),
        ("unwritable video", 2, "unknown video type"),
    ],
)
def test_bad_input_is_a_clear_error(bundle: Path, tmp_path: Path, case: str, code: int, message: str) -> None:
    clip = write_video(tmp_path / "clip.avi", 2)
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    args = {
        "missing file": [tmp_path / "nope.mp4", "--bundle", bundle],
        "empty video": [empty, "--bundle", bundle],
        "unknown scheme": ["ftp://host/clip.mp4", "--bundle", bundle],
        "corrupt bundle": [clip, "--bundle", _corrupt(bundle, tmp_path)],
        "newer schema": [clip, "--bundle", write_bundle(tmp_path / "newer", bundle / "model.onnx",
                                                          InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER, schema_version=7)],
        "missing variant": [clip, "--bundle", bundle, "--precision", "int8"],
        "bad precision": [clip, "--bundle", bundle, "--precision", "fp8"],
        "unwritable video": [clip, "--bundle", bundle, "--save-video", tmp_path / "out.gif"],
    }[case]
    result = invoke(*args)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert "error:" in result.output
    import re

    assert re.search(message, result.output.replace("\n", " ")), result.output


def test_default_bundle_without_the_builder_says_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_sdk import _imports

    real = _imports.available
    monkeypatch.setattr(_imports, "available", lambda name: False if name == "onnx" else real(name))
    with pytest.raises(BundleError, match=r'pip install "edge-sdk\[host\]".*--bundle'):
        default_bundle.ensure_default_bundle("fp32", root=tmp_path / "default")


@pytest.mark.parametrize("pad_value", [300, -1])
def test_a_bundle_with_a_bad_manifest_field_exits_8_naming_it(bundle: Path, tmp_path: Path, pad_value: int) -> None:
    import shutil

    bad = Path(shutil.copytree(bundle, tmp_path / "bad"))
    data = json.loads((bad / "manifest.json").read_text())
    data["inputs"][0]["pad_value"] = pad_value  # the files keep their sha256
    (bad / "manifest.json").write_text(json.dumps(data))
    result = invoke("synthetic://faces", "--bundle", bad, "--max-frames", "2", "--threads", "1")
    assert result.exit_code == 8, result.output
    assert f"inputs[0].pad_value must be in 0..255, got {pad_value}" in result.output
    assert str(bad / "manifest.json") in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("flag", [None, "--no-track"])
def test_track_ids_in_the_rows_and_no_track_leaves_them_out(bundle: Path, tmp_path: Path, flag: Any) -> None:
    clip = write_video(tmp_path / "clip.avi", 9, width=128, height=96)
    out = tmp_path / "out.jsonl"
    result = invoke(clip, "--bundle", bundle, "--jsonl", out, "--threads", "1", "-q", *([flag] if flag else []))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 9 and all(row["detections"] for row in rows)
    if flag:
        assert all("track_id" not in d for row in rows for d in row["detections"])
        assert all("track" not in row["latency_ms"] for row in rows)
        return
    assert all(isinstance(d["track_id"], int) and d["track_id"] >= -1 for row in rows for d in row["detections"])
    first = [d["track_id"] for d in rows[0]["detections"]]
    assert sorted(first) == list(range(1, len(first) + 1))  # the first frame's tracks are confirmed at once
