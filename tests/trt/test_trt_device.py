"""GPU detection without TensorRT: nvidia-smi parsing, Jetson device tree, probe order."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional, Sequence

import pytest

from edge_sdk.trt.device import GpuInfo, detect_gpu, parse_nvidia_smi, probe_jetson, probe_nvidia_smi, sm_from_jetson_model


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8.6, NVIDIA GeForce RTX 3090\n", ("NVIDIA GeForce RTX 3090", "8.6")),
        ("9.0, NVIDIA H200\n9.0, NVIDIA H200\n", ("NVIDIA H200", "9.0")),
        ("7.5, Tesla T4, extra, commas\n", ("Tesla T4, extra, commas", "7.5")),
        ("[N/A], Some GPU\n", None),
        ("", None),
    ],
)
def test_parse_nvidia_smi(text: str, expected) -> None:
    info = parse_nvidia_smi(text)
    assert (None if info is None else (info.name, info.sm)) == expected


def test_probe_nvidia_smi_uses_the_query_and_survives_a_failing_driver() -> None:
    seen = []

    def run(cmd: Sequence[str], timeout: float) -> str:
        seen.append((list(cmd), timeout))
        return "7.2, Xavier\n"

    info = probe_nvidia_smi(run=run, timeout_s=3)
    assert info == GpuInfo("Xavier", "7.2", "nvidia-smi")
    assert seen == [(["nvidia-smi", "--query-gpu=compute_cap,name", "--format=csv,noheader"], 3)]

    def broken(cmd: Sequence[str], timeout: float) -> str:
        raise subprocess.CalledProcessError(9, cmd, "", "NVIDIA-SMI has failed")

    def hangs(cmd: Sequence[str], timeout: float) -> str:
        raise subprocess.TimeoutExpired(cmd, timeout)

    assert probe_nvidia_smi(run=broken) is None
    assert probe_nvidia_smi(run=hangs) is None


@pytest.mark.parametrize(
    "model, sm",
    [
        ("NVIDIA Jetson Xavier NX Developer Kit", "7.2"),
        ("Jetson-AGX Xavier", "7.2"),
        ("NVIDIA Jetson AGX Orin Developer Kit", "8.7"),
        ("NVIDIA Orin Nano Developer Kit", "8.7"),
        ("NVIDIA Jetson Nano Developer Kit", "5.3"),
        ("quill (Jetson TX2)", "6.2"),
        ("Raspberry Pi 4 Model B", None),
    ],
)
def test_sm_from_jetson_model(model: str, sm: Optional[str]) -> None:
    assert sm_from_jetson_model(model) == sm


def _fake_root(tmp_path: Path, model: Optional[bytes] = None, release: Optional[str] = None) -> Path:
    if model is not None:
        (tmp_path / "proc/device-tree").mkdir(parents=True)
        (tmp_path / "proc/device-tree/model").write_bytes(model)
    if release is not None:
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/nv_tegra_release").write_text(release)
    return tmp_path


def test_probe_jetson_reads_the_device_tree_model(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, model=b"NVIDIA Jetson Xavier NX Developer Kit\x00")
    info = probe_jetson(root)
    assert info is not None and info.sm == "7.2" and info.name == "NVIDIA Jetson Xavier NX Developer Kit"
    assert info.sm_tag == "sm72"


@pytest.mark.parametrize(
    "release, sm",
    [("# R36 (release), REVISION: 4.0, GCID: 1, BOARD: generic", "8.7"), ("# R35 (release), REVISION: 3.1", None)],
)
def test_probe_jetson_falls_back_to_the_l4t_release(tmp_path: Path, release: str, sm: Optional[str]) -> None:
    info = probe_jetson(_fake_root(tmp_path, release=release))
    assert (info.sm if info else None) == sm


def test_probe_jetson_without_jetson_files(tmp_path: Path) -> None:
    assert probe_jetson(tmp_path) is None


def test_detect_gpu_takes_the_first_answer_and_none_when_all_fail() -> None:
    calls = []

    def nothing() -> Optional[GpuInfo]:
        calls.append("nothing")
        return None

    def found() -> Optional[GpuInfo]:
        calls.append("found")
        return GpuInfo("X", "8.7", "t")

    def never() -> Optional[GpuInfo]:
        raise AssertionError("probes after a hit must not run")

    assert detect_gpu([nothing, found, never]) == GpuInfo("X", "8.7", "t")
    assert calls == ["nothing", "found"]
    assert detect_gpu([nothing, nothing]) is None


def test_probe_cuda_python_without_a_driver_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuda-python raises RuntimeError("Failed to dlopen libcuda.so.1") where no driver is installed
    (cuda/bindings/_bindings/cydriver.pyx, cuPythonInit): that means "no GPU", not a crash."""
    from edge_sdk.trt import device

    class NoDriverRuntime:
        def cudaGetDeviceCount(self):
            raise RuntimeError("Failed to dlopen libcuda.so.1")

    monkeypatch.setattr(device, "_cudart_or_none", lambda: NoDriverRuntime())
    assert device.probe_cuda_python() is None
