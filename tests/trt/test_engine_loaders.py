"""The runtime's engine loaders (EngineFromBundle, EngineBytesFromCache) and the one value an
engine build takes (BuildOptions), against the fake TensorRT 8.5 on a Xavier NX."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, List

import pytest

from edge_sdk.trt.cache import EngineCacheError
from edge_sdk.trt.engine import build_engine
from edge_sdk.trt.loaders import EngineBytesFromCache, EngineFromBundle
from edge_sdk.trt.options import BuildOptions
from fakes.fake_tensorrt import decode_engine
from trt_bundles import XAVIER


def test_build_options_default_to_a_plain_edge_sdk_engine_and_are_frozen() -> None:
    options = BuildOptions()
    assert dataclasses.asdict(options) == {
        "precision": "best", "dla_core": None, "workspace_mib": None, "timing_cache": None, "cache_dir": None,
        "recalibrate": False, "force": False, "target": None, "require": False, "gpu": None, "allocate": None,
        "progress": None, "batch": None, "workspace_limit": None,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.force = True  # type: ignore[misc]


def test_engine_from_bundle_finds_builds_and_rebuilds(on_xavier, make_bundle, cache_dir: Path) -> None:
    said: List[str] = []
    cached: List[bool] = []

    def build(bundle_dir: Any, options: BuildOptions) -> Any:
        result = build_engine(bundle_dir, options)
        cached.append(result.cached)
        return result

    loader = EngineFromBundle(build, make_bundle(), BuildOptions(precision="fp16", cache_dir=cache_dir, gpu=XAVIER,
                                                                 progress=said.append))
    first = loader()
    assert decode_engine(first.path.read_bytes())["flags"] == ["FP16"]
    assert f"built the fp16 engine in {first.build_seconds:.1f} s: {first.path}" in said
    second = loader()
    assert second.path == first.path and second.key == first.key
    # the bytes that deserialize are the cached file's, checked against its sidecar
    assert EngineBytesFromCache(cache_dir, first.key)() == first.path.read_bytes()
    assert loader.rebuild() == first.path  # built again, into the same cache entry
    assert cached == [False, True, False] and loader.options.force is False


def test_engine_from_bundle_says_the_notes_and_rebuild_forces(tmp_path: Path) -> None:
    calls: List[Any] = []

    class Result:
        notes = ["a note"]
        cached = True
        path = tmp_path / "x.engine"

    def build(bundle_dir: Any, options: BuildOptions) -> Result:
        calls.append((bundle_dir, options))
        return Result()

    said: List[str] = []
    options = BuildOptions(precision="int8", progress=said.append)
    loader = EngineFromBundle(build, "B", options)
    assert loader() is not None and said == ["engine: a note"]  # cached: no build said
    assert loader.rebuild() == tmp_path / "x.engine"
    assert calls == [("B", options), ("B", dataclasses.replace(options, force=True))]


def test_engine_bytes_from_cache_refuse_a_changed_engine(on_xavier, make_bundle, cache_dir: Path) -> None:
    result = build_engine(make_bundle(), BuildOptions(precision="fp32", cache_dir=cache_dir, gpu=XAVIER))
    data = result.path.read_bytes()
    result.path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, another digest
    with pytest.raises(EngineCacheError):
        EngineBytesFromCache(cache_dir, result.key)()
