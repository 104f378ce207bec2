"""One queue in front of one model: requests of several streams gathered into batches, with
Triton's dynamic-batching semantics.

    policy = BatchPolicy(max_batch_size=4, preferred_batch_sizes=(2, 4), max_queue_delay_ms=10)
    batcher = DynamicBatcher(policy)
    batcher.put("cam1", frame)                   # any thread
    batch = batcher.next_batch(timeout=1.0)      # the model's thread: a Batch, or None
    for request in batch: ...                    # request.stream_id, request.item
    batcher.stats()                              # efficiency, histogram, queue delay p50/p99

When a batch goes out (as Triton's dynamic batcher, `max_queue_delay_microseconds` in ms here):

- as soon as the largest preferred size can be formed (without preferred sizes: the max size),
  a batch of that size goes, at once;
- otherwise the oldest queued request waits at most `max_queue_delay_ms`; then whatever is
  queued goes, up to `max_batch_size`. A delay of 0 sends whatever is queued at once;
- requests that came while the model was busy wait for the streams of the batch it ran: those
  streams put their next frames as soon as their frames come back (a MultiStreamPipeline holds a
  stream's next frame until then), so when the model is free again the batch waits for them, at
  most `max_queue_delay_ms` from that moment, and goes as soon as each of them has put one (or the
  size is reached). Without this, streams that once fell into two groups stay there (one group
  queued while the other is in the model, each batch half full); with it they come together
  again. A frame's queue delay stays at most the delay plus the batch ahead of it, and a request
  put while the model is idle waits as before;
- after `close()`, what is still queued goes at once, up to `max_batch_size` per batch.

Which requests fill a batch (fairness): rounds, oldest first. The first round takes the oldest
queued request of every stream, oldest first; only then does a second round take each stream's
second request, and so on, until the batch is full. So a stream that floods the queue gets one
slot per round like any other and cannot starve the rest, and a stream that stalls holds no
slot: the batcher never waits for a particular stream, only for the oldest request's delay.
Each stream's requests leave in the order they were put (its queue is first in, first out).

The clock is injectable (`clock`, seconds, monotonic) so that tests decide when time passes;
`next_batch`'s `timeout` is real time, as for :meth:`queue.Queue.get`.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

import numpy as np

from edge_sdk.errors import ConfigError, EdgeSdkError


class BatcherClosed(EdgeSdkError):
    """A request was put into a batcher that was closed: nothing takes it any more."""


def _count(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclass(frozen=True)
class BatchPolicy:
    """How large batches are and how long a request may wait for one (Triton's
    ``max_batch_size``, ``preferred_batch_size`` and ``max_queue_delay_microseconds``, in ms).

    `preferred_batch_sizes`: sizes a batch goes out at as soon as they can be formed, sorted and
    each at most `max_batch_size` (empty: the max size is the one). Validated here: ConfigError
    naming the key and the fix.
    """

    max_batch_size: int = 1
    preferred_batch_sizes: Tuple[int, ...] = ()
    max_queue_delay_ms: float = 0.0

    def __post_init__(self) -> None:
        size = self.max_batch_size
        if not _count(size) or size < 1:
            raise ConfigError(f"max_batch_size must be an integer >= 1, got {size!r}; set it to the largest batch the model takes")
        preferred = self.preferred_batch_sizes
        if isinstance(preferred, (str, bytes)) or not isinstance(preferred, (list, tuple)):
            raise ConfigError(f"preferred_batch_sizes must be a list of integers, got {preferred!r}; e.g. [2, 4]")
        for value in preferred:
            if not _count(value) or not 1 <= value <= size:
                raise ConfigError(f"preferred_batch_sizes: {value!r} is not an integer in [1, max_batch_size = {size}]; "
                                  f"list sizes from 1 to {size}, or raise max_batch_size")
        if any(b <= a for a, b in zip(preferred, preferred[1:])):
            raise ConfigError(f"preferred_batch_sizes must be sorted and unique, got {list(preferred)}; "
                              f"write them as {sorted(set(int(v) for v in preferred))}")
        delay = self.max_queue_delay_ms
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0.0 <= float(delay) < float("inf"):
            raise ConfigError(f"max_queue_delay_ms must be a number >= 0, got {delay!r}; 0 sends whatever is queued at once")
        object.__setattr__(self, "max_batch_size", int(size))
        object.__setattr__(self, "preferred_batch_sizes", tuple(int(v) for v in preferred))
        object.__setattr__(self, "max_queue_delay_ms", float(delay))

    @property
    def target(self) -> int:
        """The size a batch goes out at without waiting: the largest preferred size, else the max."""
        return self.preferred_batch_sizes[-1] if self.preferred_batch_sizes else self.max_batch_size


class BatchRequest:
    """One queued item of one stream; `t_put` is the batcher's clock when it was put."""

    __slots__ = ("stream_id", "item", "t_put", "seq")

    def __init__(self, stream_id: str, item: Any, t_put: float, seq: int) -> None:
        self.stream_id = stream_id
        self.item = item
        self.t_put = t_put
        self.seq = seq  # the order of arrival across streams

    def __repr__(self) -> str:
        return f"BatchRequest(stream {self.stream_id}, #{self.seq})"


class Batch:
    """The requests of one backend call, in the order they arrived, with the clock when the
    batch was formed and why it went: "size" (the largest preferred or the max size was
    reached), "delay" (the oldest request's delay ran out) or "close"."""

    __slots__ = ("requests", "t_formed", "reason")

    def __init__(self, requests: List[BatchRequest], t_formed: float, reason: str) -> None:
        self.requests = requests
        self.t_formed = t_formed
        self.reason = reason

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[BatchRequest]:
        return iter(self.requests)

    @property
    def items(self) -> List[Any]:
        return [r.item for r in self.requests]

    @property
    def stream_ids(self) -> List[str]:
        return [r.stream_id for r in self.requests]

    def queue_delays_ms(self) -> List[float]:
        """How long each request waited in the queue, in ms."""
        return [(self.t_formed - r.t_put) * 1000.0 for r in self.requests]


class DynamicBatcher:
    """Thread-safe: any thread may `put`; one (or more) model threads take `next_batch`.

    `window`: how many of the latest batches `stats()` summarizes.
    """

    def __init__(self, policy: BatchPolicy, clock: Callable[[], float] = time.monotonic, window: int = 256) -> None:
        if not _count(window) or window < 1:
            raise ConfigError(f"the batcher's statistics window must be an integer >= 1, got {window!r}")
        self.policy = policy
        self.clock = clock
        self._cond = threading.Condition()
        self._queues: Dict[str, Deque[BatchRequest]] = {}
        self._queued = 0
        self._seq = 0
        self._closed = False
        self._busy = False  # a batch went out and the model's thread has not asked for the next one
        self._free_at = float("-inf")  # when the model's thread asked for a batch after the last one
        self._expected: set = set()  # streams of the last batch that have not put a request since
        # per batch of the window: (size, queue delays ms, stream ids)
        self._window: Deque[Tuple[int, Tuple[float, ...], Tuple[str, ...]]] = deque(maxlen=int(window))
        self._batches = 0
        self._requests = 0

    # -- the producers' side
    def put(self, stream_id: str, item: Any) -> BatchRequest:
        """Queue `item` of `stream_id`; BatcherClosed once the batcher is closed."""
        with self._cond:
            if self._closed:
                raise BatcherClosed(f"the batcher is closed; stream {stream_id!r}'s request was not queued")
            request = BatchRequest(stream_id, item, self.clock(), self._seq)
            self._seq += 1
            self._queues.setdefault(stream_id, deque()).append(request)
            self._expected.discard(stream_id)
            self._queued += 1
            self._cond.notify_all()
            return request

    def close(self) -> None:
        """Take no more requests; what is queued still goes out, in batches, at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def drained(self) -> bool:
        """Closed and nothing queued: `next_batch` has nothing more to give."""
        with self._cond:
            return self._closed and not self._queued

    def pending(self) -> Dict[str, int]:
        """How many requests of each stream are queued now."""
        with self._cond:
            return {sid: len(q) for sid, q in self._queues.items() if q}

    # -- the model's side
    def next_batch(self, timeout: Optional[float] = None) -> Optional[Batch]:
        """The next batch once one is due (see the module's rules), waiting at most `timeout`
        seconds of real time (None: until one is due or the batcher is drained; 0: only look).
        None when none was due in time, or when the batcher is drained."""
        end = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        with self._cond:
            if self._busy:  # the model is done with the last batch
                self._busy, self._free_at = False, self.clock()
            while True:
                now = self.clock()
                batch = self._take_due(now)
                if batch is not None:
                    return batch
                if self._closed:  # and nothing queued: _take_due flushes a closed batcher
                    return None
                wait = self._until_due(now)
                if end is not None:
                    left = end - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def _oldest(self) -> BatchRequest:
        return min((q[0] for q in self._queues.values() if q), key=lambda r: r.seq)

    def _waiting_since(self) -> float:
        """When the oldest request's delay started: when it was put, or when the model became
        free if it came while the model was busy and streams of the last batch are still due."""
        put = self._oldest().t_put
        return max(put, self._free_at) if self._expected else put

    def _until_due(self, now: float) -> Optional[float]:
        """Seconds (of the batcher's clock) until the oldest request's delay runs out; None when
        nothing is queued."""
        if not self._queued:
            return None
        return max(0.0, self.policy.max_queue_delay_ms / 1000.0 - (now - self._waiting_since()))

    def _take_due(self, now: float) -> Optional[Batch]:
        if not self._queued:
            return None
        policy = self.policy
        if self._queued >= policy.target:
            return self._take(policy.target, now, "size")
        if self._closed:
            return self._take(policy.max_batch_size, now, "close")
        if (now - self._waiting_since()) * 1000.0 >= policy.max_queue_delay_ms:
            return self._take(policy.max_batch_size, now, "delay")
        return None

    def _take(self, n: int, now: float, reason: str) -> Batch:
        """Up to `n` requests, in rounds (each stream's k-th request in round k), oldest first in
        each round; removed from their queues."""
        taken: List[BatchRequest] = []
        queues = [q for q in self._queues.values() if q]
        depth = 0
        while len(taken) < n and queues:
            row = sorted((q[depth] for q in queues), key=lambda r: r.seq)
            taken.extend(row[: n - len(taken)])
            depth += 1
            queues = [q for q in queues if len(q) > depth]
        for request in taken:  # each stream's taken requests are the front of its queue
            self._queues[request.stream_id].popleft()
        self._queued -= len(taken)
        taken.sort(key=lambda r: r.seq)
        self._busy = True
        self._expected = {r.stream_id for r in taken if not self._queues[r.stream_id]}  # their next is due
        batch = Batch(taken, now, reason)
        self._record(batch)
        return batch

    # -- statistics
    def _record(self, batch: Batch) -> None:
        self._window.append((len(batch), tuple(batch.queue_delays_ms()), tuple(batch.stream_ids)))
        self._batches += 1
        self._requests += len(batch)

    def stats(self) -> Dict[str, Any]:
        """The latest `window` batches: how many, `efficiency` (filled slots / max_batch_size per
        batch, averaged), `histogram` ({size: batches}), `queue_delay_ms` (p50, p99 over their
        requests), `requests_per_stream`; and the totals since the start."""
        with self._cond:
            window = list(self._window)
            total = {"batches": self._batches, "requests": self._requests}
        size = self.policy.max_batch_size
        histogram: Dict[int, int] = {}
        per_stream: Dict[str, int] = {}
        delays: List[float] = []
        for n, waited, streams in window:
            histogram[n] = histogram.get(n, 0) + 1
            delays.extend(waited)
            for sid in streams:
                per_stream[sid] = per_stream.get(sid, 0) + 1
        efficiency = sum(n for n, _, _ in window) / (size * len(window)) if window else 0.0
        queue_delay = ({"p50": float(np.percentile(delays, 50)), "p99": float(np.percentile(delays, 99))}
                       if delays else {})
        return {"batches": len(window), "efficiency": efficiency, "histogram": dict(sorted(histogram.items())),
                "queue_delay_ms": queue_delay, "requests_per_stream": per_stream, "max_batch_size": size,
                "total": total}

