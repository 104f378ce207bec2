"""Shadow runs, promotion, abort and the rollback after a promotion, on a daemon with one source.

    control = ShadowControl(daemon, config.shadow)
    control.check_idle("reload")             # handlers: refused while a shadow runs or a promotion is watched
    control.check_fits(path)                 # the candidate's files against free memory
    control.start(model, where)              # frame loop: the reloader loaded a shadow candidate
    control.observe(result)                  # frame loop, every frame while `active`
    control.promote() / control.abort()      # the commands (or the automatic promotion)

While a shadow runs (edge_sdk.daemon.shadow.ShadowRun) the live model's own figures are kept
(frame times, total latency, detections per frame): their last `watch_s` seconds are the
previous model's figures the watch after a promotion compares with. A promotion swaps the candidate in between two frames
(RunningModel.swap with `keep`: the previous model stays loaded). For `[shadow] watch_s`
after it, fps, p99 total latency and the detection rate are measured; at the end of the window
a figure outside its bound (`watch_fps_ratio`, `watch_latency_ratio`, `watch_rate_ratio`)
swaps the previous model back in and raises the `rollback` alert (critical) with the numbers;
within bounds, the previous model is retired. `abort` during the watch rolls back at once.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np

from edge_sdk.daemon.commands import CommandRejected
from edge_sdk.daemon.shadow import ShadowConfig, ShadowRun, fit_problem, ratio, shortfalls, undecided

log = logging.getLogger(__name__)

clock = time.perf_counter
BASELINE_FRAMES = 3000  # the live model's last frames kept while a shadow runs: the previous model's figures
Sample = Tuple[float, float, int]  # monotonic time, total latency (ms), detections


def bundle_name(model: Any) -> Optional[str]:
    """The folder name of a loaded model's bundle (None for a model without one)."""
    bundle = getattr(model, "bundle", None)
    return Path(bundle.root).name if bundle is not None else None


def measure(samples: List[Sample]) -> Dict[str, Optional[float]]:
    """fps, p99 total latency (ms) and detections per frame of a run of frames."""
    if len(samples) < 2:
        return {"fps": None, "latency_p99_ms": None, "detection_rate": None}
    span = samples[-1][0] - samples[0][0]
    return {"fps": (len(samples) - 1) / span if span > 0 else None,
            "latency_p99_ms": float(np.percentile([s[1] for s in samples], 99)),
            "detection_rate": sum(s[2] for s in samples) / len(samples)}


class RollbackWatch:
    """The figures of a promoted model against the previous one's, for `config.watch_s`."""

    def __init__(self, before: Dict[str, Optional[float]], config: ShadowConfig) -> None:
        self.before = before
        self.config = config
        self.start = clock()
        self.samples: List[Sample] = []

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)

    def due(self, now: float) -> bool:
        return now - self.start >= self.config.watch_s and len(self.samples) >= 2

    def breaches(self) -> Tuple[Dict[str, Optional[float]], List[Tuple[str, float, float, str]]]:
        """The promoted model's figures and each bound it leaves: (metric, ratio, bound, words);
        none while it has run too few frames to have figures (an abort in its first frames)."""
        after, before, c = measure(self.samples), self.before, self.config
        out: List[Tuple[str, float, float, str]] = []
        if after["fps"] is None:
            return after, out

        def figures(name: str, unit: str) -> str:
            return f"{after[name]:.2f}{unit} against {before[name]:.2f}{unit} before"

        fps = ratio(after["fps"] or 0.0, before["fps"] or 0.0)
        if fps is not None and fps < c.watch_fps_ratio:
            out.append(("fps", fps, c.watch_fps_ratio, f"fps {figures('fps', '')} (ratio {fps:.2f} < {c.watch_fps_ratio:g})"))
        p99 = ratio(after["latency_p99_ms"] or 0.0, before["latency_p99_ms"] or 0.0)
        if p99 is not None and p99 > c.watch_latency_ratio:
            out.append(("latency_p99_ms", p99, c.watch_latency_ratio,
                        f"p99 latency {figures('latency_p99_ms', ' ms')} (ratio {p99:.2f} > {c.watch_latency_ratio:g})"))
        if before["detection_rate"]:  # a previous model that found nothing gives no rate to compare with
            rate = (after["detection_rate"] or 0.0) / before["detection_rate"]
            low, high = 1.0 / c.watch_rate_ratio, c.watch_rate_ratio
            if not low <= rate <= high:
                out.append(("detection_rate", rate, low if rate < low else high,
                            f"detection rate {figures('detection_rate', '/frame')} (ratio {rate:.2f} outside "
                            f"[{low:.2f}, {high:g}])"))
        return after, out


class ShadowControl:
    """The shadow candidate, its promotion and the watch after it; see the module docstring."""

    def __init__(self, daemon: Any, config: Optional[ShadowConfig] = None) -> None:
        """`daemon`: the running daemon (edge_sdk.daemon.handlers.RunningDaemon: its model,
        reporter, publisher, config and status)."""
        self.daemon = daemon
        self.config = config or ShadowConfig()
        self.run: Optional[ShadowRun] = None
        self.watch: Optional[RollbackWatch] = None
        self.previous: Optional[Tuple[Optional[str], Optional[str]]] = None  # (name, sha256) a rollback returns to
        self._live: Deque[Sample] = deque(maxlen=BASELINE_FRAMES)
        self._next_report = 0.0

    @property
    def active(self) -> bool:
        return self.run is not None or self.watch is not None

    # -- commands (frame loop) -----------------------------------------------------------------
    def check_idle(self, what: str) -> None:
        """CommandRejected when a shadow runs or a promotion is watched."""
        if self.run is not None:
            raise CommandRejected(f"{what} refused: the shadow of {self.run.name} runs; send promote or abort first")
        if self.watch is not None:
            left = self.config.watch_s - (clock() - self.watch.start)
            raise CommandRejected(f"{what} refused: the promotion is watched for {max(left, 0):.0f} s more; wait for "
                                  "it, or send abort to roll back now")

    def check_fits(self, name: str, path: Path) -> None:
        """A shadow needs one source, mode full or tiles, and room beside the live model."""
        d = self.daemon
        streams = d.config.pipeline.stream_ids()
        if len(streams) > 1:
            raise CommandRejected(f"a shadow runs on a daemon with one source; this one runs {len(streams)} "
                                  "streams: reload without shadow")
        if d.model.mode == "roi":
            raise CommandRejected("a shadow compares in mode full or tiles, not roi (its scheduler would see only "
                                  "every k-th frame): `set` mode full first, or reload without shadow")
        problem = fit_problem(path, self.config.memory_margin_mb)
        if problem is not None:
            raise CommandRejected(problem)

    def start(self, model: Any, where: str, tag: Optional[str]) -> None:
        """The reloader loaded a candidate for a shadow run: build its detector and start it."""
        d = self.daemon
        try:
            detector = d.model.detector_for(model)
        except Exception as exc:  # noqa: BLE001 - reported like a failed reload; the live model runs on
            model.close()
            self._final(tag, {"ok": False, "error": f"shadow of {where} refused: {exc}"})
            return
        c = self.config
        self._live.clear()
        self.run = ShadowRun(model, detector, bundle_name(model) or where, c.every_n_frames, c.window_frames)
        d.reporter.raise_alert("shadow_failed", False, f"shadow of {self.run.name} started")  # the last failure is over
        self._next_report = clock() + d.reporter.interval_s
        log.info("shadow of %s (%s) started on every %d. frame", self.run.name, model.bundle_hash, c.every_n_frames)
        self._final(tag, {"ok": True, "result": {"shadow": self.run.name, "bundle_hash": model.bundle_hash,
                                                   "every_n_frames": c.every_n_frames}})
        d.publisher.set_status(d.status())

    def promote(self, automatic: bool = False) -> Dict[str, Any]:
        """Swap the candidate in (the live model kept for a rollback) and start the watch."""
        run = self.run
        if run is None:
            raise CommandRejected("no shadow runs: send reload with shadow true first")
        d = self.daemon
        run.stop()
        figures = self._publish("promoted")
        self.run = None
        before_name, before_hash = bundle_name(d.model.model), d.model.describe()["bundle_hash"]
        self._close_later([run.detector], [])
        try:
            d.model.swap(run.model, keep=True)
        except Exception as exc:  # noqa: BLE001 - swap closed the candidate; the live model runs on
            raise CommandRejected(f"promotion of {run.name} failed, the live model runs on: {exc}") from exc
        self.previous = (before_name, before_hash)
        recent = [s for s in self._live if s[0] >= self._live[-1][0] - self.config.watch_s] if self._live else []
        before = measure(recent)  # the live model's last watch_s seconds: as long as the watch after
        self._live.clear()
        if self.config.watch_s > 0 and before["fps"] is not None:
            self.watch = RollbackWatch(before, self.config)  # kept for a restart once the watch has passed
        else:
            d.model.release_kept()
            d.remember_running("promotion")
            d.reporter.raise_alert("rollback", False, f"{run.name} promoted")
        log.info("promoted %s (%s)%s", run.name, run.model.bundle_hash, " automatically" if automatic else "")
        d.publisher.set_status(d.status())
        return {"promoted": run.name, "bundle_hash": run.model.bundle_hash, "automatic": automatic,
                "previous": {"bundle": before_name, "bundle_hash": before_hash},
                "watch_s": self.config.watch_s if self.watch is not None else 0, "shadow": figures}

    def abort(self) -> Dict[str, Any]:
        """Stop the shadow (the candidate closed), or during the watch roll back at once."""
        if self.watch is not None:
            after, _ = self.watch.breaches()
            return self._roll_back(after, [], "abort")
        run = self.run
        if run is None:
            raise CommandRejected("no shadow runs and no promotion is watched: nothing to abort")
        run.stop()
        figures = self._publish("aborted")
        self.run = None
        self._close_later([run.detector], [run.model])
        log.info("shadow of %s aborted", run.name)
        self.daemon.publisher.set_status(self.daemon.status())
        return {"aborted": run.name, "bundle_hash": run.model.bundle_hash, "shadow": figures}

    # -- frame loop ----------------------------------------------------------------------------
    def observe(self, result: Any) -> None:
        """Every frame while `active`: feed the shadow and the figures, decide when due."""
        now = clock()
        sample = (now, float(result.latency_ms.get("total", 0.0)), len(result.detections))
        run, watch = self.run, self.watch
        if run is not None:
            self._live.append(sample)
            run.offer(result)
            if run.error is not None:
                self._failed(run)
            elif now >= self._next_report:
                self._next_report = now + self.daemon.reporter.interval_s
                figures = self._publish("running")
                if (self.config.auto_promote and run.full and undecided(figures, self.config.min_detections) is None
                        and not shortfalls(figures, self.config)):
                    try:
                        self.promote(automatic=True)
                    except CommandRejected as exc:  # the swap failed: the live model runs on
                        self.daemon.reporter.raise_alert("shadow_failed", True, str(exc), "warning", repeat=True)
        elif watch is not None:
            watch.add(sample)
            if watch.due(now):
                after, breaches = watch.breaches()
                if breaches:
                    try:
                        self._roll_back(after, breaches, "watch")
                    except CommandRejected:
                        pass  # the swap back failed: alerted, the promoted model runs on
                else:
                    self.watch = None
                    self.daemon.model.release_kept()
                    self.daemon.remember_running("promotion")
                    self.daemon.reporter.raise_alert("rollback", False, f"promotion held for {self.config.watch_s:g} s")
                    log.info("promotion held for %g s: %s", self.config.watch_s, after)
                    self.daemon.publisher.set_status(self.daemon.status())

    def _roll_back(self, after: Dict[str, Optional[float]], breaches: List[Tuple[str, float, float, str]],
                   why: str) -> Dict[str, Any]:
        d, watch = self.daemon, self.watch
        assert watch is not None
        self.watch = None
        bad_name, bad_hash = bundle_name(d.model.model), d.model.describe()["bundle_hash"]
        name, sha = self.previous or (None, None)
        try:
            d.model.swap(d.model.take_kept())
        except Exception as exc:  # noqa: BLE001 - the promoted model runs on; the alert says so
            message = f"rollback from {bad_name} ({bad_hash}) to {name} ({sha}) failed, {bad_name} runs on: {exc}"
            log.error("%s", message)
            d.reporter.raise_alert("rollback", True, message, "critical", repeat=True)
            raise CommandRejected(message) from exc
        d.remember_running("rollback")
        reasons = "; ".join(b[3] for b in breaches) or "abort command"
        message = f"rolled back from {bad_name} ({bad_hash}) to {name} ({sha}): {reasons}"
        log.warning("%s", message)
        first = breaches[0] if breaches else None
        d.reporter.raise_alert("rollback", True, message, "critical", repeat=True,
                               metric=first[0] if first else None, value=round(first[1], 4) if first else None,
                               threshold=first[2] if first else None)
        d.publisher.set_status(d.status())
        return {"rolled_back": bad_name, "bundle": name, "bundle_hash": sha, "why": why,
                "after": {k: (None if v is None else round(v, 4)) for k, v in after.items()},
                "before": {k: (None if v is None else round(v, 4)) for k, v in watch.before.items()}}

    def _failed(self, run: ShadowRun) -> None:
        self.run = None
        run.stop()
        self._close_later([run.detector], [run.model])
        message = f"shadow of {run.name} stopped, the live model runs on: {type(run.error).__name__}: {run.error}"
        self.daemon.reporter.raise_alert("shadow_failed", True, message, "warning", repeat=True)
        self.daemon.publisher.set_status(self.daemon.status())

    # -- reporting -----------------------------------------------------------------------------
    def describe(self) -> Optional[Dict[str, Any]]:
        """The status's `shadow` block: the candidate and its state, or the promotion watched."""
        if self.run is not None:
            return {"state": "running", "bundle": self.run.name, "bundle_hash": self.run.model.bundle_hash}
        if self.watch is not None and self.previous is not None:
            return {"state": "watching", "previous_bundle": self.previous[0], "previous_bundle_hash": self.previous[1]}
        return None

    def _publish(self, state: str) -> Dict[str, Any]:
        run, d = self.run, self.daemon
        assert run is not None
        figures = run.figures()
        body = dict(figures, state=state, bundle=run.name, bundle_hash=run.model.bundle_hash,
                    live_bundle_hash=d.model.describe()["bundle_hash"], every_n_frames=run.every)
        d.publisher.publish("shadow", body)
        return figures

    def _final(self, tag: Optional[str], body: Dict[str, Any]) -> None:
        if tag is not None:
            self.daemon.publisher.publish("cmd/response", dict(body, id=tag, cmd="reload", final=True))

    def _close_later(self, detectors: List[Any], models: List[Any]) -> None:
        """Close a shadow's detector and model off the frame loop."""
        def close() -> None:
            for item in detectors + models:
                try:
                    item.close()
                except Exception:  # noqa: BLE001 - logged; nothing else uses them
                    log.exception("closing the shadow's %s failed", type(item).__name__)

        threading.Thread(target=close, name="shadow-close", daemon=True).start()

    def close(self) -> None:
        """Shutdown, after the pipeline stopped: the shadow's worker, detector and model."""
        run, self.run = self.run, None
        if run is not None:
            run.stop()
            for item in (run.detector, run.model):
                try:
                    item.close()
                except Exception:  # noqa: BLE001 - the daemon is stopping; logged
                    log.exception("closing the shadow's %s failed", type(item).__name__)
