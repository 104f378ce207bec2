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
    frames = [(name, frame[:90, :130]) for name, frame in bench.real_frames((("small", (120, 200)),))]
    rows = bench.run_checks(api, repeat=1, cache=cache, sizes=(("small", (120, 200)),), frames=frames, cycles=5)
    checks = [r["check"] for r in rows]
    assert "buffer mapped" in checks and "buffer pinned" in checks
    assert "kernel ROI batch x4" in checks and "kernel pitched unaligned mapped frame" in checks
    assert sum(c.startswith("kernel coffee.jpg") for c in checks) == 4 and sum(c.startswith("kernel rocket.jpg") for c in checks) == 4
    assert any(c.startswith("per-frame work, cuda-graph") for c in checks)
    assert [c for c in checks if c.startswith("frame memory small")] == [
        "frame memory small mapped", "frame memory small pinned", "frame memory small device"]
    rois = next(r for r in rows if r["check"].startswith("ROI graphs"))
    assert rois["result"] == "bit-exact" and rois["detail"] == "cuda-graph: 4 captured, 6 replayed"
    by = {r["check"]: r for r in rows}
    assert by["streams/events, 5 preprocessor cycles"]["result"] == "all destroyed"
    assert by["streams/events, 5 preprocessor cycles"]["detail"] == "streams 5 created / 5 destroyed, events 5 created / 5 destroyed"
    assert by["free during a graph capture"]["result"] == "capture kept, freed after"
    # The fake runs the queued kernels on this CPU inside the wait, so its CPU time is the wall
    # time by construction: there the oracle is the fake's count of spinning waits (below).
    wait = by["blocking-sync event wait"]
    assert wait["result"] in ("sleeps", "SPINS") and wait["detail"].startswith("CPU ")
    assert bench.failed([r for r in rows if r is not wait]) == []
    assert all(r["result"] == "bit-exact" for r in rows if "max_abs_error" in r)
    assert (api.live_streams, api.live_events, api.spin_waits) == (0, 0, 0)
    text = bench.table(rows)
    assert text.splitlines()[0].split()[:2] == ["impl", "check"] and len(text.splitlines()) == len(rows) + 1


def test_a_leak_shows_in_the_table(fake_gpu, monkeypatch) -> None:
    """The stream/event count is an oracle: a preprocessor that forgets its event is LEAKED."""
    bench = load_bench()
    api, cache = fake_gpu()
    monkeypatch.setattr(bench.GpuPreprocessor, "close", lambda self: None)
    rows = bench.check_lifetimes(api, cache, cycles=3, sizes=(("small", (60, 80)),))
    assert rows[0]["result"] == "LEAKED" and bench.failed(rows)


def test_the_logger_row_is_skipped_without_tensorrt(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    (row,) = load_bench().check_logger()
    assert row["result"] == "skipped: tensorrt is not installed"


def test_self_test_runs_without_a_gpu() -> None:
    """What CI and a machine without a GPU run: exit 0, one table, real frames, NVRTC when present."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--self-test"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["impl", "check", "result"]
    assert sum("CPU preprocessor" in line and line.rstrip().endswith("ok") for line in lines) == 4
    assert any("NVRTC" in line for line in lines) and any("TensorRT logger" in line for line in lines)
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(bool(ctypes.util.find_library("cuda")), reason="this machine has an NVIDIA driver")
def test_without_a_gpu_one_line_and_status_2() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--frames", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no usable NVIDIA GPU here")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("version", ["8.5", "10"])
def test_the_logger_row_on_the_fake_tensorrt(monkeypatch, version: str) -> None:
    """Where edge_sdk.trt.log exists: two builders on the fake TensorRT, which keeps the first
    logger it is given as TensorRT does, both heard."""
    trt_log = pytest.importorskip("edge_sdk.trt.log")
    from fakes.fake_tensorrt import FAKES

    fake = FAKES[version]()
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    before = trt_log.listening()  # runners other tests left active still listen
    (row,) = load_bench().check_logger()
    assert row["result"] == "both heard", row
    assert trt_log.listening() == before  # the check's own listeners are gone


def test_the_first_contact_checks_pass_on_the_fake(fake_gpu) -> None:
    """A compile that fails falls back; a second CUDA object's frame ring freed on the capturing
    thread mid-capture waits for the end of the capture; engine batches need a bundle."""
    bench = load_bench()
    api, cache = fake_gpu()
    second, _ = fake_gpu()
    rows = bench.run_checks(api, repeat=1, cache=cache, sizes=(("small", (120, 200)),),
                            frames=[], cycles=1, second=second)
    by = {r["check"]: r for r in rows}
    assert by["kernel compile failure"]["result"] == "falls back"
    assert "nvcc" in by["kernel compile failure"]["detail"]
    moved = by["free through another CUDA object during a capture"]
    assert moved["result"] == "capture kept, freed after", moved
    assert second.used == 0  # the ring's page-locked and device memory went after the capture
    assert by["engine batches"]["result"] == "skipped: give --bundle"


def test_a_thread_that_used_pycuda_ends_and_the_process_lives(monkeypatch, kernel_shim) -> None:
    """The child's work on the strict fake pycuda (a thread ending with a context on its stack
    is recorded as pycuda's abort): both threads end clean."""
    from fakes import fake_pycuda

    shim = kernel_shim("preprocess.cu")
    fp = fake_pycuda.install(monkeypatch, fake_pycuda.FakePycudaDevice(integrated=False), shim.launch)
    assert load_bench().thread_exit_child("pycuda") == 0
    assert fp.aborts() == []


@pytest.mark.parametrize("code, result", [(0, "process survived"), (-6, "ABORTED"), (3, "skipped: no GPU for pycuda"),
                                          (1, "FAILED")])
def test_the_thread_exit_row_reads_the_child_s_exit(monkeypatch, code: int, result: str) -> None:
    bench = load_bench()
    ran: list = []

    def run(argv, **_kw):
        ran.append(argv)
        return subprocess.CompletedProcess(argv, code, stdout="survived {}\n", stderr="")

    monkeypatch.setattr(bench.subprocess, "run", run)
    (row,) = bench.check_thread_exit(["pycuda"])
    assert row["result"] == result and ran[0][-2:] == ["--thread-exit-child", "pycuda"]
    assert bool(bench.failed([row])) == (result in ("ABORTED", "FAILED"))
