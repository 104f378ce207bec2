"""jtop's client and the host's jtop service of different versions: said at start-up, clearly."""
from __future__ import annotations

import logging
import sys
import types

import pytest

from edge_sdk.telemetry import system
from edge_sdk.telemetry.system import JETSON_STATS, SystemStats, jtop_mismatch

# jetson-stats 4.3.2, jtop/jtop.py, jtop.start(), word for word
MISMATCH = ("Mismatch version jtop service: [4.3.2] and client: [7.2.2]. Please run:\n\n"
            "sudo systemctl restart jtop.service")


def _fake_jtop(monkeypatch: pytest.MonkeyPatch, error: str) -> None:
    """A `jtop` module whose client refuses to start with `error` (JtopException), as jetson-stats' does."""
    module = types.ModuleType("jtop")

    class JtopException(Exception):
        pass

    class jtop:  # noqa: N801 (jetson-stats' name)
        def start(self) -> None:
            raise JtopException(error)

        def close(self) -> None:
            raise AssertionError("a client that did not start is not closed")

    module.JtopException, module.jtop = JtopException, jtop
    monkeypatch.setitem(sys.modules, "jtop", module)


def test_a_version_mismatch_names_both_versions_and_the_fix(monkeypatch, caplog) -> None:
    _fake_jtop(monkeypatch, MISMATCH)
    with caplog.at_level(logging.WARNING, logger=system.__name__):
        stats = SystemStats(use_jtop=True)
    (record,) = [r for r in caplog.records if r.name == system.__name__]
    assert record.levelno == logging.ERROR
    text = record.getMessage()
    assert "jtop service runs jetson-stats 4.3.2" in text and "this environment has jetson-stats 7.2.2" in text
    assert 'pip install "jetson-stats==4.3.2"' in text and f"pins {JETSON_STATS}" in text
    out = stats.read()  # the telemetry goes on without jtop's fields
    assert "gpu_percent" not in out and "memory_percent" in out
    stats.close()


def test_other_jtop_errors_stay_a_warning(monkeypatch, caplog) -> None:
    _fake_jtop(monkeypatch, "The jtop.service is not active. Please run:\nsudo systemctl restart jtop.service")
    with caplog.at_level(logging.WARNING, logger=system.__name__):
        SystemStats(use_jtop=True).close()
    (record,) = [r for r in caplog.records if r.name == system.__name__]
    assert record.levelno == logging.WARNING and "jtop.service is not active" in record.getMessage()


@pytest.mark.parametrize("message", ["", "I can't access jtop.service.", "Mismatch version jtop service"])
def test_only_the_mismatch_message_is_read_as_one(message: str) -> None:
    assert jtop_mismatch(message) is None
