"""The build records `input_stats` (edge_sdk.builder.input_stats) of its calibration folder: colour photos in,
the manifest's per-channel means against numpy's, read back by the runtime's Bundle."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from detector_factory import TINY_DECODER, TINY_HW, make_detector

from edge_sdk.builder import pipeline
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.manifest import Bundle
from edge_sdk.preprocess import load_image

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")
IMAGES = Path(__file__).resolve().parents[2] / "calibrate" / "images"


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_build_records_input_stats_of_the_calibration_folder(tmp_path: Path, precision: str) -> None:
    calib = tmp_path / "calib"
    calib.mkdir()
    photos = sorted(IMAGES.glob("scene_*.jpg"))[:16]
    for p in photos:
        shutil.copy(p, calib / p.name)
    model = tmp_path / "detector.onnx"
    onnx.save(make_detector(), str(model))
    config = BuildConfig(model=model, out=tmp_path / "bundle", precision=precision, calib=calib,
                         input_size=(TINY_HW[1], TINY_HW[0]), decoder=dict(TINY_DECODER))
    bundle = Bundle.load(pipeline.build(config, BuildProgress(quiet=True)).bundle.root)
    if precision == "fp32":  # an FP32 build reads no images: no reference, no drift alerts
        assert "input_stats" not in bundle.manifest and bundle.input_stats is None
        return
    stats = bundle.input_stats
    assert stats is not None and stats.images == 16
    means = np.mean([load_image(str(p)).reshape(-1, 3).mean(axis=0) for p in photos], axis=0)
    np.testing.assert_allclose(stats.mean, means, atol=2.0)
    assert 1 <= len(stats.prototypes) <= 16 and stats.brightness.sum() == pytest.approx(1.0)
