"""Mixed precision: the ranking finds a deliberately broken layer; the search finds the fewest
FP32 layers that meet a score."""
from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np
import pytest

from edge_sdk.builder import calibration as cal
from edge_sdk.builder import qdq
from edge_sdk.builder import sensitivity as sens
from edge_sdk.errors import CalibrationError

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")


@pytest.mark.parametrize(
    "metric, a, b, expected",
    [
        (sens.nmse, [np.ones(4)], [np.ones(4)], 0.0),
        (sens.nmse, [np.ones(4)], [np.zeros(4)], 1.0),
        (sens.nmse, [np.ones(4), np.full(4, 2.0)], [np.ones(4), np.full(4, 3.0)], 0.125),
        (sens.cosine_distance, [np.array([1.0, 0.0])], [np.array([2.0, 0.0])], 0.0),
        (sens.cosine_distance, [np.array([1.0, 0.0])], [np.array([0.0, 1.0])], 1.0),
        (sens.output_metric(1), [np.ones(2), np.ones(2)], [np.zeros(2), np.ones(2)], 0.0),
    ],
)
def test_metrics(metric: Callable, a, b, expected: float) -> None:
    assert metric(a, b) == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["only", "all-but"])
def test_rank_layers_puts_the_broken_layer_first(convnet, convnet_feeds, mode: str) -> None:
    ranges = cal.collect_ranges(convnet, convnet_feeds, method="minmax").ranges
    ranges["r1"] /= 50  # Conv_c2's input now clips almost everything
    ticks: List[int] = []
    ranking = sens.rank_layers(convnet, ranges, convnet_feeds[:3], mode=mode, progress=ticks.append)
    names = [name for name, _ in ranking]
    assert sorted(names) == sorted(qdq.quantizable_nodes(convnet))
    assert names[0] == "Conv_c2"
    assert ranking[0][1] > 10 * max(abs(v) for _, v in ranking[1:])
    assert sum(ticks) == len(names)


def test_rank_layers_rejects_unknown_mode_and_empty_batches(convnet) -> None:
    with pytest.raises(CalibrationError, match="mode"):
        sens.rank_layers(convnet, {}, [], mode="leave-one-in")
    with pytest.raises(CalibrationError, match="at least one batch"):
        sens.rank_layers(convnet, {}, [])


def _fp32_nodes(model) -> List[str]:
    dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return [n.name for n in model.graph.node if n.op_type in qdq.QUANTIZABLE and not any(i in dq for i in n.input)]


def _score_needing(needed: Sequence[str]) -> Callable:
    """Score 1.0 once every node in `needed` is FP32, less for each one still quantized."""

    def score(model) -> float:
        fp32 = set(_fp32_nodes(model))
        return 1.0 - 0.1 * sum(1 for n in needed if n not in fp32)

    return score


RANKING = ["Conv_c2", "Gemm_z", "Conv_c1", "ConvTranspose_up"]


@pytest.mark.parametrize(
    "needed, cap, expected_layers, expected_tries",
    [
        (0, None, 0, [0]),
        (1, None, 1, [0, 1]),
        (2, None, 2, [0, 1, 2]),
        (3, None, 3, [0, 1, 2, 4, 3]),
        (4, None, 4, [0, 1, 2, 4, 3]),
        (3, 2, 2, [0, 1, 2]),  # capped before reaching the score: best try returned
    ],
)
def test_search_fallback_finds_the_smallest_prefix(convnet, convnet_feeds, needed, cap, expected_layers, expected_tries) -> None:
    ranges = cal.collect_ranges(convnet, convnet_feeds, method="minmax").ranges
    ranking = [(name, 1.0 / (i + 1)) for i, name in enumerate(RANKING)]
    exclude, score, history = sens.search_fallback(
        convnet, ranges, ranking, _score_needing(RANKING[:needed]), threshold=0.99, max_fp32_layers=cap)
    assert exclude == RANKING[:expected_layers]
    assert [h["fp32_layers"] for h in history] == expected_tries
    assert score == pytest.approx(1.0 - 0.1 * (needed - expected_layers))


def test_search_fallback_grows_by_step(convnet, convnet_feeds) -> None:
    ranges = cal.collect_ranges(convnet, convnet_feeds, method="minmax").ranges
    exclude, score, history = sens.search_fallback(
        convnet, ranges, RANKING, _score_needing(RANKING[:3]), threshold=0.99, step=3)
    assert exclude == RANKING[:3] and score == 1.0
    assert [h["fp32_layers"] for h in history] == [0, 3, 1, 2]


def test_rank_by_cost_puts_accuracy_per_flop_first() -> None:
    """A cheap layer with a quarter of the sensitivity buys more per FLOP than an expensive one;
    layers nothing hurts go last; a layer without a FLOP count is priced as the dearest."""
    ranking = [("big", 0.8), ("cheap", 0.2), ("none", 0.0), ("mid", 0.3), ("unknown", 0.5)]
    flops = {"big": 1000, "cheap": 10, "none": 1, "mid": 100}
    assert [n for n, _ in sens.rank_by_cost(ranking, flops)] == ["cheap", "mid", "big", "unknown", "none"]
    assert dict(sens.rank_by_cost(ranking, flops)) == dict(ranking)  # the sensitivities are kept
