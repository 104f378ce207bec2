"""The compiled check a consumer runs (`schemas.compiled`, fastjsonschema) accepts and refuses
exactly what the JSON Schema does, as jsonschema reads it: on the messages a real reporter sends
and on hostile variations of them (hypothesis: values of every JSON type and edge, keys removed
and added, names of every kind) — with the one documented difference of `pattern` and a trailing
newline. The fallback without fastjsonschema decides the same."""
from __future__ import annotations

import copy
import re
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.telemetry import schemas

from test_schemas import run_reporter

pytest.importorskip("jsonschema")
pytest.importorskip("fastjsonschema")

EDGES = st.sampled_from([0, -1, 1.0, 1.5, -0.5, 2 ** 63 - 1, -2 ** 63, 1e308, -1e-308, True, False, None, "",
                         "x" * 65, "x" * 129, "x" * 2049, "total\n", "Total", "a b", '"\\', [], {}, [1], {"p50": 1}]
                        ).map(copy.deepcopy)  # a fresh [] or {} per draw: mutate() changes what it is given in place
SCALARS = st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40) | EDGES
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) |
                      st.dictionaries(st.text(max_size=12) | st.sampled_from(["p50", "p95", "p99", "total", "TOT"]),
                                      inner, max_size=4), max_leaves=10)


@pytest.fixture(scope="module")
def corpus() -> List[Dict[str, Any]]:
    """The messages of a real reporter run, one per topic and mode, and a Jetson's telemetry."""
    out = run_reporter("summary") + run_reporter("frame")
    messages = [line["payload"] for line in out]
    tel = next(m for m in messages if m["schema"] == "edge-sdk/telemetry/1")
    messages.append(dict(tel, system={"cpu_percent": 35.0, "gpu_percent": 60.0, "memory_percent": 40.0,
                                      "temperature_c": {"CPU": 48.5}, "temperature_max_c": 48.5,
                                      "power_mw": {"VDD_IN": 7100}, "nvpmodel": "MODE_15W", "jetson_clocks": True}))
    assert {m["schema"] for m in messages} >= {"edge-sdk/status/1", "edge-sdk/telemetry/1", "edge-sdk/alert/1",
                                               "edge-sdk/detections/1"}
    return messages


def decisions(message: Any, schema_id: str) -> Tuple[bool, bool]:
    """(valid for jsonschema, valid for the compiled check)."""
    return (next(schemas.validator(schema_id).iter_errors(message), None) is None,
            schemas.compiled(schema_id)(message) is None)


def paths(obj: Any, here: Tuple[Any, ...] = ()) -> List[Tuple[Any, ...]]:
    out = [here]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, here + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, here + (i,))
    return out


def strings(obj: Any) -> List[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in [k] + strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in strings(v)]
    return []


def test_every_message_of_a_real_reporter_is_valid_for_both(corpus) -> None:
    for message in corpus:
        assert decisions(message, message["schema"]) == (True, True), message


def mutate(message: Dict[str, Any], data: Any) -> Dict[str, Any]:
    """A copy of `message` with one to three hostile changes drawn from `data`."""
    message = copy.deepcopy(message)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths(message)))
        parent, key = (None, None) if not path else (_at(message, path[:-1]), path[-1])
        how = data.draw(st.sampled_from(["replace", "delete", "add", "rename"]))
        if parent is None or how == "add":
            target = _at(message, path)
            if isinstance(target, dict):
                target[data.draw(st.text(max_size=12) | EDGES.filter(lambda e: isinstance(e, str)))] = data.draw(VALUES)
            elif isinstance(target, list):
                target.append(data.draw(VALUES))
        elif how == "replace":
            parent[key] = data.draw(VALUES)
        elif how == "delete":
            del parent[key]
        elif isinstance(parent, dict):  # rename
            parent[data.draw(st.text(max_size=40) | EDGES.filter(lambda e: isinstance(e, str)))] = parent.pop(key)
    return message


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_variations_get_the_same_decision(corpus, data) -> None:
    original = data.draw(st.sampled_from(corpus))
    message = mutate(original, data)
    by_jsonschema, compiled = decisions(message, original["schema"])
    if by_jsonschema != compiled:
        # the one difference: `$` before a trailing newline (Python's re matches, ECMA-262 does not)
        assert by_jsonschema and not compiled, message
        assert any(s.endswith("\n") for s in strings(message)), message


def _at(obj: Any, path: Tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def test_a_trailing_newline_does_not_pass_a_pattern(corpus) -> None:
    """jsonschema takes a stage named "total\\n" (Python's `$`); the compiled check, like ECMA-262, does not."""
    tel = copy.deepcopy(next(m for m in corpus if m["schema"] == "edge-sdk/telemetry/1"))
    tel["latency_ms"]["total\n"] = tel["latency_ms"].pop("total")
    assert decisions(tel, "edge-sdk/telemetry/1") == (True, False)
    assert re.search("^[a-z]+$", "total\n")  # the reason, in Python


def test_without_fastjsonschema_the_fallback_decides_the_same(corpus, monkeypatch) -> None:
    from edge_sdk import _imports

    real = _imports.available
    monkeypatch.setattr(_imports, "available", lambda name: False if name == "fastjsonschema" else real(name))
    monkeypatch.setattr(schemas, "_compiled", {})
    for message in corpus:
        broken = dict(message, seq=-1)
        assert schemas.compiled(message["schema"])(message) is None
        problem = schemas.compiled(message["schema"])(broken)
        assert problem is not None and problem.startswith("seq:"), problem
