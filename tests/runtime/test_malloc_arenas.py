"""The malloc arenas of a process running several streams: glibc gives each new thread an arena
of its own (up to 8 per core), each keeping what its thread freed; a MultiStreamPipeline has its
threads share at most `malloc_arenas`. Counted in a fresh process (a setting of the whole
process) by glibc's own report, malloc_info, against the same threads without the limit."""
from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="mallopt(M_ARENA_MAX) and malloc_info are glibc's")

SCRIPT = r"""
import ctypes, json, re, sys, threading
from edge_sdk.detections import Detections
from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.streams import MultiStreamPipeline, limit_malloc_arenas
from edge_sdk.runtime.types import FrameDetections

libc = ctypes.CDLL(None)
libc.open_memstream.restype = ctypes.c_void_p
libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.free.argtypes = [ctypes.c_void_p]


def arenas():
    buf, size = ctypes.c_void_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    report = ctypes.string_at(buf, size.value)
    libc.free(buf)
    return len(re.findall(rb"<heap nr=", report))


class Nothing:
    prepared_spec = None

    def detect_batch(self, frames):
        return [FrameDetections(Detections.empty(), {}) for _ in frames]


how, threads = sys.argv[1], 8
before = arenas()
if how == "threads-limited":
    assert limit_malloc_arenas(2)
if how.startswith("threads"):
    together = threading.Barrier(threads)
    def allocate():
        kept = [bytes(1000 + i) for i in range(200)]  # malloc's, not Python's small-object allocator
        together.wait()
    workers = [threading.Thread(target=allocate) for _ in range(threads)]
else:
    uri = "synthetic://faces?width=320&height=240&frames=5&seed={}&count=1"
    pipeline = MultiStreamPipeline([(str(k), uri.format(k)) for k in range(threads)], Nothing(), BatchPolicy(threads),
                                   malloc_arenas=None if how == "pipeline-unlimited" else 2)
    workers = [pipeline]
for w in workers:
    w.start()
if how.startswith("pipeline"):
    results = list(pipeline.results(timeout=60))
    assert len(results) == 5 * threads, len(results)
    pipeline.stop()
else:
    for w in workers:
        w.join()
print(json.dumps({"before": before, "after": arenas()}))
"""


def arenas(how: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, how], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_threads_share_at_most_the_arenas_the_limit_allows_and_take_their_own_without():
    assert arenas("threads")["after"] >= 4  # the oracle sees glibc's per-thread arenas
    assert arenas("threads-limited")["after"] <= 2


def test_a_pipeline_of_eight_streams_keeps_its_threads_to_two_arenas():
    assert arenas("pipeline-unlimited")["after"] >= 4  # its capture, feeder and batch threads, each its own
    assert arenas("pipeline")["after"] <= 2
