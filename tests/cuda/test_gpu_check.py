"""bench/gpu_check.py: the whole check list runs (on the fake CUDA here), and without a GPU the
script exits non-zero with one line and no traceback."""
from __future__ import annotations

import ctypes.util
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.fake_cuda_host import DISCRETE, XAVIER_NX

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("props", [XAVIER_NX, DISCRETE], ids=["integrated", "discrete"])
def test_every_check_runs_and_passes_on_the_fake(fake_gpu, props) -> None:
    bench = load_bench()
    api, cache = fake_gpu(props)
    rows = bench.run_checks(api, repeat=1, cache=cache, sizes=(("small", (120, 200)),))
    checks = [r["check"] for r in rows]
    assert "buffer mapped" in checks and "buffer pinned" in checks
    assert "kernel ROI batch x4" in checks and "kernel pitched mapped frame" in checks
    assert any(c.startswith("per-frame work, cuda-graph") for c in checks)
    assert any(c.startswith("small mapped read") for c in checks) and any(c.startswith("small pinned") for c in checks)
    assert [r for r in rows if r.get("result") not in (None, "ok", "round trip ok")] == []
    assert all(r["max_abs_error"] == 0.0 for r in rows if "max_abs_error" in r)
    text = bench.table(rows)
    assert text.splitlines()[0].split()[:2] == ["impl", "check"] and len(text.splitlines()) == len(rows) + 1


@pytest.mark.skipif(bool(ctypes.util.find_library("cuda")), reason="this machine has an NVIDIA driver")
def test_without_a_gpu_one_line_and_status_2() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--frames", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no usable NVIDIA GPU here")
    assert "Traceback" not in proc.stderr
