"""Durability of the atomic writes, checked by recording the calls in order: the new bytes are
written and fsync-ed before the rename that publishes them, and the folder holding the rename is
fsync-ed after it — otherwise a power cut can leave the new name pointing at an empty file, or
the old name back."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

from edge_sdk import fsutil
from edge_sdk.fsutil import AtomicDirectory, atomic_write_bytes, atomic_write_json, atomic_write_text
from edge_sdk.validate import MAX_DEPTH

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")

Event = Tuple[str, str, bytes]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> List[Event]:
    """("fsync", path the descriptor names, its bytes on disk then) and ("replace", src, dst)."""
    events: List[Event] = []
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

    def fsync(fd) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        path = os.readlink(f"/proc/self/fd/{fd}")
        content = b"" if os.path.isdir(path) else os.pread(fd, 1 << 20, 0)
        events.append(("fsync", path, content))
        real_fsync(fd)

    def replace(src, dst, **kw) -> None:
        events.append(("replace", os.path.realpath(src), os.path.realpath(dst).encode()))
        real_replace(src, dst, **kw)

    def rename(src, dst, **kw) -> None:
        events.append(("rename", os.path.realpath(src), os.path.realpath(dst).encode()))
        real_rename(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    return events


def publish_index(events: List[Event], final: Path) -> int:
    hits = [i for i, e in enumerate(events) if e[0] in ("replace", "rename") and e[2] == str(final.resolve()).encode()]
    assert len(hits) == 1, events
    return hits[0]


@pytest.mark.parametrize("write,data", [
    (lambda p: atomic_write_bytes(p, b"\x00new bytes" * 1000), b"\x00new bytes" * 1000),
    (lambda p: atomic_write_text(p, "déjà vu\n"), "déjà vu\n".encode()),
    (lambda p: atomic_write_json(p, {"a": [1, 2]}), b'{\n  "a": [\n    1,\n    2\n  ]\n}\n'),
])
def test_a_file_is_fsynced_with_its_bytes_before_the_rename_and_the_folder_after(tmp_path: Path, calls: List[Event],
                                                                                write, data: bytes) -> None:
    target = tmp_path / "sub" / "state.bin"
    target.parent.mkdir()
    target.write_bytes(b"old")
    write(target)
    assert target.read_bytes() == data
    i = publish_index(calls, target)
    src = calls[i][1]
    assert Path(src).parent == target.parent.resolve(), "the temporary file must be beside the target (same filesystem)"
    synced = [e for e in calls[:i] if e[0] == "fsync" and e[1] == src]
    assert synced and synced[-1][2] == data, "the temporary file is fsync-ed with all its bytes before the rename"
    after = [e for e in calls[i + 1:] if e[0] == "fsync"]
    assert [e[1] for e in after] == [str(target.parent.resolve())], "the folder is fsync-ed after the rename"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.bin"]


def test_a_failed_rename_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.bin"
    target.write_bytes(b"old")

    def refuse(src, dst, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.bin"]


def test_a_non_finite_json_value_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("{}")
    with pytest.raises(ValueError):
        atomic_write_json(target, {"x": float("nan")})
    assert target.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_folder_is_fsynced_file_by_file_and_folder_by_folder_before_the_swap(tmp_path: Path,
                                                                               calls: List[Event]) -> None:
    final = tmp_path / "bundle"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with AtomicDirectory(final) as tmp:
        (tmp / "manifest.json").write_bytes(b"{}")
        (tmp / "engines").mkdir()
        (tmp / "engines" / "model.engine").write_bytes(b"E" * 4096)
        staged = tmp.resolve()
    i = publish_index(calls, final)
    assert calls[i][1] == str(staged)
    before = {(e[1], e[2]) for e in calls[:i] if e[0] == "fsync"}
    for rel, content in (("manifest.json", b"{}"), ("engines/model.engine", b"E" * 4096)):
        assert (str(staged / rel), content) in before, f"{rel} not fsync-ed with its bytes before the swap"
    for folder in (staged, staged / "engines"):
        assert (str(folder), b"") in before, f"folder {folder.name} (its entries) not fsync-ed before the swap"
    assert (str(tmp_path.resolve()), b"") in {(e[1], e[2]) for e in calls[i + 1:] if e[0] == "fsync"}, \
        "the parent folder is fsync-ed after the swap"
    assert sorted(p.name for p in final.rglob("*")) == ["engines", "manifest.json", "model.engine"]
    assert fsutil.staging_folders(final) == []


# -- the other promises of fsutil, at their edges ------------------------------------------------
def test_only_staging_folders_of_this_name_are_listed(tmp_path: Path) -> None:
    final = tmp_path / "bundle"
    names = {
        ".bundle.123-ab12cd34.partial": True, ".bundle.123-ab12cd34.old": True, ".bundle.old": True,
        ".bundle.x1y2z3w4.partial": True,  # an earlier version's mkdtemp name
        ".bundle.123-ab12cd34.new": False,  # made, not yet locked: never listed
        ".bundle.123-ab12cd34.tmp": False, ".other.123-ab12cd34.partial": False, "bundle.123-ab12cd34.partial": False,
        ".bundle.123-AB.partial": False, ".bundle.toolongname.partial": False,
    }
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / ".bundle.9-file.partial").write_text("a file, not a folder")
    (tmp_path / "target").mkdir()
    (tmp_path / ".bundle.9-link.partial").symlink_to(tmp_path / "target")
    assert [p.name for p in fsutil.staging_folders(final)] == sorted(n for n, listed in names.items() if listed)


def test_removing_a_staging_link_keeps_what_it_points_to(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(target)
    fsutil._remove(link)
    assert not os.path.lexists(link) and (target / "keep.txt").read_text() == "x"
    fsutil._remove(target)
    assert not target.exists()


@pytest.mark.parametrize("depth,ok", [(1, True), (MAX_DEPTH - 1, True), (MAX_DEPTH, False)])
def test_toml_nesting_is_read_up_to_the_bound(tmp_path: Path, depth: int, ok: bool) -> None:
    """The document's own table is the first level: a key holds MAX_DEPTH - 1 nested arrays."""
    path = tmp_path / "c.toml"
    path.write_text("a = " + "[" * depth + "1" + "]" * depth + "\n")
    if ok:
        value = fsutil.read_toml(path)["a"]
        for _ in range(depth):
            value = value[0]
        assert value == 1
    else:
        with pytest.raises(fsutil.ConfigError, match=f"deeper than {MAX_DEPTH}"):
            fsutil.read_toml(path)


class Coded(Exception):
    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(text)
        self.sqlite_errorcode = code


@pytest.mark.parametrize("exc,kind", [
    (Coded(11), "corrupt"), (Coded(26), "corrupt"), (Coded(13), "full"), (Coded(5), "other"), (Coded(10), "other"),
    (Coded(11 | (1 << 8)), "corrupt"),  # SQLITE_CORRUPT_VTAB: an extended code of CORRUPT
    (Coded(13 | (2 << 8)), "full"), (Coded(10 | (11 << 8)), "other"),  # IOERR_... whose high bits read 11
    (Exception("database or disk is full"), "full"), (Exception("database disk image is malformed"), "corrupt"),
    (Exception("file is not a database"), "corrupt"), (Exception("database is locked"), "other"),
])
def test_sqlite_errors_are_told_apart_by_their_primary_code(exc: BaseException, kind: str) -> None:
    assert fsutil.sqlite_error_kind(exc) == kind


def test_a_real_sqlite_error_on_a_file_that_is_not_a_database_reads_corrupt(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "x.sqlite3"
    path.write_bytes(b"not a database at all" * 100)
    db = sqlite3.connect(str(path))
    with pytest.raises(sqlite3.DatabaseError) as info:
        db.execute("SELECT * FROM sqlite_master").fetchall()
    db.close()
    assert fsutil.sqlite_error_kind(info.value) == "corrupt"


def test_mountinfo_is_read_by_its_fifth_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "with space"
    target.mkdir()
    info = tmp_path / "mountinfo"
    escaped = str(target.resolve()).replace(" ", "\\040")
    info.write_text("1 2 3:4\n"  # a short line is skipped, not an IndexError
                    f"36 35 98:0 /sub {escaped}\n")
    monkeypatch.setattr(fsutil, "MOUNTINFO", str(info))
    assert fsutil.is_mount_point(target)
    assert not fsutil.is_mount_point(tmp_path)
    info.write_text(f"36 35 98:0 {escaped}\n")  # four fields: the path is the root field, not the mount point
    assert not fsutil.is_mount_point(target)


@pytest.mark.parametrize("errno_value,hint", [(None, "check"), (16, "mount point or in use"),
                                              (18, "another filesystem"), (13, "no permission"), (1, "no permission")])
def test_a_refused_swap_names_the_fix_for_its_errno(tmp_path: Path, errno_value, hint: str) -> None:
    error = OSError(errno_value, "refused") if errno_value is not None else OSError("refused")
    message = str(fsutil._swap_error(tmp_path / "out", error))
    assert hint in message and "Nothing was changed" in message
