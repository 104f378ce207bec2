"""The daemon's one owner of the running model, on a real ONNX Runtime model whose scores are
known by construction: the tiny CenterFace-shaped model of tests/runtime_factories.py scores a
4x4 cell of grey level g as sigmoid((g - 128) / 4), so a frame of two grey halves gives two
known scores (0.881 and 0.269) and the detections say which thresholds are in force."""
from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from edge_sdk.daemon.model import RunningModel
from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.config import PipelineConfig
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.detectors.strategy import StrategyDetector
from edge_sdk.runtime.frame import Frame

from polling import wait_until
from runtime_factories import tiny_centerface_model, write_bundle

pytest.importorskip("onnxruntime")

BRIGHT, DIM = 136, 124  # grey levels of the two halves


def score(level: int) -> float:
    return 1.0 / (1.0 + math.exp(-(level - 128) / 4.0))


HIGH, LOW = score(BRIGHT), score(DIM)  # 0.881, 0.269


def halves(width: int = 100, height: int = 72) -> np.ndarray:
    frame = np.full((height, width, 3), DIM, np.uint8)
    frame[:, : width // 2] = BRIGHT
    return frame


def grey_bundle(root: Path, score_threshold: float = 0.5, nms_iou: float = 0.3, width: int = 64) -> Path:
    """A bundle of the brightness model; `width` changes the model (and the bundle hash)."""
    spec = InputSpec(name="input.1", shape=[1, 3, 32, width])
    model = tiny_centerface_model(root.parent / f"{root.name}.onnx", height=32, width=width)
    return write_bundle(root, model, spec, {"type": "centerface", "score_threshold": score_threshold, "nms_iou": nms_iou})


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("grey")
    return {"a": grey_bundle(root / "a"), "b": grey_bundle(root / "b", score_threshold=0.3, nms_iou=0.45, width=32)}


def pipeline_config(**changes: Any) -> PipelineConfig:
    return PipelineConfig(backend="onnxruntime-cpu", threads=1, **changes).validate()


class SwapRecorder:
    """Stands in for the Pipeline's swap_detector: records each detector and hands back an Event
    that the test sets when "the pipeline" has taken it."""

    def __init__(self) -> None:
        self.detectors: List[Any] = []
        self.events: List[threading.Event] = []

    def swap_detector(self, detector: Any) -> threading.Event:
        self.detectors.append(detector)
        self.events.append(threading.Event())
        return self.events[-1]


def scores(detector: Any) -> np.ndarray:
    return detector.detect(Frame(halves())).detections.confidence


@pytest.fixture
def running(bundles):
    made: List[RunningModel] = []

    def make(**changes: Any) -> RunningModel:
        owner = RunningModel(pipeline_config(**changes))
        owner.open(bundles["a"])
        owner.attach(SwapRecorder())
        made.append(owner)
        return owner

    yield make
    for owner in made:
        owner.close()


@pytest.mark.parametrize("mode", ["full", "tiles", "roi"])
def test_thresholds_change_in_every_mode_and_the_detections_obey(running, mode: str) -> None:
    owner = running(mode=mode)
    detector = owner.detector
    assert np.allclose(np.unique(scores(detector).round(3)), [round(HIGH, 3)])  # the bundle's 0.5
    assert owner.set_thresholds(score_threshold=0.99) == {"score_threshold": 0.99}
    assert len(scores(detector)) == 0
    assert owner.set_thresholds(score_threshold=0.2, nms_iou=0.6) == {"score_threshold": 0.2, "nms_iou": 0.6}
    low = scores(detector)
    assert np.isclose(low, LOW, atol=1e-3).any() and np.isclose(low, HIGH, atol=1e-3).any()
    assert owner.describe()["thresholds"] == {"score_threshold": 0.2, "nms_iou": 0.6}
    assert owner.detector is detector  # thresholds change in place: no swap
    assert owner.pipeline.detectors == []


@pytest.mark.parametrize("mode", ["full", "tiles", "roi"])
@pytest.mark.parametrize("changes", [
    {"score_threshold": 1.5}, {"score_threshold": -0.1}, {"score_threshold": float("nan")}, {"score_threshold": "0.5"},
    {"score_threshold": True}, {"nms_iou": 2}, {"score_threshold": 0.4, "nms_iou": 2}, {"iou": 0.5},
])
def test_a_bad_threshold_is_refused_and_changes_nothing(running, mode: str, changes: Dict[str, Any]) -> None:
    owner = running(mode=mode)
    before = owner.describe()
    with pytest.raises(ConfigError):
        owner.set_thresholds(**changes)
    assert owner.describe() == before and owner.overrides == {}
    assert np.allclose(scores(owner.detector), HIGH, atol=1e-3)  # still the bundle's 0.5: nothing half-applied


@pytest.mark.parametrize("mode,changes", [
    ("fast", {}), ("", {}), ("tiles", {"score_threshold": 2}), ("roi", {"nms_iou": -1}), ("tiles", {"iou": 0.3}),
])
def test_a_bad_mode_switch_is_refused_and_changes_nothing(running, mode: str, changes: Dict[str, Any]) -> None:
    owner = running()
    detector, before = owner.detector, owner.describe()
    with pytest.raises(ConfigError):
        owner.set_mode(mode, **changes)
    assert owner.detector is detector and owner.describe() == before
    assert owner.pipeline.detectors == []  # nothing reached the pipeline


def test_a_mode_switch_keeps_the_model_and_the_thresholds_set(running) -> None:
    owner = running()
    owner.set_thresholds(score_threshold=0.6)
    model = owner.model
    assert owner.set_mode("roi") == {"mode": "roi"}
    detector = owner.pipeline.detectors[-1]
    assert isinstance(detector, StrategyDetector) and detector.mode == "roi" and owner.detector is detector
    assert owner.model is model and detector.backend is model.backend
    assert detector.thresholds["score_threshold"] == 0.6
    assert owner.set_mode("full", score_threshold=0.99) == {"mode": "full", "score_threshold": 0.99}
    assert isinstance(owner.detector, FullFrameDetector) and len(scores(owner.detector)) == 0
    assert owner.describe()["mode"] == "full" and owner.overrides == {"score_threshold": 0.99}


def test_a_reload_keeps_the_mode_and_the_thresholds_set_the_rest_follows_the_new_bundle(running, bundles) -> None:
    owner = running(mode="tiles")
    owner.set_thresholds(score_threshold=0.6)  # set by command: kept; nms_iou never set: follows the bundle
    old = owner.model
    new = owner.load(bundles["b"])
    done = owner.swap(new)
    assert owner.model is new and owner.detector is owner.pipeline.detectors[-1]
    assert owner.detector.mode == "tiles" and owner.detector.backend is new.backend
    assert owner.describe()["thresholds"] == {"score_threshold": 0.6, "nms_iou": 0.45}
    assert owner.describe()["bundle_hash"] == new.bundle.hash != old.bundle.hash
    assert owner.describe()["reloads"] == 1
    owner.retire_unused()
    assert old.backend.is_active and owner.retiring == [old]  # the pipeline may still run it
    done.set()  # the pipeline took the new detector
    owner.retire_unused()
    assert wait_until(lambda: not old.backend.is_active, 10), "the replaced model was never closed"
    assert new.backend.is_active and owner.retiring == []


def test_a_replaced_model_is_closed_even_when_a_later_change_overtakes_the_swap(running, bundles) -> None:
    """A mode switch right after a reload, before the pipeline took the reload's detector: the
    pipeline goes straight to the latest one and never sets the reload's Event."""
    owner = running()
    old = owner.model
    owner.swap(owner.load(bundles["b"]))
    owner.set_mode("roi")
    swapped, switched = owner.pipeline.events
    switched.set()  # the pipeline runs the roi detector over the new model; `swapped` stays unset
    owner.retire_unused()
    assert wait_until(lambda: not old.backend.is_active, 10), "the replaced model was never closed"
    assert not swapped.is_set() and owner.model.backend.is_active


def test_thresholds_from_the_config_are_kept_like_those_set_by_command(running, bundles) -> None:
    owner = running(mode="roi", nms_iou=0.2)
    assert owner.describe()["thresholds"] == {"score_threshold": 0.5, "nms_iou": 0.2}
    owner.swap(owner.load(bundles["b"]))
    assert owner.describe()["thresholds"] == {"score_threshold": 0.3, "nms_iou": 0.2}


def test_a_failed_load_counts_and_leaves_the_running_model(running, tmp_path: Path) -> None:
    owner = running()
    model = owner.model
    with pytest.raises(BundleError):
        owner.load(tmp_path / "missing")
    assert owner.describe()["reload_failures"] == 1 and owner.describe()["reloads"] == 0
    assert owner.model is model and model.backend.is_active


def test_close_closes_the_running_model_and_one_never_retired(running, bundles) -> None:
    owner = running()
    old = owner.model
    new = owner.load(bundles["b"])
    owner.swap(new)  # the pipeline never takes it (it stopped first): its Event is never set
    owner.close()
    assert not old.backend.is_active and not new.backend.is_active
    assert owner.describe()["bundle_hash"] == new.bundle.hash  # still says what ran


def test_describe_holds_the_model_block(running) -> None:
    described = running(mode="tiles").describe()
    assert set(described) == {"bundle_hash", "target", "backend", "precision", "precision_reason", "mode", "thresholds",
                              "reloads", "reload_failures"}
    assert described["mode"] == "tiles" and described["backend"] and described["precision"] == "fp32"


def test_before_a_model_is_loaded_changes_are_refused() -> None:
    owner = RunningModel(pipeline_config())
    with pytest.raises(ConfigError, match="no model"):
        owner.set_thresholds(score_threshold=0.4)
    with pytest.raises(ConfigError, match="no model"):
        owner.set_mode("roi")
    assert owner.describe()["bundle_hash"] is None


def test_a_threshold_set_while_a_mode_switch_is_pending_goes_to_the_new_detector(running) -> None:
    """`set mode` and `set score_threshold` served between the same two frames: the threshold
    goes to the detector the pipeline runs next, not to the one it is replacing."""
    owner = running()
    replaced = owner.detector
    owner.set_mode("tiles")  # the pipeline has not taken it yet (its Event is not set)
    owner.set_thresholds(score_threshold=0.99)
    pending = owner.pipeline.detectors[-1]
    assert pending.thresholds["score_threshold"] == 0.99 and len(scores(pending)) == 0
    assert replaced.thresholds["score_threshold"] == 0.5
