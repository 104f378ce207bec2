"""Where each stage of the frame path runs, worked out once from what is known: the execution plan.

    facts = DetectorFacts.of(detector)                  # mode, where it preprocesses, what it takes
    execution = plan(facts, backend.capabilities(), config, cores=available_cores())
    execution.preprocess, execution.why                  # "capture", "inference uses 1 of 2 cores: ..."

:func:`plan` is a pure function of the detector's facts, the backend's
:class:`~edge_sdk.runtime.backends.base.Capabilities`, the pipeline's config (`preprocess`,
`capture_nice`) and the number of cores: the pipeline builds its loops from the
:class:`ExecutionPlan` it returns and `Pipeline.describe()` reports it. The rules:

- preprocess runs on the inference stream ("stream") when the detector preprocesses on the
  GPU; in the strategy ("strategy") when the detector takes no prepared input (tiles, roi);
  where the config says when `preprocess` is not "auto"; otherwise on the inference thread
  ("inline") when inference uses every core, and beside capture ("capture") when it leaves one
  free or runs off the CPU.
- inference runs ahead, on a thread of its own, for a detector whose infer and decode halves
  can run on two threads, prepared beside capture, on a CPU backend.
- the capture thread runs in the idle scheduling class when inference runs on the CPU (and the
  config lowers capture's priority at all).
- a GPU detector's frames are uploaded to the backend's stream.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from edge_sdk.runtime.backends.base import Capabilities

PLACEMENTS = ("capture", "inline", "stream", "strategy")
AHEAD_WHY = "a CPU backend leaves a core free: the thread that runs the model does nothing else"


@dataclass(frozen=True)
class DetectorFacts:
    """What the plan needs of a detector: its mode, where it preprocesses ("cpu", or "gpu" on the
    inference stream), whether it takes an input prepared ahead (`prepared`), and whether its
    infer and decode halves may run on two threads (`splits`)."""

    mode: str = ""
    preprocess_device: str = "cpu"
    prepared: bool = False
    splits: bool = False

    @classmethod
    def of(cls, detector: Any) -> "DetectorFacts":
        """The facts of a :class:`~edge_sdk.runtime.detectors.base.Detector` (its declared
        attributes, read from the base class's interface)."""
        return cls(mode=detector.mode, preprocess_device=detector.preprocess_device,
                   prepared=detector.prepared_spec is not None, splits=bool(detector.splits))


@dataclass(frozen=True)
class ExecutionPlan:
    """Where each stage runs, and why. `preprocess`: one of PLACEMENTS; `ahead`: inference on a
    thread of its own, one frame ahead of decode; `capture_idle`: the capture thread in the idle
    scheduling class; `upload_stream`: the CUDA stream a frame is uploaded to before the
    detector runs (None: no upload)."""

    preprocess: str
    why: str
    ahead: bool = False
    ahead_why: str = ""
    capture_idle: bool = False
    idle_why: str = ""
    upload_stream: Any = None

    def to_dict(self) -> Dict[str, Any]:
        """For describe(): every decision with its reason (the stream as whether there is one)."""
        return {"preprocess": self.preprocess, "why": self.why, "ahead": self.ahead, "ahead_why": self.ahead_why,
                "capture_idle": self.capture_idle, "idle_why": self.idle_why,
                "upload": self.upload_stream is not None}


def _placement(facts: Optional[DetectorFacts], caps: Capabilities, choice: str, cores: int) -> Tuple[str, str]:
    if facts is not None and facts.preprocess_device == "gpu":
        return "stream", "a GPU preprocessor queues its kernels before inference"
    if facts is None or not facts.prepared:
        return "strategy", "the strategy preprocesses its own crops"
    if choice != "auto":
        return choice, f"preprocess = {choice!r} in the config"
    if caps.cpu_bound:
        threads = caps.threads or cores  # 0: the runtime's default, every core
        if threads >= cores:
            # measured (bench/bench_pipeline.py, 2 cores, 2 threads): on the capture thread it
            # only runs in the gaps inference leaves, and frames wait for it
            return "inline", f"inference uses all {cores} cores: preprocessing runs between inferences"
        return "capture", f"inference uses {threads} of {cores} cores: preprocessing runs on a free one"
    return "capture", "inference runs off the CPU"


def _ahead(facts: Optional[DetectorFacts], caps: Capabilities, placement: str) -> Tuple[bool, str]:
    if facts is None or not facts.splits:
        return False, "the detector runs its stages in one call"
    if placement != "capture":
        return False, "frames are not prepared beside capture"
    if not caps.cpu_bound:
        return False, "inference runs off the CPU"
    return True, AHEAD_WHY


def plan(facts: Optional[DetectorFacts], caps: Optional[Capabilities], config: Any, cores: int) -> ExecutionPlan:
    """The execution plan of a detector (None: none yet) on a backend of capabilities `caps`
    (None: no backend yet), under `config` (its `preprocess` and `capture_nice`), with `cores`
    CPU cores to run on. Pure: the same arguments give the same plan."""
    caps = caps if caps is not None else Capabilities(device="gpu")  # no backend: nothing on the CPU
    placement, why = _placement(facts, caps, config.preprocess, cores)
    ahead, ahead_why = _ahead(facts, caps, placement)
    if config.capture_nice <= 0:
        idle, idle_why = False, "capture_nice = 0 in the config"
    elif caps.cpu_bound:
        idle, idle_why = True, "inference runs on the CPU: capture takes the cores it leaves idle"
    else:
        idle, idle_why = False, "inference runs off the CPU"
    stream = caps.stream if placement == "stream" else None
    return ExecutionPlan(placement, why, ahead, ahead_why, idle, idle_why, stream)
