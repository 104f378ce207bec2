"""The device config of `edge-sdk run`: the pipeline's keys plus the daemon's tables.

One TOML file holds the pipeline's keys (edge_sdk/runtime/config.py: bundle, backend,
precision, mode, score_threshold, nms_iou, [source], [cache], [roi]...) plus:

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

Validation happens once, here; errors name the key and the file.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from edge_sdk.errors import ConfigError
from edge_sdk.fsutil import read_toml
from edge_sdk.runtime.config import PipelineConfig, config_from_dict, merge_tables
from edge_sdk.telemetry.health import HealthConfig
from edge_sdk.telemetry.mqtt import BrokerConfig
from edge_sdk.telemetry.reporter import DETECTIONS_MODES
from edge_sdk.validate import finite_number, require_finite


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
    return daemon_config_from_dict(merge_tables(data, overrides or {}), origin, base_dir)
