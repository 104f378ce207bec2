"""What a fleet rollout is, before any message is sent: the gates a shadow must pass, the waves,
the devices of each, and the state file that lets a rollout killed half-way go on where it stopped.

    gates = parse_gates("agreement>=0.97,latency<=1.2")
    failed = first_failure(gates, shadow_message)      # None, or (metric, value, gate words)
    plan = make_plan(["cam-1", ..., "cam-5"], canary=1, waves=parse_waves("50%,100%"))
    state = RolloutState.open(path, key)                # refuses the state file of another rollout

Pure: no broker, no clock; edge_sdk.rollout.driver runs a plan against the devices.
"""
from __future__ import annotations

import hashlib
import json
import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from edge_sdk.errors import ConfigError
from edge_sdk.fsutil import atomic_write_json

STATE_SCHEMA = "edge-sdk/rollout-state/1"

# gate name -> (where it is in a `shadow` message, what it is): edge_sdk/schemas/shadow.json
METRICS: Dict[str, Tuple[Tuple[str, str], str]] = {
    "agreement": (("agreement", "f1"), "f1 of the candidate's detections against the live model's"),
    "precision": (("agreement", "precision"), "the candidate's detections the live model also found"),
    "recall": (("agreement", "recall"), "the live model's detections the candidate also found"),
    "detection_rate": (("detection_rate", "ratio"), "detections per frame, candidate / live"),
    "score_shift": (("score_shift", "value"), "Kolmogorov-Smirnov statistic of the two models' scores"),
    "latency": (("latency_ms", "ratio"), "per-frame latency, candidate / live"),
}
OPERATORS: Dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, ">": operator.gt,
                                                        "<": operator.lt}
_GATE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|>|<)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")
DEFAULT_GATES = "agreement>=0.97,latency<=1.2"
DEFAULT_MIN_DETECTIONS = 20
ON_FRAMES = {"latency"}  # the metrics that rest on frames, not on detections


@dataclass(frozen=True)
class Gate:
    metric: str
    op: str
    bound: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    def value(self, shadow: Dict[str, Any]) -> Optional[float]:
        """The metric in a `shadow` message; None where the message has no figure (a ratio over a
        live model that found nothing)."""
        (outer, inner), _ = METRICS[self.metric]
        found = (shadow.get(outer) or {}).get(inner)
        return float(found) if isinstance(found, (int, float)) and not isinstance(found, bool) else None

    def holds(self, value: Optional[float]) -> bool:
        return value is not None and OPERATORS[self.op](value, self.bound)


def parse_gates(text: str) -> List[Gate]:
    """`--promote-if`: comma-separated `metric OP number` (OP one of >= <= > <); ConfigError
    naming the part that is not one."""
    gates = []
    for part in text.split(","):
        m = _GATE.match(part)
        if m is None or m.group(1) not in METRICS:
            raise ConfigError(f"--promote-if: {part.strip()!r} is not `metric>=number` (or <=, >, <) with a metric "
                              f"among {', '.join(METRICS)}; e.g. {DEFAULT_GATES!r}")
        gates.append(Gate(m.group(1), m.group(2), float(m.group(3))))
    return gates


def undecided(gates: Sequence[Gate], shadow: Dict[str, Any], min_detections: int) -> Optional[str]:
    """Why the `shadow` message cannot decide `gates` yet, or None: a gate on a detection figure
    (agreement, precision, recall, detection_rate, score_shift) needs `min_detections` detections
    of the two models together in the window (its `evidence`); on a scene where neither finds
    anything a candidate that never detects reads f1 1.0 and a rate ratio of 1.0. A message
    without `evidence` (a daemon older than the gate) is undecided too."""
    on_detections = [g for g in gates if g.metric not in ON_FRAMES]
    if not on_detections or min_detections <= 0:
        return None
    evidence = shadow.get("evidence")
    if not isinstance(evidence, dict):
        return "the device's shadow figures say nothing of their evidence (update edge-sdk on the device)"
    live, cand = (_count(evidence.get(k)) for k in ("live_detections", "shadow_detections"))
    if live + cand >= min_detections:
        return None
    return (f"{live + cand} detection(s) in the window (live {live}, candidate {cand}), {min_detections} needed "
            "for " + ", ".join(str(g) for g in on_detections))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def first_failure(gates: Sequence[Gate], shadow: Dict[str, Any]) -> Optional[Tuple[str, Optional[float], str]]:
    """The first gate a `shadow` message does not pass, as (metric, its value, the gate), or None."""
    for gate in gates:
        value = gate.value(shadow)
        if not gate.holds(value):
            return gate.metric, value, str(gate)
    return None


def parse_waves(text: str) -> List[float]:
    """`--waves`: comma-separated cumulative shares of the devices after the canary, rising, the
    last 100% (`10%,50%,100%`); ConfigError otherwise."""
    shares = []
    for part in text.split(","):
        part = part.strip()
        number = part[:-1] if part.endswith("%") else ""
        try:
            share = float(number) / 100.0
        except ValueError:
            raise ConfigError(f"--waves: {part!r} is not a percentage; give rising shares ending at 100%, "
                              f"e.g. 10%,50%,100%") from None
        if not 0 < share <= 1 or (shares and share <= shares[-1]):
            raise ConfigError(f"--waves: {part!r} must be above the wave before it and at most 100% "
                              f"(e.g. 10%,50%,100%)")
        shares.append(share)
    if shares[-1] != 1.0:
        raise ConfigError(f"--waves {text!r}: the last wave must be 100%, so that every device is reached")
    return shares


def make_plan(devices: Sequence[str], canary: int, waves: Sequence[float]) -> List[Dict[str, Any]]:
    """The steps of a rollout: the canary (the first `canary` devices, sorted), then a wave per
    share of the others (cumulative, rounded up); empty waves are left out."""
    if canary < 0:
        raise ConfigError(f"--canary must be 0 or more, got {canary}")
    ordered = sorted(devices)
    steps = [{"role": "canary", "devices": ordered[:canary]}] if canary and ordered else []
    rest, done = ordered[canary:], 0
    for k, share in enumerate(waves, 1):
        upto = min(len(rest), math.ceil(share * len(rest) - 1e-9))
        if upto > done:
            steps.append({"role": f"wave {k}", "devices": rest[done:upto]})
            done = upto
    return steps


def rollout_key(**arguments: Any) -> str:
    """What makes two runs the same rollout: the sha256 of its arguments' canonical JSON."""
    return hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()


@dataclass
class RolloutState:
    """The state file: the plan, each device's bundle before the rollout, the steps done, the
    devices promoted, and how it ended. Written atomically after every change."""

    path: Optional[Path]
    key: str
    steps: List[Dict[str, Any]] = field(default_factory=list)
    previous: Dict[str, Optional[str]] = field(default_factory=dict)  # device -> its bundle before
    done: int = 0  # steps finished
    promoted: List[str] = field(default_factory=list)
    outcome: Optional[Dict[str, Any]] = None  # {"result": "done"|"failed"|"rolled back", ...}
    seconds: List[float] = field(default_factory=list)  # time each finished step took

    @classmethod
    def open(cls, path: Optional[Path], key: str) -> "RolloutState":
        """The state in `path` (a fresh one when there is no file); ConfigError for a file that
        is not a rollout state or belongs to a rollout with other arguments."""
        if path is None or not path.exists():
            return cls(path, key)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--state {path}: cannot be read ({exc}); remove it to start a new rollout") from None
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise ConfigError(f"--state {path} is not a rollout state file ({STATE_SCHEMA}); give another path")
        if data.get("key") != key:
            raise ConfigError(f"--state {path} belongs to another rollout (bundle {data.get('bundle')!r}, other "
                              f"arguments); run it with that rollout's arguments, or give another state file")
        return cls(path, key, data["steps"], data["previous"], int(data["done"]), list(data["promoted"]),
                   data.get("outcome"), list(data.get("seconds", [])))

    @property
    def started(self) -> bool:
        return bool(self.steps)

    def save(self, bundle: str) -> None:
        if self.path is None:
            return
        atomic_write_json(self.path, {"schema": STATE_SCHEMA, "key": self.key, "bundle": bundle, "steps": self.steps,
                                      "previous": self.previous, "done": self.done, "promoted": self.promoted,
                                      "outcome": self.outcome, "seconds": self.seconds})
