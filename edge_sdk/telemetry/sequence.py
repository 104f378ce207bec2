"""Per-topic ``seq`` counters of the telemetry publisher, kept in a small file of their own beside
the disk queue, so that they stay monotonic when the queue file is lost or replaced."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Dict

from edge_sdk.telemetry.schemas import now_ms

log = logging.getLogger(__name__)


class SeqCounter:
    """Per-topic `seq` counters, kept in a small JSON file beside the queue (not in it), so that
    they stay monotonic when the queue file is lost, corrupt or replaced.

    The file holds, per topic, a ceiling: no seq above it was ever used. Counting past the
    ceiling first raises it by `block` (one atomic write per `block` messages of a topic), and
    `close` writes the exact counters, so a clean restart goes on without a gap while a crash
    skips ahead by less than `block`. If the file exists but cannot be read, counting starts
    at the wall clock in milliseconds, above any count a device reaches. If it cannot be
    written (full disk), counting goes on and the write is retried every few seconds.
    """

    RETRY_S = 5.0

    def __init__(self, path: Path, block: int = 1000) -> None:
        self.path = Path(path)
        self.block = int(block)
        self._floor = 0
        self._ceiling: Dict[str, int] = {}
        self._retry_at = 0.0
        self._failing = False
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = None
        except OSError as exc:
            raw = b""
            log.warning("cannot read %s (%s)", self.path, exc)
        if raw is not None:
            try:
                data = json.loads(raw.decode("utf-8"))
                self._ceiling = {str(k): int(v) for k, v in data["seq"].items() if isinstance(v, int) and v >= 0}
                floor = data.get("floor", 0)
                self._floor = floor if isinstance(floor, int) and floor >= 0 else 0
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                self._floor = now_ms()
                log.warning("the seq file %s is unreadable (%s); seq starts at %d", self.path, exc, self._floor)
        self._value: Dict[str, int] = dict(self._ceiling)

    def raise_floor(self, counters: Dict[str, int]) -> None:
        """Never count below these (counters an older version kept elsewhere)."""
        for suffix, value in counters.items():
            if value > self._value.get(suffix, self._floor):
                self._value[suffix] = value

    def next(self, suffix: str) -> int:
        value = self._value.get(suffix, self._floor) + 1
        self._value[suffix] = value
        if value > self._ceiling.get(suffix, self._floor) and time.monotonic() >= self._retry_at:
            self._save(dict(self._ceiling, **{suffix: value + self.block - 1}))
        return value

    def _save(self, ceilings: Dict[str, int]) -> bool:
        from edge_sdk.fsutil import atomic_write_json

        try:
            atomic_write_json(self.path, {"seq": ceilings, "floor": self._floor})
        except OSError as exc:
            if not self._failing:
                log.warning("cannot write %s (%s); seq goes on in memory and may repeat after a crash", self.path, exc)
            self._failing = True
            self._retry_at = time.monotonic() + self.RETRY_S
            return False
        self._ceiling = ceilings
        self._failing = False
        return True

    def close(self) -> None:
        """Write the exact counters: the next start continues without a gap."""
        self._save(dict(self._ceiling, **self._value))


def seq_path(queue_path: Path) -> Path:
    """Where the seq counters of a queue live: `<queue stem>.seq.json` beside it."""
    queue_path = Path(queue_path)
    return queue_path.with_name(f"{queue_path.stem}.seq.json")
