"""The MQTT broker a device talks to: the `[mqtt]` settings (URL, credentials, TLS, backoff, the
bounds of the disk queue) and the factory of configured paho clients (paho-mqtt 2.x), shared by
the publisher, the monitor and the apps."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple
from urllib.parse import unquote, urlsplit

from edge_sdk import _imports
from edge_sdk.config_schema import ENV_VAR, building_from, check_fields, key
from edge_sdk.errors import ConfigError
from edge_sdk.telemetry.disk_queue import DEFAULT_QUEUE_BYTES

SCHEMES = {"mqtt": 1883, "mqtts": 8883}


@dataclass
class BrokerConfig:
    """The `[mqtt]` table of the device config; `url` may carry user:password@."""

    url: str = key("mqtt://127.0.0.1:1883", max_len=2048)
    username: Optional[str] = key(None, max_len=1024)
    password: Optional[str] = key(None, max_len=1024)
    password_env: Optional[str] = key(None, **ENV_VAR)  # read the password from this environment variable
    client_id: Optional[str] = key(None, max_len=256)  # default: edge-sdk-<device_id>
    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    tls_insecure: bool = False  # skip the server host name check (self-signed lab setups only)
    qos: int = key(1, low=0, high=2)
    keepalive: int = key(30, low=1, high=65535)  # seconds (MQTT's limit)
    protocol: str = key("3.1.1", choices=("3.1.1", "5"))
    reconnect_min_s: float = key(0.5, low=0, low_open=True, high=3600)
    reconnect_max_s: float = key(30.0, low=0, low_open=True, high=86400)
    queue_dir: Optional[str] = None  # default: <user state dir>/edge-sdk/queue
    queue_max_messages: int = key(100000, low=1, high=10 ** 9)
    queue_max_bytes: int = key(DEFAULT_QUEUE_BYTES, low=1, high=2 ** 40)  # payload bytes on disk
    inflight: int = key(64, low=1, high=65535)

    def __post_init__(self) -> None:
        self.validate(building_from())

    def validate(self, origin: str = "config", path: str = "mqtt") -> "BrokerConfig":
        """Every key against its type and bounds (edge_sdk.config_schema), then the URL, the
        files and the environment; ConfigError naming the key."""
        check_fields(self, origin, path)
        where = f"{origin}: {path}."
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 - raises for a port that is not a number from 0 to 65535
        except ValueError as exc:  # that, or an unclosed [IPv6 address
            raise ConfigError(f"{where}url cannot be read ({exc}); it must look like mqtt://host:1883 or "
                              f"mqtts://host:8883, got {self.url!r}") from None
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ConfigError(f"{where}url must look like mqtt://host:1883 or mqtts://host:8883, got {self.url!r}")
        if self.reconnect_min_s > self.reconnect_max_s:
            raise ConfigError(f"{where}reconnect_min_s must be <= reconnect_max_s")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(f"{where}cert_file and key_file go together (the client certificate and its key)")
        for name in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, name)
            if value is not None and not Path(value).is_file():
                raise ConfigError(f"{where}{name}: no such file {value}")
        if self.password_env and self.password_env not in os.environ:
            raise ConfigError(f"{where}password_env names ${self.password_env}, which is not set")
        return self

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or SCHEMES[parts.scheme]

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "mqtts" or self.ca_file is not None

    def credentials(self) -> Tuple[Optional[str], Optional[str]]:
        parts = urlsplit(self.url)
        user = self.username or (unquote(parts.username) if parts.username else None)
        password = self.password
        if password is None and self.password_env:
            password = os.environ[self.password_env]
        if password is None and parts.password:
            password = unquote(parts.password)
        return user, password

    def redacted_url(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}:{self.port}"


def make_client(cfg: BrokerConfig, client_id: str, mqtt: Any = None) -> Any:
    """A configured paho client (not connected): protocol, TLS, credentials, backoff."""
    mqtt = mqtt or _imports.mqtt()
    protocol = mqtt.MQTTv5 if cfg.protocol == "5" else mqtt.MQTTv311
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
    if cfg.tls:
        import ssl

        try:
            client.tls_set(ca_certs=cfg.ca_file, certfile=cfg.cert_file, keyfile=cfg.key_file,
                           cert_reqs=ssl.CERT_REQUIRED)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"[mqtt] TLS files cannot be used ({exc}); check ca_file, cert_file and key_file") from exc
        if cfg.tls_insecure:
            client.tls_insecure_set(True)
    user, password = cfg.credentials()
    if user is not None:
        client.username_pw_set(user, password)
    client.reconnect_delay_set(min_delay=cfg.reconnect_min_s, max_delay=cfg.reconnect_max_s)  # type: ignore[arg-type]
    client.max_inflight_messages_set(cfg.inflight)
    client.max_queued_messages_set(0)
    return client
