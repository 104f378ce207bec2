"""Image files from outside: header sizes, the pixel cap, truncated files, 16-bit images, and
the same pixels for `edge-sdk build` (preprocess.load_image) and `edge-sdk detect` (the folder
source)."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from edge_sdk import images
from edge_sdk.errors import SourceError
from edge_sdk.images import MAX_IMAGE_PIXELS, image_header, read_image
from edge_sdk.preprocess import load_image
from edge_sdk.runtime.sources import open_source, to_bgr

cv2 = pytest.importorskip("cv2")

W, H = 53, 37  # odd sizes: a swapped width/height or an off-by-one shows


def colour(seed: int = 0, dtype=np.uint8, shape=(H, W, 3)) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(0, int(info.max) + 1, shape, dtype=dtype)


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_head(width: int, height: int) -> bytes:
    """PNG signature and IHDR (8-bit grey) of a `width`×`height` image."""
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))


def png_bytes(width: int, height: int) -> bytes:
    """A valid 8-bit grey PNG of `width`×`height`, all black, compressed row by row (no
    full-size array is ever made)."""
    z = zlib.compressobj(1)
    row = b"\0" * (width + 1)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return png_head(width, height) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".bmp", ".tif", ".webp", ".ppm", ".pgm"])
def test_header_gives_the_size_of_every_format_the_sources_list(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"x{suffix}"
    assert cv2.imwrite(str(path), colour()[:, :, 0] if suffix == ".pgm" else colour())
    header = image_header(path.read_bytes())
    assert header is not None and (header.width, header.height) == (W, H)
    assert read_image(str(path)).shape[:2] == (H, W)


def test_format_comes_from_the_content_not_the_name(tmp_path: Path) -> None:
    path = tmp_path / "photo.jpg"
    path.write_bytes(png_bytes(W, H))
    assert image_header(path.read_bytes()).format == "PNG"
    assert read_image(str(path)).shape == (H, W)


@pytest.mark.parametrize("content", [b"", b"not an image at all", b"\xff\xd8\xff\xe0\x00", b"\x89PNG\r\n\x1a\n\x00\x00"])
def test_no_or_a_damaged_header_is_refused_with_the_file_named(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.jpg"
    path.write_bytes(content)
    with pytest.raises(SourceError, match=r"cannot read image .*bad\.jpg"):
        read_image(str(path))


def test_an_image_above_the_pixel_cap_is_refused_before_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.png"
    path.write_bytes(png_bytes(8000, 7000))  # a real, valid PNG: 56 megapixels, 250 kB on disk
    assert 8000 * 7000 > MAX_IMAGE_PIXELS

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded an image above the cap")

    monkeypatch.setattr(cv2, "imdecode", no_decode)
    for reader in (read_image, load_image):
        with pytest.raises(SourceError, match=r"huge\.png is 8000×7000 \(56\.0 megapixels\), above the limit of 50 megapixels"):
            reader(str(path))


def test_the_header_of_a_20000_square_png_is_enough_to_refuse_it(tmp_path: Path) -> None:
    path = tmp_path / "calib.png"
    path.write_bytes(png_head(20000, 20000) + chunk(b"IDAT", zlib.compress(b"\0" * 20001)) + chunk(b"IEND", b""))
    header = image_header(path.read_bytes())
    assert (header.width, header.height) == (20000, 20000)
    with pytest.raises(SourceError, match="20000×20000 .*above the limit"):
        read_image(str(path))


def test_the_cap_is_a_parameter(tmp_path: Path) -> None:
    path = tmp_path / "x.png"
    cv2.imwrite(str(path), colour())
    assert read_image(str(path), max_pixels=W * H).shape == (H, W, 3)
    with pytest.raises(SourceError, match="above the limit"):
        read_image(str(path), max_pixels=W * H - 1)


@pytest.mark.parametrize("keep", [0.5, 0.9, -2])  # cut inside the scan, near its end, only the end marker missing
def test_a_truncated_jpeg_is_refused_with_the_file_named(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "cut.jpg"
    assert cv2.imwrite(str(path), colour(1, shape=(300, 401, 3)))
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)] if keep > 0 else data[:keep])
    assert cv2.imread(str(path)) is not None  # libjpeg decodes it all the same, the missing rows grey
    for reader in (read_image, load_image):
        with pytest.raises(SourceError, match=r"cut\.jpg is truncated .*JPEG"):
            reader(str(path))


def test_a_jpeg_with_data_after_its_end_is_not_truncated(tmp_path: Path) -> None:
    """Phones append a video or a depth map after the JPEG's end marker (motion photos)."""
    path = tmp_path / "motion.jpg"
    assert cv2.imwrite(str(path), colour(2))
    expected = cv2.imread(str(path))
    path.write_bytes(path.read_bytes() + b"ftypmp42" + bytes(range(256)) * 8)
    assert np.array_equal(read_image(str(path)), expected)


def test_a_truncated_png_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cut.png"
    assert cv2.imwrite(str(path), colour(3))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(SourceError, match=r"cut\.png is truncated"):
        read_image(str(path))


@pytest.mark.parametrize("shape", [(H, W, 3), (H, W)])
def test_16_bit_images_keep_their_high_byte(tmp_path: Path, shape) -> None:
    deep = colour(4, np.uint16, shape)
    path = tmp_path / "deep.png"
    assert cv2.imwrite(str(path), deep)
    got = read_image(str(path))
    assert got.dtype == np.uint8 and np.array_equal(got, (deep // 256).astype(np.uint8))


def test_build_and_detect_read_the_same_pixels(tmp_path: Path) -> None:
    """16-bit colour, grey, BGRA and 8-bit images in one folder: the folder source (detect) and
    load_image (build's calibration and gate images) give the same BGR frames, and both equal
    what the test computes from the arrays it wrote."""
    deep = colour(5, np.uint16)
    grey = colour(6)[:, :, 0]
    bgra = colour(7, shape=(H, W, 4))
    plain = colour(8)
    written = {"a_deep.png": deep, "b_grey.png": grey, "c_bgra.png": bgra, "d_plain.png": plain}
    expected = [
        (deep // 256).astype(np.uint8),
        np.repeat(grey[:, :, None], 3, axis=2),
        bgra[:, :, :3],
        plain,
    ]
    for name, array in written.items():
        assert cv2.imwrite(str(tmp_path / name), array)
    out = np.empty((H, W, 3), np.uint8)
    with open_source(str(tmp_path)) as src:
        detect = [to_bgr(src.read(), out).copy() for _ in written]
        assert src.read() is None
    build = [load_image(str(tmp_path / name)) for name in written]
    for name, want, d, b in zip(written, expected, detect, build):
        assert np.array_equal(d, want), name
        assert np.array_equal(b, want), name


def test_float_images_are_refused_with_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "float.tif"
    assert cv2.imwrite(str(path), np.random.default_rng(9).random((H, W, 3), dtype=np.float32))
    with pytest.raises(SourceError, match=r"float\.tif has float32 samples"):
        read_image(str(path))


def test_a_file_larger_than_any_image_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.jpg"
    path.write_bytes(b"\xff\xd8\xff" + b"\0" * 2048)
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 1024)
    with pytest.raises(SourceError, match=r"big\.jpg is a file of 2,051 bytes, more than the 1,024"):
        read_image(str(path))
