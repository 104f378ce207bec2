"""What the retained status shows while a reload builds a TensorRT engine (`engine_build`).

A reload (plain, shadow, A/B arm B, by URL) whose bundle has no engine in the cache for this
device builds one on the reload's worker thread; that can take minutes on a Jetson while the live
model runs on. The engine builder (edge_sdk.trt.engine.build_engine) says each step through its
`progress` callback; `EngineBuild.progress(bundle)` is that callback for one reload:

    build = EngineBuild()
    say = build.progress("faces-v2")   # handed to load_model(progress=...)
    ...                                # the builder calls say("building the fp16 engine ...")
    build.end()                        # the load ended (swapped in, failed): the block is null again
    if build.due(): publish(status)    # frame loop: at most once a second while a build runs

An engine found in the cache says nothing, so no block appears. Where TensorRT reports its
progress (IProgressMonitor, TensorRT >= 10: Orin on JetPack 6) `fraction` is the part done of the
`phase` it is in (edge_sdk.trt.progress); TensorRT 8.5 (JetPack 5.1, Xavier NX) has no monitor, so
there `fraction` is null and `fraction_unknown` says why; `elapsed_s` is what moves.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional

from edge_sdk.trt.progress import BuildProgress

log = logging.getLogger(__name__)

EVERY_S = 1.0  # the status is published at most this often while a build runs
NO_FRACTION = "no fraction done: TensorRT 8.5 reports no build progress (no IProgressMonitor), so none is read; elapsed_s is what moves"


class EngineBuild:
    """The engine build of the reload in progress, if any; thread-safe (worker vs. frame loop)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._bundle: Optional[str] = None
        self._message = ""
        self._steps = 0
        self._started = 0.0
        self._shown = False  # the status last published shows a block
        self._ended = False  # a shown block ended: publish the null at once
        self._published = float("-inf")
        self._fraction: Optional[float] = None  # what TensorRT's progress monitor reported, if it did
        self._phase = ""

    def progress(self, bundle: str) -> BuildProgress:
        """The builder's progress callback for a load of `bundle`: its first message starts the
        block; the fraction TensorRT reports (>= 10) goes in it."""
        return _Progress(self, bundle)

    def _say(self, bundle: str, message: str) -> None:
        log.warning("engine build for %s: %s", bundle, message)  # the journal keeps what the status shows
        with self._lock:
            if self._bundle != bundle:
                self._bundle, self._started, self._steps, self._fraction, self._phase = bundle, self._clock(), 0, None, ""
            self._message = str(message)
            self._steps += 1

    def _done(self, bundle: str, done: float, phase: str) -> None:
        with self._lock:
            if self._bundle == bundle:  # a build this block shows (its first message came)
                self._fraction, self._phase = min(1.0, max(0.0, float(done))), str(phase)[:255]

    def end(self) -> None:
        """The load ended (engine built or found, or failed): no block from now on."""
        with self._lock:
            self._bundle = None
            self._ended = self._shown

    def describe(self) -> Optional[Dict[str, Any]]:
        """The status's `engine_build` block; None when no build runs."""
        with self._lock:
            return self._block()

    def _block(self) -> Optional[Dict[str, Any]]:
        if self._bundle is None:
            return None
        block: Dict[str, Any] = {"bundle": self._bundle, "message": self._message, "step": self._steps,
                                 "elapsed_s": round(max(0.0, self._clock() - self._started), 1)}
        if self._fraction is None:
            block.update(fraction=None, fraction_unknown=NO_FRACTION)
        else:
            block.update(fraction=round(self._fraction, 3), phase=self._phase)
        return block

    def due(self) -> bool:
        """Frame loop: whether to publish the status now (a build runs and a second has passed
        since the last time, or a shown block has ended); marks it published."""
        with self._lock:
            now = self._clock()
            if self._ended or (self._bundle is not None and now - self._published >= EVERY_S):
                self._ended, self._shown, self._published = False, self._bundle is not None, now
                return True
            return False


class _Progress(BuildProgress):
    """EngineBuild.progress's callback for one bundle's load."""

    def __init__(self, build: EngineBuild, bundle: str) -> None:
        self.build = build
        self.bundle = bundle

    def __call__(self, message: str) -> None:
        self.build._say(self.bundle, message)

    def fraction(self, done: float, phase: str) -> None:
        self.build._done(self.bundle, done, phase)
