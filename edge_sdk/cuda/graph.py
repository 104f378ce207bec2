"""CUDA graphs: the per-frame work captured once on the inference stream, replayed per frame.

A frame's GPU work (copy in, preprocess kernel, later the TensorRT enqueue) is the same
sequence of calls every frame with the same pointers; only the bytes in the buffers change.
Capturing it into a graph once and launching the graph per frame replaces several launches
(and their Python overhead) with one.

`FrameGraph.run(key, work)` keeps one graph per key (what the work depends on: frame size,
slot, source buffer): the first call with a key captures `work()` on the stream and launches
it; later calls launch the graph. An implementation without graphs (pycuda) runs `work()`
eagerly every time: same results, same ordering on the stream, no capture.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Dict, Hashable

from edge_sdk.cuda.api import CudaApi


class FrameGraph:
    def __init__(self, api: CudaApi, stream: Any, max_graphs: int = 8, enabled: bool = True) -> None:
        self.api = api
        self.stream = stream
        self.max_graphs = max(1, int(max_graphs))
        self.enabled = enabled and api.supports_graphs
        self._graphs: "OrderedDict[Hashable, Any]" = OrderedDict()
        self.captures = 0  # graphs captured
        self.replays = 0  # launches of a graph captured earlier
        self.eager_runs = 0  # work run without a graph

    @property
    def mode(self) -> str:
        return "cuda-graph" if self.enabled else "eager"

    def run(self, key: Hashable, work: Callable[[], None]) -> None:
        if not self.enabled:
            work()
            self.eager_runs += 1
            return
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._capture(work)
            self._graphs[key] = graph
            self.captures += 1
            while len(self._graphs) > self.max_graphs:
                _, old = self._graphs.popitem(last=False)
                self.api.destroy_graph(old)
        else:
            self._graphs.move_to_end(key)
            self.replays += 1
        self.api.launch_graph(graph, self.stream)

    def _capture(self, work: Callable[[], None]) -> Any:
        self.api.begin_capture(self.stream)
        try:
            work()
        except BaseException:
            # Leave capture mode whatever happened, or the stream stays unusable. A capture the
            # failure invalidated ends with an error and no graph (cudaStreamEndCapture); the
            # work's own error says more, so that is the one raised.
            try:
                graph = self.api.end_capture(self.stream)
            except Exception:
                graph = None
            if graph is not None:
                self.api.destroy_graph(graph)
            raise
        return self.api.end_capture(self.stream)

    def __contains__(self, key: Hashable) -> bool:
        """A graph is kept for `key` (the next run with it replays)."""
        return key in self._graphs

    def invalidate(self) -> None:
        """Drop every graph (buffers were reallocated: the captured pointers are stale)."""
        while self._graphs:
            _, graph = self._graphs.popitem(last=False)
            self.api.destroy_graph(graph)

    def describe(self) -> Dict[str, Any]:
        return {"mode": self.mode, "graphs": len(self._graphs), "captures": self.captures, "replays": self.replays,
                "eager_runs": self.eager_runs}
