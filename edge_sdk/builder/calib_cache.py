"""TensorRT calibration cache: the text file ``trtexec --calib=`` and an INT8 calibrator read.

::

    TRT-8502-EntropyCalibration2
    input.1: 3c010a14
    537: 3d9f2c71

The first line is ``TRT-<major*1000 + minor*100 + patch>-<algorithm>``; each further line is
``<tensor name>: <scale>``, the scale (``amax / 127``) written as the big-endian hex of its
IEEE-754 float32. TensorRT ignores a cache whose version or algorithm differs from the
calibrator it runs, so the algorithm in the header must name the calibrator the device uses:

=============  ==========================  ===========================
method         device calibrator           header algorithm
=============  ==========================  ===========================
entropy        IInt8EntropyCalibrator2     ``EntropyCalibration2``
percentile     IInt8EntropyCalibrator2     ``EntropyCalibration2``
minmax         IInt8MinMaxCalibrator       ``MinMaxCalibration``
=============  ==========================  ===========================

A percentile cache carries the entropy calibrator's name: TensorRT has no percentile
calibrator, and with a cache present it reads the scales instead of calibrating, whatever
method produced them.
"""
from __future__ import annotations

import re
import struct
from typing import Dict, Mapping, Tuple

import numpy as np

from edge_sdk.errors import CalibrationError
from edge_sdk.fsutil import PathLike, atomic_write_text

ALGORITHMS = {
    "entropy": "EntropyCalibration2",
    "percentile": "EntropyCalibration2",
    "minmax": "MinMaxCalibration",
}
# The device-side calibrator class for each header algorithm.
CALIBRATORS = {
    "EntropyCalibration2": "IInt8EntropyCalibrator2",
    "MinMaxCalibration": "IInt8MinMaxCalibrator",
    "EntropyCalibration": "IInt8EntropyCalibrator",
    "LegacyCalibration": "IInt8LegacyCalibrator",
}
_HEADER = re.compile(r"^TRT-(\d+)-([A-Za-z0-9]+)$")
_HEX = re.compile(r"^[0-9a-fA-F]{1,8}$")


def cache_algorithm(method: str) -> str:
    """The header algorithm for a calibration method (see the table in the module docstring)."""
    try:
        return ALGORITHMS[method]
    except KeyError:
        raise CalibrationError(f"unknown calibration method {method!r}; choose one of {', '.join(ALGORITHMS)}") from None


def scale_to_hex(scale: float) -> str:
    """Big-endian hex of the float32 nearest to `scale` (``1.0 -> "3f800000"``)."""
    return struct.pack(">f", float(np.float32(scale))).hex()


def hex_to_scale(text: str) -> float:
    """Inverse of :func:`scale_to_hex`; shorter hex strings are left-padded with zeros."""
    return float(struct.unpack(">f", bytes.fromhex(text.zfill(8)))[0])


def parse_header(header: str) -> Tuple[int, str]:
    """``"TRT-8502-EntropyCalibration2" -> (8502, "EntropyCalibration2")``; CalibrationError otherwise."""
    match = _HEADER.match(header.strip())
    if not match:
        raise CalibrationError(f"calibration cache header {header!r} is not TRT-<version>-<algorithm> (e.g. TRT-8502-EntropyCalibration2)")
    return int(match.group(1)), match.group(2)


def format_calib_cache(ranges: Mapping[str, float], header: str) -> str:
    """The cache text for ``{tensor: amax}``: scales are float32(amax / 127), one line each."""
    parse_header(header)
    lines = [header.strip()]
    for name, amax in ranges.items():
        if not name or "\n" in name or "\r" in name:
            raise CalibrationError(f"tensor name {name!r} cannot be written to a calibration cache (empty or multi-line)")
        amax = float(amax)
        if not np.isfinite(amax) or amax <= 0:
            raise CalibrationError(f"tensor {name!r} has range {amax}; a calibration cache needs a positive finite amax")
        lines.append(f"{name}: {scale_to_hex(amax / 127.0)}")
    return "\n".join(lines) + "\n"


def write_calib_cache(path: PathLike, ranges: Mapping[str, float], header: str) -> None:
    """Write the cache atomically. `header`: e.g. ``Target.calib_cache_header(cache_algorithm(method))``."""
    atomic_write_text(path, format_calib_cache(ranges, header))


def read_calib_cache(path: PathLike) -> Tuple[str, Dict[str, float]]:
    """``(header, {tensor: scale})`` from a cache file; CalibrationError naming the line when malformed."""
    try:
        text = open(path, "r", encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"cannot read calibration cache {path}: {exc}") from exc
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise CalibrationError(f"calibration cache {path} is empty; rebuild it with `edge-sdk build`")
    header = lines[0].strip()
    try:
        parse_header(header)
    except CalibrationError as exc:
        raise CalibrationError(f"{path}, line 1: {exc}") from None
    scales: Dict[str, float] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        name, sep, value = line.rpartition(":")
        value = value.strip()
        if not sep or not name or not _HEX.match(value):
            raise CalibrationError(f"{path}, line {number}: expected '<tensor>: <8 hex digits>', got {line!r}")
        if name in scales:
            raise CalibrationError(f"{path}, line {number}: tensor {name!r} appears twice")
        scales[name] = hex_to_scale(value)
    return header, scales
