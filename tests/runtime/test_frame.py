"""One Frame from capture to sinks: the slot's Frame is made once and refilled, results carry it,
and its CUDA array interface is there only where a device holds the pixels."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.runtime.capture import Capture
from edge_sdk.runtime.config import CacheConfig, PipelineConfig, SourceConfig
from edge_sdk.runtime.frame import Frame, stream_handle
from edge_sdk.runtime.pipeline import Pipeline
from runtime_factories import ListSource, scene


def test_a_host_frame_has_no_cuda_array_interface() -> None:
    frame = Frame(np.zeros((4, 6, 3), np.uint8), index=3)
    assert not hasattr(frame, "__cuda_array_interface__")
    assert frame.stream_id == "0" and frame.index == 3 and frame.shape == (4, 6, 3)


@pytest.mark.parametrize("stream, handle", [(None, None), (0, None), (7, 7), (object(), None)])
def test_a_device_frame_describes_its_pixels_in_version_3_of_the_interface(stream, handle) -> None:
    frame = Frame(np.zeros((4, 6, 3), np.uint8))
    frame.on_device(0xBEEF00, stream)
    cai = frame.__cuda_array_interface__
    assert cai["shape"] == (4, 6, 3) and cai["typestr"] == "|u1" and cai["version"] == 3
    assert cai["data"] == (0xBEEF00, False)
    assert cai["stream"] == handle == stream_handle(stream)
    frame.on_device(None, stream)
    assert not hasattr(frame, "__cuda_array_interface__") and frame.stream is None


def test_each_slot_keeps_one_frame_written_at_capture() -> None:
    frames = [scene(i) for i in range(7)]
    capture = Capture(ListSource(frames), pool_size=3).start()
    views = {id(slot.view) for slot in capture.pool}
    seen = []
    try:
        while True:
            slot = capture.get(timeout=5.0)
            if slot is None:
                break
            view = slot.view
            assert id(view) in views  # the slot's own Frame, not one made for this frame
            assert view.image is slot.frame and view.index == slot.index == len(seen)
            assert view.t_capture == slot.t_capture > 0 and view.timestamp == slot.timestamp > 0
            np.testing.assert_array_equal(view.image, frames[len(seen)])
            seen.append(view.index)
            capture.release(slot)
    finally:
        capture.stop()
    assert seen == list(range(7))


def test_a_result_carries_the_frame_it_is_of(tiny_bundle: Path) -> None:
    cfg = PipelineConfig(source=SourceConfig(""), bundle=str(tiny_bundle), threads=1, cache=CacheConfig(enabled=False))
    with Pipeline(cfg, source=ListSource([scene(i) for i in range(4)])) as pipeline:
        for result in pipeline:
            captured = result.captured
            assert isinstance(captured, Frame) and captured.image is result.frame
            assert (captured.index, captured.timestamp, captured.stream_id) == (result.index, result.timestamp, "0")
            assert captured.device_ptr is None  # a CPU backend: nothing was uploaded
