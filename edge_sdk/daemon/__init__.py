"""The device daemon behind `edge-sdk run`: one package, one job per module.

- :mod:`edge_sdk.daemon.config`: the device config (the pipeline's keys plus [device], [mqtt],
  [telemetry], [health]), validated once.
- :mod:`edge_sdk.daemon.model`: the one owner of the running model (model, mode, thresholds,
  detector; load, swap and retire).
- :mod:`edge_sdk.daemon.commands`: remote commands (allow-list, schema, HMAC, replay window,
  rate limits).
- :mod:`edge_sdk.daemon.reload`: hot reload (load beside the running model, hand over between
  two frames).
- :mod:`edge_sdk.daemon.handlers`: what each remote command does to the running daemon.
- :mod:`edge_sdk.daemon.snapshots`: the frames the `snapshot` command writes, and the pruning
  that keeps their folder within its caps.
- :mod:`edge_sdk.daemon.service`: the Daemon: the service loop, signals and shutdown.
- :mod:`edge_sdk.daemon.notify`: systemd's sd_notify protocol (READY, WATCHDOG, STOPPING).
- :mod:`edge_sdk.daemon.health`: the heartbeat the frame loop feeds (watchdog pings, the health
  file) and the health check behind a container's HEALTHCHECK.

The daemon uses edge_sdk.runtime (the pipeline) and edge_sdk.telemetry (publishing,
reporting); neither imports it back.
"""
from __future__ import annotations

from edge_sdk.daemon.config import DaemonConfig, DeviceConfig, TelemetryConfig, daemon_config_from_dict, load_daemon_config
from edge_sdk.daemon.model import RunningModel
from edge_sdk.daemon.service import Daemon, versions
from edge_sdk.daemon.snapshots import prune_snapshots

__all__ = ["Daemon", "DaemonConfig", "DeviceConfig", "RunningModel", "TelemetryConfig", "daemon_config_from_dict",
           "load_daemon_config", "prune_snapshots", "versions"]
