"""A bundle as one archive: pack is deterministic, unpack refuses what is not a plain bundle and
leaves nothing behind."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Optional

import pytest

from edge_sdk.bundle_archive import pack, unpack
from edge_sdk.errors import BundleError
from edge_sdk.manifest import Bundle

from tiny_bundle import make_tiny_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return make_tiny_bundle(tmp_path_factory.mktemp("archive") / "b", seed=1)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pack_is_deterministic_and_changes_with_the_content(bundle: Path, tmp_path: Path) -> None:
    first = pack(bundle, tmp_path / "one.tar.gz")
    copy = tmp_path / "copy" / "b"
    copy.mkdir(parents=True)
    for name in sorted(os.listdir(bundle), reverse=True):  # other creation order, other times and modes
        (copy / name).write_bytes((bundle / name).read_bytes())
        os.chmod(copy / name, 0o600)
        os.utime(copy / name, (12345, 12345))
    second = pack(copy, tmp_path / "two.tar.gz")
    assert first == second == sha256(tmp_path / "one.tar.gz") == sha256(tmp_path / "two.tar.gz")
    with open(copy / "manifest.json", "ab") as f:
        f.write(b" ")
    assert pack(copy, tmp_path / "three.tar.gz") != first
    with tarfile.open(tmp_path / "one.tar.gz") as tar:
        names = tar.getnames()
        assert names == sorted(os.listdir(bundle))
        assert {(m.mtime, m.uid, m.gid, m.mode) for m in tar.getmembers()} == {(0, 0, 0, 0o644)}


def test_unpack_gives_back_the_bundle_and_replaces_only_on_success(bundle: Path, tmp_path: Path) -> None:
    pack(bundle, tmp_path / "b.tar.gz")
    dest = unpack(tmp_path / "b.tar.gz", tmp_path / "models" / "b")
    assert Bundle.load(dest).hash == Bundle.load(bundle).hash
    assert sorted(os.listdir(dest)) == sorted(os.listdir(bundle))
    for name in os.listdir(bundle):
        assert (dest / name).read_bytes() == (bundle / name).read_bytes()
    assert os.listdir(tmp_path / "models") == ["b"]  # no staging folder left


def test_a_bundle_with_folders_packs_and_unpacks_whole(bundle: Path, tmp_path: Path) -> None:
    nested = tmp_path / "nested"
    (nested / "calib" / "images").mkdir(parents=True)
    for name in os.listdir(bundle):
        (nested / name).write_bytes((bundle / name).read_bytes())
    (nested / "calib" / "images" / "0.bin").write_bytes(bytes(range(256)) * 5)  # not a multiple of 512
    (nested / "calib" / "empty.txt").write_bytes(b"")
    archive = tmp_path / "n.tar.gz"
    pack(nested, archive)
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["calib", "calib/empty.txt", "calib/images", "calib/images/0.bin", "manifest.json",
                                  "model.onnx"]
        # plain ustar headers: no device numbers for files, as every Python release reads and writes them
        assert {(m.type, m.devmajor, m.devminor, m.uname) for m in tar.getmembers()} == {
            (tarfile.DIRTYPE, 0, 0, ""), (tarfile.REGTYPE, 0, 0, "")}
    raw = gzip.decompress(archive.read_bytes())
    assert len(raw) % 10240 == 0 and raw[329:345] == b"\0" * 16
    out = unpack(archive, tmp_path / "out" / "n")
    assert (out / "calib" / "images" / "0.bin").read_bytes() == bytes(range(256)) * 5
    assert (out / "calib" / "empty.txt").read_bytes() == b""
    assert (out / "manifest.json").read_bytes() == (bundle / "manifest.json").read_bytes()


def hostile(path: Path, name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: Optional[str] = None,
            manifest: bool = True) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        if manifest:
            info = tarfile.TarInfo("manifest.json")
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
        info = tarfile.TarInfo(name)
        info.type = kind
        if link is not None:
            info.linkname = link
        if kind == tarfile.REGTYPE:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        else:
            tar.addfile(info)
    return path


@pytest.mark.parametrize("name,kind,link,words", [
    ("../evil", tarfile.REGTYPE, None, "outside the bundle folder"),
    ("sub/../../evil", tarfile.REGTYPE, None, "outside the bundle folder"),
    ("/tmp/evil", tarfile.REGTYPE, None, "absolute name"),
    ("evil", tarfile.SYMTYPE, "/etc/passwd", "is a link"),
    ("evil", tarfile.LNKTYPE, "manifest.json", "is a link"),
    ("evil", tarfile.CHRTYPE, None, "device or special file"),
    ("evil", tarfile.FIFOTYPE, None, "device or special file"),
])
def test_unpack_refuses_a_hostile_member_and_leaves_nothing(tmp_path: Path, name: str, kind: bytes,
                                                            link: Optional[str], words: str) -> None:
    archive = hostile(tmp_path / "h.tar.gz", name, kind, link=link)
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(BundleError, match=words):
        unpack(archive, models / "b")
    assert os.listdir(models) == []
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()


def test_unpack_refuses_archives_beyond_the_limits_or_without_a_manifest(tmp_path: Path, bundle: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    pack(bundle, archive)
    size, count = sum(p.stat().st_size for p in bundle.iterdir()), len(os.listdir(bundle))
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(BundleError, match=f"more than {count - 1} members"):
        unpack(archive, models / "b", max_members=count - 1)
    with pytest.raises(BundleError, match=f"more than {size - 1} bytes"):
        unpack(archive, models / "b", max_bytes=size - 1)
    with pytest.raises(BundleError, match="no manifest.json"):
        unpack(hostile(tmp_path / "m.tar.gz", "model.onnx", manifest=False), models / "b")
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(BundleError, match="not a readable .tar.gz"):
        unpack(damaged, models / "b")
    assert os.listdir(models) == []
    assert unpack(archive, models / "b", max_bytes=size, max_members=count) == models / "b"


def test_pack_refuses_a_folder_without_manifest_or_with_a_link(bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no manifest.json"):
        pack(tmp_path, tmp_path / "x.tar.gz")
    linked = tmp_path / "linked"
    linked.mkdir()
    for name in os.listdir(bundle):
        (linked / name).write_bytes((bundle / name).read_bytes())
    os.symlink("/etc/passwd", linked / "extra")
    with pytest.raises(BundleError, match="not a plain file"):
        pack(linked, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()


def with_extension(path: Path, fmt: int, **info: object) -> Path:
    """A manifest and one file written by tarfile in `fmt`, the file's TarInfo given `info`:
    a pax header (PAX_FORMAT, pax_headers) or a GNU long name (GNU_FORMAT, a name over 100 bytes)."""
    with tarfile.open(path, "w:gz", format=fmt) as tar:
        manifest = tarfile.TarInfo("manifest.json")
        manifest.size = 2
        tar.addfile(manifest, io.BytesIO(b"{}"))
        member = tarfile.TarInfo(str(info.pop("name", "model.onnx")))
        for key, value in info.items():
            setattr(member, key, value)
        member.size = 1
        tar.addfile(member, io.BytesIO(b"x"))
    return path


def test_a_pax_header_is_refused_from_its_header_alone(tmp_path: Path) -> None:
    """tarfile parses pax records in quadratic time holding the GIL (CVE-2024-6232); a bundle
    archive never has them (pack writes none), so the header's type refuses it."""
    archive = with_extension(tmp_path / "pax.tar.gz", tarfile.PAX_FORMAT, pax_headers={"comment": "c" * (1 << 20)})
    with tarfile.open(archive) as tar:  # a well-formed archive, for tarfile
        assert tar.getnames() == ["manifest.json", "model.onnx"]
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(BundleError, match="'././@PaxHeader' is a pax extended header"):
        unpack(archive, models / "b")
    assert os.listdir(models) == []


def test_a_gnu_long_name_is_refused_without_reading_it(tmp_path: Path) -> None:
    """A 64 MiB GNU long name (2 MiB compressed): refused from its 512-byte header, so unpacking
    never holds it (tarfile reads the whole name into memory first)."""
    import tracemalloc

    archive = with_extension(tmp_path / "gnu.tar.gz", tarfile.GNU_FORMAT, name="n" * (64 << 20))
    assert archive.stat().st_size < 4 << 20
    models = tmp_path / "models"
    models.mkdir()
    tracemalloc.start()
    try:
        with pytest.raises(BundleError, match="is a GNU long name"):
            unpack(archive, models / "b")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak / (1 << 20):.1f} MiB held while refusing it"
    assert os.listdir(models) == []


@pytest.mark.parametrize("first,second,words", [
    ("a", "a/b", "lies under 'a', which the archive holds as a file"),
    ("a/b", "a", "is a file where the archive holds a folder"),
])
def test_a_file_and_a_folder_of_one_name_are_refused_typed(tmp_path: Path, first: str, second: str, words: str) -> None:
    with tarfile.open(tmp_path / "x.tar.gz", "w:gz", format=tarfile.USTAR_FORMAT) as tar:
        for name in ("manifest.json", first, second):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(BundleError, match=words):
        unpack(tmp_path / "x.tar.gz", models / "b")
    assert os.listdir(models) == []


def test_a_damaged_header_is_refused_as_unreadable(bundle: Path, tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    pack(bundle, archive)
    raw = bytearray(gzip.decompress(archive.read_bytes()))
    raw[10] ^= 0x01  # a byte of the first member's name: its checksum no longer matches
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(gzip.compress(bytes(raw)))
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(BundleError, match="checksum does not match"):
        unpack(damaged, models / "b")
    assert os.listdir(models) == []


@pytest.mark.parametrize("fmt", ["gnu", "ustar"])
def test_a_bundle_packed_by_gnu_tar_unpacks_whole(bundle: Path, tmp_path: Path, fmt: str) -> None:
    """GNU tar's plain headers (either magic) are read as pack's are: the files come back byte for byte."""
    import shutil
    import subprocess

    if shutil.which("tar") is None:
        pytest.skip("no tar on this machine")
    archive = tmp_path / f"{fmt}.tar.gz"
    subprocess.run(["tar", f"--format={fmt}", "-czf", str(archive), "-C", str(bundle), "."], check=True)
    out = unpack(archive, tmp_path / "out")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in bundle.iterdir())
    for path in bundle.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes()
