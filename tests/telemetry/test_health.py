from __future__ import annotations

from typing import Any, Dict, List

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.telemetry.health import HealthConfig, HealthMonitor, Rule


def telemetry(p99: float = 10.0, fps: float = 30.0, drop: float = 0.0, **extra: Any) -> Dict[str, Any]:
    msg: Dict[str, Any] = {"fps": fps, "fps_ratio": fps / 30.0, "latency_ms": {"total": {"p99": p99}},
                           "interval": {"drop_ratio": drop}}
    msg.update(extra)
    return msg


@pytest.mark.parametrize(
    "sequence,expected",
    [
        # p99 over 300 ms: raised once, however long it lasts; cleared once
        ([telemetry(p99=400), telemetry(p99=500), telemetry(p99=10), telemetry(p99=10)],
         [[("latency_p99", "raised")], [], [("latency_p99", "cleared")], []]),
        ([telemetry(fps=20), telemetry(fps=28), telemetry(fps=26)],  # 90 % of 30 = 27
         [[("fps_low", "raised")], [("fps_low", "cleared")], [("fps_low", "raised")]]),
        ([telemetry(drop=0.2), telemetry(drop=0.05)], [[("frames_dropped", "raised")], [("frames_dropped", "cleared")]]),
        ([telemetry(system={"temperature_max_c": 90.0}), telemetry()],  # sensor gone: stays open
         [[("temperature", "raised")], []]),
        ([telemetry(batch={"efficiency": 0.5}), telemetry(batch={"efficiency": 0.9})],
         [[("batch_efficiency", "raised")], [("batch_efficiency", "cleared")]]),
    ],
)
def test_raise_once_clear_once(sequence: List[Dict[str, Any]], expected: List[List[tuple]]) -> None:
    monitor = HealthMonitor(HealthConfig().rules())
    got = [[(e["alert"], e["state"]) for e in monitor.evaluate(msg)] for msg in sequence]
    assert got == expected


def test_absent_metrics_raise_nothing() -> None:
    monitor = HealthMonitor(HealthConfig().rules())
    assert monitor.evaluate({}) == [] and monitor.open == []


def test_zero_limit_switches_a_rule_off() -> None:
    names = [r.name for r in HealthConfig(latency_p99_ms=0, temperature_c=0).rules()]
    assert "latency_p99" not in names and "temperature" not in names and "fps_low" in names


def test_set_is_idempotent() -> None:
    monitor = HealthMonitor([])
    assert [e["state"] for e in monitor.set("reload_failed", True, "x")] == ["raised"]
    assert monitor.set("reload_failed", True, "again") == []
    assert monitor.open == ["reload_failed"]
    assert [e["state"] for e in monitor.set("reload_failed", False, "ok")] == ["cleared"]
    assert monitor.set("reload_failed", False, "ok") == []


@pytest.mark.parametrize("bad", [{"name": "x", "metric": "fps", "op": "~", "threshold": 1},
                                 {"name": "x", "metric": "fps", "op": "<", "threshold": 1, "severity": "meh"},
                                 {"name": "x"}])
def test_bad_extra_rules_are_config_errors(bad: Dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        HealthConfig(extra=[bad]).rules()


def test_extra_rule_on_any_metric() -> None:
    monitor = HealthMonitor([Rule("gpu_busy", "system.gpu_percent", "<=", 95.0)])
    assert [e["alert"] for e in monitor.evaluate({"system": {"gpu_percent": 99.0}})] == ["gpu_busy"]
