"""The execution plan's rules, one row each: detector facts + capabilities + config + cores ->
where preprocessing runs and why, whether inference runs ahead, whether capture runs idle, where
frames are uploaded."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from edge_sdk.runtime.backends.base import Capabilities
from edge_sdk.runtime.config import CacheConfig, PipelineConfig, SourceConfig
from edge_sdk.runtime.pipeline import Pipeline
from edge_sdk.runtime.plan import AHEAD_WHY, DetectorFacts, ExecutionPlan, plan
from runtime_factories import ListSource, scene

FULL = DetectorFacts(mode="full", preprocess_device="cpu", prepared=True, splits=True)
GPU = DetectorFacts(mode="full", preprocess_device="gpu", prepared=False, splits=False)
ROI = DetectorFacts(mode="roi", preprocess_device="cpu", prepared=False, splits=False)
ONE_CALL = DetectorFacts(mode="full", preprocess_device="cpu", prepared=True, splits=False)
STREAM = object()


def cpu(threads: int) -> Capabilities:
    return Capabilities(device="cpu", threads=threads)


GPU_CAPS = Capabilities(device="gpu", cuda=object(), stream=STREAM)


def cfg(preprocess: str = "auto", capture_nice: int = 10) -> Any:
    return SimpleNamespace(preprocess=preprocess, capture_nice=capture_nice)


@pytest.mark.parametrize("facts, caps, config, cores, placement, why", [
    (FULL, cpu(1), cfg(), 2, "capture", "inference uses 1 of 2 cores: preprocessing runs on a free one"),
    (FULL, cpu(2), cfg(), 2, "inline", "inference uses all 2 cores: preprocessing runs between inferences"),
    (FULL, cpu(0), cfg(), 2, "inline", "inference uses all 2 cores: preprocessing runs between inferences"),
    (FULL, cpu(2), cfg(), 4, "capture", "inference uses 2 of 4 cores: preprocessing runs on a free one"),
    (FULL, cpu(1), cfg(), 1, "inline", "inference uses all 1 cores: preprocessing runs between inferences"),
    (FULL, Capabilities(device="gpu"), cfg(), 2, "capture", "inference runs off the CPU"),
    (FULL, cpu(1), cfg("inline"), 2, "inline", "preprocess = 'inline' in the config"),
    (FULL, cpu(2), cfg("capture"), 2, "capture", "preprocess = 'capture' in the config"),
    (GPU, GPU_CAPS, cfg("inline"), 2, "stream", "a GPU preprocessor queues its kernels before inference"),
    (ROI, cpu(1), cfg("capture"), 2, "strategy", "the strategy preprocesses its own crops"),
    (None, None, cfg(), 2, "strategy", "the strategy preprocesses its own crops"),
])
def test_where_preprocessing_runs_and_why(facts: Optional[DetectorFacts], caps: Optional[Capabilities], config: Any,
                                          cores: int, placement: str, why: str) -> None:
    got = plan(facts, caps, config, cores)
    assert (got.preprocess, got.why) == (placement, why)


@pytest.mark.parametrize("facts, caps, config, ahead", [
    (FULL, cpu(1), cfg(), True),             # a core left free, prepared beside capture
    (FULL, cpu(2), cfg(), False),            # inline: frames are not prepared ahead
    (FULL, cpu(2), cfg("capture"), True),    # the config puts preprocessing beside capture
    (FULL, Capabilities(device="gpu"), cfg(), False),  # inference off the CPU
    (ONE_CALL, cpu(1), cfg(), False),        # no halves to run on two threads
    (ROI, cpu(1), cfg(), False),
    (GPU, GPU_CAPS, cfg(), False),
    (None, cpu(1), cfg(), False),
])
def test_inference_runs_ahead_only_for_a_split_detector_prepared_beside_capture_on_the_cpu(
        facts: Optional[DetectorFacts], caps: Capabilities, config: Any, ahead: bool) -> None:
    got = plan(facts, caps, config, 2)
    assert got.ahead is ahead
    assert (got.ahead_why == AHEAD_WHY) is ahead and got.ahead_why


@pytest.mark.parametrize("caps, nice, idle", [
    (cpu(1), 10, True), (cpu(2), 1, True), (cpu(1), 0, False), (Capabilities(device="gpu"), 10, False),
    (GPU_CAPS, 10, False), (None, 10, False),
])
def test_capture_runs_idle_when_inference_runs_on_the_cpu_and_capture_is_niced(caps: Optional[Capabilities], nice: int,
                                                                              idle: bool) -> None:
    got = plan(FULL, caps, cfg(capture_nice=nice), 2)
    assert got.capture_idle is idle and got.idle_why


def test_only_a_gpu_detector_uploads_to_the_backend_stream() -> None:
    assert plan(GPU, GPU_CAPS, cfg(), 2).upload_stream is STREAM
    assert plan(FULL, GPU_CAPS, cfg(), 2).upload_stream is None
    assert plan(ROI, GPU_CAPS, cfg(), 2).upload_stream is None


def test_the_plan_is_a_pure_value() -> None:
    first, second = plan(FULL, cpu(1), cfg(), 2), plan(FULL, cpu(1), cfg(), 2)
    assert first == second and isinstance(first, ExecutionPlan)
    with pytest.raises(AttributeError):
        first.ahead = False  # type: ignore[misc]


def test_the_pipeline_describes_and_follows_its_plan(tiny_bundle: Path) -> None:
    config = PipelineConfig(source=SourceConfig(""), bundle=str(tiny_bundle), threads=1, preprocess="capture",
                            cache=CacheConfig(enabled=False))
    with Pipeline(config, source=ListSource([scene(i) for i in range(3)])) as pipeline:
        assert len(list(pipeline)) == 3
        described = pipeline.describe()
    assert described["plan"] == {"preprocess": "capture", "why": "preprocess = 'capture' in the config", "ahead": True,
                                 "ahead_why": AHEAD_WHY, "capture_idle": True,
                                 "idle_why": "inference runs on the CPU: capture takes the cores it leaves idle",
                                 "upload": False}
    assert pipeline.runs_ahead() and pipeline.capture is not None and pipeline.capture.idle
    assert [s["runs_on"] for s in described["stages"] if s["stage"] == "infer"] == [
        "infer thread (its own, one frame ahead of decode)"]
