"""A fleet rollout, step by step (edge_sdk.rollout.plan makes the steps): each step's devices run
the candidate as a shadow together, each is gated on its `shadow` figures once it has compared
`shadow_frames` frames, and only when all pass are they promoted, each then watched by its own
daemon until its status shows the new bundle alone.

Each device is driven from what its retained status says, not from what was sent: a device that
restarts (killed, power cut) comes back with its configured bundle and is sent the shadow again;
a device that already runs the new bundle (a rollout resumed) is left alone; a command whose
answer never came (the broker went away) is sent again. A failed gate, a refused command or a
rollback alert stops the rollout: the running shadows are aborted and every device already
promoted goes back to the bundle its status showed before the rollout (RolloutFailed, exit 6).
Devices offline or not answering for `timeout_s` stop it too (RolloutTimeout, exit 13): the
shadows of the step are aborted, the promoted devices keep the new bundle, and the same command
goes on from there. A device whose window holds fewer than `min_detections` detections (the two
models' together) cannot decide a gate on detections (a dark or empty scene, where a blind
candidate agrees with the live model): it is waited for up to `evidence_timeout_s`, then the step stops undecided
(RolloutUndecided, exit 15) as a timeout does; nothing of the step is promoted. A stop by SIGTERM or SIGINT (KeyboardInterrupt) ends it the same way, the
shadows still loading waited for at most STOP_WAIT_S (`edge-sdk rollout` then exits 14).
"""
from __future__ import annotations

import fnmatch
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from edge_sdk.errors import ConfigError, RolloutFailed, RolloutTimeout, RolloutUndecided
from edge_sdk.rollout.link import Link
from edge_sdk.rollout.plan import DEFAULT_MIN_DETECTIONS, Gate, RolloutState, first_failure, make_plan, undecided

UNDECIDED = "undecided: "  # the wait of a device whose scene shows too little to decide

RESEND_S = 10.0  # a command unanswered this long is sent again
# stopped by a signal: how long the shadows still loading are waited for before the step's
# shadows are aborted (docker stop gives 10 s before SIGKILL, systemd 90 s)
STOP_WAIT_S = 5.0


class _Failure(Exception):
    def __init__(self, device: str, metric: str, value: Any, why: str) -> None:
        super().__init__(f"{device}: {metric} {value if value is not None else '-'} ({why})")
        self.device, self.metric, self.value, self.why = device, metric, value, why


def _value(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) else str(x)


class Rollout:
    """`run(pattern, canary, waves)` → the summary; raises RolloutFailed / RolloutTimeout.
    `say(event)`: each step as a dict with an `event` key and a `text` a person reads."""

    def __init__(self, link: Link, bundle: str, gates: Sequence[Gate], shadow_frames: int, timeout_s: float,
                 state: RolloutState, say: Callable[[Dict[str, Any]], None],
                 fetch: Optional[Dict[str, str]] = None, clock: Callable[[], float] = time.monotonic,
                 min_detections: int = DEFAULT_MIN_DETECTIONS, evidence_timeout_s: Optional[float] = None) -> None:
        self.link, self.bundle, self.gates = link, bundle, list(gates)
        self.shadow_frames, self.timeout_s, self.state = shadow_frames, timeout_s, state
        self.min_detections = int(min_detections)
        self.evidence_timeout_s = timeout_s if evidence_timeout_s is None else float(evidence_timeout_s)
        self._short_since: Dict[str, float] = {}  # device -> when its figures were first too thin to decide
        self.say_event, self.fetch, self.clock = say, fetch, clock
        self._start = clock()
        self._pending: Dict[str, Tuple[str, str, Any, float]] = {}  # device -> (cmd, id, started_ts, sent at)

    def say(self, event: str, text: str, **fields: Any) -> None:
        self.say_event(dict({"event": event, "t": round(self.clock() - self._start, 2), "text": text}, **fields))

    # -- the whole rollout ---------------------------------------------------------------------
    def run(self, pattern: str, canary: int, waves: Sequence[float]) -> Dict[str, Any]:
        st = self.state
        if st.outcome is not None and st.outcome.get("result") != "done":
            raise RolloutFailed(f"this rollout already stopped: {st.outcome.get('message')}; remove the state file "
                                f"{st.path} to start it again")
        if not st.started:
            devices = [d for d in self.link.online() if fnmatch.fnmatchcase(d, pattern)]
            if not devices:
                raise ConfigError(f"--devices {pattern!r}: no online device matches (online: "
                                  f"{', '.join(self.link.online()) or 'none'})")
            st.steps = make_plan(devices, canary, waves)
            st.previous = {d: self.link.status(d).get("bundle") for d in devices}
            st.save(self.bundle)
            self.say("plan", "; ".join(f"{s['role']}: {', '.join(s['devices'])}" for s in st.steps),
                     steps=st.steps, previous=st.previous)
        else:
            self._reverify()
            if st.done < len(st.steps):
                self.say("resume", f"resuming at {st.steps[st.done]['role']} ({st.done} of {len(st.steps)} steps "
                                   f"done, {len(st.promoted)} devices promoted)", done=st.done)
        while st.done < len(st.steps):
            step = st.steps[st.done]
            began = self.clock()
            try:
                self._step(step["role"], step["devices"])
            except _Failure as failure:
                self._undo(step["devices"], failure, step["role"])
            except (RolloutTimeout, RolloutUndecided) as stop:
                if isinstance(stop, RolloutUndecided):
                    self.say("undecided", f"{step['role']}: {stop}", role=step["role"])
                self._abort_shadows(step["devices"])
                raise
            except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGINT through edge_sdk.cli._stop
                self.say("stopped", f"{step['role']}: stopped; the shadows of the step are aborted, the promoted "
                                    f"devices keep {self.bundle}", role=step["role"])
                self._abort_shadows(step["devices"], min(self.timeout_s, STOP_WAIT_S))
                raise
            st.seconds.append(round(self.clock() - began, 2))
            st.done += 1
            st.save(self.bundle)
            self.say("step", f"{step['role']} done in {st.seconds[-1]:.1f} s: {', '.join(step['devices'])} run "
                             f"{self.bundle}", role=step["role"], seconds=st.seconds[-1])
        st.outcome = {"result": "done", "message": f"every device runs {self.bundle}"}
        st.save(self.bundle)
        devices = [d for s in st.steps for d in s["devices"]]
        self.say("done", f"{len(devices)} devices run {self.bundle}", devices=devices, seconds=st.seconds)
        return {"bundle": self.bundle, "devices": devices, "steps": st.steps, "seconds": st.seconds}

    def _reverify(self) -> None:
        """A rollout run again: every device of the steps done must still run the bundle (a daemon
        that restarted may have gone back to its configured bundle, an offline one cannot say).
        The first step holding one that does not is done again, from there on."""
        st = self.state
        devices = [d for step in st.steps[:st.done] for d in step["devices"]]
        self.link.wait(lambda: all(self.link.status(d) for d in devices), min(self.timeout_s, 10.0))
        again: Optional[int] = None
        for index, step in enumerate(st.steps[:st.done]):
            for device in step["devices"]:
                status = self.link.status(device)
                if status.get("state") == "online" and status.get("bundle") == self.bundle and not status.get("shadow"):
                    continue
                shown = (f"runs {status.get('bundle')}" if status.get("state") == "online"
                         else f"is {status.get('state', 'unknown')}: not verified")
                self.say("drifted", f"{step['role']}: {device} {shown}, not {self.bundle}: the step runs again",
                         role=step["role"], device=device)
                if device in st.promoted:
                    st.promoted.remove(device)
                again = index if again is None else min(again, index)
        if again is not None:
            st.done, st.outcome = again, None
            del st.seconds[again:]
            st.save(self.bundle)

    # -- one step ------------------------------------------------------------------------------
    def _step(self, role: str, devices: List[str]) -> None:
        self.say("shadow", f"{role}: shadow of {self.bundle} on {', '.join(devices)}", role=role, devices=devices)
        passed: Dict[str, bool] = {}
        waiting: Dict[str, str] = {}
        deadline = self.clock() + self.timeout_s
        promoting = False
        while True:
            waiting.clear()
            for device in devices:
                situation = self._look(device, role, passed, promoting)
                if situation != "done":
                    waiting[device] = situation
            if not waiting:
                return
            if not promoting and all(passed.get(d) or waiting.get(d) is None for d in devices):
                promoting = True
                self.say("promote", f"{role}: every device passed {', '.join(map(str, self.gates))}; promoting",
                         role=role)
                continue
            thin = {d: why for d, why in waiting.items() if why.startswith(UNDECIDED)}
            for device, since in self._short_since.items():
                if device in thin and self.clock() - since > self.evidence_timeout_s:
                    raise RolloutUndecided(
                        f"{device}: {thin[device][len(UNDECIDED):]} after {self.evidence_timeout_s:g} s; nothing of "
                        f"the step was promoted (the earlier steps' devices keep {self.bundle}); run the same "
                        "command again when the scene shows more, or lower --min-detections")
            if self.clock() > deadline and len(thin) < len(waiting):  # a device that answers with thin figures is no timeout
                blocking = {d: why for d, why in waiting.items() if not passed.get(d) and d not in thin} or waiting
                raise RolloutTimeout(f"{role}: after {self.timeout_s:g} s still waiting for " + "; ".join(
                    f"{d} ({why})" for d, why in sorted(blocking.items())) + "; the promoted devices keep "
                    f"{self.bundle}; run the same command again to go on")
            self.link.idle(0.5)

    def _look(self, device: str, role: str, passed: Dict[str, bool], promoting: bool) -> str:
        """Do what the device's status calls for; "done" once it runs the new bundle alone,
        otherwise what it waits for. Raises _Failure."""
        status = self.link.status(device)
        if status.get("state") != "online":
            return f"status {status.get('state', 'unknown')}"
        shadow = status.get("shadow") or {}
        ours = status.get("bundle") == self.bundle
        if ours and not shadow:
            self._promoted(device)
            passed[device] = True
            return "done"
        if ours and shadow.get("state") == "watching":
            self._promoted(device)
            passed[device] = True
            return "watched after its promotion"
        if shadow.get("state") == "running" and shadow.get("bundle") == self.bundle:
            if not passed.get(device):
                return self._gate(device, role, passed)
            if promoting:
                self._check_answers(device, status)
                self._command(device, status, "promote", {})
                return "promoting"
            return "passed; waiting for the others"
        if shadow:
            return f"busy with {shadow.get('state')} {shadow.get('bundle')}"
        if self._promote_sent(device):
            rolled = self.link.alerts(device, "rollback", self._pending[device][3])
            if rolled:
                a = rolled[-1]
                raise _Failure(device, str(a.get("metric", "rollback")), a.get("value"), str(a.get("message")))
            return "promoted, waiting for its status"
        self._check_answers(device, status)
        passed[device] = False
        args: Dict[str, Any] = {"bundle": self.bundle, "shadow": True, "role": role}  # the status shows the role
        if self.fetch:
            args.update(self.fetch)
        if self._command(device, status, "reload", args):
            self.say("reload", f"{role}: {device}: reload {self.bundle} as a shadow (runs "
                               f"{status.get('bundle')})", role=role, device=device)
        return "loading the shadow"

    def _gate(self, device: str, role: str, passed: Dict[str, bool]) -> str:
        arrived = self.link.shadow(device)
        pending = self._pending.get(device)
        since = pending[3] if pending is not None else 0.0
        if arrived is None or arrived[1] < since or arrived[0].get("bundle") != self.bundle \
                or arrived[0].get("state") != "running":
            return "shadow loading"
        figures = arrived[0]
        if figures.get("frames_compared", 0) < self.shadow_frames or not figures.get("window_frames"):
            return f"{figures.get('frames_compared')}/{self.shadow_frames} frames compared"
        thin = undecided(self.gates, figures, self.min_detections)
        if thin is not None:
            self._short_since.setdefault(device, self.clock())
            return UNDECIDED + thin
        self._short_since.pop(device, None)
        failed = first_failure(self.gates, figures)
        if failed is not None:
            metric, value, gate = failed
            raise _Failure(device, metric, value, f"gate {gate}")
        passed[device] = True
        shown = {g.metric: g.value(figures) for g in self.gates}
        self.say("passed", f"{role}: {device} passed after {figures['frames_compared']} frames: " + ", ".join(
            f"{k} {_value(v)}" for k, v in shown.items()), role=role, device=device, figures=shown,
                 frames=figures["frames_compared"])
        return "passed; waiting for the others"

    def _command(self, device: str, status: Dict[str, Any], cmd: str, args: Dict[str, Any]) -> bool:
        """Send `cmd` unless it was sent to this run of the daemon and is answered or recent."""
        pending = self._pending.get(device)
        if pending is not None and pending[0] == cmd and pending[2] == status.get("started_ts"):
            if self.link.responses(pending[1]) or self.clock() - pending[3] < RESEND_S:
                return False
        cid = self.link.send(device, cmd, args)
        self._pending[device] = (cmd, cid, status.get("started_ts"), self.clock())
        return True

    def _promote_sent(self, device: str) -> bool:
        pending = self._pending.get(device)
        return pending is not None and pending[0] == "promote" and \
            pending[2] == self.link.status(device).get("started_ts")

    def _check_answers(self, device: str, status: Dict[str, Any]) -> None:
        """_Failure when the device refused the command last sent to this run of its daemon."""
        pending = self._pending.get(device)
        if pending is None or pending[2] != status.get("started_ts"):
            return
        for answer in self.link.responses(pending[1]):
            if answer.get("ok") is False:
                raise _Failure(device, pending[0], "refused", str(answer.get("error")))

    def _promoted(self, device: str) -> None:
        if device not in self.state.promoted:
            self.state.promoted.append(device)
            self.state.save(self.bundle)
            self.say("promoted", f"{device} runs {self.bundle}", device=device)

    # -- stopping ------------------------------------------------------------------------------
    def _abort_shadows(self, devices: List[str], wait_s: Optional[float] = None) -> None:
        """Abort the shadows of the bundle on `devices`, after those still loading one have it
        running or have answered that they could not (up to `wait_s`, by default the timeout)."""
        def loading(device: str) -> bool:
            pending, status = self._pending.get(device), self.link.status(device)
            if pending is None or pending[0] != "reload" or pending[2] != status.get("started_ts"):
                return False
            if status.get("state") != "online" or (status.get("shadow") or {}).get("bundle") == self.bundle:
                return False
            return not any(r.get("final") or r.get("ok") is False for r in self.link.responses(pending[1]))

        self.link.wait(lambda: not any(loading(d) for d in devices), self.timeout_s if wait_s is None else wait_s)
        for device in devices:
            shadow = self.link.status(device).get("shadow") or {}
            if shadow.get("state") == "running" and shadow.get("bundle") == self.bundle:
                self.link.send(device, "abort")
                self.say("abort", f"{device}: shadow of {self.bundle} aborted", device=device)

    def _undo(self, devices: List[str], failure: _Failure, role: str) -> None:
        st = self.state
        self.say("failed", f"{role}: {failure}", role=role, device=failure.device, metric=failure.metric,
                 value=failure.value)
        self._abort_shadows(devices)
        back = sorted(set(st.promoted) | {d for d in devices if self._promote_sent(d)})
        for device in back:
            status = self.link.status(device)
            if (status.get("shadow") or {}).get("state") == "watching":
                self.link.send(device, "abort")  # during the watch: the daemon swaps its previous model back
            elif st.previous.get(device):
                self.link.send(device, "reload", {"bundle": st.previous[device]})
            self.say("rollback", f"{device}: back to {st.previous.get(device)}", device=device)

        def returned() -> bool:
            return all(self.link.status(d).get("bundle") == st.previous.get(d)
                       and not self.link.status(d).get("shadow") for d in back)

        settled = self.link.wait(returned, self.timeout_s)
        left = [d for d in back if self.link.status(d).get("bundle") != st.previous.get(d)]
        message = (f"rollout of {self.bundle} stopped at {role}: {failure.device}: {failure.metric} "
                   f"{_value(failure.value)} ({failure.why}); "
                   + (f"rolled back {', '.join(back)}" if back else "no device had been promoted")
                   + ("" if settled else f"; still not back after {self.timeout_s:g} s: {', '.join(left)}"))
        st.outcome = {"result": "failed", "message": message, "device": failure.device, "metric": failure.metric,
                      "value": failure.value}
        st.promoted = left
        st.save(self.bundle)
        raise RolloutFailed(message)
