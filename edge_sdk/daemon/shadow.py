"""A candidate model run in the shadow of the live one: the same frames, compared, never served.

    run = ShadowRun(model, detector, "faces-v2", every=5, window=50)
    run.offer(result)       # frame loop, every frame: every 5th frame is copied to the shadow's worker
    run.figures()           # the `shadow` message's comparison (agreement, rates, score shift, latency)
    run.stop()              # the worker ends; the model and detector stay the caller's

The shadow detector runs on a worker thread of its own, one frame at a time: when the worker
is still busy with the last frame handed to it, the next k-th frame is left out (counted in
`frames_skipped`), so the live stream never waits for the candidate. A result the prediction
cache served (FrameResult.cached) is left out too (counted in `frames_cached`): its detections
are an earlier frame's, the live model never ran on this one, and on a scene that moved a little
under the cache's threshold the two models' boxes would not match. The comparison covers the
last `window` frames compared:

- agreement: the candidate's detections matched with the live model's at IoU 0.5, pooled over
  the frames (edge_sdk.builder.evaluate.agreement, the builder's accuracy gate: the live
  model's detections are the reference);
- detection rate: detections per frame of each, and their ratio (candidate / live);
- score shift: the two-sample Kolmogorov-Smirnov statistic between the live and the candidate
  detection scores (0: the same distribution, 1: disjoint), with the mean score of each;
- latency: the candidate's preprocess + inference + decode time per frame against the live
  model's on the same frame (the live pipeline's preprocess, infer and decode stages).

`ShadowConfig` is the device config's `[shadow]` table: the shadow's frame share, the window,
the automatic promotion's thresholds and the bounds of the watch after a promotion
(edge_sdk.daemon.promotion).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np

from edge_sdk.builder.evaluate import agreement
from edge_sdk.config_schema import key
from edge_sdk.detections import Detections
from edge_sdk.runtime.frame import Frame

log = logging.getLogger(__name__)

clock = time.perf_counter
LIVE_STAGES = ("preprocess", "infer", "decode")  # the live pipeline's stages the shadow's detect() also runs


@dataclass
class ShadowConfig:
    """The `[shadow]` table of the device config."""

    every_n_frames: int = key(5, low=1, high=10000)  # the shadow runs on every k-th live frame (fewer when it cannot keep up)
    window_frames: int = key(50, low=1, high=100000)  # frames compared that the figures (and the automatic promotion) cover
    auto_promote: bool = False  # promote on its own once a full window meets the three thresholds below
    # detections (live and candidate together) a window must hold before agreement and detection rate
    # decide anything: on a scene where neither model finds anything, a blind candidate agrees
    min_detections: int = key(20, low=0, high=1000000)
    min_agreement: float = key(0.97, low=0, high=1)  # f1 at IoU 0.5 with the live model's detections
    max_latency_ratio: float = key(1.5, low=0, low_open=True, high=1000)  # shadow latency / live latency
    rate_ratio: float = key(1.25, low=1, high=1000)  # detection-rate ratio within [1/x, x]
    memory_margin_mb: float = key(256.0, low=0, high=1000000)  # kept free beyond the candidate's model files
    watch_s: float = key(30.0, low=0, high=86400)  # after a promotion, the window the rollback bounds apply to (0: no watch)
    watch_fps_ratio: float = key(0.8, low=0, high=1)  # roll back when fps falls below this share of the previous model's
    watch_latency_ratio: float = key(1.5, low=1, high=1000)  # roll back when p99 total latency exceeds the previous model's times this
    watch_rate_ratio: float = key(1.5, low=1, high=1000)  # roll back when the detection rate leaves [1/x, x] of the previous model's


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs
    of `a` and `b` (0 when both are empty, 1 when only one is)."""
    if not len(a) and not len(b):
        return 0.0
    if not len(a) or not len(b):
        return 1.0
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    gap = np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b)
    return float(np.max(np.abs(gap)))


def ratio(num: float, den: float) -> Optional[float]:
    """num / den; 1.0 when both are 0; None (no figure) when only den is."""
    if den > 0:
        return num / den
    return 1.0 if num == 0 else None


def bundle_bytes(path: Path) -> int:
    """What the bundle's files take on disk: the model (ONNX or engine) a backend loads."""
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())


def free_memory_bytes() -> Optional[int]:
    """MemAvailable of /proc/meminfo (on a Jetson the GPU's memory too); None where unreadable."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def fit_problem(path: Path, margin_mb: float, free: Optional[int] = None, use: str = "shadow") -> Optional[str]:
    """Why a candidate at `path` cannot load beside the live model, with the figures; None when
    it fits (or free memory cannot be read). `use`: the reload's argument that asked for it
    (shadow, ab)."""
    free = free_memory_bytes() if free is None else free
    if free is None:
        return None
    size = bundle_bytes(path)
    if size + margin_mb * 1024 * 1024 <= free:
        return None
    mb = 1024 * 1024
    return (f"the {use} candidate {Path(path).name} does not fit beside the live model: its files take "
            f"{size / mb:.1f} MB plus the {margin_mb:g} MB margin ([shadow] memory_margin_mb), and {free / mb:.1f} MB "
            f"are free (MemAvailable); free memory, lower the margin, or reload it without {use}")


MIN_BUILD_WORKSPACE_MIB = 64  # the least builder workspace a reload's engine build is started with


def build_workspace_mib(path: Path, margin_mb: float, free: Optional[int] = None) -> Optional[int]:
    """The workspace limit (MiB) of an engine build for the bundle at `path` beside the running
    model, by the rule `fit_problem` applies to a shadow: what MemAvailable leaves once the
    candidate's files (its weights) and `margin_mb` (the live engine's share) are set aside.
    TensorRT's default workspace is the whole device memory, which on a Jetson is the memory
    the live model and the OS run in. None when free memory cannot be read (TensorRT's default
    then). BackendError with the figures when less than MIN_BUILD_WORKSPACE_MIB is left."""
    from edge_sdk.errors import BackendError

    free = free_memory_bytes() if free is None else free
    if free is None:
        return None
    mb = 1024 * 1024
    size = bundle_bytes(path)
    room = int((free - size - margin_mb * mb) // mb)
    if room >= MIN_BUILD_WORKSPACE_MIB:
        return room
    raise BackendError(
        f"the TensorRT engine of {Path(path).name} cannot be built beside the running model: {free / mb:.1f} MB are "
        f"free (MemAvailable), its files take {size / mb:.1f} MB and {margin_mb:g} MB are kept for the live model "
        f"([shadow] memory_margin_mb), which leaves {max(room, 0)} MiB of builder workspace, under the "
        f"{MIN_BUILD_WORKSPACE_MIB} MiB a build needs; free memory, lower the margin, or build the engine ahead "
        f"with `edge-sdk engine {path} --workspace MIB` (the reload then takes it from the cache)")


Pair = Tuple[Detections, Detections, float, float]  # live, shadow detections; live, shadow ms


class ShadowRun:
    """One candidate compared with the live model; see the module docstring."""

    def __init__(self, model: Any, detector: Any, name: str, every: int, window: int) -> None:
        self.model = model
        self.detector = detector
        self.name = name
        self.every = int(every)
        self.seen = 0  # live frames offered
        self.compared = 0  # frames the shadow ran on
        self.skipped = 0  # k-th frames left out: the shadow was still busy
        self.cached = 0  # frames left out: served from the prediction cache, not run by the live model
        self.error: Optional[BaseException] = None  # what stopped the worker
        self._pairs: Deque[Pair] = deque(maxlen=int(window))
        self._lock = threading.Lock()
        self._jobs: "queue.Queue[Optional[Tuple[np.ndarray, Detections, float, int]]]" = queue.Queue(maxsize=1)
        self._worker = threading.Thread(target=self._work, name="model-shadow", daemon=True)
        self._worker.start()

    def offer(self, result: Any) -> None:
        """Frame loop: hand every k-th frame the live model ran on (a copy) and its detections to
        the worker."""
        if result.cached:
            self.cached += 1
            return
        self.seen += 1
        if self.seen % self.every or result.frame is None or self.error is not None:
            return
        live_ms = sum(result.latency_ms.get(stage, 0.0) for stage in LIVE_STAGES)
        try:
            self._jobs.put_nowait((result.frame.copy(), result.detections, live_ms, int(result.index)))
        except queue.Full:
            self.skipped += 1

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            image, live, live_ms, index = job
            try:
                t0 = clock()
                found = self.detector.detect(Frame(image, index=index))
                shadow_ms = (clock() - t0) * 1000.0
            except Exception as exc:  # noqa: BLE001 - the candidate failed: the control aborts it and says why
                log.exception("the shadow model %s failed on frame %d", self.name, index)
                self.error = exc
                return
            with self._lock:
                self._pairs.append((live, found.detections, live_ms, shadow_ms))
                self.compared += 1

    @property
    def full(self) -> bool:
        """Whether the figures cover a whole window."""
        return len(self._pairs) == self._pairs.maxlen

    def figures(self) -> Dict[str, Any]:
        """The comparison over the window (see the module docstring)."""
        with self._lock:
            pairs: List[Pair] = list(self._pairs)
            compared, skipped, cached = self.compared, self.skipped, self.cached
        live = [p[0] for p in pairs]
        cand = [p[1] for p in pairs]
        match = agreement(cand, live)
        n_live, n_cand = sum(len(d) for d in live), sum(len(d) for d in cand)
        s_live = np.concatenate([d.confidence for d in live]) if live else np.zeros(0)
        s_cand = np.concatenate([d.confidence for d in cand]) if cand else np.zeros(0)
        ms_live, ms_cand = sum(p[2] for p in pairs), sum(p[3] for p in pairs)
        frames = max(len(pairs), 1)
        return {
            "frames_compared": compared,
            "frames_skipped": skipped,
            "frames_cached": cached,
            "window_frames": len(pairs),
            "agreement": {"f1": _r(match["f1"]), "precision": _r(match["precision"]), "recall": _r(match["recall"]),
                          "iou": 0.5},
            "detection_rate": {"live": _r(n_live / frames), "shadow": _r(n_cand / frames),
                               "ratio": _r(ratio(n_cand, n_live))},
            "score_shift": {"statistic": "ks", "value": _r(ks_statistic(s_live, s_cand)),
                            "live_mean": _r(float(s_live.mean())) if len(s_live) else None,
                            "shadow_mean": _r(float(s_cand.mean())) if len(s_cand) else None},
            "latency_ms": {"live": _r(ms_live / frames), "shadow": _r(ms_cand / frames),
                           "ratio": _r(ratio(ms_cand, ms_live))},
            # what the figures rest on: agreement, precision, recall, the detection rate and the
            # score shift on the live model's detections (and the candidate's), latency on frames
            "evidence": {"frames": len(pairs), "live_detections": n_live, "shadow_detections": n_cand},
        }

    def stop(self, timeout: float = 10.0) -> None:
        """End the worker after the frame it runs (if any); the model and detector stay loaded."""
        while True:
            try:
                self._jobs.get_nowait()  # a frame not started yet is dropped
            except queue.Empty:
                break
        self._jobs.put(None)
        self._worker.join(timeout)


def undecided(figures: Dict[str, Any], min_detections: int) -> Optional[str]:
    """Why `figures` cannot decide a promotion yet (fewer than `min_detections` detections of the
    two models together in the window: agreement and detection rate then say nothing of the
    candidate), or None."""
    evidence = figures.get("evidence") or {}
    found = int(evidence.get("live_detections") or 0) + int(evidence.get("shadow_detections") or 0)
    if found >= min_detections:
        return None
    return (f"{found} detection(s) in the window, {min_detections} needed: the scene shows too little for "
            "agreement and detection rate to tell a good candidate from a blind one")


def shortfalls(figures: Dict[str, Any], config: ShadowConfig) -> List[str]:
    """The thresholds of `config` that `figures` miss, in words (empty: every one holds)."""
    out = []
    f1 = figures["agreement"]["f1"]
    if f1 < config.min_agreement:
        out.append(f"agreement f1 {f1:.3f} < {config.min_agreement:g}")
    rate = figures["detection_rate"]["ratio"]
    if rate is None or not 1.0 / config.rate_ratio <= rate <= config.rate_ratio:
        out.append(f"detection-rate ratio {rate} outside [{1.0 / config.rate_ratio:.3g}, {config.rate_ratio:g}]")
    latency = figures["latency_ms"]["ratio"]
    if latency is not None and latency > config.max_latency_ratio:
        out.append(f"latency ratio {latency:.2f} > {config.max_latency_ratio:g}")
    return out


def _r(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(float(value), 4)
