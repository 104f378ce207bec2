"""The snapshot folder's caps, checked on real files: "remove the oldest snapshots (a `.jpg` and
its `.json`) until at most `max_files` remain and they hold at most `max_bytes`; other files are
left alone", and a snapshot written is the frame, as JPEG, beside its detections."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from edge_sdk.daemon.commands import CommandRejected
from edge_sdk.daemon.snapshots import prune_snapshots, write_snapshot

T0 = 1_700_000_000  # seconds: the file times the tests set, one second apart


def shoot(folder: Path, name: str, age_rank: int, jpg_bytes: int = 100, json_bytes: int = 20) -> None:
    """A snapshot pair whose modification time is T0 + age_rank (higher: newer)."""
    for suffix, size in ((".jpg", jpg_bytes), (".json", json_bytes)):
        path = folder / f"{name}{suffix}"
        path.write_bytes(b"x" * size)
        os.utime(path, (T0 + age_rank, T0 + age_rank))


def listing(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir())


def test_keeps_the_newest_n_and_leaves_other_files_alone(tmp_path: Path) -> None:
    # names sort against their age (z oldest), so the order can only come from the file times
    for rank, name in enumerate(["z", "y", "x", "w", "v"]):
        shoot(tmp_path, name, rank)
    unrelated = {"notes.txt": b"keep me", "frame.png": b"\x89PNG", "orphan.json": b"{}", "shot.jpeg": b"j"}
    for name, data in unrelated.items():
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (T0 - 100, T0 - 100))  # older than every snapshot
    before = listing(tmp_path)

    removed = prune_snapshots(tmp_path, max_files=2, max_bytes=10 ** 9)

    assert removed == 3
    kept = ["v.jpg", "v.json", "w.jpg", "w.json"]  # the two newest pairs
    assert listing(tmp_path) == sorted(kept + list(unrelated))
    assert sorted(set(before) - set(listing(tmp_path))) == ["x.jpg", "x.json", "y.jpg", "y.json", "z.jpg", "z.json"]
    for name, data in unrelated.items():
        assert (tmp_path / name).read_bytes() == data


def test_within_the_caps_nothing_is_removed(tmp_path: Path) -> None:
    for rank in range(3):
        shoot(tmp_path, f"s{rank}", rank)
    before = listing(tmp_path)
    assert prune_snapshots(tmp_path, max_files=3, max_bytes=3 * 120) == 0
    assert listing(tmp_path) == before


@pytest.mark.parametrize("max_bytes, kept", [
    (3 * 120, ["c", "d", "e"]),  # each pair holds 100 + 20 bytes
    (3 * 120 - 1, ["d", "e"]),  # one byte over three pairs: the third newest goes too
    (1, ["e"]),  # the newest (just written) always stays
])
def test_the_byte_cap_counts_the_jpg_and_its_json(tmp_path: Path, max_bytes: int, kept: List[str]) -> None:
    for rank, name in enumerate("abcde"):
        shoot(tmp_path, name, rank)
    removed = prune_snapshots(tmp_path, max_files=100, max_bytes=max_bytes)
    assert removed == 5 - len(kept)
    assert listing(tmp_path) == sorted(f"{n}{s}" for n in kept for s in (".jpg", ".json"))


def test_a_jpg_without_its_json_counts_and_goes_alone(tmp_path: Path) -> None:
    shoot(tmp_path, "old", 0)
    (tmp_path / "old.json").unlink()
    shoot(tmp_path, "new", 1)
    assert prune_snapshots(tmp_path, max_files=1, max_bytes=10 ** 9) == 1
    assert listing(tmp_path) == ["new.jpg", "new.json"]


def test_write_snapshot_writes_the_frame_as_jpeg_beside_its_detections(tmp_path: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    frame = np.zeros((48, 64, 3), np.uint8)
    frame[:, 32:] = (0, 0, 255)  # right half red (BGR)
    detections: Dict[str, object] = {"index": 7, "detections": [{"xyxy": [1.0, 2.0, 3.0, 4.0], "score": 0.5}]}
    shoot(tmp_path, "older", -5)

    out = write_snapshot(tmp_path, "cam-1-7", frame, detections, max_files=1, max_bytes=10 ** 9)

    assert out == {"image": str(tmp_path / "cam-1-7.jpg"), "detections": str(tmp_path / "cam-1-7.json"),
                   "removed": 1}
    assert listing(tmp_path) == ["cam-1-7.jpg", "cam-1-7.json"]
    image = cv2.imread(str(tmp_path / "cam-1-7.jpg"))
    assert image.shape == frame.shape
    assert np.abs(image.astype(int) - frame.astype(int)).mean() < 4  # JPEG is lossy, not that lossy
    assert json.loads((tmp_path / "cam-1-7.json").read_text()) == detections


def test_write_snapshot_into_a_folder_it_cannot_write_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"")
    with pytest.raises(CommandRejected, match="snapshot not written to"):
        write_snapshot(blocker, "s", np.zeros((8, 8, 3), np.uint8), {}, max_files=1, max_bytes=10 ** 9)
    assert blocker.read_bytes() == b""
