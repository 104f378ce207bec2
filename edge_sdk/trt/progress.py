"""How far an engine build is, where TensorRT says so.

TensorRT >= 10 (and 8.6) reports the builder's phases to an `IProgressMonitor` set on the
builder config (`IBuilderConfig.progress_monitor`): `phase_start(name, parent, steps)`,
`step_complete(name, step) -> bool` (False cancels the build), `phase_finish(name)`, called from
TensorRT's threads. TensorRT 8.5 (JetPack 5.1, Xavier NX) has none: there the build says its
steps in words only.

A `BuildProgress` is the builder's `progress` callback (edge_sdk.trt.options.BuildOptions) that
also takes the fraction done; `monitor(trt, progress)` is the IProgressMonitor feeding it, or
None where TensorRT has no monitor or the callback takes no fraction.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Optional

log = logging.getLogger(__name__)


class BuildProgress:
    """A progress callback: `progress(message)` for each step the builder names, `fraction(done,
    phase)` (0..1, the top phase TensorRT is in) where TensorRT reports its progress."""

    def __call__(self, message: str) -> None:
        raise NotImplementedError

    def fraction(self, done: float, phase: str) -> None:
        raise NotImplementedError


class _Phases:
    """The phases TensorRT has started and not finished, and the fraction of the top one: a
    phase of n steps with k done and a child under way is (k + the child's fraction) / n. A
    child's end comes before its parent's step: the top fraction never goes back within a phase."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phases: Dict[str, List[Any]] = {}  # name -> [parent or None, steps, done]
        self._best: Dict[str, float] = {}  # top phase -> the most reported of it
        self._ended: Optional[tuple] = None  # (1.0, name) of the top phase that ended last

    def start(self, name: str, parent: Optional[str], steps: int) -> None:
        with self._lock:
            self._phases[str(name)] = [None if parent is None else str(parent), max(1, int(steps)), 0]
            self._best.pop(str(name), None)

    def step(self, name: str, step: int) -> None:
        with self._lock:
            phase = self._phases.get(str(name))
            if phase is not None:
                phase[2] = max(phase[2], min(int(step) + 1, phase[1]))

    def finish(self, name: str) -> None:
        with self._lock:
            phase = self._phases.pop(str(name), None)
            if phase is not None and phase[0] is None:  # a top phase ended: all of it is done
                self._ended = (1.0, str(name))

    def top(self) -> Optional[tuple]:
        """(fraction of the top phase, its name), or None when none runs."""
        with self._lock:
            tops = [name for name, (parent, _, _) in self._phases.items() if parent not in self._phases]
            if not tops:
                return self._ended
            done = max(self._best.get(tops[0], 0.0), self._fraction(tops[0], 0))
            self._best[tops[0]] = done
            return done, tops[0]

    def _fraction(self, name: str, depth: int) -> float:
        _parent, steps, done = self._phases[name]
        children = [n for n, (p, _, _) in self._phases.items() if p == name]
        inner = self._fraction(children[0], depth + 1) if children and depth < 16 else 0.0
        return min(1.0, (done + inner) / steps)


def monitor(trt: Any, progress: Any) -> Optional[Any]:
    """An IProgressMonitor reporting to `progress` (a BuildProgress), or None where TensorRT has
    no IProgressMonitor or `progress` takes no fraction. Keep it for the build's whole length
    (TensorRT holds no reference of its own to a Python monitor)."""
    base = getattr(trt, "IProgressMonitor", None)
    if base is None or not isinstance(progress, BuildProgress):
        return None
    phases = _Phases()

    class Monitor(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)  # pybind11: the trampoline must be initialised

        def phase_start(self, phase_name: str, parent_phase: Optional[str], num_steps: int) -> None:
            self._report(lambda: phases.start(phase_name, parent_phase, num_steps))

        def step_complete(self, phase_name: str, step: int) -> bool:
            self._report(lambda: phases.step(phase_name, step))
            return True  # never cancel

        def phase_finish(self, phase_name: str) -> None:
            self._report(lambda: phases.finish(phase_name))

        @staticmethod
        def _report(change: Any) -> None:
            try:  # called from TensorRT's C++ threads: nothing may escape into them
                change()
                top = phases.top()
                if top is not None:
                    progress.fraction(*top)
            except Exception:  # a status update is not worth a build
                log.debug("build progress not reported", exc_info=True)

    return Monitor()
