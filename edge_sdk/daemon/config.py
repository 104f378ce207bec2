"""The device config of `edge-sdk run`: the pipeline's keys plus the daemon's tables.

One TOML file holds the pipeline's keys (edge_sdk/runtime/config.py: bundle, backend,
precision, mode, score_threshold, nms_iou, [source] or [[sources]], [cache], [roi]...) plus:

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

[output]                       # annotated video out (edge_sdk/output/config.py)
out = ["rtsp://0.0.0.0:8554/live"]

[health]
latency_p99_ms = 300
fps_ratio = 0.9
drop_ratio = 0.05
batch_efficiency = 0.75
temperature_c = 85

[shadow]                       # `reload` with shadow: the candidate beside the live model
every_n_frames = 5
window_frames = 50
auto_promote = false
watch_s = 30                   # after a promotion: roll back when fps, p99 or the detection rate leave bounds
```

Validation happens once, here; errors name the key and the file.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from edge_sdk.config_schema import ENV_VAR, NAME_CHARS, check_fields, from_table, key
from edge_sdk.daemon.shadow import ShadowConfig
from edge_sdk.errors import ConfigError
from edge_sdk.fsutil import read_toml
from edge_sdk.output.config import OutputConfig
from edge_sdk.runtime.config import PipelineConfig, config_from_dict, overlay
from edge_sdk.telemetry.broker import BrokerConfig
from edge_sdk.telemetry.health import HealthConfig
from edge_sdk.telemetry.reporter import DETECTIONS_MODES


@dataclass
class DeviceConfig:
    id: str = key("", max_len=64, pattern=r"[A-Za-z0-9._-]*", allows=NAME_CHARS)  # default: the host name; part of every MQTT topic
    models_dir: Optional[str] = None
    snapshot_dir: Optional[str] = None
    hmac_secret_env: Optional[str] = key(None, **ENV_VAR)  # commands must be signed with the secret this variable holds
    max_skew_s: float = key(300.0, low=1, high=86400)  # a signed command's ts may be this far from the device clock (at least 1 s: a command takes time in transit)
    snapshot_max_files: int = key(200, low=1, high=1000000)
    snapshot_max_mb: float = key(200.0, low=0, low_open=True, high=1000000)
    instance_check_s: float = key(5.0, low=0, high=300)  # how long a clash check waits for the other instance's answer


@dataclass
class TelemetryConfig:
    interval_s: float = key(5.0, low=0.05, high=3600)
    window_s: float = key(10.0, low=0, low_open=True, high=86400)
    target_fps: float = key(0.0, low=0, high=10000)
    detections: str = key("off", choices=DETECTIONS_MODES)
    system: bool = True


@dataclass
class DaemonConfig:
    pipeline: PipelineConfig
    device: DeviceConfig = field(default_factory=DeviceConfig)
    mqtt: Optional[BrokerConfig] = None
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    def validate(self, origin: str = "config") -> "DaemonConfig":
        """Every key of the daemon's tables against its type and bounds (edge_sdk.config_schema),
        then what needs the environment; ConfigError naming the key and `origin`."""
        if not self.device.id:
            self.device.id = socket.gethostname() or "edge-device"
        if len(self.pipeline.streams()) == 1:
            self.pipeline = self.pipeline.single_stream(origin)  # one source: the one-source Pipeline
        check_fields(self.device, origin, "device")
        check_fields(self.telemetry, origin, "telemetry")
        check_fields(self.shadow, origin, "shadow")
        self.health.validate(origin)
        self.output.validate(self.pipeline.stream_ids(), origin)
        if self.device.hmac_secret_env and self.device.hmac_secret_env not in os.environ:
            raise ConfigError(f"{origin}: device.hmac_secret_env names ${self.device.hmac_secret_env}, which is not set")
        if self.mqtt is not None:
            self.mqtt.validate(origin)
        return self

    def secret(self) -> Optional[bytes]:
        env = self.device.hmac_secret_env
        return os.environ[env].encode("utf-8") if env else None


_SECTIONS = {"device": DeviceConfig, "mqtt": BrokerConfig, "telemetry": TelemetryConfig, "health": HealthConfig,
             "shadow": ShadowConfig, "output": OutputConfig}


def daemon_config_from_dict(data: Mapping[str, Any], origin: str = "config", base_dir: Optional[Path] = None) -> DaemonConfig:
    """Split the device config into the pipeline's keys and the daemon's sections."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: expected a table at the top level")
    data = dict(data)
    parts: Dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        if name in data:
            parts[name] = from_table(cls, data.pop(name), origin, name)
    pipeline = config_from_dict(data, origin)
    if base_dir is not None:
        if pipeline.bundle and not Path(pipeline.bundle).is_absolute():
            pipeline.bundle = str(base_dir / pipeline.bundle)
        dev = parts.get("device")
        for name in ("models_dir", "snapshot_dir"):
            value = getattr(dev, name, None) if dev else None
            if value and not Path(value).is_absolute():
                setattr(dev, name, str(base_dir / value))
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
    return daemon_config_from_dict(overlay(data, overrides or {}), origin, base_dir)
