"""Reading a bundle's `.npy` and `.npz` files without trusting them.

    headers = npz_headers(path, budget=64 << 20, error=BundleError)   # reads no array
    ...check names, dtypes and shapes against the manifest...
    arrays = read_npz(path, headers, error=BundleError)              # reads exactly what was checked

An `.npz` is a zip of `.npy` members; `np.load` decompresses a member whole before anyone can
look at its shape, so a 17 MB file of zeros becomes a 10 GiB array, and a 1 KB header that
declares 112 GiB ends in a MemoryError. Here each member's `.npy` header (magic, dtype, shape;
`numpy.lib.format`) and its declared uncompressed size are read first: the member must be a
plain (non-object) array whose header plus data is exactly its declared size, and the sum of
the arrays' sizes must fit the caller's budget. Only then are the arrays read, and the zip
reader stops each member at its declared size, so what is read is bounded by what was checked.
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Tuple, Type

import numpy as np

from edge_sdk.errors import EdgeSdkError

MAX_MEMBERS = 64  # arrays in one .npz (the bundle's have 1 to a few dozen)
MAX_HEADER_BYTES = 10_000  # numpy's own default limit for a .npy header
MAX_DIMS = 8


class ArrayHeader(NamedTuple):
    """What a `.npy` header declares: the array's dtype and shape, and its size in bytes."""

    dtype: np.dtype
    shape: Tuple[int, ...]
    fortran_order: bool

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * self.dtype.itemsize


def _read_exactly(f: Any, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError(f"the header is cut short ({len(data)} of {n} bytes)")
    return data


def _read_header(f: Any, where: str, error: Type[EdgeSdkError]) -> Tuple[ArrayHeader, int]:
    """The header of the `.npy` stream `f` and its length in bytes; `error` when it is not one."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"unsupported .npy format version {version}")
        # the header's length is its first field: bounded here, whatever numpy's own limit
        # (numpy < 1.24 has none; the device's numpy may be older)
        size_bytes = 2 if version == (1, 0) else 4
        start = f.read(size_bytes)
        if len(start) != size_bytes:
            raise EOFError("the header is cut short")
        length = int.from_bytes(start, "little")
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"a header of {length} bytes (at most {MAX_HEADER_BYTES})")
        header = io.BytesIO(fmt.MAGIC_PREFIX + bytes(version) + start + _read_exactly(f, length))
        fmt.read_magic(header)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran, dtype = read(header)
    except (ValueError, TypeError, SyntaxError, EOFError, OSError, zipfile.BadZipFile) as exc:
        raise error(f"{where} is unreadable as a .npy array ({exc})") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise error(f"{where} holds an array of {dtype}, not of plain numbers")
    if len(shape) > MAX_DIMS:
        raise error(f"{where} declares {len(shape)} dimensions (at most {MAX_DIMS})")
    return ArrayHeader(dtype, tuple(int(d) for d in shape), bool(fortran)), int(f.tell())


def npz_headers(path: Path, budget: int, error: Type[EdgeSdkError]) -> Dict[str, ArrayHeader]:
    """{array name: header} of the `.npz` at `path`, read from the zip's directory and each
    member's `.npy` header; no array data is read. `error` (naming the file) when the file is not
    a zip of `.npy` members, when a member's declared size disagrees with its header, or when
    the arrays together would take more than `budget` bytes."""
    headers: Dict[str, ArrayHeader] = {}
    total = 0
    try:
        with zipfile.ZipFile(str(path)) as zf:
            members = zf.infolist()
            if len(members) > MAX_MEMBERS:
                raise error(f"{path} holds {len(members)} members (at most {MAX_MEMBERS})")
            for info in members:
                name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else None
                where = f"{path}: member {info.filename!r}"
                if not name or name in headers or info.is_dir():
                    raise error(f"{where} is not a .npy array with a name of its own")
                if info.file_size > budget:
                    raise error(f"{where} declares {info.file_size} bytes uncompressed, over the budget of {budget}")
                with zf.open(info) as f:
                    header, length = _read_header(f, where, error)
                if length + header.nbytes != info.file_size:
                    raise error(f"{where} declares a {header.dtype} array of shape {list(header.shape)} "
                                f"({header.nbytes} bytes) in a member of {info.file_size - length} data bytes")
                total += header.nbytes
                if total > budget:
                    raise error(f"{path}: its arrays take more than the budget of {budget} bytes")
                headers[name] = header
    except EdgeSdkError:
        raise
    except (OSError, zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, RuntimeError) as exc:
        raise error(f"{path} is unreadable as a .npz ({type(exc).__name__}: {exc})") from None
    return headers


def npy_header(path: Path, budget: int, error: Type[EdgeSdkError]) -> ArrayHeader:
    """The header of the `.npy` file at `path`, checked against its size on disk and `budget`."""
    try:
        with open(path, "rb") as f:
            header, length = _read_header(f, str(path), error)
            size = Path(path).stat().st_size
    except OSError as exc:
        raise error(f"{path} is not readable ({exc.strerror or exc})") from None
    if header.nbytes > budget:
        raise error(f"{path} declares a {header.dtype} array of shape {list(header.shape)} ({header.nbytes} bytes), "
                    f"over the budget of {budget}")
    if length + header.nbytes != size:
        raise error(f"{path} declares {header.nbytes} data bytes but holds {size - length}")
    return header


def read_npz(path: Path, headers: Dict[str, ArrayHeader], error: Type[EdgeSdkError]) -> Dict[str, np.ndarray]:
    """The arrays of the `.npz` whose `headers` (from :func:`npz_headers`) the caller checked."""
    out: Dict[str, np.ndarray] = {}
    try:
        with np.load(str(path), allow_pickle=False) as npz:
            for name, header in headers.items():
                array = npz[name]
                if array.dtype != header.dtype or array.shape != header.shape:
                    raise error(f"{path}: {name} changed while it was read; copy the bundle again")
                out[name] = array
    except EdgeSdkError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise error(f"{path} is unreadable as a .npz ({type(exc).__name__}: {exc})") from None
    return out


def read_npy(path: Path, header: ArrayHeader, error: Type[EdgeSdkError]) -> np.ndarray:
    """The array of the `.npy` whose `header` (from :func:`npy_header`) the caller checked."""
    try:
        array = np.load(str(path), allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise error(f"{path} is unreadable as a .npy ({exc})") from None
    if not isinstance(array, np.ndarray) or array.dtype != header.dtype or array.shape != header.shape:
        raise error(f"{path} changed while it was read; copy the bundle again")
    return array


def fits(header: ArrayHeader, dtypes: Any, shape: Optional[Tuple[Optional[int], ...]] = None) -> bool:
    """Whether `header` is of one of `dtypes` (names) and, where given, of `shape` (None: any size)."""
    if header.dtype.name not in dtypes:
        return False
    if shape is None:
        return True
    return len(header.shape) == len(shape) and all(w is None or w == d for w, d in zip(shape, header.shape))
