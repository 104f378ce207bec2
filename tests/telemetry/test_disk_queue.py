from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_sdk.telemetry.mqtt import DiskQueue


def msgs(start: int, n: int, suffix: str = "telemetry"):
    return [(suffix, {"_topic": f"edge-sdk/d/{suffix}", "seq": 0, "n": i}, 1) for i in range(start, start + n)]


def test_order_seq_and_persistence(tmp_path: Path) -> None:
    q = DiskQueue(tmp_path / "q.sqlite3", 100)
    q.append(msgs(0, 5))
    q.append(msgs(0, 2, "alerts"))
    rows = q.after(0, 100)
    payloads = [json.loads(r[2]) for r in rows]
    assert [p["n"] for p in payloads] == [0, 1, 2, 3, 4, 0, 1]
    assert [p["seq"] for p in payloads] == [1, 2, 3, 4, 5, 1, 2]  # per topic
    q.delete([rows[0][0], rows[1][0]])
    q.close()
    again = DiskQueue(tmp_path / "q.sqlite3", 100)  # a restart keeps the rest and the counters
    assert again.size == 5
    again.append(msgs(5, 1))
    last = json.loads(again.after(0, 100)[-1][2])
    assert (last["n"], last["seq"]) == (5, 6)


@pytest.mark.parametrize("limit,sent,kept", [(10, 25, 10), (10, 10, 10), (1, 3, 1)])
def test_overflow_drops_oldest_and_counts(tmp_path: Path, limit: int, sent: int, kept: int) -> None:
    q = DiskQueue(tmp_path / "q.sqlite3", limit)
    for i in range(sent):
        q.append(msgs(i, 1))
    rows = q.after(0, 1000)
    assert len(rows) == kept == q.size
    assert [json.loads(r[2])["n"] for r in rows] == list(range(sent - kept, sent))
    assert q.overflow == sent - kept
    q.close()
    assert DiskQueue(tmp_path / "q.sqlite3", limit).overflow == sent - kept
