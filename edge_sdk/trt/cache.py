"""Compiled engines cached on the machine that built them.

An engine is valid only for the GPU (SM), the TensorRT version and the bundle it was built
from, at the precision and DLA core it was built for: those five make the key, and the key
makes the file name. Each engine has a JSON sidecar with its size and sha256, written after
the engine (both atomically), so a partial or corrupt file is never used: a lookup that finds
an engine without a sidecar, or one whose size or digest differs, is a miss.

A cached engine is code the runtime loads, so the folder is trusted only when no one but the
user running edge-sdk can write into it: a folder owned by another user, or writable by its group
or by others, is refused with an EngineCacheError that names the fix (nothing in it is read, nothing
is written). Files are opened inside the checked folder (its descriptor, `O_NOFOLLOW`): a symbolic
link, a FIFO or a folder where an entry should be is a miss, never followed. An engine is read once;
those bytes are checked against the sidecar and are the bytes the runtime deserializes
(:meth:`EngineCache.read_engine`).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

from edge_sdk.errors import BackendError
from edge_sdk.fsutil import PathLike, atomic_write_bytes, atomic_write_json

CACHE_ENV = "EDGE_SDK_ENGINE_CACHE"
_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")
MAX_JSON_BYTES = 1 << 20  # a sidecar, layer report or device report larger than this is not ours
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class EngineCacheError(BackendError):
    """The engine cache folder cannot be trusted (another owner, writable by others), or an
    engine changed after it was looked up. The message names the folder and the fix."""


def _user_name(uid: int) -> Optional[str]:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


def _user(uid: int) -> str:
    name = _user_name(uid)
    return f"{name} (uid {uid})" if name else f"uid {uid}"


def check_folder(root: Path, st: os.stat_result) -> None:
    """EngineCacheError unless `st` (the cache folder's) says only the running user can write there."""
    me = os.geteuid()
    elsewhere = "or use a cache folder of your own (--cache-dir, or $EDGE_SDK_ENGINE_CACHE)"
    if not stat.S_ISDIR(st.st_mode):
        raise EngineCacheError(f"the engine cache {root} is not a folder: remove it, {elsewhere}")
    if st.st_uid != me:
        raise EngineCacheError(
            f"the engine cache {root} belongs to {_user(st.st_uid)}, not to {_user(me)} who runs edge-sdk: an engine "
            f"in it is code this process would load, and that user could have put it there. Fix: "
            f"`sudo chown -R {_user_name(me) or me} {root}`, {elsewhere}"
        )
    loose = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if loose:
        who = {stat.S_IWGRP: "its group", stat.S_IWOTH: "others"}.get(loose, "its group and others")
        raise EngineCacheError(
            f"the engine cache {root} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): anyone who can write "
            f"there can plant an engine this process would load. Fix: `chmod go-w {root}`, {elsewhere}"
        )


def default_cache_dir() -> Path:
    """`$EDGE_SDK_ENGINE_CACHE`, else the user cache dir (`~/.cache/edge-sdk/engines` on Linux)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("edge-sdk")) / "engines"


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_") or "none"


@dataclass(frozen=True)
class EngineKey:
    """What an engine is tied to. Equal keys mean interchangeable engines."""

    bundle_hash: str
    tensorrt: str  # full TensorRT version, e.g. "8.5.2.2"
    sm: str  # compute capability, e.g. "7.2"
    precision: str  # one of edge_sdk.precision.BUILD_PRECISIONS
    dla_core: Optional[int] = None  # None: GPU only

    @property
    def stem(self) -> str:
        dla = "gpu" if self.dla_core is None else f"dla{int(self.dla_core)}"
        return "-".join(
            [
                _safe(self.bundle_hash),
                "trt" + _safe(self.tensorrt),
                "sm" + _safe(self.sm).replace(".", ""),
                _safe(self.precision),
                dla,
            ]
        )

    @property
    def filename(self) -> str:
        return self.stem + ".engine"

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class EngineCache:
    """A folder of `<key>.engine` files, each with a `<key>.engine.json` sidecar."""

    def __init__(self, root: Optional[PathLike] = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()

    @contextlib.contextmanager
    def _folder(self) -> Iterator[Optional[int]]:
        """A descriptor of the cache folder, checked (check_folder); None when there is no folder yet."""
        fd: Optional[int] = None
        try:
            fd = os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise EngineCacheError(f"cannot open the engine cache {self.root} ({exc.strerror or exc}): fix its "
                                   "permissions, or use another one (--cache-dir, or $EDGE_SDK_ENGINE_CACHE)") from exc
        if fd is None:
            yield None
            return
        try:
            check_folder(self.root, os.fstat(fd))
            yield fd
        finally:
            os.close(fd)

    def check(self) -> None:
        """EngineCacheError when the folder exists and cannot be trusted (see the module docstring)."""
        with self._folder():
            pass

    def _read(self, folder: Optional[int], name: str, limit: Optional[int] = None) -> Tuple[Optional[bytes], str]:
        """(the bytes of `name`, "") read once inside the checked folder, or (None, why not)."""
        if folder is None:
            return None, "not cached"
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            return None, "not cached"
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None, f"{name} is a symbolic link (never followed in the engine cache)"
            return None, f"{name} is unreadable ({exc.strerror or exc})"
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None, f"{name} is not a regular file"
            if limit is not None and st.st_size > limit:
                return None, f"{name} is larger than {limit} bytes"
            try:
                return f.read(), ""
            except OSError as exc:
                return None, f"{name} is unreadable ({exc.strerror or exc})"

    def _read_json(self, folder: Optional[int], name: str) -> Tuple[Optional[Dict[str, Any]], str]:
        """(the JSON object in `name`, "") or (None, why not): missing, unreadable or not an object."""
        from edge_sdk.validate import UntrustedInput, loads_untrusted

        data, why = self._read(folder, name, MAX_JSON_BYTES)
        if data is None:
            return None, why
        try:
            obj = loads_untrusted(data, MAX_JSON_BYTES, what=str(self.root / name))
        except UntrustedInput:
            return None, f"{name} is unreadable"
        return (obj, "") if isinstance(obj, dict) else (None, f"{name} is unreadable")

    def read_json(self, path: Path) -> Optional[Dict[str, Any]]:
        """A JSON object kept in the cache folder (`path` is one of this cache's paths), or None
        when missing, a link, unreadable or not an object; EngineCacheError for an untrusted folder."""
        with self._folder() as folder:
            return self._read_json(folder, Path(path).name)[0]

    def path(self, key: EngineKey) -> Path:
        return self.root / key.filename

    def sidecar(self, key: EngineKey) -> Path:
        return self.root / (key.filename + ".json")

    def report_path(self, key: EngineKey) -> Path:
        """The layer report of the engine (`<key>.layers.json`): what each layer runs in, and where."""
        return self.root / (key.stem + ".layers.json")

    def info(self, key: EngineKey) -> Dict[str, Any]:
        """The `info` the engine was stored with ({} when unreadable)."""
        meta = self.read_json(self.sidecar(key)) or {}
        info = meta.get("info")
        return info if isinstance(info, dict) else {}

    def read_report(self, key: EngineKey) -> Optional[Dict[str, Any]]:
        """The stored layer report, or None when missing or unreadable."""
        return self.read_json(self.report_path(key))

    def device_report_path(self, key: EngineKey) -> Path:
        """The on-device precision choice for the key's bundle, TensorRT, GPU and DLA core
        (`<key>.device_report.json`, the key's precision being "best"): see edge_sdk.trt.choice."""
        return self.root / (key.stem + ".device_report.json")

    def calib_cache_path(self, bundle_hash: str, tensorrt: str, sm: str) -> Path:
        """Where a calibration cache made on this device (by `--recalibrate`) is kept."""
        return self.root / f"{_safe(bundle_hash)}-trt{_safe(tensorrt)}-sm{_safe(sm).replace('.', '')}.calib.cache"

    def load(self, key: EngineKey) -> Tuple[Optional[bytes], str]:
        """(the engine's bytes, "hit") for a usable entry, else (None, why it is not usable). The
        engine is read once and those bytes are checked against the sidecar."""
        engine, sidecar = key.filename, key.filename + ".json"
        with self._folder() as folder:
            data, why = self._read(folder, engine)
            if data is None:
                return None, why if why == "not cached" else f"{why}; rebuilding"
            meta, why = self._read_json(folder, sidecar)
        if meta is None:
            if why == "not cached":
                return None, f"{engine} has no sidecar (an interrupted write); rebuilding"
            return None, f"{why}; rebuilding"
        if meta.get("key") != key.to_dict():
            return None, f"{sidecar} describes another engine; rebuilding"
        if len(data) != meta.get("size"):
            return None, f"{engine} has the wrong size (partial or corrupt); rebuilding"
        if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            return None, f"{engine} fails its sha256 check (corrupt); rebuilding"
        return data, "hit"

    def inspect(self, key: EngineKey) -> Tuple[Optional[Path], str]:
        """(engine path, "hit") for a usable entry, else (None, why it is not usable)."""
        data, why = self.load(key)
        return (self.path(key) if data is not None else None), why

    def get(self, key: EngineKey) -> Optional[Path]:
        return self.inspect(key)[0]

    def read_engine(self, key: EngineKey) -> bytes:
        """The bytes to deserialize: read once, checked against the sidecar. EngineCacheError when
        the entry is no longer usable (it changed after it was looked up)."""
        data, why = self.load(key)
        if data is None:
            raise EngineCacheError(
                f"the cached engine {self.path(key)} cannot be used any more ({why}): it changed after it was looked "
                "up; run again, or rebuild it with `edge-sdk engine BUNDLE --force`"
            )
        return data

    def put(
        self, key: EngineKey, data: bytes, info: Optional[Dict[str, Any]] = None, report: Optional[Dict[str, Any]] = None
    ) -> Path:
        """Store `data` under `key`: engine (and its layer report) first, then the sidecar that
        makes it valid."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            self.root.mkdir(mode=0o700)  # whatever the umask: no one else may write here
        self.check()
        engine, sidecar = self.path(key), self.sidecar(key)
        if sidecar.exists():
            sidecar.unlink()  # the old sidecar must never vouch for the new bytes
        atomic_write_bytes(engine, data)
        if report is not None:
            atomic_write_json(self.report_path(key), report)
        elif self.report_path(key).exists():
            self.report_path(key).unlink()  # an old report describes other bytes
        meta: Dict[str, Any] = {
            "key": key.to_dict(),
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if info:
            meta["info"] = info
        atomic_write_json(sidecar, meta)
        return engine
