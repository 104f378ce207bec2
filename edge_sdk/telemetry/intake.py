"""A consumer's intake: what the broker delivers waits here, per device, for one worker thread.

paho runs `on_message` on its network thread, the one thread that reads every device's messages,
so nothing slow may run there (a 840 KB message with 24,000 keys took 815 ms to validate and
held back every other device's telemetry). `put()` only checks the payload's size against its
topic's bound (`schemas.MAX_BYTES`: a larger one is refused unparsed and counted in `oversize`)
and queues the bytes with their arrival time. The worker parses, validates and applies them,
taking one message of each waiting device in turn: a device that floods waits behind its own
messages, not the others'. Each device queues at most `per_device` messages, all of them together
at most `max_messages` and `max_bytes`; a message beyond is dropped and counted in `backlog`.
How long each message waited for the worker is kept in `waited` (a histogram, seconds): the
consumer's own lag.
"""
from __future__ import annotations

import bisect
import threading
from collections import OrderedDict, deque
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.guard import CallbackGuard

PER_DEVICE = 256
MAX_MESSAGES = 10000
MAX_BYTES = 64 * 1024 * 1024

Item = Tuple[str, bytes, int]  # topic, payload, arrival (wall clock, ms)
# upper bounds (seconds) of the lag histograms' buckets
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """Observations counted in buckets by upper bound, with their sum: a Prometheus histogram.
    One thread observes, any thread reads `snapshot()`."""

    def __init__(self, bounds: Sequence[float] = LAG_BUCKETS) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def snapshot(self) -> Tuple[List[Tuple[str, float]], float, int]:
        """(cumulative buckets as ("le", count) ending with "+Inf", sum, count)."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        out, running = [], 0
        for bound, n in zip(self.bounds + (float("inf"),), counts):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out, total, running


class Intake:
    """`handle(topic, payload, received_ms)` runs on the worker thread, one message at a time;
    an exception it raises is logged and counted (`guard.errors`), and the worker goes on."""

    def __init__(self, handle: Callable[[str, bytes, int], None], name: str = "intake", per_device: int = PER_DEVICE,
                 max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_BYTES,
                 clock: Callable[[], int] = schemas.now_ms) -> None:
        self.guard = CallbackGuard(name)
        self._handle = self.guard(handle)
        self.name = name
        self.per_device = int(per_device)
        self.max_messages = int(max_messages)
        self.max_bytes = int(max_bytes)
        self._clock = clock
        self._queues: "OrderedDict[str, Deque[Item]]" = OrderedDict()  # by device, in serving order
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self.queued = 0
        self.queued_bytes = 0
        self.handled = 0
        self.oversize = 0  # refused unparsed: over their topic's bound
        self.backlog = 0  # dropped: their device's queue or the whole intake was full
        self.waited = Histogram()  # seconds from arrival to the worker taking it

    def put(self, topic: str, payload: bytes) -> Optional[str]:
        """Queue one received message (any thread; never parses). None, or why it was refused."""
        parsed = schemas.split_topic(topic)
        device, suffix = parsed if parsed is not None else ("", "")
        limit = schemas.MAX_BYTES.get(suffix, min(schemas.MAX_BYTES.values()))
        size = len(payload)
        received = self._clock()
        with self._cond:
            if size > limit:
                self.oversize += 1
                return f"payload of {size} bytes is over the {limit} bytes of {suffix or 'this topic'}"
            queue = self._queues.get(device)
            if (queue is not None and len(queue) >= self.per_device) or self.queued >= self.max_messages \
                    or self.queued_bytes + size > self.max_bytes:
                self.backlog += 1
                return "too many messages waiting to be read (the device's or all of them); dropped"
            if queue is None:
                queue = self._queues[device] = deque()
            queue.append((topic, bytes(payload), received))
            self.queued += 1
            self.queued_bytes += size
            self._cond.notify()
        return None

    def start(self) -> "Intake":
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Handle what is queued, then end the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def counters(self) -> Dict[str, int]:
        with self._cond:
            return {"queued": self.queued, "queued_bytes": self.queued_bytes, "handled": self.handled,
                    "oversize": self.oversize, "backlog": self.backlog, "errors": self.guard.errors}

    def _next(self) -> Optional[Item]:
        with self._cond:
            while not self._queues:
                if self._stopping:
                    return None
                self._cond.wait()
            device, queue = next(iter(self._queues.items()))
            item = queue.popleft()
            if queue:
                self._queues.move_to_end(device)  # the next device's turn
            else:
                del self._queues[device]
            self.queued -= 1
            self.queued_bytes -= len(item[1])
            return item

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            self.waited.observe(max(0.0, (self._clock() - item[2]) / 1000.0))
            self._handle(*item)
            with self._cond:
                self.handled += 1
