"""What the engine cache trusts, on real files: a folder another user could write into is refused
before anything in it is read (a planted engine with a matching sidecar is no hit), a symbolic
link is never followed, and the engine's bytes are read once. Tests run as root here, so a folder
"of another user" is one chowned to another uid."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.manifest import Bundle
from edge_sdk.trt.cache import EngineCache, EngineCacheError, EngineKey
from trt_bundles import XAVIER

KEY = EngineKey(bundle_hash="0123456789abcdef", tensorrt="8.5.2.2", sm="7.2", precision="fp16", dla_core=None)
PLANTED = b"an engine someone else built"
OTHER_UID = 4242


def plant(folder: Path, key: EngineKey = KEY, data: bytes = PLANTED) -> None:
    """An engine and the sidecar that vouches for it, written by hand (not by the cache)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / key.filename).write_bytes(data)
    (folder / (key.filename + ".json")).write_text(json.dumps(
        {"key": key.to_dict(), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}))


def test_a_planted_entry_in_a_folder_of_mine_is_a_hit(tmp_path: Path) -> None:
    """The oracle for the refusals below: the same planted files are a hit where only I can write."""
    folder = tmp_path / "engines"
    plant(folder)
    os.chmod(folder, 0o755)
    assert EngineCache(folder).load(KEY) == (PLANTED, "hit")


@pytest.mark.parametrize("mode, who", [(0o777, "its group and others"), (0o757, "others"), (0o775, "its group"),
                                       (0o1777, "its group and others")])
def test_a_folder_others_can_write_into_is_refused(tmp_path: Path, mode: int, who: str) -> None:
    folder = tmp_path / "engines"
    plant(folder)
    os.chmod(folder, mode)
    cache = EngineCache(folder)
    for look in (cache.inspect, cache.get, cache.load, cache.info, cache.read_report):
        with pytest.raises(EngineCacheError) as err:
            look(KEY)
        assert f"{folder} is writable by {who}" in str(err.value) and f"chmod go-w {folder}" in str(err.value)
        assert "--cache-dir" in str(err.value)


def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a folder of another user needs root")
    folder = tmp_path / "engines"
    plant(folder)
    os.chmod(folder, 0o755)
    os.chown(folder, OTHER_UID, OTHER_UID)
    with pytest.raises(EngineCacheError, match=f"{folder} belongs to uid {OTHER_UID}, not to root") as err:
        EngineCache(folder).inspect(KEY)
    assert f"chown -R root {folder}" in str(err.value)


def test_nothing_is_written_into_an_untrusted_folder(tmp_path: Path) -> None:
    folder = tmp_path / "engines"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(EngineCacheError, match="writable by its group and others"):
        EngineCache(folder).put(KEY, b"mine")
    assert list(folder.iterdir()) == []


def test_a_new_folder_is_made_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)  # Ubuntu's default for users with a group of their own
    try:
        cache = EngineCache(tmp_path / "new" / "engines")
        cache.put(KEY, b"mine")
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache.root.stat().st_mode) == 0o700
    assert cache.load(KEY) == (b"mine", "hit")


def test_a_missing_folder_is_a_miss_not_an_error(tmp_path: Path) -> None:
    assert EngineCache(tmp_path / "none").inspect(KEY) == (None, "not cached")


def test_a_symbolic_link_is_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.engine"
    elsewhere.write_bytes(PLANTED)
    folder = tmp_path / "engines"
    plant(folder)
    (folder / KEY.filename).unlink()
    (folder / KEY.filename).symlink_to(elsewhere)  # the sidecar vouches for the link's target
    cache = EngineCache(folder)
    path, why = cache.inspect(KEY)
    assert path is None and "is a symbolic link" in why and "rebuilding" in why
    cache.put(KEY, b"rebuilt")  # the rebuild replaces the link, never writes through it
    assert not (folder / KEY.filename).is_symlink() and elsewhere.read_bytes() == PLANTED
    assert cache.load(KEY) == (b"rebuilt", "hit")


def test_a_linked_sidecar_is_never_followed(tmp_path: Path) -> None:
    folder = tmp_path / "engines"
    plant(folder)
    sidecar = folder / (KEY.filename + ".json")
    moved = tmp_path / "sidecar.json"
    sidecar.rename(moved)
    sidecar.symlink_to(moved)
    path, why = EngineCache(folder).inspect(KEY)
    assert path is None and "symbolic link" in why


def test_a_fifo_where_the_engine_should_be_is_a_miss_that_does_not_block(tmp_path: Path) -> None:
    folder = tmp_path / "engines"
    plant(folder)
    (folder / KEY.filename).unlink()
    os.mkfifo(folder / KEY.filename)
    path, why = EngineCache(folder).inspect(KEY)
    assert path is None and "not a regular file" in why


def test_read_engine_refuses_bytes_that_changed_after_the_lookup(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path / "engines")
    cache.put(KEY, b"engine-bytes")
    assert cache.read_engine(KEY) == b"engine-bytes"
    cache.path(KEY).write_bytes(b"engine-bytez")
    with pytest.raises(EngineCacheError, match="changed after it was looked up"):
        cache.read_engine(KEY)


# --- through `edge-sdk engine` (fake TensorRT) ----------------------------------------------------


def test_edge_sdk_engine_refuses_a_world_writable_cache_holding_a_planted_engine(on_xavier, make_bundle,
                                                                                 cache_dir: Path) -> None:
    bundle = make_bundle()
    key = EngineKey(Bundle.load(bundle).hash, on_xavier.__version__, XAVIER.sm, "fp16", None)
    plant(cache_dir, key)
    os.chmod(cache_dir, 0o777)
    result = CliRunner().invoke(app, ["engine", str(bundle), "--precision", "fp16", "--cache-dir", str(cache_dir),
                                      "--json"])
    assert result.exit_code == 10, result.output
    assert f"the engine cache {cache_dir} is writable by its group and others" in result.output
    assert (cache_dir / key.filename).read_bytes() == PLANTED  # left as it was, and nothing built
    assert on_xavier.engines_built() == 0
