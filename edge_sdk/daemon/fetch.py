"""A bundle fetched by URL for `reload {"bundle": NAME, "url": URL, "sha256": HEX}`.

    fetcher = BundleFetcher(models_dir)
    path = fetcher.fetch(url, sha256, "faces-v2")    # the reload worker: download, verify, unpack

The archive (edge_sdk.bundle_archive.pack) downloads to `.NAME-<sha256 prefix>.part` in the
model folder. A connection cut halfway is resumed with an HTTP Range request (`ATTEMPTS` tries
in one reload; a later reload of the same URL and sha256 resumes the `.part` left behind); a
server that ignores Range sends the whole file again and the download starts over. The sha256
is checked BEFORE anything is unpacked; then the archive unpacks to NAME (a temporary folder
renamed into place) and its sha256 is recorded beside it (`.NAME.sha256`), so that a reload of
the same NAME and sha256 downloads nothing. Every failure (HTTP error, refused connection, size
over `MAX_ARCHIVE_BYTES` or the free disk, sha256 mismatch, hostile archive) is a FetchError
with the reason; nothing in the model folder is replaced, and the `.part` file stays only when
a later reload can resume it. `progress` (bundle, bytes, total) is what the status shows while
a download runs; `changed` tells the frame loop to publish it.
"""
from __future__ import annotations

import http.client
import logging
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, Optional

from edge_sdk.bundle_archive import unpack
from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.fsutil import atomic_write_text, sha256_file, write_problem

log = logging.getLogger(__name__)

MAX_ARCHIVE_BYTES = 4 << 30
ATTEMPTS = 3  # connections per reload: the first and two resumes of a cut download
TIMEOUT_S = 30.0  # connecting, and silence on an open connection
PROGRESS_EVERY_S = 1.0
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # cmd.json's pattern for a bundle fetched by URL
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# ASCII digits only: str.isdigit() and \d take "²" or "١" too, which int() then refuses or reads
_CONTENT_RANGE = re.compile(r"^bytes ([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19}|\*)$")
_LENGTH = re.compile(r"^[0-9]{1,19}$")
_CHUNK = 1 << 16


class FetchError(BundleError):
    """A bundle could not be fetched; `resumable` when its `.part` file is kept for a later reload."""

    def __init__(self, message: str, resumable: bool = False) -> None:
        super().__init__(message)
        self.resumable = resumable


def check_url(url: str) -> str:
    """`url` when it is an http(s) URL without credentials; ConfigError saying what is wrong."""
    if len(url) > 2048 or any(c.isspace() or ord(c) < 32 for c in url):
        raise ConfigError("url refused: longer than 2048 characters or holding spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ConfigError(f"url refused: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"url refused: scheme {parts.scheme or '(none)'!r}; only http:// and https:// are fetched")
    if "@" in parts.netloc:
        raise ConfigError("url refused: it carries credentials (user@host); serve the bundle without them, "
                          "the sha256 is what makes it trusted")
    if not parts.hostname:
        raise ConfigError("url refused: no host")
    return url


def check_name(name: str) -> str:
    """A bundle NAME for a fetched bundle: one plain folder name in the model folder."""
    if not NAME.match(name):
        raise ConfigError(f"bundle name {name!r} refused for a download: one folder name of letters, digits, "
                          "'.', '_' or '-' (at most 128, no path separators, not starting with '.')")
    return name


class _HttpOnly(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) URLs without credentials only, and never from https to http
    (the download would go on in the clear, open to whoever sits between)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        try:
            check_url(newurl)
        except ConfigError as exc:
            raise FetchError(f"redirect to {newurl!r} refused: {exc}") from None
        if urllib.parse.urlsplit(req.full_url).scheme == "https" and urllib.parse.urlsplit(newurl).scheme != "https":
            raise FetchError(f"redirect from https to {newurl!r} refused: the download would leave TLS; serve the "
                             "bundle over https all the way")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class BundleFetcher:
    """Downloads, verifies and unpacks bundle archives into `models_dir` (one at a time: the
    reload worker's)."""

    def __init__(self, models_dir: Optional[Path], max_bytes: int = MAX_ARCHIVE_BYTES,
                 attempts: int = ATTEMPTS, timeout_s: float = TIMEOUT_S) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.max_bytes = max_bytes
        self.attempts = attempts
        self.timeout_s = timeout_s
        self.progress: Optional[Dict[str, Any]] = None
        self.changed = False  # progress moved: the frame loop publishes the status and clears it
        self._reported = 0.0
        self._opener = urllib.request.build_opener(_HttpOnly())
        self._stop = threading.Event()

    def stop(self) -> None:
        """End a download in progress at its next block (the daemon stops); its .part is kept."""
        self._stop.set()

    def target(self, name: str) -> Path:
        """Where bundle `name` goes; ConfigError for a bad name or no model folder."""
        if self.models_dir is None:
            raise ConfigError("reload needs a model folder: set models_dir in the device config")
        return self.models_dir / check_name(name)

    def fetch(self, url: str, sha256: str, name: str) -> Path:
        """The bundle folder `name`, downloaded from `url` and verified against `sha256` unless it is
        there already with that sha256."""
        check_url(url)
        if not SHA256.match(sha256):
            raise ConfigError("sha256 refused: 64 lowercase hex digits")
        dest = self.target(name)
        record = dest.with_name(f".{name}.sha256")
        problem = write_problem(dest.parent)
        if problem is not None and not dest.exists():
            raise FetchError(f"cannot download into the model folder: {problem}; give the daemon a writable "
                             "models_dir (provision.sh sets /var/lib/edge-sdk/bundles, the unit's state directory; "
                             "`edge-sdk doctor --config` checks it), or copy the bundle there by hand and reload by name")
        if dest.exists():
            recorded = record.read_text().strip() if record.is_file() else None
            if recorded == sha256:
                log.info("bundle %s is already in %s with sha256 %s: not downloaded again", name, self.models_dir, sha256)
                return dest
            raise FetchError(f"bundle {name!r} already exists in {self.models_dir} with other content "
                             f"(sha256 {recorded or 'not recorded'}); send the new bundle under a name of its own")
        part = dest.with_name(f".{name}-{sha256[:16]}.part")
        self._reported = 0.0  # the first block is shown at once
        try:
            try:
                self._download(url, part, name)
            except FetchError as exc:
                if not exc.resumable and part.exists():
                    part.unlink()  # kept only where a later reload can go on from it
                raise
            got = sha256_file(part)
            if got != sha256:
                part.unlink()
                raise FetchError(f"sha256 mismatch: {url} gave {got}, the command expects {sha256}; nothing loaded")
            atomic_write_text(record, sha256 + "\n")  # before the folder: a folder never stands without its record
            try:
                unpack(part, dest)
            except BaseException:
                record.unlink()
                part.unlink()
                raise
            part.unlink()
        finally:
            self._report(None)
        log.info("bundle %s downloaded from %s and verified (sha256 %s)", name, url, sha256)
        return dest

    # -- the download ----------------------------------------------------------------------------
    def _report(self, progress: Optional[Dict[str, Any]], force: bool = True) -> None:
        now = time.monotonic()
        if not force and now - self._reported < PROGRESS_EVERY_S:
            self.progress = progress
            return
        self._reported = now
        self.progress = progress
        self.changed = True

    def _download(self, url: str, part: Path, name: str) -> None:
        last: Optional[BaseException] = None
        for attempt in range(self.attempts):
            if attempt:
                log.warning("download of %s cut at %d bytes (%s); resuming", url, part.stat().st_size if part.exists() else 0, last)
            try:
                if self._attempt(url, part, name):
                    return
                last = FetchError("the connection closed before the whole file came")
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out: the .part stays
                if isinstance(exc, urllib.error.HTTPError) and exc.code == 416 and part.exists():
                    return  # nothing after the end of the .part: it may hold the whole file, its sha256 decides
                if isinstance(exc, urllib.error.HTTPError):
                    raise self._http_error(url, exc, part) from None
                last = exc
                if isinstance(exc, urllib.error.URLError) and not isinstance(exc.reason, socket.timeout):
                    break  # nobody answers there (refused, no such host): trying again at once changes nothing
        size = part.stat().st_size if part.exists() else 0
        then = (f"the {size} bytes are kept and the next reload with this url and sha256 resumes" if size else
                "reload again once the server answers")
        raise FetchError(f"download of {url} failed after {size} bytes: {_reason(last)}; {then}", resumable=size > 0)

    def _http_error(self, url: str, exc: "urllib.error.HTTPError", part: Path) -> FetchError:
        resumable = exc.code >= 500 and part.exists()
        if not resumable and part.exists():
            part.unlink()
        return FetchError(f"{url} answered HTTP {exc.code} {exc.reason}", resumable=resumable)

    def _attempt(self, url: str, part: Path, name: str) -> bool:
        """One connection; True once the whole file is in `part`."""
        offset = part.stat().st_size if part.exists() else 0
        headers = {"Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        with self._opener.open(urllib.request.Request(url, headers=headers), timeout=self.timeout_s) as response:
            total = self._total(response, offset)
            if response.status != 206:
                offset = 0  # the whole file (a server that ignores Range): from the start
            if total is not None:
                self._check_room(url, part, total, offset)
            with open(part, "ab" if offset else "wb") as out:
                while True:
                    if self._stop.is_set():
                        raise FetchError(f"download of {url} stopped with the daemon at {offset} bytes; the next "
                                         "reload with this url and sha256 resumes", resumable=True)
                    block = response.read1(_CHUNK)  # what has come: the progress moves on a slow link too
                    if not block:
                        break
                    offset += len(block)
                    if offset > self.max_bytes:
                        out.close()
                        part.unlink()
                        raise FetchError(f"{url} sends more than {self.max_bytes} bytes; refused as not a bundle")
                    out.write(block)
                    self._report({"bundle": name, "bytes": offset, "total": total}, force=False)
        self._report({"bundle": name, "bytes": offset, "total": total})
        return total is None or offset == total

    def _total(self, response: Any, offset: int) -> Optional[int]:
        """The whole file's size from a 206's Content-Range (None when it does not start at `offset`)
        or a 200's Content-Length (None when not given)."""
        if response.status == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if match is None or int(match.group(1)) != offset or match.group(3) == "*":
                raise FetchError(f"the server answered a resume at {offset} with Content-Range "
                                 f"{response.headers.get('Content-Range')!r}; reload again", resumable=False)
            return int(match.group(3))
        length = response.headers.get("Content-Length")
        if length is None:
            return None
        if not _LENGTH.match(length.strip()):
            raise FetchError(f"the server sent Content-Length {length[:40]!r}, not a byte count; refused", resumable=False)
        return int(length.strip())

    def _check_room(self, url: str, part: Path, total: int, offset: int) -> None:
        if total > self.max_bytes:
            if part.exists():
                part.unlink()
            raise FetchError(f"{url} is {total} bytes, over the limit of {self.max_bytes}; refused as not a bundle")
        free = shutil.disk_usage(part.parent).free
        need = total - offset + total  # the rest of the archive, then the bundle it unpacks to (at least as big)
        if need > free:
            raise FetchError(f"{url} needs {need} bytes of disk (the rest of the archive and the bundle unpacked from "
                             f"it) and {part.parent} has {free} free; free some space (old bundles) and reload again",
                             resumable=offset > 0)


def _reason(exc: Optional[BaseException]) -> str:
    if isinstance(exc, urllib.error.URLError):
        return f"{type(exc.reason).__name__}: {exc.reason}" if isinstance(exc.reason, BaseException) else str(exc.reason)
    return f"{type(exc).__name__}: {exc}" if exc is not None else "no answer"

