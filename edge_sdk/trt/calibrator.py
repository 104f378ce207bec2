"""INT8 calibration on the device with TensorRT's own calibrator (TensorRT 8.x implicit INT8).

The builder ships two things in the bundle: `calib.cache` (the scales it computed, in
TensorRT's cache format) and `calib/*.npz` (a bounded subset of the calibration images,
already preprocessed by the runtime's code, stored as uint8 when the values are raw 0..255
pixels, else float16 or float32 where exact; each is cast back to float32 before upload). TensorRT first asks the calibrator for a cache:
the shipped one is handed over when its header matches this TensorRT and this calibrator, so
no calibration runs. With `--recalibrate` (caches moved between GPUs have lost accuracy,
NVIDIA/TensorRT #2036), or when the header does not match, TensorRT calibrates itself on the
shipped tensors, batch by batch, and the cache it writes is kept next to the engines, never
inside the bundle (whose checksums must stay valid).

`CalibrationFeed` holds all of that logic in plain Python; the TensorRT subclass made by
`make_calibrator` only forwards to it, because `tensorrt` is imported lazily and a class cannot
derive from `IInt8EntropyCalibrator2` before it is imported.

CUDA: calibration batches go to the GPU through the SDK's CUDA layer (`edge_sdk.cuda`), which
works in the device's *primary* context (cuda-python's runtime, or pycuda's retained primary context,
never `pycuda.autoinit`, which would create a second context whose pointers TensorRT, working
in the primary one, cannot use). The layer is opened and the batch buffers allocated by
`CalibrationFeed.prepare()`, before the build starts; `get_batch` only copies.

TensorRT calls the calibrator through trampolines that catch a Python exception, print it and
carry on as if calibration had ended (TensorRT 8.5.2 `python/src/infer/pyInt8.cpp`): an error
raised there would be lost, and TensorRT would build an engine from the batches it got so far.
So each callback logs its error, keeps it on the feed, and the build raises it afterwards.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk import npyfile
from edge_sdk.errors import BackendError, CalibrationError, EdgeSdkError
from edge_sdk.fsutil import atomic_write_bytes
from edge_sdk.targets import trt_version_code

log = logging.getLogger(__name__)

# manifest calibration algorithm -> (TensorRT calibrator class, cache header algorithm name)
CALIBRATORS = {
    "entropy": ("IInt8EntropyCalibrator2", "EntropyCalibration2"),
    "percentile": ("IInt8EntropyCalibrator2", "EntropyCalibration2"),
    "minmax": ("IInt8MinMaxCalibrator", "MinMaxCalibration"),
}
_HEADER_ALGORITHMS = {"EntropyCalibration2": "entropy", "MinMaxCalibration": "minmax"}
_HEADER = re.compile(r"^TRT-(\d+)-(\w+)$")

CALIB_DIR = "calib"
CALIB_CACHE = "calib.cache"
# What one calibration file may hold once decompressed (the builder writes one sample a file);
# checked from its header before it is read.
CALIB_FILE_MAX_BYTES = 256 << 20


def calibrator_for(algorithm: str) -> Tuple[str, str]:
    """(TensorRT calibrator class name, cache header algorithm) for a manifest algorithm."""
    try:
        return CALIBRATORS[algorithm]
    except KeyError:
        raise CalibrationError(
            f"unknown calibration algorithm {algorithm!r} in the manifest; expected one of {', '.join(CALIBRATORS)}"
        ) from None


def algorithm_from_header(header: str) -> Optional[str]:
    """'TRT-8502-MinMaxCalibration' -> 'minmax' (None when unknown)."""
    m = _HEADER.match(header.strip())
    return _HEADER_ALGORITHMS.get(m.group(2)) if m else None


def version_code(version: str) -> int:
    """TensorRT's cache version number: '8.5.2.2' -> 8502, '10.3.0.26' -> 100300."""
    return trt_version_code(version)


def calibration_tensors(bundle_root: Path) -> List[Path]:
    """The shipped preprocessed calibration tensors (`.npz`, or `.npy` from older bundles), in
    the order they are fed (file name)."""
    folder = Path(bundle_root) / CALIB_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".npz", ".npy") and p.is_file())


def load_tensor(path: Path, sample_shape: Optional[Sequence[int]] = None) -> np.ndarray:
    """One calibration file as stored: a `.npy` array, or the single array of a `.npz`. Its
    header is checked before anything is read (edge_sdk.npyfile): uint8 or float values within
    CALIB_FILE_MAX_BYTES and, with `sample_shape`, of shape (k, *sample_shape) or sample_shape.
    CalibrationError naming the file otherwise."""
    path = Path(path)
    if path.suffix == ".npy":
        header = npyfile.npy_header(path, CALIB_FILE_MAX_BYTES, CalibrationError)
        _check_tensor_header(path, header, sample_shape)
        return npyfile.read_npy(path, header, CalibrationError)
    headers = npyfile.npz_headers(path, CALIB_FILE_MAX_BYTES, CalibrationError)
    if len(headers) != 1:
        raise CalibrationError(f"calibration tensor {path} is unreadable (expected one array, found {len(headers)}); "
                               "copy the bundle again")
    header = next(iter(headers.values()))
    _check_tensor_header(path, header, sample_shape)
    return next(iter(npyfile.read_npz(path, headers, CalibrationError).values()))


def _check_tensor_header(path: Path, header: npyfile.ArrayHeader, sample_shape: Optional[Sequence[int]]) -> None:
    shape = header.shape
    want = tuple(int(d) for d in sample_shape) if sample_shape is not None else None
    wrong_shape = want is not None and shape != want and shape[1:] != want
    if wrong_shape or not (header.dtype.kind == "f" or header.dtype == np.uint8):
        expected = f"(k, {', '.join(map(str, want))})" if want is not None else "an array"
        raise CalibrationError(
            f"calibration tensor {path} has shape {shape} {header.dtype}, expected float or uint8 {expected} "
            "matching the manifest input; rebuild the bundle"
        )


# --- device memory: the one place the calibrator touches CUDA --------------------------------


class DeviceBuffer:
    """A device allocation the calibrator fills batch by batch. Subclasses: one per CUDA binding."""

    ptr: int = 0

    def upload(self, host: np.ndarray) -> None:
        raise NotImplementedError

    def free(self) -> None:
        raise NotImplementedError


class CudaBatchBuffer(DeviceBuffer):
    """A batch buffer made with the SDK's CUDA layer: page-locked host memory, device memory
    and a stream, allocated once; `upload` copies a batch and waits for the copy."""

    def __init__(self, cuda: Any, nbytes: int) -> None:
        self._cuda = cuda
        self.nbytes = int(nbytes)
        self._host = cuda.alloc_host((self.nbytes,), np.uint8, mapped=False)
        try:
            self._device = cuda.alloc_device(self.nbytes)
        except Exception:
            cuda.free_host(self._host)
            raise
        self._stream = cuda.create_stream()
        self.ptr = int(self._device.ptr)

    def upload(self, host: np.ndarray) -> None:
        if host.nbytes != self.nbytes or not host.flags["C_CONTIGUOUS"]:
            raise ValueError(f"a calibration batch of {host.nbytes} bytes does not fit the buffer of {self.nbytes}")
        self._host.array[:] = host.reshape(-1).view(np.uint8)
        self._cuda.copy_htod(self._device, self._host, self.nbytes, self._stream)
        self._cuda.synchronize(self._stream)

    def free(self) -> None:
        if self.ptr:
            self.ptr = 0
            self._cuda.free_device(self._device)
            self._cuda.free_host(self._host)
            self._cuda.destroy_stream(self._stream)


def open_calibration_cuda() -> Any:
    """The SDK's CUDA layer, in the device's primary context (shared with TensorRT).

    CudaError (exit 10) naming what to install when neither cuda-python nor pycuda finds a GPU.
    """
    from edge_sdk import cuda

    return cuda.require_cuda("auto")


def allocate_device_buffer(nbytes: int, cuda: Any = None) -> DeviceBuffer:
    """Device memory for calibration batches, through the CUDA layer (opened here if not given)."""
    return CudaBatchBuffer(cuda if cuda is not None else open_calibration_cuda(), nbytes)


# --- the calibrator's logic ------------------------------------------------------------------


class CalibrationFeed:
    """Everything a TensorRT calibrator does, without TensorRT.

    Tensors are fed in the order given, one sample per `.npy` file of shape (C, H, W) or
    (k, C, H, W), packed into batches of `input_shape[0]`; a last incomplete batch is dropped
    (TensorRT needs full batches). The host batch and the device buffer are allocated once.
    """

    def __init__(
        self,
        tensors: Sequence[Path],
        input_name: str,
        input_shape: Sequence[int],
        algorithm: str,
        tensorrt_version: str,
        cache_in: Optional[Path] = None,
        cache_out: Optional[Path] = None,
        allocate: Optional[Callable[[int], DeviceBuffer]] = None,
    ) -> None:
        self.tensors = [Path(p) for p in tensors]
        self.input_name = input_name
        self.input_shape = tuple(int(v) for v in input_shape)
        self.algorithm = algorithm
        self.class_name, header_algorithm = calibrator_for(algorithm)
        self.expected_header = f"TRT-{version_code(tensorrt_version)}-{header_algorithm}"
        self.cache_in = Path(cache_in) if cache_in is not None else None
        self.cache_out = Path(cache_out) if cache_out is not None else None
        self._allocate = allocate or allocate_device_buffer
        self._host = np.empty(self.input_shape, dtype=np.float32)
        self._device: Optional[DeviceBuffer] = None
        self._samples = self._iter_samples()
        self.batches_fed = 0
        self.files_fed: List[str] = []
        self.cache_read: Optional[str] = None  # path of the cache handed to TensorRT
        self.cache_written: Optional[str] = None
        self.notes: List[str] = []
        # An exception raised inside a TensorRT callback cannot cross TensorRT's C++ frames
        # reliably: the callback stores it, tells TensorRT to stop, and the build re-raises it.
        self.error: Optional[BaseException] = None

    @property
    def batch_size(self) -> int:
        return self.input_shape[0]

    @property
    def will_calibrate(self) -> bool:
        """True when TensorRT will ask for batches: no usable cache to hand over."""
        return not self.cache_usable()

    def prepare(self) -> None:
        """Allocate the batch buffer now, before the build starts, when TensorRT will calibrate:
        `get_batch` then only copies (no CUDA context or allocation happens inside TensorRT's
        callback). Call after `check()`."""
        if self._device is None and self.will_calibrate:
            self._device = self._allocate(self._host.nbytes)

    def cache_usable(self) -> bool:
        """True when `cache_in` exists and its header matches this TensorRT and calibrator."""
        if self.cache_in is None or not self.cache_in.is_file():
            return False
        first = self.cache_in.read_text(errors="replace").split("\n", 1)[0].strip()
        return first == self.expected_header

    def check(self) -> None:
        """Fail before the (long) build when TensorRT would be left with nothing to calibrate from."""
        if self.cache_usable():
            return
        if self.cache_in is not None and self.cache_in.is_file():
            first = self.cache_in.read_text(errors="replace").split("\n", 1)[0].strip()
            self.notes.append(
                f"{self.cache_in.name} header {first!r} does not match this TensorRT ({self.expected_header}); "
                "calibrating on the device with the shipped tensors"
            )
        if not self.tensors:
            raise CalibrationError(
                "INT8 needs calibration, but the bundle has no usable calibration cache for this TensorRT "
                f"(expected header {self.expected_header}) and no calib/*.npy tensors: rebuild the bundle with "
                "`edge-sdk build --precision int8`, or use --precision fp16"
            )
        if len(self.tensors) < self.batch_size:
            raise CalibrationError(
                f"{len(self.tensors)} calibration tensors cannot fill one batch of {self.batch_size}; "
                "rebuild the bundle with more calibration images"
            )

    # TensorRT's calibrator interface, forwarded by the subclass
    def read_cache(self) -> Optional[bytes]:
        if not self.cache_usable():
            return None
        assert self.cache_in is not None
        self.cache_read = str(self.cache_in)
        return self.cache_in.read_bytes()

    def write_cache(self, cache: Any) -> None:
        data = bytes(cache)
        if self.cache_out is None:
            return
        atomic_write_bytes(self.cache_out, data)
        self.cache_written = str(self.cache_out)

    def next_batch(self, names: Sequence[str]) -> Optional[List[int]]:
        if self._device is None:
            refused = f"TensorRT refused {self.cache_in.name} and " if self.cache_in is not None else "TensorRT "
            raise CalibrationError(
                f"{refused}asked for calibration batches, but no batch buffer was prepared before the build "
                "(CalibrationFeed.prepare); run `edge-sdk engine BUNDLE --recalibrate` to calibrate on the device"
            )
        if list(names) != [self.input_name]:
            raise CalibrationError(
                f"the network asks calibration data for inputs {list(names)}, the bundle's input is {self.input_name!r}; "
                "calibration supports single-input models whose input matches the manifest"
            )
        for i in range(self.batch_size):
            sample = next(self._samples, None)
            if sample is None:
                if i:
                    self.notes.append(f"dropped a last incomplete calibration batch of {i} samples")
                return None
            self._host[i] = sample
        self._device.upload(self._host)
        self.batches_fed += 1
        return [self._device.ptr]

    def fail(self, callback: str, exc: BaseException) -> None:
        """Record an error raised inside a TensorRT callback (the first one wins) and log it."""
        log.error("INT8 calibrator: %s() failed: %s", callback, exc)
        if self.error is not None:
            return
        if isinstance(exc, EdgeSdkError):
            self.error = exc
        else:
            self.error = CalibrationError(f"the INT8 calibrator failed in {callback}(): {type(exc).__name__}: {exc}")
            self.error.__cause__ = exc

    def close(self) -> None:
        if self._device is not None:
            self._device.free()
            self._device = None

    def _iter_samples(self):
        want = self.input_shape[1:]
        for path in self.tensors:
            arr = load_tensor(path, want)  # CalibrationError naming the file
            if arr.ndim == len(want):
                arr = arr[None]
            self.files_fed.append(path.name)
            for sample in arr:
                yield sample  # next_batch copies it into the float32 host batch: uint8/float16 -> float32 is exact


def make_calibrator(trt: Any, feed: CalibrationFeed) -> Any:
    """A TensorRT calibrator object (subclass of `trt.<feed.class_name>`) driven by `feed`."""
    base = getattr(trt, feed.class_name, None)
    if base is None:
        raise BackendError(
            f"TensorRT {getattr(trt, '__version__', '?')} has no {feed.class_name} (implicit INT8 calibration was "
            "removed); build INT8 from the bundle's Q/DQ model instead"
        )

    class BundleCalibrator(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.feed = feed

        def get_batch_size(self) -> int:
            return feed.batch_size

        def get_batch(self, names: List[str], *_args: Any) -> Optional[List[int]]:
            try:
                return feed.next_batch(names)
            except Exception as exc:  # TensorRT's trampoline would swallow it: kept, and raised by the build
                feed.fail("get_batch", exc)
                return None

        def read_calibration_cache(self, *_args: Any) -> Optional[bytes]:
            try:
                return feed.read_cache()
            except Exception as exc:  # TensorRT's trampoline would swallow it: kept, and raised by the build
                feed.fail("read_calibration_cache", exc)
                return None

        def write_calibration_cache(self, cache: Any, *_args: Any) -> None:
            try:
                feed.write_cache(cache)
            except Exception as exc:  # TensorRT's trampoline would swallow it: kept, and raised by the build
                feed.fail("write_calibration_cache", exc)

    BundleCalibrator.__name__ = f"Bundle{feed.class_name[1:]}"
    return BundleCalibrator()
