"""The run's own report (tests/run_report.py), on small runs of their own: a process that
outlives its test fails the run and is killed; tests skipped for a missing tool are counted with
the command that installs it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from processes import carrying, complete

TESTS = Path(__file__).resolve().parent


def run(folder: Path, body: str) -> subprocess.CompletedProcess:
    (folder / "test_sample.py").write_text(body)
    env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return complete([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "run_report",
                     str(folder)], timeout=120, cwd=str(folder), env=env)


def test_a_process_that_outlives_its_test_fails_the_run_and_is_killed(tmp_path: Path) -> None:
    tag = f"outlived-{os.getpid()}"
    out = run(tmp_path, f'''
import os, subprocess, sys

def test_leaves_a_server_behind():
    # detached, unwaited: as a broker whose test forgot it
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                     env=dict(os.environ, OUTLIVED="{tag}"))
''')
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 passed" in out.stdout and "1 processes started by the tests outlived them" in out.stdout, out.stdout
    assert "time.sleep(600)" in out.stdout
    assert carrying("OUTLIVED", tag) == [], "the process left behind is killed"


def test_a_run_that_cleans_up_passes(tmp_path: Path) -> None:
    out = run(tmp_path, '''
import subprocess, sys

def test_stops_what_it_started():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    proc.terminate()
    proc.wait(30)
''')
    assert out.returncode == 0 and "outlived" not in out.stdout, out.stdout + out.stderr


def test_skips_for_a_missing_tool_are_counted_with_the_command_that_installs_it(tmp_path: Path) -> None:
    out = run(tmp_path, '''
import pytest

@pytest.mark.parametrize("n", [1, 2])
def test_broker(n):
    pytest.skip("mosquitto is not installed (apt-get install -y mosquitto)")

def test_second_broker():
    pytest.skip("rabbitmq-server is not installed (apt-get install -y rabbitmq-server)")

def test_video():
    pytest.skip("ffprobe is not installed (sudo apt install python3-gi ffmpeg)")

def test_other():
    pytest.skip("not on this platform")

def test_runs():
    pass
''')
    assert out.returncode == 0, out.stdout + out.stderr
    tail = out.stdout.strip().splitlines()[-6:]
    assert "2 skipped: mosquitto is not installed" in tail, tail
    assert "1 skipped: rabbitmq-server is not installed" in tail and "1 skipped: ffprobe is not installed" in tail
    assert ("4 tests skipped for a missing tool; to run them: apt-get install -y mosquitto rabbitmq-server "
            "python3-gi ffmpeg") in tail, tail
    assert tail[-1].startswith("1 passed, 5 skipped"), tail


def test_a_run_without_such_skips_says_nothing_of_them(tmp_path: Path) -> None:
    out = run(tmp_path, "import pytest\n\ndef test_skip():\n    pytest.skip('not on this platform')\n")
    assert out.returncode == 0 and "not tested here" not in out.stdout, out.stdout
