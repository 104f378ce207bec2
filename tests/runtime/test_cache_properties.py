"""The prediction cache against an oracle: frames built of uniform grey cells the size of one
thumbnail pixel, so the thumbnail is known exactly; a hit when the largest absolute difference
of any thumbnail pixel from the last *stored* frame is under `threshold` ("stay under": at the
threshold itself it is a miss), for thumbnails of any shape."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.runtime.cache import PredictionCache


def frame_of(cells: np.ndarray, k: int) -> np.ndarray:
    """A BGR frame whose k x k blocks are the grey values of `cells` (B = G = R)."""
    grey = np.kron(cells.astype(np.uint8), np.ones((k, k), np.uint8))
    return np.repeat(grey[:, :, None], 3, axis=2)


@settings(max_examples=80, deadline=None)
@given(size=st.sampled_from([(64, 36), (32, 20), (16, 16), (20, 32)]), k=st.integers(1, 3),
       threshold=st.integers(1, 20), seed=st.integers(0, 2**31),
       changes=st.lists(st.tuples(st.integers(0, 10**6), st.integers(-25, 25)), min_size=0, max_size=4),
       precomputed=st.booleans())
def test_a_hit_exactly_when_every_thumbnail_pixel_stays_under_the_threshold(size, k, threshold, seed, changes,
                                                                            precomputed) -> None:
    w, h = size
    rng = np.random.default_rng(seed)
    first = rng.integers(30, 220, size=(h, w))
    second = first.copy()
    for where, delta in changes:
        second.flat[where % second.size] += delta
    second = np.clip(second, 0, 255)  # grey levels
    cache = PredictionCache(threshold=threshold, size=size)

    def lookup(cells: np.ndarray):
        frame = frame_of(cells, k)
        if precomputed:
            small, gray = cache.thumbnail_buffers()
            return cache.lookup(frame, cache.thumbnail(frame, small, gray))
        return cache.lookup(frame)

    assert lookup(first) is None and np.isnan(cache.last_difference)
    cache.store("first")
    difference = int(np.abs(second - first).max())
    got = lookup(second)
    assert cache.last_difference == difference
    assert got == ("first" if difference < threshold else None)
    assert (cache.hits, cache.misses) == ((1, 1) if difference < threshold else (0, 2))


@pytest.mark.parametrize("step,hit", [(3, True), (4, False), (5, False)])
def test_at_the_threshold_itself_it_is_a_miss(step: int, hit: bool) -> None:
    cache = PredictionCache(threshold=4.0, size=(8, 6))
    cache.lookup(np.full((60, 80, 3), 100, np.uint8))
    cache.store("r")
    second = np.full((60, 80, 3), 100, np.uint8)
    second[:10, :10] = 100 + step  # one thumbnail pixel exactly
    assert (cache.lookup(second) == "r") is hit
    assert cache.last_difference == step


def test_a_miss_then_store_makes_the_new_frame_the_reference() -> None:
    cache = PredictionCache(threshold=4.0, size=(8, 6))
    a, b = np.full((6, 8, 3), 50, np.uint8), np.full((6, 8, 3), 90, np.uint8)
    assert cache.lookup(a) is None
    cache.store("a")
    assert cache.lookup(b) is None
    cache.store("b")
    assert cache.lookup(b) == "b" and cache.lookup(a) is None
    assert cache.lookup(np.full((6, 8, 3), 88, np.uint8)) == "b"  # against b, the last stored


def test_a_lookup_without_a_store_keeps_the_old_reference() -> None:
    cache = PredictionCache(threshold=4.0, size=(8, 6))
    cache.lookup(np.full((6, 8, 3), 50, np.uint8))
    cache.store("a")
    assert cache.lookup(np.full((6, 8, 3), 90, np.uint8)) is None  # a miss whose result is not stored
    assert cache.lookup(np.full((6, 8, 3), 52, np.uint8)) == "a"


def test_a_disabled_cache_neither_counts_nor_stores() -> None:
    cache = PredictionCache(enabled=False, size=(8, 6))
    frame = np.full((6, 8, 3), 50, np.uint8)
    assert cache.lookup(frame) is None
    cache.store("x")
    assert cache.lookup(frame) is None and (cache.hits, cache.misses) == (0, 0)
    cache.enabled = True
    assert cache.lookup(frame) is None and cache.misses == 1  # nothing was stored while disabled


def test_the_thumbnail_is_64x36_by_default() -> None:
    cache = PredictionCache()
    small, gray = cache.thumbnail_buffers()
    assert cache.size == (64, 36) and small.shape == (36, 64, 3) and gray.shape == (36, 64)
    thumb = cache.thumbnail(np.zeros((720, 1280, 3), np.uint8), small, gray)
    assert thumb.shape == (36, 64)
