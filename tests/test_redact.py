"""Credentials never leave in what the SDK writes (edge_sdk.redact): the oracle is each URL as
written here by hand with its secrets masked, urllib's reading of the same URL, and the bytes a
real log handler, dumps_outgoing and the CLI's error line produce."""
from __future__ import annotations

import io
import json
import logging
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from edge_sdk.redact import redact
from edge_sdk.validate import dumps_outgoing

CASES = [
    ("rtsp://admin:pw@10.0.0.2:554/Streaming/101", "rtsp://***@10.0.0.2:554/Streaming/101"),
    ("rtsp://admin:p@ss@cam.local/live", "rtsp://***@cam.local/live"),  # an @ in the password
    ("rtsp://only-user@cam/x", "rtsp://***@cam/x"),
    ("http://cam/snap.cgi?user=admin&password=hunter2&res=1080", "http://cam/snap.cgi?user=admin&password=***&res=1080"),
    ("https://h/x?Token=abc&API_KEY=k1#frag", "https://h/x?Token=***&API_KEY=***#frag"),
    ("rtspsrc location=rtsp://u:p%40w@h/a latency=0 ! fakesink", "rtspsrc location=rtsp://***@h/a latency=0 ! fakesink"),
    ("synthetic://faces?width=96&height=64", "synthetic://faces?width=96&height=64"),
    ("mail admin@example.com, path /dev/video0", "mail admin@example.com, path /dev/video0"),
]


@pytest.mark.parametrize("text, masked", CASES)
def test_userinfo_and_secret_queries_are_masked(text: str, masked: str) -> None:
    assert redact(text) == masked
    assert redact(masked) == masked  # idempotent


@pytest.mark.parametrize("url", [c[0] for c in CASES if "://" in c[0] and " " not in c[0]])
def test_what_is_left_is_the_same_camera(url: str) -> None:
    """Host, port and path as urllib reads them stay; urllib's password is gone."""
    before, after = urlsplit(url), urlsplit(redact(url))
    assert (after.hostname, after.port, after.path) == (before.hostname, before.port, before.path)
    if before.password:
        assert before.password not in redact(url)


def test_outgoing_json_is_redacted_and_still_json() -> None:
    message = {"source": "rtsp://admin:pw@cam/1", "streams": {"a": {"source": "http://h/x?token=t0k"}}, "n": 1.5}
    text = dumps_outgoing(message, "test")
    assert json.loads(text) == {"source": "rtsp://***@cam/1", "streams": {"a": {"source": "http://h/x?token=***"}}, "n": 1.5}


def test_the_sdk_s_log_records_and_tracebacks_are_redacted() -> None:
    import edge_sdk  # noqa: F401 (installs the redaction)

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("edge_sdk.test_redact")
    logger.addHandler(handler)
    try:
        logger.warning("camera %s lost", "rtsp://admin:pw-1@cam/1")
        try:
            raise OSError("cannot open http://u:pw-2@cam/snap?apikey=pw-3")
        except OSError:
            logger.exception("open failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "rtsp://***@cam/1" in text and "http://***@cam/snap?apikey=***" in text
    assert not any(f"pw-{i}" in text for i in (1, 2, 3))


def test_the_cli_error_line_is_redacted(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    from edge_sdk.cli import app
    from tiny_bundle import make_tiny_bundle

    bundle = make_tiny_bundle(tmp_path / "bundle")
    result = CliRunner().invoke(app, ["detect", "rtsp://admin:pw-4@127.0.0.1:9/x", "--bundle", str(bundle),
                                      "--backend", "onnxruntime-cpu"])
    assert result.exit_code != 0
    assert "error: cannot open rtsp://***@127.0.0.1:9/x" in result.output and "pw-4" not in result.output
