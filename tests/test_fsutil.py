"""AtomicDirectory: a killed writer's partial folder is cleaned by the next one (a live one is
not), a swap that the filesystem refuses (a mount point: EBUSY) is a typed error that changes
nothing, and an interrupted swap gets the previous folder back. A SQLite file gone bad is moved
aside whole, under a name of its own."""
from __future__ import annotations

import ast
import contextlib
import errno
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest

from edge_sdk import fsutil
from edge_sdk.errors import ConfigError
from edge_sdk.fsutil import AtomicDirectory, clean_stale, move_corrupt_aside, staging_folders

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock: Linux and macOS")

WRITER = textwrap.dedent(
    """
    import sys
    from edge_sdk.fsutil import AtomicDirectory

    with AtomicDirectory(sys.argv[1]) as tmp:
        (tmp / "model.onnx").write_bytes(b"x" * (1 << 20))
        print(tmp, flush=True)
        sys.stdin.read()  # hold the folder until the test kills this process or closes stdin
    """
)


@pytest.fixture
def writers() -> Iterator[List[subprocess.Popen]]:
    started: List[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def start_writer(final: Path, writers: List[subprocess.Popen]) -> Path:
    """A process in the middle of writing `final`; returns its partial folder once it is there."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(final)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    writers.append(proc)
    line = proc.stdout.readline().strip()
    assert line, "the writer died before creating its folder"
    return Path(line)


def old_folder(tmp_path: Path) -> Path:
    final = tmp_path / "bundle"
    final.mkdir()
    (final / "manifest.json").write_text("old")
    return final


def test_a_partial_folder_left_by_sigkill_is_removed_by_the_next_writer(tmp_path: Path, writers) -> None:
    final = tmp_path / "bundle"
    partial = start_writer(final, writers)
    assert partial.parent == tmp_path and partial.name.startswith(".bundle.") and partial.name.endswith(".partial")
    writers[0].send_signal(signal.SIGKILL)
    writers[0].wait(timeout=30)
    assert (partial / "model.onnx").stat().st_size == 1 << 20  # the 1 MB the killed build left
    with AtomicDirectory(final) as tmp:
        assert not partial.exists()
        (tmp / "manifest.json").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_a_live_writers_folder_is_left_alone(tmp_path: Path, writers) -> None:
    final = tmp_path / "bundle"
    partial = start_writer(final, writers)
    assert clean_stale(final) == []
    assert (partial / "model.onnx").is_file()
    writers[0].stdin.close()  # let it finish: its folder becomes the bundle
    assert writers[0].wait(timeout=30) == 0
    assert (final / "model.onnx").is_file() and not partial.exists()


def test_partials_of_earlier_versions_and_other_names_are_told_apart(tmp_path: Path) -> None:
    final = tmp_path / "bundle"
    ours = [tmp_path / ".bundle.k3j_x9ab.partial", tmp_path / ".bundle.old", tmp_path / ".bundle.4242-deadbeef.old"]
    theirs = [tmp_path / ".bundle.mine.partial", tmp_path / ".bundle2.1-ab.partial", tmp_path / ".bundle.v2.1-ab.partial",
              tmp_path / "bundle.1-ab.partial", tmp_path / ".bundle.abcdefgh.old"]  # the last: bundle.abcdefgh's
    final.mkdir()
    for path in ours + theirs:
        path.mkdir()
        (path / "f").write_text("x")
    (tmp_path / ".bundle.7-ab.partial").symlink_to(tmp_path / ".bundle.mine.partial")
    assert staging_folders(final) == sorted(ours)
    assert sorted(clean_stale(final)) == sorted(ours)
    assert all(p.is_dir() for p in theirs) and not any(p.exists() for p in ours)


def test_an_interrupted_swap_gets_the_previous_folder_back(tmp_path: Path) -> None:
    """Killed between `bundle → .old` and `.partial → bundle`: the next writer finds no bundle, a
    stale .old and a stale .partial, and restores the old bundle before it starts."""
    final = tmp_path / "bundle"
    old = tmp_path / ".bundle.999999-0badf00d.old"
    old.mkdir()
    (old / "manifest.json").write_text("old")
    (tmp_path / ".bundle.999999-1badf00d.partial").mkdir()
    assert len(clean_stale(final)) == 2
    assert (final / "manifest.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


@pytest.mark.parametrize("code, hint", [(errno.EBUSY, "mount point or in use; use a folder inside it"),
                                        (errno.EXDEV, "another filesystem"), (errno.EACCES, "no permission")])
def test_a_refused_swap_is_a_config_error_that_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               code: int, hint: str) -> None:
    final = old_folder(tmp_path)
    real_replace = os.replace

    def replace(src, dst):
        if Path(src) == final:  # what rename(2) answers for a mount point
            raise OSError(code, os.strerror(code), str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", replace)
    with pytest.raises(ConfigError, match=f"cannot move the finished folder into place at .*bundle.*{hint}.*Nothing was changed"):
        with AtomicDirectory(final) as tmp:
            (tmp / "manifest.json").write_text("new")
    assert (final / "manifest.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_a_failed_second_rename_puts_the_old_folder_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    final = old_folder(tmp_path)
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == final and Path(src).name.endswith(".partial"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", replace)
    with pytest.raises(ConfigError, match="cannot move the finished folder"):
        with AtomicDirectory(final) as tmp:
            (tmp / "manifest.json").write_text("new")
    assert (final / "manifest.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_success_replaces_and_leaves_nothing_beside(tmp_path: Path) -> None:
    final = old_folder(tmp_path)
    with AtomicDirectory(final) as tmp:
        (tmp / "manifest.json").write_text("new")
    assert (final / "manifest.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_a_bind_mount_that_ismount_misses_is_found_in_mountinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mount --bind /data/x "/srv/my share"`: same device as its parent, so os.path.ismount says
    False, yet rename(2) answers EBUSY. /proc/self/mountinfo lists it (spaces escaped as \\040)."""
    share = tmp_path / "my share"
    share.mkdir()
    (tmp_path / "plain").mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        f"43 27 254:0 /data/x {str(share).replace(' ', chr(92) + '040')} rw,relatime - ext4 /dev/vda rw\n"
    )
    monkeypatch.setattr(fsutil, "MOUNTINFO", str(mountinfo))
    assert not os.path.ismount(share)
    assert fsutil.is_mount_point(share)
    assert not fsutil.is_mount_point(tmp_path / "plain")
    monkeypatch.setattr(fsutil, "MOUNTINFO", str(tmp_path / "absent"))  # not Linux: ismount alone
    assert not fsutil.is_mount_point(share)


def test_a_corrupt_file_goes_aside_with_its_log_and_index_under_its_utc_time(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    now = 1_700_000_000.0
    stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    names = []
    for n in range(3):  # the same second three times: each keeps a name of its own
        for suffix, body in (("", b"db"), ("-wal", b"log"), ("-shm", b"index")):
            Path(f"{path}{suffix}").write_bytes(body + bytes([n]))
        aside = move_corrupt_aside(path, now)
        names.append(aside.name)
        assert aside.read_bytes() == b"db" + bytes([n])
        assert Path(f"{aside}-wal").read_bytes() == b"log" + bytes([n])
        assert Path(f"{aside}-shm").read_bytes() == b"index" + bytes([n])
        assert not any(Path(f"{path}{suffix}").exists() for suffix in ("", "-wal", "-shm"))
    assert names == [f"q.sqlite3.corrupt-{stamp}", f"q.sqlite3.corrupt-{stamp}-2", f"q.sqlite3.corrupt-{stamp}-3"]


def corrupt_names_outside_fsutil(package: Path) -> List[str]:
    """`file:line` of every string in code (docstrings left out) that spells a `.corrupt` name,
    in every module of `package` but fsutil.py: a file moved aside by code of its own."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "fsutil.py" and path.parent == package:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and ".corrupt" in node.value):
                found.append(f"{path.relative_to(package.parent).as_posix()}:{node.lineno}")
    return found


def test_only_the_helper_names_a_corrupt_file() -> None:
    # the telemetry queue and the command replay file each had a copy of this, and the copies drifted
    assert corrupt_names_outside_fsutil(Path(fsutil.__file__).resolve().parent) == []


def test_the_scan_finds_a_copy_of_the_helper(tmp_path: Path) -> None:
    pkg = tmp_path / "edge_sdk"
    (pkg / "daemon").mkdir(parents=True)
    (pkg / "fsutil.py").write_text('aside = f"{name}.corrupt-{stamp}"\n')
    (pkg / "daemon" / "commands.py").write_text(
        '"""Moved aside as `<name>.corrupt-<time>`."""\n'
        "def move(path, now):\n"
        '    """A docstring may say `.corrupt`."""\n'
        '    return path.with_name(f"{path.name}.corrupt-{int(now)}")\n')
    assert corrupt_names_outside_fsutil(pkg) == ["edge_sdk/daemon/commands.py:4"]


def test_a_corrupt_file_that_cannot_move_stays_where_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "q.sqlite3"
    path.write_bytes(b"db")

    def refuse(*args: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        move_corrupt_aside(path)
    assert [p.name for p in tmp_path.iterdir()] == ["q.sqlite3"] and path.read_bytes() == b"db"


@pytest.mark.parametrize("size", [0, 1, 1024, 3 * 1024 + 517])  # empty, one byte, one chunk exactly, several and a part
def test_sha256_file_is_hashlibs_digest_of_the_whole_file(tmp_path: Path, size: int) -> None:
    import hashlib

    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert fsutil.sha256_file(tmp_path / "f", chunk=1024) == hashlib.sha256(data).hexdigest()
    assert fsutil.sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()  # the default chunk


def open_fds() -> List[str]:
    return sorted(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files in /proc/self/fd")
def test_a_folder_locked_by_another_writer_raises_and_leaves_no_file_open(tmp_path: Path) -> None:
    holder = fsutil._lock_dir(tmp_path)  # another open file description holds the lock
    assert holder is not None
    try:
        before = open_fds()
        with pytest.raises(BlockingIOError):
            fsutil._lock_dir(tmp_path)
        assert open_fds() == before
    finally:
        os.close(holder)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files in /proc/self/fd")
def test_a_staging_folder_that_cannot_be_named_partial_is_removed_and_unlocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    before = open_fds()
    monkeypatch.setattr(fsutil.os, "rename", refuse)
    with pytest.raises(PermissionError):
        with AtomicDirectory(tmp_path / "bundle"):
            pass
    monkeypatch.undo()
    assert open_fds() == before and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files in /proc/self/fd")
@pytest.mark.parametrize("fails", [False, True])
def test_a_written_folder_leaves_no_lock_open_whether_it_was_committed_or_not(tmp_path: Path, fails: bool) -> None:
    before = open_fds()
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
        with AtomicDirectory(tmp_path / "bundle") as tmp:
            (tmp / "f").write_text("x")
            if fails:
                raise RuntimeError("the writer failed")
    assert open_fds() == before
    assert [p.name for p in tmp_path.iterdir()] == ([] if fails else ["bundle"])


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files in /proc/self/fd")
def test_cleaning_a_stale_folder_leaves_no_file_open(tmp_path: Path) -> None:
    (tmp_path / "bundle").mkdir()
    (tmp_path / ".bundle.old").mkdir()  # a swap killed after its second rename: final is there, .old is stale
    before = open_fds()
    assert clean_stale(tmp_path / "bundle") == [tmp_path / ".bundle.old"]
    assert open_fds() == before and [p.name for p in tmp_path.iterdir()] == ["bundle"]
