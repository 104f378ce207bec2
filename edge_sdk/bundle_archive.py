"""A bundle as one archive, to send it to devices: a deterministic .tar.gz of the bundle folder.

    digest = pack(Path("dist/faces-v2"), Path("faces-v2.tar.gz"))   # sha256 hex of the archive
    unpack(Path("faces-v2.tar.gz"), Path("/var/lib/edge-sdk/models/faces-v2"))

`pack` writes the files in sorted order with fixed times, owners and modes (and a gzip header
without name or time), so packing the same bundle twice gives the same bytes and the same
sha256: a device can tell by that sha256 alone that it holds a bundle already. `unpack` takes
only plain files and folders under relative names, within `MAX_BYTES` and `MAX_MEMBERS`, and
needs a manifest.json at the top; anything else (an absolute name, `..`, a link, a device, a
damaged archive) is a BundleError that names it, and nothing is left behind. It writes into a
temporary folder beside `dest_dir` and renames it into place (edge_sdk.fsutil.AtomicDirectory).
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import List, Set

from edge_sdk.errors import BundleError
from edge_sdk.fsutil import AtomicDirectory, PathLike

MAX_BYTES = 4 << 30  # the unpacked files together; a Jetson's bundle (ONNX, engines, calibration) is far smaller
MAX_MEMBERS = 10000
MANIFEST = "manifest.json"
_CHUNK = 1 << 20
_BLOCK, _RECORD = 512, 10240  # tar's block and record sizes


def _members(bundle_dir: Path) -> List[Path]:
    """Every file and folder under `bundle_dir`, sorted by their relative POSIX names."""
    found: List[Path] = []
    for root, dirs, files in os.walk(bundle_dir):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise BundleError(f"{path} is not a plain file or folder; a bundle archive holds only those: "
                                  "copy the file it points to into the bundle")
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(bundle_dir).as_posix())


def _header(name: str, size: int, directory: bool) -> bytes:
    """A ustar header with fixed times, owners and modes. Written here rather than by tarfile,
    whose headers differ between Python releases (device fields of plain files)."""
    raw = name.encode("utf-8")
    if len(raw) > 100:
        raise BundleError(f"{name!r} is longer than 100 bytes; a bundle archive takes shorter names: rename it")

    def number(value: int, width: int) -> bytes:
        return b"%0*o\0" % (width - 1, value)

    fields = [raw.ljust(100, b"\0"), number(0o755 if directory else 0o644, 8), number(0, 8), number(0, 8),
              number(size, 12), number(0, 12), b" " * 8, b"5" if directory else b"0", b"\0" * 100,
              b"ustar\x0000", b"\0" * 32, b"\0" * 32, b"\0" * 8, b"\0" * 8, b"\0" * 155]
    block = b"".join(fields).ljust(_BLOCK, b"\0")
    checksum = b"%06o\0 " % sum(block)
    return block[:148] + checksum + block[156:]


def pack(bundle_dir: PathLike, out_file: PathLike) -> str:
    """Write `bundle_dir` as a deterministic .tar.gz to `out_file`; returns its sha256 (hex)."""
    bundle_dir, out_file = Path(bundle_dir), Path(out_file)
    if not (bundle_dir / MANIFEST).is_file():
        raise BundleError(f"{bundle_dir} has no {MANIFEST}: not a bundle; build one with `edge-sdk build`")
    members = _members(bundle_dir)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_name(f".{out_file.name}.{os.getpid()}.tmp")
    written = 0
    try:
        with open(tmp, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
            for path in members:
                name = path.relative_to(bundle_dir).as_posix()
                if path.is_dir():
                    written += gz.write(_header(name + "/", 0, directory=True))
                    continue
                size = path.stat().st_size
                written += gz.write(_header(name, size, directory=False))
                copied = 0
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(_CHUNK), b""):
                        copied += gz.write(block)
                if copied != size:
                    raise BundleError(f"{path} changed while it was packed; pack again")
                written += copied + gz.write(b"\0" * (-size % _BLOCK))
            end = 2 * _BLOCK
            gz.write(b"\0" * (end + (-(written + end) % _RECORD)))  # two empty blocks, the record filled as tar does
        os.replace(tmp, out_file)
    finally:
        if tmp.exists():
            tmp.unlink()
    digest = hashlib.sha256()
    with open(out_file, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked_name(member: tarfile.TarInfo, archive: Path) -> PurePosixPath:
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith(("/", "\\")) or "\\" in member.name:
        raise BundleError(f"{archive}: member {member.name!r} has an absolute name; refused (nothing unpacked)")
    parts = [p for p in name.parts if p != "."]
    if not parts or ".." in parts:
        raise BundleError(f"{archive}: member {member.name!r} points outside the bundle folder; refused "
                          "(nothing unpacked)")
    if not (member.isfile() or member.isdir()):
        kind = "a link" if member.issym() or member.islnk() else "a device or special file"
        raise BundleError(f"{archive}: member {member.name!r} is {kind}; a bundle archive holds only files and "
                          "folders: refused (nothing unpacked)")
    return PurePosixPath(*parts)


def unpack(archive: PathLike, dest_dir: PathLike, max_bytes: int = MAX_BYTES, max_members: int = MAX_MEMBERS) -> Path:
    """Unpack a bundle archive to `dest_dir` (replacing what is there only on success)."""
    archive, dest_dir = Path(archive), Path(dest_dir)
    total = 0
    seen: Set[PurePosixPath] = set()
    try:
        with AtomicDirectory(dest_dir) as tmp, tarfile.open(archive, mode="r:gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > max_members:
                    raise BundleError(f"{archive} holds more than {max_members} members; refused as not a bundle")
                name = _checked_name(member, archive)
                if name in seen:
                    raise BundleError(f"{archive}: member {member.name!r} appears twice; refused (nothing unpacked)")
                seen.add(name)
                target = tmp.joinpath(*name.parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                total += member.size
                if total > max_bytes:
                    raise BundleError(f"{archive} unpacks to more than {max_bytes} bytes; refused as not a bundle")
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None  # a regular file always has its data
                with source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out, _CHUNK)
            if PurePosixPath(MANIFEST) not in seen:
                raise BundleError(f"{archive} has no {MANIFEST} at its top: not a bundle archive (made by "
                                  "edge_sdk.bundle_archive.pack)")
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BundleError(f"{archive} is not a readable .tar.gz ({type(exc).__name__}: {exc}); download it "
                          "again") from exc
    return dest_dir
