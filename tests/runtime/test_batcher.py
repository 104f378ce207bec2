"""The dynamic batcher: when a batch goes out (Triton's rules), which requests fill it (oldest
first, one per stream per round), each stream's order, its statistics, and its thread safety.

Time is a fake clock the tests move; `next_batch(timeout=0)` only looks, so every outcome is
decided by the clock, never by how fast a thread runs.
"""
from __future__ import annotations

import threading
from fractions import Fraction
from typing import Dict, List

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.runtime.batcher import Batch, BatchPolicy, BatcherClosed, DynamicBatcher


class FakeClock:
    """Seconds as exact fractions, so that a request put at t and looked at t + delay has
    waited exactly the delay (float seconds would round either way)."""

    def __init__(self) -> None:
        self.now = Fraction(100)

    def __call__(self) -> Fraction:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += Fraction(str(ms)) / 1000


def batcher(max_batch_size: int = 4, preferred=(), delay_ms: float = 10.0, window: int = 256):
    clock = FakeClock()
    return DynamicBatcher(BatchPolicy(max_batch_size, tuple(preferred), delay_ms), clock=clock, window=window), clock


def labels(batch: Batch) -> List[str]:
    return [f"{r.stream_id}{r.item}" for r in batch]


@pytest.mark.parametrize("kwargs, key", [
    ({"max_batch_size": 0}, "max_batch_size"),
    ({"max_batch_size": 2.5}, "max_batch_size"),
    ({"max_batch_size": True}, "max_batch_size"),
    ({"max_batch_size": 4, "preferred_batch_sizes": (5,)}, "preferred_batch_sizes"),
    ({"max_batch_size": 4, "preferred_batch_sizes": (0,)}, "preferred_batch_sizes"),
    ({"max_batch_size": 4, "preferred_batch_sizes": (4, 2)}, "sorted and unique"),
    ({"max_batch_size": 4, "preferred_batch_sizes": (2, 2)}, "sorted and unique"),
    ({"max_batch_size": 4, "preferred_batch_sizes": "24"}, "preferred_batch_sizes"),
    ({"max_batch_size": 4, "max_queue_delay_ms": -1}, "max_queue_delay_ms"),
    ({"max_batch_size": 4, "max_queue_delay_ms": float("nan")}, "max_queue_delay_ms"),
    ({"max_batch_size": 4, "max_queue_delay_ms": "5"}, "max_queue_delay_ms"),
])
def test_policy_refuses_bad_values_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        BatchPolicy(**kwargs)


def test_policy_accepts_the_boundaries_and_lists():
    policy = BatchPolicy(4, [1, 4], 0)
    assert policy.preferred_batch_sizes == (1, 4) and policy.max_queue_delay_ms == 0.0
    assert policy.target == 4
    assert BatchPolicy(3).target == 3  # without preferred sizes: the max size


def test_a_full_batch_goes_at_once_without_waiting_for_the_delay():
    b, clock = batcher(max_batch_size=3, delay_ms=1000)
    for i in range(2):
        b.put("a", i)
    assert b.next_batch(timeout=0) is None  # 2 of 3, the delay has not run out
    b.put("b", 0)
    batch = b.next_batch(timeout=0)
    assert batch is not None and labels(batch) == ["a0", "a1", "b0"] and batch.reason == "size"
    assert batch.queue_delays_ms() == [0.0, 0.0, 0.0]


def test_the_largest_preferred_size_goes_at_once_and_the_rest_waits():
    b, clock = batcher(max_batch_size=8, preferred=(2, 4), delay_ms=50)
    for i in range(3):
        b.put("a", i)
    assert b.next_batch(timeout=0) is None  # 3: a preferred size (2) can be formed, but not the largest
    for i in range(3, 6):
        b.put("a", i)
    batch = b.next_batch(timeout=0)
    assert labels(batch) == ["a0", "a1", "a2", "a3"]  # 4, not the 6 queued nor the max 8
    assert b.next_batch(timeout=0) is None  # the 2 left wait for their delay
    clock.advance_ms(50)
    assert labels(b.next_batch(timeout=0)) == ["a4", "a5"]


def test_the_oldest_request_waits_at_most_the_delay_then_what_is_queued_goes():
    b, clock = batcher(max_batch_size=4, delay_ms=10)
    b.put("a", 0)
    clock.advance_ms(6)
    b.put("b", 0)
    clock.advance_ms(3.9)
    assert b.next_batch(timeout=0) is None  # the oldest has waited 9.9 ms
    clock.advance_ms(0.1)
    batch = b.next_batch(timeout=0)
    assert labels(batch) == ["a0", "b0"] and batch.reason == "delay"
    assert batch.queue_delays_ms() == pytest.approx([10.0, 4.0])


def test_a_delay_of_zero_sends_whatever_is_queued():
    b, _ = batcher(max_batch_size=4, delay_ms=0)
    b.put("a", 0)
    assert labels(b.next_batch(timeout=0)) == ["a0"]


def test_a_stalled_stream_delays_the_others_no_longer_than_the_delay():
    # stream "c" delivered once and stalls: "a" and "b" go when the oldest of theirs is due,
    # whether or not "c" ever delivers again
    b, clock = batcher(max_batch_size=3, delay_ms=20)
    b.put("c", 0)
    assert labels(b.next_batch(timeout=0) or Batch([], 0, "")) == []
    clock.advance_ms(20)
    assert labels(b.next_batch(timeout=0)) == ["c0"]
    assert b.next_batch(timeout=0) is None  # the model is done with c0 at once; "c" stalls from here
    b.put("a", 0)
    clock.advance_ms(5)
    b.put("b", 0)
    clock.advance_ms(15)
    assert labels(b.next_batch(timeout=0)) == ["a0", "b0"]


def test_a_flooding_stream_gets_one_slot_per_round_and_cannot_starve_the_others():
    b, clock = batcher(max_batch_size=4, delay_ms=10)
    for i in range(10):  # "flood" is first with ten requests
        b.put("flood", i)
    clock.advance_ms(1)
    b.put("quiet", 0)
    clock.advance_ms(1)
    b.put("late", 0)
    batch = b.next_batch(timeout=0)
    # round one: every stream's oldest (flood0, quiet0, late0); round two: flood1
    assert sorted(labels(batch)) == sorted(["flood0", "flood1", "quiet0", "late0"])
    assert labels(batch) == ["flood0", "flood1", "quiet0", "late0"]  # rows in order of arrival
    rest = [labels(b.next_batch(timeout=0)) for _ in range(2)]
    assert rest == [["flood2", "flood3", "flood4", "flood5"], ["flood6", "flood7", "flood8", "flood9"]]


def test_a_round_is_filled_oldest_first_when_the_batch_cannot_take_every_stream():
    b, clock = batcher(max_batch_size=2, delay_ms=10)
    for sid in ("x", "y", "z"):
        b.put(sid, 0)
        clock.advance_ms(1)
    b.put("x", 1)
    assert labels(b.next_batch(timeout=0)) == ["x0", "y0"]
    assert labels(b.next_batch(timeout=0)) == ["z0", "x1"]


def test_each_streams_requests_leave_in_order_across_batches():
    b, clock = batcher(max_batch_size=3, delay_ms=0)
    put_order: Dict[str, List[int]] = {"a": [], "b": [], "c": []}
    for i in range(30):
        sid = "abc"[(i * 7) % 3 if i % 4 else 0]
        b.put(sid, i)
        put_order[sid].append(i)
    out: Dict[str, List[int]] = {"a": [], "b": [], "c": []}
    while True:
        batch = b.next_batch(timeout=0)
        if batch is None:
            break
        assert len(batch) <= 3
        for r in batch:
            out[r.stream_id].append(r.item)
    assert out == put_order


def test_close_flushes_what_is_queued_at_once_and_refuses_new_requests():
    b, _ = batcher(max_batch_size=2, delay_ms=1000)
    for i in range(3):
        b.put("a", i)
    b.close()
    with pytest.raises(BatcherClosed, match="closed"):
        b.put("a", 9)
    first = b.next_batch(timeout=0)
    assert labels(first) == ["a0", "a1"] and first.reason == "size"
    last = b.next_batch(timeout=0)
    assert labels(last) == ["a2"] and last.reason == "close"
    assert b.drained and b.next_batch(timeout=None) is None  # drained: returns at once


def test_when_the_model_is_free_the_streams_of_its_last_batch_are_waited_for():
    """c and d came while a and b were in the model: when the model is free, the batch waits for
    a's and b's next frames (which come once theirs are back), so all four go together."""
    b, clock = batcher(max_batch_size=4, preferred=(4,), delay_ms=5)
    b.put("a", 0), b.put("b", 0)
    clock.advance_ms(5)
    assert labels(b.next_batch(timeout=0)) == ["a0", "b0"]  # the delay ran out with two
    clock.advance_ms(1)
    b.put("c", 0), b.put("d", 0)  # while a0 and b0 are in the model
    clock.advance_ms(50)
    assert b.next_batch(timeout=0) is None  # free: c and d waited 50 ms, but a and b have frames coming
    clock.advance_ms(1)
    b.put("a", 1)
    assert b.next_batch(timeout=0) is None
    b.put("b", 1)
    batch = b.next_batch(timeout=0)
    assert labels(batch) == ["c0", "d0", "a1", "b1"] and batch.reason == "size"
    assert batch.queue_delays_ms() == pytest.approx([51.0, 51.0, 0.0, 0.0])


def test_a_stream_of_the_last_batch_that_sends_nothing_holds_the_rest_at_most_the_delay():
    b, clock = batcher(max_batch_size=4, preferred=(4,), delay_ms=5)
    b.put("a", 0), b.put("b", 0)
    clock.advance_ms(5)
    assert len(b.next_batch(timeout=0)) == 2
    b.put("c", 0)
    clock.advance_ms(50)
    assert b.next_batch(timeout=0) is None  # the model is free
    b.put("a", 1)
    clock.advance_ms(4.9)
    assert b.next_batch(timeout=0) is None  # b (its camera lost) has not put its next frame
    clock.advance_ms(0.1)
    batch = b.next_batch(timeout=0)
    assert labels(batch) == ["c0", "a1"] and batch.reason == "delay"  # the delay, counted from the model free
    assert batch.queue_delays_ms() == pytest.approx([55.0, 5.0])


def test_once_every_stream_of_the_last_batch_put_its_next_a_late_request_goes_at_once():
    b, clock = batcher(max_batch_size=4, preferred=(4,), delay_ms=5)  # four slots, three streams
    b.put("a", 0), b.put("b", 0)
    clock.advance_ms(5)
    assert len(b.next_batch(timeout=0)) == 2
    b.put("c", 0)
    clock.advance_ms(50)
    assert b.next_batch(timeout=0) is None
    b.put("a", 1), b.put("b", 1)  # no one else is due: c0, waiting 50 ms, goes with them now
    batch = b.next_batch(timeout=0)
    assert labels(batch) == ["c0", "a1", "b1"] and batch.reason == "delay"


@pytest.mark.parametrize("infer_ms", [20, 50, 200])
def test_saturated_streams_split_in_two_groups_come_together_and_fill_the_batch(infer_ms):
    """Four saturated streams with one frame in flight each (a stream puts its next frame 1 ms
    after its last comes back from the model), a model that takes `infer_ms` per batch, and the
    default 5 ms delay. They start split: a and b first, c and d 7 ms later, so the first batch
    goes with two. Once the model is free the batch waits for the streams of the batch it ran, so
    from the third batch on every batch is full (without it, the groups alternate, half full)."""
    b, clock = batcher(max_batch_size=4, preferred=(4,), delay_ms=5)
    due = {"a": Fraction(100), "b": Fraction(100), "c": Fraction(100) + Fraction(7, 1000), "d": Fraction(100) + Fraction(7, 1000)}
    frame = {sid: 0 for sid in due}

    def deliver() -> None:
        for sid, at in list(due.items()):
            if at <= clock.now:
                b.put(sid, frame[sid])
                frame[sid] += 1
                del due[sid]

    sizes: List[int] = []
    while len(sizes) < 12:
        deliver()
        batch = b.next_batch(timeout=0)
        if batch is None:
            clock.advance_ms(0.5)
            continue
        sizes.append(len(batch))
        end = clock.now + Fraction(infer_ms, 1000)
        while clock.now < end:  # the model runs; the other streams' frames come meanwhile
            clock.advance_ms(0.5)
            deliver()
        for sid in batch.stream_ids:  # back from the model: each stream's next frame in 1 ms
            due[sid] = clock.now + Fraction(1, 1000)
    assert sizes[0] == 2 and sizes[2:] == [4] * 10, sizes
    assert b.stats()["efficiency"] >= 0.75


def test_pending_counts_per_stream():
    b, _ = batcher(max_batch_size=8, delay_ms=10)
    b.put("a", 0)
    b.put("a", 1)
    b.put("b", 0)
    assert b.pending() == {"a": 2, "b": 1}


def test_stats_over_the_window():
    b, clock = batcher(max_batch_size=4, delay_ms=10, window=3)
    b.put("old", 0)  # a batch of 1 that leaves the window of 3
    clock.advance_ms(10)
    assert len(b.next_batch(timeout=0)) == 1
    for i in range(4):  # full, waited 0
        b.put("a" if i % 2 else "b", i)
    assert len(b.next_batch(timeout=0)) == 4
    b.put("a", 9)
    clock.advance_ms(10)
    b.put("b", 9)
    clock.advance_ms(2)  # looked at 2 ms late: a9 waited 12 ms, b9 2 ms
    assert len(b.next_batch(timeout=0)) == 2
    assert b.next_batch(timeout=0) is None  # the model is free again at once
    b.put("c", 0)
    clock.advance_ms(30)
    assert len(b.next_batch(timeout=0)) == 1
    stats = b.stats()
    assert stats["batches"] == 3 and stats["total"] == {"batches": 4, "requests": 8}
    assert stats["efficiency"] == pytest.approx((4 + 2 + 1) / (3 * 4))
    assert stats["histogram"] == {1: 1, 2: 1, 4: 1}
    assert stats["requests_per_stream"] == {"a": 3, "b": 3, "c": 1}
    # delays in the window: 0, 0, 0, 0, 12, 2, 30 -> median 0, p99 by linear interpolation
    delays = sorted([0.0, 0.0, 0.0, 0.0, 12.0, 2.0, 30.0])
    p99 = delays[5] + (delays[6] - delays[5]) * 0.94  # rank 0.99 * 6 = 5.94
    assert stats["queue_delay_ms"]["p50"] == pytest.approx(0.0)
    assert stats["queue_delay_ms"]["p99"] == pytest.approx(p99)


def test_stats_before_any_batch():
    b, _ = batcher()
    stats = b.stats()
    assert stats["batches"] == 0 and stats["efficiency"] == 0.0 and stats["queue_delay_ms"] == {}


def test_a_waiting_model_thread_wakes_when_a_batch_can_be_formed():
    # real clock, a delay no test waits for: only the size rule can release the batch
    b = DynamicBatcher(BatchPolicy(3, (), 3_600_000))
    got: List[Batch] = []
    waiting = threading.Event()
    done = threading.Event()

    def model_thread() -> None:
        waiting.set()
        batch = b.next_batch(timeout=None)
        got.append(batch)
        done.set()

    thread = threading.Thread(target=model_thread, daemon=True)
    thread.start()
    assert waiting.wait(10)
    for i in range(3):
        b.put(str(i), i)
    assert done.wait(10), "the full batch did not wake the waiting thread"
    thread.join(10)
    assert got[0] is not None and sorted(got[0].items) == [0, 1, 2] and got[0].reason == "size"


def test_close_wakes_a_waiting_model_thread():
    b = DynamicBatcher(BatchPolicy(3, (), 3_600_000))
    out: List[object] = []
    thread = threading.Thread(target=lambda: out.append(b.next_batch(timeout=None)), daemon=True)
    thread.start()
    b.close()
    thread.join(10)
    assert not thread.is_alive() and out == [None]


def test_many_producers_one_consumer_every_request_once_and_in_order_per_stream():
    b = DynamicBatcher(BatchPolicy(4, (2, 4), 1.0))
    streams, per_stream = 6, 200
    start = threading.Barrier(streams + 1)
    received: Dict[str, List[int]] = {}
    sizes: List[int] = []

    def producer(sid: str) -> None:
        start.wait()
        for i in range(per_stream):
            b.put(sid, i)

    def consumer() -> None:
        start.wait()
        while True:
            batch = b.next_batch(timeout=5)
            if batch is None:
                if b.drained:
                    return
                continue
            sizes.append(len(batch))
            for r in batch:
                received.setdefault(r.stream_id, []).append(r.item)

    producers = [threading.Thread(target=producer, args=(f"s{k}",), daemon=True) for k in range(streams)]
    reader = threading.Thread(target=consumer, daemon=True)
    for t in producers + [reader]:
        t.start()
    for t in producers:
        t.join(30)
    b.close()
    reader.join(30)
    assert not reader.is_alive()
    assert received == {f"s{k}": list(range(per_stream)) for k in range(streams)}
    assert sum(sizes) == streams * per_stream and max(sizes) <= 4
    assert b.stats()["total"] == {"batches": len(sizes), "requests": streams * per_stream}
