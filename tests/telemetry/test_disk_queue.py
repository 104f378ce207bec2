"""The on-disk telemetry queue and the seq counters, checked against the SQLite file itself
(read on a connection of the test's own): bounds by messages and bytes, a full disk, a failed
write, a corrupt file."""
from __future__ import annotations

import json
import logging
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import List, Tuple

import pytest

from edge_sdk.telemetry.disk_queue import DiskQueue, PublisherError, QueueError
from edge_sdk.telemetry.sequence import SeqCounter

from full_disk import FullDisk, page_count

TOPIC = "edge-sdk/d/telemetry"


def rows(start: int, n: int, pad: int = 0) -> List[Tuple[str, bytes, int]]:
    return [(TOPIC, json.dumps({"n": i, "pad": "x" * pad}).encode(), 1) for i in range(start, start + n)]


def sized(sizes: List[int]) -> List[Tuple[str, bytes, int]]:
    """Payloads of exactly these lengths; the first byte names each (A, B, C...)."""
    return [(TOPIC, bytes([65 + i]) * size, 1) for i, size in enumerate(sizes)]


def on_disk(path: Path) -> List[Tuple[bytes, int]]:
    """(payload, qos) of every row, oldest first, read without the queue's code."""
    with closing(sqlite3.connect(str(path))) as db:
        return [(bytes(p), int(q)) for p, q in db.execute("SELECT payload, qos FROM q ORDER BY id")]


def numbers(path: Path) -> List[int]:
    return [json.loads(p)["n"] for p, _q in on_disk(path)]


def test_order_and_restart(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, 100)
    q.append(rows(0, 5))
    got = q.after(0, 100)
    assert [json.loads(r[2])["n"] for r in got] == [0, 1, 2, 3, 4]
    q.delete([got[0][0], got[1][0]])
    q.close()
    again = DiskQueue(path, 100)  # a restart keeps the rest, with its size in messages and bytes
    assert (again.size, again.bytes) == (3, sum(len(p) for p, _q in on_disk(path)))
    again.append(rows(5, 1))
    assert numbers(path) == [2, 3, 4, 5]
    ids = [r[0] for r in again.after(0, 100)]
    assert ids == sorted(ids) and ids[0] > got[1][0]


@pytest.mark.parametrize("limit,sent,kept", [(10, 25, 10), (10, 10, 10), (1, 3, 1)])
def test_overflow_by_messages_drops_oldest_and_counts(tmp_path: Path, limit: int, sent: int, kept: int) -> None:
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, limit)
    for i in range(sent):
        q.append(rows(i, 1))
    assert numbers(path) == list(range(sent - kept, sent))
    assert q.size == kept
    assert q.overflow == sent - kept
    q.close()
    assert DiskQueue(path, limit).overflow == sent - kept  # kept across restarts


# payload sizes, bounds and what must remain, worked out by hand: after each append the oldest
# rows go until both bounds hold (700 B: 100+250+400 > 700 drops A; +50 = 700 fits; +600 drops
# B and C; +30 = 680 fits)
@pytest.mark.parametrize("sizes,max_messages,max_bytes,one_batch,kept", [
    ([100, 250, 400, 50, 600, 30], 100, 700, False, "DEF"),
    ([100, 250, 400, 50, 600, 30], 100, 700, True, "DEF"),
    ([100, 250, 400, 50, 600, 30], 2, 700, False, "EF"),
    ([10, 20, 30], 2, 10_000, False, "BC"),
    ([100, 600], 100, 500, False, ""),  # a message larger than the bound is itself dropped
    ([7, 700, 1], 100, 701, True, "BC"),
])
def test_overflow_by_bytes_drops_oldest(tmp_path: Path, sizes: List[int], max_messages: int, max_bytes: int,
                                        one_batch: bool, kept: str) -> None:
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, max_messages, max_bytes)
    batch = sized(sizes)
    if one_batch:
        q.append(batch)
    else:
        for row in batch:
            q.append([row])
    stored = on_disk(path)
    assert "".join(chr(p[0]) for p, _q in stored) == kept
    assert sum(len(p) for p, _q in stored) <= max_bytes
    assert (q.size, q.bytes, q.overflow) == (len(kept), sum(len(p) for p, _q in stored), len(sizes) - len(kept))


def test_qos0_rows_left_by_older_versions_are_removed_at_open(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    with closing(sqlite3.connect(str(path))) as db:  # the layout older versions wrote, QoS-0 rows included
        db.execute("CREATE TABLE q (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL)")
        db.executemany("INSERT INTO q (topic, payload, qos) VALUES (?, ?, ?)",
                       [(TOPIC, b"durable-1", 1), ("edge-sdk/d/detections", b"frame", 0), (TOPIC, b"durable-2", 1)])
        db.commit()
    q = DiskQueue(path, 100)
    assert on_disk(path) == [(b"durable-1", 1), (b"durable-2", 1)]
    assert q.size == 2


def test_full_disk_drops_the_oldest_and_keeps_going(tmp_path: Path, monkeypatch) -> None:
    disk = FullDisk(monkeypatch, tmp_path, pages=12)
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, 100_000)
    dropped = 0
    for i in range(300):  # ~100 KB into a 48 KB file: it fills up many times over
        dropped += q.append(rows(i, 1, pad=300))
    kept = numbers(path)
    assert page_count(path) <= 12
    assert 0 < len(kept) < 300 and dropped > 0
    assert kept == list(range(300 - len(kept), 300)), "the newest messages stay, in order"
    assert (q.size, dropped, q.overflow) == (len(kept), 300 - len(kept), 0)
    disk.free()
    assert q.append(rows(300, 50, pad=300)) == 0  # room again: nothing more is lost
    assert numbers(path) == list(range(300 - len(kept), 350))


def test_full_disk_keeps_the_newest_of_a_batch_that_does_not_fit(tmp_path: Path, monkeypatch) -> None:
    FullDisk(monkeypatch, tmp_path, pages=7)
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, 100_000)
    dropped = q.append(rows(0, 64, pad=300))  # 23 KB into the 2 free pages
    kept = numbers(path)
    assert 0 < len(kept) < 64
    assert kept == list(range(64 - len(kept), 64))
    assert dropped == 64 - len(kept) == 64 - q.size


def test_no_room_at_all_is_a_queue_error_and_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, 100)
    q.append(rows(0, 1))
    q.close()
    FullDisk(monkeypatch, tmp_path, pages=1)  # cannot grow by a single page
    q = DiskQueue(path, 100)
    q.delete([r[0] for r in q.after(0, 10)])
    with pytest.raises(QueueError, match="full.*free space"):
        q.append(rows(1, 1, pad=5000))  # needs an overflow page the disk does not have
    assert on_disk(path) == [] and q.size == 0 and q.bytes == 0


def test_full_disk_at_open_is_a_typed_error(tmp_path: Path, monkeypatch) -> None:
    FullDisk(monkeypatch, tmp_path, pages=1)
    with pytest.raises(QueueError, match="is full.*queue_dir"):
        DiskQueue(tmp_path / "q.sqlite3", 100)


def test_a_failed_append_is_rolled_back_and_the_queue_stays_usable(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, 100)
    q.append(rows(0, 3))
    # an injected failure inside SQLite, on the third row of the next batch
    q.db.execute("CREATE TEMP TRIGGER poison BEFORE INSERT ON main.q WHEN instr(NEW.payload, 'poison') > 0 "
                 "BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
    bad = rows(3, 2) + [(TOPIC, b'{"n": -1, "poison": 1}', 1)] + rows(5, 1)
    before = (q.size, q.bytes)
    with pytest.raises(QueueError, match="injected failure"):
        q.append(bad)
    assert numbers(path) == [0, 1, 2]  # nothing of the failed batch, seen from another connection
    assert (q.size, q.bytes) == before
    q.db.execute("DROP TRIGGER poison")
    q.append(rows(3, 2))  # the same connection takes the next write
    assert numbers(path) == [0, 1, 2, 3, 4]
    assert q.size == 5


def _truncated_queue(path: Path) -> bytes:
    q = DiskQueue(path, 100_000)
    q.append(rows(0, 2000, pad=200))
    q.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path.read_bytes()


@pytest.mark.parametrize("kind", ["garbage", "truncated", "zeroed header"])
def test_a_corrupt_file_is_moved_aside_and_a_new_queue_started(tmp_path: Path, kind: str, caplog) -> None:
    path = tmp_path / "q.sqlite3"
    if kind == "garbage":
        path.write_bytes(bytes((i * 7919) % 251 for i in range(50_000)))
    elif kind == "truncated":
        _truncated_queue(path)
    else:
        _truncated_queue(path)
        data = bytearray(path.read_bytes())
        data[:100] = bytes(100)
        path.write_bytes(bytes(data))
    corrupt = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="edge_sdk.telemetry.disk_queue"):
        q = DiskQueue(path, 100)
    aside = sorted(tmp_path.glob("q.sqlite3.corrupt-*"))
    assert [a.name for a in aside] == [q.moved_aside.name if q.moved_aside else None]
    assert aside[0].read_bytes() == corrupt  # kept as it was, for inspection
    assert "moved it aside" in caplog.text
    assert q.size == 0 and on_disk(path) == []
    q.append(rows(0, 2))
    assert numbers(path) == [0, 1]


class GoneBad:
    """Stands in for the queue's connection once its file went bad under it: every statement
    fails as SQLite fails on a corrupt file (sqlite_sequence unreadable too)."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real
        self.in_transaction = False

    def execute(self, *args: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    def close(self) -> None:
        self.real.close()


def test_a_file_gone_bad_while_running_is_replaced_with_ids_above_every_old_one(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    q = DiskQueue(path, 100)
    q.append(rows(0, 10))
    handed = [r[0] for r in q.after(0, 100)]  # the publisher's cursor and in-flight rows: these ids
    q.db = GoneBad(q.db)
    assert q.append(rows(10, 3)) == 10  # the rows of the bad file are lost with it
    assert len(list(tmp_path.glob("q.sqlite3.corrupt-*"))) == 1
    fresh = q.after(max(handed), 100)  # the cursor finds the new rows
    assert [json.loads(r[2])["n"] for r in fresh] == [10, 11, 12]
    q.delete(handed)  # late acks of the old rows delete nothing new
    assert numbers(path) == [10, 11, 12] and q.size == 3


def test_a_file_that_cannot_be_opened_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / "q.sqlite3").mkdir()  # a folder where the file should be
    with pytest.raises(PublisherError, match="queue_dir"):
        DiskQueue(tmp_path / "q.sqlite3", 100)


def test_seq_goes_on_after_a_clean_restart_and_skips_ahead_after_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "q.seq.json"
    seq = SeqCounter(path, block=10)
    assert [seq.next("telemetry") for _ in range(25)] == list(range(1, 26))
    assert [seq.next("alerts") for _ in range(2)] == [1, 2]
    seq.close()
    seq = SeqCounter(path, block=10)
    assert (seq.next("telemetry"), seq.next("alerts")) == (26, 3)  # no gap after a clean stop
    used = [seq.next("telemetry") for _ in range(12)][-1]  # 38, past the first reservation
    # a crash: no close
    seq = SeqCounter(path, block=10)
    after_crash = seq.next("telemetry")
    assert used < after_crash <= used + 10
    assert seq.next("alerts") > 3


def test_an_unreadable_seq_file_counts_on_from_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "q.seq.json"
    path.write_bytes(b"\x00garbage{")
    floor = int(time.time() * 1000)
    seq = SeqCounter(path)
    first = seq.next("alerts")
    assert first > floor
    seq.close()
    assert SeqCounter(path).next("status") > floor  # every topic, also after the next restart
