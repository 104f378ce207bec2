"""`edge-sdk detect` on damaged and unusual files, as a user runs it (a subprocess): a truncated
video is reported on stderr, a 16-bit PNG in a folder is read like the builder reads it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from edge_sdk.preprocess import InputSpec
from runtime_factories import CENTERFACE_DECODER, scene, tiny_centerface_model, write_bundle, write_video

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("detect-files")
    model = tiny_centerface_model(tmp / "tiny.onnx")
    return write_bundle(tmp / "bundle", model, InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER)


def detect(*args: object) -> subprocess.CompletedProcess:
    cmd: List[str] = [sys.executable, "-c", "from edge_sdk.cli import main; main()", "detect", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_truncated_video_warns_on_stderr(bundle: Path, tmp_path: Path) -> None:
    clip = write_video(tmp_path / "clip.avi", 100, width=96, height=64)
    with open(clip, "r+b") as f:
        f.truncate(clip.stat().st_size // 2)
    out = tmp_path / "out.jsonl"
    done = detect(clip, "--bundle", bundle, "--jsonl", out, "--threads", "1", "--quiet")
    assert done.returncode == 0, done.stderr
    frames = len(out.read_text().splitlines())
    assert 0 < frames < 100
    assert f"video {clip} ended after {frames} of the 100 frames its header announces" in done.stderr


def test_a_folder_with_a_16_bit_png_runs_to_the_end(bundle: Path, tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), scene(0))
    cv2.imwrite(str(folder / "b.png"), scene(1).astype("uint16") * 257)  # 16-bit, what `build` accepts
    cv2.imwrite(str(folder / "c.png"), scene(2))
    out = tmp_path / "out.jsonl"
    done = detect(folder, "--bundle", bundle, "--jsonl", out, "--threads", "1", "--quiet")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["frame"] for line in out.read_text().splitlines()] == [0, 1, 2]
