"""Child processes of the tests: started in a process group of their own, stopped with SIGTERM
(what service managers send), and killed as a group on any failure or timeout, so no broker,
monitor or daemon outlives its test.

`sigint` sets how the child starts, through a small launcher that execs it:
- "default": SIGINT raises KeyboardInterrupt, as in a command started in the foreground;
- "ignored": SIGINT ignored, as a background job of a non-interactive shell inherits it
  (`cmd &` in a script, `nohup cmd &`): a command must install its own handler to see it;
- "inherit": whatever the test run has.

`tests/conftest.py` marks every process of the run (EDGE_SDK_TEST_RUN in the environment) and
fails the run when one is still alive at its end (`leftovers`).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

RUN_MARK = "EDGE_SDK_TEST_RUN"
LAUNCHER = ("import os, signal, sys; "
            "signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == 'ignored' else signal.SIG_DFL); "
            "os.execvp(sys.argv[2], sys.argv[2:])")
HOW = ("default", "ignored")  # the two ways a command is started: foreground, background job


def command(argv: Sequence[str], sigint: str = "inherit") -> List[str]:
    """`argv` as run with SIGINT set as `sigint` says."""
    if sigint == "inherit":
        return list(argv)
    if sigint not in HOW:
        raise ValueError(f"sigint={sigint!r}: give 'default', 'ignored' or 'inherit'")
    return [sys.executable, "-c", LAUNCHER, sigint, *argv]


def edge_sdk(*args: str) -> List[str]:
    """The `edge-sdk` command line, run by this interpreter."""
    code = "import sys; from edge_sdk.cli import main; sys.argv[0] = 'edge-sdk'; main()"
    return [sys.executable, "-c", code, *args]


def spawn(argv: Sequence[str], sigint: str = "inherit", **popen: Any) -> subprocess.Popen:
    """Start `argv` in a new process group (its children with it)."""
    popen.setdefault("start_new_session", True)
    return subprocess.Popen(command(argv, sigint), **popen)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process's whole group (its own children too) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
        proc.communicate(timeout=10)


def finish(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60.0,
           stdin: Optional[str] = None) -> Tuple[Any, Any]:
    """Send `sig` to the process (not its group: the process stops its own children) and wait
    for its exit; past `timeout`, kill the group and fail. Returns (stdout, stderr)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
    try:
        return proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError(f"pid {proc.pid} did not exit within {timeout:g} s of {signal.Signals(sig).name}") from None


@contextlib.contextmanager
def running(argv: Sequence[str], sigint: str = "inherit", **popen: Any) -> Iterator[subprocess.Popen]:
    """`spawn` for a `with` block: whatever happens in it, the group is gone at its end."""
    proc = spawn(argv, sigint, **popen)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.communicate(timeout=15)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                pass
        kill_group(proc)


def _environ(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _stat(pid: str) -> Optional[Tuple[str, int]]:
    """(state, parent pid) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def carrying(variable: str, value: str) -> List[int]:
    """Live processes whose environment has `variable=value`: the way to find what a server
    started and detached from its group (RabbitMQ's epmd daemonizes)."""
    needle = f"{variable}={value}".encode() + b"\0"
    found = []
    for entry in os.listdir("/proc") if Path("/proc/self/environ").exists() else []:
        if entry.isdigit() and int(entry) != os.getpid() and needle in _environ(entry):
            stat = _stat(entry)
            if stat is not None and stat[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def leftovers(mark: str, root: int) -> Dict[int, str]:
    """Live processes of this run, other than `root` (the test run itself): those whose
    environment carries `RUN_MARK=mark`, and every descendant of `root`. pid -> command line."""
    if not Path("/proc/self/environ").exists():
        return {}
    needle = f"{RUN_MARK}={mark}".encode() + b"\0"
    parents: Dict[int, int] = {}
    found: Dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == root:
            continue
        stat = _stat(entry)
        if stat is None or stat[0] in ("Z", "X"):
            continue  # gone, or a zombie its parent has still to reap
        parents[int(entry)] = stat[1]
        if needle in _environ(entry):
            found[int(entry)] = ""
    for pid in parents:
        up, steps = parents.get(pid), 0
        while up is not None and up != root and steps < 256:  # a bound: a loop in /proc is no loop here
            up, steps = parents.get(up), steps + 1
        if up == root:
            found[pid] = ""
    for pid in found:
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
        except OSError:
            found[pid] = "?"
    return found


def complete(argv: Sequence[str], timeout: float, sigint: str = "inherit", **popen: Any) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, capture_output=True, text=True)` in a process group of its own:
    past `timeout` the whole group is killed (what it started too), then the test fails."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("text", True)
    proc = spawn(argv, sigint, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError(f"{' '.join(map(str, argv))[:200]} did not end within {timeout:g} s (its group killed)") from None
    finally:
        kill_group(proc)  # the command ended; anything it left in its group goes with it
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
