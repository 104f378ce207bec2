"""Calibration drift (edge_sdk.daemon.drift) on real colour photos: the default calibration set's scenes
split in two, one half the calibration reference and the other half the "live" camera, then the
same live scenes at night (a quarter of their brightness) and under a sodium-lamp colour cast."""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Callable, List

import numpy as np
import pytest

from edge_sdk.builder.input_stats import input_stats, stats_of_frames
from edge_sdk.daemon.drift import CLEAR_RATIO, DriftMonitor
from edge_sdk.errors import BundleError
from edge_sdk.frame_stats import FrameStats
from edge_sdk.input_stats import BINS, InputStats, hellinger
from edge_sdk.manifest import Bundle
from edge_sdk.preprocess import load_image

from tiny_bundle import make_tiny_bundle

cv2 = pytest.importorskip("cv2")

IMAGES = Path(__file__).resolve().parents[1] / "calibrate" / "images"
SCENES = sorted(IMAGES.glob("scene_*.jpg"))


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def scenes() -> List[np.ndarray]:
    assert len(SCENES) >= 20, "the default calibration scenes are missing"
    return [load_image(str(p)) for p in SCENES]


@pytest.fixture(scope="module")
def reference(scenes: List[np.ndarray]) -> InputStats:
    stats = stats_of_frames(scenes[0::2])
    assert stats is not None
    # through the manifest's JSON and back, as the daemon reads it
    return InputStats.from_dict(json.loads(json.dumps(stats.to_dict())), "manifest.json", BundleError)


def night(frame: np.ndarray) -> np.ndarray:
    return (frame.astype(np.float32) * 0.25).astype(np.uint8)


def sodium_cast(frame: np.ndarray) -> np.ndarray:
    """Orange street lighting: blue down, red up (BGR)."""
    return np.clip(frame.astype(np.int16) + np.array([-60, 0, 60], np.int16), 0, 255).astype(np.uint8)


def test_frame_stats_match_a_hand_computation(scenes: List[np.ndarray]) -> None:
    frame = scenes[3]
    fs = FrameStats()
    assert fs.compute(frame)
    h, w = frame.shape[:2]
    small = cv2.resize(frame, (160, round(h * 160 / w)), interpolation=cv2.INTER_AREA)
    value = small.max(axis=2)  # HSV value is max(B, G, R)
    expected = np.bincount(value.ravel() // (256 // BINS), minlength=BINS) / value.size
    np.testing.assert_allclose(fs.brightness, expected, atol=1e-9)
    np.testing.assert_allclose(fs.mean, small.reshape(-1, 3).mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(fs.std, small.reshape(-1, 3).std(axis=0), atol=1e-4)
    lo = small.min(axis=2).astype(np.float64)
    hi = value.astype(np.float64)
    saturation = np.where(hi > 0, np.round(255 * (hi - lo) / np.maximum(hi, 1)), 0)
    assert abs(fs.saturation_mean - saturation.mean()) < 1.0


def test_hellinger_bounds() -> None:
    p = np.array([1.0, 0, 0, 0])
    assert hellinger(p, p) == 0.0
    assert hellinger(p, np.array([0, 0, 0, 1.0])) == pytest.approx(1.0)
    assert hellinger(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == pytest.approx(np.sqrt(1 - np.sqrt(0.5)))


def test_build_records_input_stats_of_the_calibration_images(tmp_path: Path) -> None:
    paths = SCENES[:6]
    stats = input_stats(paths)
    assert stats is not None and stats["images"] == 6
    assert len(stats["prototypes"]["brightness"]) == 6
    mean_bgr = np.mean([load_image(str(p)).reshape(-1, 3).mean(axis=0) for p in paths], axis=0)
    np.testing.assert_allclose(stats["mean"], mean_bgr, atol=2.0)  # downscaled by area: means barely move
    assert sum(stats["brightness"]["hist"]) == pytest.approx(1.0, abs=1e-4)


def _feed(monitor: DriftMonitor, clock: FakeClock, frames: List[np.ndarray], rounds: int,
          change: Callable[[np.ndarray], np.ndarray] = lambda f: f) -> list:
    events = []
    for _ in range(rounds):
        for frame in frames:
            shown = change(frame)
            for _ in range(10):  # ten frames a sample: only the first one is measured
                event = monitor.observe(shown)
                if event is not None:
                    events.append(event)
                clock.t += 0.1
    return events


def camera(scene: np.ndarray, frames: int, seed: int = 0) -> List[np.ndarray]:
    """A fixed camera on `scene`: each frame shifted by a few pixels, its exposure by a few per cent."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(frames):
        dx, dy = rng.integers(-8, 9, 2)
        moved = np.roll(scene, (int(dy), int(dx)), axis=(0, 1))
        out.append(np.clip(moved * rng.uniform(0.95, 1.05), 0, 255).astype(np.uint8))
    return out


HELD_OUT = ["scene_03_chelsea.jpg", "scene_21_coffee.jpg"]  # odd indices: not in the reference


@pytest.mark.parametrize("name", HELD_OUT)
@pytest.mark.parametrize("shift", [night, sodium_cast], ids=["night", "sodium-cast"])
def test_sustained_shift_raises_once_with_numbers_and_clears(scenes, reference, shift, name) -> None:
    clock = FakeClock()
    monitor = DriftMonitor(lambda: reference, threshold=0.4, sample_s=1.0, window=10, clock=clock)
    live = camera(scenes[[p.name for p in SCENES].index(name)], 10)
    assert _feed(monitor, clock, live, rounds=3) == []
    calm = monitor.snapshot()
    assert calm is not None and calm["samples"] == 10 and calm["distance"] < 0.4 * CLEAR_RATIO

    events = _feed(monitor, clock, live, rounds=3, change=shift)
    assert len(events) == 1 and events[0].active
    raised = events[0]
    assert raised.value > 0.4 and raised.threshold == 0.4
    assert "histogram distance" in raised.message and f"{raised.value:.3f}" in raised.message
    snap = monitor.snapshot()
    assert snap["alarmed"] and snap["distance"] > 0.4
    if shift is night:
        assert snap["brightness_mean"] < 0.4 * snap["calibrated_brightness_mean"]

    events = _feed(monitor, clock, live, rounds=3)
    assert len(events) == 1 and not events[0].active and events[0].value <= 0.4 * CLEAR_RATIO
    assert "back within" in events[0].message and not monitor.snapshot()["alarmed"]


def test_a_short_dark_spell_inside_the_window_raises_nothing(scenes, reference) -> None:
    clock = FakeClock()
    monitor = DriftMonitor(lambda: reference, threshold=0.4, sample_s=1.0, window=20, clock=clock)
    live = camera(scenes[3], 20)
    assert _feed(monitor, clock, live, rounds=1) == []
    assert _feed(monitor, clock, live[:2], rounds=1, change=night) == []  # 2 of 20 samples
    assert _feed(monitor, clock, live, rounds=1) == []


@pytest.mark.parametrize("blank", [
    np.zeros((720, 1280, 3), np.uint8),  # a black (covered, unlit) camera
    np.full((720, 1280, 3), (128, 64, 0), np.uint8),  # a blue "no signal" picture
], ids=["black", "no-signal"])
def test_black_or_constant_frames_are_no_content(scenes, reference, blank) -> None:
    clock = FakeClock()
    monitor = DriftMonitor(lambda: reference, threshold=0.4, sample_s=1.0, window=5, clock=clock)
    noisy = np.clip(blank.astype(np.int16) + np.random.default_rng(0).integers(-2, 3, blank.shape), 0, 255).astype(np.uint8)
    assert _feed(monitor, clock, [blank, noisy], rounds=10) == []
    snap = monitor.snapshot()
    assert snap["skipped"] == 20 and snap["samples"] == 0 and snap["distance"] is None and not monitor.alarmed


def test_no_frames_no_samples_and_a_stall_starts_a_new_window(scenes, reference) -> None:
    clock = FakeClock()
    monitor = DriftMonitor(lambda: reference, threshold=0.4, sample_s=1.0, window=5, clock=clock)
    assert monitor.snapshot() is None  # nothing measured yet: telemetry has no drift block
    _feed(monitor, clock, [night(f) for f in scenes[:4]], rounds=1)
    assert monitor.snapshot()["samples"] == 4 and not monitor.alarmed
    clock.t += 3600  # the source paused for an hour
    assert monitor.observe(night(scenes[5])) is None  # the stale samples do not make up a window
    assert monitor.snapshot()["samples"] == 1


def test_skipped_frames_allocate_nothing(scenes, reference) -> None:
    clock = FakeClock()
    monitor = DriftMonitor(lambda: reference, threshold=0.4, sample_s=1.0, window=5, clock=clock)
    frame = scenes[1]
    monitor.observe(frame)  # sampled: buffers sized
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(1000):
            monitor.observe(frame)  # not due: one clock read each
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    import edge_sdk.daemon.drift
    import edge_sdk.frame_stats

    watched = {edge_sdk.daemon.drift.__file__, edge_sdk.frame_stats.__file__}
    grown = [s for s in after.compare_to(before, "filename")
             if s.size_diff > 0 and s.traceback[0].filename in watched]
    assert grown == []


def test_a_new_bundle_starts_a_new_window(scenes, reference) -> None:
    clock = FakeClock()
    current = [reference]
    monitor = DriftMonitor(lambda: current[0], threshold=0.4, sample_s=1.0, window=5, clock=clock)
    _feed(monitor, clock, scenes[1:4], rounds=1)
    assert monitor.snapshot()["samples"] == 3
    current[0] = InputStats.from_dict(reference.to_dict(), "other", BundleError)
    _feed(monitor, clock, scenes[1:2], rounds=1)
    assert monitor.snapshot()["samples"] == 1


def _hostile(mutate: Callable[[dict], None]) -> dict:
    stats = input_stats(SCENES[:3])
    mutate(stats)
    return stats


@pytest.mark.parametrize("mutate,key", [
    (lambda s: s.__setitem__("version", 99), "version"),
    (lambda s: s.__setitem__("images", True), "images"),
    (lambda s: s.__setitem__("mean", [1, 2]), "mean"),
    (lambda s: s.__setitem__("std", [1, 2, 1e9]), "std"),
    (lambda s: s["brightness"].__setitem__("hist", [1.0] * BINS), "brightness.hist"),
    (lambda s: s["saturation"].__setitem__("hist", "x" * BINS), "saturation.hist"),
    (lambda s: s["brightness"].__setitem__("mean", -1), "brightness.mean"),
    (lambda s: s["prototypes"].__setitem__("brightness", [[0.0] * BINS] * 100), "prototypes.brightness"),
    (lambda s: s["prototypes"]["saturation"].pop(), "prototypes"),
    (lambda s: s.__setitem__("spread", {"p50": "high"}), "spread"),
    (lambda s: s.clear(), "version"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_manifest_with_hostile_input_stats_is_refused(tmp_path: Path, mutate, key) -> None:
    folder = make_tiny_bundle(tmp_path / "b")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["input_stats"] = _hostile(mutate)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"input_stats\.?" + key.split(".")[0]):
        Bundle.load(folder)


def test_manifest_input_stats_round_trip(tmp_path: Path) -> None:
    folder = make_tiny_bundle(tmp_path / "b")
    assert Bundle.load(folder).input_stats is None  # an older bundle: no drift reference
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["input_stats"] = input_stats(SCENES[:3])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    stats = Bundle.load(folder).input_stats
    assert stats is not None and stats.images == 3 and stats.prototypes.shape == (3, 2, BINS)


def test_stream_turns_copy_one_frame_per_sample_the_streams_in_turn(scenes, reference) -> None:
    """Several cameras: frames of three streams come in batches (a, b, c, a, b, c, ...); only the
    frames StreamTurns picks are copied and reach the monitor. One copy per sample period, the
    streams in turn; a lost camera holds up no one once it has been away `live_s`; off: no copy."""
    from edge_sdk.daemon.drift import StreamTurns

    clock = FakeClock()
    monitor = DriftMonitor(lambda: reference, threshold=0.4, sample_s=1.0, window=60, clock=clock)
    turns = StreamTurns(monitor, ["a", "b", "c"], clock=clock)
    frame = {"a": scenes[0], "b": scenes[2], "c": scenes[4]}
    copied: List[str] = []

    def run(seconds: float, streams: str = "abc") -> None:
        end = clock.t + seconds
        while clock.t < end:
            batch = [(sid, turns(sid)) for sid in streams]  # the batch thread decides for each frame
            for sid, keep in batch:  # then the frame loop observes each result
                if keep:
                    copied.append(sid)
                monitor.observe(frame[sid] if keep else None)
            clock.t += 0.05  # 20 batches a second

    run(9.0)
    assert copied == list("abcabcabc")  # one a second, each camera in turn
    assert monitor.sampled == 9
    del copied[:]
    run(6.0, streams="ac")  # b's camera is lost: a and c take turns (after one more wait for b)
    assert copied == list("acaca")  # b held its turn for live_s (2 s), then a and c alternate
    monitor.configure(0.0, 1.0, 60)  # monitoring off: nothing is copied
    del copied[:]
    run(3.0)
    assert copied == []
