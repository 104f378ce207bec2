"""`edge-sdk build` end to end through Typer's CliRunner: a tiny detector for speed, the real
CenterFace once (slow). Every bad input exits non-zero with a message and leaves no bundle."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import List

import pytest
from detector_factory import TINY_HW, make_detector, tiny_build_args, write_images
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.manifest import Bundle

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")


def invoke(args: List[str], cwd: Path):
    old = os.getcwd()
    os.chdir(cwd)  # edge.toml is looked up in the working directory
    try:
        return CliRunner().invoke(app, args)
    finally:
        os.chdir(old)


def output_of(result) -> str:
    """stdout and stderr together (what a user sees)."""
    return result.output


def test_fp32_build_writes_a_loadable_bundle(tmp_path: Path, detector_path: Path) -> None:
    out = tmp_path / "bundle"
    result = invoke(tiny_build_args(detector_path, out, None, "--precision", "fp32", "--json"), tmp_path)
    assert result.exit_code == 0, output_of(result)
    summary = json.loads(result.stdout)
    bundle = Bundle.load(out)
    assert bundle.variants() == ["fp32"]
    assert summary["variants"]["fp32"]["file"] == "model.onnx"
    assert bundle.inputs[0].shape == [1, 3, TINY_HW[0], TINY_HW[1]]
    assert bundle.manifest["target"] == {"name": "xavier-nx", "sm": "7.2", "tensorrt": "8.5.2", "quantization": "implicit"}
    assert bundle.manifest["graph"]["optimized"]["nodes"] < bundle.manifest["graph"]["source"]["nodes"]
    assert "calibration" not in bundle.manifest
    assert "edge-sdk engine" in summary["engine_message"]


def test_int8_build_passes_the_gate_and_writes_every_file(tmp_path: Path, detector_path: Path, calib_dir: Path) -> None:
    out = tmp_path / "bundle"
    # the tiny detector passes its 4 gate images with percentile ranges; the default (minmax) was chosen on CenterFace
    result = invoke(tiny_build_args(detector_path, out, calib_dir, "--precision", "int8", "--calib-method", "percentile",
                                    "--json"), tmp_path)
    assert result.exit_code == 0, output_of(result)
    summary = json.loads(result.stdout)
    bundle = Bundle.load(out)
    m = bundle.manifest
    assert bundle.variants() == ["fp32", "fp16", "int8"]
    assert {"calib.cache", "ranges.json", "model.int8.qdq.onnx"} <= set(m["files"])
    assert len([f for f in m["files"] if f.startswith("calib/")]) == m["calibration"]["tensors_kept"] == 8
    assert (out / "calib.cache").read_text().startswith("TRT-8502-")
    # 16 images: every 4th by name to the gate, the ones 2 after them to the fallback search
    split = m["calibration"]["split"]
    assert m["calibration"]["samples"] == split["calibration"]["images"] == 8
    assert split["search"]["images"] == 4 and split["gate"]["images"] == m["calibration"]["held_back"] == 4
    assert split["gate"]["reference_detections"] == m["accuracy"]["int8"]["reference_detections"] >= 8
    assert split["search"]["reference_detections"] >= 8
    assert m["calibration"]["tensors"]["count"] == 8 and m["calibration"]["tensors"]["dtype"] in ("uint8", "float16", "float32")
    assert m["accuracy"]["int8"]["f1_vs_fp32"] >= 0.97 and m["accuracy"]["int8"]["gate"]["passed"]
    assert m["accuracy"]["fp16"]["reference_detections"] >= 8
    assert set(m["int8"]["layer_precisions"].values()) <= {"int8", "fp32"}
    assert set(m["calibration"]["coverage"]["clipped_fraction"]) >= {"feat_relu"}
    assert summary["gate"]["passed"] and summary["precision"] == "int8"


def test_gate_trips_on_an_all_black_calibration_set(tmp_path: Path, detector_path: Path) -> None:
    # Held-back images (every 4th by name) show bright squares; the calibration images are black,
    # so the calibrated ranges miss the live range and INT8 loses the detections.
    calib = write_images(tmp_path / "black", 16, black_except_every=4)
    out = tmp_path / "bundle"
    result = invoke(tiny_build_args(detector_path, out, calib, "--int8-fallback", "off", "--calib-method", "minmax"), tmp_path)
    assert result.exit_code == 6, output_of(result)
    assert "below the gate" in output_of(result) and "--allow-accuracy-loss" in output_of(result)
    assert "--int8-fallback auto" in output_of(result)
    assert not out.exists()
    allowed = invoke(tiny_build_args(detector_path, out, calib, "--int8-fallback", "off", "--calib-method", "minmax",
                                     "--allow-accuracy-loss", "--json"), tmp_path)
    assert allowed.exit_code == 0, output_of(allowed)
    m = Bundle.load(out).manifest
    assert m["accuracy"]["int8"]["gate"]["passed"] is False
    assert m["accuracy"]["int8"]["f1_vs_fp32"] < 0.97
    assert max(m["calibration"]["coverage"]["clipped_fraction"].values()) > 0.01
    assert any("calibration coverage" in w for w in json.loads(allowed.stdout)["warnings"])


def test_edge_toml_supplies_the_settings(tmp_path: Path, detector_path: Path, calib_dir: Path) -> None:
    (tmp_path / "edge.toml").write_text(
        f'model = "{detector_path.name}"\n[input]\nsize = "{TINY_HW[1]}x{TINY_HW[0]}"\n'
        '[decoder]\ntype = "centerface"\n[build]\nprecision = "fp16"\nout = "from-toml"\ncalib = "calib"\n'
    )
    result = invoke(["build", "--json"], tmp_path)
    assert result.exit_code == 0, output_of(result)
    bundle = Bundle.load(tmp_path / "from-toml")
    assert bundle.variants() == ["fp32", "fp16"] and bundle.manifest["precision"] == "fp16"
    assert bundle.decoder["type"] == "centerface"


def broken_file(tmp_path: Path) -> Path:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"this is not a protobuf" * 10)
    return path


def custom_op_file(tmp_path: Path) -> Path:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 96])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 64, 96])
    node = helper.make_node("FancyNorm", ["x"], ["y"], domain="com.example")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "custom.onnx"
    onnx.save(model, str(path))
    return path


def tiny_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.onnx"
    onnx.save(make_detector(), str(path))
    return path


def empty_dir(tmp_path: Path) -> Path:
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def unreadable_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "unreadable"
    folder.mkdir()
    for i in range(16):
        (folder / f"{i:02d}.jpg").write_bytes(b"not a jpeg")
    return folder


def truncated_jpeg_among_images(tmp_path: Path) -> Path:
    """16 good images and one JPEG cut short (libjpeg would decode it with grey rows)."""
    import cv2
    import numpy as np

    folder = write_images(tmp_path / "cut", 16)
    path = folder / "007b.jpg"
    cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 256, (96, 144, 3), dtype=np.uint8))
    path.write_bytes(path.read_bytes()[:-300])
    return folder


def huge_png_among_images(tmp_path: Path) -> Path:
    """16 good images and a real, valid 8000×7000 PNG (56 megapixels; 250 kB on disk)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    folder = write_images(tmp_path / "huge", 16)
    z = zlib.compressobj(1)
    idat = b"".join(z.compress(b"\0" * 8001) for _ in range(7000)) + z.flush()
    (folder / "007b.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8000, 7000, 8, 0, 0, 0, 0))
                                      + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return folder


CASES = {
    # name: (model factory, extra args factory, exit code, message)
    "corrupt model": (broken_file, lambda t: [], 4, "broken.onnx is not a readable ONNX model"),
    "unsupported op": (custom_op_file, lambda t: ["--input-name", "x"], 4, "com.example::FancyNorm"),
    "wrong input name": (tiny_file, lambda t: ["--input-name", "images"], 2, "no input 'images'.*input.1"),
    "unknown target": (tiny_file, lambda t: ["--target", "jetson-nano-9000"], 7, "unknown target 'jetson-nano-9000'"),
    "empty calibration folder": (tiny_file, lambda t: ["--calib", str(empty_dir(t))], 5, "has no images"),
    "missing calibration folder": (tiny_file, lambda t: ["--calib", str(t / "nope")], 5, "does not exist"),
    "unreadable calibration images": (tiny_file, lambda t: ["--calib", str(unreadable_dir(t))], 5, "cannot read image"),
    "truncated calibration image": (tiny_file, lambda t: ["--calib", str(truncated_jpeg_among_images(t))], 5,
                                    r"007b\.jpg is truncated .*remove it from the calibration folder"),
    "calibration image above the pixel cap": (tiny_file, lambda t: ["--calib", str(huge_png_among_images(t))], 5,
                                              r"007b\.png is 8000×7000 .*above the limit of 50 megapixels"),
    "too few calibration images": (tiny_file, lambda t: ["--calib", str(write_images(t / "few", 5))], 5, "too few calibration images: 5"),
    "bad precision": (tiny_file, lambda t: ["--precision", "int4"], 2, "precision must be one of"),
    "bad input size": (tiny_file, lambda t: ["--input-size", "wide"], 2, "WIDTHxHEIGHT"),
    "unknown decoder": (tiny_file, lambda t: ["--decoder", "magic"], 2, "unknown decoder type 'magic'"),
    "dla on a target without": (tiny_file, lambda t: ["--target", "orin-nano", "--dla-core", "0"], 7, "has 0 DLA core"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_cleanly_without_a_bundle(tmp_path: Path, case: str) -> None:
    make_model, extra, code, message = CASES[case]
    model = make_model(tmp_path)
    out = tmp_path / "bundle"
    args = ["build", str(model), "--out", str(out), "--input-size", f"{TINY_HW[1]}x{TINY_HW[0]}", "--decoder", "centerface"]
    args = [a for a in args if not (case == "unknown decoder" and a == "centerface")]
    if case == "unknown decoder":
        args.remove("--decoder")
    result = invoke(args + extra(tmp_path), tmp_path)
    text = output_of(result)
    assert result.exit_code == code, text
    assert "error:" in text
    assert re.search(message, text), text
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle")]


@pytest.mark.parametrize("kind", ["parent is a file", "folder that is not a bundle", "web project with a manifest.json",
                                  "bundle with a file of its own", "mount point"])
def test_unwritable_out_fails_before_any_work(tmp_path: Path, detector_path: Path, kind: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_sdk.builder import pipeline

    out = tmp_path / "mine"
    if kind == "parent is a file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "bundle"
    elif kind == "folder that is not a bundle":
        out.mkdir()
        (out / "thesis.tex").write_text("precious")
    elif kind == "web project with a manifest.json":
        (out / "src").mkdir(parents=True)
        (out / "manifest.json").write_text('{"name": "app", "start_url": "/"}')
        (out / "important.txt").write_text("precious")
        (out / "src" / "app.js").write_text("precious")
    elif kind == "bundle with a file of its own":
        assert invoke(tiny_build_args(detector_path, out, None, "--precision", "fp32"), tmp_path).exit_code == 0
        (out / "important.txt").write_text("precious")
    else:
        out.mkdir()
        monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} if out.is_dir() else {}

    def no_work(*args, **kwargs):
        raise AssertionError("the build started before --out was checked")

    monkeypatch.setattr(pipeline.graph_mod, "model_from_path", no_work)
    result = invoke(tiny_build_args(detector_path, out, None, "--precision", "fp32"), tmp_path)
    assert result.exit_code == 2, output_of(result)
    assert "--out" in output_of(result) or "cannot" in output_of(result)
    if kind == "mount point":
        assert "is a mount point" in output_of(result) and "use a folder inside it" in output_of(result)
    after = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} if out.is_dir() else {}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".mine")]


def test_help_documents_every_flag() -> None:
    result = CliRunner().invoke(app, ["build", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in ("--target", "--out", "--precision", "--calib", "--calib-method", "--input-name", "--input-size",
                 "--mean", "--scale", "--color", "--decoder", "--dla-core", "--workspace", "--timing-cache",
                 "--min-f1", "--search-margin", "--allow-accuracy-loss", "--int8-fallback", "--max-calib-images", "--json"):
        assert flag in result.output, flag
    assert "edge-sdk engine" in result.output


@pytest.mark.slow
def test_real_centerface_int8_passes_the_gate(tmp_path: Path, centerface_model_path: Path) -> None:
    """The default build on the repository's calibration images: INT8 f1_vs_fp32 >= 0.97 on gate
    images that neither the calibration nor the FP32-fallback search has seen."""
    out = tmp_path / "bundle"
    result = invoke(["build", str(centerface_model_path), "--out", str(out), "--input-size", "640x384",
                     "--decoder", "centerface", "--json"], tmp_path)
    assert result.exit_code == 0, output_of(result)
    m = Bundle.load(out).manifest
    split = m["calibration"]["split"]
    assert split["gate"]["reference_detections"] == m["accuracy"]["int8"]["reference_detections"] >= 150
    assert split["search"]["reference_detections"] >= 100
    assert split["calibration"]["images"] + split["search"]["images"] + split["gate"]["images"] == 56
    assert m["accuracy"]["int8"]["f1_vs_fp32"] >= 0.97 and m["accuracy"]["int8"]["gate"]["passed"]
    assert m["int8"]["search_f1"] >= m["int8"]["search_target"] == 0.98  # the search aims 0.01 above the gate
    assert m["accuracy"]["fp16"]["f1_vs_fp32"] >= 0.97
    assert m["calibration"]["tensors"]["dtype"] == "uint8"  # raw pixels: a quarter of float32
    # three model variants (~7 MB each), the calibration tensors and verify's reference.npz (8 gate
    # images as uint8 inputs plus FP32's float16 outputs, ~7 MB): 34.2 MB when measured
    sizes = {f: (out / f).stat().st_size for f in m["files"]}
    assert sizes["reference.npz"] < 9e6 and sum(sizes.values()) < 36e6, sizes
    assert m["model"]["source_sha256"] == "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc"
    assert m["precision"] == "int8"
