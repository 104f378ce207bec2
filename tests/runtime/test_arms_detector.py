"""Two models side by side over several streams (an A/B test's arms), on the device test set:
each arm's streams find what each finds alone through that arm's model, each arm's backend
gets only its own streams' rows, and every result names its arm."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.detectors.shared import StreamSetup, make_arms_detector
from edge_sdk.runtime.model import Model

from test_streams_modes import DECODER, ROI, SPEC, Recording, alone, assert_same, run, tiny_model

pytest.importorskip("onnxruntime")


@pytest.fixture
def arms(tmp_path: Path):
    """Arm a's and arm b's batched models and single-frame twins; b's decoder keeps only scores
    of 0.8 and up, so its detections differ from a's on the same frames."""
    made = [tiny_model(tmp_path / f"{name}.onnx", batch) for name, batch in
            (("a", "batch"), ("a1", 1), ("b", "batch"), ("b1", 1))]
    for model in made[2:]:
        model.decoder_spec = dict(DECODER, score_threshold=0.8)
    yield made
    for model in made:
        model.close()


def test_each_arm_s_streams_run_its_own_model_in_its_own_batches(arms) -> None:
    a, a1, b, b1 = arms
    rec_a, rec_b = Recording(a.backend), Recording(b.backend)
    a.backend, b.backend = rec_a, rec_b
    modes = {"door": "roi", "gate": "full", "yard": "tiles"}
    seeds = {"door": 1, "gate": 2, "yard": 1}  # yard sees door's frames
    try:
        detector = make_arms_detector(
            {"a": (a, [StreamSetup("door", "roi", ROI), StreamSetup("gate", "full", ROI)]),
             "b": (b, [StreamSetup("yard", "tiles", ROI)])}, {"a": 4, "b": 4})
        got = run(detector, seeds, BatchPolicy(3, (3,), max_queue_delay_ms=60_000))
    finally:
        a.backend, b.backend = rec_a.backend, rec_b.backend
    assert assert_same(got["door"], alone(a1, "roi", 1)) > 0
    assert assert_same(got["gate"], alone(a1, "full", 2)) > 0
    alone_a = Recording(a.backend)  # door and gate alone through arm a's batched model: their calls
    a.backend = alone_a
    try:
        alone(a, "roi", 1)
        alone(a, "full", 2)
    finally:
        a.backend = alone_a.backend
    assert assert_same(got["yard"], alone(b1, "tiles", 1)) > 0
    assert alone(a1, "tiles", 1)[0].confidence.min() < 0.8, "the arms' models would not be told apart"
    assert {sid: {r.info["arm"] for r in results} for sid, results in got.items()} == \
        {"door": {"a"}, "gate": {"a"}, "yard": {"b"}}
    # each backend ran only its own arm's rows: b's are yard's tiles alone, a's the rest
    assert sum(rec_b.rows) == detector.backends["b"].rows and sum(rec_a.rows) == detector.backends["a"].rows
    # door's and gate's calls gathered into arm a's: the same rows as alone, in fewer calls
    assert sum(rec_a.rows) == sum(alone_a.rows) and len(rec_a.rows) < len(alone_a.rows)
    assert detector.describe()["arms"] == {"a": ["door", "gate"], "b": ["yard"]}
    assert detector.shared_of("yard") is detector.backends["b"] and detector.shared_of("door") is detector.shared


def test_a_stream_in_both_arms_or_an_empty_arm_is_refused(arms) -> None:
    a, _, b, _ = arms
    with pytest.raises(ConfigError, match=r"\['door'\] are in more than one arm"):
        make_arms_detector({"a": (a, [StreamSetup("door")]), "b": (b, [StreamSetup("door")])}, {"a": 2, "b": 2})
    with pytest.raises(ConfigError, match="arm b serves no stream"):
        make_arms_detector({"a": (a, [StreamSetup("door")]), "b": (b, [])}, {"a": 2, "b": 2})
