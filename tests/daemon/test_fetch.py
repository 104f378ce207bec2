"""A bundle fetched by URL: the download on its own against a real HTTP server (resume with
Range, a server that ignores Range, sha256, 404, a refused connection, the size limit), and
`reload` with url/sha256/role on the real daemon (ONNX Runtime, the synthetic source, the real
Pipeline) with a real Mosquitto broker."""
from __future__ import annotations

import io
import json
import os
import socket
import sys
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from edge_sdk.bundle_archive import pack
from edge_sdk.daemon import Daemon
from edge_sdk.daemon.fetch import BundleFetcher, FetchError, check_url
from edge_sdk.errors import ConfigError
from edge_sdk.manifest import Bundle
from edge_sdk.telemetry import schemas

from full_disk import run_on_small_disk
from http_files import Files, http_files  # noqa: F401 - the fixture
from polling import wait_until
from test_daemon import Running, command, config
from tiny_bundle import make_tiny_bundle

CMD = schemas.topic("cam-1", "cmd")


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("fetch-archives")
    b = make_tiny_bundle(root / "b", seed=1, size_bias=2.0)
    digest = pack(b, root / "b.tar.gz")
    evil = root / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        for name, data in (("manifest.json", (b / "manifest.json").read_bytes()), ("../escaped", b"gotcha")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    pax = root / "pax.tar.gz"  # the whole bundle, each file behind a 1 MiB pax header (CVE-2024-6232's shape)
    with tarfile.open(pax, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(b.iterdir()):
            info = tar.gettarinfo(str(path), path.name)
            info.pax_headers = {"comment": "c" * (1 << 20)}
            with open(path, "rb") as f:
                tar.addfile(info, f)
    sha = lambda p: __import__("hashlib").sha256(p.read_bytes()).hexdigest()  # noqa: E731
    return {"b": (root / "b.tar.gz").read_bytes(), "sha": digest, "hash": Bundle.load(b).hash,
            "evil": evil.read_bytes(), "evil_sha": sha(evil), "pax": pax.read_bytes(), "pax_sha": sha(pax)}


class Recorded(BundleFetcher):
    """The fetcher, with every progress report it makes kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reports: List[Optional[Dict[str, Any]]] = []

    def _report(self, progress: Optional[Dict[str, Any]], force: bool = True) -> None:
        self.reports.append(progress)
        super()._report(progress, force)


def test_a_cut_download_resumes_with_range_and_sends_each_byte_once(http_files: Files, archives, tmp_path) -> None:
    data = archives["b"]
    http_files.files["/b.tar.gz"] = data
    http_files.cuts = [len(data) // 2]
    fetcher = Recorded(tmp_path)
    path = fetcher.fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")
    assert Bundle.load(path).hash == archives["hash"]
    assert [r["range"] for r in http_files.requests] == [None, f"bytes={len(data) // 2}-"]
    assert http_files.sent == len(data)
    assert sorted(os.listdir(tmp_path)) == [".b2.sha256", "b2"]  # the .part is gone
    assert {"bundle": "b2", "bytes": len(data), "total": len(data)} in fetcher.reports
    assert fetcher.reports[-1] is None and fetcher.progress is None and fetcher.changed
    # the same name and sha256 again: nothing downloaded
    assert fetcher.fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2") == path
    assert len(http_files.requests) == 2
    with pytest.raises(FetchError, match="already exists .* with other content"):
        fetcher.fetch(http_files.url("/b.tar.gz"), "0" * 64, "b2")


def test_a_server_that_ignores_range_sends_it_all_again_and_the_download_starts_over(http_files: Files, archives,
                                                                                    tmp_path) -> None:
    data = archives["b"]
    http_files.files["/b.tar.gz"] = data
    http_files.ranges = False
    http_files.cuts = [len(data) // 3]
    path = BundleFetcher(tmp_path).fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")
    assert Bundle.load(path).hash == archives["hash"]
    assert http_files.requests[1]["range"] == f"bytes={len(data) // 3}-"
    assert http_files.sent == len(data) // 3 + len(data)


def test_a_download_cut_every_time_keeps_its_part_and_the_next_reload_resumes(http_files: Files, archives,
                                                                              tmp_path) -> None:
    data = archives["b"]
    http_files.files["/b.tar.gz"] = data
    step = len(data) // 4
    http_files.cuts = [step, step, step]
    fetcher = BundleFetcher(tmp_path, attempts=3)
    with pytest.raises(FetchError, match=f"after {3 * step} bytes.* resumes") as failed:
        fetcher.fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")
    assert failed.value.resumable and not (tmp_path / "b2").exists()
    part = tmp_path / f".b2-{archives['sha'][:16]}.part"
    assert part.read_bytes() == data[:3 * step]
    fetcher.fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")
    assert http_files.requests[-1]["range"] == f"bytes={3 * step}-" and http_files.sent == len(data)
    assert not part.exists() and Bundle.load(tmp_path / "b2").hash == archives["hash"]


def test_a_part_that_holds_the_whole_file_is_verified_not_downloaded_again(http_files: Files, archives,
                                                                          tmp_path) -> None:
    data = archives["b"]
    http_files.files["/b.tar.gz"] = data
    part = tmp_path / f".b2-{archives['sha'][:16]}.part"
    part.write_bytes(data)
    assert Bundle.load(BundleFetcher(tmp_path).fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")).hash == archives["hash"]
    assert http_files.requests == [{"path": "/b.tar.gz", "range": f"bytes={len(data)}-"}] and http_files.sent == 0
    part = tmp_path / f".b3-{archives['sha'][:16]}.part"
    part.write_bytes(b"x" * len(data))  # as long as the file, other bytes
    with pytest.raises(FetchError, match="sha256 mismatch"):
        BundleFetcher(tmp_path).fetch(http_files.url("/b.tar.gz"), archives["sha"], "b3")
    assert not part.exists() and not (tmp_path / "b3").exists()


def test_a_mismatch_a_404_a_refused_connection_and_an_oversized_file_are_refused(http_files: Files, archives,
                                                                                 tmp_path) -> None:
    http_files.files["/b.tar.gz"] = archives["b"]
    fetcher = BundleFetcher(tmp_path)
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetcher.fetch(http_files.url("/b.tar.gz"), "f" * 64, "b2")
    with pytest.raises(FetchError, match="HTTP 404"):
        fetcher.fetch(http_files.url("/missing.tar.gz"), archives["sha"], "b2")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never listening: connections to it are refused
        with pytest.raises(FetchError, match="ConnectionRefusedError") as refused:
            fetcher.fetch(f"http://127.0.0.1:{port}/b.tar.gz", archives["sha"], "b2")
    assert not refused.value.resumable
    with pytest.raises(FetchError, match="over the limit of 100"):
        BundleFetcher(tmp_path, max_bytes=100).fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")
    for location, words in (("ftp://127.0.0.1/b.tar.gz", "only http"), ("http://u:p@127.0.0.1/b.tar.gz", "credentials")):
        http_files.redirects["/moved.tar.gz"] = location
        with pytest.raises(FetchError, match=f"redirect to '{location}' refused: url refused: .*{words}"):
            fetcher.fetch(http_files.url("/moved.tar.gz"), archives["sha"], "b2")
    http_files.redirects["/moved.tar.gz"] = "/b.tar.gz"  # a redirect within http is followed
    assert Bundle.load(fetcher.fetch(http_files.url("/moved.tar.gz"), archives["sha"], "b3")).hash == archives["hash"]
    assert sorted(os.listdir(tmp_path)) == [".b3.sha256", "b3"]  # nothing kept of the refused ones


@pytest.mark.parametrize("length", ["\u00b2", "\u00b9\u00b2\u00b3", "12abc", "-5", "9" * 30])
def test_a_content_length_that_is_no_byte_count_is_a_typed_refusal(http_files: Files, archives, tmp_path,
                                                                     length: str) -> None:
    """http.client leaves Content-Length to the reader: "²".isdigit() is True, and int() refuses it."""
    http_files.files["/b.tar.gz"] = archives["b"]
    http_files.lengths["/b.tar.gz"] = length
    with pytest.raises(FetchError, match="not a byte count"):
        BundleFetcher(tmp_path).fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")
    assert os.listdir(tmp_path) == []  # no part kept of a response refused


def test_a_redirect_from_https_to_http_is_refused() -> None:
    """The handler urllib consults for every redirect: https may go to https only."""
    import urllib.request

    from edge_sdk.daemon.fetch import _HttpOnly

    handler = _HttpOnly()
    request = urllib.request.Request("https://bundles.example/b.tar.gz")
    with pytest.raises(FetchError, match="redirect from https to 'http://bundles.example/b.tar.gz' refused"):
        handler.redirect_request(request, None, 302, "Found", {}, "http://bundles.example/b.tar.gz")
    onward = handler.redirect_request(request, None, 302, "Found", {}, "https://mirror.example/b.tar.gz")
    assert onward.full_url == "https://mirror.example/b.tar.gz"
    plain = urllib.request.Request("http://bundles.example/b.tar.gz")
    assert handler.redirect_request(plain, None, 302, "Found", {}, "https://mirror.example/b.tar.gz") is not None


FETCH_ON = """
import json, sys
from pathlib import Path
from edge_sdk.daemon.fetch import BundleFetcher, FetchError
try:
    BundleFetcher(Path(sys.argv[1])).fetch(sys.argv[2], "0" * 64, "b2")
except FetchError as exc:
    print(json.dumps({"error": str(exc), "resumable": exc.resumable}))
"""


@pytest.mark.parametrize("kib,words", [(40, "needs 81920 bytes of disk"), (20, "sha256 mismatch")])
def test_a_download_is_refused_before_it_starts_when_it_and_its_bundle_do_not_fit(http_files: Files, tmp_path: Path,
                                                                                 kib: int, words: str) -> None:
    """A real 64 KiB disk (tmpfs): a 40 KiB archive fits, but not with the bundle it unpacks to."""
    http_files.files["/big.tar.gz"] = os.urandom(kib * 1024)
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                       os.environ.get("PYTHONPATH", "")]))
    result = run_on_small_disk([sys.executable, "-c", FETCH_ON, str(disk), http_files.url("/big.tar.gz")], disk, 64,
                               kept, env=env)
    assert result.returncode == 0, result.stderr
    failure = json.loads(result.stdout)
    assert words in failure["error"] and not failure["resumable"], failure
    assert os.listdir(kept) == [] and len(http_files.requests) == 1  # nothing left on the disk, no retry


@pytest.mark.parametrize("url,words", [
    ("ftp://example.com/b.tar.gz", "only http:// and https://"),
    ("file:///etc/passwd", "only http:// and https://"),
    ("http://user:secret@example.com/b.tar.gz", "credentials"),
    ("http://example.com/b\n.tar.gz", "control characters"),
    ("http://example.com:port/b.tar.gz", "url refused"),
    ("http:///b.tar.gz", "no host"),
])
def test_hostile_urls_are_refused(url: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        check_url(url)


@pytest.mark.parametrize("name", ["../b", "a/b", ".hidden", "", "x" * 129])
def test_hostile_names_are_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="refused for a download"):
        BundleFetcher(tmp_path).target(name)


# -- the daemon ----------------------------------------------------------------------------------
pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")


@pytest.fixture()
def models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    make_tiny_bundle(root / "a", seed=0, size_bias=2.0)
    return root


def start(models: Path, tmp_path: Path, url: str, message_log: Any) -> Any:
    log = message_log(url, ["edge-sdk/cam-1/#"])
    cfg = config(models, tmp_path, url, shadow={"every_n_frames": 2, "window_frames": 20})
    daemon = Daemon(cfg)
    running = Running(daemon)
    assert wait_until(lambda: daemon.frames > 5)
    return daemon, log, running


def reload(log: Any, cid: str, args: Dict[str, Any]) -> Dict[str, Any]:
    """The command's final response (the first one when it is refused at once)."""
    command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": "reload", "args": args})

    def answered() -> List[Dict[str, Any]]:
        mine = [r for r in log.on("cmd/response") if r["id"] == cid]
        return [r for r in mine if r.get("final") or not r["ok"]]

    assert log.wait(lambda m: bool(answered()), timeout=30), log.on("cmd/response")
    return answered()[0]


def all_valid(log: Any) -> None:
    """Every message the device published follows its schema (the commands sent to it may not)."""
    for message in log.messages:
        if isinstance(message["payload"], dict) and not message["topic"].endswith("/cmd"):
            assert schemas.errors(message["payload"]) == [], message


def test_reload_by_url_resumes_a_cut_download_loads_it_and_shows_the_role(models: Path, tmp_path: Path, broker,
                                                                          message_log, http_files: Files,
                                                                          archives) -> None:
    data = archives["b"]
    http_files.files["/b.tar.gz"] = data
    http_files.cuts = [len(data) // 2]
    daemon, log, running = start(models, tmp_path, broker.url, message_log)
    url = http_files.url("/b.tar.gz")
    try:
        final = reload(log, "r1", {"bundle": "b2", "url": url, "sha256": archives["sha"], "role": "canary"})
        assert final["ok"], final
        assert log.wait(lambda m: any(s.get("bundle") == "b2" and s.get("rollout") == {"role": "canary", "bundle": "b2"}
                                      for s in log.on("status")), timeout=10)
        again = reload(log, "r2", {"bundle": "b2", "url": url, "sha256": archives["sha"]})
        assert log.wait(lambda m: log.on("status")[-1].get("rollout", "absent") is None, timeout=10)
    finally:
        assert running.stop() == 0
    assert final["result"]["bundle_hash"] == archives["hash"] == daemon.status()["bundle_hash"]
    assert [r["range"] for r in http_files.requests] == [None, f"bytes={len(data) // 2}-"]
    assert http_files.sent == len(data)  # the second reload found b2 there with this sha256
    assert again["ok"] and daemon.model.reloads == 2
    assert not [name for name in os.listdir(models) if name.endswith(".part")]
    all_valid(log)
    # the schema describes both fields: a consumer can rely on their shape
    status = [s for s in log.on("status") if s.get("rollout")][0]
    assert schemas.errors(dict(status, rollout={"role": "canary"})) != []
    assert schemas.errors(dict(status, download={"bundle": "b2", "bytes": -1, "total": None})) != []
    assert schemas.errors(dict(status, download={"bundle": "b2", "bytes": 10, "total": 20})) == []


def test_the_status_shows_the_progress_of_a_download_while_it_runs(models: Path, tmp_path: Path, broker, message_log,
                                                                   http_files: Files, archives) -> None:
    data = archives["b"]
    http_files.files["/b.tar.gz"] = data
    http_files.hold_at = 400  # the server stops there until released
    daemon, log, running = start(models, tmp_path, broker.url, message_log)
    try:
        command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": "r1", "cmd": "reload",
                           "args": {"bundle": "b2", "url": http_files.url("/b.tar.gz"), "sha256": archives["sha"]}})
        during = {"bundle": "b2", "bytes": 400, "total": len(data)}
        assert log.wait(lambda m: any(s.get("download") == during for s in log.on("status")), timeout=20), log.on("status")
        assert daemon.model.reloads == 0
        http_files.release.set()
        assert log.wait(lambda m: any(s.get("bundle") == "b2" and s.get("download") is None for s in log.on("status")),
                        timeout=20)
    finally:
        http_files.release.set()
        assert running.stop() == 0
    assert daemon.status()["bundle_hash"] == archives["hash"] and http_files.sent == len(data)
    all_valid(log)


def test_a_download_in_progress_ends_when_the_daemon_stops_and_keeps_its_part(models: Path, tmp_path: Path, broker,
                                                                             message_log, http_files: Files,
                                                                             archives) -> None:
    data = archives["b"]
    http_files.files["/b.tar.gz"] = data
    http_files.hold_at = 400
    daemon, log, running = start(models, tmp_path, broker.url, message_log)
    try:
        command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": "r1", "cmd": "reload",
                           "args": {"bundle": "b2", "url": http_files.url("/b.tar.gz"), "sha256": archives["sha"]}})
        assert wait_until(lambda: (daemon.fetcher.progress or {}).get("bytes") == 400)
        daemon.request_stop("test")
        assert wait_until(lambda: daemon.fetcher._stop.is_set())
    finally:
        http_files.release.set()  # the rest arrives; the download stops at that block
        assert running.stop() == 0
    kept = (models / f".b2-{archives['sha'][:16]}.part").read_bytes()
    assert len(kept) >= 400 and data.startswith(kept) and not (models / "b2").exists()
    # the next fetch resumes where it stopped (a .part that holds it all: the server has nothing after it)
    assert Bundle.load(BundleFetcher(models).fetch(http_files.url("/b.tar.gz"), archives["sha"], "b2")).hash == archives["hash"]
    assert http_files.requests[-1]["range"] == f"bytes={len(kept)}-"


def test_a_sha256_mismatch_or_a_hostile_archive_loads_nothing(models: Path, tmp_path: Path, broker, message_log,
                                                               http_files: Files, archives) -> None:
    http_files.files["/b.tar.gz"] = archives["b"]
    http_files.files["/evil.tar.gz"] = archives["evil"]
    http_files.files["/pax.tar.gz"] = archives["pax"]
    daemon, log, running = start(models, tmp_path, broker.url, message_log)
    hash_a = Bundle.load(models / "a").hash
    try:
        mismatch = reload(log, "r1", {"bundle": "b2", "url": http_files.url("/b.tar.gz"), "sha256": "0" * 64})
        evil = reload(log, "r2", {"bundle": "evil", "url": http_files.url("/evil.tar.gz"),
                                  "sha256": archives["evil_sha"], "shadow": True})
        credentials = reload(log, "r3", {"bundle": "b2", "url": "http://u:p@127.0.0.1/b.tar.gz",
                                         "sha256": archives["sha"]})
        traversal = reload(log, "r4", {"bundle": "../b2", "url": http_files.url("/b.tar.gz"), "sha256": archives["sha"]})
        port = reload(log, "r5", {"bundle": "b2", "url": "http://127.0.0.1:http/b.tar.gz", "sha256": archives["sha"]})
        pax = reload(log, "r6", {"bundle": "pax", "url": http_files.url("/pax.tar.gz"), "sha256": archives["pax_sha"]})
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 5)
    finally:
        assert running.stop() == 0
    assert not mismatch["ok"] and "sha256 mismatch" in mismatch["error"], mismatch
    assert not evil["ok"] and "outside the bundle folder" in evil["error"], evil
    assert not credentials["ok"] and credentials["reason"] == "invalid"
    assert not traversal["ok"] and traversal["reason"] == "invalid"
    assert not port["ok"] and port["reason"] == "refused" and "url refused" in port["error"], port
    assert not pax["ok"] and "is a pax extended header" in pax["error"], pax
    assert sorted(os.listdir(models)) == ["a"] and not (models.parent / "escaped").exists()
    assert daemon.status()["bundle_hash"] == hash_a and daemon.model.reloads == 0 and daemon.shadow.run is None
    assert [a for a in log.on("alerts") if a["alert"] == "reload_failed" and a["state"] == "raised"]
    all_valid(log)


def test_reload_by_url_with_shadow_runs_the_download_as_the_shadow(models: Path, tmp_path: Path, broker, message_log,
                                                                   http_files: Files, archives) -> None:
    http_files.files["/b.tar.gz"] = archives["b"]
    daemon, log, running = start(models, tmp_path, broker.url, message_log)
    hash_a = Bundle.load(models / "a").hash
    try:
        final = reload(log, "r1", {"bundle": "b2", "url": http_files.url("/b.tar.gz"), "sha256": archives["sha"],
                                   "shadow": True, "role": "wave 2"})
        assert log.wait(lambda m: any(s["bundle"] == "b2" for s in log.on("shadow")), timeout=30)
        status = daemon.status()
    finally:
        assert running.stop() == 0
    assert final["ok"] and final["result"]["shadow"] == "b2", final
    assert status["shadow"]["state"] == "running" and status["shadow"]["bundle"] == "b2"
    assert status["bundle_hash"] == hash_a and status["rollout"] == {"role": "wave 2", "bundle": "b2"}
    all_valid(log)


def _fetch_as(uid: Optional[int], models: Path, url: str) -> str:
    """BundleFetcher(models).fetch(url) in this process, or with `uid` in a forked child that has
    dropped to that user (no new interpreter: a pyenv Python may not be readable by it); the
    FetchError's message."""
    def attempt() -> str:
        try:
            BundleFetcher(models).fetch(url, "0" * 64, "b2")
        except FetchError as exc:
            return str(exc)
        return "no error"

    if uid is None:
        return attempt()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to `uid`, try, say what happened, leave without cleanup
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(write, attempt().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as said:
        out = said.read()
    os.waitpid(pid, 0)
    return out


def test_a_model_folder_the_daemon_cannot_write_names_the_folder_and_the_fix(http_files: Files, archives) -> None:
    """A provisioned device's models_dir was root-owned and read-only under ProtectSystem=strict:
    every reload by URL failed and the answer blamed the server. Now, before any byte is
    fetched, the error names the folder, the user and the fix. Tried as a user who cannot write
    there: nobody (a forked child) when the tests run as root, else a folder without write
    permission."""
    import shutil
    import tempfile

    http_files.files["/b.tar.gz"] = archives["b"]
    top = Path(tempfile.mkdtemp(prefix="edge-sdk-models-", dir="/tmp"))
    try:
        models = top / "bundles"
        models.mkdir()
        top.chmod(0o755)
        if os.geteuid() == 0:
            models.chmod(0o755)  # root's: nobody reads, cannot write
            uid: Optional[int] = 65534
        else:
            models.chmod(0o555)
            uid = None
        error = _fetch_as(uid, models, http_files.url("/b.tar.gz"))
        shown = 65534 if uid is not None else os.getuid()
        assert f"cannot download into the model folder: {models} is not writable by uid {shown}" in error, error
        assert "/var/lib/edge-sdk/bundles" in error and "edge-sdk doctor" in error
        assert http_files.requests == []  # refused before a byte was asked for
        assert os.listdir(models) == []
    finally:
        top.chmod(0o755)
        shutil.rmtree(top, ignore_errors=True)
