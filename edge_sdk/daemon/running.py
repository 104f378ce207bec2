"""The bundle the daemon runs after a reload or a promotion, kept across restarts.

A device promoted by a rollout and then restarted (a power cut, a watchdog, an update) used to
come back with the bundle its config names, while the fleet believed it had been promoted. After
each swap that settles (a reload, a promotion once its watch has passed, a rollback, an A/B
promotion) the daemon writes the bundle it runs to `<queue_dir>/<device>.running.json`
(atomically), with the bundle the config named then; at start it runs that bundle instead of
the configured one while the config still names the same bundle (an operator who edits the
config's `bundle` wins, and the record is dropped). A record that is unreadable, names no folder
or a bundle that no longer loads is dropped with a warning: the configured bundle runs. The
status's `bundle_origin` says which ("config", "reload", "promotion", "rollback", "ab").
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Dict, Optional

from edge_sdk.fsutil import atomic_write_json

log = logging.getLogger(__name__)

SCHEMA = "edge-sdk/running/1"
MAX_BYTES = 16 * 1024
ORIGINS = ("reload", "promotion", "rollback", "ab")


class RunningRecord:
    """The record file (None: nothing is kept, a daemon without a broker takes no commands)."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path

    def save(self, bundle: Optional[Path], configured: Optional[str], how: str, bundle_hash: Optional[str]) -> None:
        """Keep `bundle` as what runs (`how` it came); the configured bundle itself needs no
        record (dropped). A write that fails is logged: the device runs on either way."""
        if self.path is None:
            return
        if bundle is None or configured is not None and Path(configured).resolve() == Path(bundle).resolve():
            self.clear()
            return
        try:
            atomic_write_json(self.path, {"schema": SCHEMA, "bundle": str(bundle), "configured": configured,
                                          "how": how, "bundle_hash": bundle_hash, "ts": int(time.time() * 1000)})
        except OSError as exc:
            log.error("cannot keep the running bundle in %s (%s): a restart runs the configured bundle", self.path,
                      exc.strerror or exc)

    def load(self, configured: Optional[str]) -> Optional[Dict[str, Any]]:
        """The record to start from: {"bundle", "how", ...} while the config still names the bundle
        it named when the record was written and the bundle's folder exists; None otherwise (a
        record that no longer applies is dropped, saying why)."""
        from edge_sdk.validate import UntrustedInput, loads_untrusted

        if self.path is None or not self.path.is_file():
            return None
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
            record = loads_untrusted(data, MAX_BYTES, what=str(self.path))
        except (OSError, UntrustedInput) as exc:
            return self._drop(f"unreadable ({exc})")
        if not isinstance(record, dict) or record.get("schema") != SCHEMA or not isinstance(record.get("bundle"), str) \
                or record.get("how") not in ORIGINS:
            return self._drop("not a running-bundle record")
        if record.get("configured") != configured:
            return self._drop(f"the config now names {configured}, not {record.get('configured')}: the config wins")
        if not Path(record["bundle"]).is_dir():
            return self._drop(f"{record['bundle']} is gone")
        return record

    def clear(self) -> None:
        if self.path is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("cannot remove %s (%s)", self.path, exc.strerror or exc)

    def _drop(self, why: str) -> None:
        log.warning("running-bundle record %s dropped: %s; the configured bundle runs", self.path, why)
        self.clear()
        return None
