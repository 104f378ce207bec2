"""Credentials out of everything the SDK writes: status, telemetry, logs, errors, files.

Camera URIs carry passwords (`rtsp://admin:pw@cam/stream`, `http://cam/snap?user=a&password=b`),
and every status reader, log collector and support bundle would get them. `redact(text)` replaces
a URL's userinfo with `***` and the value of query parameters named like a secret with `***`,
wherever a URL appears in the text (a JSON message, a GStreamer pipeline, an error); the rest of
the URL stays, so the reader still sees which camera it is. `dumps_outgoing`
(edge_sdk.validate) redacts every message and file line the SDK writes; `install_log_redaction()`
does the same for the records of the SDK's loggers (their tracebacks included); the CLI's error
line is redacted too. What a Python caller gets back from the API (an exception's message, a
config object) is not changed: it is the caller's own configuration.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any

MASK = "***"

# scheme://userinfo@ : the userinfo runs to the last @ before the host (a password may hold an @,
# as URL parsers read it), never past a / ? # quote or space
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)([^/\s\"'?#<>\\]+)@")
_SECRET_NAMES = ("password", "passwd", "pwd", "pass", "passphrase", "token", "access_token", "refresh_token",
                 "auth", "authorization", "key", "api_key", "apikey", "secret", "client_secret", "signature",
                 "sig", "credential", "credentials", "session", "sessionid")
_QUERY_SECRET = re.compile(r"(?i)([?&;](?:" + "|".join(_SECRET_NAMES) + r")=)([^&#\s\"'<>\\]+)")


def redact(text: str) -> str:
    """`text` with every URL's userinfo and secret-named query values replaced by ***."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    return _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)


_installed = False
_install_lock = threading.Lock()


def install_log_redaction() -> None:
    """Redact the records of the `edge_sdk` loggers as they are made (the message with its
    arguments, and the traceback's text), whatever handler writes them. Idempotent; other
    libraries' records are left alone."""
    global _installed
    with _install_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if record.name == "edge_sdk" or record.name.startswith("edge_sdk."):
                _redact_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed format: the handler will say so; leave the record as it is
        return
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        text = logging.Formatter().formatException(record.exc_info)
        record.exc_text = redact(text)
