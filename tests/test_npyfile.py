"""A bundle's .npz files are checked from their headers before any array is read: a small file
that decompresses to hundreds of megabytes, or a header that declares 112 GiB, gives a typed
error while the memory traced stays far below what the file declares (tracemalloc sees numpy's
allocations). Checked where the bundle's arrays are read: `verify`'s reference.npz and the INT8
calibrator's calib/*.npz."""
from __future__ import annotations

import io
import re
import json
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import numpy as np
import pytest

from edge_sdk.errors import BundleError, CalibrationError
from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import Bundle
from edge_sdk.npyfile import npz_headers
from edge_sdk.trt import calibrator
from edge_sdk.trt.calibrator import CalibrationFeed, calibration_tensors
from edge_sdk.verify import load_reference

from tiny_bundle import HEIGHT, WIDTH, make_tiny_bundle

OUTPUTS = (("heatmap", 1), ("scale", 2), ("offset", 2), ("landmarks", 10))
IMAGES = 2
MIB = 1 << 20


def npy_header(dtype: Any, shape: Tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                "fortran_order": False, "shape": shape})
    return buf.getvalue()


def write_npz(path: Path, arrays: Dict[str, np.ndarray], bombs: Dict[str, Tuple[Any, Tuple[int, ...]]] = {},
              lies: Dict[str, Tuple[Any, Tuple[int, ...]]] = {}) -> Path:
    """An .npz of `arrays`, plus `bombs` (name: (dtype, shape) of zeros, streamed through deflate
    1 MiB at a time: small on disk, never whole in this process) and `lies` (a header alone,
    declaring the shape, in a member that holds nothing else)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for name, array in arrays.items():
            buf = io.BytesIO()
            np.save(buf, array)
            zf.writestr(name + ".npy", buf.getvalue())
        for name, (dtype, shape) in bombs.items():
            left = int(np.prod(shape)) * np.dtype(dtype).itemsize
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                f.write(npy_header(dtype, shape))
                zeros = bytes(MIB)
                while left:
                    f.write(zeros[: min(left, MIB)])
                    left -= min(left, MIB)
        for name, (dtype, shape) in lies.items():
            zf.writestr(name + ".npy", npy_header(dtype, shape))
    return path


def add_files(root: Path, files: Dict[str, bytes], **manifest: Any) -> Bundle:
    """Write `files` into the bundle and list them (with their sha256) in its manifest."""
    data = json.loads((root / "manifest.json").read_text())
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
        data["files"][rel] = sha256_file(root / rel)
    data.update(manifest)
    (root / "manifest.json").write_text(json.dumps(data))
    return Bundle.load(root)


def reference_arrays() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        "inputs": rng.integers(0, 256, (IMAGES, 3, HEIGHT, WIDTH)).astype(np.uint8),
        "transforms": np.tile(np.array([1, 1, 0, 0, WIDTH, HEIGHT], np.float32), (IMAGES, 1)),
        "output_names": np.array([n for n, _ in OUTPUTS]),
    }
    for k, (_, c) in enumerate(OUTPUTS):
        arrays[f"output_{k}"] = rng.random((IMAGES, c, HEIGHT // 4, WIDTH // 4)).astype(np.float16)
    return arrays


def peak_while(call: Callable[[], Any]) -> Tuple[int, BaseException]:
    """(peak bytes traced, the exception `call` raised)."""
    tracemalloc.start()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test asserts its type
        raised = exc
    else:
        raised = AssertionError("nothing was raised")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, raised


def test_a_sound_reference_is_read(tmp_path: Path) -> None:
    arrays = reference_arrays()
    npz = write_npz(tmp_path / "ref.npz", arrays).read_bytes()
    bundle = add_files(make_tiny_bundle(tmp_path / "b"), {"reference.npz": npz})
    ref = load_reference(bundle)
    assert ref.images == IMAGES and ref.output_names == [n for n, _ in OUTPUTS]
    assert np.array_equal(ref.inputs[1][0], arrays["inputs"][1].astype(np.float32))
    assert np.array_equal(ref.outputs[0][3][0], arrays["output_3"][0].astype(np.float32))


@pytest.mark.parametrize("hostile", [
    # an output of 96 MiB once decompressed (under 1 MB on disk): the manifest says (1, 1, 8, 8)
    {"bombs": {"output_0": (np.float16, (IMAGES, 1, 8, 3 * MIB))}},
    # the gate inputs of a larger network: 96 MiB of uint8
    {"bombs": {"inputs": (np.uint8, (IMAGES, 3, 4096, 4096))}},
    # 1 KB on disk, a header declaring 112 GiB
    {"lies": {"inputs": (np.float32, (1000, 3, 3162, 3162))}},
    # an extra array nobody reads, 96 MiB of zeros
    {"bombs": {"junk": (np.uint8, (96 * MIB,))}},
])
def test_a_hostile_reference_is_refused_from_its_headers(tmp_path: Path, hostile: Dict[str, Any]) -> None:
    arrays = reference_arrays()
    for name in list(hostile.get("bombs", {})) + list(hostile.get("lies", {})):
        arrays.pop(name, None)
    path = write_npz(tmp_path / "ref.npz", arrays, **hostile)
    assert path.stat().st_size < MIB
    bundle = add_files(make_tiny_bundle(tmp_path / "b"), {"reference.npz": path.read_bytes()})
    peak, raised = peak_while(lambda: load_reference(bundle))
    assert isinstance(raised, BundleError), repr(raised)
    assert "reference.npz" in str(raised)
    assert peak < 16 * MIB, f"{peak / MIB:.0f} MiB traced while refusing"


@pytest.mark.parametrize("hostile", [
    {"bombs": {"tensor": (np.float32, (8, 3, HEIGHT, WIDTH * 256))}},  # 96 MiB of another shape
    {"bombs": {"tensor": (np.float32, (8192, 3, HEIGHT, WIDTH))}},  # 96 MiB of samples, over the budget
    {"lies": {"tensor": (np.float32, (1000, 3, 3162, 3162))}},  # 112 GiB declared in 1 KB
])
def test_a_hostile_calibration_tensor_is_refused_from_its_header(tmp_path: Path, hostile: Dict[str, Any],
                                                                monkeypatch) -> None:
    monkeypatch.setattr(calibrator, "CALIB_FILE_MAX_BYTES", 64 * MIB, raising=False)  # 256 MiB by default
    (tmp_path / "calib").mkdir()
    path = write_npz(tmp_path / "calib" / "0000.npz", {}, **hostile)
    assert path.stat().st_size < MIB
    feed = CalibrationFeed(calibration_tensors(tmp_path), "input", (1, 3, HEIGHT, WIDTH), "entropy", "8.5.2.2")
    samples = feed._iter_samples()
    peak, raised = peak_while(lambda: next(samples))
    assert isinstance(raised, CalibrationError) and "0000.npz" in str(raised), repr(raised)
    assert peak < 16 * MIB, f"{peak / MIB:.0f} MiB traced while refusing"


def test_headers_are_read_without_the_data(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "x.npz", {"a": np.zeros((2, 3), np.float16)}, bombs={"b": (np.uint8, (96 * MIB,))})
    tracemalloc.start()
    try:
        headers = npz_headers(path, 1 << 30, BundleError)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert {k: (h.dtype.name, h.shape) for k, h in headers.items()} == {"a": ("float16", (2, 3)), "b": ("uint8", (96 * MIB,))}
    assert peak < 8 * MIB
    with pytest.raises(BundleError, match="budget"):
        npz_headers(path, 64 * MIB, BundleError)


@pytest.mark.parametrize("member, message", [
    (np.lib.format.MAGIC_PREFIX + b"\x01\x00" + (60000).to_bytes(2, "little") + b" " * 100, "header of 60000 bytes"),
    (np.lib.format.MAGIC_PREFIX + b"\x02\x00" + (1 << 31).to_bytes(4, "little"), "header of 2147483648 bytes"),
    (np.lib.format.MAGIC_PREFIX + b"\x03\x00" + b"\x10\x00", "unsupported .npy format version"),
    (npy_header(np.dtype([("a", "O")]), (4,)), "not of plain numbers"),
    (npy_header(np.float32, (4,)) + b"\0" * 12, "16 bytes) in a member of 12 data bytes"),
    (b"PK not numpy at all", "unreadable as a .npy array"),
])
def test_a_hostile_member_header_is_a_typed_error(tmp_path: Path, member: bytes, message: str) -> None:
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.npy", member)
    with pytest.raises(BundleError, match=re.escape(message)):
        npz_headers(path, 1 << 30, BundleError)
