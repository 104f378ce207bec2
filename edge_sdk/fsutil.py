"""Small file helpers: atomic writes (files and whole folders), checksums, TOML, SQLite files gone bad."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from edge_sdk.errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a crash or a power cut leaves either the old file or the new
    one: the bytes go to a temporary file beside it, fsync-ed before the rename, and the folder
    is fsync-ed after it (the rename itself is then on disk)."""
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
    _fsync_dir(path.parent)


def atomic_write_text(path: PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any) -> None:
    """Write `obj` as JSON; ValueError for NaN or an infinity (they are not JSON)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


STAGING_SUFFIXES = (".partial", ".old")
# the part between ".<name>." and the suffix: "<pid>-<random>"; earlier versions used mkdtemp's 8
# random characters for a partial folder and a fixed ".<name>.old"
_STAGING_MIDDLE = re.compile(r"[0-9]+-[a-z0-9_]+")
_LEGACY_PARTIAL_MIDDLE = re.compile(r"[a-z0-9_]{8}")


def _lock_dir(path: PathLike) -> Optional[int]:
    """A descriptor of folder `path` holding an exclusive flock on it; the lock dies with the
    process, so a folder nobody holds was left by a process that is gone. None where flock is
    not available (Windows). BlockingIOError when another process holds it; OSError when the
    folder cannot be opened."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        return None
    fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def staging_folders(final: PathLike) -> List[Path]:
    """The folders :class:`AtomicDirectory` stages beside `final` (`.<name>.<pid>-<random>.partial`
    and `.old`, and the names earlier versions used), live or stale."""
    final = Path(final)
    prefix = f".{final.name}."
    try:
        names = os.listdir(final.parent)
    except OSError:
        return []
    found = []
    for name in names:
        if not name.startswith(prefix) or not name.endswith(STAGING_SUFFIXES):
            continue
        middle = name[len(prefix):name.rindex(".")]
        ours = (_STAGING_MIDDLE.fullmatch(middle) or name == f".{final.name}.old"
                or (name.endswith(".partial") and _LEGACY_PARTIAL_MIDDLE.fullmatch(middle)))
        path = final.parent / name
        if ours and path.is_dir() and not path.is_symlink():
            found.append(path)
    return sorted(found)


def clean_stale(final: PathLike) -> List[Path]:
    """Remove the staging folders of `final` that no live process holds (left by a build that
    was killed); returns them. A `.old` folder whose `final` is missing (killed between the two
    renames of the swap) is put back as `final` instead. Folders held by a running build are left
    alone, and so is everything where flock is not available."""
    final = Path(final)
    handled = []
    for path in sorted(staging_folders(final), key=lambda p: not p.name.endswith(".old")):
        try:
            fd = _lock_dir(path)
        except OSError:  # held by a live process, or gone meanwhile
            continue
        if fd is None:
            break
        try:
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                continue  # renamed away and replaced meanwhile: not the folder we locked
            if path.name.endswith(".old") and not os.path.lexists(final):
                os.rename(path, final)
            else:
                _remove(path)
            handled.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return handled


MOUNTINFO = "/proc/self/mountinfo"


def is_mount_point(path: PathLike) -> bool:
    """True when `path` is a mount point: what os.path.ismount sees (another device), and on Linux
    also a bind mount of a folder of the same filesystem, which ismount misses but rename(2)
    refuses just the same (EBUSY)."""
    if os.path.ismount(path):
        return True
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    real = os.path.realpath(path)
    unescape = re.compile(r"\\([0-7]{3})")
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4 and unescape.sub(lambda m: chr(int(m.group(1), 8)), fields[4]) == real:
            return True
    return False


def _swap_error(final: Path, exc: OSError) -> ConfigError:
    hints = {
        errno.EBUSY: f"{final} is a mount point or in use; use a folder inside it",
        errno.EXDEV: f"{final} is on another filesystem than its parent (a mount point); use a folder inside it",
        errno.EACCES: f"no permission to replace {final}; choose another place",
        errno.EPERM: f"no permission to replace {final}; choose another place",
    }
    hint = hints.get(exc.errno or 0, f"check {final} and its parent folder")
    return ConfigError(f"cannot move the finished folder into place at {final} ({exc.strerror or exc}): {hint}. Nothing was changed")


class AtomicDirectory:
    """Build a directory under a temporary name and move it into place only on success.

    >>> with AtomicDirectory("out/bundle") as tmp:
    ...     (tmp / "manifest.json").write_text("{}")

    The temporary folder `.bundle.<pid>-<random>.partial` sits beside `out/bundle` (same
    filesystem: the final move is a rename) and is flock-ed while it is written, so that
    :func:`clean_stale` can tell a live one from one a killed process left; stale ones are
    removed on entry. On an exception the temporary directory is removed and an existing
    `out/bundle` is left as it was. On success every file and folder in it is fsync-ed, an
    existing directory is replaced and the parent fsync-ed (the swap is on disk); when the
    swap itself fails (a mount point: EBUSY) the old one is put back, the temporary one removed
    and a ConfigError says what to do.
    """

    def __init__(self, final: PathLike) -> None:
        self.final = Path(final)
        self.tmp: Path = self.final
        self._fd: Optional[int] = None

    def __enter__(self) -> Path:
        parent = self.final.parent
        parent.mkdir(parents=True, exist_ok=True)
        clean_stale(self.final)
        # made under a name clean_stale ignores, locked, then named .partial: never unlocked under that name
        new = Path(tempfile.mkdtemp(prefix=f".{self.final.name}.{os.getpid()}-", suffix=".new", dir=str(parent)))
        try:
            try:
                self._fd = _lock_dir(new)
            except OSError:  # a filesystem without flock: nothing there is ever cleaned as stale either
                self._fd = None
            self.tmp = new.with_name(new.name[: -len(".new")] + ".partial")
            os.rename(new, self.tmp)
        except BaseException:
            self._release()
            _remove(new)
            raise
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                _remove(self.tmp)
                return
            try:
                for root, _dirs, files in os.walk(self.tmp, topdown=False):
                    for name in files:
                        with open(os.path.join(root, name), "rb") as f:
                            os.fsync(f.fileno())
                    _fsync_dir(Path(root))  # its entries: the names of the files just synced
                self._swap()
            except BaseException as error:
                _remove(self.tmp)
                if isinstance(error, OSError):
                    raise _swap_error(self.final, error) from error
                raise
        finally:
            self._release()

    def _swap(self) -> None:
        """final → .old (flock-ed first), .partial → final, .old removed; on failure of the second
        rename the first is undone."""
        old: Optional[Path] = None
        old_fd: Optional[int] = None
        try:
            if os.path.lexists(self.final):
                if self.final.is_dir() and not self.final.is_symlink():
                    try:
                        old_fd = _lock_dir(self.final)
                    except BlockingIOError:
                        raise ConfigError(f"another process is replacing {self.final}; try again when it has finished") from None
                    except OSError:
                        old_fd = None  # cannot be opened for the lock: moved unlocked
                old = self.final.with_name(f".{self.final.name}.{os.getpid()}-{secrets.token_hex(4)}.old")
                os.replace(self.final, old)
            try:
                os.replace(self.tmp, self.final)
            except OSError:
                if old is not None:
                    os.replace(old, self.final)
                    old = None
                raise
            _fsync_dir(self.final.parent)
            if old is not None:
                _remove(old)
        finally:
            if old_fd is not None:
                os.close(old_fd)

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (best effort: not every platform opens folders)."""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_toml(path: Any) -> Dict[str, Any]:
    """Parse a TOML file; ConfigError naming the file when it is unreadable, not TOML, or holds
    `nan` or `inf` (no setting takes a non-finite number)."""
    from edge_sdk.validate import MAX_DEPTH, nesting_depth, require_finite

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
        data = dict(toml.loads(raw.decode("utf-8")))
    except ValueError as exc:  # TOMLDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
    except RecursionError:  # the parser recurses once per nested array or inline table
        raise ConfigError(f"{path}: arrays or tables nest deeper than the parser can follow; "
                          f"no setting nests more than {MAX_DEPTH} levels") from None
    if nesting_depth(data) > MAX_DEPTH:
        raise ConfigError(f"{path}: arrays or tables nest deeper than {MAX_DEPTH} levels; no setting nests that deep")
    return require_finite(data, str(path), ConfigError)


SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 11, 13, 26  # SQLite primary result codes


def sqlite_error_kind(exc: BaseException) -> str:
    """"full", "corrupt" or "other" for an sqlite3 error (Python 3.8 has no error codes: the text)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        code &= 0xFF  # the primary result code of an extended one
        if code == SQLITE_FULL:
            return "full"
        return "corrupt" if code in (SQLITE_CORRUPT, SQLITE_NOTADB) else "other"
    text = str(exc)
    if "disk is full" in text:
        return "full"
    return "corrupt" if ("malformed" in text or "not a database" in text) else "other"


def move_corrupt_aside(path: PathLike, now: Optional[float] = None) -> Path:
    """Move a SQLite file that is not a readable database aside, to `<name>.corrupt-<UTC time>`
    (`-2`, `-3`, ... when that name is taken), with its write-ahead log and shared-memory index
    (`-wal`, `-shm`) beside it: kept as it was, for inspection, and its name free for a new
    file. `now`: the time to name it by (default: the clock). Returns where it went; OSError
    when it cannot be moved (then the file itself stays where it was)."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        stale = Path(f"{path}{suffix}")
        if stale.exists():
            os.replace(stale, Path(f"{aside}{suffix}"))
    return aside


def write_problem(folder: PathLike) -> Optional[str]:
    """Why this process cannot create files in `folder` (a file is made there and removed: what
    access(2) says is not enough under systemd's ProtectSystem, a read-only bind mount), or None."""
    import tempfile

    path = Path(folder)
    if not path.is_dir():
        return f"{path} is not a folder"
    try:
        fd, name = tempfile.mkstemp(prefix=".edge-sdk-write-check-", dir=str(path))
    except OSError as exc:
        return f"{path} is not writable by uid {os.getuid()}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(name)
    return None
