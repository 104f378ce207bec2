"""search_fallback's stated search, against a model of it written here: tries 0, then step,
2·step, 4·step… capped, bisects between the last failing and the first passing count, every try
once in `history`, and when nothing passes the best-scoring try (fewest layers on a tie). The
quantizer is replaced by one that only records which layers it keeps out, so thousands of
searches run in seconds; the real quantizer is exercised in test_sensitivity.py. The metrics
are checked against their formulas on random arrays."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.builder import sensitivity as sens


@pytest.fixture(autouse=True)
def recording_quantizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sens, "load_model", lambda model: model)
    monkeypatch.setattr(sens, "quantize_qdq", lambda model, ranges, exclude_nodes, per_channel: tuple(exclude_nodes))


def reference(scores: Dict[int, float], threshold: float, cap: int, step: int) -> Tuple[int, List[int]]:
    tries: List[int] = []

    def attempt(k: int) -> float:
        if k not in tries:
            tries.append(k)
        return scores[k]

    k, low, high = 0, -1, None
    while True:
        if attempt(k) >= threshold:
            high = k
            break
        low = k
        if k >= cap:
            break
        k = min(cap, step if k == 0 else 2 * k)
    if high is None:
        return max(tries, key=lambda n: (scores[n], -n)), tries
    while high - low > 1:
        mid = (low + high) // 2
        if attempt(mid) >= threshold:
            high = mid
        else:
            low = mid
    return high, tries


@settings(max_examples=400, deadline=None)
@given(n=st.integers(0, 40), data=st.data(), step=st.integers(1, 5), cap=st.one_of(st.none(), st.integers(-2, 45)),
       threshold=st.sampled_from([0.5, 0.8, 0.95]))
def test_the_search_is_the_documented_one(n: int, data, step: int, cap: Optional[int], threshold: float) -> None:
    names = [f"layer{i}" for i in range(n)]
    values = data.draw(st.lists(st.sampled_from([0.0, 0.3, 0.5, 0.79, 0.8, 0.9, 0.95, 1.0]), min_size=n + 1,
                                max_size=n + 1))
    scores = dict(enumerate(values))
    limit = n if cap is None else max(0, min(cap, n))
    exclude, score, history = sens.search_fallback("model", {}, names, lambda q: scores[len(q)], threshold,
                                                   max_fp32_layers=cap, step=step)
    k, tries = reference(scores, threshold, limit, step)
    assert exclude == names[:k] and score == scores[k]
    assert [h["fp32_layers"] for h in history] == tries
    assert [h["score"] for h in history] == [scores[t] for t in tries]
    assert len(set(tries)) == len(tries) and max(tries) <= limit


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 60), needed=st.integers(0, 60), step=st.integers(1, 4))
def test_with_a_monotone_score_it_finds_the_smallest_passing_prefix(n: int, needed: int, step: int) -> None:
    """Score passes exactly from `needed` layers on: the answer is `needed` (or, beyond the
    ranking, everything with the best score), in O(log n) tries."""
    names = [(f"l{i}", 1.0 / (i + 1)) for i in range(n)]  # (name, sensitivity) pairs work too
    exclude, score, history = sens.search_fallback("m", {}, names, lambda q: 1.0 if len(q) >= needed else len(q) / 100,
                                                   0.99, step=step)
    if needed <= n:
        assert len(exclude) == needed and score == 1.0
    else:
        assert len(exclude) == n and score == n / 100
    assert exclude == [name for name, _ in names[:len(exclude)]]
    assert len(history) <= 2 * (n.bit_length() + 2)


def test_a_zero_cap_tries_only_int8_everywhere() -> None:
    exclude, score, history = sens.search_fallback("m", {}, ["a", "b"], lambda q: 0.1 * len(q), 0.9, max_fp32_layers=0)
    assert exclude == [] and history == [{"fp32_layers": 0, "score": 0.0}]


def test_simulate_runs_on_every_try_but_the_first() -> None:
    seen: List[Tuple[tuple, List[str]]] = []

    def simulate(qdq, kept):
        seen.append((qdq, list(kept)))
        return ("fp16",) + qdq

    exclude, score, _ = sens.search_fallback("m", {}, ["a", "b", "c"], lambda q: 1.0 if q and q[0] == "fp16" and
                                             len(q) >= 3 else 0.0, 0.5, simulate=simulate)
    assert exclude == ["a", "b"] and score == 1.0
    assert all(list(q) == kept for q, kept in seen) and ([], []) not in [(list(q), k) for q, k in seen]


arrays = st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=12).map(np.array)


@settings(max_examples=300, deadline=None)
@given(a=arrays, data=st.data())
def test_metrics_against_their_formulas(a: np.ndarray, data) -> None:
    b = np.array(data.draw(st.lists(st.floats(-100, 100, allow_nan=False), min_size=len(a), max_size=len(a))))
    na = float(np.dot(a, a))
    expected = float(np.dot(a - b, a - b)) / na if na > 0 else float(np.dot(b, b))
    assert sens.nmse([a], [b]) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert sens.nmse([a, b], [a, b]) == 0.0
    if np.linalg.norm(a) > 1e-3 and np.linalg.norm(b) > 1e-3:
        cos = float(np.dot(a, b)) / (np.linalg.norm(a) * np.linalg.norm(b))
        assert sens.cosine_distance([a], [b]) == pytest.approx(1 - cos, abs=1e-9)
        assert sens.cosine_distance([a], [-a]) == pytest.approx(2.0)  # opposite is as far as it gets
        assert sens.cosine_distance([a], [3 * a]) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("metric,a,b,expected", [
    (sens.nmse, [np.ones(3)], [-np.ones(3)], 4.0),
    (sens.nmse, [np.zeros(3)], [np.full(3, 2.0)], 12.0),  # a zero reference: the candidate's energy
    (sens.nmse, [np.ones(2), np.zeros(2)], [np.zeros(2), np.zeros(2)], 0.5),  # mean over outputs
    (sens.cosine_distance, [np.zeros(2)], [np.zeros(2)], 0.0),
    (sens.cosine_distance, [np.array([1.0, 0.0]), np.array([1.0, 0.0])], [np.array([-1.0, 0.0]), np.array([1.0, 0.0])], 1.0),
    (sens.nmse, [], [], 0.0), (sens.cosine_distance, [], [], 0.0),
    (sens.output_metric(0, sens.cosine_distance), [np.array([1.0, 0.0]), np.ones(2)], [np.array([0.0, 1.0]), -np.ones(2)], 1.0),
])
def test_metric_edges(metric, a, b, expected: float) -> None:
    assert metric(a, b) == pytest.approx(expected)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0])), max_size=8,
                unique_by=lambda t: t[0]),
       st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 1000), max_size=8))
def test_rank_by_cost_is_sensitivity_per_flop(ranking, flops) -> None:
    dearest = max(list(flops.values()) + [1])
    hurt = [(n, v) for n, v in ranking if v > 0]
    rest = [(n, v) for n, v in ranking if v <= 0]
    got = sens.rank_by_cost(ranking, flops)
    assert sorted(got) == sorted(ranking)
    assert got[:len(hurt)] == sorted(hurt, key=lambda t: -t[1] / max(flops.get(t[0]) or dearest, 1))
    assert got[len(hurt):] == sorted(rest, key=lambda t: -t[1])


def test_a_layer_without_a_flop_count_costs_as_much_as_the_dearest_even_a_tiny_one() -> None:
    # the dearest counted layer costs 1 FLOP: "b" (no count) costs 1 too, so 0.5 per FLOP beats 0.4
    assert [n for n, _ in sens.rank_by_cost([("a", 0.4), ("b", 0.5)], {"a": 1})] == ["b", "a"]
    # one FLOP against two: 0.3 per FLOP beats 0.25
    assert [n for n, _ in sens.rank_by_cost([("b", 0.5), ("a", 0.3)], {"a": 1, "b": 2})] == ["a", "b"]
    # a zero count is no count: priced as the dearest
    assert [n for n, _ in sens.rank_by_cost([("a", 0.3), ("z", 0.5)], {"a": 2, "z": 0})] == ["z", "a"]


def test_progress_is_called_once_per_try() -> None:
    calls: List[int] = []
    _, _, history = sens.search_fallback("m", {}, [f"l{i}" for i in range(10)], lambda q: 1.0 if len(q) >= 5 else 0.0,
                                         0.5, progress=calls.append)
    assert calls == [1] * len(history) and len(history) > 3
