"""The capture ring in mapped memory feeds the GPU preprocessor with no copy: the kernel (the
package's .cu source, run on the CPU through the host shim) reads each frame where the source
wrote it, and the tensor equals the CPU Preprocessor's."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.cuda.frames import frame_memory
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.preprocess import InputSpec, Preprocessor
from edge_sdk.runtime.capture import Capture
from edge_sdk.runtime.sources import open_source

SPEC = InputSpec(shape=[1, 3, 48, 80], mean=[104, 117, 123], scale=[1 / 58, 1 / 57, 1 / 59], color="RGB")
URI = "synthetic://faces?width=161&height=97&count=3&frames=6&seed=7&min_size=16&max_size=30"


@pytest.mark.parametrize("choice,zero_copy", [("auto", True), ("host", False)])
def test_capture_ring_frames_reach_the_kernel_in_place(fake_gpu, choice: str, zero_copy: bool) -> None:
    api, cache = fake_gpu()  # Xavier NX where mapped memory was measured faster: auto means mapped
    memory = frame_memory(choice, cuda=api, measured={"chosen": "mapped", "gpu_ms": {"mapped": 1.0, "pinned": 2.0}})
    pre = GpuPreprocessor(SPEC, api, cache=cache, frame_memory="mapped")
    cpu = Preprocessor(SPEC)
    capture = Capture(open_source(URI), pool_size=3, memory=memory).start()
    frames = 0
    try:
        while True:
            slot = capture.get(timeout=10)
            if slot is None:
                break
            pre.fill(slot.frame, 0)
            got = pre.download()  # synchronizes the stream: the slot may go back afterwards
            np.testing.assert_array_equal(got, cpu(slot.frame.copy())[0])
            capture.release(slot)
            frames += 1
    finally:
        capture.stop()
        pre.close()
    assert frames == 6
    assert (pre.zero_copy_frames, pre.staged_frames) == ((6, 0) if zero_copy else (0, 6))
    assert api.used == 0  # the ring's and the preprocessor's buffers are all freed


def test_pinned_ring_uploads_once_and_the_kernel_reads_the_device_copy(fake_gpu) -> None:
    """On a discrete GPU: one host-to-device copy per frame, queued by the ring on the
    preprocessor's stream, and the kernel reads that device copy: nothing is staged."""
    from fakes.fake_cuda_host import DISCRETE

    api, cache = fake_gpu(props=DISCRETE)
    memory = frame_memory("auto", cuda=api)
    assert memory.kind == "pinned"
    pre = GpuPreprocessor(SPEC, api, cache=cache)
    cpu = Preprocessor(SPEC)
    capture = Capture(open_source(URI), pool_size=3, memory=memory).start()
    frames = 0
    try:
        while True:
            slot = capture.get(timeout=10)
            if slot is None:
                break
            ptr = capture.upload(slot, pre.stream)
            assert ptr is not None and ptr == slot.allocation.device.ptr
            pre.fill(slot.frame, 0, device_ptr=ptr)
            got = pre.download()
            np.testing.assert_array_equal(got, cpu(slot.frame.copy())[0])
            capture.release(slot)
            frames += 1
    finally:
        capture.stop()
        pre.close()
    assert frames == 6
    assert (pre.device_frames, pre.zero_copy_frames, pre.staged_frames) == (6, 0, 0)
    assert api.used == 0


def test_a_device_pointer_needs_packed_rows(fake_gpu) -> None:
    from edge_sdk.errors import SourceError

    api, cache = fake_gpu()
    pre = GpuPreprocessor(SPEC, api, cache=cache)
    try:
        frame = np.zeros((40, 60, 4), np.uint8)[:, :, :3]  # 4-byte pixels: not what a device copy holds
        with pytest.raises(SourceError, match="contiguous pixels"):
            pre.fill(frame, 0, device_ptr=1234)
    finally:
        pre.close()
