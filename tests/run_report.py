"""What a test run leaves behind, and what it did not test (a pytest plugin, named in
tests/conftest.py):

- every process of the run carries a mark in its environment (tests.processes.RUN_MARK); one
  still alive when the run ends is killed and named, and the run fails;
- tests skipped because a tool is missing are counted in the run's last lines, with the one
  `apt-get install` that brings every tool named.
"""
from __future__ import annotations

import os
import re
import uuid

from processes import RUN_MARK, leftovers

_INSTALL = re.compile(r"\((?:sudo )?apt(?:-get)? install (?:-y )?(?:--no-install-recommends )?([^)]+)\)")
_LINGER_S = 10.0  # how long a child of the run has to finish exiting once the last test is over
_LEFT: dict = {}  # pid -> command line of the processes that outlived the run


def pytest_configure(config) -> None:
    # A mark of this run in every child's environment, so that one reparented to init (its parent
    # killed) is still found at the end. A run inside a test gets a mark of its own.
    os.environ[RUN_MARK] = uuid.uuid4().hex


def pytest_sessionfinish(session, exitstatus) -> None:
    """Fail the run when a process it started is still alive: a broker, monitor or daemon that
    outlived its test. They are killed, and named."""
    import signal
    import threading

    mark, me = os.environ.get(RUN_MARK, ""), os.getpid()
    if not mark:
        return
    left = leftovers(mark, me)
    gone = threading.Event()  # a bounded wait for children that are still exiting
    waited = 0.0
    while left and waited < _LINGER_S:
        gone.wait(0.2)
        waited += 0.2
        left = leftovers(mark, me)
    if not left:
        return
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _LEFT.update(left)  # named in the run's last lines (pytest_terminal_summary comes after)
    session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Say what the run left behind (processes, killed), and what did not run: tests skipped
    for a missing tool, how many, and the one command that installs every tool named."""
    if _LEFT:
        terminalreporter.section("processes left behind", red=True)
        for pid, cmd in sorted(_LEFT.items()):
            terminalreporter.write_line(f"pid {pid}: {cmd}")
        terminalreporter.write_line(f"{len(_LEFT)} processes started by the tests outlived them (killed now): "
                                    f"the run fails", red=True, bold=True)
    reasons: dict = {}
    packages: list = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
        found = _INSTALL.search(reason)
        if found is None:
            continue
        what = reason[:found.start()].strip()
        what = what[len("Skipped: "):] if what.startswith("Skipped: ") else what
        reasons[what] = reasons.get(what, 0) + 1
        for name in found.group(1).split():
            if name not in packages and not name.startswith("-"):
                packages.append(name)
    if not reasons:
        return
    terminalreporter.section("not tested here", yellow=True)
    for what, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{count} skipped: {what}")
    terminalreporter.write_line(f"{sum(reasons.values())} tests skipped for a missing tool; to run them: "
                                f"apt-get install -y {' '.join(packages)}", yellow=True, bold=True)
