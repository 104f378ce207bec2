"""TensorRT calibration cache: exact float32 round trip, known encodings, clear errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.builder import calib_cache as cc
from edge_sdk.errors import CalibrationError
from edge_sdk.targets import get_target

pytestmark = pytest.mark.host


@pytest.mark.parametrize(
    "scale, text",
    [(1.0, "3f800000"), (0.5, "3f000000"), (2.0, "40000000"), (-1.0, "bf800000"), (1 / 127, "3c010204")],
)
def test_known_encodings(scale: float, text: str) -> None:
    assert cc.scale_to_hex(scale) == text
    assert cc.hex_to_scale(text) == float(np.float32(scale))


def test_round_trip_gives_float32_of_amax_over_127(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ranges = {f"t{i}": float(v) for i, v in enumerate(rng.uniform(1e-3, 300, 50))}
    ranges.update({"input.1": 255.0, "537": 0.9, "x:0": 3.5})  # a name with a colon survives too
    header = get_target("xavier-nx").calib_cache_header(cc.cache_algorithm("entropy"))
    path = tmp_path / "calib.cache"
    cc.write_calib_cache(path, ranges, header)
    got_header, scales = cc.read_calib_cache(path)
    assert got_header == "TRT-8502-EntropyCalibration2"
    assert list(scales) == list(ranges)
    for name, amax in ranges.items():
        assert scales[name] == float(np.float32(amax / 127.0))
    assert path.read_text().splitlines()[1] == "t0: " + cc.scale_to_hex(ranges["t0"] / 127)
    assert [p.name for p in tmp_path.iterdir()] == ["calib.cache"]  # no temporary file left behind


@pytest.mark.parametrize(
    "method, algorithm",
    [("entropy", "EntropyCalibration2"), ("percentile", "EntropyCalibration2"), ("minmax", "MinMaxCalibration")],
)
def test_cache_algorithm_names_the_device_calibrator(method: str, algorithm: str) -> None:
    assert cc.cache_algorithm(method) == algorithm
    assert cc.CALIBRATORS[algorithm].startswith("IInt8")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("TRT-8502\nx: 3f800000\n", "line 1"),
        ("TRT-8502-EntropyCalibration2\nx 3f800000\n", "line 2"),
        ("TRT-8502-EntropyCalibration2\nx: 3f80000g\n", "line 2"),
        ("TRT-8502-EntropyCalibration2\nx: 3f8000000\n", "line 2"),
        ("TRT-8502-EntropyCalibration2\n: 3f800000\n", "line 2"),
        ("TRT-8502-EntropyCalibration2\nx: 3f800000\n\nx: 3f800000\n", "line 4.*twice"),
    ],
)
def test_malformed_cache_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.cache"
    path.write_text(text)
    with pytest.raises(CalibrationError, match=message):
        cc.read_calib_cache(path)


def test_blank_lines_and_missing_final_newline_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ok.cache"
    path.write_text("TRT-8502-MinMaxCalibration\n\ninput.1: 3c010204\n537: 3f800000")
    header, scales = cc.read_calib_cache(path)
    assert header == "TRT-8502-MinMaxCalibration"
    assert scales == {"input.1": float(np.float32(1 / 127)), "537": 1.0}


@pytest.mark.parametrize(
    "ranges, header, message",
    [
        ({"x": 0.0}, "TRT-8502-EntropyCalibration2", "positive"),
        ({"x": float("nan")}, "TRT-8502-EntropyCalibration2", "positive"),
        ({"a\nb": 1.0}, "TRT-8502-EntropyCalibration2", "multi-line"),
        ({"x": 1.0}, "EntropyCalibration2", "header"),
    ],
)
def test_unwritable_caches_raise(tmp_path: Path, ranges, header: str, message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        cc.write_calib_cache(tmp_path / "c.cache", ranges, header)
    assert not (tmp_path / "c.cache").exists()


def test_unknown_method_raises() -> None:
    with pytest.raises(CalibrationError, match="unknown calibration method"):
        cc.cache_algorithm("kl")


def test_scales_written_without_leading_zeros_are_read(tmp_path: Path) -> None:
    """TensorRT prints the scale's bits as hex without leading zeros. 0x0ff00000: sign 0,
    exponent 0x1f = 31, mantissa 0x700000 / 2**23 = 0.875 -> 1.875 * 2**(31 - 127)."""
    path = tmp_path / "calib.cache"
    path.write_text("TRT-8502-EntropyCalibration2\ninput.1: ff00000\n537: 3f800000\n")
    header, scales = cc.read_calib_cache(path)
    assert header == "TRT-8502-EntropyCalibration2"
    assert scales == {"input.1": 1.875 * 2.0 ** -96, "537": 1.0}
