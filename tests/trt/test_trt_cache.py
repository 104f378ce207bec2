"""The engine cache: one file per key, a sidecar that vouches for it, corrupt entries never used."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from edge_sdk.trt.cache import CACHE_ENV, EngineCache, EngineKey, default_cache_dir

BASE = EngineKey(bundle_hash="0123456789abcdef", tensorrt="8.5.2.2", sm="7.2", precision="int8", dla_core=None)


@pytest.mark.parametrize(
    "field, value",
    [("bundle_hash", "fedcba9876543210"), ("tensorrt", "8.6.1.6"), ("sm", "8.7"), ("precision", "fp16"), ("dla_core", 0)],
)
def test_every_key_field_changes_the_file_name(field: str, value) -> None:
    other = dataclasses.replace(BASE, **{field: value})
    assert other.filename != BASE.filename
    assert EngineCache("/c").path(other) != EngineCache("/c").path(BASE)


def test_file_name_reads_as_the_key() -> None:
    assert BASE.filename == "0123456789abcdef-trt8.5.2.2-sm72-int8-gpu.engine"
    assert dataclasses.replace(BASE, dla_core=1).filename.endswith("-int8-dla1.engine")
    # Whatever a version string holds, it cannot leave the cache folder.
    assert "/" not in dataclasses.replace(BASE, tensorrt="../../etc").filename


def test_put_then_get(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    path = cache.put(BASE, b"engine-bytes", {"gpu": "x"})
    assert path == tmp_path / BASE.filename and path.read_bytes() == b"engine-bytes"
    assert cache.inspect(BASE) == (path, "hit")
    meta = json.loads(cache.sidecar(BASE).read_text())
    assert meta["key"] == BASE.to_dict() and meta["size"] == 12 and meta["info"] == {"gpu": "x"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [BASE.filename, BASE.filename + ".json"]  # no temp files
    assert cache.get(dataclasses.replace(BASE, precision="fp16")) is None


def _truncate(cache: EngineCache) -> None:
    cache.path(BASE).write_bytes(b"engine")


def _flip(cache: EngineCache) -> None:
    cache.path(BASE).write_bytes(b"engine-bytez")


def _drop_sidecar(cache: EngineCache) -> None:
    cache.sidecar(BASE).unlink()


def _garble_sidecar(cache: EngineCache) -> None:
    cache.sidecar(BASE).write_text("{not json")


def _other_key_sidecar(cache: EngineCache) -> None:
    meta = json.loads(cache.sidecar(BASE).read_text())
    meta["key"]["sm"] = "8.7"
    cache.sidecar(BASE).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (_truncate, "wrong size"),
        (_flip, "sha256"),
        (_drop_sidecar, "no sidecar"),
        (_garble_sidecar, "unreadable"),
        (_other_key_sidecar, "another engine"),
    ],
)
def test_a_damaged_entry_is_a_miss(tmp_path: Path, damage, reason: str) -> None:
    cache = EngineCache(tmp_path)
    cache.put(BASE, b"engine-bytes")
    damage(cache)
    path, why = cache.inspect(BASE)
    assert path is None and reason in why


def test_put_replaces_an_entry(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    cache.put(BASE, b"old")
    cache.put(BASE, b"newer")
    assert cache.get(BASE).read_bytes() == b"newer"


def test_default_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    assert EngineCache().root == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    assert default_cache_dir().parts[-2:] == ("edge-sdk", "engines")


def test_device_calibration_cache_path_names_its_key(tmp_path: Path) -> None:
    p = EngineCache(tmp_path).calib_cache_path("abc", "8.5.2.2", "7.2")
    assert p == tmp_path / "abc-trt8.5.2.2-sm72.calib.cache"
