"""The daemon's remote commands: what `ping`, `set`, `snapshot`, `reload`, `promote` and `abort`
do to the running daemon. The CommandProcessor (edge_sdk.daemon.commands) checks a command (allow-list, schema,
signature, rate limit) and calls the handler of its kind on the frame loop, between two frames;
a handler answers with the response's `result`, or raises CommandRejected (or a ConfigError from
the model) to refuse it.

`set` (mode, thresholds) and `snapshot` take an optional `stream`, a stream id of the config
(`[[sources]]` ids, "0" for the one `[source]`): without it they apply to every stream; an id the
device does not run is refused (UnknownStream, naming the ones it runs). The telemetry settings
of `set` are the device's, not a stream's: with `stream` they are refused. With several
streams, each has its own mode and thresholds (one model serves them all, the thresholds apply
per row at decode): a `set` with `stream` changes that stream's only. `snapshot` with `stream`
writes that stream's last frame.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol

from edge_sdk.daemon.commands import CommandRejected, Handler, UnknownStream
from edge_sdk.daemon.fetch import check_url
from edge_sdk.daemon.reload import resolve_in
from edge_sdk.daemon.snapshots import write_snapshot
from edge_sdk.runtime.detectors.base import THRESHOLDS

if TYPE_CHECKING:
    from edge_sdk.daemon.ab import ABControl
    from edge_sdk.daemon.commands import CommandProcessor
    from edge_sdk.daemon.config import DaemonConfig
    from edge_sdk.daemon.fetch import BundleFetcher
    from edge_sdk.daemon.model import RunningModel
    from edge_sdk.daemon.promotion import ShadowControl
    from edge_sdk.daemon.reload import HotReloader
    from edge_sdk.telemetry.publisher import Publisher
    from edge_sdk.telemetry.reporter import Reporter


DEVICE_SETTINGS = frozenset({"telemetry_interval", "detections", "target_fps"})  # set's keys no stream has


class RunningDaemon(Protocol):
    """What the handlers read and change of the daemon (edge_sdk.daemon.service.Daemon)."""

    config: DaemonConfig
    model: RunningModel
    reporter: Reporter
    publisher: Publisher
    reloader: HotReloader
    fetcher: BundleFetcher
    rollout: Optional[Dict[str, str]]
    shadow: ShadowControl
    ab: ABControl
    commands: CommandProcessor
    frames: int
    started_ms: int

    @property
    def last_result(self) -> Any: ...  # the frame loop's last FrameResult, or None

    def last_result_of(self, stream: str) -> Any: ...  # that stream's last FrameResult, or None

    def status(self) -> Dict[str, Any]: ...

    def remember_running(self, how: str) -> None: ...  # keep what runs now for a restart (daemon.running)


class CommandHandlers:
    """The handlers of one daemon, by command name (`table()`)."""

    def __init__(self, daemon: RunningDaemon) -> None:
        self.daemon = daemon

    def table(self) -> Dict[str, Handler]:
        return {"ping": self.ping, "set": self.set, "snapshot": self.snapshot, "reload": self.reload,
                "promote": self.promote, "abort": self.abort}

    def ping(self, args: Dict[str, Any]) -> Dict[str, Any]:
        d = self.daemon
        return {"pong": True, "frames": d.frames, "uptime_s": round(time.time() - d.started_ms / 1000, 3)}

    def streams(self, args: Dict[str, Any]) -> List[str]:
        """The streams a command applies to: its `stream`, when the device runs it, else all."""
        known = self.daemon.config.pipeline.stream_ids()
        if "stream" not in args:
            return known
        if args["stream"] not in known:
            raise UnknownStream(args["stream"], known)
        return [args["stream"]]

    def set(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The model's settings first: they are checked in full before any is applied (a
        ConfigError changes nothing); the telemetry settings, valid by the command's schema,
        cannot fail after them. With `stream`, the mode and thresholds of that stream only."""
        d = self.daemon
        streams = self.streams(args)
        if "stream" in args:
            device_wide = sorted(set(args) & DEVICE_SETTINGS)
            if device_wide:
                raise CommandRejected(f"{', '.join(device_wide)} apply to the whole device, not to stream "
                                      f"{args['stream']!r}: send them in a set without `stream`")
            if not set(args) - {"stream"}:
                raise CommandRejected("set with only `stream` changes nothing: add mode, score_threshold or nms_iou")
        applied: Dict[str, Any] = {}
        thresholds = {key: args[key] for key in THRESHOLDS if key in args}
        stream = args.get("stream")
        if "mode" in args or thresholds:
            # the shadow's detector keeps the mode and thresholds it started with: a change on the live
            # side alone would compare two settings, and after a promotion move the watched figures
            d.shadow.check_idle("set of " + ", ".join(k for k in ("mode", *THRESHOLDS) if k in args))
        if "mode" in args and (args["mode"] != d.model.mode_of(stream) or stream is None and len(streams) > 1):
            applied.update(d.model.set_mode(args["mode"], stream=stream, **thresholds))
        elif thresholds:
            applied.update(d.model.set_thresholds(stream=stream, **thresholds))
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
        return {"applied": applied, "streams": streams}

    def snapshot(self, args: Dict[str, Any]) -> Dict[str, Any]:
        d = self.daemon
        self.streams(args)
        device = d.config.device
        if device.snapshot_dir is None:
            raise CommandRejected("snapshots need device.snapshot_dir in the config")
        result = d.last_result_of(args["stream"]) if "stream" in args else d.last_result
        if "stream" in args and (result is None or result.frame is None):
            raise CommandRejected(f"no frame of stream {args['stream']!r} processed yet")
        if result is None or result.frame is None:
            raise CommandRejected("no frame processed yet")
        name = args.get("name") or f"{device.id}-{int(time.time() * 1000)}-{result.index}"
        written = write_snapshot(device.snapshot_dir, name, result.frame,
                                 dict(result.to_json(), bundle_hash=d.model.describe()["bundle_hash"]),
                                 device.snapshot_max_files, int(device.snapshot_max_mb * 1024 * 1024))
        return {"image": written["image"], "detections": written["detections"], "stream": result.stream,
                "frame": int(result.index), "count": len(result.detections), "removed": written["removed"]}

    def reload(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """Load a bundle to swap in, or with `shadow` to run beside the live model (one source,
        room in memory: edge_sdk.daemon.promotion), or with `ab` to run on arm B's streams
        (several sources: edge_sdk.daemon.ab); refused while a shadow or an A/B test runs or a
        promotion is watched. With `url` and `sha256` the worker first downloads, verifies and
        unpacks the bundle as NAME (edge_sdk.daemon.fetch), then loads it the same way. `role` (a
        rollout's canary, wave k...) shows in the status as `rollout` until a reload without one."""
        d = self.daemon
        current = d.commands.current or {}
        d.shadow.check_idle("reload")
        d.ab.check_idle("reload")
        name, shadow, ab = args["bundle"], bool(args.get("shadow")), args.get("ab")
        if shadow and ab is not None:
            raise CommandRejected("reload takes shadow or ab, not both: a shadow compares on one source, an A/B "
                                  "test splits several")
        if ab is not None:
            d.ab.check_streams(ab["b"])
        beside = shadow or ab is not None  # loaded beside the live model

        def check_fits(where: Path) -> None:
            if ab is not None:
                d.ab.check_fits(where)
            elif shadow:
                d.shadow.check_fits(name, where)

        if "url" in args:
            check_url(args["url"])
            path = d.fetcher.target(name)
            if d.reloader.busy:  # checked again by load(); here so that nothing is touched for a refusal
                raise CommandRejected("a reload is already in progress; wait for its alert or response")

            def prepare() -> None:  # the reload worker
                d.fetcher.fetch(args["url"], args["sha256"], name)
                check_fits(path)

            d.reloader.load(path, args.get("precision"), tag=current.get("id"), shadow=beside, prepare=prepare)
        else:
            if beside:
                if d.reloader.models_dir is None:
                    raise CommandRejected("reload needs a model folder: set models_dir in the device config")
                check_fits(resolve_in(d.reloader.models_dir, name))
            path = d.reloader.request(name, args.get("precision"), tag=current.get("id"), shadow=beside)
        d.ab.pending = list(ab["b"]) if ab is not None else None  # the loaded candidate serves arm B
        rollout = {"role": args["role"], "bundle": name} if "role" in args else None
        if rollout != d.rollout:
            d.rollout = rollout
            d.publisher.set_status(d.status())
        answer: Dict[str, Any] = {"loading": str(path)}
        if shadow:
            answer["shadow"] = True
        if ab is not None:
            answer["ab"] = {"b": list(ab["b"])}
        if "url" in args:
            answer["url"] = args["url"]
        return answer

    def promote(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The shadow candidate becomes the live model; the previous one is kept for the watch.
        In an A/B test, arm B's model runs every stream."""
        if self.daemon.ab.active:
            return self.daemon.ab.promote()
        return self.daemon.shadow.promote()

    def abort(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The shadow candidate is dropped; during the watch after a promotion, roll back now.
        In an A/B test, arm B's streams go back to the live model."""
        if self.daemon.ab.active:
            return self.daemon.ab.abort()
        return self.daemon.shadow.abort()
