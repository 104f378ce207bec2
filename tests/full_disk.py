"""A disk that is full, for tests.

For SQLite, without root, loop devices or tmpfs: SQLite's own page limit.

`FullDisk(monkeypatch, folder, pages)` makes every SQLite database opened under `folder` unable
to grow beyond `pages` pages of 4 KiB (`PRAGMA max_page_count`, set on each new connection).
A write past it fails inside SQLite with SQLITE_FULL, "database or disk is full", the same
error, raised at the same place, as when the file system has no free block left. A fresh
queue file needs 5 pages for its tables, so `pages=1` is a disk that is full from the start.

For any other file: `run_on_small_disk` runs a command with a small tmpfs of its own (a mount
namespace inside a user namespace: no root needed where the kernel lets users make namespaces),
so the kernel itself answers ENOSPC, where the program writes.
"""
from __future__ import annotations

import functools
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest

# mount a tmpfs of $1 KiB on $2, run the rest, copy what the tmpfs holds to $3 (it goes with the namespace)
_SMALL_DISK = 'mount -t tmpfs -o size="$1"k tmpfs "$2" || exit 97; d=$2; k=$3; shift 3; "$@"; rc=$?; cp -a "$d"/. "$k"/; exit $rc'


class FullDisk:
    def __init__(self, monkeypatch: Any, folder: Path, pages: int) -> None:
        self.folder = Path(folder).resolve()
        self.pages = int(pages)
        self.connections: List[sqlite3.Connection] = []
        real = sqlite3.connect

        def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
            db = real(database, *args, **kwargs)
            if self._inside(database):
                db.execute(f"PRAGMA max_page_count = {self.pages}")
                self.connections.append(db)
            return db

        monkeypatch.setattr(sqlite3, "connect", connect)

    def _inside(self, database: Any) -> bool:
        try:
            Path(str(database)).resolve().relative_to(self.folder)
        except ValueError:
            return False
        return True

    def free(self, pages: int = 1 << 30) -> None:
        """Room again: raise the limit for new connections and for the open ones."""
        self.pages = int(pages)
        for db in self.connections:
            try:
                db.execute(f"PRAGMA max_page_count = {self.pages}")
            except sqlite3.ProgrammingError:
                pass  # closed since


def page_count(path: Path) -> int:
    """Pages the database file holds (read on a connection of its own)."""
    db = sqlite3.connect(str(path))
    try:
        return int(db.execute("PRAGMA page_count").fetchone()[0])
    finally:
        db.close()


@functools.lru_cache(maxsize=1)
def _namespaces_allowed() -> str:
    """"" when `unshare -rm` can mount a tmpfs here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare (util-linux)"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"], capture_output=True,
                           text=True, timeout=30)
    return "" if probe.returncode == 0 else f"cannot make a mount namespace: {probe.stderr.strip()}"


def run_on_small_disk(argv: Sequence[str], mount: Path, kib: int, keep: Path, env: Optional[Dict[str, str]] = None,
                      timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `argv` with a tmpfs of `kib` KiB on the existing folder `mount` (seen by it alone), then
    copy what the tmpfs holds into the existing folder `keep`. Skips the test where the system
    allows no user and mount namespace."""
    why = _namespaces_allowed()
    if why:
        pytest.skip(why)
    return subprocess.run(["unshare", "-rm", "sh", "-c", _SMALL_DISK, "sh", str(int(kib)), str(mount), str(keep), *argv],
                          env=env, capture_output=True, text=True, timeout=timeout)
