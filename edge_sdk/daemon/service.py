"""`edge-sdk run`: the service loop. The pipeline, continuously, with telemetry, health alerts,
commands and hot reload, until a signal or the end of the source.

    daemon = Daemon(load_daemon_config(Path("device.toml")), config_path=Path("device.toml"))
    code = daemon.run()

Who owns what: the model, its mode and its thresholds belong to one RunningModel
(edge_sdk.daemon.model), which loads the model and hands it to the Pipeline; commands
(edge_sdk.daemon.commands) and hot reload (edge_sdk.daemon.reload) change it only through
that object, on the frame loop, between two frames. The telemetry publisher and reporter
(edge_sdk.telemetry) only report. Everything is built in `Daemon.__init__`; `run()` starts it.

Signals: SIGTERM and SIGINT stop cleanly (last telemetry flushed, status `offline`), SIGHUP
re-reads the config file and applies what can change at run time (telemetry, health, bundle).
When the pipeline dies, the `pipeline_stopped` alert (critical) and the log say which stage
failed and why ("pipeline stopped: capture: SourceError: ..."), and so does the offline
status's `reason`. Under systemd the daemon says READY=1 once the frame loop runs, WATCHDOG=1
from the frame loop, STOPPING=1 on shutdown, and writes the health file (edge_sdk.daemon.health).
Exit codes: 0 after a clean stop or the end of the source; an
EdgeSdkError's own code (2 config, 8 bundle, 9 source, 10 backend, 11 telemetry...); 1 for
anything unexpected.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import platform
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from edge_sdk import __version__
from edge_sdk.daemon.ab import ABControl
from edge_sdk.daemon.commands import MAX_PAYLOAD as MAX_COMMAND, CommandProcessor
from edge_sdk.daemon.config import DaemonConfig, load_daemon_config
from edge_sdk.daemon.drift import DriftMonitor, StreamTurns
from edge_sdk.daemon.fetch import BundleFetcher
from edge_sdk.daemon.handlers import CommandHandlers
from edge_sdk.daemon.model import RunningModel
from edge_sdk.daemon.promotion import ShadowControl, bundle_name
from edge_sdk.daemon.reload import HotReloader
from edge_sdk.daemon.streams import StreamsPipeline
from edge_sdk.daemon.running import RunningRecord
from edge_sdk.daemon.checks import OUTPUT_STOP_S, STATUS_HEADROOM, changed_keys, check_status_fits  # noqa: F401
from edge_sdk.errors import ConfigError, EdgeSdkError
from edge_sdk.runtime.config import PipelineConfig
from edge_sdk.runtime.model import Model
from edge_sdk.runtime.streams import fitted_policy
from edge_sdk.runtime.types import PipelineStats
from edge_sdk.telemetry.disk_queue import default_queue_path
from edge_sdk.telemetry.health import HealthMonitor
from edge_sdk.telemetry.publisher import LinePublisher, MqttPublisher, Publisher
from edge_sdk.telemetry.reporter import Reporter

log = logging.getLogger("edge_sdk.daemon")

# (config, model=..., detector=...) -> a Pipeline-like object
PipelineFactory = Callable[..., Any]


def versions() -> Dict[str, str]:
    out = {"edge_sdk": __version__, "python": platform.python_version()}
    for name in ("numpy", "onnxruntime", "tensorrt", "cv2"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "__version__"):
            out[name] = str(module.__version__)
    return out


class Daemon:
    """Runs a pipeline until stopped, with telemetry, commands and hot reload.

    `pipeline_factory(config, model=..., detector=...) -> Pipeline-like` (iterable of
    FrameResult; `stats`, `open`, `close`, `capture`, `swap_detector`) and `publisher` are
    injectable for tests; by default the real Pipeline and an MQTT (or JSON-lines) publisher
    are built from the config. The model and detector the factory is given belong to
    `self.model` (a RunningModel): the pipeline runs them and closes neither.
    """

    def __init__(
        self,
        config: DaemonConfig,
        config_path: Optional[Path] = None,
        overrides: Optional[Mapping[str, Any]] = None,
        pipeline_factory: Optional[PipelineFactory] = None,
        publisher: Optional[Publisher] = None,
        stream: Optional[IO[str]] = None,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.overrides = dict(overrides or {})
        self.pipeline_factory = pipeline_factory or _default_pipeline
        self.instance_id = uuid.uuid4().hex
        self.started_ms = int(time.time() * 1000)
        self.frames = 0
        self._inbox: Deque[bytes] = collections.deque(maxlen=64)
        self.commands_dropped = 0  # lost to a full inbox (a flood); the processor counts the rest
        self._stop_reason: Optional[str] = None
        self._hup = False
        self._looping = threading.Event()  # set once the frame loop runs (reporter started)
        self._done = threading.Event()
        self._last_result: Any = None
        self._last_of: Dict[str, Any] = {}  # each stream's last FrameResult (a snapshot of that stream)
        self.pipeline: Any = None  # built by run(), around the model it loads there
        self.output: Any = None  # [output]: an edge_sdk.output.video.AnnotatedSink, started by run()
        # the publisher's own alerts (a full disk, a refused login) until the first status is out
        self._alert_lock = threading.Lock()
        self._early_alerts: List[Tuple[str, bool, str, str]] = []
        self._alerts_ready = False

        self._injected_publisher = publisher is not None
        self.publisher: Publisher = publisher if publisher is not None else self._make_publisher(stream)
        self.publisher.on_alert = self._publisher_alert
        replay = None
        if config.mqtt is not None:
            replay = default_queue_path(config.device.id, config.mqtt.queue_dir).with_suffix(".commands.sqlite3")
        self.handlers = CommandHandlers(self)
        self.commands = CommandProcessor(
            self.handlers.table(),
            secret=config.secret(), max_skew_s=config.device.max_skew_s, device_id=config.device.id, replay_path=replay)
        self.model = RunningModel(config.pipeline)
        # what runs after a reload or promotion, kept across restarts (edge_sdk.daemon.running)
        self.running = RunningRecord(default_queue_path(config.device.id, config.mqtt.queue_dir).with_suffix(".running.json")
                                     if config.mqtt is not None else None)
        self.bundle_origin = "config"
        self.model.memory_margin_mb = config.shadow.memory_margin_mb  # a reload's engine build keeps it free
        self.several = len(config.pipeline.streams()) > 1  # several [[sources]]: one batched model for all
        self.reloader = HotReloader(Path(config.device.models_dir) if config.device.models_dir else None,
                                    self.model.load, on_result=self._reload_result)
        self.fetcher = BundleFetcher(self.reloader.models_dir)  # reload by url: download, verify, unpack
        self.rollout: Optional[Dict[str, str]] = None  # reload's role, until a reload without one
        self.shadow = ShadowControl(self, config.shadow)  # shadow runs, promotion, rollback (one source)
        self.ab = ABControl(self, config.shadow)  # A/B tests (several sources)
        system = None
        if config.telemetry.system:
            from edge_sdk.telemetry.system import SystemStats

            system = SystemStats()
        t, h = config.telemetry, config.health
        drift = DriftMonitor(self._input_stats, h.drift_distance, h.drift_sample_s, h.drift_window)
        self.reporter = Reporter(
            self.publisher, HealthMonitor(config.health.rules()), self._pipeline_stats,
            interval_s=t.interval_s, window_s=t.window_s, target_fps=t.target_fps, model=self.model.describe,
            system=system, detections=t.detections, commands=self._command_counters, drift=drift,
            streams=self._streams_report if self.several else None, outputs=self._output_stats)
        # systemd's READY/WATCHDOG/STOPPING (Type=notify units) and the health file, fed by the frame
        # loop (imported here: `python -m edge_sdk.daemon.health` must not find itself imported already)
        from edge_sdk.daemon.health import Heartbeat, health_path_from_environ
        from edge_sdk.daemon.notify import SystemdNotifier

        self.heartbeat = Heartbeat(SystemdNotifier.from_environ(), health_path_from_environ(), config.device.id)

    # -- wiring --------------------------------------------------------------------------------
    def _make_publisher(self, stream: Optional[IO[str]]) -> Publisher:
        cfg = self.config
        if cfg.mqtt is None:
            return LinePublisher(cfg.device.id, stream)
        path = default_queue_path(cfg.device.id, cfg.mqtt.queue_dir)
        return MqttPublisher(cfg.mqtt, cfg.device.id, path, on_command=self._on_command)

    def _on_command(self, payload: bytes) -> None:  # paho's thread: queue for the frame loop
        if len(self._inbox) == self._inbox.maxlen:
            self.commands_dropped += 1
        # an oversized payload is refused by its size alone: keep no more of it than that takes
        self._inbox.append(payload[:MAX_COMMAND + 1])

    def _publisher_alert(self, name: str, active: bool, message: str, severity: str) -> None:
        """A condition of the publisher itself (a full disk, a refused login) as an alert; called
        from the publisher's threads, possibly before the first status is out."""
        with self._alert_lock:
            if self._alerts_ready:
                self.reporter.raise_alert(name, active, message, severity)
            else:
                self._early_alerts.append((name, active, message, severity))

    def _publisher_alerts_ready(self) -> None:
        with self._alert_lock:
            for args in self._early_alerts:
                self.reporter.raise_alert(*args)
            self._early_alerts.clear()
            self._alerts_ready = True

    def _input_stats(self) -> Any:
        """The running bundle's calibration-image statistics (the drift monitor's reference), or
        None: no model yet, or a bundle that records none."""
        bundle = getattr(self.model.model, "bundle", None)
        return bundle.input_stats if bundle is not None else None

    @property
    def last_result(self) -> Any:
        """The frame loop's last FrameResult (what a snapshot writes), or None before the first."""
        return self._last_result

    def last_result_of(self, stream: str) -> Any:
        """Stream `stream`'s last FrameResult, or None before its first."""
        return self._last_of.get(stream)

    def _streams_report(self) -> Optional[Dict[str, Any]]:
        """With several sources: the batcher's figures and each stream's state and counters."""
        report = getattr(self.pipeline, "report", None)
        return report() if report is not None else None

    def _output_stats(self) -> List[Dict[str, Any]]:
        output = self.output
        return output.stats() if output is not None else []

    def _pipeline_stats(self) -> PipelineStats:
        return self.pipeline.stats if self.pipeline is not None else PipelineStats()

    def status(self) -> Dict[str, Any]:
        """The retained status body: `instance_id` tells two daemons with one device id apart,
        `commands_auth` says whether commands must be signed ("hmac"), are open to any broker
        client ("none"), or cannot arrive (no broker: "off"). The model's fields come from the
        running model (bundle, backend, precision and why, mode, thresholds)."""
        model = self.model.describe()
        return {
            "started_ts": self.started_ms,
            "versions": versions(),
            "target": model["target"],
            "backend": model["backend"],
            "precision": model["precision"],
            "precision_reason": model["precision_reason"],
            "device_choice": model.get("device_choice"),
            "bundle_hash": model["bundle_hash"],
            "bundle": bundle_name(self.model.model),
            "bundle_origin": self.bundle_origin,
            "shadow": self.shadow.describe(),
            "rollout": self.rollout,
            "download": self.fetcher.progress,
            "engine_build": self.model.engine_build.describe(),
            "ab": self.ab.describe(),
            "mode": model["mode"],
            "thresholds": model["thresholds"],
            "source": self.config.pipeline.source.uri or None,
            "streams": {s.id: dict({"source": s.uri or None}, **self.model.stream_settings(s.id))
                        for s in self.config.pipeline.streams()},
            "telemetry_interval_s": self.reporter.interval_s,
            "instance_id": self.instance_id,
            "host": socket.gethostname(),
            "commands_auth": self._commands_auth(),
        }

    def _commands_auth(self) -> str:
        if self.config.mqtt is None and not self._injected_publisher:
            return "off"
        return "hmac" if self.config.device.hmac_secret_env else "none"

    def _command_counters(self) -> Dict[str, int]:
        counters = self.commands.counters()
        counters["dropped"] += self.commands_dropped
        return counters

    # -- commands (frame loop) -------------------------------------------------------------------
    def _drain_commands(self, limit: int = 8) -> None:
        """Answer up to `limit` queued commands (a flood cannot hold the frame loop)."""
        for _ in range(min(limit, len(self._inbox))):
            response = self.commands.handle(self._inbox.popleft())
            if response is None:
                continue  # a refusal beyond the answer budget: counted, not answered
            log.info("command %s %s: %s", response.get("cmd"), response.get("id"),
                     "ok" if response["ok"] else response.get("error"))
            self.publisher.publish("cmd/response", response)

    # -- reload ----------------------------------------------------------------------------------
    def _reload_result(self, model: Optional[Model], error: Optional[BaseException], where: str) -> None:
        """Every outcome of a reload: an alert (raised again for each failure) and, for a reload
        asked by a command, that command's final response. Runs on the reload worker (failure)
        or the frame loop (success, or a model that does not fit the running mode)."""
        cid = self.reloader.take_tag()
        if error is not None:
            message = f"reload of {where} refused, the old model keeps running: {error}"
            self.reporter.raise_alert("reload_failed", True, message, "critical", repeat=True)
            final: Dict[str, Any] = {"ok": False, "error": message}
        else:
            self.reporter.raise_alert("reload_failed", False, f"reload of {where} succeeded")
            result = {"loaded": where, "bundle_hash": model.bundle_hash if model is not None else None}
            result.update((key, value) for key, value in self.model.describe().items() if key in ("mode", "thresholds"))
            final = {"ok": True, "result": result}
        if cid is not None:
            self.publisher.publish("cmd/response", dict(final, id=cid, cmd="reload", final=True))

    def _swap_in(self, new: Model) -> None:
        where = str(new.bundle.root) if new.bundle is not None else "a bundle"
        try:
            self.model.swap(new)
        except Exception as exc:  # noqa: BLE001 - nothing raised by a swap stops the running model: reported
            if not isinstance(exc, EdgeSdkError):  # not one of ours (numpy, a backend): its traceback is logged
                log.exception("swapping in %s failed", where)
            self._reload_result(None, exc if isinstance(exc, EdgeSdkError) else
                                RuntimeError(f"{type(exc).__name__}: {exc}"), where)
            return
        self._reload_result(new, None, where)
        self.remember_running("reload")
        self.reporter.raise_alert("rollback", False, f"reload of {where} runs")  # a rolled-back promotion is past
        self.publisher.set_status(self.status())
        log.info("now running bundle %s", new.bundle_hash)

    def _output_changed(self, name: str, down: bool, message: str) -> None:
        """A video output died (detection goes on without it) or came back: the output_failed alert."""
        self.reporter.raise_alert("output_failed", down, message, "warning", repeat=True)
        self.publisher.set_status(self.status())

    def _open_model(self) -> Tuple[Model, Any]:
        """The model to start with: the bundle a reload or promotion left running (kept across the
        restart, while the config names the bundle it named then), else the configured one."""
        configured = self.config.pipeline.bundle
        record = self.running.load(configured)
        if record is not None:
            try:
                opened = self.model.open(record["bundle"])
            except EdgeSdkError as exc:  # the kept bundle does not load: the configured one runs
                log.error("the bundle the last %s left running, %s, does not load (%s); running the configured %s",
                          record["how"], record["bundle"], exc, configured)
                self.running.clear()
            else:
                self.bundle_origin = record["how"]
                log.warning("running %s, which the last %s left running (kept in %s); the config names %s",
                            record["bundle"], record["how"], self.running.path, configured)
                return opened
        return self.model.open(configured)

    def remember_running(self, how: str) -> None:
        """After a swap that settles: keep what runs now for a restart (edge_sdk.daemon.running)."""
        model = self.model.model
        bundle = model.bundle.root if model is not None and model.bundle is not None else None
        self.running.save(bundle, self.config.pipeline.bundle, how, model.bundle_hash if model is not None else None)
        configured = self.config.pipeline.bundle
        same = bundle is not None and configured is not None and Path(configured).resolve() == Path(bundle).resolve()
        self.bundle_origin = "config" if same else how

    # -- signals ---------------------------------------------------------------------------------
    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the loop to stop after the current frame (any thread, signal handlers too)."""
        if self._stop_reason is None:
            self._stop_reason = reason
            threading.Thread(target=self._unblock, name="stop-watch", daemon=True).start()

    def _unblock(self) -> None:
        """If the source stalls, the loop waits for a frame that never comes: stop capturing."""
        if self._looping.wait(0) and not self._done.wait(2.0):
            capture = self.pipeline.capture if self.pipeline is not None else None
            if capture is not None:
                log.warning("source is not delivering frames; stopping capture")
                capture.stop()

    def _install_signals(self) -> Dict[int, Any]:
        previous: Dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous
        for sig, handler in (
            (signal.SIGTERM, lambda s, f: self.request_stop("SIGTERM")),
            (signal.SIGINT, lambda s, f: self.request_stop("SIGINT")),
        ):
            previous[sig] = signal.signal(sig, handler)
        if hasattr(signal, "SIGHUP"):
            previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hup)
        return previous

    def _on_hup(self, signum: int, frame: Any) -> None:
        self._hup = True  # the frame loop re-reads the config between two frames

    def reload_config(self) -> None:
        """SIGHUP: re-read the config file and apply what can change while running."""
        self._hup = False
        if self.config_path is None:
            log.info("SIGHUP: no config file to re-read")
            return
        try:
            new = load_daemon_config(self.config_path, self.overrides)
        except ConfigError as exc:
            log.error("SIGHUP: config not applied, keeping the running one: %s", exc)
            self.reporter.raise_alert("config_invalid", True, f"re-read config refused: {exc}", repeat=True)
            return
        except Exception as exc:  # noqa: BLE001 - a loader bug must not end the device; logged in full
            log.exception("SIGHUP: config not applied, keeping the running one: reading it failed")
            self.reporter.raise_alert("config_invalid", True,
                                      f"re-read config failed: {type(exc).__name__}: {exc}", repeat=True)
            return
        old = self.config
        self.reporter.set_interval(new.telemetry.interval_s)
        self.reporter.target_fps = new.telemetry.target_fps
        self.reporter.detections = new.telemetry.detections
        self.reporter.health.rules = new.health.rules()
        self.reporter.drift.configure(new.health.drift_distance, new.health.drift_sample_s, new.health.drift_window)
        bundle = old.pipeline.bundle
        if new.pipeline.bundle != old.pipeline.bundle and new.pipeline.bundle:
            try:
                self.reloader.load(Path(new.pipeline.bundle), new.pipeline.precision)
                bundle = new.pipeline.bundle
            except ConfigError as exc:  # a reload is in progress: this one is not started, SIGHUP again later
                log.error("SIGHUP: bundle %s not loaded: %s", new.pipeline.bundle, exc)
                self.reporter.raise_alert("reload_failed", True, f"reload of {new.pipeline.bundle} refused, the old "
                                          f"model keeps running: {exc}", "critical", repeat=True)
        restart = [k for k in ("source", "sources", "backend", "threads", "mode", "score_threshold", "nms_iou", "tracking")
                   if getattr(new.pipeline, k) != getattr(old.pipeline, k)]
        # what the daemon took at start and cannot change while it runs: commands' signing and
        # clock skew, the model and snapshot folders, the shadow's and the output's settings, the broker
        restart += changed_keys("device", old.device, new.device) + changed_keys("shadow", old.shadow, new.shadow)
        restart += changed_keys("output", old.output, new.output)
        if new.mqtt != old.mqtt:
            restart.append("mqtt")
        self.config = dataclasses.replace(old, telemetry=new.telemetry, health=new.health,
                                          pipeline=dataclasses.replace(old.pipeline, bundle=bundle))
        self.publisher.set_status(self.status())
        if restart:
            security = [k for k in restart if k in ("device.hmac_secret_env", "device.max_skew_s", "mqtt")]
            message = (f"re-read config NOT applied for {', '.join(restart)}: restart the service to apply "
                       + ("them (the running daemon still checks commands as it started: "
                          + ", ".join(security) + ")" if security else "them")
                       + "; telemetry, health and the bundle were applied (`set` changes mode and thresholds now)")
            log.warning("SIGHUP: %s", message)
            self.reporter.raise_alert("config_invalid", True, message, "critical" if security else "warning",
                                      repeat=True)
            return
        self.reporter.raise_alert("config_invalid", False, "config re-read")
        log.info("SIGHUP: config re-read from %s", self.config_path)

    # -- the loop --------------------------------------------------------------------------------
    def _check_unique(self) -> None:
        """ConfigError when another live daemon already runs with this device id."""
        cfg = self.config
        if cfg.mqtt is None or self._injected_publisher or cfg.device.instance_check_s <= 0:
            return
        from edge_sdk.telemetry.instances import live_instance

        other = live_instance(cfg.mqtt, cfg.device.id, cfg.secret(), cfg.device.instance_check_s)
        if other is not None:
            raise ConfigError(
                f"device id {cfg.device.id!r} is already in use by a live daemon on {cfg.mqtt.redacted_url()} "
                f"(host {other.get('host', '?')}, instance {other.get('instance_id', '?')}, started_ts "
                f"{other.get('started_ts', '?')}); two daemons with one id kick each other off the broker: "
                "give this one its own [device] id, or stop the other")

    def run(self) -> int:
        cfg = self.config
        try:
            self._check_unique()
        except ConfigError as exc:
            log.error("%s", exc)
            self.reporter.stop(final_report=False)
            self.commands.close()
            self.publisher.stop(timeout=0.0)  # never started: closes its queue file, keeps what it holds
            return exc.exit_code
        if self._commands_auth() == "none":
            log.warning("commands are accepted WITHOUT authentication: any client of the broker can change "
                        "thresholds, reload bundles and take snapshots; set device.hmac_secret_env to require "
                        "signed commands")
        previous = self._install_signals()
        code = 0
        reason = "stopped"
        self.heartbeat.starting()
        self.publisher.start()
        try:
            if not cfg.pipeline.bundle:
                raise ConfigError("no bundle: set `bundle` in the config (or --bundle DIR); build one with `edge-sdk build`")
            if self.several:
                self.model.serve_streams(cfg.pipeline.batched_streams(), cfg.pipeline.batching)
            if cfg.output.out:  # a port in use or a missing encoder stops the start here, before the model loads
                shown = cfg.output.shown(cfg.pipeline.stream_ids())
                fps = next(s.fps for s in cfg.pipeline.streams() if s.id == shown) if self.several else cfg.pipeline.source.fps
                self.output = cfg.output.open(fps, on_change=self._output_changed)
            model, detector = self._open_model()
            self.pipeline = self._make_pipeline(model, detector)
            self.model.attach(self.pipeline)
            self.pipeline.open()
            self._publisher_alerts_ready()
            status = self.status()
            check_status_fits(status)
            self.publisher.set_status(status)
            self.reporter.start()
            self._looping.set()
            sources = ", ".join(f"{s.id}={s.uri}" for s in cfg.pipeline.streams()) if self.several else cfg.pipeline.source.uri
            log.info("running %s on %s as %s", self.model.describe()["bundle_hash"], sources, cfg.device.id)
            self.heartbeat.ready(f"running {self.model.describe()['bundle_hash']} on {sources}")
            reason = self._loop()
        except EdgeSdkError as exc:
            code, reason = exc.exit_code, self._stopped_by(exc, unexpected=False)
        except Exception as exc:  # noqa: BLE001 - reported, then the exit code says it failed
            code, reason = 1, self._stopped_by(exc, unexpected=True)
        finally:
            self._done.set()
            code = self._shutdown(reason, code)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return code

    def _make_pipeline(self, model: Model, detector: Any) -> Any:
        """One source: the injected factory's pipeline (the real Pipeline by default). Several:
        a StreamsPipeline with the batcher's settings fitted to what the bundle takes (an explicit
        max_batch_size it cannot take: ConfigError naming the rebuild); frames are kept when
        snapshots can be taken, else those the drift monitor samples (the streams in turn) and
        those of the stream [output] shows."""
        cfg = self.config
        if not self.several:
            return self.pipeline_factory(cfg.pipeline, model=model, detector=detector)
        policy, note = fitted_policy(cfg.pipeline.batching, model, len(cfg.pipeline.streams()))
        if note is not None:
            log.warning(note)
        keep: Any = True
        if cfg.device.snapshot_dir is None:
            turns = StreamTurns(self.reporter.drift, [s.id for s in cfg.pipeline.streams()])
            shown = cfg.output.shown(cfg.pipeline.stream_ids()) if cfg.output.out else None
            keep = turns if shown is None else (lambda sid: turns(sid) or sid == shown)  # turns sees every frame
        return StreamsPipeline(cfg.pipeline, detector, policy, keep_frames=keep)

    def _stopped_by(self, exc: BaseException, unexpected: bool) -> str:
        """Log the error that ended the run and, once reporting runs, raise the
        `pipeline_stopped` alert; both name the stage that failed when the pipeline knows it
        ("pipeline stopped: capture: SourceError: ..."). Returns the offline status's reason."""
        stage = getattr(self.pipeline, "failed_stage", None) if self.pipeline is not None else None
        detail = f"{stage}: " if stage else ""
        detail += f"{type(exc).__name__}: {exc}"
        message = f"pipeline stopped: {detail}"
        if unexpected:
            log.exception("%s", message)
        else:
            log.error("%s", message)
        if self._looping.is_set():
            self.reporter.raise_alert("pipeline_stopped", True, message, "critical")
        return f"error: {detail}"

    def _loop(self) -> str:
        reporter, reloader, inbox, model, heartbeat = self.reporter, self.reloader, self._inbox, self.model, self.heartbeat
        shadow, ab, output = self.shadow, self.ab, self.output
        shown = self.config.output.shown(self.config.pipeline.stream_ids())
        for result in self.pipeline:
            reporter.observe(result)
            if shadow.active:
                shadow.observe(result)  # the shadow's frames, the watch after a promotion
            if ab.active:
                ab.observe(result)  # each arm's figures
            if output is not None and result.stream == shown:
                output.write(result)  # never waits: a full queue drops its oldest frame
            self._last_result = self._last_of[result.stream] = result
            self.frames += 1
            heartbeat.beat(self.frames)  # WATCHDOG=1 and the health file, at most once per period
            if model.retiring:
                model.retire_unused()  # models replaced by a reload, once the pipeline no longer runs them
            if inbox:
                self._drain_commands()
            new = reloader.poll()
            if new is not None and reloader.shadow:  # a candidate beside the live model: a shadow's or arm B's
                (shadow.start if ab.pending is None else ab.start)(
                    new, str(new.bundle.root) if new.bundle is not None else "a bundle", reloader.take_tag())
            elif new is not None:
                self._swap_in(new)
            if self.fetcher.changed | model.engine_build.due():  # a download's or an engine build's progress, at most once a second
                self.fetcher.changed = False
                self.publisher.set_status(self.status())
            if self._hup:
                self.reload_config()
            if reporter.error is not None or self.publisher.error is not None:
                reporter.check()
            if self._stop_reason is not None:
                return self._stop_reason
        if inbox:
            self._drain_commands()
        return self._stop_reason or "source ended"

    def _shutdown(self, reason: str, code: int) -> int:
        final: Dict[str, Any] = {}
        self.heartbeat.stopping(reason)
        try:
            self.reporter.stop(final_report=self._looping.is_set())
            final = dict(self.status(), reason=reason)
        finally:
            if self.pipeline is not None:
                self.pipeline.close()
            self.shadow.close()
            self.fetcher.stop()  # a download in progress ends at its next block, its .part kept
            if self.output is not None:  # a file gets its end; a stalled output is killed, within the unit's stop bound
                killed = self.output.close(OUTPUT_STOP_S)
                if killed:
                    log.error("video output(s) %s did not end within %g s and were killed: a file among them may "
                              "lack its end", ", ".join(killed), OUTPUT_STOP_S)
            self.reloader.join(10)
            leftover = self.reloader.poll()
            if leftover is not None:
                leftover.close()
            self.model.close()
            self.commands.close()
            try:
                self.publisher.stop(final_status=final or {"reason": reason}, timeout=5.0)
            except EdgeSdkError as exc:
                log.error("%s", exc)
                code = code or exc.exit_code
        log.info("stopped (%s)", reason)
        self.heartbeat.stopped(reason, code)
        return code


def _default_pipeline(config: PipelineConfig, model: Any = None, detector: Any = None) -> Any:
    from edge_sdk.runtime.pipeline import Pipeline
    return Pipeline(config, model=model, detector=detector)
