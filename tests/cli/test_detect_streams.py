"""`edge-sdk detect A B ...`: several sources through one model with CliRunner, real ONNX Runtime,
synthetic sources and the tiny CenterFace-shaped model with a free batch dimension. The rows of
every stream come back, in order per stream; the summary's numbers are those the rows give
(counted here from the JSONL file, not from the code that printed them)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

from edge_sdk.manifest import MANIFEST
from edge_sdk.preprocess import InputSpec
from runtime_factories import CENTERFACE_DECODER, tiny_centerface_bytes, write_bundle
from test_detect import bundle, invoke  # noqa: F401 (bundle: a fixture, batch fixed at 1)

FRAMES = 5


def synth(seed: int, frames: Optional[int] = FRAMES) -> str:
    """A synthetic scene of `frames` frames (None: endless)."""
    count = "" if frames is None else f"&frames={frames}"
    return f"synthetic://faces?width=96&height=64&seed={seed}&count=1&min_size=8&max_size=16{count}"


@pytest.fixture(scope="module")
def batch_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a symbolic batch dimension, in a bundle whose manifest says it takes 1..2."""
    tmp = tmp_path_factory.mktemp("batch")
    model = tmp / "tiny_batch.onnx"
    model.write_bytes(tiny_centerface_bytes(batch="batch"))
    root = write_bundle(tmp / "bundle", model, InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER)
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["batch"] = {"min": 1, "opt": 2, "max": 2}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return root


def rows_by_stream(path: Path) -> Dict[str, List[Dict[str, Any]]]:
    out: Dict[str, List[Dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        out.setdefault(row["stream"], []).append(row)
    return out


def said(result: Any) -> str:
    return " ".join(result.output.split())  # the console wraps long lines


def test_two_streams_share_the_model_and_the_summary_agrees_with_the_rows(batch_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    result = invoke("door=" + synth(1), "yard=" + synth(2), "--bundle", batch_bundle, "--backend", "onnxruntime-cpu",
                    "--threads", 1, "--jsonl", out)
    assert result.exit_code == 0, result.output
    rows = rows_by_stream(out)
    assert sorted(rows) == ["door", "yard"]
    for sid, mine in rows.items():
        assert [r["frame"] for r in mine] == list(range(FRAMES)), sid  # every frame once, in order
    batches = [r["info"]["batch"] for mine in rows.values() for r in mine]
    assert {b["size"] for b in batches} <= {1, 2}  # never more than the bundle takes
    text = said(result)
    for sid, mine in rows.items():
        total = [r["latency_ms"]["total"] for r in mine]
        line = re.search(rf"stream {sid}: frames (\d+) · [\d.]+ FPS · latency p50 ([\d.]+) ms p99 ([\d.]+) ms · "
                         r"dropped (\d+)", text)
        assert line is not None, text
        assert int(line.group(1)) == len(mine)
        assert float(line.group(2)) == pytest.approx(np.percentile(total, 50), abs=0.02)
        assert float(line.group(3)) == pytest.approx(np.percentile(total, 99), abs=0.02)
    # filled slots / slots: each backend call has one row 0; every row fills a slot of a call of up to 2
    calls = sum(1 for b in batches if b["row"] == 0)
    efficiency = len(batches) / (2 * calls)
    line = re.search(r"batch efficiency (\d+)% over (\d+) batches of up to 2", text)
    assert line is not None, text
    assert int(line.group(1)) == round(efficiency * 100) and int(line.group(2)) == calls
    queue = [r["latency_ms"]["queue"] for mine in rows.values() for r in mine]
    line = re.search(r"queue delay p50 ([\d.]+) ms p99 ([\d.]+) ms", text)
    assert line is not None, text
    assert float(line.group(1)) == pytest.approx(np.percentile(queue, 50), abs=0.02)
    assert float(line.group(2)) == pytest.approx(np.percentile(queue, 99), abs=0.02)
    assert f"wrote {2 * FRAMES} lines" in text


def test_max_frames_counts_the_frames_of_each_stream(batch_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    result = invoke(synth(1, None), synth(2, None), "--bundle", batch_bundle, "--backend", "onnxruntime-cpu",
                    "--threads", 1, "--max-frames", 3, "--jsonl", out, "-q")
    assert result.exit_code == 0, result.output
    rows = rows_by_stream(out)
    assert {sid: [r["frame"] for r in mine] for sid, mine in rows.items()} == {"0": [0, 1, 2], "1": [0, 1, 2]}


def test_max_frames_holds_a_fast_stream_while_a_paced_one_catches_up(batch_bundle: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "edge.toml"
    cfg.write_text(f'max_frames = 3\n\n[[sources]]\nid = "fast"\nuri = "{synth(1, None)}"\n\n'
                   f'[[sources]]\nid = "slow"\nuri = "{synth(2, None)}"\nfps = 20\n')
    out = tmp_path / "rows.jsonl"
    result = invoke("--config", cfg, "--bundle", batch_bundle, "--backend", "onnxruntime-cpu", "--threads", 1,
                    "--jsonl", out, "-q")
    assert result.exit_code == 0, result.output
    rows = rows_by_stream(out)
    assert {sid: [r["frame"] for r in mine] for sid, mine in rows.items()} == {"fast": [0, 1, 2], "slow": [0, 1, 2]}
    slow = [r["ts"] for r in rows["slow"]]
    assert slow[2] - slow[0] >= 0.09  # its fps: two periods of 50 ms between its first and third frame


def test_a_config_with_several_sources_runs_them_with_its_batching(batch_bundle: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "edge.toml"
    cfg.write_text(f'[[sources]]\nid = "a"\nuri = "{synth(3)}"\n\n[[sources]]\nid = "b"\nuri = "{synth(4)}"\n\n'
                   f'[[sources]]\nid = "c"\nuri = "{synth(5)}"\n\n'
                   "[batching]\nmax_batch_size = 2\npreferred_batch_sizes = [2]\nmax_queue_delay_ms = 1\n")
    out = tmp_path / "rows.jsonl"
    result = invoke("--config", cfg, "--bundle", batch_bundle, "--backend", "onnxruntime-cpu", "--threads", 1,
                    "--jsonl", out)
    assert result.exit_code == 0, result.output
    rows = rows_by_stream(out)
    assert {sid: [r["frame"] for r in mine] for sid, mine in rows.items()} == \
        {sid: list(range(FRAMES)) for sid in ("a", "b", "c")}
    assert all(r["info"]["batch"]["size"] <= 2 for mine in rows.values() for r in mine)
    assert "batches of up to 2" in said(result)


def test_a_bundle_fixed_at_batch_1_runs_the_streams_one_frame_per_call_with_a_note(bundle: Path,  # noqa: F811
                                                                                   tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    result = invoke(synth(1), synth(2), "--bundle", bundle, "--backend", "onnxruntime-cpu", "--threads", 1,
                    "--jsonl", out)
    assert result.exit_code == 0, result.output
    text = said(result)
    assert "takes at most 1 frame(s) per call" in text and "edge-sdk build --max-batch 2" in text, text
    rows = rows_by_stream(out)
    assert {sid: [r["frame"] for r in mine] for sid, mine in rows.items()} == {"0": list(range(FRAMES)),
                                                                              "1": list(range(FRAMES))}
    assert {r["info"]["batch"]["size"] for mine in rows.values() for r in mine} == {1}
    assert "batches of up to 1" in text


def boxes(rows: List[Dict[str, Any]]) -> List[List[Any]]:
    return [[(d["class_id"], d["xyxy"], d["score"]) for d in r["detections"]] for r in rows]


def alone(batch_bundle: Path, tmp_path: Path, uri: str, mode: str, *extra: Any) -> List[Dict[str, Any]]:
    """The oracle: one source through the single-stream pipeline in `mode`, its rows."""
    out = tmp_path / f"alone-{mode}-{len(list(tmp_path.iterdir()))}.jsonl"
    result = invoke(uri, "--mode", mode, "--bundle", batch_bundle, "--backend", "onnxruntime-cpu", "--threads", 1,
                    "--jsonl", out, "-q", *extra)
    assert result.exit_code == 0, result.output
    return rows_by_stream(out)["0"]


def test_mode_roi_on_several_sources_finds_per_stream_what_each_finds_alone(batch_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    result = invoke(synth(1), synth(2), "--mode", "roi", "--bundle", batch_bundle, "--backend", "onnxruntime-cpu",
                    "--threads", 1, "--jsonl", out, "-q", "--no-cache")
    assert result.exit_code == 0, result.output
    rows = rows_by_stream(out)
    for sid, seed in (("0", 1), ("1", 2)):
        assert [r["frame"] for r in rows[sid]] == list(range(FRAMES))
        assert {r["info"]["mode"] for r in rows[sid]} == {"roi"}
        assert boxes(rows[sid]) == boxes(alone(batch_bundle, tmp_path, synth(seed), "roi", "--no-cache"))


def test_each_source_of_a_config_runs_its_own_mode_and_roi_settings(batch_bundle: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "edge.toml"
    cfg.write_text(f'[[sources]]\nid = "a"\nuri = "{synth(3)}"\nmode = "tiles"\n\n'
                   f'[[sources]]\nid = "b"\nuri = "{synth(4)}"\nmode = "roi"\n[sources.roi]\nsweep_tiles = 3\n\n'
                   f'[[sources]]\nid = "c"\nuri = "{synth(5)}"\n')
    out = tmp_path / "rows.jsonl"
    result = invoke("--config", cfg, "--bundle", batch_bundle, "--backend", "onnxruntime-cpu", "--threads", 1,
                    "--jsonl", out, "-q", "--no-cache")
    assert result.exit_code == 0, result.output
    rows = rows_by_stream(out)
    assert {r["info"]["mode"] for r in rows["a"]} == {"tiles"}
    assert {r["info"]["mode"] for r in rows["b"]} == {"roi"}
    assert boxes(rows["a"]) == boxes(alone(batch_bundle, tmp_path, synth(3), "tiles", "--no-cache"))
    one = tmp_path / "one.toml"
    one.write_text('[roi]\nsweep_tiles = 3\n')
    assert boxes(rows["b"]) == boxes(alone(batch_bundle, tmp_path, synth(4), "roi", "--config", one, "--no-cache"))
    assert boxes(rows["c"]) == boxes(alone(batch_bundle, tmp_path, synth(5), "full", "--no-cache"))


@pytest.mark.parametrize("table, message", [
    ("[batching]\nmax_batch_size = 3\n", r"takes at most 2: rebuild the bundle with `edge-sdk build --max-batch 3`"),
    ('[[sources]]\nid = "z"\nuri = "synthetic://faces"\nmode = "roi"\n[sources.roi]\nroi_min_size = 0\n',
     r"sources\[2\].roi.roi_min_size must be an integer in \[1, 65536\], got 0"),
    ("[batching]\npreferred_batch_sizes = [2, 1]\n", r"batching.preferred_batch_sizes must be sorted and unique"),
    ("[batching]\nframes_in_flight = 5\n", r"batching.frames_in_flight must be at most pool_size - 2 = 2"),
])
def test_what_several_sources_cannot_run_is_refused_with_exit_2(batch_bundle: Path, tmp_path: Path, table: str,
                                                                message: str) -> None:
    cfg = tmp_path / "edge.toml"
    cfg.write_text(f'{table}\n[[sources]]\nid = "a"\nuri = "{synth(1)}"\n\n[[sources]]\nid = "b"\nuri = "{synth(2)}"\n')
    if "[[sources]]" in table:  # the third source first: keep the tables in one list
        cfg.write_text(f'[[sources]]\nid = "a"\nuri = "{synth(1)}"\n\n[[sources]]\nid = "b"\nuri = "{synth(2)}"\n\n{table}')
    result = invoke("--config", cfg, "--bundle", batch_bundle, "--backend", "onnxruntime-cpu", "-q")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert re.search(message, said(result)), result.output


def test_save_video_with_several_sources_is_refused_before_a_bundle_is_read(tmp_path: Path) -> None:
    result = invoke(synth(1), synth(2), "--bundle", tmp_path / "no-bundle-here", "--save-video", tmp_path / "v.avi")
    assert result.exit_code == 2, result.output
    assert "--save-video writes one source's frames" in said(result)


def test_without_source_or_config_the_fix_is_named(tmp_path: Path) -> None:
    result = invoke("--bundle", tmp_path / "no-bundle-here")
    assert result.exit_code == 2, result.output
    assert "no SOURCE: give one or more" in said(result)


def test_a_config_without_a_source_uri_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "edge.toml"
    cfg.write_text("max_frames = 2\n")
    result = invoke("--config", cfg, "--bundle", tmp_path / "no-bundle-here")  # a bundle error would be exit 8
    assert result.exit_code == 9, result.output  # as an empty SOURCE argument: a source error
    assert "empty source URI; pass a file, a folder, csi://0" in said(result)


def test_loop_applies_to_the_config_s_own_sources(batch_bundle: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "edge.toml"
    cfg.write_text(f'max_frames = 4\n\n[[sources]]\nid = "a"\nuri = "{synth(1, 3)}"\n\n'
                   f'[[sources]]\nid = "b"\nuri = "{synth(2, 3)}"\n')
    out = tmp_path / "rows.jsonl"
    result = invoke("--config", cfg, "--loop", "--bundle", batch_bundle, "--backend", "onnxruntime-cpu",
                    "--threads", 1, "--jsonl", out, "-q")
    assert result.exit_code == 0, result.output
    # three frames a pass: the fourth of each stream is the first of its second pass
    assert {sid: len(mine) for sid, mine in rows_by_stream(out).items()} == {"a": 4, "b": 4}


def test_a_source_that_cannot_be_opened_is_reported_and_the_others_run_on(batch_bundle: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.avi"
    broken.write_bytes(b"not a video at all" * 64)
    cfg = tmp_path / "edge.toml"
    cfg.write_text("[reconnect]\ninitial_s = 0\nmax_attempts = 2\n")
    out = tmp_path / "rows.jsonl"
    result = invoke("good=" + synth(1), f"bad={broken}", "--config", cfg, "--bundle", batch_bundle,
                    "--backend", "onnxruntime-cpu", "--threads", 1, "--jsonl", out)
    assert result.exit_code == 0, result.output
    rows = rows_by_stream(out)
    assert list(rows) == ["good"] and [r["frame"] for r in rows["good"]] == list(range(FRAMES))
    text = said(result)
    assert re.search(r"stream bad: frames 0 · 0\.0 FPS · latency - · dropped 0 · source errors \d+ · given_up", text), text
    assert "stream bad: source given up after 2 failures in a row" in text, text
    assert re.search(r"stream good: frames 5 ·", text), text
