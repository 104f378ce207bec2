"""Minimum-cost assignment in numpy: the Hungarian method with potentials (O(n^2 m)).

    rows, cols = solve(cost)                   # as scipy.optimize.linear_sum_assignment
    matches, free_rows, free_cols = assign(cost, limit)

`assign` is what a tracker needs: pairs whose cost is below `limit` only, chosen to minimise the
total cost where leaving a row or a column unmatched costs `limit / 2` (lapjv's `cost_limit`,
which ByteTrack uses). That equals minimising the sum of `cost - limit` over the matched pairs,
so pairs at or above the limit never help and the problem splits into independent parts: only
rows and columns with a pair below the limit enter the solver, and a row and a column that only
allow each other (an object far from the others, the common case) are matched without it.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np


def solve(cost: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The rows and columns of a minimum-cost full matching of the smaller side of `cost`
    (finite values), rows in increasing order, as scipy's linear_sum_assignment returns them."""
    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim != 2:
        raise ValueError(f"cost must be a 2-D matrix, got shape {cost.shape}")
    if not np.all(np.isfinite(cost)):
        raise ValueError("cost holds a value that is not finite")
    if cost.shape[0] > cost.shape[1]:
        cols, rows = solve(cost.T)
        order = np.argsort(rows)
        return rows[order], cols[order]
    n, m = cost.shape
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    owner = np.zeros(m + 1, np.int64)  # owner[j]: the row (1-based) column j is matched to; 0: none
    way = np.zeros(m + 1, np.int64)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            free = ~used
            free[0] = False
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            better = free[1:] & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            candidates = np.where(free, minv, np.inf)
            j1 = int(np.argmin(candidates))
            delta = candidates[j1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[free] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    cols = np.nonzero(owner[1:])[0]
    rows = owner[1:][cols] - 1
    order = np.argsort(rows)
    return rows[order].astype(np.int64), cols[order].astype(np.int64)


def assign(cost: np.ndarray, limit: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(matches (K, 2) of row, column; unmatched rows; unmatched columns) of the assignment of
    least total cost that uses only pairs with `cost < limit`."""
    cost = np.asarray(cost, dtype=np.float64)
    n, m = cost.shape
    allowed = cost < limit
    rows = np.nonzero(allowed.any(axis=1))[0]
    cols = np.nonzero(allowed.any(axis=0))[0]
    matches = np.zeros((0, 2), np.int64)
    if len(rows) and len(cols):
        # a row whose one allowed column allows no other row is a part of its own: matched as it is
        ok = allowed[np.ix_(rows, cols)]
        only = np.argmax(ok, axis=1)
        alone = (ok.sum(axis=1) == 1) & (ok.sum(axis=0)[only] == 1)
        pairs = [np.stack([rows[alone], cols[only[alone]]], axis=1)]
        rows, cols = rows[~alone], np.setdiff1d(cols, cols[only[alone]])
        if len(rows) and len(cols):
            sub = np.where(allowed[np.ix_(rows, cols)], cost[np.ix_(rows, cols)] - limit, 0.0)  # NaN: never allowed
            r, c = solve(sub)
            keep = allowed[rows[r], cols[c]]
            pairs.append(np.stack([rows[r][keep], cols[c][keep]], axis=1))
        matches = np.concatenate(pairs).astype(np.int64)
    free_rows = np.setdiff1d(np.arange(n), matches[:, 0])
    free_cols = np.setdiff1d(np.arange(m), matches[:, 1])
    return matches, free_rows, free_cols
