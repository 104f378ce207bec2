"""tools/mutate.py reads pytest's closing line: a group whose baseline ran no test (every test
skipped, none collected) is not a green baseline, and its mutants are counted as not run, never
as survivors. The oracles are pytest's own outcomes: real pytest runs of test files that pass,
fail, skip themselves or hold no test."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("mutate_tool", ROOT / "tools" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.mark.parametrize("rc,output,counts,why", [
    (0, "..s\n2 passed, 1 skipped in 0.20s\n", {"passed": 2, "skipped": 1}, None),
    (0, "sss\n3 skipped in 0.10s\n", {"skipped": 3}, "every test skipped"),
    (0, "s\n1 skipped, 2 deselected in 0.10s\n", {"skipped": 1, "deselected": 2}, "every test skipped"),
    (5, "\nno tests ran in 0.01s\n", {}, "no test collected"),
    (5, "\n4 deselected in 0.05s\n", {"deselected": 4}, "every test deselected"),
    (5, "\n1 skipped in 0.05s\n", {"skipped": 1}, "every test skipped"),  # a test file that skips itself
    (0, "\n2 deselected in 0.05s\n", {"deselected": 2}, "every test deselected"),
    (0, "x.\n1 passed, 1 xfailed, 2 warnings in 0.30s\n", {"passed": 1, "xfailed": 1}, None),
    (1, "F\n!!! stopping after 1 failures !!!\n= 1 failed, 3 passed, 2 skipped in 65.43s (0:01:05) =\n",
     {"failed": 1, "passed": 3, "skipped": 2}, None),
    (2, "E\nInterrupted: 1 error during collection\n1 error in 0.40s\n", {"error": 1}, None),
    (1, "2 errors in 0.40s\n", {"error": 2}, None),
    (0, "the output of something else\n", None, None),  # no closing line: not taken for an empty run
])
def test_the_closing_line_says_whether_a_test_ran(tool, rc: int, output: str, counts, why: Optional[str]) -> None:
    assert tool.summary_counts(output) == counts
    assert tool.no_test_ran(rc, output) == why


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """A repository of one module and test files that pass, fail, skip themselves or hold none."""
    (tmp_path / "edge_sdk").mkdir()
    (tmp_path / "edge_sdk" / "__init__.py").write_text("")
    (tmp_path / "edge_sdk" / "thing.py").write_text("VALUE = 1\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_passes.py").write_text("from edge_sdk.thing import VALUE\n\n\ndef test_value():\n    assert VALUE == 1\n")
    (tests / "test_fails.py").write_text("def test_fails():\n    assert False\n")
    (tests / "test_skips.py").write_text("import pytest\n\npytest.skip('no such library here', allow_module_level=True)\n\n\n"
                                         "def test_value():\n    assert False\n")
    (tests / "test_skips_each.py").write_text("import pytest\n\n\n@pytest.mark.skip(reason='not here')\ndef test_a():\n    pass\n\n\n"
                                              "@pytest.mark.skip(reason='not here')\ndef test_b():\n    pass\n")
    (tests / "test_empty.py").write_text("VALUE = 1\n")
    return tmp_path


@pytest.mark.parametrize("test,status", [
    ("tests/test_passes.py", "SURVIVED"),
    ("tests/test_fails.py", "killed"),
    ("tests/test_skips.py", "not run: every test skipped"),
    ("tests/test_skips_each.py", "not run: every test skipped"),
    ("tests/test_empty.py", "not run: no test collected"),
])
def test_a_run_of_real_pytest_is_read_by_its_outcome(tool, tiny_repo: Path, test: str, status: str) -> None:
    assert tool.run_tests(tiny_repo, [test], sys.executable, timeout=120)[0] == status


def test_a_group_whose_tests_all_skip_is_not_run_and_has_no_survivors(tool, tiny_repo: Path, monkeypatch, capsys) -> None:
    """Two groups over one module, one mutant each: the group whose test passes kills its mutant;
    the group whose tests are all marked skipped (pytest exits 0, as for tests that need a missing
    GStreamer) reports its baseline as having run no test, and its mutant is not run, not a
    survivor (the exit status stays 0)."""
    if shutil.which("git") is None:
        pytest.skip("the tool copies the repository with git ls-files")
    subprocess.run(["git", "init", "-q", str(tiny_repo)], check=True)
    monkeypatch.setattr(tool, "ROOT", tiny_repo)
    monkeypatch.setattr(tool, "GROUPS", {"runs": tool.Group(("edge_sdk/thing.py",), ("tests/test_passes.py",)),
                                         "skips": tool.Group(("edge_sdk/thing.py",), ("tests/test_skips_each.py",))})
    monkeypatch.setattr(tool, "MUTANTS", [tool.M("R1", "runs", "edge_sdk/thing.py", "VALUE = 1", "VALUE = 2", "off by one"),
                                          tool.M("S1", "skips", "edge_sdk/thing.py", "VALUE = 1", "VALUE = 2", "off by one")])
    assert tool.main([]) == 0
    out = capsys.readouterr().out
    assert "-- skips: baseline ran no test (every test skipped): its 1 mutant(s) not run" in out
    assert "1 mutants run: 1 killed, 0 survived, 1 not run (1 baseline: every test skipped)" in out
    assert "SURVIVED" not in out
