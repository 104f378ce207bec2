"""The prediction cache reuses a result only for an unchanged frame."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.runtime.cache import PredictionCache
from runtime_factories import scene


def noisy(frame: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0, sigma, frame.shape)
    return np.clip(frame.astype(np.float64) + noise, 0, 255).astype(np.uint8)


BASE = scene(3, 640, 384, square=40)


@pytest.mark.parametrize(
    "name, second, hit",
    [
        ("identical", BASE.copy(), True),
        ("sensor noise", noisy(BASE, 3.0, 1), True),
        ("object moved 8 px", scene(4, 640, 384, square=40), False),
        ("small object appeared", None, False),
        ("lights dimmed", (BASE * 0.9).astype(np.uint8), False),
    ],
)
def test_hit_or_miss(name: str, second: np.ndarray, hit: bool) -> None:
    if second is None:
        second = BASE.copy()
        second[100:124, 300:324] = 255  # a 24 px object on a 640 px frame
    cache = PredictionCache(threshold=4.0)
    assert cache.lookup(BASE) is None
    cache.store("result-0")
    assert (cache.lookup(second) == "result-0") is hit, name
    assert (cache.hits, cache.misses) == ((1, 1) if hit else (0, 2))


def test_drift_is_measured_against_the_last_processed_frame() -> None:
    cache = PredictionCache(threshold=4.0)
    frame = np.full((96, 128, 3), 100, np.uint8)
    cache.lookup(frame)
    cache.store("first")
    results = []
    for step in range(1, 8):
        results.append(cache.lookup(np.full((96, 128, 3), 100 + step, np.uint8)))
    # each step is 1 grey level: steps 1..3 stay under 4 levels from the stored frame, step 4 does not
    assert results[:3] == ["first"] * 3 and results[3] is None


def test_disabled_and_clear() -> None:
    off = PredictionCache(enabled=False)
    off.store("x")
    assert off.lookup(BASE) is None and off.misses == 0
    cache = PredictionCache()
    cache.lookup(BASE)
    cache.store("x")
    cache.clear()
    assert cache.lookup(BASE) is None
