"""Small file helpers: atomic writes and checksums."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Union

from edge_sdk.errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


class AtomicDirectory:
    """Build a directory under a temporary name and move it into place only on success.

    >>> with AtomicDirectory("out/bundle") as tmp:
    ...     (tmp / "manifest.json").write_text("{}")

    On an exception the temporary directory is removed and an existing `out/bundle` is left as
    it was. On success an existing directory is replaced.
    """

    def __init__(self, final: PathLike) -> None:
        self.final = Path(final)
        self.tmp: Path = self.final

    def __enter__(self) -> Path:
        parent = self.final.parent
        parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.final.name}.", suffix=".partial", dir=str(parent)))
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        for root, _dirs, files in os.walk(self.tmp):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    os.fsync(f.fileno())
        old = None
        if self.final.exists():
            old = self.final.with_name(f".{self.final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.final, old)
        os.replace(self.tmp, self.final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def read_toml(path: Any) -> Dict[str, Any]:
    """Parse a TOML file; ConfigError naming the file when it is unreadable or not TOML."""
    if sys.version_info >= (3, 11):
        import tomllib as toml  # novermin (guarded by the version check)
    else:
        try:
            import tomli as toml
        except ImportError as exc:  # pragma: no cover - tomli is a dependency on < 3.11
            raise ConfigError("reading TOML on Python < 3.11 needs tomli: pip install tomli") from exc
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        return dict(toml.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, toml.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
