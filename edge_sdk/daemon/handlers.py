"""The daemon's remote commands: what `ping`, `set`, `snapshot` and `reload` do to the running
daemon. The CommandProcessor (edge_sdk.daemon.commands) checks a command (allow-list, schema,
signature, rate limit) and calls the handler of its kind on the frame loop, between two frames;
a handler answers with the response's `result`, or raises CommandRejected (or a ConfigError from
the model) to refuse it.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Protocol

from edge_sdk.daemon.commands import CommandRejected, Handler
from edge_sdk.daemon.snapshots import write_snapshot
from edge_sdk.runtime.detectors.base import THRESHOLDS

if TYPE_CHECKING:
    from edge_sdk.daemon.commands import CommandProcessor
    from edge_sdk.daemon.config import DaemonConfig
    from edge_sdk.daemon.model import RunningModel
    from edge_sdk.daemon.reload import HotReloader
    from edge_sdk.telemetry.publisher import Publisher
    from edge_sdk.telemetry.reporter import Reporter


class RunningDaemon(Protocol):
    """What the handlers read and change of the daemon (edge_sdk.daemon.service.Daemon)."""

    config: DaemonConfig
    model: RunningModel
    reporter: Reporter
    publisher: Publisher
    reloader: HotReloader
    commands: CommandProcessor
    frames: int
    started_ms: int

    @property
    def last_result(self) -> Any: ...  # the frame loop's last FrameResult, or None

    def status(self) -> Dict[str, Any]: ...


class CommandHandlers:
    """The handlers of one daemon, by command name (`table()`)."""

    def __init__(self, daemon: RunningDaemon) -> None:
        self.daemon = daemon

    def table(self) -> Dict[str, Handler]:
        return {"ping": self.ping, "set": self.set, "snapshot": self.snapshot, "reload": self.reload}

    def ping(self, args: Dict[str, Any]) -> Dict[str, Any]:
        d = self.daemon
        return {"pong": True, "frames": d.frames, "uptime_s": round(time.time() - d.started_ms / 1000, 3)}

    def set(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The model's settings first: they are checked in full before any is applied (a
        ConfigError changes nothing); the telemetry settings, valid by the command's schema,
        cannot fail after them."""
        d = self.daemon
        applied: Dict[str, Any] = {}
        thresholds = {key: args[key] for key in THRESHOLDS if key in args}
        if "mode" in args and args["mode"] != d.model.mode:
            applied.update(d.model.set_mode(args["mode"], **thresholds))
        elif thresholds:
            applied.update(d.model.set_thresholds(**thresholds))
        if "mode" in args:
            applied["mode"] = args["mode"]
        if "telemetry_interval" in args:
            d.reporter.set_interval(float(args["telemetry_interval"]))
            applied["telemetry_interval"] = d.reporter.interval_s
        if "detections" in args:
            d.reporter.detections = args["detections"]
            applied["detections"] = args["detections"]
        if "target_fps" in args:
            d.reporter.target_fps = float(args["target_fps"])
            applied["target_fps"] = d.reporter.target_fps
        if {"mode", "telemetry_interval"} & set(args) or thresholds:
            d.publisher.set_status(d.status())
        return {"applied": applied}

    def snapshot(self, args: Dict[str, Any]) -> Dict[str, Any]:
        d = self.daemon
        result = d.last_result
        device = d.config.device
        if device.snapshot_dir is None:
            raise CommandRejected("snapshots need device.snapshot_dir in the config")
        if result is None or result.frame is None:
            raise CommandRejected("no frame processed yet")
        name = args.get("name") or f"{device.id}-{int(time.time() * 1000)}-{result.index}"
        written = write_snapshot(device.snapshot_dir, name, result.frame,
                                 dict(result.to_json(), bundle_hash=d.model.describe()["bundle_hash"]),
                                 device.snapshot_max_files, int(device.snapshot_max_mb * 1024 * 1024))
        return {"image": written["image"], "detections": written["detections"], "frame": int(result.index),
                "count": len(result.detections), "removed": written["removed"]}

    def reload(self, args: Dict[str, Any]) -> Dict[str, Any]:
        d = self.daemon
        current = d.commands.current or {}
        path = d.reloader.request(args["bundle"], args.get("precision"), tag=current.get("id"))
        return {"loading": str(path)}
