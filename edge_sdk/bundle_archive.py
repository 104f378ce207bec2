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

`unpack` reads the archive itself, not through `tarfile`: exactly what `pack` writes (ustar
headers of files and folders; GNU tar's plain headers too), one 512-byte header at a time, in
time linear in the archive. Extension headers (pax `x`/`g`, GNU long names `L`/`K`) are refused
from their header alone, before a byte of their content is read: `tarfile` parses a pax header
in quadratic time while holding the GIL (CVE-2024-6232, unfixed in the Pythons a Jetson runs) and
reads a GNU long name into memory whatever its size.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Iterator, List, Set, Tuple

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


_FILE, _DIR = "file", "folder"
_KINDS = {b"0": _FILE, b"\0": _FILE, b"5": _DIR}
_REFUSED = {
    b"1": "a link", b"2": "a link", b"3": "a device or special file", b"4": "a device or special file",
    b"6": "a device or special file", b"7": "a contiguous file (a tar extension)",
    b"x": "a pax extended header", b"g": "a pax global header", b"L": "a GNU long name", b"K": "a GNU long link name",
    b"S": "a GNU sparse file", b"V": "a GNU volume header", b"M": "a GNU multi-volume part",
}


class _Damaged(Exception):
    """The archive is not a readable tar (turned into the BundleError that says so)."""


def _octal(field: bytes, what: str) -> int:
    digits = field.rstrip(b"\0 ").lstrip(b" ")
    if not digits:
        return 0
    if field[:1] and field[0] & 0x80:
        raise _Damaged(f"{what} in base-256 (a number of 8 GiB or more)")
    if any(c not in b"01234567" for c in digits):
        raise _Damaged(f"{what} is not an octal number: {field!r}")
    return int(digits, 8)


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise _Damaged(f"it ends in the middle of a member ({len(data)} of {n} bytes)")
    return data


def _headers(stream: IO[bytes], archive: Path) -> Iterator[Tuple[str, str, int]]:
    """(name, kind, size) of each member, from its 512-byte header: the caller reads the
    member's `size` bytes (and the padding to the next block) before asking for the next."""
    while True:
        block = stream.read(_BLOCK)
        if not block:
            raise _Damaged("it ends without the two empty blocks of a tar's end")
        if len(block) != _BLOCK:
            raise _Damaged(f"it ends in the middle of a header ({len(block)} of {_BLOCK} bytes)")
        if block == b"\0" * _BLOCK:
            return  # the end (a second empty block and the record's filling follow)
        stored = _octal(block[148:156], "a header checksum")
        unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
        signed = unsigned - sum(256 for b in block[:148] + block[156:] if b > 127)
        if stored not in (unsigned, signed):
            raise _Damaged("a header's checksum does not match")
        magic = block[257:265]
        if magic not in (b"ustar\x0000", b"ustar  \0"):
            raise _Damaged(f"a header is not ustar (magic {magic!r})")
        flag = block[156:157]
        raw = block[:100].split(b"\0", 1)[0]
        prefix = block[345:500].split(b"\0", 1)[0] if magic == b"ustar\x0000" else b""
        if prefix:
            raw = prefix + b"/" + raw
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BundleError(f"{archive}: a member's name is not UTF-8 ({raw[:60]!r}); refused (nothing unpacked)") from None
        if flag in _REFUSED:
            raise BundleError(f"{archive}: member {name!r} is {_REFUSED[flag]}; a bundle archive holds only files and "
                              "folders (what `edge-sdk pack` writes): refused (nothing unpacked)")
        if flag not in _KINDS:
            raise BundleError(f"{archive}: member {name!r} has tar type {flag!r}, which a bundle archive does not "
                              "hold: refused (nothing unpacked)")
        yield name, _KINDS[flag], _octal(block[124:136], f"the size of {name!r}")


def _checked_name(raw: str, archive: Path) -> PurePosixPath:
    name = PurePosixPath(raw)
    if name.is_absolute() or raw.startswith(("/", "\\")) or "\\" in raw:
        raise BundleError(f"{archive}: member {raw!r} has an absolute name; refused (nothing unpacked)")
    parts = [p for p in name.parts if p != "."]
    if not parts or ".." in parts:
        raise BundleError(f"{archive}: member {raw!r} points outside the bundle folder; refused "
                          "(nothing unpacked)")
    return PurePosixPath(*parts)


def unpack(archive: PathLike, dest_dir: PathLike, max_bytes: int = MAX_BYTES, max_members: int = MAX_MEMBERS) -> Path:
    """Unpack a bundle archive to `dest_dir` (replacing what is there only on success)."""
    archive, dest_dir = Path(archive), Path(dest_dir)
    total = 0
    seen: Set[PurePosixPath] = set()
    files: Set[PurePosixPath] = set()
    folders: Set[PurePosixPath] = set()  # every folder a member lies in
    try:
        with AtomicDirectory(dest_dir) as tmp, gzip.open(archive, "rb") as stream:
            for count, (raw, kind, size) in enumerate(_headers(stream, archive), start=1):
                if count > max_members:
                    raise BundleError(f"{archive} holds more than {max_members} members; refused as not a bundle")
                if kind == _DIR and size:
                    raise _Damaged(f"folder {raw!r} claims {size} bytes of content")
                if kind == _DIR and raw.strip("/") in ("", "."):
                    continue  # the archive's own top folder (`tar -C bundle .`)
                name = _checked_name(raw, archive)
                if name in seen:
                    raise BundleError(f"{archive}: member {raw!r} appears twice; refused (nothing unpacked)")
                under = next((p for p in name.parents if p in files), None)
                if under is not None:
                    raise BundleError(f"{archive}: member {raw!r} lies under {under.as_posix()!r}, which the archive "
                                      "holds as a file; refused (nothing unpacked)")
                if kind == _FILE and name in folders:
                    raise BundleError(f"{archive}: member {raw!r} is a file where the archive holds a folder of that "
                                      "name; refused (nothing unpacked)")
                seen.add(name)
                folders.update(name.parents)
                target = tmp.joinpath(*name.parts)
                if kind == _DIR:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                files.add(name)
                total += size
                if total > max_bytes:
                    raise BundleError(f"{archive} unpacks to more than {max_bytes} bytes; refused as not a bundle")
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as out:
                    left = size
                    while left:
                        block = _read_exactly(stream, min(left, _CHUNK))
                        out.write(block)
                        left -= len(block)
                _read_exactly(stream, -size % _BLOCK)
            if PurePosixPath(MANIFEST) not in seen:
                raise BundleError(f"{archive} has no {MANIFEST} at its top: not a bundle archive (made by "
                                  "edge_sdk.bundle_archive.pack)")
    except (_Damaged, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BundleError(f"{archive} is not a readable .tar.gz ({exc}); download it again") from exc
    return dest_dir
