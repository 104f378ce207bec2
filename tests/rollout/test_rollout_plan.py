"""The rollout's plan: gates read from `--promote-if` against `shadow` messages, waves, the steps
and the state file (edge_sdk.rollout.plan). Pure: no broker."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.rollout.plan import (RolloutState, first_failure, make_plan, parse_gates, parse_waves, rollout_key,
                                   undecided)
from edge_sdk.telemetry import schemas


def shadow(f1: float = 1.0, rate: Any = 1.0, ks: float = 0.0, latency: Any = 1.0) -> Dict[str, Any]:
    """A `shadow` message valid against its schema (checked), with these figures."""
    message = {"schema": "edge-sdk/shadow/1", "device_id": "cam-1", "ts": 1, "seq": 1, "state": "running",
               "bundle": "b", "bundle_hash": None, "live_bundle_hash": None, "every_n_frames": 1,
               "frames_compared": 50, "frames_skipped": 0, "window_frames": 50,
               "agreement": {"f1": f1, "precision": f1, "recall": f1, "iou": 0.5},
               "detection_rate": {"live": 2.0, "shadow": 2.0, "ratio": rate},
               "score_shift": {"statistic": "ks", "value": ks, "live_mean": 0.8, "shadow_mean": 0.8},
               "latency_ms": {"live": 4.0, "shadow": 4.0, "ratio": latency}}
    assert schemas.errors(message) == []
    return message


@pytest.mark.parametrize("gates, message, failed", [
    ("agreement>=0.97,latency<=1.2", shadow(), None),
    ("agreement>=0.97,latency<=1.2", shadow(f1=0.96), ("agreement", 0.96, "agreement>=0.97")),
    ("agreement>=0.97", shadow(f1=0.97), None),  # the bound itself passes >=
    ("agreement>0.97", shadow(f1=0.97), ("agreement", 0.97, "agreement>0.97")),
    ("agreement>=0.97,latency<=1.2", shadow(latency=1.3), ("latency", 1.3, "latency<=1.2")),
    ("latency<1.2", shadow(latency=None), ("latency", None, "latency<1.2")),  # no figure never passes
    (" detection_rate >= 0.8 , detection_rate<=1.25", shadow(rate=1.3), ("detection_rate", 1.3, "detection_rate<=1.25")),
    ("score_shift<=0.2", shadow(ks=0.5), ("score_shift", 0.5, "score_shift<=0.2")),
    ("recall>=5e-1", shadow(f1=0.4), ("recall", 0.4, "recall>=0.5")),
])
def test_gates_read_the_shadow_figures(gates: str, message: Dict[str, Any], failed: Any) -> None:
    assert first_failure(parse_gates(gates), message) == failed


@pytest.mark.parametrize("text, named", [
    ("agreement=0.97", "'agreement=0.97'"), ("fps>=10", "'fps>=10'"), ("agreement>=", "'agreement>='"),
    ("agreement>=0.9,", "''"), ("agreement>=x", "'agreement>=x'"),
])
def test_a_gate_that_cannot_be_read_is_refused_naming_it(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match="--promote-if: " + named.replace("(", r"\(")) as exc:
        parse_gates(text)
    assert "agreement, precision, recall, detection_rate, score_shift, latency" in str(exc.value)


@pytest.mark.parametrize("text, shares", [("10%,50%,100%", [0.1, 0.5, 1.0]), ("100%", [1.0]), (" 25% , 100% ", [0.25, 1.0])])
def test_waves(text: str, shares: Any) -> None:
    assert parse_waves(text) == shares


@pytest.mark.parametrize("text, words", [("10,100%", "not a percentage"), ("50%,50%,100%", "above the wave before"),
                                         ("10%,50%", "last wave must be 100%"), ("0%,100%", "above the wave before"),
                                         ("150%", "at most 100%")])
def test_waves_that_do_not_rise_to_100_percent_are_refused(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_waves(text)


def test_the_plan_puts_the_canary_first_and_rounds_each_wave_up() -> None:
    devices = [f"cam-{i:02d}" for i in range(12, 0, -1)]  # any order in: sorted out
    steps = make_plan(devices, 2, [0.1, 0.5, 1.0])
    assert steps == [{"role": "canary", "devices": ["cam-01", "cam-02"]},
                     {"role": "wave 1", "devices": ["cam-03"]},  # 10% of 10 devices
                     {"role": "wave 2", "devices": ["cam-04", "cam-05", "cam-06", "cam-07"]},
                     {"role": "wave 3", "devices": ["cam-08", "cam-09", "cam-10", "cam-11", "cam-12"]}]
    assert make_plan(["b", "a"], 0, [0.5, 1.0]) == [{"role": "wave 1", "devices": ["a"]}, {"role": "wave 2", "devices": ["b"]}]
    # more canaries than devices, and waves that would be empty, leave no empty step
    assert make_plan(["a", "b"], 5, [0.1, 1.0]) == [{"role": "canary", "devices": ["a", "b"]}]
    assert make_plan(["a", "b", "c"], 1, [0.1, 0.2, 1.0]) == [{"role": "canary", "devices": ["a"]},
                                                           {"role": "wave 1", "devices": ["b"]},
                                                           {"role": "wave 3", "devices": ["c"]}]


def test_the_state_file_is_kept_and_refused_for_another_rollout(tmp_path: Path) -> None:
    path = tmp_path / "rollout.json"
    key = rollout_key(bundle="b", devices="cam-*", waves=[1.0])
    assert key == rollout_key(waves=[1.0], devices="cam-*", bundle="b") != rollout_key(bundle="c", devices="cam-*",
                                                                                       waves=[1.0])
    state = RolloutState.open(path, key)
    assert not state.started and not path.exists()
    state.steps, state.previous, state.done, state.promoted = [{"role": "canary", "devices": ["a"]}], {"a": "old"}, 1, ["a"]
    state.seconds = [2.5]
    state.save("b")
    again = RolloutState.open(path, key)
    assert (again.steps, again.previous, again.done, again.promoted, again.seconds) == (
        state.steps, {"a": "old"}, 1, ["a"], [2.5])
    assert json.loads(path.read_text())["schema"] == "edge-sdk/rollout-state/1"
    assert not list(tmp_path.glob(".rollout.json.*")), "the atomic write left its temporary file"
    with pytest.raises(ConfigError, match="belongs to another rollout") as exc:
        RolloutState.open(path, rollout_key(bundle="c"))
    assert "bundle 'b'" in str(exc.value)
    path.write_text('{"schema": "something else"}')
    with pytest.raises(ConfigError, match="not a rollout state file"):
        RolloutState.open(path, key)
    path.write_text("{half")
    with pytest.raises(ConfigError, match="cannot be read"):
        RolloutState.open(path, key)


def with_evidence(message: Dict[str, Any], live: int, cand: int) -> Dict[str, Any]:
    message = dict(message, evidence={"frames": 50, "live_detections": live, "shadow_detections": cand})
    assert schemas.errors(message) == []
    return message


@pytest.mark.parametrize("gates, live, cand, decided", [
    ("agreement>=0.97,detection_rate>=0.8", 0, 0, False),  # a dark scene: a blind candidate reads f1 1.0
    ("agreement>=0.97,detection_rate>=0.8", 19, 0, False),
    ("agreement>=0.97,detection_rate>=0.8", 60, 0, True),  # a blind candidate in daylight: decided (and failed)
    ("agreement>=0.97", 0, 40, True),  # a candidate that sees ghosts on an empty scene: decided (and failed)
    ("agreement>=0.97", 10, 10, True),
    ("latency<=1.2", 0, 0, True),  # latency rests on frames, not detections
])
def test_a_gate_on_detections_needs_evidence(gates: str, live: int, cand: int, decided: bool) -> None:
    message = with_evidence(shadow(f1=1.0 if live == cand == 0 else 0.0, rate=1.0), live, cand)
    why = undecided(parse_gates(gates), message, 20)
    assert (why is None) == decided, why
    if why is not None:
        assert f"{live + cand} detection(s) in the window (live {live}, candidate {cand}), 20 needed" in why
    assert undecided(parse_gates(gates), message, 0) is None  # --min-detections 0: the gates alone


def test_figures_without_evidence_decide_nothing_on_detections() -> None:
    """A daemon older than the evidence block: its figures cannot tell a dark scene from agreement."""
    why = undecided(parse_gates("agreement>=0.97"), shadow(), 20)
    assert why is not None and "update edge-sdk on the device" in why
    assert undecided(parse_gates("latency<=1.2"), shadow(), 20) is None
