"""A kernel that cannot be compiled or loaded never stops the device: the runtime image has no
nvcc (pycuda's `get_nvcc_version` and `compile` then raise pytools' ExecError, an OSError), the
driver refuses the CUBIN, nvcc rejects the source. Mode `full` then preprocesses on the CPU with
one warning naming cause and fix, and `edge-sdk engine --precision best` keeps its report with a
note instead of losing it to the frame memory measurement. Against the fake pycuda
(tests/fakes/fake_pycuda.py), which fails as pycuda does without nvcc."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from edge_sdk.cuda import _pycuda
from edge_sdk.cuda.compiler import KernelCache, clear_memory_cache
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.errors import KernelUnavailableError
from edge_sdk.precision_choice import _measure_frames
from edge_sdk.preprocess import InputSpec, Preprocessor
from edge_sdk.runtime.detectors import factory as factory_mod
from edge_sdk.runtime.detectors.factory import make_detector
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.frame import Frame
from fakes import fake_pycuda
from runtime_factories import stream_model

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
BROKEN = {
    "no nvcc": dict(nvcc=False),
    "a CUBIN the driver refuses": dict(refuse_images=True),
    "a source nvcc rejects": dict(compile_error='preprocess.cu(12): error: identifier "half2" is undefined'),
}
CAUSE = {"no nvcc": "nvcc cannot be run", "a CUBIN the driver refuses": "device kernel image is invalid",
         "a source nvcc rejects": 'identifier "half2" is undefined'}


@pytest.fixture
def broken_pycuda(monkeypatch, kernel_shim, tmp_path):
    monkeypatch.setenv("EDGE_SDK_KERNEL_CACHE", str(tmp_path / "kernels"))
    clear_memory_cache()
    installed = []

    def make(case: str):
        installed.append(fake_pycuda.install(monkeypatch, fake_pycuda.FakePycudaDevice(**BROKEN[case]),
                                             kernel_shim("preprocess.cu").launch))
        return installed[-1], _pycuda.open_device()

    yield make
    clear_memory_cache()
    for fp in installed:
        assert fp.aborts() == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_preprocessor_says_kernel_unavailable_and_allocates_nothing(broken_pycuda, case) -> None:
    fp, api = broken_pycuda(case)
    with pytest.raises(KernelUnavailableError, match=CAUSE[case]):
        GpuPreprocessor(SPEC, api, cache=KernelCache(disk=False))
    assert fp.state.used == 0


def test_no_nvcc_names_the_fix(broken_pycuda) -> None:
    _fp, api = broken_pycuda("no nvcc")
    with pytest.raises(KernelUnavailableError) as err:
        KernelCache(disk=False).kernels(api, "preprocess.cu", ["preprocess_frame"])
    text = str(err.value)
    assert "No such file or directory" in text and "cuda-nvcc-11-4" in text and "cuda-python" in text
    assert isinstance(err.value.__cause__, OSError)  # pytools' ExecError, kept as the cause


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_mode_full_falls_back_to_the_cpu_preprocessor_with_one_warning(broken_pycuda, monkeypatch, caplog, case) -> None:
    fp, api = broken_pycuda(case)
    monkeypatch.setattr(factory_mod, "_WARNED", set())
    fed: list = []

    def infer(x):
        fed.append(np.array(x))
        return [np.zeros((x.shape[0], c, 8, 16), np.float32) for c in (1, 2, 2, 10)]  # CenterFace's outputs

    model = stream_model(api, SPEC, infer)
    with caplog.at_level(logging.WARNING, logger="edge_sdk.runtime.detectors.factory"):
        first = make_detector("full", model)
        second = make_detector("full", model)
    assert type(first) is FullFrameDetector and type(second) is FullFrameDetector  # the CPU preprocessor's
    warnings = [r.getMessage() for r in caplog.records if "GPU preprocessing is off" in r.getMessage()]
    assert len(warnings) == 1 and CAUSE[case] in warnings[0] and "preprocessed on the CPU" in warnings[0]
    frame = np.random.default_rng(3).integers(0, 256, (48, 80, 3), dtype=np.uint8)
    first.detect(Frame(frame))
    (tensor,) = fed
    np.testing.assert_array_equal(tensor, Preprocessor(SPEC)(frame)[0])  # the CPU preprocessor's tensor
    assert fp.state.launches == []
    api.destroy_stream(model.backend.stream)
    assert fp.state.used == 0


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_device_choice_keeps_its_report_when_frame_memory_cannot_be_measured(broken_pycuda, case) -> None:
    _fp, api = broken_pycuda(case)
    bundle = type("Bundle", (), {"inputs": [SPEC]})()
    notes: list = []
    assert _measure_frames(api, bundle, lambda _m: None, notes) is None
    (note,) = notes
    assert note.startswith("frame memory not measured (KernelUnavailableError") and CAUSE[case] in note
