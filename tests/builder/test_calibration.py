"""Calibration: the entropy threshold against a slow reference, minmax/percentile against numpy,
streaming statistics against all-at-once ones, and coverage."""
from __future__ import annotations

import math
from typing import List

import numpy as np
import pytest

from edge_sdk.builder import calibration as cal
from edge_sdk.errors import CalibrationError

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")


# --- the reference: KL divergence with plain loops, straight from the definition ---------------


def reference_kl(counts: np.ndarray, levels: int = 128, start: int = 128, eps: float = 1e-4) -> List[float]:
    h = [float(c) for c in counts]
    out = []
    for i in range(start, len(h) + 1):
        p = h[:i]
        p[i - 1] += sum(h[i:])
        members = [[] for _ in range(levels)]
        for k in range(i):
            members[(k * levels) // i].append(k)
        q = [0.0] * i
        for group in members:
            mass = sum(h[k] for k in group)
            nonzero = [k for k in group if p[k] > 0]
            for k in nonzero:
                q[k] = mass / len(nonzero)
        if sum(q) == 0:
            out.append(math.inf)
            continue
        p = [x / sum(p) for x in p]
        q = [x / sum(q) for x in q]

        def smooth(d):
            zeros = sum(1 for x in d if x == 0)
            return [eps if x == 0 else x * (1 - eps * zeros) for x in d]

        p, q = smooth(p), smooth(q)
        out.append(sum(a * math.log(a / b) for a, b in zip(p, q)))
    return out


def _samples(kind: str, n: int = 20000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return rng.normal(size=n)
    if kind == "laplacian":
        return rng.laplace(size=n)
    if kind == "uniform":
        return rng.uniform(-1, 1, size=n)
    if kind == "gaussian+outliers":
        return np.concatenate([rng.normal(size=n), [40.0, -55.0, 60.0]])
    if kind == "relu":
        return np.maximum(rng.normal(size=n), 0)
    raise ValueError(kind)


KINDS = ["gaussian", "laplacian", "uniform", "gaussian+outliers", "relu"]


@pytest.mark.parametrize("kind", KINDS)
def test_kl_divergences_match_the_loop_reference(kind: str) -> None:
    x = _samples(kind)
    counts = cal.abs_histogram(x, float(np.abs(x).max()), 320)
    fast = cal.kl_divergences(counts)
    slow = np.array(reference_kl(counts))
    assert fast.shape == slow.shape == (320 - 128 + 1,)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-12)
    i_fast, i_slow = int(np.argmin(fast)), int(np.argmin(slow))
    assert i_fast == i_slow or math.isclose(slow[i_fast], slow[i_slow], rel_tol=1e-9)


@pytest.mark.parametrize(
    "kind, low, high",
    [
        ("gaussian", 2.5, 5.0),  # clips the far tail, keeps the body (in units of sigma)
        ("laplacian", 3.0, 12.0),
        ("uniform", 0.9, 1.001),  # nothing to clip: at most half a bin above the max
        ("gaussian+outliers", 2.5, 6.0),  # ignores the three outliers at 40-60
    ],
)
def test_entropy_threshold_lands_where_the_distribution_says(kind: str, low: float, high: float) -> None:
    x = _samples(kind, n=200000)
    top = float(np.abs(x).max())
    counts = cal.abs_histogram(x, top, 2048)
    amax = cal.entropy_amax(counts, np.linspace(0, top, 2049))
    assert low <= amax <= high


def test_entropy_threshold_is_half_a_bin_above_the_kept_range() -> None:
    x = _samples("gaussian", n=50000)
    top = float(np.abs(x).max())
    counts = cal.abs_histogram(x, top, 512)
    kept = int(np.argmin(cal.kl_divergences(counts))) + 128
    assert cal.entropy_amax(counts, np.linspace(0, top, 513)) == pytest.approx((kept + 0.5) * top / 512)


def test_exact_zeros_do_not_drag_the_entropy_threshold_down() -> None:
    # A ReLU output: 60 % exact zeros. With the zeros left in bin 0 the search would prefer the
    # narrowest range; taken out, the threshold matches the one for the non-zero part alone.
    rng = np.random.default_rng(3)
    positive = np.abs(rng.normal(size=40000))
    x = np.concatenate([np.zeros(60000), positive])
    top = float(x.max())
    edges = np.linspace(0, top, 2049)
    with_zeros = cal.abs_histogram(x, top)
    alone = cal.entropy_amax(cal.abs_histogram(positive, top), edges)
    assert cal.entropy_amax(with_zeros, edges, zeros=60000) == pytest.approx(alone)
    assert cal.entropy_amax(with_zeros, edges, zeros=0) < alone


@pytest.mark.parametrize("pct", [50.0, 90.0, 99.0, 99.99])
@pytest.mark.parametrize("kind", ["gaussian", "laplacian", "relu"])
def test_percentile_from_histogram_matches_numpy_within_a_bin(kind: str, pct: float) -> None:
    x = _samples(kind, n=100000)
    top = float(np.abs(x).max())
    counts = cal.abs_histogram(x, top, 2048)
    got = cal.percentile_amax(counts, np.linspace(0, top, 2049), pct)
    assert abs(got - np.percentile(np.abs(x), pct)) <= top / 2048


def test_abs_histogram_puts_the_max_in_the_last_bin_and_counts_everything() -> None:
    x = np.array([0.0, -0.5, 0.99, 1.0, -1.0, 0.25], dtype=np.float32)
    counts = cal.abs_histogram(x, 1.0, 4)
    assert counts.tolist() == [1, 1, 1, 3]  # [0,.25) [.25,.5) [.5,.75) [.75,1]


# --- collect_ranges on tiny models ----------------------------------------------------------


def _relu_model():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 50])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 50])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@pytest.fixture
def relu_feeds(make_feeds):
    return make_feeds(5, seed=4, shape=(2, 50), scale=3.0)


def test_minmax_is_the_exact_max_of_abs(relu_feeds) -> None:
    res = cal.collect_ranges(_relu_model(), relu_feeds, method="minmax")
    x = np.concatenate([f["x"] for f in relu_feeds])
    assert res.ranges["x"] == float(np.abs(x).max())
    assert res.ranges["y"] == float(np.maximum(x, 0).max())
    assert res.samples == 10  # 5 batches of 2


def test_percentile_method_matches_numpy_on_the_raw_activations(relu_feeds) -> None:
    res = cal.collect_ranges(_relu_model(), relu_feeds, method="percentile", percentile=95.0)
    y = np.maximum(np.concatenate([f["x"] for f in relu_feeds]), 0)
    assert abs(res.ranges["y"] - np.percentile(y, 95.0)) <= float(y.max()) / 2048


def test_streamed_histograms_equal_one_histogram_of_all_data(relu_feeds) -> None:
    res = cal.collect_ranges(_relu_model(), relu_feeds, method="entropy", num_bins=256)
    x = np.concatenate([f["x"] for f in relu_feeds])
    counts, edges = res.histograms["x"]
    np.testing.assert_array_equal(counts, cal.abs_histogram(x, float(np.abs(x).max()), 256))
    assert edges[-1] == float(np.abs(x).max()) and len(edges) == 257
    assert res.zeros["y"] == int(np.sum(x <= 0))


def test_one_shot_iterator_gives_the_same_result_as_a_list(convnet, convnet_feeds) -> None:
    from_list = cal.collect_ranges(convnet, convnet_feeds)
    from_iter = cal.collect_ranges(convnet, iter(convnet_feeds))
    assert from_iter.ranges == from_list.ranges


def test_every_activation_is_calibrated_and_progress_counts_both_passes(convnet, convnet_feeds) -> None:
    ticks: List[int] = []
    res = cal.collect_ranges(convnet, convnet_feeds, progress=ticks.append)
    assert set(res.ranges) == {"x", "c1", "r1", "c2", "s", "up", "y", "gap", "flat", "z"}
    assert sum(ticks) == cal.PASSES * len(convnet_feeds)
    assert all(v > 0 for v in res.ranges.values())


def test_with_method_recomputes_without_running_the_model(convnet, convnet_feeds) -> None:
    entropy = cal.collect_ranges(convnet, convnet_feeds, method="entropy")
    direct = cal.collect_ranges(convnet, convnet_feeds, method="minmax")
    assert entropy.with_method("minmax").ranges == direct.ranges
    assert entropy.with_method("minmax").method == "minmax"


def test_to_json_gives_amax_and_scale(convnet, convnet_feeds) -> None:
    res = cal.collect_ranges(convnet, convnet_feeds, method="minmax")
    doc = res.to_json()
    assert set(doc) == set(res.ranges)
    for name, entry in doc.items():
        assert entry["amax"] == res.ranges[name]
        assert entry["scale"] == pytest.approx(res.ranges[name] / 127)


def test_all_zero_tensor_gets_a_unit_range() -> None:
    assert cal.amax_from_histogram(np.array([10, 0, 0, 0]), np.zeros(5), "entropy", zeros=10) == 1.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m, f: cal.collect_ranges(m, f, method="kl"), "unknown calibration method"),
        (lambda m, f: cal.collect_ranges(m, []), "no calibration batches"),
        (lambda m, f: cal.collect_ranges(m, [{"wrong": f[0]["x"]}]), "lacks model input"),
        (lambda m, f: cal.collect_ranges(m, f, tensors=["nope"]), "not found"),
        (lambda m, f: cal.collect_ranges(m, [{"x": f[0]["x"] * np.nan}]), "non-finite"),
        (lambda m, f: cal.coverage(m, {"x": 1.0}, []), "at least one"),
    ],
)
def test_bad_input_raises_calibration_error(convnet, convnet_feeds, call, message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        call(convnet, convnet_feeds)


# --- coverage ------------------------------------------------------------------------------


def test_coverage_counts_values_beyond_the_range(convnet, convnet_feeds) -> None:
    x = np.concatenate([f["x"] for f in convnet_feeds])
    amax = float(np.percentile(np.abs(x), 90))
    clipped = cal.coverage(convnet, {"x": amax, "r1": 1e9}, convnet_feeds)
    assert clipped["x"] == pytest.approx(np.mean(np.abs(x) > amax))
    assert clipped["r1"] == 0.0


@pytest.mark.parametrize(
    "clipped, threshold, top, expected",
    [
        ({"a": 0.2, "b": 0.05, "c": 0.001}, 0.01, 5, [("a", 0.2), ("b", 0.05)]),
        ({"a": 0.2, "b": 0.05, "c": 0.3}, 0.01, 2, [("c", 0.3), ("a", 0.2)]),
        ({"a": 0.0}, 0.01, 5, []),
    ],
)
def test_worst_clipped(clipped, threshold, top, expected) -> None:
    assert cal.worst_clipped(clipped, threshold, top) == expected


def test_activation_tensors_lists_inputs_then_node_outputs(convnet) -> None:
    assert cal.activation_tensors(convnet) == ["x", "c1", "r1", "c2", "s", "up", "y", "gap", "flat", "z"]


@pytest.mark.parametrize(
    "percentile, expected",
    [
        # 40 values, 10 in each unit bin [0,1) .. [3,4): 45 % is the 18th value, the 8th of the 10 in [1, 2)
        (45.0, 1.8),
        (50.0, 2.0),  # the 20th: the last of [1, 2)
        (2.5, 0.1),  # the 1st: a tenth into [0, 1)
        (100.0, 4.0),
    ],
)
def test_percentile_is_interpolated_inside_its_bin(percentile: float, expected: float) -> None:
    counts = np.array([10, 10, 10, 10])
    assert cal.percentile_amax(counts, np.linspace(0.0, 4.0, 5), percentile) == pytest.approx(expected, abs=1e-12)


def test_mse_range_finds_the_clip_that_minimises_the_int8_error_of_a_laplace_tensor() -> None:
    """|x| of Laplace(b=1): the MSE-optimal symmetric 8-bit clip is about 9.9 b (Banner et al.,
    ACIQ). The oracle is a brute-force search quantizing the raw samples with numpy, independent
    of the histogram code; the histogram's choice must cost no more than 1 % above its optimum."""
    rng = np.random.default_rng(7)
    x = rng.laplace(0.0, 1.0, 400_000).astype(np.float32)
    top = float(np.abs(x).max())
    counts = cal.abs_histogram(x, top)
    edges = np.linspace(0.0, top, counts.size + 1)
    amax = cal.amax_from_histogram(counts, edges, "mse")

    def mse(a: float) -> float:
        step = a / 127.0
        return float(np.mean((np.clip(np.round(x / step), -127, 127) * step - x) ** 2))

    grid = np.linspace(4.0, top, 200)
    errors = [mse(a) for a in grid]
    best = float(grid[int(np.argmin(errors))])
    assert 8.0 < best < 12.0 and 8.0 < amax < 12.0, (best, amax)
    assert mse(amax) <= 1.01 * min(errors)
    assert amax < 0.9 * top  # it clips: minmax would be the max, far worse for this tail
    assert mse(top) > 1.3 * mse(amax)


def test_mse_range_keeps_the_whole_range_of_a_uniform_tensor() -> None:
    """Uniform values have no tail to trade: clipping only adds error, so the range is the max."""
    x = np.random.default_rng(8).uniform(-3.0, 3.0, 200_000).astype(np.float32)
    counts = cal.abs_histogram(x, 3.0)
    amax = cal.amax_from_histogram(counts, np.linspace(0.0, 3.0, counts.size + 1), "mse")
    assert 2.97 <= amax <= 3.0
