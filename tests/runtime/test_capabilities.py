"""Capabilities: the one value a backend tells the pipeline where its work runs with."""
from __future__ import annotations

import pytest

from edge_sdk.runtime.backends.base import Backend, Capabilities


def test_device_and_threads_are_checked() -> None:
    with pytest.raises(ValueError, match="device"):
        Capabilities(device="tpu")
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="threads"):
            Capabilities(device="cpu", threads=bad)  # type: ignore[arg-type]


def test_cpu_bound_and_on_stream_follow_the_fields() -> None:
    assert Capabilities(device="cpu", threads=2).cpu_bound
    assert not Capabilities(device="gpu").cpu_bound
    assert not Capabilities(device="gpu").on_stream
    assert not Capabilities(device="gpu", cuda=object()).on_stream  # a CUDA API but no stream yet
    assert Capabilities(device="gpu", cuda=object(), stream=object()).on_stream


def test_the_base_runner_derives_them_from_cpu_bound() -> None:
    class OnCpu(Backend):
        @property
        def cpu_bound(self) -> bool:
            return True

    assert OnCpu().capabilities() == Capabilities(device="cpu")
    assert Backend().capabilities() == Capabilities(device="gpu")


def test_onnxruntime_on_the_cpu_says_cpu_and_its_threads(centerface_model_path) -> None:  # noqa: ANN001
    ort = pytest.importorskip("onnxruntime")
    del ort
    from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend

    with OnnxRuntimeBackend(centerface_model_path, provider="cpu", threads=1) as backend:
        assert backend.capabilities() == Capabilities(device="cpu", threads=1)
