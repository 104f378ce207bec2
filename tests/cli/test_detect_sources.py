"""`edge-sdk detect SOURCE [SOURCE ...]`: ids from `ID=URI` or the position, checked as the config
checks `[[sources]]`; bad ones are refused (exit 2) before any bundle is built; one named source
runs and every JSONL row carries its id. Real ONNX Runtime. Several sources running together:
test_detect_streams.py."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edge_sdk.cli.detect import source_overrides, split_sources
from edge_sdk.errors import ConfigError
from test_detect import bundle, invoke  # noqa: F401 (bundle: a fixture)

SYNTH = "synthetic://faces?width=96&height=64&count=1&min_size=8&max_size=16"


@pytest.mark.parametrize("values, expected", [
    (["door=rtsp://cam-door/stream"], [("door", "rtsp://cam-door/stream")]),
    ([SYNTH], [("0", SYNTH)]),  # the "=" of a query string comes after ":" and "/": a plain URI
    (["a.mp4", "yard_2=b.mp4", "c.mp4"], [("0", "a.mp4"), ("yard_2", "b.mp4"), ("2", "c.mp4")]),
    (["./x=y.mp4"], [("0", "./x=y.mp4")]),  # a file whose name holds "=": written as a path
    (["cam-1=synthetic://faces?fps=5"], [("cam-1", "synthetic://faces?fps=5")]),
])
def test_ids_come_from_the_argument_or_its_position(values: list, expected: list) -> None:
    assert split_sources(values) == expected


def test_an_id_without_a_uri_is_refused() -> None:
    with pytest.raises(ConfigError, match="SOURCE 'door=': no URI after the id; write ID=URI"):
        split_sources(["door="])


def test_one_plain_source_stays_the_one_source_and_anything_else_is_tables() -> None:
    assert source_overrides(["clip.mp4"], True, 5.0) == {"source": {"uri": "clip.mp4", "loop": True, "fps": 5.0}}
    assert source_overrides(["door=clip.mp4"], False, None) == {"sources": [{"id": "door", "uri": "clip.mp4"}]}
    assert source_overrides(["a.mp4", "b.mp4"], True, None) == \
        {"sources": [{"id": "0", "uri": "a.mp4", "loop": True}, {"id": "1", "uri": "b.mp4", "loop": True}]}


@pytest.mark.parametrize("args, message", [
    ([SYNTH, SYNTH, "--save-video", "x.avi"], "--save-video writes one source's frames"),
    (["door=" + SYNTH, "door=" + SYNTH], "sources\\[1\\].id 'door' is the id of an earlier source"),
    (["x" * 65 + "=" + SYNTH], "sources\\[0\\].id must have at most 64 characters"),
    (["door="], "no URI after the id"),
])
def test_bad_sources_exit_2_before_any_bundle_is_read(tmp_path: Path, args: list, message: str) -> None:
    result = invoke(*args, "--bundle", tmp_path / "no-bundle-here")  # a bundle error would be exit 8
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert re.search(message, result.output.replace("\n", " ")), result.output


def test_one_named_source_runs_and_each_row_carries_its_id(bundle: Path,  # noqa: F811
                                                          tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    result = invoke("door=" + SYNTH, "--bundle", bundle, "--backend", "onnxruntime-cpu", "--max-frames", 3,
                    "--jsonl", out, "-q")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["stream"], r["frame"]) for r in rows] == [("door", 0), ("door", 1), ("door", 2)]


def test_sources_on_the_command_line_replace_the_config_files(bundle: Path,  # noqa: F811
                                                             tmp_path: Path) -> None:
    cfg = tmp_path / "edge.toml"
    cfg.write_text(f'[[sources]]\nid = "a"\nuri = "{SYNTH}"\n\n[[sources]]\nid = "b"\nuri = "{SYNTH}"\n')
    out = tmp_path / "rows.jsonl"
    result = invoke(SYNTH, "--config", cfg, "--bundle", bundle, "--backend", "onnxruntime-cpu", "--max-frames", 2,
                    "--jsonl", out, "-q")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["stream"] for line in out.read_text().splitlines()] == ["0", "0"]


def test_several_sources_with_what_takes_one_are_refused_before_the_default_bundle_is_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_sdk import default_bundle

    built: list = []
    monkeypatch.setattr(default_bundle, "ensure_default_bundle", lambda *a, **k: built.append(a) or "unused")
    result = invoke(SYNTH, SYNTH, "--mode", "tiles", "--save-video", "x.avi")
    assert result.exit_code == 2 and "writes one source's frames" in result.output.replace("\n", " "), result.output
    assert built == []  # building the default bundle takes a minute: nothing was started
