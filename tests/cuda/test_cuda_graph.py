"""FrameGraph bookkeeping against the fake CUDA: capture once per key, replay, evict, recover."""
from __future__ import annotations

import pytest

from edge_sdk.cuda.graph import FrameGraph
from fakes.fake_cuda_host import FakeHostCuda


def make(graphs: bool = True, max_graphs: int = 8):
    api = FakeHostCuda(lambda *a: None, graphs=graphs)
    stream = api.create_stream()
    return api, stream, FrameGraph(api, stream, max_graphs=max_graphs)


def test_capture_once_replay_after() -> None:
    api, stream, graph = make()
    runs = []
    for _ in range(4):
        graph.run("a", lambda: runs.append("work"))
    assert runs == ["work"]  # the Python work ran once, during capture
    assert (graph.captures, graph.replays) == (1, 3)


def test_replay_reissues_the_captured_operations() -> None:
    api, stream, graph = make()
    done = []
    record = lambda: api._queue(stream, "op", lambda: done.append(1))  # noqa: E731
    for _ in range(3):
        graph.run("k", record)
    assert done == []  # captured and queued, not run
    api.synchronize(stream)
    assert done == [1, 1, 1] and api.executed == ["op"] * 3


def test_least_recently_used_graph_is_destroyed_past_the_limit() -> None:
    api, stream, graph = make(max_graphs=2)
    graph.run("a", lambda: None)
    first = graph._graphs["a"]
    graph.run("b", lambda: None)
    graph.run("a", lambda: None)  # "a" used again: "b" is now the oldest
    graph.run("c", lambda: None)
    assert sorted(graph._graphs) == ["a", "c"] and not first.destroyed


def test_error_during_capture_ends_it_and_propagates() -> None:
    api, stream, graph = make()

    def broken() -> None:
        raise ValueError("bad launch")

    with pytest.raises(ValueError, match="bad launch"):
        graph.run("x", broken)
    assert stream.capture is None  # the stream left capture mode
    assert graph.captures == 0 and "x" not in graph._graphs
    graph.run("x", lambda: None)  # and works afterwards
    assert graph.captures == 1


def test_without_graph_support_work_runs_every_time() -> None:
    api, stream, graph = make(graphs=False)
    runs = []
    for _ in range(3):
        graph.run("a", lambda: runs.append(1))
    assert runs == [1, 1, 1] and graph.describe()["mode"] == "eager"


def test_invalidate_destroys_all() -> None:
    api, stream, graph = make()
    graph.run("a", lambda: None)
    graph.run("b", lambda: None)
    kept = list(graph._graphs.values())
    graph.invalidate()
    assert all(g.destroyed for g in kept) and graph.describe()["graphs"] == 0
