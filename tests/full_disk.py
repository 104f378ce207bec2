"""A disk that is full, for tests, without root, loop devices or tmpfs: SQLite's own page limit.

`FullDisk(monkeypatch, folder, pages)` makes every SQLite database opened under `folder` unable
to grow beyond `pages` pages of 4 KiB (`PRAGMA max_page_count`, set on each new connection).
A write past it fails inside SQLite with SQLITE_FULL, "database or disk is full", the same
error, raised at the same place, as when the file system has no free block left. A fresh
queue file needs 5 pages for its tables, so `pages=1` is a disk that is full from the start.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, List


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
