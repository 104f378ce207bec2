"""Frame memory measured on the device (edge_sdk.cuda.measure): each path runs the ring's own
buffers and the GPU preprocessor through the host shim, bit-exact, and the faster of mapped and
pinned is chosen from GPU times. The fake's GPU clock charges what the path costs on a Jetson:
a copy per frame, a kernel reading uncached mapped memory or cached device memory."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.measure import measure_frame_memory
from edge_sdk.preprocess import InputSpec, Preprocessor
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX, FakeHostCuda

SPEC = InputSpec(shape=[4, 3, 48, 80], dtype="float16", color="RGB")


class TimedFake(FakeHostCuda):
    """FakeHostCuda with a GPU clock: an event records the clock when its stream reaches it; a
    copy costs `copy_ms`, a kernel `mapped_ms` when it reads mapped host memory, else `device_ms`."""

    def __init__(self, launcher: Any, props: Any, copy_ms: float, mapped_ms: float, device_ms: float) -> None:
        super().__init__(launcher, props=props)
        self.clock = 0.0
        self.costs = {"copy": copy_ms, "mapped": mapped_ms, "device": device_ms}
        self.outputs: list = []

    def _charge(self, stream: Any, what: str) -> None:
        def tick() -> None:
            self.clock += self.costs[what]

        self._queue(stream, "record", tick)  # "record": not listed among the executed operations

    def record(self, event: Any, stream: Any) -> None:
        event.done, event.stream = False, stream

        def mark() -> None:
            event.done, event.time_ms = True, self.clock

        self._queue(stream, "record", mark)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return end.time_ms - start.time_ms

    def copy_htod(self, dst: Any, src: Any, nbytes: int, stream: Any) -> None:
        super().copy_htod(dst, src, nbytes, stream)
        self._charge(stream, "copy")

    def launch(self, kernel: Any, grid: Any, block: Any, args: Any, stream: Any) -> None:
        source = int(args.values[0].value)
        mapped = any(b.device_ptr is not None and b.device_ptr <= source < b.device_ptr + b.nbytes for b in self._mapped)
        super().launch(kernel, grid, block, args, stream)
        self._charge(stream, "mapped" if mapped else "device")


@pytest.fixture
def timed(kernel_shim):
    def make(props=XAVIER_NX, **costs: float) -> TimedFake:
        return TimedFake(kernel_shim("preprocess.cu").launch, props, **costs)

    return make


@pytest.mark.parametrize("costs,chosen", [
    (dict(copy_ms=0.4, mapped_ms=1.5, device_ms=0.3), "pinned"),  # uncached reads dearer than one copy
    (dict(copy_ms=0.9, mapped_ms=0.6, device_ms=0.3), "mapped"),
])
def test_the_faster_path_is_chosen_from_gpu_times(timed, tmp_path, costs, chosen: str) -> None:
    api = timed(**costs)
    frame = np.random.default_rng(3).integers(0, 256, (121, 203, 3), dtype=np.uint8)
    result = measure_frame_memory(api, SPEC, frame, repeat=3, cache=KernelCache(tmp_path))
    assert result["chosen"] == chosen
    assert result["gpu_ms"] == {"mapped": costs["mapped_ms"], "pinned": pytest.approx(costs["copy_ms"] + costs["device_ms"]),
                                "device": costs["device_ms"]}
    assert (result["frame"], result["input"], result["repeat"]) == ("203x121", "80x48", 3)
    assert api.used == 0 and (api.live_streams, api.live_events) == (0, 0)  # every path cleaned up after itself


def test_every_path_computes_the_cpu_result(timed, tmp_path, monkeypatch) -> None:
    """The timed work is the real work: each path's tensor equals the CPU Preprocessor's."""
    from edge_sdk.cuda import measure

    api = timed(copy_ms=0.4, mapped_ms=1.0, device_ms=0.3)
    frame = np.random.default_rng(4).integers(0, 256, (97, 131, 3), dtype=np.uint8)
    expected = Preprocessor(InputSpec(**dict(SPEC.to_dict(), shape=[1, 3, 48, 80])))(frame)[0].copy()
    results = []
    real_close = measure.GpuPreprocessor.close

    def checked_close(pre) -> None:
        if pre._done is not None:
            results.append(pre.download()[:1].copy())
        real_close(pre)

    monkeypatch.setattr(measure.GpuPreprocessor, "close", checked_close)
    measure_frame_memory(api, SPEC, frame, repeat=2, cache=KernelCache(tmp_path))
    assert len(results) == 3
    for got in results:
        np.testing.assert_array_equal(got, expected)


def test_a_device_that_cannot_map_is_measured_pinned_only(timed, tmp_path) -> None:
    from dataclasses import replace

    api = timed(replace(XAVIER_NX, can_map_host_memory=False), copy_ms=0.4, mapped_ms=0.1, device_ms=0.3)
    frame = np.zeros((20, 30, 3), np.uint8)
    result = measure_frame_memory(api, SPEC, frame, repeat=1, cache=KernelCache(tmp_path))
    assert result["chosen"] == "pinned" and "mapped" not in result["gpu_ms"]


def test_discrete_gpu_runs_too(timed, tmp_path) -> None:
    api = timed(DISCRETE, copy_ms=0.2, mapped_ms=3.0, device_ms=0.1)
    result = measure_frame_memory(api, SPEC, np.zeros((20, 30, 3), np.uint8), repeat=1, cache=KernelCache(tmp_path))
    assert result["chosen"] == "pinned"
