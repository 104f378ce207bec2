"""Several `[[sources]]` in the daemon: one model, one dynamic batcher, a MultiStreamPipeline
behind the interface the frame loop uses for the one-source Pipeline.

    policy, note = fitted_policy(config.pipeline.batching, model, len(config.pipeline.streams()))
    pipeline = StreamsPipeline(config.pipeline, detector, policy, keep_frames=True)
    pipeline.open(); for result in pipeline: ...; pipeline.close()
    pipeline.report()                         # the batcher's window, each stream's state and counters

Each stream runs its own mode (its [[sources]] table's `mode` and [sources.roi], else the
top-level ones) through one model: the daemon's RunningModel builds the detector per stream
(edge_sdk.runtime.detectors.shared), whose backend calls are gathered into one batch. The
batching settings are the `[batching]` table's (edge_sdk.runtime.config.BatchingConfig: by
default a batch holds one frame of each stream); each stream's `fps` caps how fast its source
is read.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, Optional, Union

from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.config import PipelineConfig
from edge_sdk.runtime.sources import open_source
from edge_sdk.runtime.streams import MALLOC_ARENAS, MultiStreamPipeline, StreamResult
from edge_sdk.runtime.types import PipelineStats

class _Stopper:
    """What the daemon's stop watch calls when the sources stall: stops every stream."""

    def __init__(self, pipeline: MultiStreamPipeline) -> None:
        self._pipeline = pipeline

    def stop(self) -> None:
        self._pipeline.stop()


class StreamsPipeline:
    """A MultiStreamPipeline over `config`'s streams, as the daemon's frame loop uses a Pipeline:
    iterate it for StreamResults, `stats` (totals over the streams), `open`, `close`, `capture`
    (`stop()`), `swap_detector`, `failed_stage`. `detector` (a StreamsDetector) stays its
    caller's to close."""

    def __init__(self, config: PipelineConfig, detector: Any, policy: BatchPolicy,
                 keep_frames: Union[bool, Callable[[str], bool]] = False) -> None:
        sources = [(s.id, open_source(s.uri, loop=s.loop, **s.options)) for s in config.streams()]
        self.multi = MultiStreamPipeline(sources, detector, policy, reconnect=config.reconnect,
                                         pool_size=max(4, config.pool_size), keep_frames=keep_frames,
                                         frames_in_flight=config.batching.frames_in_flight,
                                         fps={s.id: s.fps for s in config.streams()}, tracking=config.tracking,
                                         malloc_arenas=MALLOC_ARENAS)
        self.failed_stage: Optional[str] = None
        self._processed: Dict[str, int] = {sid: 0 for sid, _ in sources}
        self._lock = threading.Lock()
        self.capture = _Stopper(self.multi)

    def open(self) -> "StreamsPipeline":
        self.multi.start()
        return self

    def close(self) -> None:
        self.multi.stop()

    def __iter__(self) -> Iterator[StreamResult]:
        try:
            for result in self.multi.results():
                with self._lock:
                    self._processed[result.stream] += 1
                yield result
        except BaseException:
            self.failed_stage = getattr(self.multi.detector, "stage", None) or "infer"
            raise

    def swap_detector(self, detector: Any) -> threading.Event:
        return self.multi.swap_detector(detector)

    def stream_stats(self) -> Dict[str, PipelineStats]:
        """Each stream's counters, frames processed included."""
        with self._lock:
            processed = dict(self._processed)
        out = {}
        for sid, stats in self.multi.stream_stats().items():
            out[sid] = PipelineStats(frames_captured=stats.frames_captured, frames_processed=processed.get(sid, 0),
                                     frames_dropped=stats.frames_dropped, source_errors=stats.source_errors,
                                     reconnects=stats.reconnects)
        return out

    @property
    def stats(self) -> PipelineStats:
        total = PipelineStats()
        for s in self.stream_stats().values():
            total.frames_captured += s.frames_captured
            total.frames_processed += s.frames_processed
            total.frames_dropped += s.frames_dropped
            total.source_errors += s.source_errors
            total.reconnects += s.reconnects
        return total

    def report(self) -> Dict[str, Any]:
        """The batcher's statistics, and per stream its state ("running", "retrying"...), its
        counters and `losses` (times its source failed after delivering, or failed to open at
        first): what the reporter's `streams` and `batch` blocks are made of."""
        stats = self.multi.stats()
        counters = self.stream_stats()
        return {"batcher": stats["batcher"],
                "streams": {sid: dict(state, stats=counters[sid]) for sid, state in stats["streams"].items()}}
