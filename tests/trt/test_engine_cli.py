"""`edge-sdk engine BUNDLE` through Typer's CliRunner, with a fake TensorRT installed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.trt import engine as engine_mod
from fakes.fake_tensorrt import decode_engine
from trt_bundles import ORIN


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_build_then_cache_hit(runner, on_xavier, make_bundle, cache_dir) -> None:
    bundle = make_bundle()
    args = ["engine", str(bundle), "--precision", "int8", "--cache-dir", str(cache_dir), "--json"]
    first = _json(runner.invoke(app, args))
    assert first["cached"] is False and Path(first["engine"]).parent == cache_dir
    assert first["key"] == {"bundle_hash": first["key"]["bundle_hash"], "tensorrt": "8.5.2.2", "sm": "7.2", "precision": "int8", "dla_core": None}
    assert first["plan"]["int8_mode"] == "calibration" and first["calibration"]["cache_read"].endswith("calib.cache")
    second = _json(runner.invoke(app, args))
    assert second["cached"] is True and second["engine"] == first["engine"]
    assert on_xavier.engines_built() == 1


def test_flags_reach_the_builder(runner, on_xavier, make_bundle, cache_dir, tmp_path: Path) -> None:
    timing, saved = tmp_path / "t.cache", tmp_path / "out" / "model.engine"
    out = _json(runner.invoke(app, [
        "engine", str(make_bundle()), "--precision", "best", "--dla-core", "0", "--workspace", "512",
        "--timing-cache", str(timing), "--cache-dir", str(cache_dir), "--recalibrate", "--save-engine", str(saved), "--json",
    ]))
    record = decode_engine(saved.read_bytes())
    assert record["flags"] == ["FP16", "GPU_FALLBACK", "INT8", "PREFER_PRECISION_CONSTRAINTS"]
    assert (record["device_type"], record["dla_core"], record["pool_limits"]) == ("DLA", 0, {"WORKSPACE": 512 << 20})
    assert record["int8"]["source"] == "calibrator" and out["calibration"]["batches"] == 3
    assert timing.is_file() and out["saved"] == str(saved)


def test_human_output(runner, on_xavier, make_bundle, cache_dir) -> None:
    result = runner.invoke(app, ["engine", str(make_bundle()), "--precision", "fp16", "--cache-dir", str(cache_dir)])
    assert result.exit_code == 0, result.output
    assert "engine: " in result.stdout and "built in" in result.stdout and "TensorRT 8.5.2.2" in result.stdout


def test_missing_tensorrt(runner, no_trt, make_bundle, cache_dir) -> None:
    result = runner.invoke(app, ["engine", str(make_bundle()), "--cache-dir", str(cache_dir)])
    assert result.exit_code == 3
    assert "python3-libnvinfer" in result.output and 'edge-sdk[trt]' in result.output


@pytest.mark.parametrize(
    "args, code, text",
    [
        (["--precision", "fp32", "--dla-core", "0"], 2, "FP16 and INT8 only"),
        (["--dla-core", "5"], 7, "--dla-core 5 does not exist"),
        (["--workspace", "-1"], 2, "--workspace"),
    ],
)
def test_bad_requests_exit_with_the_error_code(runner, on_xavier, make_bundle, cache_dir, args, code, text) -> None:
    result = runner.invoke(app, ["engine", str(make_bundle()), "--cache-dir", str(cache_dir)] + args)
    assert result.exit_code == code, result.output
    assert text in result.output


def test_not_a_bundle(runner, on_xavier, tmp_path: Path) -> None:
    result = runner.invoke(app, ["engine", str(tmp_path / "nothing")])
    assert result.exit_code == 8 and "manifest.json is missing" in result.output


def test_no_gpu(runner, on_xavier, monkeypatch, make_bundle, cache_dir) -> None:
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: None)
    result = runner.invoke(app, ["engine", str(make_bundle()), "--cache-dir", str(cache_dir)])
    assert result.exit_code == 10 and "no NVIDIA GPU" in result.output


def test_bundle_for_another_gpu_builds_for_this_one_with_a_note(runner, on_xavier, monkeypatch, make_bundle, cache_dir) -> None:
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: ORIN)
    result = runner.invoke(app, ["engine", str(make_bundle()), "--precision", "fp16", "--cache-dir", str(cache_dir), "--json"])
    out = _json(result)
    assert out["key"]["sm"] == "8.7" and any("made for SM 7.2" in n for n in out["notes"])
