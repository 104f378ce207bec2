"""Bundle writing: atomic, checksummed, readable by the runtime, never partial."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from detector_factory import make_detector

from edge_sdk.builder.bundle import CALIB_KEY, calib_tensor_format, check_output_dir, encode_calib_tensor, write_bundle
from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import Bundle
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host

MANIFEST = {
    "schema_version": 1,
    "model": {"name": "tiny", "source_sha256": "0" * 64},
    "inputs": [{"name": "input.1", "shape": [1, 3, 64, 96]}],
    "decoder": {"type": "centerface"},
    "precision": "fp32",
}


def stored(path: Path) -> np.ndarray:
    with np.load(path) as data:
        assert list(data.keys()) == [CALIB_KEY]
        return data[CALIB_KEY]


def test_writes_files_with_checksums_and_loads(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    tensors = [np.full((1, 3, 4, 4), i, np.float32) for i in range(3)]
    bundle = write_bundle(out, MANIFEST, {"fp32": make_detector()}, {"calib.cache": "TRT-8502-EntropyCalibration2\n"}, tensors)
    files = json.loads((out / "manifest.json").read_text())["files"]
    assert sorted(files) == ["calib.cache", "calib/0000.npz", "calib/0001.npz", "calib/0002.npz", "model.onnx"]
    assert all(sha256_file(out / rel) == digest for rel, digest in files.items())
    assert stored(out / "calib" / "0002.npz").tolist() == tensors[2].tolist()
    assert bundle.model_path("fp32") == out / "model.onnx"
    assert Bundle.load(out).inputs[0].name == "input.1"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _pixels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (1, 3, 8, 12)).astype(np.float32)


@pytest.mark.parametrize(
    "make, dtype",
    [
        (lambda: _pixels(), np.uint8),  # raw 0..255 pixels (mean 0, scale 1)
        (lambda: (_pixels() - 127.5) / 128.0, np.float16),  # exact in float16
        (lambda: _pixels() / 255.0, np.float32),  # 1/255 steps round in float16
        (lambda: _pixels() + 0.5, np.float16),  # not integers, but halves are exact in float16
        (lambda: np.full((1, 3, 2, 2), 300.0, np.float32), np.float16),  # integers above 255
        (lambda: np.full((1, 3, 2, 2), 0.1234567, np.float32), np.float32),
    ],
)
def test_calibration_tensors_are_stored_in_the_smallest_exact_dtype(tmp_path: Path, make, dtype) -> None:
    tensor = make().astype(np.float32)
    assert encode_calib_tensor(tensor).dtype == dtype
    write_bundle(tmp_path / "b", MANIFEST, {"fp32": make_detector()}, calib_tensors=[tensor])
    back = stored(tmp_path / "b" / "calib" / "0000.npz")
    assert back.dtype == dtype
    assert np.array_equal(back.astype(np.float32), tensor)  # the device's float32 cast rebuilds it bit for bit


def test_uint8_pixels_take_a_quarter_of_float32_or_less(tmp_path: Path) -> None:
    tensor = np.zeros((1, 3, 96, 160), np.float32)
    tensor[..., 20:70, :] = _pixels(1)[..., :1, :1]  # letterbox-like: flat bands compress
    write_bundle(tmp_path / "b", MANIFEST, {"fp32": make_detector()}, calib_tensors=[tensor])
    assert (tmp_path / "b" / "calib" / "0000.npz").stat().st_size <= tensor.nbytes / 4


def test_calib_tensor_format_tells_the_device_how_to_rebuild() -> None:
    spec = InputSpec(name="input.1", shape=[1, 3, 8, 12])
    fmt = calib_tensor_format([_pixels(), _pixels() / 255.0], spec)
    assert (fmt["count"], fmt["dtype"], fmt["dtypes"]) == (2, "float32", ["uint8", "float32"])
    assert (fmt["mean"], fmt["scale"]) == ([0.0] * 3, [1.0] * 3) and "cast to float32" in fmt["values"]


def test_failure_leaves_no_partial_bundle_and_keeps_the_old_one(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    write_bundle(out, MANIFEST, {"fp32": make_detector()})
    before = sha256_file(out / "manifest.json")

    class Exploding:
        def SerializeToString(self) -> bytes:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_bundle(out, dict(MANIFEST, precision="fp16"), {"fp32": make_detector(), "fp16": Exploding()})
    assert sha256_file(out / "manifest.json") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_unknown_variant_is_rejected_before_writing(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="unknown model variants"):
        write_bundle(tmp_path / "b", MANIFEST, {"int4": make_detector()})
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("kind", ["file", "foreign folder"])
def test_output_that_is_not_a_bundle_is_refused(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("x")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="--out"):
        check_output_dir(out)
    assert out.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_parent_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            check_output_dir(locked / "bundle")
    finally:
        locked.chmod(0o700)


def test_parent_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="not a folder|is a file"):
        check_output_dir(tmp_path / "f" / "bundle")


def test_existing_bundle_or_empty_folder_may_be_replaced(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty")
    write_bundle(tmp_path / "b", MANIFEST, {"fp32": make_detector()})
    check_output_dir(tmp_path / "b")
