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
