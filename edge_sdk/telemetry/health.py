"""Health rules over telemetry: each condition is raised once when crossed and cleared once when
back within bounds. A metric that is absent (no GPU sensor, no batching, no target FPS) changes
nothing: an open alert stays open, a closed one stays closed."""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from edge_sdk.config_schema import NAME, NAME_CHARS, check_fields, key

_OPS: Dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
SEVERITIES = ("info", "warning", "critical")


@dataclass
class Rule:
    """`metric` is a dotted path into the telemetry message; healthy while `value <op> threshold`."""

    name: str = key(max_len=64, pattern=NAME, allows=NAME_CHARS)  # the alert's name
    metric: str = key(max_len=128)  # a dotted path into the telemetry message, e.g. system.gpu_percent
    op: str = key(choices=tuple(_OPS))  # healthy while `value <op> threshold`
    threshold: float = key(low=-1e15, high=1e15)
    severity: str = key("warning", choices=SEVERITIES)
    description: str = key("", max_len=1024)  # the start of the alert's message

    def __post_init__(self) -> None:
        check_fields(self, "health rule")  # a [[health.extra]] table was checked, naming its file, when it was read

    def healthy(self, value: float) -> bool:
        return _OPS[self.op](value, self.threshold)


@dataclass
class HealthConfig:
    """The `[health]` table of the device config. A limit of 0 switches its rule off."""

    latency_p99_ms: float = key(300.0, low=0, high=600000)  # latency_p99 (warning): P99 total latency over the window above this
    fps_ratio: float = key(0.9, low=0, high=1)  # of target_fps; needs target_fps
    drop_ratio: float = key(0.05, low=0, high=1)  # frames_dropped (warning): share of captured frames dropped in an interval
    batch_efficiency: float = key(0.75, low=0, high=1)  # batch_efficiency (info): batches less full than this
    temperature_c: float = key(85.0, low=0, high=200)  # temperature (critical): a sensor at or above this, from jetson-stats
    extra: List[Dict[str, Any]] = key(factory=list, max_len=64, table=Rule)  # [[health.extra]] name/metric/op/threshold
    # calibration drift (edge_sdk.daemon.drift): Hellinger distance 0..1 of the live brightness/saturation
    # histograms from the nearest calibration image's; needs a bundle that records input_stats
    drift_distance: float = key(0.4, low=0, high=1)
    drift_sample_s: float = key(1.0, low=0, low_open=True, high=3600)  # one live frame measured per this many seconds (downscaled copy)
    drift_window: int = key(60, low=1, high=3600)  # samples the live histograms average over; no decision before it is full

    def validate(self, origin: str = "config", path: str = "health") -> "HealthConfig":
        """Every key against its type and bounds (edge_sdk.config_schema); ConfigError naming it."""
        return check_fields(self, origin, path)

    def rules(self) -> List[Rule]:
        """The threshold rules (ConfigError naming the key of a value out of bounds)."""
        self.validate()
        rules = []
        if self.latency_p99_ms > 0:
            rules.append(Rule("latency_p99", "latency_ms.total.p99", "<=", self.latency_p99_ms, "warning",
                              f"P99 total latency over the window above {self.latency_p99_ms:g} ms"))
        if self.fps_ratio > 0:
            rules.append(Rule("fps_low", "fps_ratio", ">=", self.fps_ratio, "warning",
                              f"FPS below {self.fps_ratio:.0%} of the target"))
        if self.drop_ratio > 0:
            rules.append(Rule("frames_dropped", "interval.drop_ratio", "<=", self.drop_ratio, "warning",
                              f"more than {self.drop_ratio:.0%} of captured frames dropped"))
        if self.batch_efficiency > 0:
            rules.append(Rule("batch_efficiency", "batch.efficiency", ">=", self.batch_efficiency, "info",
                              f"batches less than {self.batch_efficiency:.0%} full"))
        if self.temperature_c > 0:
            rules.append(Rule("temperature", "system.temperature_max_c", "<", self.temperature_c, "critical",
                              f"a temperature sensor at or above {self.temperature_c:g} °C"))
        rules.extend(Rule(**d) for d in self.extra)
        return rules


def lookup(message: Mapping[str, Any], path: str) -> Optional[float]:
    node: Any = message
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    return float(node)


class HealthMonitor:
    """Evaluates rules against telemetry and returns alert transitions (raised / cleared)."""

    def __init__(self, rules: List[Rule]) -> None:
        self.rules = list(rules)
        self._open: Dict[str, Dict[str, Any]] = {}

    @property
    def open(self) -> List[str]:
        """The open conditions' names (a condition open for several streams is named once)."""
        return sorted({event["alert"] for event in self._open.values()})

    def evaluate(self, message: Mapping[str, Any]) -> List[Dict[str, Any]]:
        events = []
        for rule in self.rules:
            value = lookup(message, rule.metric)
            if value is None:
                continue
            ok = rule.healthy(value)
            if not ok and rule.name not in self._open:
                event = self._event(rule.name, "raised", rule.severity,
                                    f"{rule.description or rule.name}: {value:g} (limit {rule.op} {rule.threshold:g})",
                                    rule.metric, value, rule.threshold)
                self._open[rule.name] = event
                events.append(event)
            elif ok and rule.name in self._open:
                del self._open[rule.name]
                events.append(self._event(rule.name, "cleared", rule.severity,
                                          f"{rule.name} back within limit: {value:g} {rule.op} {rule.threshold:g}",
                                          rule.metric, value, rule.threshold))
        return events

    def set(self, name: str, active: bool, message: str, severity: str = "warning",
            repeat: bool = False, metric: Optional[str] = None, value: Optional[float] = None,
            threshold: Optional[float] = None, stream: Optional[str] = None) -> List[Dict[str, Any]]:
        """Raise or clear a condition that is not a threshold rule (e.g. a failed reload).
        With `repeat`, an open condition is raised again (a new event for each occurrence);
        `metric`, `value` and `threshold` go into the event when `metric` is given. With
        `stream`, the condition is that stream's (camera lost): open or cleared apart from the
        same condition of the other streams, and the event names the stream."""
        key = name if stream is None else f"{name}\0{stream}"
        if active and (repeat or key not in self._open):
            event = self._event(name, "raised", severity, message, metric, value, threshold)
            if stream is not None:
                event["stream"] = stream
            self._open[key] = event
            return [event]
        if not active and key in self._open:
            del self._open[key]
            event = self._event(name, "cleared", severity, message, metric, value, threshold)
            if stream is not None:
                event["stream"] = stream
            return [event]
        return []

    @staticmethod
    def _event(name: str, state: str, severity: str, message: str, metric: Optional[str] = None,
               value: Optional[float] = None, threshold: Optional[float] = None) -> Dict[str, Any]:
        event: Dict[str, Any] = {"alert": name, "state": state, "severity": severity, "message": message}
        if metric is not None:
            event["metric"] = metric
            event["value"] = round(value, 4) if value is not None else None
            event["threshold"] = threshold
        return event
