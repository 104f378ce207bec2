"""`edge-sdk run`: the pipeline, continuously, with telemetry, health alerts, commands and reload.

One device config file holds the pipeline's keys (see edge_sdk/runtime/config.py) plus:

```toml
[device]
id = "cam-entrance"            # default: the host name
models_dir = "/opt/models"     # where `reload` may pick bundles from
snapshot_dir = "/var/lib/edge-sdk/snapshots"
hmac_secret_env = "EDGE_SDK_CMD_SECRET"   # commands must be signed with this secret
snapshot_max_files = 200       # oldest snapshots are removed beyond these caps
snapshot_max_mb = 200
instance_check_s = 5           # refuse to start while another live daemon uses this id (0: off)

[mqtt]                         # absent: telemetry goes to stdout as JSON lines
url = "mqtts://broker.example:8883"
username = "cam-entrance"
password_env = "EDGE_SDK_MQTT_PASSWORD"
ca_file = "/etc/edge-sdk/ca.pem"

[telemetry]
interval_s = 5
window_s = 10
target_fps = 30
detections = "off"             # off | summary | frame

[health]
latency_p99_ms = 300
fps_ratio = 0.9
drop_ratio = 0.05
batch_efficiency = 0.75
temperature_c = 85
```

Signals: SIGTERM and SIGINT stop cleanly (last telemetry flushed, status `offline`), SIGHUP
re-reads the config file and applies what can change at run time (telemetry, health, bundle).
Exit codes: 0 after a clean stop or the end of the source; an EdgeSdkError's own code
(2 config, 8 bundle, 9 source, 10 backend, 11 telemetry...); 1 for anything unexpected.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
import platform
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from edge_sdk import __version__
from edge_sdk.errors import ConfigError, EdgeSdkError
from edge_sdk.fsutil import read_toml
from edge_sdk.runtime.config import PipelineConfig, _merge, config_from_dict
from edge_sdk.telemetry.commands import MAX_PAYLOAD as MAX_COMMAND, CommandProcessor, CommandRejected
from edge_sdk.telemetry.health import HealthConfig, HealthMonitor
from edge_sdk.telemetry.mqtt import BrokerConfig, LinePublisher, MqttPublisher, Publisher, default_queue_path
from edge_sdk.telemetry.reload import HotReloader, Model, ModelFromBundle
from edge_sdk.telemetry.reporter import DETECTIONS_MODES, Reporter
from edge_sdk.validate import finite_number, require_finite

log = logging.getLogger("edge_sdk.daemon")


@dataclass
class DeviceConfig:
    id: str = ""
    models_dir: Optional[str] = None
    snapshot_dir: Optional[str] = None
    hmac_secret_env: Optional[str] = None
    max_skew_s: float = 300.0
    snapshot_max_files: int = 200
    snapshot_max_mb: float = 200.0
    instance_check_s: float = 5.0  # how long a clash check waits for the other instance's answer


@dataclass
class TelemetryConfig:
    interval_s: float = 5.0
    window_s: float = 10.0
    target_fps: float = 0.0
    detections: str = "off"
    system: bool = True


@dataclass
class DaemonConfig:
    pipeline: PipelineConfig
    device: DeviceConfig = field(default_factory=DeviceConfig)
    mqtt: Optional[BrokerConfig] = None
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    health: HealthConfig = field(default_factory=HealthConfig)

    def validate(self, origin: str = "config") -> "DaemonConfig":
        if not self.device.id:
            self.device.id = socket.gethostname() or "edge-device"
        if not all(c.isalnum() or c in "-_." for c in self.device.id):
            raise ConfigError(f"{origin}: device.id {self.device.id!r} may hold only letters, digits, '-', '_' and '.' (it is part of MQTT topics)")
        t = self.telemetry
        for key, value in (("telemetry.interval_s", t.interval_s), ("telemetry.window_s", t.window_s),
                           ("telemetry.target_fps", t.target_fps), ("device.max_skew_s", self.device.max_skew_s),
                           ("device.snapshot_max_mb", self.device.snapshot_max_mb),
                           ("device.instance_check_s", self.device.instance_check_s)):
            finite_number(value, key, origin, ConfigError)
        if self.device.max_skew_s <= 0 or self.device.snapshot_max_mb <= 0 or self.device.instance_check_s < 0:
            raise ConfigError(f"{origin}: device.max_skew_s and device.snapshot_max_mb must be > 0, device.instance_check_s >= 0")
        files = self.device.snapshot_max_files
        if isinstance(files, bool) or not isinstance(files, int) or files < 1:
            raise ConfigError(f"{origin}: device.snapshot_max_files must be an integer >= 1, got {files!r}")
        if not (0.05 <= t.interval_s <= 3600):
            raise ConfigError(f"{origin}: telemetry.interval_s must be between 0.05 and 3600, got {t.interval_s}")
        if t.window_s <= 0 or t.target_fps < 0:
            raise ConfigError(f"{origin}: telemetry.window_s must be > 0 and telemetry.target_fps >= 0")
        if t.detections not in DETECTIONS_MODES:
            raise ConfigError(f"{origin}: telemetry.detections must be one of {', '.join(DETECTIONS_MODES)}, got {t.detections!r}")
        if self.device.hmac_secret_env and self.device.hmac_secret_env not in os.environ:
            raise ConfigError(f"{origin}: device.hmac_secret_env names ${self.device.hmac_secret_env}, which is not set")
        if self.mqtt is not None:
            self.mqtt.validate(f"{origin}: [mqtt]")
        self.health.rules()  # raises for a malformed extra rule
        return self

    def secret(self) -> Optional[bytes]:
        env = self.device.hmac_secret_env
        return os.environ[env].encode("utf-8") if env else None


_SECTIONS = {"device": DeviceConfig, "mqtt": BrokerConfig, "telemetry": TelemetryConfig, "health": HealthConfig}


def daemon_config_from_dict(data: Mapping[str, Any], origin: str = "config", base_dir: Optional[Path] = None) -> DaemonConfig:
    """Split the device config into the pipeline's keys and the daemon's sections."""
    data = dict(require_finite(data, origin, ConfigError))
    parts: Dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        if name not in data:
            continue
        value = data.pop(name)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{origin}: [{name}] must be a table")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"{origin}: unknown key(s) {', '.join(f'{name}.{k}' for k in unknown)}; known keys in [{name}]: {', '.join(sorted(known))}")
        try:
            parts[name] = cls(**dict(value))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{origin}: [{name}] {exc}") from exc
    pipeline = config_from_dict(data, origin)
    if base_dir is not None:
        if pipeline.bundle and not Path(pipeline.bundle).is_absolute():
            pipeline.bundle = str(base_dir / pipeline.bundle)
        dev = parts.get("device")
        for key in ("models_dir", "snapshot_dir"):
            value = getattr(dev, key, None) if dev else None
            if value and not Path(value).is_absolute():
                setattr(dev, key, str(base_dir / value))
    return DaemonConfig(pipeline=pipeline, **parts).validate(origin)


def load_daemon_config(path: Optional[Path], overrides: Optional[Mapping[str, Any]] = None) -> DaemonConfig:
    """Read the device TOML (or start empty) and apply `overrides` (same layout) on top."""
    data: Dict[str, Any] = {}
    origin = "command line"
    base_dir = None
    if path is not None:
        path = Path(path)
        origin = str(path)
        base_dir = path.parent
        data = read_toml(path)
    return daemon_config_from_dict(_merge(data, overrides or {}), origin, base_dir)


def versions() -> Dict[str, str]:
    out = {"edge_sdk": __version__, "python": platform.python_version()}
    for name in ("numpy", "onnxruntime", "tensorrt", "cv2"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "__version__"):
            out[name] = str(module.__version__)
    return out


class Daemon:
    """Runs a pipeline until stopped, with telemetry, commands and hot reload.

    `pipeline_factory(config) -> Pipeline-like` (iterable of FrameResult, `stats`, `open`,
    `close`, `swap_detector`) and `publisher` are injectable for tests; by default the real
    Pipeline and an MQTT (or JSON-lines) publisher are built from the config.
    """

    def __init__(
        self,
        config: DaemonConfig,
        config_path: Optional[Path] = None,
        overrides: Optional[Mapping[str, Any]] = None,
        pipeline_factory: Optional[Callable[[PipelineConfig], Any]] = None,
        publisher: Optional[Publisher] = None,
        stream: Optional[IO[str]] = None,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.overrides = dict(overrides or {})
        self.pipeline_factory = pipeline_factory or _default_pipeline
        self._publisher = publisher
        self._stream = stream
        self._inbox: Deque[bytes] = collections.deque(maxlen=64)
        self.commands_dropped = 0  # lost to a full inbox (a flood); the processor counts the rest
        self.instance_id = uuid.uuid4().hex
        self._stop_reason: Optional[str] = None
        self._hup = False
        self._running = threading.Event()
        self._done = threading.Event()
        self.pipeline: Any = None
        self.reporter: Optional[Reporter] = None
        self._alert_lock = threading.Lock()  # the publisher's own alerts, possibly before the reporter exists
        self._early_alerts: List[Tuple[str, bool, str, str]] = []
        self._alerts_ready = False
        self.model: Optional[Model] = None  # the model loaded by a reload (None: the pipeline's own)
        self._last_result: Any = None
        self.started_ms = int(time.time() * 1000)
        self.frames = 0

    # -- wiring --------------------------------------------------------------------------------
    def _on_command(self, payload: bytes) -> None:  # paho's thread: queue for the frame loop
        if len(self._inbox) == self._inbox.maxlen:
            self.commands_dropped += 1
        # an oversized payload is refused by its size alone: keep no more of it than that takes
        self._inbox.append(payload[:MAX_COMMAND + 1])

    def _publisher_alert(self, name: str, active: bool, message: str, severity: str) -> None:
        """A condition of the publisher itself (a full disk, a refused login) as an alert; called
        from the publisher's threads, possibly before the reporter exists."""
        with self._alert_lock:
            if self._alerts_ready and self.reporter is not None:
                self.reporter.raise_alert(name, active, message, severity)
            else:
                self._early_alerts.append((name, active, message, severity))

    def _publisher_alerts_ready(self) -> None:
        with self._alert_lock:
            assert self.reporter is not None
            for args in self._early_alerts:
                self.reporter.raise_alert(*args)
            self._early_alerts.clear()
            self._alerts_ready = True

    def _make_publisher(self) -> Publisher:
        cfg = self.config
        if cfg.mqtt is None:
            return LinePublisher(cfg.device.id, self._stream)
        path = default_queue_path(cfg.device.id, cfg.mqtt.queue_dir)
        return MqttPublisher(cfg.mqtt, cfg.device.id, path, on_command=self._on_command)

    def status(self) -> Dict[str, Any]:
        """The retained status body: `instance_id` tells two daemons with one device id apart,
        `commands_auth` says whether commands must be signed ("hmac"), are open to any broker
        client ("none"), or cannot arrive (no broker: "off")."""
        backend = None
        bundle_hash = None
        target = None
        if self.model is not None:
            desc = self.model.describe()
            backend, bundle_hash = desc["backend"], desc["bundle_hash"]
            target = (self.model.bundle.get("target") or {}).get("name")
        elif self.pipeline is not None:
            b = getattr(self.pipeline, "backend", None)
            if b is not None and hasattr(b, "describe"):
                backend = str(b.describe().get("backend"))
            bundle = getattr(self.pipeline, "bundle", None)
            if bundle is not None:
                bundle_hash = bundle.hash
                target = (bundle.get("target") or {}).get("name")
        return {
            "started_ts": self.started_ms,
            "versions": versions(),
            "target": target,
            "backend": backend,
            "precision": self.model.precision if self.model is not None else self.config.pipeline.precision,
            "bundle_hash": bundle_hash,
            "source": self.config.pipeline.source.uri or None,
            "telemetry_interval_s": self.reporter.interval_s if self.reporter else self.config.telemetry.interval_s,
            "instance_id": self.instance_id,
            "host": socket.gethostname(),
            "commands_auth": self._commands_auth(),
        }

    def _commands_auth(self) -> str:
        if self.config.mqtt is None and self._publisher is None:
            return "off"
        return "hmac" if self.config.device.hmac_secret_env else "none"

    def _command_counters(self) -> Dict[str, int]:
        counters = self.commands.counters()
        counters["dropped"] += self.commands_dropped
        return counters

    def _model_info(self) -> Dict[str, Any]:
        s = self.status()
        reloader = getattr(self, "reloader", None)
        return {"bundle_hash": s["bundle_hash"], "backend": s["backend"], "precision": s["precision"],
                "reloads": reloader.reloads if reloader else 0, "reload_failures": reloader.failures if reloader else 0}

    # -- commands (frame loop) -------------------------------------------------------------------
    def _cmd_ping(self, args: Dict[str, Any]) -> Dict[str, Any]:
        return {"pong": True, "frames": self.frames, "uptime_s": round(time.time() - self.started_ms / 1000, 3)}

    def _cmd_set(self, args: Dict[str, Any]) -> Dict[str, Any]:
        assert self.reporter is not None
        detector = getattr(self.pipeline, "detector", None)
        decoder = getattr(detector, "decoder", None)
        for key in ("score_threshold", "nms_iou"):
            if key in args and not hasattr(decoder, key):
                raise CommandRejected(f"the running detector has no {key} to set")
        new_detector = None
        if "mode" in args and args["mode"] != self.config.pipeline.mode:
            new_detector = self._detector_for(args["mode"], self._running_model())
        # everything checked: apply
        applied: Dict[str, Any] = {}
        if "telemetry_interval" in args:
            self.reporter.set_interval(float(args["telemetry_interval"]))
            applied["telemetry_interval"] = self.reporter.interval_s
            self.publisher.set_status(self.status())
        if "detections" in args:
            self.reporter.detections = args["detections"]
            applied["detections"] = args["detections"]
        if "target_fps" in args:
            self.reporter.target_fps = float(args["target_fps"])
            applied["target_fps"] = self.reporter.target_fps
        for key in ("score_threshold", "nms_iou"):
            if key in args:
                setattr(decoder, key, float(args[key]))
                applied[key] = float(args[key])
        if new_detector is not None:
            self.config.pipeline.mode = args["mode"]
            self.pipeline.config.mode = args["mode"]
            self.pipeline.swap_detector(new_detector)
        if "mode" in args:
            applied["mode"] = args["mode"]
        return {"applied": applied}

    def _running_model(self) -> Tuple[Any, Dict[str, Any], Any]:
        """(backend, decoder spec, input spec) of the model that runs now."""
        if self.model is not None:
            return self.model.backend, self.model.bundle.decoder, self.model.input_spec
        bundle = getattr(self.pipeline, "bundle", None)
        backend = getattr(getattr(self.pipeline, "detector", None), "backend", None) or getattr(self.pipeline, "backend", None)
        if bundle is None or backend is None or not bundle.inputs:
            raise CommandRejected("the running pipeline was not built from a bundle; its mode cannot be switched")
        return backend, bundle.decoder, bundle.inputs[0]

    def _detector_for(self, mode: str, model: Tuple[Any, Dict[str, Any], Any]) -> Any:
        from edge_sdk.runtime.pipeline import make_detector

        backend, decoder_spec, input_spec = model
        return make_detector(mode, backend, decoder_spec, input_spec, self.config.pipeline.roi)

    def _cmd_snapshot(self, args: Dict[str, Any]) -> Dict[str, Any]:
        result = self._last_result
        folder = self.config.device.snapshot_dir
        if folder is None:
            raise CommandRejected("snapshots need device.snapshot_dir in the config")
        if result is None or result.frame is None:
            raise CommandRejected("no frame processed yet")
        from edge_sdk import _imports
        from edge_sdk.fsutil import atomic_write_bytes, atomic_write_json

        cv2 = _imports.cv2()
        name = args.get("name") or f"{self.config.device.id}-{int(time.time() * 1000)}-{result.index}"
        ok, jpg = cv2.imencode(".jpg", result.frame)
        if not ok:
            raise CommandRejected("the frame could not be encoded as JPEG")
        base = Path(folder)
        try:
            atomic_write_bytes(base / f"{name}.jpg", jpg.tobytes())
            atomic_write_json(base / f"{name}.json", dict(result.to_json(), bundle_hash=self.status()["bundle_hash"]))
        except OSError as exc:
            raise CommandRejected(f"snapshot not written to {base}: {exc.strerror or exc}; free disk space "
                                  "or lower device.snapshot_max_mb") from exc
        removed = prune_snapshots(base, self.config.device.snapshot_max_files,
                                  int(self.config.device.snapshot_max_mb * 1024 * 1024))
        return {"image": str(base / f"{name}.jpg"), "detections": str(base / f"{name}.json"),
                "frame": int(result.index), "count": len(result.detections), "removed": removed}

    def _cmd_reload(self, args: Dict[str, Any]) -> Dict[str, Any]:
        current = self.commands.current or {}
        path = self.reloader.request(args["bundle"], args.get("precision"), tag=current.get("id"))
        return {"loading": str(path)}

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
        or the frame loop (success)."""
        assert self.reporter is not None
        cid = self.reloader.take_tag()
        if error is not None:
            message = f"reload of {where} refused, the old model keeps running: {error}"
            self.reporter.raise_alert("reload_failed", True, message, "critical", repeat=True)
            final: Dict[str, Any] = {"ok": False, "error": message}
        else:
            self.reporter.raise_alert("reload_failed", False, f"reload of {where} succeeded")
            final = {"ok": True, "result": {"loaded": where, "bundle_hash": model.bundle.hash if model else None}}
        if cid is not None:
            self.publisher.publish("cmd/response", dict(final, id=cid, cmd="reload", final=True))

    def _swap_in(self, new: Model) -> None:
        old_detector = getattr(self.pipeline, "detector", None)
        old_model = self.model
        try:
            detector = self._detector_for(self.config.pipeline.mode, (new.backend, new.bundle.decoder, new.input_spec))
        except EdgeSdkError as exc:  # the new model does not fit the running mode: keep the old one
            new.close()
            self.reloader.failures += 1
            self._reload_result(None, exc, str(new.bundle.root))
            return
        done = self.pipeline.swap_detector(detector)
        self.model = new
        old_backend = getattr(old_detector, "backend", None)

        def retire() -> None:
            done.wait()
            if old_model is not None:
                old_model.close()
            elif old_backend is not None and getattr(old_backend, "is_active", False):
                old_backend.deactivate()

        threading.Thread(target=retire, name="model-retire", daemon=True).start()
        self.reloader.reloads += 1
        self._reload_result(new, None, str(new.bundle.root))
        self.publisher.set_status(self.status())
        log.info("now running bundle %s", new.bundle.hash)

    # -- signals ---------------------------------------------------------------------------------
    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the loop to stop after the current frame (any thread, signal handlers too)."""
        if self._stop_reason is None:
            self._stop_reason = reason
            threading.Thread(target=self._unblock, name="stop-watch", daemon=True).start()

    def _unblock(self) -> None:
        """If the source stalls, the loop waits for a frame that never comes: stop capturing."""
        if self._running.wait(0) and not self._done.wait(2.0):
            capture = getattr(self.pipeline, "capture", None)
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
            previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda s, f: setattr(self, "_hup", True))
        return previous

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
            assert self.reporter is not None
            self.reporter.raise_alert("config_invalid", True, f"re-read config refused: {exc}")
            return
        assert self.reporter is not None
        self.reporter.raise_alert("config_invalid", False, "config re-read")
        old = self.config
        self.reporter.set_interval(new.telemetry.interval_s)
        self.reporter.target_fps = new.telemetry.target_fps
        self.reporter.detections = new.telemetry.detections
        self.reporter.health.rules = new.health.rules()
        if new.pipeline.bundle != old.pipeline.bundle and new.pipeline.bundle:
            self.reloader.load(Path(new.pipeline.bundle), new.pipeline.precision)
        restart = [k for k in ("source", "backend", "threads", "mode") if getattr(new.pipeline, k) != getattr(old.pipeline, k)]
        if new.mqtt != old.mqtt or new.device.id != old.device.id:
            restart.append("mqtt/device")
        if restart:
            log.warning("SIGHUP: %s changed; restart the service to apply", ", ".join(restart))
        self.config = dataclasses.replace(old, telemetry=new.telemetry, health=new.health,
                                          pipeline=dataclasses.replace(old.pipeline, bundle=new.pipeline.bundle))
        self.publisher.set_status(self.status())
        log.info("SIGHUP: config re-read from %s", self.config_path)

    # -- the loop --------------------------------------------------------------------------------
    def _check_unique(self) -> None:
        """ConfigError when another live daemon already runs with this device id."""
        cfg = self.config
        if cfg.mqtt is None or self._publisher is not None or cfg.device.instance_check_s <= 0:
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
            return exc.exit_code
        replay = None
        if cfg.mqtt is not None:
            replay = default_queue_path(cfg.device.id, cfg.mqtt.queue_dir).with_suffix(".commands.sqlite3")
        self.commands = CommandProcessor(
            {"ping": self._cmd_ping, "set": self._cmd_set, "snapshot": self._cmd_snapshot, "reload": self._cmd_reload},
            secret=cfg.secret(), max_skew_s=cfg.device.max_skew_s, replay_path=replay)
        if self._commands_auth() == "none":
            log.warning("commands are accepted WITHOUT authentication: any client of the broker can change "
                        "thresholds, reload bundles and take snapshots; set device.hmac_secret_env to require "
                        "signed commands")
        previous = self._install_signals()
        self.publisher = self._publisher or self._make_publisher()
        self.publisher.on_alert = self._publisher_alert
        self.reloader = HotReloader(
            Path(cfg.device.models_dir) if cfg.device.models_dir else None,
            ModelFromBundle(cfg.pipeline.backend, cfg.pipeline.precision, cfg.pipeline.threads),
            on_result=self._reload_result)
        system = None
        if cfg.telemetry.system:
            from edge_sdk.telemetry.system import SystemStats

            system = SystemStats()
        code = 0
        reason = "stopped"
        self.publisher.start()
        try:
            self.pipeline = self.pipeline_factory(cfg.pipeline)
            self.pipeline.open()
            self.reporter = Reporter(
                self.publisher, HealthMonitor(cfg.health.rules()), lambda: self.pipeline.stats,
                interval_s=cfg.telemetry.interval_s, window_s=cfg.telemetry.window_s,
                target_fps=cfg.telemetry.target_fps, model=self._model_info, system=system,
                detections=cfg.telemetry.detections, commands=self._command_counters)
            self._publisher_alerts_ready()
            self.publisher.set_status(self.status())
            self.reporter.start()
            self._running.set()
            log.info("running %s on %s as %s", self.status()["bundle_hash"], cfg.pipeline.source.uri, cfg.device.id)
            reason = self._loop()
        except EdgeSdkError as exc:
            log.error("%s", exc)
            code, reason = exc.exit_code, f"error: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported, then the exit code says it failed
            log.exception("daemon failed")
            code, reason = 1, f"error: {type(exc).__name__}: {exc}"
        finally:
            self._done.set()
            code = self._shutdown(reason, code)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return code

    def _loop(self) -> str:
        assert self.reporter is not None
        reporter, reloader, inbox = self.reporter, self.reloader, self._inbox
        for result in self.pipeline:
            reporter.observe(result)
            self._last_result = result
            self.frames += 1
            if inbox:
                self._drain_commands()
            new = reloader.poll()
            if new is not None:
                self._swap_in(new)
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
        try:
            if self.reporter is not None:
                self.reporter.stop(final_report=True)
            final = dict(self.status(), reason=reason)
        finally:
            if self.pipeline is not None:
                self.pipeline.close()
            self.reloader.join(10)
            leftover = self.reloader.poll()
            if leftover is not None:
                leftover.close()
            if self.model is not None:
                self.model.close()
            self.commands.close()
            try:
                self.publisher.stop(final_status=final or {"reason": reason}, timeout=5.0)
            except EdgeSdkError as exc:
                log.error("%s", exc)
                code = code or exc.exit_code
        log.info("stopped (%s)", reason)
        return code


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


def _default_pipeline(config: PipelineConfig) -> Any:
    from edge_sdk.runtime.pipeline import Pipeline

    return Pipeline(config)
