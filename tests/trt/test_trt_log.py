"""One TensorRT logger per process: TensorRT 8.x keeps the first logger handed to a Builder or
Runtime while any lives, so every build and every runner logs through edge_sdk.trt.log and
listens for its own scope. The fake keeps the logger the same way (adopt_logger)."""
from __future__ import annotations

import threading
from typing import List

import pytest

from edge_sdk.errors import BackendError
from edge_sdk.trt import log as trt_log
from edge_sdk.trt.engine import build_engine
from edge_sdk.trt.options import BuildOptions
from fakes.fake_tensorrt import MISSING_SCALE, FakeLogger
from trt_bundles import INPUT, XAVIER


def _build(bundle, fake, cache_dir, **kw):
    return build_engine(bundle, BuildOptions(cache_dir=cache_dir, gpu=XAVIER, allocate=fake.device_memory.allocate, **kw))


# --- the fake keeps the first logger, as TensorRT 8.x does -----------------------------------------


def test_fake_a_second_logger_hears_nothing_while_the_first_owner_lives(install_trt) -> None:
    fake = install_trt("8.5")
    first, second = FakeLogger(), FakeLogger()
    runtime = fake.Runtime(first)
    builder = fake.Builder(second)
    fake.warn("from the build")
    assert second.messages == []
    assert any("differs from one already provided" in m for m in first.messages)
    assert "WARNING: from the build" in first.messages
    del runtime, builder
    third = FakeLogger()
    builder = fake.Builder(third)  # nothing lives any more: this one is kept
    fake.warn("later")
    assert third.messages == ["WARNING: later"] and "WARNING: later" not in first.messages


# --- builds read their own log beside another live Runtime -------------------------------------------


def test_missing_scales_are_reported_while_a_runner_lives(install_trt, make_bundle, cache_dir) -> None:
    """precision_choice and `tests/device` build while an earlier engine's runner is active."""
    fake = install_trt("8.5")
    runner = fake.Runtime(trt_log.process_logger(fake))
    bundle = make_bundle(cache_tensors=(INPUT, "conv1", "conv2"))
    report = _build(bundle, fake, cache_dir, precision="best").layers
    assert report["missing_scales"] == ["relu1", "head"]
    assert any(MISSING_SCALE.format(name="head") == w for w in report["warnings"])
    del runner


def test_out_of_memory_is_recognised_on_a_rebuild(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle()
    first = _build(bundle, fake, cache_dir, precision="fp16")
    runtime = fake.Runtime(trt_log.process_logger(fake))  # e.g. the runner of the first engine, still active
    fake.fail_build = "Requested amount of GPU memory (1073741824 bytes) could not be allocated"
    with pytest.raises(BackendError) as exc:
        _build(bundle, fake, cache_dir, precision="fp16", force=True)
    assert "ran out of GPU memory" in str(exc.value) and "could not be allocated" in str(exc.value)
    assert first.path.is_file()
    del runtime


def test_two_builds_in_a_row_each_report_their_own_warnings(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    held = fake.Runtime(trt_log.process_logger(fake))
    listeners = trt_log.listening()
    one = _build(make_bundle(cache_tensors=(INPUT, "conv1", "conv2")), fake, cache_dir, precision="best").layers
    two = _build(make_bundle(cache_tensors=(INPUT, "conv1", "conv2", "relu1")), fake, cache_dir, precision="best").layers
    assert (one["missing_scales"], two["missing_scales"]) == (["relu1", "head"], ["head"])
    assert trt_log.listening() == listeners, "every build unsubscribes"
    del held


# --- the process logger and its listeners ------------------------------------------------------------


def test_one_logger_per_module_and_scoped_listeners(install_trt) -> None:
    fake = install_trt("8.5")
    logger = trt_log.process_logger(fake)
    assert trt_log.process_logger(fake) is logger and isinstance(logger, fake.ILogger)
    with trt_log.listen() as outer:
        logger.log(fake.ILogger.Severity.WARNING, "one")
        with trt_log.listen(min_severity=1) as errors_only:
            logger.log(fake.ILogger.Severity.INFO, "not kept")
            logger.log(fake.ILogger.Severity.WARNING, "two")
            logger.log(fake.ILogger.Severity.ERROR, "three")
        logger.log(fake.ILogger.Severity.ERROR, "four")
    logger.log(fake.ILogger.Severity.ERROR, "nobody")
    assert outer.messages == [("WARNING", "one"), ("WARNING", "two"), ("ERROR", "three"), ("ERROR", "four")]
    assert errors_only.messages == [("ERROR", "three")]


def test_a_kept_tail_is_bounded(install_trt) -> None:
    fake = install_trt("8.5")
    logger = trt_log.process_logger(fake)
    with trt_log.listen(keep=3) as tail:
        for i in range(10):
            logger.log(fake.ILogger.Severity.WARNING, str(i))
    assert [m for _s, m in tail.messages] == ["7", "8", "9"]


def test_listeners_on_many_threads_each_get_every_message_of_their_scope(install_trt) -> None:
    fake = install_trt("8.5")
    logger = trt_log.process_logger(fake)
    threads, per_thread = 6, 200
    listeners = trt_log.listening()
    subscribed, done = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    got: List[List[str]] = [[] for _ in range(threads)]

    def listen(k: int) -> None:
        with trt_log.listen() as tail:
            subscribed.wait()
            for i in range(per_thread):
                logger.log(fake.ILogger.Severity.WARNING, f"{k}:{i}")
            done.wait()
        got[k] = [m for _s, m in tail.messages]

    workers = [threading.Thread(target=listen, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    subscribed.wait()
    done.wait()
    for w in workers:
        w.join()
    expected = {f"{k}:{i}" for k in range(threads) for i in range(per_thread)}
    for k in range(threads):
        assert set(got[k]) == expected and len(got[k]) == len(expected)
        mine = [m for m in got[k] if m.startswith(f"{k}:")]
        assert mine == [f"{k}:{i}" for i in range(per_thread)], "a thread's own messages stay in order"
    assert trt_log.listening() == listeners


def test_a_failing_listener_never_reaches_tensorrt(install_trt, monkeypatch) -> None:
    fake = install_trt("8.5")
    logger = trt_log.process_logger(fake)

    class Broken(trt_log.Listener):
        def _add(self, severity, name, msg):
            raise RuntimeError("listener bug")

    broken = trt_log.subscribe(Broken())
    try:
        logger.log(fake.ILogger.Severity.ERROR, "still fine")  # must not raise (ILogger::log is noexcept)
    finally:
        trt_log.unsubscribe(broken)
