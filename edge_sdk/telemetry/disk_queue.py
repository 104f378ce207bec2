"""The durable side of telemetry publishing: a bounded SQLite queue of messages (QoS >= 1) that
waits on disk while the broker is unreachable, and where its file lives.

A row leaves the queue only when the broker acknowledged it, so delivery is at-least-once.
The queue is bounded by messages and by payload bytes; beyond either the oldest rows are
dropped and counted. A full disk never stops the caller: the queue drops its oldest rows to
make room. A queue file that is not a readable database is moved aside
(``<name>.corrupt-<UTC time>``) and a fresh one started.
"""
from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from edge_sdk.errors import EdgeSdkError
from edge_sdk.fsutil import move_corrupt_aside, sqlite_error_kind

log = logging.getLogger(__name__)


class PublisherError(EdgeSdkError):
    """The publisher thread failed (e.g. its on-disk queue cannot be opened)."""

    exit_code = 11


class QueueError(PublisherError):
    """The on-disk queue cannot take a write (disk full, I/O error); it is left as it was."""



DEFAULT_QUEUE_BYTES = 64 * 1024 * 1024


class DiskQueue:
    """A bounded FIFO of durable (topic, payload, qos) rows in SQLite, oldest first.

    Bounded by `max_messages` and by `max_bytes` of payload: an append beyond either drops the
    oldest rows (counted in `overflow`, kept across restarts). Every write is one transaction;
    a write that fails is rolled back and leaves the queue as it was. On a full disk an append
    drops the oldest rows to make room and tries again (`append` returns how many); only when
    the queue is empty and the batch still does not fit does it raise QueueError. A file that is
    not a readable SQLite database is moved aside as `<name>.corrupt-<UTC time>` and a fresh
    queue is started. Used from one thread at a time (built on the caller's, then owned by the
    publisher thread).
    """

    def __init__(self, path: Path, max_messages: int, max_bytes: int = DEFAULT_QUEUE_BYTES) -> None:
        self.path = Path(path)
        self.max_messages = int(max_messages)
        self.max_bytes = int(max_bytes)
        self.size = 0
        self.bytes = 0
        self.overflow = 0
        self.moved_aside: Optional[Path] = None
        self.last_id = 0  # the highest row id this queue ever held: a new file's ids start above it
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PublisherError(f"cannot create the telemetry queue folder {self.path.parent} ({exc}); "
                                 "check its permissions or set [mqtt] queue_dir") from exc
        self.db: Any = None
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            if sqlite_error_kind(exc) != "corrupt":
                raise self._open_error(exc) from exc
            self._move_aside(exc)
            try:
                self._open()
            except sqlite3.Error as again:
                raise self._open_error(again) from again
        except sqlite3.Error as exc:
            raise self._open_error(exc) from exc

    def _open(self) -> None:
        self._close_quietly()
        self.db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        db = self.db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA journal_size_limit=4194304")  # the log shrinks back after a checkpoint
        verdict = db.execute("PRAGMA quick_check").fetchone()
        if verdict is None or verdict[0] != "ok":
            raise sqlite3.DatabaseError(f"database disk image is malformed (quick_check: {verdict})")
        db.execute("CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        if db.execute("SELECT 1 FROM q WHERE qos = 0 LIMIT 1").fetchone():
            db.execute("DELETE FROM q WHERE qos = 0")  # older versions queued QoS-0 messages; they are not durable
        size, nbytes = db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM q").fetchone()
        self.size, self.bytes = int(size), int(nbytes)
        self.overflow = self._meta("overflow")
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'q'").fetchone()
        self.last_id = max(self.last_id, int(row[0]) if row else 0)

    def _open_error(self, exc: BaseException) -> PublisherError:
        if sqlite_error_kind(exc) == "full":
            return QueueError(f"the disk holding the telemetry queue {self.path} is full ({exc}); "
                              "free space there or set [mqtt] queue_dir to another disk")
        return PublisherError(f"cannot open the telemetry queue {self.path} ({exc}); "
                              "check the folder's permissions or set [mqtt] queue_dir")

    def _close_quietly(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except sqlite3.Error:
                pass  # a connection to a broken file: nothing left to save
            self.db = None

    def _move_aside(self, exc: BaseException) -> None:
        """Keep a corrupt file (and its write-ahead log) for inspection and make room for a new one."""
        self._close_quietly()
        try:
            target = move_corrupt_aside(self.path)
        except OSError as err:
            raise PublisherError(f"the telemetry queue {self.path} is corrupt ({exc}) and cannot be moved aside "
                                 f"({err}); delete it or set [mqtt] queue_dir") from err
        log.warning("the telemetry queue %s is corrupt (%s): moved it aside to %s and started a new one; "
                    "the messages it held are not sent", self.path, exc, target)
        self.moved_aside = target

    def _meta(self, key: str) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def legacy_seq(self) -> Dict[str, int]:
        """Per-topic seq counters that older versions kept in the queue file (topic suffix -> last seq)."""
        rows = self.db.execute("SELECT key, value FROM meta WHERE key LIKE 'seq:%'").fetchall()
        return {str(key)[4:]: int(value) for key, value in rows}

    def _rollback(self) -> None:
        # SQLite rolls a transaction back by itself after some errors (a full disk among them);
        # a ROLLBACK then would fail with "no transaction is active" and hide the real error
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def _write(self, work: Callable[[], Any]) -> Any:
        """Run `work` in one transaction; roll back on any error."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            result = work()
            self.db.execute("COMMIT")
        except BaseException:
            try:
                self._rollback()
            except sqlite3.Error as exc:  # the original error says more; keep it
                log.warning("rollback of the telemetry queue %s failed: %s", self.path, exc)
            raise
        return result

    def append(self, rows: List[Tuple[str, bytes, int]]) -> int:
        """Append serialised rows in one transaction, dropping the oldest beyond the bounds.

        Returns how many rows (queued ones first, then the oldest of `rows`) were dropped
        because the disk was full. Raises QueueError when nothing could be written.
        """
        pending = list(rows)
        dropped = 0
        chunk = 0
        replaced = False
        while True:
            try:
                self.size, self.bytes, self.overflow = self._write(lambda: self._insert(pending))
                return dropped
            except sqlite3.Error as exc:
                kind = sqlite_error_kind(exc)
                if kind == "corrupt" and not replaced:
                    replaced = True
                    dropped += self._replace(exc)
                    continue
                if kind != "full":
                    raise QueueError(f"cannot write the telemetry queue {self.path} ({exc})") from exc
                if self.size:
                    chunk = min(max(chunk * 2, len(pending), self.size // 16, 1), self.size)
                    dropped += self._drop_oldest(chunk, exc)
                elif len(pending) > 1:
                    half = len(pending) // 2
                    del pending[:half]
                    dropped += half
                else:
                    raise QueueError(f"the disk holding the telemetry queue {self.path} is full ({exc}); "
                                     "free space there, lower [mqtt] queue_max_bytes or set queue_dir to another disk") from exc

    def _insert(self, rows: List[Tuple[str, bytes, int]]) -> Tuple[int, int, int]:
        """Insert and trim to the bounds; returns the new (size, bytes, overflow) for after COMMIT."""
        db = self.db
        for name, payload, qos in rows:
            rowid = db.execute("INSERT INTO q (topic, payload, qos) VALUES (?, ?, ?)", (name, payload, qos)).lastrowid
            self.last_id = max(self.last_id, int(rowid or 0))  # if rolled back: a gap, never a reuse
        size = self.size + len(rows)
        nbytes = self.bytes + sum(len(r[1]) for r in rows)
        overflow = self.overflow
        if size > self.max_messages or nbytes > self.max_bytes:
            cutoff, n, b = self._oldest_covering(size - self.max_messages, nbytes - self.max_bytes)
            db.execute("DELETE FROM q WHERE id <= ?", (cutoff,))
            size, nbytes, overflow = size - n, nbytes - b, overflow + n
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('overflow', ?)", (overflow,))
        return size, nbytes, overflow

    def _oldest_covering(self, count: int, nbytes: int) -> Tuple[int, int, int]:
        """(last id, rows, bytes) of the shortest run of oldest rows holding >= count rows and >= nbytes."""
        cutoff = n = b = 0
        rows = self.db.execute("SELECT id, LENGTH(payload) FROM q ORDER BY id")
        try:
            for rowid, length in rows:
                if n >= count and b >= nbytes:
                    break
                cutoff, n, b = rowid, n + 1, b + int(length)
        finally:
            rows.close()
        return cutoff, n, b

    def _drop_oldest(self, count: int, cause: BaseException) -> int:
        def work() -> Tuple[int, int]:
            cutoff, n, b = self._oldest_covering(count, 0)
            self.db.execute("DELETE FROM q WHERE id <= ?", (cutoff,))
            return n, b

        try:
            n, b = self._write(work)
        except sqlite3.Error as exc:
            raise QueueError(f"the disk holding the telemetry queue {self.path} is full ({cause}) and the oldest "
                             f"messages cannot be dropped ({exc}); free space there") from exc
        self.size -= n
        self.bytes -= b
        return n

    def _replace(self, exc: BaseException) -> int:
        """The file went bad while running: move it aside, start a new one with ids that go on
        rising above every id this queue ever held, read from the file where it still can be and
        else remembered (the publisher's cursor and its in-flight rows are ids: a reused id
        would be skipped, or deleted by the late ack of an old row). Returns the rows lost."""
        lost = self.size
        last = self.last_id
        try:
            row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'q'").fetchone()
            last = max(last, int(row[0]) if row else 0)
        except sqlite3.Error:
            pass  # unreadable: the id remembered in memory
        self._move_aside(exc)
        try:
            self._open()
            if last:
                self.db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('q', ?)", (last,))
                self.last_id = max(self.last_id, last)
        except sqlite3.Error as again:
            raise QueueError(f"cannot start a new telemetry queue {self.path} ({again})") from again
        return lost

    def after(self, cursor: int, limit: int) -> List[Tuple[int, str, bytes, int]]:
        try:
            return self.db.execute("SELECT id, topic, payload, qos FROM q WHERE id > ? ORDER BY id LIMIT ?",
                                   (cursor, limit)).fetchall()
        except sqlite3.Error as exc:
            raise QueueError(f"cannot read the telemetry queue {self.path} ({exc})") from exc

    def delete(self, ids: List[int]) -> None:
        """Remove acknowledged rows (ids no longer queued are ignored)."""
        if not ids:
            return

        def work() -> Tuple[int, int]:
            n = b = 0
            for start in range(0, len(ids), 500):
                part = ids[start:start + 500]
                marks = ",".join("?" * len(part))
                count, nbytes = self.db.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM q WHERE id IN ({marks})", part).fetchone()
                self.db.execute(f"DELETE FROM q WHERE id IN ({marks})", part)
                n, b = n + int(count), b + int(nbytes)
            return n, b

        try:
            n, b = self._write(work)
        except sqlite3.Error as exc:
            raise QueueError(f"cannot delete sent messages from the telemetry queue {self.path} ({exc})") from exc
        self.size -= n
        self.bytes -= b

    def close(self) -> None:
        self._close_quietly()



def default_queue_path(device_id: str, queue_dir: Optional[str] = None) -> Path:
    if queue_dir:
        base = Path(queue_dir)
    else:
        from platformdirs import user_state_dir

        base = Path(user_state_dir("edge-sdk")) / "queue"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device_id)
    return base / f"{safe}.sqlite3"
