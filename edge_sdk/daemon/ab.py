"""A/B test on a daemon with several streams: a candidate bundle serves the streams of arm B,
the live model those of arm A, side by side, and each arm's figures are published.

    control = ABControl(daemon, config.shadow)
    control.check_streams(["door"])          # handlers: reload with ab; arm B's streams checked
    control.check_fits(path)                 # the candidate's files against free memory
    control.start(model, where, tag)         # frame loop: the reloader loaded the candidate
    control.observe(result)                  # frame loop, every frame while `active`
    control.promote() / control.abort()      # the commands

The split and its end happen at a batch boundary (RunningModel.split and end_split): the batch
in the model finishes on the detector it started with, queued frames go to the new one, none is
dropped. Each model batches its own arm's streams (edge_sdk.runtime.detectors.shared
make_arms_detector), and every result says which arm's model found it (`info["arm"]`), so the
figures count exactly the frames each arm ran. Per arm, over its last `[shadow] window_frames`
frames: fps per stream (from the frames' capture times), p99 total latency, detections per
frame and the mean detection score;
published on the `ab` topic every telemetry interval, and once more on promote or abort.
`promote` puts every stream on the candidate and retires the model of arm A; `abort` puts the
streams of arm B back on the live model and closes the candidate.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np

from edge_sdk.daemon.commands import CommandRejected, UnknownStream
from edge_sdk.daemon.promotion import bundle_name
from edge_sdk.daemon.shadow import ShadowConfig, fit_problem
from edge_sdk.errors import ConfigError

log = logging.getLogger(__name__)

clock = time.perf_counter
ARMS = ("a", "b")
ArmSample = Tuple[str, float, float, int, float]  # stream, capture time (s), total latency (ms), detections, score sum


class ArmFigures:
    """One arm's last frames and the figures over them."""

    def __init__(self, bundle: Optional[str], bundle_hash: Optional[str], streams: List[str], window: int) -> None:
        self.bundle = bundle
        self.bundle_hash = bundle_hash
        self.streams = streams
        self.frames = 0  # every frame the arm's model ran since the split
        self.samples: Deque[ArmSample] = deque(maxlen=int(window))

    def add(self, result: Any) -> None:
        found = result.detections
        self.frames += 1
        self.samples.append((result.stream, float(result.timestamp), float(result.latency_ms.get("total", 0.0)),
                             len(found), float(found.confidence.sum()) if len(found) else 0.0))

    def describe(self) -> Dict[str, Any]:
        return {"bundle": self.bundle, "bundle_hash": self.bundle_hash, "streams": list(self.streams)}

    def figures(self) -> Dict[str, Any]:
        """fps per stream (by the frames' capture times: the frame loop gets results in bursts),
        p99 latency, detections per frame and mean score over the window."""
        samples = list(self.samples)
        if not samples:
            return dict(self.describe(), frames=self.frames, window_frames=0, fps=None, latency_p99_ms=None,
                        detections_per_frame=None, score_mean=None)
        times = [s[1] for s in samples]
        streams = len({s[0] for s in samples})  # a stalled stream has no frames in the window
        span = max(times) - min(times)
        found = sum(s[3] for s in samples)
        return dict(self.describe(), frames=self.frames, window_frames=len(samples),
                    fps=_r((len(samples) - streams) / span / streams) if span > 0 else None,
                    latency_p99_ms=_r(float(np.percentile([s[2] for s in samples], 99))),
                    detections_per_frame=_r(found / len(samples)),
                    score_mean=_r(sum(s[4] for s in samples) / found) if found else None)


class ABControl:
    """The A/B test of one daemon; see the module docstring."""

    def __init__(self, daemon: Any, config: Optional[ShadowConfig] = None) -> None:
        """`daemon`: the running daemon (edge_sdk.daemon.handlers.RunningDaemon)."""
        self.daemon = daemon
        self.config = config or ShadowConfig()
        self.pending: Optional[List[str]] = None  # arm B of the candidate the reloader loads
        self.arms: Optional[Dict[str, ArmFigures]] = None
        self._next_report = 0.0

    @property
    def active(self) -> bool:
        return self.arms is not None

    # -- commands (frame loop) -----------------------------------------------------------------
    def check_idle(self, what: str) -> None:
        """CommandRejected while an A/B test runs."""
        if self.arms is not None:
            raise CommandRejected(f"{what} refused: the A/B test of {self.arms['b'].bundle} runs; send promote "
                                  "or abort first")

    def check_streams(self, arm_b: List[str]) -> None:
        """Arm B's streams: every one run by this daemon, arm A left at least one."""
        known = self.daemon.config.pipeline.stream_ids()
        if len(known) < 2:
            raise CommandRejected("an A/B test needs several [[sources]]; this daemon runs one stream: reload "
                                  "with shadow to compare a candidate on it")
        for sid in arm_b:
            if sid not in known:
                raise UnknownStream(sid, known)
        if set(known) <= set(arm_b):
            raise CommandRejected(f"arm B takes every stream ({', '.join(known)}), none is left on the live model "
                                  "to compare with: leave at least one out of `b`, or reload without ab")

    def check_fits(self, path: Path) -> None:
        """The candidate at `path` must fit beside the live model."""
        problem = fit_problem(path, self.config.memory_margin_mb, use="ab")
        if problem is not None:
            raise CommandRejected(problem)

    def start(self, model: Any, where: str, tag: Optional[str]) -> None:
        """The reloader loaded the candidate: from the next batch on, it serves arm B."""
        d = self.daemon
        arm_b, self.pending = list(self.pending or []), None
        live_name, live_hash = bundle_name(d.model.model), d.model.describe()["bundle_hash"]
        try:
            d.model.split(model, arm_b)  # closes the candidate when it cannot
        except Exception as exc:  # noqa: BLE001 - reported like a failed reload; the live model runs on
            self._final(tag, {"ok": False, "error": f"A/B test of {where} refused, the live model runs on: {exc}"})
            return
        arm_a = [sid for sid in d.config.pipeline.stream_ids() if sid not in arm_b]
        window = self.config.window_frames
        self.arms = {"a": ArmFigures(live_name, live_hash, arm_a, window),
                     "b": ArmFigures(bundle_name(model) or where, model.bundle_hash, arm_b, window)}
        self._next_report = clock() + d.reporter.interval_s
        log.info("A/B test: %s (%s) on streams %s, %s on %s", self.arms["b"].bundle, model.bundle_hash,
                 ", ".join(arm_b), live_name, ", ".join(arm_a))
        self._final(tag, {"ok": True, "result": {"ab": self.describe()}})
        d.publisher.set_status(d.status())

    def promote(self) -> Dict[str, Any]:
        """Every stream on arm B's model from the next batch on; arm A's model retired."""
        return self._end(promote=True)

    def abort(self) -> Dict[str, Any]:
        """Arm B's streams back on the live model from the next batch on; the candidate closed."""
        return self._end(promote=False)

    def _end(self, promote: bool) -> Dict[str, Any]:
        arms = self.arms
        if arms is None:
            raise CommandRejected("no A/B test runs: nothing to end")
        d = self.daemon
        try:
            d.model.end_split(promote)
        except ConfigError as exc:
            raise CommandRejected(f"ending the A/B test failed, both arms run on: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the pipeline refused the detector: the test runs on
            raise CommandRejected(f"ending the A/B test failed, both arms run on: {type(exc).__name__}: {exc}") from exc
        state = "promoted" if promote else "aborted"
        if promote:
            d.remember_running("ab")
        figures = self._publish(state)
        self.arms = None
        winner = arms["b" if promote else "a"]
        log.info("A/B test %s: every stream runs %s (%s)", state, winner.bundle, winner.bundle_hash)
        d.publisher.set_status(d.status())
        return {state: arms["b"].bundle, "bundle": winner.bundle, "bundle_hash": winner.bundle_hash,
                "arms": figures}

    # -- frame loop ----------------------------------------------------------------------------
    def observe(self, result: Any) -> None:
        """Every frame while `active`: count it in the arm whose model found it; report when due."""
        arms = self.arms
        assert arms is not None
        arm = result.info.get("arm") if isinstance(result.info, dict) else None
        if arm in arms:
            arms[arm].add(result)
        now = clock()
        if now >= self._next_report:
            self._next_report = now + self.daemon.reporter.interval_s
            self._publish("running")

    # -- reporting -----------------------------------------------------------------------------
    def describe(self) -> Optional[Dict[str, Any]]:
        """The status's `ab` block: each arm's bundle and streams; None when no test runs."""
        if self.arms is None:
            return None
        return {arm: figures.describe() for arm, figures in self.arms.items()}

    def _publish(self, state: str) -> Dict[str, Any]:
        assert self.arms is not None
        figures = {arm: self.arms[arm].figures() for arm in ARMS}
        self.daemon.publisher.publish("ab", {"state": state, "arms": figures})
        return figures

    def _final(self, tag: Optional[str], body: Dict[str, Any]) -> None:
        if tag is not None:
            self.daemon.publisher.publish("cmd/response", dict(body, id=tag, cmd="reload", final=True))


def _r(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(float(value), 4)
