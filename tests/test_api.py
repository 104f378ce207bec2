"""The top-level API (edge_sdk.Pipeline, edge_sdk.draw, FrameResult.tracks): the README's example
run as written on synthetic video against an independent run of the runtime's Pipeline, typed
errors when the pipeline is made, the context manager, and `import edge_sdk` staying light."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import numpy as np
import pytest

import edge_sdk
from edge_sdk.detections import TRACK_ID, Detections
from edge_sdk.errors import BundleError, ConfigError, SourceError
from edge_sdk.runtime.types import FrameResult

from tiny_bundle import make_tiny_bundle

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "synthetic://faces?width=320&height=240&count=6&seed=4&frames=5"


def readme_example() -> str:
    """The README's complete Python example: the python block that makes an edge_sdk.Pipeline."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if "edge_sdk.Pipeline(" in b]
    assert len(found) == 1, "the README should hold one example of edge_sdk.Pipeline"
    return found[0]


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    cv2 = pytest.importorskip("cv2")
    code = readme_example()
    loop = code[code.index("for result in pipe"):].rstrip().splitlines()
    assert len(loop) <= 12, "longer than the loop of jetson-inference's detectnet.py"
    bundle = make_tiny_bundle(tmp_path / "bundle")
    (tmp_path / "detect.py").write_text(code, encoding="utf-8")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "detect.py", SOURCE], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr

    # the same frames through the runtime's Pipeline, built from a config as before the top-level API
    from edge_sdk.runtime.config import config_from_dict
    from edge_sdk.runtime.pipeline import Pipeline
    from edge_sdk.runtime.sinks import draw_detections

    expected: List[str] = []
    config = config_from_dict({"bundle": str(bundle), "source": {"uri": SOURCE}})
    with Pipeline(config) as pipeline:
        for result in pipeline:
            det = result.detections
            expected.append(f"stream 0 frame {result.index}: {len(det)} objects, {len(result.tracks)} tracked")
            expected += [f"  {[float(round(v)) for v in box]} {score:.2f}" for box, score in zip(det.xyxy, det.confidence)]
            drawn = draw_detections(result.frame.copy(), result)
            plain = result.frame.copy()
    assert run.stdout.splitlines() == expected
    assert sum(line.startswith("  ") for line in expected) > 0, "no detections: the comparison above proves little"
    saved = cv2.imread(str(tmp_path / "latest.jpg")).astype(np.int16)
    assert np.abs(saved - drawn).mean() < np.abs(saved - plain).mean() / 2  # the last frame, drawn on


def test_pipeline_yields_results_and_closes_the_source_when_the_block_ends(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    bundle = make_tiny_bundle(tmp_path / "bundle")
    endless = "synthetic://faces?width=160&height=120&count=3&seed=1"
    with edge_sdk.Pipeline(endless, bundle=bundle, backend="onnxruntime-cpu", threads=1) as pipe:
        for result in pipe:
            assert isinstance(result, FrameResult) and result.stream == "0" and result.frame.shape == (120, 160, 3)
            if result.index == 2:
                break
        assert [t for t in threading.enumerate() if t.name.startswith("edge-sdk-capture")]
    assert not [t for t in threading.enumerate() if t.name.startswith("edge-sdk-capture")]


def test_settings_are_config_keys(tmp_path: Path) -> None:
    bundle = make_tiny_bundle(tmp_path / "bundle")
    pipe = edge_sdk.Pipeline("synthetic://faces", bundle=bundle, mode="roi", max_frames=7, loop=True, fps=12,
                             roi={"sweep_tiles": 3})
    cfg = pipe.config
    assert (cfg.mode, cfg.max_frames, cfg.roi.sweep_tiles, cfg.bundle) == ("roi", 7, 3, str(bundle))
    assert (cfg.source.uri, cfg.source.loop, cfg.source.fps) == ("synthetic://faces", True, 12)
    pipe.close()


@pytest.mark.parametrize("source,settings,error,words", [
    ("no/such/clip.mp4", {}, SourceError, "does not exist"),
    ("ftp://cam/1", {}, SourceError, "unknown source scheme"),
    ("synthetic://faces", {"bundel": "x"}, ConfigError, "bundel"),
    ("synthetic://faces", {"mode": "fast"}, ConfigError, "mode"),
    ("synthetic://faces", {"sources": [{"id": "a", "uri": "x"}]}, ConfigError, "first argument"),
])
def test_bad_sources_and_settings_fail_when_the_pipeline_is_made(tmp_path: Path, source, settings, error, words) -> None:
    bundle = make_tiny_bundle(tmp_path / "bundle")
    with pytest.raises(error, match=words):
        edge_sdk.Pipeline(source, bundle=bundle, **settings)


def test_a_missing_bundle_fails_when_the_pipeline_is_made_naming_the_build(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"manifest.json is missing. Build one with `edge-sdk build"):
        edge_sdk.Pipeline("synthetic://faces", bundle=tmp_path / "nothing")
    assert not [t for t in threading.enumerate() if t.name.startswith("edge-sdk-capture")]


@pytest.mark.parametrize("ids,kept", [
    ([3, -1, 7, -1], [0, 2]),
    ([-1, -1, -1, -1], []),
    ([0, 1, 2, 3], [0, 1, 2, 3]),
    (None, []),
])
def test_tracks_are_the_detections_with_a_confirmed_track(ids, kept) -> None:
    xyxy = np.arange(16, dtype=np.float32).reshape(4, 4)
    data = {"label": np.array(["a", "b", "c", "d"])}
    if ids is not None:
        data[TRACK_ID] = np.array(ids, np.int64)
    det = Detections(xyxy, np.full(4, 0.9), np.zeros(4), data)
    tracks = FrameResult(index=0, timestamp=0.0, detections=det).tracks
    assert tracks.xyxy.tolist() == xyxy[kept].tolist()
    assert tracks.data["label"].tolist() == ["abcd"[i] for i in kept]
    assert len(det) == 4  # the detections themselves are untouched


def test_import_edge_sdk_loads_no_runtime_until_pipeline_is_used() -> None:
    code = ("import sys, json, edge_sdk\n"
            "before = sorted(m for m in sys.modules if m.startswith(('edge_sdk.', 'numpy')))\n"
            "edge_sdk.Pipeline, edge_sdk.draw\n"
            "print(json.dumps([before, 'edge_sdk.api' in sys.modules, 'Pipeline' in dir(edge_sdk)]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT)}).stdout
    before, loaded, listed = json.loads(out.strip().splitlines()[-1])
    assert before == ["edge_sdk.errors", "edge_sdk.redact"] and loaded and listed  # redact: stdlib only
    with pytest.raises(AttributeError, match="no attribute 'Pipelin'"):
        edge_sdk.Pipelin  # noqa: B018


def test_draw_is_the_runtime_drawing() -> None:
    from edge_sdk.runtime.sinks import draw_detections

    assert edge_sdk.draw is draw_detections
