"""The staged frame path: where preprocessing runs, that it changes no result, hot swaps across
input sizes, and which stage an exception names."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.detectors import base as detector_mod
from edge_sdk.runtime.backends.base import Backend, Capabilities
from edge_sdk.runtime.config import CacheConfig, PipelineConfig, SourceConfig
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.detectors.factory import make_detector
from edge_sdk.runtime.model import Model
from edge_sdk.runtime.pipeline import Pipeline
from runtime_factories import CENTERFACE_DECODER, ListSource, scene


def config(bundle: Any = None, **kw: Any) -> PipelineConfig:
    kw.setdefault("threads", 1)
    kw.setdefault("cache", CacheConfig(enabled=False))
    return PipelineConfig(source=SourceConfig(""), bundle=str(bundle) if bundle else None, **kw)


def colour_frames(n: int, width: int = 200, height: int = 120) -> List[np.ndarray]:
    """Odd-sized colour frames (the network input is 64x32: every frame is resized)."""
    rng = np.random.default_rng(3)
    frames = []
    for i in range(n):
        frame = rng.integers(0, 60, (height, width, 3), dtype=np.uint8)
        x = 10 + 13 * i
        frame[30:90, x : x + 60] = (40, 200, 250)
        frames.append(frame)
    return frames


def run(bundle: Path, frames: List[np.ndarray], **kw: Any) -> Any:
    with Pipeline(config(bundle, **kw), source=ListSource(frames)) as pipeline:
        results = [(r.index, r.detections.xyxy.copy(), r.detections.confidence.copy(), dict(r.latency_ms)) for r in pipeline]
        return results, pipeline.describe()


def test_preprocessing_beside_capture_gives_the_results_of_inline_preprocessing(tiny_bundle: Path) -> None:
    frames = colour_frames(12)
    beside, described = run(tiny_bundle, frames, preprocess="capture")
    inline, described_inline = run(tiny_bundle, frames, preprocess="inline")
    assert [s["runs_on"] for s in described["stages"] if s["stage"] == "preprocess"] == ["capture thread"]
    assert [s["runs_on"] for s in described_inline["stages"] if s["stage"] == "preprocess"] == ["inference thread"]
    assert len(beside) == len(inline) == 12
    for (i, boxes, scores, latency), (j, boxes2, scores2, _) in zip(beside, inline):
        assert i == j
        np.testing.assert_array_equal(boxes, boxes2)
        np.testing.assert_array_equal(scores, scores2)
        assert latency["preprocess"] > 0  # measured on the capture thread, reported per frame
    assert sum(len(b) for _, b, _, _ in beside) > 0  # the frames do hold something to find


def test_prepared_inputs_are_filled_on_the_capture_thread(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: List[str] = []
    fill = detector_mod.PreparedInput.fill

    def recording_fill(self: Any, frame: np.ndarray) -> None:
        threads.append(threading.current_thread().name)
        fill(self, frame)

    monkeypatch.setattr(detector_mod.PreparedInput, "fill", recording_fill)
    inline_fill = detector_mod.Preprocessor.fill
    inline_threads: List[str] = []

    def recording_inline(self: Any, frame: np.ndarray, index: int = 0) -> Any:
        inline_threads.append(threading.current_thread().name)
        return inline_fill(self, frame, index)

    monkeypatch.setattr(detector_mod.Preprocessor, "fill", recording_inline)
    results, _ = run(tiny_bundle, colour_frames(6), preprocess="capture")
    assert len(results) == 6
    assert len(threads) == 6 and all(name.startswith("edge-sdk-capture") for name in threads), threads
    # every Preprocessor.fill ran inside a PreparedInput on the capture thread: none inline
    assert all(name.startswith("edge-sdk-capture") for name in inline_threads), inline_threads


class ShapeCheckingBackend(Backend):
    """Runs like the tiny CenterFace (one 'face' cell per image) and records the shapes it is fed."""

    cpu_bound = True
    threads = 0

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        self.input_names = ["input.1"]
        self.is_active = True
        self.shape = (1, 3, height, width)
        self.fed: List[tuple] = []

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        x = feed["input.1"]
        self.fed.append(x.shape)
        assert x.shape == self.shape, f"fed {x.shape}, model takes {self.shape}"
        n, h, w = x.shape[0], x.shape[2] // 4, x.shape[3] // 4
        heat = np.zeros((n, 1, h, w), np.float32)
        heat[:, 0, 2, 2] = 0.9
        return [heat, np.zeros((n, 2, h, w), np.float32), np.zeros((n, 2, h, w), np.float32), np.zeros((n, 10, h, w), np.float32)]

    def capabilities(self) -> Capabilities:
        return Capabilities(device="cpu" if self.cpu_bound else "gpu", threads=self.threads)


def test_a_swap_to_another_input_size_never_feeds_a_stale_tensor() -> None:
    small = Model(ShapeCheckingBackend(32, 64), InputSpec(name="input.1", shape=[1, 3, 32, 64]), dict(CENTERFACE_DECODER))
    large = Model(ShapeCheckingBackend(64, 96), InputSpec(name="input.1", shape=[1, 3, 64, 96]), dict(CENTERFACE_DECODER))
    first = make_detector("full", small)
    second = make_detector("full", large)
    frames = [scene(i, width=160, height=100) for i in range(16)]
    cfg = config(pool_size=5)
    done = None
    with Pipeline(cfg, source=ListSource(frames), detector=first) as pipeline:
        count = 0
        for result in pipeline:
            count += 1
            # boxes in frame pixels whichever model ran: the 'face' cell maps into the frame
            assert len(result.detections) == 1 and result.detections.xyxy.max() <= 160
            if result.index == 3:
                done = pipeline.swap_detector(second)
    assert count == 16 and done is not None and done.is_set()
    assert len(small.backend.fed) == 4 and len(large.backend.fed) == 12


class FailingIn(FullFrameDetector):
    def __init__(self, stage: str) -> None:
        model = Model(ShapeCheckingBackend(32, 64), InputSpec(name="input.1", shape=[1, 3, 32, 64]), dict(CENTERFACE_DECODER))
        built = make_detector("full", model)
        super().__init__(model.backend, built.decoder, model.input_spec)
        self.fail_stage = stage
        if stage == "infer":
            self.backend.infer = self._boom  # type: ignore[method-assign]
        if stage == "decode":
            self.batch.decoder = self._boom_decode

    def _boom(self, feed: Any) -> Any:
        raise RuntimeError("inference failed")

    def _boom_decode(self, outputs: Any, transforms: Any) -> List[Detections]:
        raise RuntimeError("decoding failed")


@pytest.mark.parametrize("stage", ["infer", "decode"])
def test_the_failing_stage_is_named(stage: str) -> None:
    with Pipeline(config(), source=ListSource([scene(0), scene(1)]), detector=FailingIn(stage)) as pipeline:
        with pytest.raises(RuntimeError, match="failed"):
            list(pipeline)
        assert pipeline.failed_stage == stage


def test_a_source_error_names_capture() -> None:
    detector = FailingIn("none")
    with Pipeline(config(), source=ListSource([scene(0), ValueError("camera gone")]), detector=detector) as pipeline:
        with pytest.raises(ValueError, match="camera gone"):
            list(pipeline)
        assert pipeline.failed_stage == "capture"


def test_a_preprocessing_error_on_the_capture_thread_names_preprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, frame: np.ndarray) -> None:
        raise MemoryError("no room for the tensor")

    monkeypatch.setattr(detector_mod.PreparedInput, "fill", broken)
    with Pipeline(config(preprocess="capture"), source=ListSource([scene(0)]), detector=FailingIn("none")) as pipeline:
        with pytest.raises(MemoryError, match="no room"):
            list(pipeline)
        assert pipeline.failed_stage == "preprocess"


def test_cache_hits_use_the_thumbnail_made_on_the_capture_thread(tiny_bundle: Path) -> None:
    still = [scene(0)] * 5 + [scene(7)] * 3
    cfg = config(tiny_bundle, cache=CacheConfig(enabled=True))
    with Pipeline(cfg, source=ListSource(still)) as pipeline:
        cached = [r.cached for r in pipeline]
    assert cached == [False, True, True, True, True, False, True, True]


def test_the_capture_ring_memory_is_chosen_by_the_config(tiny_bundle: Path) -> None:
    from edge_sdk.cuda import open_cuda
    from edge_sdk.errors import ConfigError, CudaError

    with Pipeline(config(tiny_bundle, frame_memory="host"), source=ListSource([scene(0)])) as pipeline:
        assert len(list(pipeline)) == 1
        assert pipeline.describe()["frame_memory"]["kind"] == "host"
    with pytest.raises(ConfigError, match="frame_memory must be one of"):
        config(tiny_bundle, frame_memory="gpu").validate()
    if open_cuda("auto") is None:  # no CUDA device here: auto falls back, an explicit GPU choice fails loudly
        with Pipeline(config(tiny_bundle), source=ListSource([scene(0)])) as pipeline:
            assert pipeline.describe()["frame_memory"]["kind"] == "host"
            assert "no CUDA device" in pipeline.describe()["frame_memory"]["reason"]
        pipeline = Pipeline(config(tiny_bundle, frame_memory="pinned"), source=ListSource([scene(0)]))
        with pytest.raises(CudaError):
            pipeline.open()
        assert pipeline.capture is None and (pipeline.model is None or not pipeline.model.backend.is_active)


@pytest.mark.parametrize("cores, threads, cpu_bound, expected", [
    (2, 1, True, "capture"),   # a core is free: preprocessing goes there
    (2, 2, True, "inline"),    # inference takes every core: between inferences
    (2, 0, True, "inline"),    # 0 is the runtime's default: every core
    (4, 2, True, "capture"),
    (1, 1, True, "inline"),
    (2, 2, False, "capture"),  # inference off the CPU (a GPU execution provider)
])
def test_auto_placement_follows_the_cores_inference_leaves(monkeypatch: pytest.MonkeyPatch, cores: int, threads: int,
                                                           cpu_bound: bool, expected: str) -> None:
    from edge_sdk.runtime import pipeline as pipeline_mod

    monkeypatch.setattr(pipeline_mod, "available_cores", lambda: cores)
    backend = ShapeCheckingBackend(32, 64)
    backend.cpu_bound = cpu_bound
    backend.threads = threads
    detector = make_detector("full", Model(backend, InputSpec(name="input.1", shape=[1, 3, 32, 64]), dict(CENTERFACE_DECODER)))
    pipeline = Pipeline(config(), source=ListSource([scene(0)]), detector=detector)
    assert pipeline.placement() == expected
    with pipeline:
        stage = [s for s in pipeline.describe()["stages"] if s["stage"] == "preprocess"][0]
        assert stage["runs_on"] == {"capture": "capture thread", "inline": "inference thread"}[expected]
        assert str(cores) in stage["why"] if cpu_bound else "off the CPU" in stage["why"]
        assert len(list(pipeline)) == 1
    strategy = make_detector("roi", Model(ShapeCheckingBackend(32, 64), InputSpec(name="input.1", shape=[1, 3, 32, 64]),
                                          dict(CENTERFACE_DECODER)))
    assert Pipeline(config(preprocess="capture"), detector=strategy).placement() == "strategy"
