"""The calibrator's logic (CalibrationFeed) and the TensorRT subclass made around it."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import pytest

from edge_sdk.errors import BackendError, CalibrationError
from edge_sdk.trt.calibrator import (
    CalibrationFeed,
    algorithm_from_header,
    calibration_tensors,
    calibrator_for,
    make_calibrator,
    version_code,
)
from fakes.fake_tensorrt import FakeDeviceMemory, FakeTensorRT10, FakeTensorRT11, FakeTensorRT85

SHAPE = (3, 2, 2)


@pytest.mark.parametrize("version, code", [("8.5.2.2", 8502), ("8.6.1", 8601), ("10.3.0.26", 100300), ("10.3", 100300), ("11.0.0.1", 110000), ("8.5", 8500)])
def test_version_code(version: str, code: int) -> None:
    assert version_code(version) == code


@pytest.mark.parametrize(
    "algorithm, expected",
    [
        ("entropy", ("IInt8EntropyCalibrator2", "EntropyCalibration2")),
        ("percentile", ("IInt8EntropyCalibrator2", "EntropyCalibration2")),
        ("minmax", ("IInt8MinMaxCalibrator", "MinMaxCalibration")),
    ],
)
def test_calibrator_for(algorithm: str, expected) -> None:
    assert calibrator_for(algorithm) == expected


def test_unknown_algorithm_is_a_calibration_error() -> None:
    with pytest.raises(CalibrationError, match="kl-magic"):
        calibrator_for("kl-magic")


@pytest.mark.parametrize(
    "header, algorithm",
    [("TRT-8502-EntropyCalibration2", "entropy"), ("TRT-8502-MinMaxCalibration\n", "minmax"), ("TRT-8502-LegacyCalibration", None), ("garbage", None)],
)
def test_algorithm_from_header(header: str, algorithm) -> None:
    assert algorithm_from_header(header) == algorithm


def _tensors(folder: Path, counts: List[int]) -> List[Path]:
    """Files with `count` samples each; sample values count up 1, 2, 3, ... across files."""
    (folder / "calib").mkdir(parents=True)
    value = 1.0
    for i, count in enumerate(counts):
        arr = np.stack([np.full(SHAPE, value + k, np.float32) for k in range(count)])
        value += count
        np.save(str(folder / "calib" / f"{i:03d}.npy"), arr[0] if count == 1 else arr)
    return calibration_tensors(folder)


def _feed(paths, batch: int, memory: FakeDeviceMemory, **kw) -> CalibrationFeed:
    feed = CalibrationFeed(paths, "input.1", (batch,) + SHAPE, "entropy", "8.5.2.2", allocate=memory.allocate, **kw)
    feed.prepare()
    return feed


def _drain(feed: CalibrationFeed, memory: FakeDeviceMemory) -> List[List[float]]:
    batches = []
    while True:
        ptrs = feed.next_batch(["input.1"])
        if ptrs is None:
            return batches
        batches.append([float(s[0, 0, 0]) for s in memory.read(ptrs[0], feed.input_shape)])


@pytest.mark.parametrize(
    "counts, batch, expected",
    [
        ([1, 1, 1, 1, 1], 1, [[1], [2], [3], [4], [5]]),
        ([1, 1, 1, 1, 1], 2, [[1, 2], [3, 4]]),
        ([2, 3], 2, [[1, 2], [3, 4]]),
        ([4], 4, [[1, 2, 3, 4]]),
    ],
)
def test_feed_packs_samples_in_file_order(tmp_path: Path, counts, batch: int, expected) -> None:
    memory = FakeDeviceMemory()
    feed = _feed(_tensors(tmp_path, counts), batch, memory)
    assert feed.batch_size == batch
    assert _drain(feed, memory) == expected
    assert memory.allocations == 1 and memory.uploads == len(expected)  # one buffer, reused
    assert ("dropped" in " ".join(feed.notes)) == (sum(counts) % batch != 0)
    feed.close()
    assert memory.freed == 1 and not memory.blocks


@pytest.mark.parametrize("dtype, container", [(np.uint8, "npz"), (np.uint8, "npy"), (np.float16, "npz"), (np.float32, "npy")])
def test_feed_casts_stored_tensors_to_float32_exactly(tmp_path: Path, dtype, container: str) -> None:
    # Bundles store raw 0..255 pixels as uint8 (in a compressed .npz); TensorRT gets float32.
    pixels = np.random.default_rng(0).integers(0, 256, (2,) + SHAPE).astype(dtype)
    folder = tmp_path / "calib"
    folder.mkdir()
    if container == "npz":
        np.savez_compressed(str(folder / "0000.npz"), tensor=pixels)
    else:
        np.save(str(folder / "0000.npy"), pixels)
    memory = FakeDeviceMemory()
    feed = _feed(calibration_tensors(tmp_path), 2, memory)
    ptrs = feed.next_batch(["input.1"])
    assert ptrs is not None
    uploaded = np.asarray(memory.read(ptrs[0], feed.input_shape))
    assert uploaded.dtype == np.float32
    assert np.array_equal(uploaded, pixels.astype(np.float32))
    assert feed.files_fed == [f"0000.{container}"]


def test_calibration_tensors_lists_npz_and_npy_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "calib"
    folder.mkdir()
    for name in ("0001.npz", "0000.npy", "notes.txt", "0002.npz"):
        (folder / name).write_bytes(b"x")
    assert [p.name for p in calibration_tensors(tmp_path)] == ["0000.npy", "0001.npz", "0002.npz"]


def test_feed_rejects_a_tensor_of_the_wrong_shape(tmp_path: Path) -> None:
    paths = _tensors(tmp_path, [1])
    np.save(str(paths[0]), np.zeros((3, 4, 4), np.float32))
    feed = _feed(paths, 1, FakeDeviceMemory())
    with pytest.raises(CalibrationError, match="000.npy has shape"):
        feed.next_batch(["input.1"])


def test_feed_rejects_an_unreadable_tensor(tmp_path: Path) -> None:
    paths = _tensors(tmp_path, [1])
    paths[0].write_bytes(b"not numpy")
    with pytest.raises(CalibrationError, match="unreadable"):
        _feed(paths, 1, FakeDeviceMemory()).next_batch(["input.1"])


def test_feed_rejects_other_input_names(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="single-input"):
        _feed(_tensors(tmp_path, [1]), 1, FakeDeviceMemory()).next_batch(["images", "mask"])


def test_feed_rejects_integer_tensors_other_than_uint8(tmp_path: Path) -> None:
    (tmp_path / "calib").mkdir()
    np.save(str(tmp_path / "calib" / "0000.npy"), np.zeros((1,) + SHAPE, np.int32))
    with pytest.raises(CalibrationError, match="expected float or uint8"):
        _feed(calibration_tensors(tmp_path), 1, FakeDeviceMemory()).next_batch(["input.1"])


@pytest.mark.parametrize(
    "header, usable",
    [("TRT-8502-EntropyCalibration2", True), ("TRT-8601-EntropyCalibration2", False), ("TRT-8502-MinMaxCalibration", False)],
)
def test_cache_is_handed_over_only_when_its_header_matches(tmp_path: Path, header: str, usable: bool) -> None:
    cache = tmp_path / "calib.cache"
    cache.write_text(header + "\ninput.1: 3c010a14\n")
    feed = _feed(_tensors(tmp_path, [1]), 1, FakeDeviceMemory(), cache_in=cache)
    feed.check()
    assert feed.cache_usable() is usable
    assert feed.read_cache() == (cache.read_bytes() if usable else None)
    assert bool(feed.notes) is (not usable)  # a mismatch is said out loud


def test_check_fails_early_when_there_is_nothing_to_calibrate_from(tmp_path: Path) -> None:
    cache = tmp_path / "calib.cache"
    cache.write_text("TRT-8601-EntropyCalibration2\n")
    feed = CalibrationFeed([], "input.1", (1,) + SHAPE, "entropy", "8.5.2.2", cache_in=cache)
    with pytest.raises(CalibrationError, match="TRT-8502-EntropyCalibration2"):
        feed.check()


def test_write_cache_goes_to_cache_out(tmp_path: Path) -> None:
    out = tmp_path / "dev" / "x.calib.cache"
    feed = _feed(_tensors(tmp_path, [1]), 1, FakeDeviceMemory(), cache_out=out)
    feed.write_cache(memoryview(b"TRT-8502-EntropyCalibration2\na: 3f800000\n"))
    assert out.read_bytes().startswith(b"TRT-8502-EntropyCalibration2\n")
    assert feed.cache_written == str(out)


@pytest.mark.parametrize("fake_cls", [FakeTensorRT85, FakeTensorRT10])
@pytest.mark.parametrize("algorithm, base", [("entropy", "FakeIInt8EntropyCalibrator2"), ("minmax", "FakeIInt8MinMaxCalibrator")])
def test_make_calibrator_derives_from_the_right_tensorrt_class(tmp_path: Path, fake_cls, algorithm: str, base: str) -> None:
    trt = fake_cls()
    feed = CalibrationFeed(_tensors(tmp_path, [2]), "input.1", (1,) + SHAPE, algorithm, trt.__version__, allocate=trt.device_memory.allocate)
    feed.prepare()
    calib = make_calibrator(trt, feed)
    assert type(calib).__mro__[1].__name__ == base
    assert calib.get_batch_size() == 1
    assert calib.get_batch(["input.1"]) is not None and calib.get_batch(["input.1"]) is not None
    assert calib.get_batch(["input.1"]) is None


def test_make_calibrator_on_tensorrt_without_implicit_int8(tmp_path: Path) -> None:
    feed = CalibrationFeed([], "input.1", (1,) + SHAPE, "entropy", "11.0.0")
    with pytest.raises(BackendError, match="Q/DQ"):
        make_calibrator(FakeTensorRT11(), feed)


def test_callback_errors_are_kept_for_the_build_to_raise(tmp_path: Path) -> None:
    trt = FakeTensorRT85()
    feed = CalibrationFeed(_tensors(tmp_path, [1]), "input.1", (1,) + SHAPE, "entropy", trt.__version__, allocate=trt.device_memory.allocate)
    calib = make_calibrator(trt, feed)
    assert calib.get_batch(["wrong"]) is None  # TensorRT is told to stop...
    assert isinstance(feed.error, CalibrationError)  # ...and the reason is kept
