"""The assignment solver against scipy's linear_sum_assignment (the oracle)."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.tracking.assignment import assign, solve

scipy_optimize = pytest.importorskip("scipy.optimize")
pytestmark = pytest.mark.host


@pytest.mark.parametrize("seed", range(60))
def test_solve_reaches_scipys_least_total_cost(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m = rng.integers(0, 10, 2)
    cost = rng.random((n, m)) if seed % 2 else rng.integers(0, 4, (n, m)).astype(float)  # ties too
    rows, cols = solve(cost)
    ref_rows, ref_cols = scipy_optimize.linear_sum_assignment(cost)
    assert len(rows) == min(n, m)
    assert len(set(rows.tolist())) == len(rows) and len(set(cols.tolist())) == len(cols)
    assert cost[rows, cols].sum() == pytest.approx(cost[ref_rows, ref_cols].sum(), abs=1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_assign_is_the_least_cost_matching_under_the_limit(seed: int) -> None:
    """lapjv's cost_limit: leaving a row or column free costs limit / 2, the same as matching
    each pair at cost - limit where that is below 0; scipy solves the padded square problem."""
    rng = np.random.default_rng(100 + seed)
    n, m = rng.integers(1, 9, 2)
    cost = rng.random((n, m))
    limit = 0.5
    matches, free_rows, free_cols = assign(cost, limit)
    assert all(cost[r, c] < limit for r, c in matches)
    assert sorted(matches[:, 0].tolist() + free_rows.tolist()) == list(range(n))
    assert sorted(matches[:, 1].tolist() + free_cols.tolist()) == list(range(m))
    big = 1e6
    padded = np.full((n + m, m + n), big)
    padded[:n, :m] = np.where(cost < limit, cost, big)
    padded[:n, m:][np.eye(n, dtype=bool)] = limit / 2
    padded[n:, :m][np.eye(m, dtype=bool)] = limit / 2
    padded[n:, m:] = 0.0
    r, c = scipy_optimize.linear_sum_assignment(padded)
    best = padded[r, c].sum()
    ours = cost[matches[:, 0], matches[:, 1]].sum() + (len(free_rows) + len(free_cols)) * limit / 2
    assert ours == pytest.approx(best, abs=1e-9)


def test_nothing_under_the_limit_matches_nothing() -> None:
    matches, free_rows, free_cols = assign(np.full((3, 2), 0.9), 0.5)
    assert matches.shape == (0, 2) and free_rows.tolist() == [0, 1, 2] and free_cols.tolist() == [0, 1]


def test_a_cost_that_is_not_finite_is_refused() -> None:
    with pytest.raises(ValueError, match="not finite"):
        solve(np.array([[1.0, np.inf]]))


def test_a_cost_that_is_nan_is_never_a_match() -> None:
    cost = np.array([[0.1, np.nan], [0.2, 0.3], [np.nan, 0.4]])  # least total: rows 0 and 1 on the diagonal
    matches, free_rows, free_cols = assign(cost, 0.5)
    assert sorted(matches.tolist()) == [[0, 0], [1, 1]] and free_rows.tolist() == [2] and free_cols.tolist() == []
