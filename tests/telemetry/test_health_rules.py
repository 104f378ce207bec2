"""The health rules read as the config reference states them, at the limit itself:

- latency_p99: "P99 total latency over the window above this" (at the limit: healthy)
- fps_low: "FPS below fps_ratio of the target" (at the ratio: healthy)
- frames_dropped: "more than drop_ratio of captured frames dropped" (at the ratio: healthy)
- batch_efficiency: "batches less full than this" (at the limit: healthy)
- temperature: "a sensor at or above this" (at the limit: NOT healthy)

and each is raised once when crossed and cleared once when back; a limit of 0 switches it off."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.errors import ConfigError
from edge_sdk.telemetry.health import HealthConfig, HealthMonitor, Rule, lookup

PATHS = {"latency_p99": "latency_ms.total.p99", "fps_low": "fps_ratio", "frames_dropped": "interval.drop_ratio",
         "batch_efficiency": "batch.efficiency", "temperature": "system.temperature_max_c"}
LIMITS = {"latency_p99": "latency_p99_ms", "fps_low": "fps_ratio", "frames_dropped": "drop_ratio",
          "batch_efficiency": "batch_efficiency", "temperature": "temperature_c"}
# unhealthy(value, limit), from the sentences above
UNHEALTHY = {"latency_p99": lambda v, t: v > t, "fps_low": lambda v, t: v < t, "frames_dropped": lambda v, t: v > t,
             "batch_efficiency": lambda v, t: v < t, "temperature": lambda v, t: v >= t}
# the largest limit each key takes (its bound in edge_sdk.config_schema; ratios at most 1)
HIGHEST = {"latency_p99": 1000.0, "fps_low": 1.0, "frames_dropped": 1.0, "batch_efficiency": 1.0, "temperature": 200.0}
SEVERITY = {"latency_p99": "warning", "fps_low": "warning", "frames_dropped": "warning", "batch_efficiency": "info",
            "temperature": "critical"}


def message(path: str, value: float) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    node = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


@pytest.mark.parametrize("name,value,limit,unhealthy", [
    ("temperature", 85.0, 85.0, True), ("temperature", 84.99, 85.0, False), ("temperature", 85.01, 85.0, True),
    ("latency_p99", 300.0, 300.0, False), ("latency_p99", 300.01, 300.0, True), ("latency_p99", 299.0, 300.0, False),
    ("fps_low", 0.9, 0.9, False), ("fps_low", 0.89, 0.9, True), ("fps_low", 1.5, 0.9, False),
    ("frames_dropped", 0.05, 0.05, False), ("frames_dropped", 0.0501, 0.05, True), ("frames_dropped", 0.0, 0.05, False),
    ("batch_efficiency", 0.75, 0.75, False), ("batch_efficiency", 0.7499, 0.75, True), ("batch_efficiency", 1.0, 0.75, False),
])
def test_each_default_rule_at_its_limit(name: str, value: float, limit: float, unhealthy: bool) -> None:
    monitor = HealthMonitor(HealthConfig(**{LIMITS[name]: limit}).rules())
    events = monitor.evaluate(message(PATHS[name], value))
    assert [(e["alert"], e["state"]) for e in events] == ([(name, "raised")] if unhealthy else [])
    if unhealthy:
        event = events[0]
        assert event["severity"] == SEVERITY[name] and event["metric"] == PATHS[name]
        assert event["value"] == value and event["threshold"] == limit
        assert monitor.open == [name]


@settings(max_examples=200, deadline=None)
@given(rule=st.sampled_from(sorted(PATHS)).flatmap(lambda n: st.tuples(st.just(n), st.floats(0.01, HIGHEST[n]))),
       values=st.lists(st.one_of(st.floats(0.0, 2000.0), st.none(), st.just(-1.0)), min_size=1, max_size=12))
def test_raised_once_when_crossed_and_cleared_once_when_back(rule: Tuple[str, float], values) -> None:
    name, limit = rule
    values = [limit if v == -1.0 else v for v in values]  # the limit itself, often
    monitor = HealthMonitor(HealthConfig(**{LIMITS[name]: limit}).rules())
    open_ = False
    for value in values:
        events = monitor.evaluate({} if value is None else message(PATHS[name], value))
        want = []
        if value is not None:  # absent: nothing changes
            bad = UNHEALTHY[name](value, limit)
            if bad and not open_:
                want = [(name, "raised")]
            elif not bad and open_:
                want = [(name, "cleared")]
            open_ = bad
        assert [(e["alert"], e["state"]) for e in events] == want
        assert monitor.open == ([name] if open_ else [])


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_limit_of_zero_switches_its_rule_off_and_only_it(name: str) -> None:
    rules = HealthConfig(**{LIMITS[name]: 0.0}).rules()
    assert sorted(r.name for r in rules) == sorted(set(LIMITS) - {name})


@pytest.mark.parametrize("op,value,healthy", [("<", 1.0, False), ("<", 0.99, True), ("<=", 1.0, True), ("<=", 1.01, False),
                                              (">", 1.0, False), (">", 1.01, True), (">=", 1.0, True), (">=", 0.99, False)])
def test_an_extra_rule_is_healthy_while_value_op_threshold(op: str, value: float, healthy: bool) -> None:
    rule = Rule("x", "a.b", op, 1.0)
    assert rule.healthy(value) is healthy
    config = HealthConfig(latency_p99_ms=0, fps_ratio=0, drop_ratio=0, batch_efficiency=0, temperature_c=0,
                          extra=[{"name": "x", "metric": "a.b", "op": op, "threshold": 1.0, "severity": "info"}])
    events = HealthMonitor(config.rules()).evaluate({"a": {"b": value}})
    assert [(e["alert"], e["severity"]) for e in events] == ([] if healthy else [("x", "info")])


@pytest.mark.parametrize("bad", [{"op": "=="}, {"severity": "fatal"}])
def test_a_bad_rule_is_a_config_error(bad: Dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="health rule"):
        Rule(**{"name": "x", "metric": "m", "op": "<", "threshold": 1.0, **bad})


@pytest.mark.parametrize("key,value,ok", [
    ("drift_distance", 0.0, True), ("drift_distance", 1.0, True), ("drift_distance", 1.01, False), ("drift_distance", -0.01, False),
    ("drift_sample_s", 0.001, True), ("drift_sample_s", 0.0, False),
    ("drift_window", 1, True), ("drift_window", 3600, True), ("drift_window", 0, False), ("drift_window", 3601, False),
    ("drift_window", True, False), ("drift_window", 2.0, False),
])
def test_the_drift_settings_at_their_bounds(key: str, value: Any, ok: bool) -> None:
    config = HealthConfig(**{key: value})
    if ok:
        assert len(config.rules()) == 5
    else:
        with pytest.raises(ConfigError, match=f"health\\.{key} "):
            config.rules()


@pytest.mark.parametrize("path,value", [("a.b", 2.5), ("a", None), ("a.b.c", None), ("a.x", None), ("flag", None),
                                        ("text", None), ("n", 3.0)])
def test_lookup_follows_dotted_paths_to_numbers_only(path: str, value: Any) -> None:
    msg = {"a": {"b": 2.5}, "flag": True, "text": "9", "n": 3}
    assert lookup(msg, path) == value


def test_set_raises_clears_and_repeats() -> None:
    monitor = HealthMonitor([])
    assert [e["state"] for e in monitor.set("reload", True, "failed")] == ["raised"]
    assert monitor.set("reload", True, "failed again") == []
    again = monitor.set("reload", True, "failed a third time", repeat=True, metric="m", value=1.23456, threshold=1.0)
    assert again == [{"alert": "reload", "state": "raised", "severity": "warning", "message": "failed a third time",
                      "metric": "m", "value": 1.2346, "threshold": 1.0}]
    assert monitor.open == ["reload"]
    assert [e["state"] for e in monitor.set("reload", False, "ok")] == ["cleared"]
    assert monitor.set("reload", False, "ok") == [] and monitor.open == []


def test_the_defaults_are_the_readmes() -> None:
    # README, `[health]`: latency_p99_ms = 300, fps_ratio = 0.9, drop_ratio = 0.05, batch_efficiency = 0.75,
    # temperature_c = 85; drift_distance = 0.4, drift_sample_s = 1, drift_window = 60
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert ("(latency_p99_ms = 300, fps_ratio = 0.9, drop_ratio = 0.05, batch_efficiency = 0.75,\n"
            "temperature_c = 85; 0 turns a rule off; drift_distance = 0.4, drift_sample_s = 1, drift_window = 60") in readme
    c = HealthConfig()
    assert (c.latency_p99_ms, c.fps_ratio, c.drop_ratio, c.batch_efficiency, c.temperature_c) == (300, 0.9, 0.05, 0.75, 85)
    assert (c.drift_distance, c.drift_sample_s, c.drift_window, c.extra) == (0.4, 1, 60, [])
    assert {r.name: r.threshold for r in c.rules()} == {"latency_p99": 300, "fps_low": 0.9, "frames_dropped": 0.05,
                                                        "batch_efficiency": 0.75, "temperature": 85}


def test_extra_rules_are_bounded_at_the_documented_count() -> None:
    """docs/configuration.md, [health] `extra`: "at most 64 entries"."""
    import re

    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    bound = int(re.search(r"\| `extra` \|[^\n]*at most (\d+) entries", docs).group(1))
    rule = {"metric": "a.b", "op": "<", "threshold": 1.0}
    rules = [dict(rule, name=f"r{i}") for i in range(bound + 1)]
    assert len(HealthConfig(extra=rules[:bound]).validate().rules()) == 5 + bound  # the five built in, all on
    with pytest.raises(ConfigError, match=f"health.extra must have at most {bound} entries, got {bound + 1}"):
        HealthConfig(extra=rules).validate()
