"""The record of what a reload or promotion left running (edge_sdk.daemon.running), read at start
as untrusted: a record that no longer applies is dropped and the configured bundle runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_sdk.daemon.running import SCHEMA, RunningRecord


@pytest.fixture
def folders(tmp_path: Path):
    (tmp_path / "configured").mkdir()
    (tmp_path / "promoted").mkdir()
    return tmp_path


def test_a_saved_record_is_what_the_next_start_reads(folders: Path) -> None:
    record = RunningRecord(folders / "q" / "cam.running.json")
    record.save(folders / "promoted", str(folders / "configured"), "promotion", "abc")
    got = record.load(str(folders / "configured"))
    assert got is not None and got["bundle"] == str(folders / "promoted") and got["how"] == "promotion"
    record.save(folders / "configured", str(folders / "configured"), "rollback", "def")  # back to the config
    assert not record.path.exists() and record.load(str(folders / "configured")) is None


@pytest.mark.parametrize("content, why", [
    (b"{not json", "unreadable"),
    (b"[1, 2]", "not a running-bundle record"),
    (json.dumps({"schema": "edge-sdk/running/9", "bundle": "/x", "how": "reload"}).encode(), "not a running-bundle"),
    (json.dumps({"schema": SCHEMA, "bundle": 7, "how": "reload"}).encode(), "not a running-bundle"),
    (json.dumps({"schema": SCHEMA, "bundle": "/x", "how": "hacked"}).encode(), "not a running-bundle"),
    (b"[" * 100000, "unreadable"),  # deeper than anything the SDK writes
    (b" " * (20 * 1024), "unreadable"),  # larger than a record can be
])
def test_a_hostile_or_broken_record_is_dropped(folders: Path, caplog, content: bytes, why: str) -> None:
    path = folders / "cam.running.json"
    path.write_bytes(content)
    assert RunningRecord(path).load(str(folders / "configured")) is None
    assert not path.exists() and why in caplog.text


def test_a_record_of_another_config_or_a_gone_bundle_is_dropped(folders: Path, caplog) -> None:
    path = folders / "cam.running.json"
    record = RunningRecord(path)
    record.save(folders / "promoted", str(folders / "configured"), "reload", None)
    assert record.load(str(folders / "edited")) is None and "the config wins" in caplog.text
    record.save(folders / "promoted", str(folders / "configured"), "reload", None)
    (folders / "promoted").rmdir()
    assert record.load(str(folders / "configured")) is None and "is gone" in caplog.text


def test_without_a_broker_nothing_is_kept(folders: Path) -> None:
    record = RunningRecord(None)
    record.save(folders / "promoted", str(folders / "configured"), "reload", None)
    assert record.load(str(folders / "configured")) is None
