"""edge_sdk.cli._stop: the stop convention of the long-running commands, signal by signal, in
this process (the commands themselves, as processes started both ways: test_stop_signals.py)."""
from __future__ import annotations

import os
import signal
from typing import Iterator, List

import pytest
import typer

from edge_sdk.cli._common import cli_errors
from edge_sdk.cli._stop import stop_signals
from edge_sdk.errors import Stopped


def send(sig: int) -> None:
    """The signal to this process; Python runs its handler before the next line."""
    os.kill(os.getpid(), sig)


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_raises_stopped_and_the_handlers_come_back(sig: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(Stopped) as caught:
        with stop_signals() as request:
            send(sig)
            raise AssertionError("not reached: the handler raised")
    assert caught.value.signum == sig and not caught.value.forced
    assert request.requested and request.name == signal.Signals(sig).name
    assert str(caught.value) == f"stopped by {signal.Signals(sig).name}"
    assert signal.getsignal(sig) is before


def test_an_inherited_ignore_is_overridden_inside_and_restored_after() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background job of a script inherits
    with pytest.raises(Stopped):
        with stop_signals():
            send(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    send(signal.SIGINT)  # ignored again: nothing raised


def test_a_stop_inside_a_held_block_takes_effect_at_its_end() -> None:
    done: List[str] = []
    with pytest.raises(Stopped):
        with stop_signals() as request:
            with request.held():
                send(signal.SIGTERM)
                done.append("first sink")
                done.append("second sink")
            done.append("not reached")
    assert done == ["first sink", "second sink"]


def test_a_second_signal_forces_the_stop_even_inside_a_held_block() -> None:
    with pytest.raises(Stopped) as caught:
        with stop_signals() as request:
            with request.held():
                send(signal.SIGTERM)
                send(signal.SIGINT)
                raise AssertionError("not reached: the second signal raised")
    assert caught.value.forced and caught.value.signum == signal.SIGINT


def test_with_on_stop_the_first_signal_is_a_call_and_the_second_a_forced_stop() -> None:
    calls: List[int] = []
    with pytest.raises(Stopped) as caught:
        with stop_signals(calls.append) as request:
            send(signal.SIGTERM)
            assert calls == [signal.SIGTERM] and request.event.is_set()
            send(signal.SIGTERM)
            raise AssertionError("not reached")
    assert caught.value.forced


@pytest.mark.parametrize("forced, code", [(False, 0), (True, 128 + signal.SIGTERM)])
def test_a_stop_that_reaches_the_cli_exits_0_or_128_plus_the_signal(forced: bool, code: int) -> None:
    @cli_errors
    def command() -> None:
        raise Stopped(signal.SIGTERM, forced=forced)

    with pytest.raises(typer.Exit) as caught:
        command()
    assert caught.value.exit_code == code


def test_the_rollout_link_raises_a_stop_from_its_next_wait_and_then_waits_again() -> None:
    pytest.importorskip("paho.mqtt.client")
    from edge_sdk.rollout.link import Link
    from edge_sdk.telemetry.broker import BrokerConfig

    link = Link(BrokerConfig(url="mqtt://127.0.0.1:1"))  # never connected: the waits only time out
    assert link.wait(lambda: False, 0.05) is False
    link.interrupt(signal.SIGTERM)
    with pytest.raises(Stopped) as caught:
        link.wait(lambda: False, 60.0)  # raised within a round of the wait, not after its timeout
    assert caught.value.signum == signal.SIGTERM
    assert link.wait(lambda: False, 0.05) is False  # the cleanup's waits work as before
    link.idle(0.01)
