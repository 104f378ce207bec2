"""Snapshots the `snapshot` command writes: a frame as JPEG and its detections as JSON, side by
side in the device's snapshot folder, and the pruning that keeps that folder within its caps
(`device.snapshot_max_files`, `device.snapshot_max_mb`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from edge_sdk.daemon.commands import CommandRejected


def write_snapshot(folder: Path, name: str, frame: Any, detections: Dict[str, Any], max_files: int,
                   max_bytes: int) -> Dict[str, Any]:
    """Write `<name>.jpg` (the frame, BGR) and `<name>.json` (its detections) atomically into
    `folder`, then prune the oldest snapshots beyond the caps. Returns the paths written and how
    many snapshots were removed; CommandRejected when the frame cannot be encoded or the files
    cannot be written (a full disk)."""
    from edge_sdk import _imports
    from edge_sdk.fsutil import atomic_write_bytes, atomic_write_json

    cv2 = _imports.cv2()
    ok, jpg = cv2.imencode(".jpg", frame)
    if not ok:
        raise CommandRejected("the frame could not be encoded as JPEG")
    base = Path(folder)
    try:
        atomic_write_bytes(base / f"{name}.jpg", jpg.tobytes())
        atomic_write_json(base / f"{name}.json", detections)
    except OSError as exc:
        raise CommandRejected(f"snapshot not written to {base}: {exc.strerror or exc}; free disk space "
                              "or lower device.snapshot_max_mb") from exc
    removed = prune_snapshots(base, max_files, max_bytes)
    return {"image": str(base / f"{name}.jpg"), "detections": str(base / f"{name}.json"), "removed": removed}


def prune_snapshots(folder: Path, max_files: int, max_bytes: int) -> int:
    """Remove the oldest snapshots (a `.jpg` and its `.json`) until at most `max_files` remain
    and they hold at most `max_bytes`; returns how many were removed. Other files are left alone."""
    shots = []
    for jpg in folder.glob("*.jpg"):
        meta = jpg.with_suffix(".json")
        try:
            st = jpg.stat()
            size = st.st_size + (meta.stat().st_size if meta.exists() else 0)
        except OSError:
            continue  # removed meanwhile
        shots.append((st.st_mtime, jpg.name, jpg, meta, size))
    shots.sort()
    total = sum(shot[4] for shot in shots)
    removed = 0
    for _mtime, _name, jpg, meta, size in shots[:-1]:  # the newest (just written) stays
        if len(shots) - removed <= max_files and total <= max_bytes:
            break
        for path in (jpg, meta):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        total -= size
        removed += 1
    return removed
