"""Remote commands on `edge-sdk/<device_id>/cmd`: an allow-list, schema validation, optional HMAC,
a replay window that survives restarts, and rate limits.

A command is a JSON object (schema `edge-sdk/cmd/1`):

    {"schema": "edge-sdk/cmd/1", "id": "42", "cmd": "set", "args": {"telemetry_interval": 2},
     "device_id": "cam-entrance", "ts": 1700000000000, "hmac": "<hex>"}

Only `ping`, `reload`, `set` and `snapshot` exist. Every command is answered on
`cmd/response` with the same `id`: `ok` and a `result`, or an `error` with its `reason` (one of
`REASONS`, for programs). A rejected command changes nothing: handlers check all their
arguments before they apply any.

With a shared secret, `hmac` is HMAC-SHA256 (hex) over the canonical JSON of the command
without its `hmac` field (`json.dumps(cmd, sort_keys=True, separators=(",", ":"))`, non-ASCII
characters as json.dumps' default `\\uXXXX` escapes; edge_sdk.telemetry.signing), `device_id`
must be this device's (it is signed: a command signed for another device is refused,
`wrong_device`, also where a fleet shares one secret), `ts` (ms) must be within `max_skew_s` of
the device clock and an `id` is accepted once — also across
restarts, when the processor is given a replay file.

Payloads are bounded in size and nesting depth before they are parsed; NaN, infinities,
integers beyond int64 and objects that name a key twice are refused. Authenticated commands are rate-limited per kind (token
buckets, `LIMITS`); refusals are answered while the answer budget (`ANSWERS`) lasts, so a flood
of garbage is not echoed back as a flood of responses. Nothing a payload holds makes
`handle()` raise.
"""
from __future__ import annotations

import hmac as _hmac
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from edge_sdk.errors import ConfigError, EdgeSdkError
from edge_sdk.telemetry import schemas
from edge_sdk.fsutil import move_corrupt_aside, sqlite_error_kind
from edge_sdk.telemetry.signing import MAX_DEPTH, MAX_PAYLOAD, canonical, loads_command, sign, signature
from edge_sdk.validate import UntrustedInput

__all__ = ["ALLOWED", "LIMITS", "MAX_DEPTH", "MAX_PAYLOAD", "REASONS", "CommandProcessor", "CommandRejected",
           "RateLimited", "ReplayWindow", "TokenBucket", "UnknownStream", "canonical", "sign"]

log = logging.getLogger(__name__)

ALLOWED = ("ping", "reload", "set", "snapshot", "promote", "abort")
# why a command was refused, in its response's `reason` (edge_sdk/schemas/cmd_response.json)
REASONS = ("malformed", "invalid", "unsigned", "bad_signature", "wrong_device", "stale", "replay", "not_enabled",
           "rate_limited", "refused", "internal")
# per kind: (tokens per second, burst). A snapshot writes a JPEG, a reload loads a model.
LIMITS: Dict[str, Tuple[float, float]] = {"ping": (5.0, 20.0), "set": (2.0, 10.0), "reload": (0.2, 5.0),
                                          "snapshot": (1.0, 5.0), "promote": (0.2, 5.0), "abort": (1.0, 5.0)}
ANSWERS: Tuple[float, float] = (10.0, 50.0)  # error responses per second, burst
KEEP_S = 3600.0  # used ids are kept this long beyond max_skew_s (a clock stepped back stays covered)
Handler = Callable[[Dict[str, Any]], Dict[str, Any]]


class CommandRejected(EdgeSdkError, ValueError):
    """A command that is refused; the message goes back in the error response, and `reason`
    (one of REASONS; "refused" when a handler says no) with it."""

    exit_code = 2

    def __init__(self, message: str, reason: str = "refused") -> None:
        super().__init__(message)
        self.reason = reason


class UnknownStream(CommandRejected):
    """A command for a stream this device does not run; the message names the ones it runs."""

    def __init__(self, stream: str, known: List[str]) -> None:
        super().__init__(f"unknown stream {stream!r}: this device runs {', '.join(repr(k) for k in known)}; "
                         "name one of them, or leave `stream` out to apply the command to all")
        self.stream = stream
        self.known = list(known)


class RateLimited(CommandRejected):
    """An authenticated command over its kind's rate limit: dropped, counted, and answered."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "rate_limited")


class TokenBucket:
    """`rate` tokens per second up to `burst`; `take()` spends one if there is one."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._tokens = self.burst
        self._t = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
        self._t = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def wait_s(self) -> float:
        """Seconds until the next token."""
        return max(0.0, (1.0 - self._tokens) / self.rate) if self.rate > 0 else float("inf")


class ReplayWindow:
    """Ids of accepted signed commands, with their signed `ts`, kept `keep_ms` past their ts
    (older commands fail the clock check anyway). With `path`, kept in a small SQLite file of
    its own, written before the command runs, so a restart forgets nothing.

    A store that cannot be read (corrupt, truncated) is moved aside with a warning and a fresh
    one started; commands signed before that moment are then refused (`not_before_ms`), since
    the ids they may have used are lost. Any other failure to open it (locked by another
    process, no permission, full disk) is a ConfigError naming the file, which is left alone.
    While running, an id that cannot be recorded (or a record that cannot be read) refuses the
    command (fail closed); pruning that fails is logged and retried later.
    """

    def __init__(self, path: Optional[Path], keep_ms: int, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path) if path is not None else None
        self.keep_ms = int(keep_ms)
        self._clock = clock
        self._mem: Dict[str, int] = {}
        self.db: Optional[sqlite3.Connection] = None
        self.not_before_ms = 0
        self._writes = 0
        if self.path is not None:
            self._open()

    def _connect(self) -> sqlite3.Connection:
        assert self.path is not None
        db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("CREATE TABLE IF NOT EXISTS used (id TEXT PRIMARY KEY, ts INTEGER NOT NULL)")
            db.execute("SELECT COUNT(*) FROM used").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def _open(self) -> None:
        """Open (or create) the file. Only a file that is not a readable database is moved
        aside; any other failure (locked, no permission, full disk) is a ConfigError naming the
        file, and the file is left as it is."""
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create {self.path.parent} for the command replay file: {exc}; "
                              "check the folder's permissions or set [mqtt] queue_dir") from exc
        try:
            self.db = self._connect()
        except sqlite3.Error as exc:
            if sqlite_error_kind(exc) != "corrupt" or not self.path.is_file():
                raise self._open_error(exc) from exc
            aside = self._move_aside(exc)
            self.not_before_ms = int(self._clock() * 1000)
            log.warning("command replay file %s is unreadable (%s); moved to %s, started a fresh one and "
                        "refusing commands signed before now", self.path, exc, aside.name)
            try:
                self.db = self._connect()
            except sqlite3.Error as again:
                raise self._open_error(again) from again
        except OSError as exc:
            raise self._open_error(exc) from exc
        self._prune()

    def _open_error(self, exc: BaseException) -> ConfigError:
        if isinstance(exc, sqlite3.Error) and sqlite_error_kind(exc) == "full":
            return ConfigError(f"the disk holding the command replay file {self.path} is full ({exc}); "
                               "free space there or set [mqtt] queue_dir to another disk")
        return ConfigError(f"cannot open the command replay file {self.path} ({exc}); check that no other "
                           "process holds it, the folder's permissions and free space, or set [mqtt] queue_dir")

    def _move_aside(self, exc: BaseException) -> Path:
        """Keep a corrupt file (and its write-ahead log) for inspection; ConfigError if it cannot be moved."""
        assert self.path is not None
        try:
            return move_corrupt_aside(self.path, self._clock())
        except OSError as err:
            raise ConfigError(f"the command replay file {self.path} is corrupt ({exc}) and cannot be moved aside "
                              f"({err}); delete it, check the folder's permissions or set [mqtt] queue_dir") from err

    def _prune(self) -> None:
        """Forget ids past the window. Housekeeping: a failure (full disk) is logged, not raised —
        the ids stay recorded, so nothing is replayable."""
        cutoff = int(self._clock() * 1000) - self.keep_ms
        if self.db is not None:
            try:
                self.db.execute("DELETE FROM used WHERE ts < ?", (cutoff,))
            except sqlite3.Error as exc:
                log.warning("cannot prune the command replay file %s (%s); old ids are kept", self.path, exc)
        else:
            for cid in [c for c, ts in self._mem.items() if ts < cutoff]:
                del self._mem[cid]

    def __contains__(self, cid: str) -> bool:
        """Whether `cid` was used; CommandRejected (fail closed) when the record cannot be read."""
        if self.db is not None:
            try:
                return self.db.execute("SELECT 1 FROM used WHERE id = ?", (cid,)).fetchone() is not None
            except sqlite3.Error as exc:
                log.error("cannot read the command replay file %s (%s); refusing signed commands", self.path, exc)
                raise CommandRejected(f"the command replay record {self.path} cannot be read ({exc}), so the "
                                      "command was not run") from exc
        return cid in self._mem

    def add(self, cid: str, ts: int) -> None:
        """Record `cid` durably; raises CommandRejected when it cannot be recorded."""
        self._writes += 1
        if self._writes % 256 == 0:
            self._prune()
        if self.db is None:
            self._mem[cid] = ts
            return
        try:
            self.db.execute("INSERT OR REPLACE INTO used (id, ts) VALUES (?, ?)", (cid, ts))
        except sqlite3.Error as exc:
            log.error("cannot record command id %r in %s (%s); the command is refused", cid, self.path, exc)
            raise CommandRejected(f"the command id could not be recorded in {self.path} ({exc}), so it was not "
                                  "run; free disk space on the device") from exc

    def close(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except sqlite3.Error:
                pass  # nothing left to save
            self.db = None


class CommandProcessor:
    """Validates and dispatches commands; `handle(payload)` never raises.

    Counters: `accepted` (run), `rejected` (refused: invalid, unsigned, replayed, or refused
    by its handler), `dropped` (over the rate limit of its kind, or lost by the caller's
    inbox), `unanswered` (refusals beyond the answer budget: no response sent).
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        secret: Optional[bytes] = None,
        max_skew_s: float = 300.0,
        device_id: Optional[str] = None,
        clock: Callable[[], float] = time.time,
        replay_path: Optional[Path] = None,
        limits: Optional[Mapping[str, Tuple[float, float]]] = None,
        answers: Tuple[float, float] = ANSWERS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        unknown = set(handlers) - set(ALLOWED)
        if unknown:
            raise ValueError(f"no such commands in the allow-list: {sorted(unknown)}")
        if secret is not None and not device_id:
            raise ValueError("checking signed commands needs this device's id (device_id=)")
        self.handlers = dict(handlers)
        self.secret = secret
        self.device_id = device_id  # a command naming another device is refused
        self.max_skew_s = float(max_skew_s)
        self._clock = clock
        self.used = ReplayWindow(replay_path if secret is not None else None,
                                 int((self.max_skew_s + KEEP_S) * 1000), clock)
        limits = LIMITS if limits is None else limits
        self._buckets = {name: TokenBucket(rate, burst, monotonic) for name, (rate, burst) in limits.items()}
        self._answers = TokenBucket(answers[0], answers[1], monotonic)
        self.current: Optional[Dict[str, Any]] = None  # the command whose handler runs now
        self.accepted = 0
        self.rejected = 0
        self.dropped = 0
        self.unanswered = 0

    @property
    def auth(self) -> str:
        """"hmac" when commands must be signed, "none" when any broker client may send them."""
        return "hmac" if self.secret is not None else "none"

    def counters(self) -> Dict[str, int]:
        return {"accepted": self.accepted, "rejected": self.rejected, "dropped": self.dropped,
                "unanswered": self.unanswered}

    def decode(self, payload: bytes) -> Dict[str, Any]:
        """The payload as a JSON object, bounded before parsing; CommandRejected otherwise."""
        try:
            command = loads_command(payload)
        except UntrustedInput as exc:
            raise CommandRejected(str(exc), "malformed") from None
        if not isinstance(command, dict):
            raise CommandRejected("command must be a JSON object", "malformed")
        return command

    def check(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """Schema, signature, clock and replay checks of a decoded command."""
        problems = schemas.errors(command, "edge-sdk/cmd/1")
        if problems:
            raise CommandRejected("invalid command: " + "; ".join(problems[:3]), "invalid")
        target = command.get("device_id")
        if self.secret is not None:
            given = command.get("hmac")
            if not isinstance(given, str) or target is None:
                raise CommandRejected("this device requires signed commands: add device_id, ts and hmac "
                                      "(edge_sdk.telemetry.signing.sign)", "unsigned")
            if not _hmac.compare_digest(given, signature(command, self.secret)):
                raise CommandRejected("bad hmac: the command was not signed with this device's secret", "bad_signature")
        if target is not None and self.device_id is not None and target != self.device_id:
            raise CommandRejected(f"the command is for device {target!r}, this is {self.device_id!r}; sign it for "
                                  "this device", "wrong_device")
        if self.secret is not None:
            ts = command.get("ts")
            if not isinstance(ts, int) or abs(self._clock() * 1000 - ts) > self.max_skew_s * 1000:
                raise CommandRejected(f"ts is missing or more than {self.max_skew_s:g} s away from the device clock",
                                      "stale")
            if ts < self.used.not_before_ms:
                raise CommandRejected("command signed before the replay record was reset; sign it again", "stale")
            if command["id"] in self.used:
                raise CommandRejected(f"command id {command['id']!r} was already used (replay)", "replay")
        return command

    def parse(self, payload: bytes) -> Dict[str, Any]:
        """The validated command, or CommandRejected."""
        return self.check(self.decode(payload))

    def handle(self, payload: bytes) -> Optional[Dict[str, Any]]:
        """A response body {id, cmd, ok, result | error}, or None for a refusal beyond the
        answer budget (counted in `unanswered`)."""
        cid: Optional[str] = None
        name: Optional[str] = None
        authenticated = False
        try:
            command = self.decode(payload)
            # echo the id and name when they are readable, even if the command is refused
            if isinstance(command.get("id"), str) and len(command["id"]) <= 128:
                cid = command["id"]
            if isinstance(command.get("cmd"), str) and len(command["cmd"]) <= 32:
                name = command["cmd"]
            self.check(command)
            handler = self.handlers.get(command["cmd"])
            if handler is None:
                raise CommandRejected(f"command {command['cmd']!r} is not enabled on this device", "not_enabled")
            bucket = self._buckets.get(command["cmd"])
            if bucket is not None and not bucket.take():
                raise RateLimited(f"rate limit: at most {bucket.rate:g} {command['cmd']} per second "
                                  f"(burst {bucket.burst:g}); retry in {bucket.wait_s():.1f} s")
            if self.secret is not None:
                self.used.add(command["id"], command["ts"])
            authenticated = True
            self.current = command
            try:
                result = handler(dict(command.get("args") or {}))
            finally:
                self.current = None
        except RateLimited as exc:
            self.dropped += 1
            return self._refusal(cid, name, str(exc), exc.reason, budgeted=True)
        except (EdgeSdkError, ValueError) as exc:
            self.rejected += 1
            return self._refusal(cid, name, str(exc) or type(exc).__name__, getattr(exc, "reason", "refused"),
                                 budgeted=not authenticated)
        except Exception as exc:  # noqa: BLE001 - a handler bug must not stop the device; logged in full
            log.exception("command %s %s failed", name, cid)
            self.rejected += 1
            return self._refusal(cid, name, f"internal error: {type(exc).__name__}: {exc}", "internal", budgeted=False)
        self.accepted += 1
        return {"id": cid, "cmd": name, "ok": True, "result": result}

    def _refusal(self, cid: Optional[str], name: Optional[str], error: str, reason: str,
                 budgeted: bool) -> Optional[Dict[str, Any]]:
        if budgeted and not self._answers.take():
            self.unanswered += 1
            return None
        return {"id": cid, "cmd": name, "ok": False, "error": error, "reason": reason}

    def close(self) -> None:
        self.used.close()
