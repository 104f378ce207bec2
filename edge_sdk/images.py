"""Image files from outside (calibration folders, image sources), read one way everywhere.

`edge-sdk build` (calibration, gate and probe images) and `edge-sdk detect` (a folder or one
image) both read through :func:`read_image`, so an image the build accepts is read the same way
by the runtime:

* the width and height come from the file's header and are checked against
  :data:`MAX_IMAGE_PIXELS` *before* anything is decoded (a 20000×20000 PNG would need 1.2 GB);
* a JPEG whose data ends early (no end-of-image marker after its scan) is refused, where libjpeg
  would fill the missing rows with grey and only print a warning;
* 16-bit images become 8-bit by keeping the high byte of each sample; the EXIF orientation is
  applied; an alpha channel is dropped.

Every refusal is a :class:`~edge_sdk.errors.SourceError` naming the file and the fix.
"""
from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Callable, List, NamedTuple, Optional, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import SourceError

MAX_IMAGE_PIXELS = 50_000_000  # 50 megapixels: an 8K frame has 33; decoded 16-bit BGR ≤ 300 MB
MAX_IMAGE_BYTES = 512 * 1024 * 1024  # larger than any 50-megapixel image file needs to be
FORMATS = "JPEG, PNG, BMP, TIFF, WebP or PNM"

_PNG_END = b"IEND\xaeB`\x82"  # the IEND chunk type and its (constant) CRC
_JPEG_EOI = b"\xff\xd9"
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_PNM_SIZE = re.compile(rb"P[1-6](?:\s|#[^\n]*\n?)+(\d+)(?:\s|#[^\n]*\n?)+(\d+)")


class ImageHeader(NamedTuple):
    """What an image file's header says. `complete` is False when the data is cut short, None
    when the format gives no cheap way to tell (the decoder then has the last word)."""

    format: str
    width: int
    height: int
    complete: Optional[bool] = None

    @property
    def pixels(self) -> int:
        return self.width * self.height


def _png(data: bytes) -> Optional[ImageHeader]:
    if data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return ImageHeader("PNG", width, height, data.find(_PNG_END, 33) != -1)


def _jpeg(data: bytes) -> Optional[ImageHeader]:
    """Walk the marker segments up to the first scan (SOS); the size is in the frame header
    (SOFn). Entropy-coded data never holds FF D9 (an FF there is followed by 00 or a restart
    marker), so a complete file has an end-of-image marker after its first scan starts."""
    size: Optional[Tuple[int, int]] = None
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            size = (width, height)
        elif marker == 0xDA:
            if size is None:
                return None
            return ImageHeader("JPEG", size[0], size[1], data.find(_JPEG_EOI, i + 2 + length) != -1)
        elif marker == 0xD9:
            break
        i += 2 + length
    return ImageHeader("JPEG", size[0], size[1], False) if size is not None else None


def _bmp(data: bytes) -> Optional[ImageHeader]:
    (dib,) = struct.unpack("<I", data[14:18])
    if dib == 12:
        width, height = struct.unpack("<HH", data[18:22])
    else:
        width, height = struct.unpack("<ii", data[18:26])
    return ImageHeader("BMP", width, abs(height))


def _webp(data: bytes) -> Optional[ImageHeader]:
    if data[8:12] != b"WEBP":
        return None
    chunk = data[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return ImageHeader("WebP", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L":
        (bits,) = struct.unpack("<I", data[21:25])
        return ImageHeader("WebP", 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF))
    if chunk == b"VP8X":
        return ImageHeader("WebP", 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little"))
    return None


def _tiff(data: bytes) -> Optional[ImageHeader]:
    """ImageWidth (256) and ImageLength (257) from the first IFD, classic or BigTIFF."""
    end = "<" if data[:2] == b"II" else ">"
    (magic,) = struct.unpack(end + "H", data[2:4])
    if magic == 42:
        (offset,) = struct.unpack(end + "I", data[4:8])
        count_fmt, entry_fmt, entry_size = "H", "HHI4s", 12
    elif magic == 43:
        (offset,) = struct.unpack(end + "Q", data[8:16])
        count_fmt, entry_fmt, entry_size = "Q", "HHQ8s", 20
    else:
        return None
    count_size = struct.calcsize(end + count_fmt)
    (count,) = struct.unpack(end + count_fmt, data[offset:offset + count_size])
    dims = {}
    for k in range(min(count, 4096)):
        start = offset + count_size + k * entry_size
        tag, kind, _n, value = struct.unpack(end + entry_fmt, data[start:start + entry_size])
        if tag in (256, 257):
            fmt = {3: "H", 4: "I", 16: "Q"}.get(kind)
            if fmt is None:
                return None
            dims[tag] = struct.unpack(end + fmt, value[:struct.calcsize(fmt)])[0]
    if 256 not in dims or 257 not in dims:
        return None
    return ImageHeader("TIFF", dims[256], dims[257])


def _pnm(data: bytes) -> Optional[ImageHeader]:
    m = _PNM_SIZE.match(data[:4096])
    return ImageHeader("PNM", int(m.group(1)), int(m.group(2))) if m else None


_PARSERS: List[Tuple[Tuple[bytes, ...], Callable[[bytes], Optional[ImageHeader]]]] = [
    ((b"\x89PNG\r\n\x1a\n",), _png),
    ((b"\xff\xd8\xff",), _jpeg),
    ((b"BM",), _bmp),
    ((b"RIFF",), _webp),
    ((b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"), _tiff),
    ((b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"), _pnm),
]


def image_header(data: bytes) -> Optional[ImageHeader]:
    """Format and size from an image file's bytes (the format found from its content, not its
    name); None when the content is no JPEG, PNG, BMP, TIFF, WebP or PNM, or its header is damaged."""
    for magics, parse in _PARSERS:
        if data.startswith(magics):
            try:
                header = parse(data)
            except (struct.error, IndexError, ValueError):
                return None
            if header is None or header.width <= 0 or header.height <= 0:
                return None
            return header
    return None


def read_image(path: str, max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
    """An image file as uint8 grey (H, W) or BGR (H, W, 3), read as the module docstring says.
    Raises SourceError naming the file when it cannot be read, is not an image, is larger than
    `max_pixels`, is a truncated JPEG or PNG, or holds samples other than 8- or 16-bit integers."""
    path_ = Path(path)
    try:
        with open(path_, "rb") as f:
            size = f.seek(0, 2)
            if size > MAX_IMAGE_BYTES:
                raise SourceError(
                    f"image {path_} is a file of {size:,} bytes, more than the {MAX_IMAGE_BYTES:,} an image may have "
                    "(edge_sdk.images.MAX_IMAGE_BYTES); downscale it or remove it"
                )
            f.seek(0)
            data = f.read()
    except OSError as exc:
        raise SourceError(f"cannot read image {path_}: {exc.strerror or exc}") from exc
    header = image_header(data)
    if header is None:
        raise SourceError(f"cannot read image {path_}: not an image file, or unreadable (no valid {FORMATS} header)")
    if header.pixels > max_pixels:
        raise SourceError(
            f"image {path_} is {header.width}×{header.height} ({header.pixels / 1e6:.1f} megapixels), above the limit of "
            f"{max_pixels / 1e6:g} megapixels (edge_sdk.images.MAX_IMAGE_PIXELS); downscale it or remove it"
        )
    if header.complete is False:
        raise SourceError(f"image {path_} is truncated (its {header.format} data ends early); copy it again or remove it")
    cv2 = _imports.cv2()
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_ANYDEPTH | cv2.IMREAD_ANYCOLOR)
    if img is None:
        raise SourceError(f"cannot read image {path_}: not an image file, or unreadable (damaged {header.format} data)")
    if img.dtype == np.uint16:
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise SourceError(f"image {path_} has {img.dtype} samples; only 8- and 16-bit images are supported, convert it")
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    elif img.ndim == 3 and img.shape[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
    if img.ndim != 2 and (img.ndim != 3 or img.shape[2] != 3):
        raise SourceError(f"image {path_} has shape {img.shape}; only grey and colour images are supported")
    return img
