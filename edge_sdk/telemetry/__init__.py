"""Device telemetry: rolling metrics, health rules, MQTT publishing, the fleet view and the
signing of commands. Commands and hot reload are the daemon's (edge_sdk.daemon).

Topics live under ``edge-sdk/<device_id>/``: ``status`` (retained), ``telemetry``, ``alerts``,
``detections``, ``cmd`` and ``cmd/response``. Every message is a JSON object with ``schema``,
``device_id``, ``ts`` (milliseconds) and a per-topic ``seq``; the JSON Schemas ship in
``edge_sdk/schemas/``.
"""
from __future__ import annotations
