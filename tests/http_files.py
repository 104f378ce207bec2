"""A real HTTP server for download tests: serves bytes by path, honours Range (or ignores it),
can cut a response halfway, and records every request and the bytes it sent."""
from __future__ import annotations

import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Iterator, List, Optional

import pytest


class Files(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: Dict[str, bytes] = {}
        self.ranges = True  # False: a server that ignores Range and always sends the whole file
        self.cuts: List[int] = []  # the next responses close the connection after this many body bytes
        self.hold_at: Optional[int] = None  # the next response stops after this many body bytes until `release`
        self.release = threading.Event()
        self.redirects: Dict[str, str] = {}  # path -> the Location a 302 sends the client to
        self.lengths: Dict[str, str] = {}  # path -> the Content-Length header sent instead of the true one
        self.requests: List[Dict[str, Optional[str]]] = []
        self.sent = 0  # body bytes written, over every request
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(BaseHTTPRequestHandler):
    server: Files

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        srv = self.server
        header = self.headers.get("Range")
        with srv.lock:
            srv.requests.append({"path": self.path, "range": header})
            cut = srv.cuts.pop(0) if srv.cuts else None
            hold, srv.hold_at = srv.hold_at, None
        if self.path in srv.redirects:
            self.send_response(302)
            self.send_header("Location", srv.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = srv.files.get(self.path)
        if data is None:
            self.send_error(404, "no such file")
            return
        start = 0
        match = re.match(r"^bytes=(\d+)-$", header or "")
        if srv.ranges and match is not None:
            start = int(match.group(1))
            if start >= len(data):
                self.send_error(416, "range not satisfiable")
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", srv.lengths.get(self.path, str(len(body))))
        self.end_headers()
        if cut is not None:
            body = body[:cut]
        if hold is not None:
            self.wfile.write(body[:hold])
            self.wfile.flush()
            with srv.lock:
                srv.sent += hold
            srv.release.wait(30)
            body = body[hold:]
        self.wfile.write(body)
        with srv.lock:
            srv.sent += len(body)
        if cut is not None:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture()
def http_files() -> Iterator[Files]:
    server = Files()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
