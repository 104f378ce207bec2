"""Mutation testing of the core modules: one small realistic bug at a time, the relevant tests
run against it, and the mutants that no test notices (the survivors) printed.

    python tools/mutate.py                    # every listed mutant (about 7 minutes on 2 idle cores)
    python tools/mutate.py --group nms        # one group
    python tools/mutate.py --only P1 D1       # some mutants
    python tools/mutate.py --list             # what would run
    python tools/mutate.py --auto preprocess --sample 30   # generated operator mutants
    python tools/mutate.py --sweep --sample 40             # generated mutants of every SWEEP module
    python tools/mutate.py --sweep metrics health          # some of them, every mutant

Each mutant is a (file, exact text, replacement) triple written by hand to look like a bug
someone could make: an off-by-one, a dropped branch, a swapped axis, a wrong endianness. With
`--auto GROUP` or `--sweep [MODULE...]`, mutants are generated instead, on every line of the
module's files: boundary operators (< and <=, == and !=), arithmetic and boolean operators,
integer constants off by one either way, min and max swapped, the first two arguments of a call
swapped, abs() dropped, a negation (not, unary minus) dropped, and a call made for its effect
dropped (sampled with `--sample N --seed S`, N per module). Mutants that cannot change
behaviour are listed by hand in EQUIVALENT and not run (and -1 -> -2 in a reshape, which numpy
reads as the same inferred size, is not generated); the sweep prints, per module, the
share of the other mutants that a test killed.

The repository is copied to a temporary folder (tracked and untracked files, without what git
ignores); mutants are applied there one at a time, never to the working tree. Each group's
tests first run unmutated (a red baseline skips the group, and so does a baseline that ran no
test: every test skipped, as without GStreamer, or none collected; its mutants count as not
run, with the reason, never as survivors); then each mutant runs them with `-x` and a timeout
of three times the baseline. Exit status: 0 when no mutant survived, 1 otherwise. Not part of
CI: it takes minutes, not seconds.
"""
from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Group:
    files: Tuple[str, ...]
    tests: Tuple[str, ...]


GROUPS: Dict[str, Group] = {
    "preprocess": Group(("edge_sdk/preprocess.py", "edge_sdk/geometry.py"),
                        ("tests/runtime/test_preprocess.py", "tests/runtime/test_letterbox.py", "tests/decoders")),
    "decoders": Group(("edge_sdk/decoders/centerface.py", "edge_sdk/decoders/yolo.py", "edge_sdk/decoders/yolox.py",
                       "edge_sdk/decoders/ssd.py", "edge_sdk/decoders/_base.py"), ("tests/decoders", "tests/runtime/test_letterbox.py")),
    "nms": Group(("edge_sdk/decoders/nms.py",), ("tests/decoders/test_nms.py",)),
    "calibration": Group(("edge_sdk/builder/calibration.py",), ("tests/builder/test_calibration.py",)),
    "calib-cache": Group(("edge_sdk/builder/calib_cache.py",), ("tests/builder/test_calib_cache.py",)),
    "bundle": Group(("edge_sdk/builder/bundle.py",), ("tests/builder/test_bundle.py",)),
    "engine-contract": Group(("edge_sdk/builder/pipeline.py",), ("tests/builder/test_engine_contract.py",)),
    "engine-cache": Group(("edge_sdk/trt/cache.py",), ("tests/trt/test_trt_cache.py", "tests/trt/test_trt_engine.py")),
    "backends": Group(("edge_sdk/runtime/backends/onnxruntime.py", "edge_sdk/runtime/backends/base.py"),
                      ("tests/runtime/test_backends.py",)),
    "engine-loaders": Group(("edge_sdk/trt/loaders.py",), ("tests/trt/test_engine_loaders.py",
                                                          "tests/runtime/test_tensorrt_backend.py")),
    "precision-policy": Group(("edge_sdk/precision.py",), ("tests/runtime/test_precision_choice.py",
                                                          "tests/trt/test_device_choice.py", "tests/trt/test_device_report.py")),
    "disk-queue": Group(("edge_sdk/telemetry/disk_queue.py",), ("tests/telemetry/test_disk_queue.py",)),
    "snapshots": Group(("edge_sdk/daemon/snapshots.py",), ("tests/daemon/test_snapshots.py",)),
    "batch": Group(("edge_sdk/builder/batch.py",), ("tests/builder/test_batch.py", "tests/trt/test_batch_profile.py")),
    "sources": Group(("edge_sdk/runtime/config.py", "edge_sdk/daemon/handlers.py", "edge_sdk/cli/detect.py"),
                     ("tests/runtime/test_config_sources.py", "tests/cli/test_detect_sources.py",
                      "tests/daemon/test_stream_commands.py")),
    "detect-streams": Group(("edge_sdk/runtime/config.py", "edge_sdk/cli/detect.py", "edge_sdk/runtime/streams.py"),
                            ("tests/cli/test_detect_streams.py", "tests/runtime/test_config_sources.py")),
    # the CUDA preprocessing and the TensorRT backend join here as they land
    # signing, commands, validation, manifest, atomic writes, builder steps, CUDA launch plan, decoders
    "signing": Group(("edge_sdk/telemetry/signing.py",), ("tests/test_validate_bounds.py", "tests/daemon/test_command_promises.py",
                                                         "tests/daemon/test_commands.py")),
    "commands": Group(("edge_sdk/daemon/commands.py",), ("tests/daemon/test_command_promises.py", "tests/daemon/test_commands.py")),
    "validate": Group(("edge_sdk/validate.py",), ("tests/test_validate.py", "tests/test_validate_bounds.py")),
    "config-schema": Group(("edge_sdk/config_schema.py",), ("tests/test_config_schema.py", "tests/test_validate_bounds.py")),
    "manifest": Group(("edge_sdk/manifest.py",), ("tests/test_manifest_edges.py", "tests/test_manifest.py", "tests/test_manifest_fields.py")),
    "manifest-check": Group(("edge_sdk/manifest_check.py",), ("tests/test_manifest_check_bounds.py", "tests/test_manifest_fields.py",
                                                              "tests/test_manifest.py")),
    "fsutil": Group(("edge_sdk/fsutil.py",), ("tests/test_fsutil_durability.py", "tests/test_fsutil.py", "tests/test_validate.py")),
    "equalize": Group(("edge_sdk/builder/equalize.py",), ("tests/builder/test_equalize_cases.py", "tests/builder/test_equalize.py")),
    "evaluate": Group(("edge_sdk/builder/evaluate.py",), ("tests/builder/test_evaluate.py",)),
    "sensitivity": Group(("edge_sdk/builder/sensitivity.py",), ("tests/builder/test_sensitivity_search.py", "tests/builder/test_sensitivity.py")),
    "probe": Group(("edge_sdk/builder/probe.py",), ("tests/builder/test_probe_rules.py", "tests/builder/test_probe.py")),
    "cuda-plan": Group(("edge_sdk/cuda/preprocess.py",), ("tests/cuda/test_gpu_preprocess.py", "tests/cuda/test_launch_plan.py",
                                                          "tests/cuda/test_cuda_lifetimes.py")),
    "decoders-all": Group(("edge_sdk/decoders/end2end.py", "edge_sdk/decoders/__init__.py", "edge_sdk/decoders/_base.py",
                           "edge_sdk/decoders/yolo.py", "edge_sdk/decoders/yolox.py", "edge_sdk/decoders/ssd.py",
                           "edge_sdk/decoders/centerface.py"), ("tests/decoders", "tests/runtime/test_letterbox.py")),
    "batcher": Group(("edge_sdk/runtime/batcher.py",), ("tests/runtime/test_batcher.py",)),
    "tracking": Group(("edge_sdk/tracking/tracker.py", "edge_sdk/tracking/assignment.py", "edge_sdk/tracking/kalman.py"),
                      ("tests/tracking",)),
    "batched-detector": Group(("edge_sdk/runtime/detectors/batched.py",), ("tests/runtime/test_batched_detector.py",)),
    "streams": Group(("edge_sdk/runtime/streams.py",), ("tests/runtime/test_streams.py", "tests/runtime/test_streams_tiny.py",
                                                         "tests/runtime/test_malloc_arenas.py")),
    "stream-drift": Group(("edge_sdk/daemon/drift.py",), ("tests/test_drift.py", "tests/daemon/test_drift_alert.py")),
    "api": Group(("edge_sdk/api.py", "edge_sdk/__init__.py", "edge_sdk/detections.py"), ("tests/test_api.py",)),
    "zone-counter": Group(("apps/zone_counter/zone_counter.py",), ("tests/apps/test_zone_counter.py",)),
    "daemon-streams": Group(("edge_sdk/daemon/streams.py", "edge_sdk/daemon/service.py", "edge_sdk/daemon/handlers.py",
                             "edge_sdk/telemetry/reporter.py", "edge_sdk/telemetry/exposition.py", "edge_sdk/runtime/streams.py"),
                            ("tests/daemon/test_daemon_streams.py", "tests/daemon/test_stream_metrics.py",
                             "tests/telemetry/test_reporter.py")),
    "shadow": Group(("edge_sdk/daemon/shadow.py", "edge_sdk/daemon/promotion.py", "edge_sdk/daemon/model.py",
                     "edge_sdk/daemon/handlers.py"), ("tests/daemon/test_shadow.py",)),
    "stream-modes": Group(("edge_sdk/runtime/detectors/shared.py", "edge_sdk/daemon/model.py", "edge_sdk/daemon/handlers.py"),
                          ("tests/runtime/test_streams_modes.py", "tests/daemon/test_daemon_streams.py")),
    "ab": Group(("edge_sdk/daemon/ab.py", "edge_sdk/daemon/model.py", "edge_sdk/runtime/detectors/shared.py",
                 "edge_sdk/daemon/handlers.py"), ("tests/daemon/test_ab.py", "tests/runtime/test_arms_detector.py")),
    "video-out": Group(("edge_sdk/output/video.py", "edge_sdk/output/gst_child.py"), ("tests/output/test_video_output.py",)),
    "bundle-fetch": Group(("edge_sdk/bundle_archive.py", "edge_sdk/daemon/fetch.py", "edge_sdk/daemon/handlers.py"),
                          ("tests/test_bundle_archive.py", "tests/daemon/test_fetch.py")),
    "rollout": Group(("edge_sdk/rollout/plan.py", "edge_sdk/rollout/driver.py", "edge_sdk/rollout/link.py"),
                     ("tests/rollout/test_rollout_plan.py", "tests/daemon/test_rollout.py")),
    "engine-build": Group(("edge_sdk/daemon/enginebuild.py", "edge_sdk/daemon/model.py", "edge_sdk/runtime/model.py"),
                          ("tests/daemon/test_engine_build.py",)),
}

# The generated-operator sweep (`--sweep`): one row per module, its files and the tests that pin
# its promises. A module joins the sweep with a row here (and its equivalent mutants in
# EQUIVALENT below). The rows are groups too: hand-written mutants may name them (roi-geometry).
SWEEP: Dict[str, Group] = {
    "verify": Group(("edge_sdk/verify.py",), ("tests/test_verify.py", "tests/trt/test_device_choice.py")),
    "precision-choice": Group(("edge_sdk/precision_choice.py", "edge_sdk/trt/choice.py"),
                              ("tests/trt/test_device_choice.py", "tests/trt/test_device_report.py")),
    "capture": Group(("edge_sdk/runtime/capture.py",), ("tests/runtime/test_capture.py", "tests/runtime/test_capture_pools.py",
                                                        "tests/runtime/test_capture_memory.py")),
    "infer-thread": Group(("edge_sdk/runtime/infer_thread.py",), ("tests/runtime/test_infer_thread.py",
                                                                  "tests/runtime/test_infer_thread_items.py")),
    "cache": Group(("edge_sdk/runtime/cache.py",), ("tests/runtime/test_cache.py", "tests/runtime/test_cache_properties.py")),
    "roi-strategies": Group(("edge_sdk/roi/strategies.py", "edge_sdk/roi/scheduler.py", "edge_sdk/roi/motion.py",
                              "edge_sdk/roi/base.py"), ("tests/roi/test_strategies.py", "tests/roi/test_scheduler_tracks.py",
                                                              "tests/roi/test_strategy_limits.py")),
    "roi-merge": Group(("edge_sdk/roi/merge.py",), ("tests/roi/test_merge.py", "tests/roi/test_merge_limits.py")),
    "roi-geometry": Group(("edge_sdk/roi/geometry.py",), ("tests/roi/test_geometry.py", "tests/roi/test_geometry_edges.py",
                                                          "tests/roi/test_geometry_mappings.py", "tests/roi/test_geometry_properties.py",
                                                          "tests/roi/test_merge.py")),
    "geometry": Group(("edge_sdk/geometry.py",), ("tests/test_placement.py", "tests/roi/test_geometry.py", "tests/roi/test_geometry_edges.py",
                                                  "tests/roi/test_geometry_mappings.py", "tests/runtime/test_letterbox.py",
                                                  "tests/decoders/test_decoder_geometry.py")),
    "metrics": Group(("edge_sdk/telemetry/metrics.py",), ("tests/telemetry/test_metrics.py",
                                                         "tests/telemetry/test_metrics_properties.py")),
    "health": Group(("edge_sdk/telemetry/health.py", "edge_sdk/daemon/health.py"),
                    ("tests/telemetry/test_health.py", "tests/telemetry/test_health_rules.py",
                     "tests/daemon/test_health_file.py", "tests/daemon/test_systemd_notify.py")),
}
GROUPS.update(SWEEP)
SWEEP.update({name: GROUPS[name] for name in ("signing", "commands", "validate", "config-schema", "manifest", "manifest-check",
                                              "fsutil", "equalize", "sensitivity", "probe", "cuda-plan", "decoders-all")})


@dataclass(frozen=True)
class Equivalent:
    """A generated mutant that cannot change behaviour: the mutant of `file` whose description
    (`--list` prints it) is `why`, on the line that holds `line`, with the reason; `result`, when
    given, tells apart mutants of one line with the same description (it is in the mutated text)."""

    file: str
    line: str
    why: str
    reason: str
    result: str = ""

    def matches(self, m: "Mutant") -> bool:
        return m.file == self.file and m.why == self.why and self.line in m.find and self.result in m.replace


EQUIVALENT: List[Equivalent] = [
    Equivalent("edge_sdk/daemon/health.py", "data = f.read(MAX_FILE + 1)", "1 -> 2",
               "reading two bytes past the bound instead of one: loads_untrusted refuses anything over MAX_FILE either way"),
    Equivalent("edge_sdk/runtime/infer_thread.py", "                self.recycle(item)\n", "dropped: self.recycle(item)",
               "the item of a thread that ends on stop(): nothing takes a free item once the thread has ended, and the "
               "exit wakes a waiting consumer as recycle() would"),
    Equivalent("edge_sdk/runtime/infer_thread.py", "for b, o in zip(self.buffers, outputs)):",
               "zip(self.buffers, outputs) -> (zip(outputs, self.buffers))",
               "the pairs only feed symmetric comparisons (b.shape != o.shape, b.dtype != o.dtype)"),
    Equivalent("edge_sdk/roi/merge.py", "np.fill_diagonal(m, False)", "dropped: np.fill_diagonal(m, False)",
               "both walks take a detection out (free / label) before they read its row, so its own link is never used"),
    Equivalent("edge_sdk/roi/merge.py", "if len(det) <= 1:", "len(det) <= 1 -> (len(det) < 1)",
               "one detection through the walk is a group of one: the same detection, copied, as the shortcut gives"),
    Equivalent("edge_sdk/roi/merge.py", "if len(det) <= 1:", "1 -> 0", "as above: one detection through the walk"),
    Equivalent("edge_sdk/roi/merge.py", "label = np.full(len(det), -1, dtype=np.int64)", "1 -> 2",
               "-2 for unlabelled reads as -1 does: only label < 0 and label >= 0 are asked"),
    Equivalent("edge_sdk/roi/merge.py", "            if len(g) > 1:\n", "len(g) > 1 -> (len(g) >= 1)",
               "the union of a group of one box is that box"),
    Equivalent("edge_sdk/roi/merge.py", "            if len(g) > 1:\n", "1 -> 0", "the union of a group of one box is that box"),
    Equivalent("edge_sdk/roi/merge.py", "return det[np.zeros(0, dtype=np.int64)]", "0 -> 1",
               "no groups only for no detections, which merge() returns before the walk"),
    Equivalent("edge_sdk/runtime/capture.py", "if not self._pacer.wait(self._stop):\n                    self._put_back(slot)",
               "dropped: self._put_back(slot)",
               "the thread is stopping: nothing takes a free slot again, and stop() releases every slot's buffer"),
    Equivalent("edge_sdk/runtime/capture.py", "with self._cond:\n            self._free.append(slot)\n            self._cond.notify_all()",
               "dropped: self._cond.notify_all()",
               "_put_back runs on the capture thread, the only one that waits for a free slot"),
    Equivalent("edge_sdk/runtime/capture.py", "self.index = -1  # frame number in the stream", "-1 -> (1)",
               "a slot's index is set when its frame is published, before anyone can read it"),
    Equivalent("edge_sdk/builder/equalize.py", "arrays[pair.w2] = (w2 * s.reshape((1, -1) + (1,) * (w2.ndim - 2)))",
               "1 -> 2", "numpy takes any negative size as the one it infers: (1, -2) reshapes as (1, -1) does",
               result="(1, -2)"),
    Equivalent("edge_sdk/builder/equalize.py", "arrays[pair.w2] = (w2 * s.reshape((-1,) + (1,) * (w2.ndim - 1)))",
               "1 -> 2", "numpy takes any negative size as the one it infers: (-2,) reshapes as (-1,) does",
               result="(-2,)"),
    Equivalent("edge_sdk/runtime/capture.py", "self.index = -1  # frame number in the stream", "1 -> 0",
               "a slot's index is set when its frame is published, before anyone can read it"),
    Equivalent("edge_sdk/runtime/capture.py", "self.index = -1  # frame number in the stream", "1 -> 2",
               "a slot's index is set when its frame is published, before anyone can read it"),
    Equivalent("edge_sdk/runtime/capture.py", "self.period = 1.0 / fps if fps and fps > 0 else 0.0", "fps > 0 -> (fps >= 0)",
               "an fps of 0 is already turned away by `fps and`"),
    Equivalent("edge_sdk/roi/geometry.py", "while changed and len(r) > 1:", "1 -> 0",
               "one region has nothing to merge with: the pass finds no pair either way"),
    Equivalent("edge_sdk/geometry.py", "if view.shape[:2] == crop.shape[:2]:", "2 -> 3",
               "both are BGR: their third dimension is 3 alike"),
    Equivalent("edge_sdk/roi/scheduler.py", "return np.zeros((0, 4), np.int32), np.zeros(0, np.int64), [], left", "4 -> 3",
               "no region at all: _pieces rebuilds the empty array as (0, 4)"),
    Equivalent("edge_sdk/roi/scheduler.py", "return np.zeros((0, 4), np.int32), np.zeros(0, np.int64), [], left", "4 -> 5",
               "no region at all: _pieces rebuilds the empty array as (0, 4)"),
    Equivalent("edge_sdk/roi/motion.py", "cv2.threshold(self._diff, self.threshold, 255,", "255 -> 256",
               "OpenCV saturates the value for a uint8 mask: 256 is written as 255"),
    Equivalent("edge_sdk/roi/motion.py", "if a1 > a0 and b1 > b0:", "a1 > a0 and b1 > b0 -> (a1 > a0 or b1 > b0)",
               "a region empty in one direction copies an empty slice: nothing"),
    Equivalent("edge_sdk/roi/motion.py", "if a1 > a0 and b1 > b0:", "b1 > b0 -> (b1 >= b0)", "as above: an empty slice"),
    Equivalent("edge_sdk/roi/motion.py", "if a1 > a0 and b1 > b0:", "a1 > a0 -> (a1 >= a0)", "as above: an empty slice"),
    Equivalent("edge_sdk/roi/scheduler.py", "int(cfg.max_fine_ms // self._ms_per_image)",
               "cfg.max_fine_ms // self._ms_per_image -> (cfg.max_fine_ms / self._ms_per_image)",
               "int() of a positive quotient truncates as floor division does"),
    Equivalent("edge_sdk/roi/scheduler.py", "track_levels[None, :] <= levels[:, None]",
               "track_levels[None, :] <= levels[:, None] -> (track_levels[None, :] < levels[:, None])",
               "a candidate region inside a track region of the same level is merged into it by _pieces (nested regions "
               "cost no more pixels joined), so it is examined once either way"),
]


@dataclass(frozen=True)
class Mutant:
    id: str
    group: str
    file: str
    find: str
    replace: str
    why: str


def M(id: str, group: str, file: str, find: str, replace: str, why: str) -> Mutant:
    return Mutant(id, group, file, find, replace, why)


PRE, CF, BASE = "edge_sdk/preprocess.py", "edge_sdk/decoders/centerface.py", "edge_sdk/decoders/_base.py"
PLACE = "edge_sdk/geometry.py"
NMS, GEO, CAL = "edge_sdk/decoders/nms.py", "edge_sdk/roi/geometry.py", "edge_sdk/builder/calibration.py"
CC, TC, Q = "edge_sdk/builder/calib_cache.py", "edge_sdk/trt/cache.py", "edge_sdk/telemetry/disk_queue.py"
SNAP = "edge_sdk/daemon/snapshots.py"
BATCH, PIPE, MCHECK = "edge_sdk/builder/batch.py", "edge_sdk/builder/pipeline.py", "edge_sdk/manifest_check.py"
RCFG, HND, DET = "edge_sdk/runtime/config.py", "edge_sdk/daemon/handlers.py", "edge_sdk/cli/detect.py"
BAT, BATD, STR = "edge_sdk/runtime/batcher.py", "edge_sdk/runtime/detectors/batched.py", "edge_sdk/runtime/streams.py"
DSTR, SVC, REP = "edge_sdk/daemon/streams.py", "edge_sdk/daemon/service.py", "edge_sdk/telemetry/reporter.py"
EXPO = "edge_sdk/telemetry/exposition.py"
SHD, PROMO, RMOD = "edge_sdk/daemon/shadow.py", "edge_sdk/daemon/promotion.py", "edge_sdk/daemon/model.py"
SHR, RUN = "edge_sdk/runtime/detectors/shared.py", "edge_sdk/daemon/model.py"
ABC = "edge_sdk/daemon/ab.py"
TRK, ASG, KF = "edge_sdk/tracking/tracker.py", "edge_sdk/tracking/assignment.py", "edge_sdk/tracking/kalman.py"
API, DETS, ZC = "edge_sdk/api.py", "edge_sdk/detections.py", "apps/zone_counter/zone_counter.py"
VOUT, GSTC = "edge_sdk/output/video.py", "edge_sdk/output/gst_child.py"
ARC, FET = "edge_sdk/bundle_archive.py", "edge_sdk/daemon/fetch.py"
RPLAN, RDRV = "edge_sdk/rollout/plan.py", "edge_sdk/rollout/driver.py"
EBLD = "edge_sdk/daemon/enginebuild.py"

MUTANTS: List[Mutant] = [
    # --- preprocess -----------------------------------------------------------------------------
    M("P1", "preprocess", PRE, 'src.transpose(2, 0, 1) if self.spec.color == "BGR" else src[..., ::-1].transpose(2, 0, 1)',
      "src.transpose(2, 0, 1)", "RGB branch dropped on the non-contiguous fallback"),
    M("P2", "preprocess", PLACE, "    y = (net_h - h) // 2\n", "    y = (net_h - h + 1) // 2\n", "letterbox pad_y rounds up"),
    M("P3", "preprocess", PLACE, "    y = (net_h - h) // 2\n", "    y = (net_h - h) // 2 + 1\n", "letterbox pad_y off by one"),
    M("P4", "preprocess", PLACE, "np.clip(out[:, [0, 2]], self.src[0], self.src[2])", "np.clip(out[:, [0, 2]], self.src[0], self.src[2] - 1)",
      "Placement.inverse clips x to W - 1"),
    M("P5", "preprocess", PLACE, "    x = (net_w - w) // 2\n", "    x = (net_w - w + 1) // 2\n", "letterbox pad_x rounds up"),
    M("P6", "preprocess", PLACE, "x, y, w / frame_w, h / frame_h)", "x, y, w / frame_w, w / frame_w)",
      "letterbox scale_y taken from the width"),
    M("P7", "preprocess", PRE, 'order = (0, 1, 2) if spec.color == "BGR" else (2, 1, 0)', "order = (0, 1, 2)",
      "RGB ignored on the cv2.split path"),
    M("P8", "preprocess", PRE,
      '            np.subtract(dst, self._mean, out=dst, casting="unsafe")\n            np.multiply(dst, self._scale, out=dst, casting="unsafe")\n',
      '            np.multiply(dst, self._scale, out=dst, casting="unsafe")\n            np.subtract(dst, self._mean, out=dst, casting="unsafe")\n',
      "scale applied before the mean"),
    M("P9", "preprocess", PRE, "np.all(self._mean == 0) and np.all(self._scale == 1)", "np.all(self._mean == 0) or np.all(self._scale == 1)",
      "normalization skipped when only the mean is zero"),
    M("P10", "preprocess", PRE, "            self._canvas[...] = self.spec.pad_value\n", "",
      "canvas not re-padded when the frame size changes"),
    M("P11", "preprocess", PLACE, "0, 0, net_w / frame_w, net_h / frame_h)", "0, 0, net_w / frame_w, net_w / frame_w)",
      "stretch scale_y taken from the width"),
    M("P12", "preprocess", PRE, "interp = cv2.INTER_AREA if self._area and rw < w else cv2.INTER_LINEAR", "interp = cv2.INTER_LINEAR",
      "interpolation = \"area\" shrinks without area averaging (aliasing)"),
    # --- decoders -------------------------------------------------------------------------------
    M("D1", "decoders", CF, "        s = self.stride\n", "        s = 4\n", "CenterFace ignores its configured stride"),
    M("D2", "decoders", CF, "x1 = (xs + off[1] + 0.5) * s", "x1 = (xs + off[0] + 0.5) * s", "CenterFace offsets dy/dx swapped"),
    M("D3", "decoders", CF, "y1 = (ys + off[0] + 0.5) * s", "y1 = (ys + off[0]) * s", "CenterFace cell centre without +0.5"),
    M("D4", "decoders", CF, "h = np.exp(size[0]) * s", "h = np.exp(size[1]) * s", "CenterFace box height from the width channel"),
    M("D5", "decoders", CF, "px = lm[1::2] * w + x1", "px = lm[0::2] * w + x1", "CenterFace landmark x from the y channels"),
    M("D6", "decoders", CF, "keep &= scores >= heat[ny, nx]", "keep &= scores > heat[ny, nx]", "local maximum drops plateaus"),
    M("D7", "decoders", "edge_sdk/decoders/yolo.py", "scores = sel[:, 4] * cls[np.arange(len(sel)), class_id]",
      "scores = cls[np.arange(len(sel)), class_id]", "YOLOv5 objectness ignored"),
    M("D8", "decoders", "edge_sdk/decoders/yolo.py", "return shape[1] <= shape[2]", "return shape[1] >= shape[2]",
      "YOLOv8 layout guessed the wrong way round"),
    M("D9", "decoders", "edge_sdk/decoders/yolox.py", "cx = (raw[:, 0] + self._grid[rows, 0]) * s", "cx = (raw[:, 0] + self._grid[rows, 1]) * s",
      "YOLOX grid x and y swapped"),
    M("D10", "decoders", "edge_sdk/decoders/ssd.py", "raw = raw[:, [1, 0, 3, 2]]", "raw = raw[:, [0, 1, 2, 3]]", "SSD yxyx boxes not reordered"),
    M("D11", "decoders", "edge_sdk/decoders/ssd.py", "masked[:, bg] = -np.inf", "masked[:, bg] = masked[:, bg]", "SSD background class not masked"),
    M("D12", "decoders", PLACE, "out[..., 1] = (out[..., 1] - self.y) / self.scale_y + self.src[1]",
      "out[..., 1] = (out[..., 1] - self.x) / self.scale_y + self.src[1]", "landmark y unpadded with pad_x"),
    M("D13", "decoders", BASE, "top = np.argpartition(-scores, self.pre_nms_topk - 1)[: self.pre_nms_topk]",
      "top = np.argpartition(-scores, self.pre_nms_topk - 1)[: self.pre_nms_topk - 1]", "pre-NMS top-k keeps one too few"),
    M("D14", "decoders", BASE, "    y1 = cy - h * 0.5\n", "    y1 = cy - w * 0.5\n", "cxcywh_to_xyxy takes y1 from the width"),
    # --- NMS ------------------------------------------------------------------------------------
    M("N1", "nms", NMS, "return inter / union > np.float32(iou)", "return inter / union >= np.float32(iou)", "loop NMS suppresses at IoU == threshold"),
    M("N2", "nms", NMS, "return inter > np.float32(iou)", "return inter >= np.float32(iou)", "matrix NMS suppresses at IoU == threshold"),
    M("N3", "nms", NMS, "        over &= cls[:, None] == cls[None, :]\n", "", "class-aware NMS ignores classes"),
    M("N4", "nms", NMS, 'order = np.argsort(-scores, kind="stable")', "order = np.argsort(-scores)", "score ties not kept in index order"),
    M("N5", "nms", NMS, "        if len(keep) >= limit:\n", "        if len(keep) > limit:\n", "loop NMS returns max_det + 1 boxes"),
    M("N6", "nms", NMS, "over = np.triu(over, k=1)", "over = np.triu(over, k=0)", "every box suppresses itself"),
    M("N7", "nms", NMS, "union = np.maximum(area[i] + area[j] - inter, np.float32(1e-12))",
      "union = np.maximum(area[i] + area[j], np.float32(1e-12))", "loop NMS union counts the overlap twice"),
    # --- ROI geometry ---------------------------------------------------------------------------
    M("G1", "roi-geometry", GEO, "    if starts[-1] != length - size:\n        starts.append(length - size)\n", "",
      "the last tile is not flush with the frame edge"),
    M("G2", "roi-geometry", GEO, "step = max(1, size - overlap)", "step = max(1, size)", "tiles do not overlap"),
    M("G3", "roi-geometry", GEO, "r[:, [1, 3]] = np.clip(r[:, [1, 3]], 0, frame_h)", "r[:, [1, 3]] = np.clip(r[:, [1, 3]], 0, frame_w)",
      "regions clipped in y to the frame width"),
    M("G4", "roi-geometry", GEO, "w = (b[:, 2] - b[:, 0]) * (1 + 2 * margin)", "w = (b[:, 2] - b[:, 0]) * (1 + margin)",
      "margin added on one side only"),
    M("G5", "roi-geometry", PLACE, "out[:, [1, 3]] = (out[:, [1, 3]] - self.y) / self.scale_y + self.src[1]",
      "out[:, [1, 3]] = (out[:, [1, 3]] - self.y) / self.scale_y + self.src[0]", "Placement.inverse adds the x origin to y"),
    M("G6", "roi-geometry", GEO, "y0 = int(min(max(round(cy - h / 2), 0), frame_h - h))", "y0 = int(min(max(round(cy - h / 2), 0), frame_w - h))",
      "window shifted back by the frame width in y"),
    M("G7", "roi-geometry", GEO, "scale = min(w_out / (x1 - x0), h_out / (y1 - y0))", "scale = max(w_out / (x1 - x0), h_out / (y1 - y0))",
      "crop scaled to cover instead of fit"),
    M("G8", "roi-geometry", GEO, "& (r[:, None, 2] <= c[None, :, 2])", "& (r[:, None, 2] < c[None, :, 2])", "a region flush with a cover is not inside"),
    M("G9", "roi-geometry", GEO, "near = a[0] - gap < b[2]", "near = a[0] - gap <= b[2]", "regions that only touch are merged"),
    # --- calibration ----------------------------------------------------------------------------
    M("C1", "calibration", CAL, "    return (i + 0.5) * width\n", "    return i * width\n", "entropy threshold at the bin's lower edge"),
    M("C2", "calibration", CAL, "i = int(np.argmin(kl)) + min(start, counts.size)", "i = int(np.argmin(kl))", "KL index not offset by the start bin"),
    M("C3", "calibration", CAL, "    counts[0] -= min(int(zeros), int(counts[0]))\n", "", "exact zeros not taken out of bin 0"),
    M("C4", "calibration", CAL, "frac = (target - before) / counts[k] if counts[k] > 0 else 1.0", "frac = 1.0",
      "percentile not interpolated inside its bin"),
    M("C5", "calibration", CAL, "        p[rows, i - 1] += tail\n", "", "outliers not folded into the last kept bin"),
    M("C6", "calibration", CAL, "return np.where(zero, eps, d * (1.0 - eps * n_zero))", "return np.where(zero, eps, d)",
      "smoothing adds mass without taking it back"),
    M("C7", "calibration", CAL, "np.multiply(a, np.float32(num_bins / amax), out=a)", "np.multiply(a, np.float32((num_bins - 1) / amax), out=a)",
      "histogram bin width off by one bin"),
    # --- the accuracy gate and cross-layer equalization -------------------------------------------
    M("EV1", "evaluate", "edge_sdk/builder/evaluate.py", "            cosine = dot / np.sqrt(na * nb)\n",
      "            cosine = abs(dot) / np.sqrt(na * nb)\n", "an exactly negated output scores cosine 1 and passes the gate"),
    M("EQ1", "equalize", "edge_sdk/builder/equalize.py", 'if hi or any(a.name == "max" for a in node.attribute):', "if hi:",
      "a Clip whose max is an attribute (ReLU6 below opset 11) is scaled through as if it were a Relu"),
    # --- calibration cache format ---------------------------------------------------------------
    M("K1", "calib-cache", CC, 'struct.pack(">f", float(np.float32(scale))).hex()', 'struct.pack("<f", float(np.float32(scale))).hex()',
      "scales written little-endian"),
    M("K2", "calib-cache", CC, 'scale_to_hex(amax / 127.0)', 'scale_to_hex(amax / 128.0)', "scale = amax / 128"),
    M("K3", "calib-cache", CC, "bytes.fromhex(text.zfill(8))", "bytes.fromhex(text)", "short hex scales not zero-padded"),
    M("K4", "calib-cache", CC, '    "percentile": "EntropyCalibration2",\n', '    "percentile": "PercentileCalibration",\n',
      "a header algorithm TensorRT has no calibrator for"),
    M("K5", "calib-cache", CC, "        if name in scales:\n", "        if False:\n", "a tensor listed twice is accepted"),
    # --- bundle: calibration tensors and --out checks -------------------------------------------
    M("B1", "bundle", "edge_sdk/builder/bundle.py", "    if np.array_equal(half.astype(np.float32), array):\n", "    if True:\n",
      "calibration tensors rounded to float16"),
    M("B2", "bundle", "edge_sdk/builder/bundle.py",
      '        probe = tempfile.mkdtemp(prefix=".edge-sdk-probe-", dir=str(ancestor))\n        os.rmdir(probe)\n',
      "        pass\n", "an unwritable --out parent is not noticed before the build"),
    # --- builder -> engine contract -------------------------------------------------------------
    M("L1", "engine-contract", "edge_sdk/builder/pipeline.py", "    name_nodes(fp32)", "    pass",
      "unnamed nodes shipped: the manifest's FP32 layers name nothing TensorRT knows"),
    # --- engine cache ---------------------------------------------------------------------------
    M("E1", "engine-cache", TC, '        if len(data) != meta.get("size"):\n', "        if False:\n", "engine size not checked"),
    M("E2", "engine-cache", TC, 'dla = "gpu" if self.dla_core is None else f"dla{int(self.dla_core)}"', 'dla = "gpu"',
      "the DLA core is not part of the file name"),
    # (not listed: skipping the unlink of the old sidecar in put(); equivalent, since a sidecar
    # only vouches for bytes of its own size and sha256)
    M("E3", "engine-cache", TC, '        if hashlib.sha256(data).hexdigest() != meta.get("sha256"):\n', "        if False:\n",
      "engine digest not checked (same-size corruption)"),
    M("E4", "engine-cache", TC, '        if meta.get("key") != key.to_dict():\n', "        if False:\n",
      "a sidecar of another key is accepted"),
    # --- ONNX Runtime providers -----------------------------------------------------------------
    M("R1", "backends", "edge_sdk/runtime/backends/onnxruntime.py",
      '        return [p for p in (PROVIDERS["cuda"], PROVIDERS["cpu"]) if p in have]\n', "        return list(have)\n",
      'resolve_providers("auto") returns every provider'),
    M("R2", "backends", "edge_sdk/runtime/backends/base.py",
      "if device_pointer(value) is not None or not np.can_cast(", "if not np.can_cast(",
      "a device tensor of another type is taken as if it could be cast"),
    M("R3", "backends", "edge_sdk/runtime/backends/base.py", "            if name not in feed:\n", "            if False:\n",
      "a missing input reaches the backend (a KeyError, not a BackendError naming the inputs)"),
    M("W1", "engine-loaders", "edge_sdk/trt/loaders.py", "self.build(self.bundle_dir, replace(self.options, force=True))",
      "self.build(self.bundle_dir, self.options)", "a rebuild takes the cached engine that failed to load again"),
    # --- the precision policy -------------------------------------------------------------------
    M("V1", "precision-policy", "edge_sdk/precision.py",
      "measured is not None and measured.chosen in bundle.variants():", "measured is not None:",
      "a device choice of a variant the bundle does not hold is followed"),
    M("V2", "precision-policy", "edge_sdk/precision.py", 'variant == "int8" and not engine_cached(variant) and engine_cached(BEST)',
      'variant == "int8" and engine_cached(BEST)', "the FP16+INT8 engine is taken even when the INT8 one is cached"),
    M("V3", "precision-policy", "edge_sdk/precision.py", "return min(passing, key=median_ms) if passing else None",
      "return max(passing, key=median_ms) if passing else None", "the slowest passing engine is chosen"),
    M("V4", "precision-policy", "edge_sdk/precision.py", 'if gated in ("fp16", "int8") and "fp16" in held:',
      'if gated == "int8" and "fp16" in held:', "a gated FP16 runs in FP32 on ONNX Runtime's CUDA provider"),
    # --- telemetry disk queue -------------------------------------------------------------------
    M("Q1", "disk-queue", Q, "if size > self.max_messages or nbytes > self.max_bytes:", "if size > self.max_messages:",
      "the byte bound is not enforced"),
    M("Q2", "disk-queue", Q, "if n >= count and b >= nbytes:", "if n >= count or b >= nbytes:", "trimming stops before the byte bound holds"),
    M("Q3", "disk-queue", Q, '            db.execute("DELETE FROM q WHERE qos = 0")', "            pass",
      "QoS-0 rows of older versions are kept"),
    M("Q4", "disk-queue", Q, "                self._rollback()\n", "                pass\n", "no ROLLBACK when a write fails"),
    # --- the snapshot folder's caps -------------------------------------------------------------
    M("S1", "snapshots", SNAP, "    shots.sort()\n", "    shots.sort(reverse=True)\n", "the newest snapshots are pruned first"),
    M("S2", "snapshots", SNAP, "in shots[:-1]:", "in shots:", "the snapshot just written may be pruned"),
    M("S3", "snapshots", SNAP, "size = st.st_size + (meta.stat().st_size if meta.exists() else 0)", "size = st.st_size",
      "the byte cap leaves out the .json files"),
    M("S4", "snapshots", SNAP, 'folder.glob("*.jpg")', 'folder.glob("*")', "pruning takes files that are not snapshots"),
    # --- bundles for batches --------------------------------------------------------------------
    M("BA1", "batch", BATCH, "for name, out, ref in zip(names, together, alone):\n            if out.shape[:1] != (n,) or ",
      "for name, out, ref in zip(names, together, alone):\n            if ", "an output of one row for a whole batch passes the shape check"),
    M("BA2", "batch", BATCH, "np.abs(out[i].astype(np.float64)", "np.abs(out[0].astype(np.float64)",
      "every row compared with the first row of the batch"),
    M("BA3", "batch", BATCH, "picked.append(x if (i // len(tensors)) % 2 == 0 else x[..., ::-1])", "picked.append(x)",
      "rows beyond the gate images repeat them"),
    M("BA4", "batch", PIPE, "    if config.max_batch > 1:\n        from edge_sdk.builder.batch import check_fp32",
      "    if config.max_batch > 2:\n        from edge_sdk.builder.batch import check_fp32",
      "the early check skipped at batch 2: a fixed-batch graph is found only after calibration"),
    M("BA5", "batch", PIPE, "batch_record(1, config.preferred_batch, config.max_batch, check)",
      "batch_record(1, config.max_batch, config.max_batch, check)", "the manifest's opt ignores --opt-batch"),
    M("BA6", "batch", MCHECK, 'high = entry.get("max") if isinstance(entry, dict) else 1',
      'high = entry.get("max") if isinstance(entry, dict) else None', "a bundle without a batch range takes any batch"),
    M("BA7", "batch", "edge_sdk/cli/engine.py", "    if max_batch is not None and recorded is not None:\n        check_batch(loaded, max_batch)\n",
      "", "edge-sdk engine builds a profile beyond the range the bundle was checked for"),
    M("BA8", "batch", "edge_sdk/trt/engine.py", 'batch_range(dla=dla_core is not None, recorded=bundle.get("batch"))',
      "batch_range(dla=dla_core is not None)", "the engine's default profile ignores the bundle's range"),
    # --- several sources: the config, the commands per stream, detect's arguments ---------------
    M("SR1", "sources", RCFG, "            seen.add(stream.id)\n", "", "duplicate stream ids pass"),
    M("SR2", "sources", RCFG, "        if len(streams) > 1:\n", "        if len(streams) > 2:\n",
      "two sources run in the one-stream pipeline, the second one ignored"),
    M("SR3", "sources", RCFG, "return self.replace(source=only.source(), mode=only.mode or self.mode, roi=only.roi or self.roi)",
      "return self.replace(source=only.source())", "a source's own mode and ROI settings are ignored"),
    M("SR4", "sources", RCFG, "    if len(sources) > MAX_SOURCES:\n", "    if len(sources) > MAX_SOURCES + 1:\n",
      "one source beyond the documented limit is taken"),
    M("SR5", "sources", HND, "device_wide = sorted(set(args) & DEVICE_SETTINGS)", "device_wide = []",
      "a stream's set changes the device's telemetry settings"),
    M("SR6", "sources", HND, "        self.streams(args)\n        device = d.config.device", "        device = d.config.device",
      "snapshot does not check its stream"),
    M("SR7", "sources", DET, "            out.append((str(position), value))", "            out.append((\"0\", value))",
      "plain sources all get id 0"),
    M("SR8", "detect-streams", DET, "    if all(s.mode == \"full\" for s in streams):", "    if True:",
      "several sources in tiles or roi run mode full"),
    # --- detect with several sources: the [batching] table, the batch the bundle takes, --max-frames
    M("DS1", "detect-streams", RCFG, "size = max(1, min(streams, limit) if limit else streams)", "size = streams",
      "a default max batch is not capped at what the bundle takes"),
    M("DS2", "detect-streams", "edge_sdk/runtime/streams.py", "        for owner in (model.bundle, model.backend):\n            check_batch(owner, batching.max_batch_size)\n",
      "        pass\n", "a max_batch_size beyond the bundle's range runs instead of being refused"),
    M("DS3", "detect-streams", DET, "                if cap and len(mine) >= cap:\n                    continue", "                if False:\n                    continue",
      "a stream that has its --max-frames goes on writing rows while the others catch up"),
    M("DS4", "detect-streams", RCFG, "mode=s.mode or self.mode, roi=s.roi or self.roi) for s in self.streams()",
      "mode=s.mode or \"full\", roi=s.roi or self.roi) for s in self.streams()", "several sources ignore the top-level mode"),
    M("DS5", "detect-streams", "edge_sdk/runtime/streams.py", "fps=stream.fps, ", "",
      "a source's fps cap is ignored when several run"),
    M("DS6", "detect-streams", RCFG, "if self.batching.frames_in_flight > self.pool_size - 2:", "if self.batching.frames_in_flight > self.pool_size:",
      "more frames in flight than the ring can give are taken"),
    M("DS7", "detect-streams", DET, "            table.loop = table.loop or loop\n", "",
      "--loop is lost when the sources come from the config"),
    M("DS8", "detect-streams", DET, "        if event[\"event\"] != \"stream_ended\":", "        if event[\"event\"] == \"source_failed\":",
      "a source given up is not said in the summary"),
    # --- several sources in the daemon: one batched model, per-stream telemetry and commands ------
    M("DD11", "daemon-streams", "edge_sdk/runtime/streams.py", "        for owner in (model.bundle, model.backend):\n            check_batch(owner, batching.max_batch_size)\n",
      "        pass\n", "the daemon runs a max_batch_size its bundle cannot take"),
    M("DD2", "daemon-streams", REP, 'if now in LOST_STATES and losses', 'if now == "given_up" and losses',
      "a camera being retried is not reported lost"),
    M("DD3", "daemon-streams", HND, "d.model.set_mode(args[\"mode\"], stream=stream, **thresholds)",
      "d.model.set_mode(args[\"mode\"], **thresholds)", "a stream's mode set changes every stream's"),
    M("DD4", "daemon-streams", SVC, "self._last_result = self._last_of[result.stream] = result",
      "self._last_result = result", "a stream's snapshot finds only the last frame of any stream"),
    M("DD5", "daemon-streams", EXPO, '1.0 if cam["state"] == "ok" else 0.0', "1.0", "a lost camera exported as up"),
    M("DD6", "daemon-streams", STR, "                formed = clock()\n                self._take_pending()\n",
      "                formed = clock()\n", "a reload's model never runs: the batch thread keeps the old detector"),
    M("DD7", "daemon-streams", REP, '            message["streams"] = self._streams_block(report["streams"], now)\n', "",
      "telemetry without the per-stream block"),
    M("DD8", "streams", STR, "stream.losses += stream.failures == 1", "stream.losses += 1",
      "every failed retry counts as one more camera loss"),
    M("DD9", "daemon-streams", REP, "                self._camera_back(sid, camera)\n            camera[\"lost\"] += 1\n",
      "            camera[\"lost\"] += 1\n", "a camera lost and back within one interval is never reported back"),
    M("DD10", "streams", STR, "frame=slot.buffer.copy() if self._keeps(stream.id) else None",
      "frame=slot.buffer if self._keeps(stream.id) else None", "kept frames are the ring's slots, overwritten by later frames"),
    # --- shadow runs, promotion and the rollback after it -----------------------------------------
    M("SH1", "shadow", SHD, "self._pairs.append((live, found.detections, live_ms, shadow_ms))",
      "self._pairs.append((found.detections, live, live_ms, shadow_ms))", "the live model compared against the shadow's"),
    M("SH2", "shadow", SHD, 'gap = np.searchsorted(a, grid, side="right") / len(a)', 'gap = np.searchsorted(a, grid) / len(a)',
      "the KS statistic counts ties on one side only"),
    M("SH3", "shadow", SHD, "if size + margin_mb * 1024 * 1024 <= free:", "if size <= free:",
      "the memory check forgets its margin"),
    M("SH4", "shadow", PROMO, "d.model.swap(run.model, keep=True)", "d.model.swap(run.model)",
      "a promotion retires the previous model: nothing to roll back to"),
    M("SH5", "shadow", PROMO, 'if before["detection_rate"]:', 'if before["detection_rate"] is None:',
      "the detection rate is never watched"),
    M("SH6", "shadow", PROMO, "                    self.daemon.model.release_kept()\n", "",
      "a promotion that held keeps the previous model loaded for ever"),
    M("SH7", "shadow", HND, '        d.shadow.check_idle("reload")\n', "", "a reload swaps the live model under a running shadow"),
    M("SH8", "shadow", RMOD, "            old, self.kept = None, old\n", "            self.kept = old\n",
      "the kept model is also retired (closed) while a rollback may need it"),
    M("SH9", "shadow", SHD, "        if result.cached:\n", "        if False:\n",
      "a result the prediction cache served compared with the shadow's run on a later frame"),
    # --- A/B tests: arm B's streams on a candidate beside the live model, per-arm figures -----------
    M("AB1", "ab", ABC, "fps=_r((len(samples) - streams) / span / streams) if span > 0 else None",
      "fps=_r((len(samples) - streams) / span) if span > 0 else None",
      "an arm's fps is its streams' sum: an arm of more streams looks faster"),
    M("AB2", "ab", RUN, "survivor, retired = (candidate, self.model) if promote else (self.model, candidate)",
      "survivor, retired = (self.model, candidate) if promote else (candidate, self.model)",
      "promote and abort swapped: promote keeps the live model"),
    M("AB3", "ab", SHR, "                        found.info = dict(found.info, arm=arm)\n", "",
      "results do not say which arm's model found them: no per-arm figures"),
    M("AB4", "ab", HND, '        d.ab.check_idle("reload")\n', "", "a reload swaps the live model under a running A/B test"),
    M("AB5", "ab", ABC, "if set(known) <= set(arm_b):", "if set(known) < set(arm_b):",
      "arm B may take every stream: nothing left to compare with"),
    M("AB6", "ab", RUN, '"b": (self.candidate, [self.streams[sid] for sid in self.arm_b])',
      '"b": (model, [self.streams[sid] for sid in self.arm_b])', "arm B's streams run the live model"),
    M("AB7", "ab", SHR, "participants.setdefault(id(shared), [shared, 0])[1] += 1",
      "participants.setdefault(id(shared), [shared, 1])[1] = 1",
      "each arm waits for one stream only: its calls are not gathered"),
    M("AB8", "ab", RUN, "build_stream_detector(running.shared_of(stream), model, setup)",
      "build_stream_detector(running.shared, model, setup)", "a stream of arm B set to another mode runs arm A's model"),
    # --- several streams each in its mode: a detector per stream, their backend calls gathered ----
    M("SM1", "stream-modes", SHR, "if self._pending and len(self._pending) >= self._active:", "if self._pending:",
      "every stream's call runs alone: nothing is gathered"),
    M("SM2", "stream-modes", SHR, "submission.outputs = [o[start: start + n] for o in outputs]",
      "submission.outputs = [o[:n] for o in outputs]", "every stream gets the first stream's rows back"),
    M("SM3", "stream-modes", SHR, "score_threshold=float(decoder.score_threshold), batch=shared.rows_per_call,",
      "score_threshold=float(decoder.score_threshold), batch=1,", "a stream's tiles and crops go one row per call"),
    M("SM4", "stream-modes", SHR, "        targets = self._targets(stream)\n        for sid in targets:",
      "        targets = list(self.detectors)\n        for sid in targets:", "a stream's thresholds change every stream's"),
    M("SM6", "stream-modes", RUN, "        running.replace(stream, detector)  # type: ignore[union-attr]\n", "",
      "a stream's mode set is answered but never runs"),
    M("SM7", "stream-modes", RUN, "        self.streams = {s.id: StreamSetup(s.id, s.mode or self.mode, s.roi or self.roi,",
      "        self.streams = {s.id: StreamSetup(s.id, self.mode, s.roi or self.roi,", "a source's own mode is ignored by the daemon"),
    # --- the dynamic batcher and one backend call per batch of frames ----------------------------
    M("DB1", "batcher", BAT, "if self._queued >= policy.target:", "if self._queued >= policy.max_batch_size:",
      "the largest preferred size no longer goes at once: it waits for the max"),
    M("DB2", "batcher", BAT, "* 1000.0 >= policy.max_queue_delay_ms", "* 1000.0 > policy.max_queue_delay_ms",
      "a request that has waited exactly the delay waits on"),
    M("DB3", "batcher", BAT, "return min((q[0] for q in self._queues.values() if q), key=lambda r: r.seq)",
      "return max((q[0] for q in self._queues.values() if q), key=lambda r: r.seq)",
      "the delay is counted from the newest stream's head: an old request waits for a stalled stream"),
    M("DB4", "batcher", BAT, "            row = sorted((q[depth] for q in queues), key=lambda r: r.seq)\n",
      "            row = sorted((r for q in queues for r in q), key=lambda r: r.seq)\n            queues = []\n",
      "first in, first out across streams: a flooding stream fills the batch"),
    M("DB5", "batcher", BAT, "        taken.sort(key=lambda r: r.seq)\n", "", "a batch's rows are in round order, not arrival order"),
    M("DB6", "batcher", BAT, "efficiency = sum(n for n, _, _ in window) / (size * len(window))",
      "efficiency = sum(n for n, _, _ in window) / (size * self._batches)", "efficiency averaged over every batch, not the window"),
    M("DB8", "batcher", BAT, "            self._expected.discard(stream_id)\n", "",
      "a stream of the last batch that put its next frame is still waited for: every batch waits the delay"),
    M("DB9", "batcher", BAT, "return max(put, self._free_at) if self._expected else put", "return put",
      "saturated streams that fell into two groups stay there, each batch half full"),
    M("DB7", "batcher", BAT, "                if self._closed:  # and nothing queued: _take_due flushes a closed batcher\n                    return None\n", "",
      "a drained batcher keeps its model thread waiting"),
    M("SB1", "batched-detector", BATD, "[o[row: row + 1] for o in outputs]", "[o[:1] for o in outputs]",
      "every frame gets the first row's detections"),
    M("SB2", "batched-detector", BATD, "(transforms[row],)", "(transforms[0],)", "every row is mapped back through the first frame's placement"),
    M("SB3", "batched-detector", BATD, "else pre.tensor[:n]", "else pre.tensor", "a short batch is inferred with the stale rows of the last"),
    M("SB4", "batched-detector", BATD, "                prepared.into_row(pre, row)  # a PreparedInput or PreparedPlanes\n", "",
      "a frame prepared ahead leaves its row unfilled"),
    M("SB6", "batched-detector", "edge_sdk/runtime/detectors/base.py", "        preprocessor.write_row(self.planes, 0)\n", "",
      "a single-frame detector infers stale rows for a frame prepared as uint8 planes"),
    M("SB7", "batched-detector", BATD, "        if not self._laid_out:\n            self._lay_out()\n", "",
      "a free batch grows the backend's memory batch size by batch size"),
    M("MS8", "streams", STR, "return self.frames_in_flight + 2 if source.live else self.pool_size",
      "return self.pool_size", "a live source's ring as deep as pool_size, its extra frames never filled"),
    M("MS9", "streams", STR, "inputs = stream.inputs = _Inputs(spec, self.ring_size(stream.source))",
      "inputs = _Inputs(spec, self.ring_size(stream.source))", "a stream's prepared inputs made anew for every frame"),
    M("MS10", "streams", STR, "            limit_malloc_arenas(self.malloc_arenas)\n", "            pass\n",
      "a pipeline's threads each take a malloc arena of their own"),
    M("P13", "preprocess", PRE, "self._to_planes(src, self._planes if planes is None else planes)", "self._to_planes(src, self._planes)",
      "planes prepared apart are written into the preprocessor's own, not the caller's"),
    M("SB5", "batched-detector", BATD, "        return spec.batch\n", "        return None\n",
      "a backend that cannot tell its input's shape is taken to have a free batch dimension"),
    M("MS1", "streams", STR, "                stream.cond.wait_for(lambda: stream.in_flight == 0)\n", "                pass\n",
      "a ring is stopped while its frames still wait in the batcher"),
    M("MS2", "streams", STR, "last = self._feeding == 0", "last = True", "the first stream to end closes the batcher on the others"),
    M("MS3", "streams", STR, "if cfg.max_attempts and stream.failures >= cfg.max_attempts:", "if False:",
      "a source that never opens is retried for ever"),
    M("MS4", "streams", STR, "                    self._leave(stream)  # before waiting for its last frames: they may be all that is queued\n                    return True\n",
      "                    return False\n", "a stream that ended is reopened as if it had failed"),
    M("MS6", "streams", STR, "                    self._leave(stream)  # before waiting for its last frames: they may be all that is queued\n",
      "", "the last stream to end waits the queue delay for its last frames before it closes the batcher"),
    M("MS7", "streams", STR, "deque(maxlen=EVENTS_KEPT)", "deque()", "a camera that keeps failing grows the event list without bound"),
    M("SD1", "stream-drift", "edge_sdk/daemon/drift.py",
      "        if min(live, key=lambda sid: (self._last[sid], self._order[sid])) != stream_id:\n            return False\n", "",
      "the drift monitor samples whichever stream comes first: one camera fills its window"),
    M("SD2", "stream-drift", "edge_sdk/daemon/drift.py", "now - latest < self._monitor.sample_s + 1.0", "False",
      "a frame is copied for each stream when a sample is due: copies the monitor drops, turns lost"),
    M("MS5", "streams", STR, "lambda: stream.in_flight < self.frames_in_flight or", "lambda: True or",
      "a stream puts every frame it captures into the batcher, however many wait there"),
    # --- the tracker ------------------------------------------------------------------------------
    M("TR1", "tracking", TRK, "if self.frame == 1:", "if True:", "every new track is confirmed on its first hit"),
    M("TR2", "tracking", TRK, "self.frame - track.last_frame > self.max_lost", "self.frame - track.last_frame >= self.max_lost",
      "a lost track ends one frame before its buffer runs out"),
    M("TR3", "tracking", TRK, "still = [t for t in free_tracks if t.state == TRACKED]", "still = []",
      "low-score detections are never matched (one-stage association)"),
    M("TR4", "tracking", TRK, "        for track in unmatched:\n            track.state = LOST\n", "",
      "a track missed in a frame stays tracked and never ends"),
    M("TR5", "tracking", TRK, "cost = np.where(same, 1.0 - iou, 1.0)", "cost = 1.0 - iou", "classes share tracks"),
    M("TR6", "tracking", TRK, "        mean[[t.state != TRACKED for t in tracks], 7] = 0.0\n", "",
      "a lost track's height keeps growing while it is predicted"),
    M("TR7", "tracking", TRK, "        self._next_id += 1\n", "", "every confirmed track gets the same id"),
    M("TR8", "tracking", TRK, "return (scores >= self.high_score) & (scores >= self.new_track_score)",
      "return (scores >= self.high_score) & (scores >= self.low_score)",
      "any detection the second stage takes starts a track"),
    M("AS1", "tracking", ASG, "allowed = cost < limit", "allowed = cost <= limit + 1.0", "pairs above the limit are matched"),
    M("AS2", "tracking", ASG, "minv[free] -= delta", "minv[free] -= 0.0", "the Hungarian slack is not reduced"),
    M("AS3", "tracking", ASG, "alone = (ok.sum(axis=1) == 1) & (ok.sum(axis=0)[only] == 1)", "alone = ok.sum(axis=1) == 1",
      "a row with one option takes it even where another row needs that column more"),
    M("TR9", "tracking", TRK, "            mean[moving] = self._moved([t for t in self.tracks if t.confirmed])[0]\n", "            pass\n",
      "the predicted boxes stay where the tracks were last seen"),
    M("TR10", "tracking", TRK, "if TRACK_ID in detections.data:", "if False:",
      "detections the ROI scheduler tracked move the stream's tracker a second time"),
    M("RT1", "roi-strategies", "edge_sdk/roi/scheduler.py", "recent = unseen <= cfg.track_ttl", "recent = unseen >= 0",
      "lost tracks keep their regions for the tracker's whole buffer"),
    M("RT2", "roi-strategies", "edge_sdk/roi/scheduler.py", "kept = np.lexsort((-scores, unseen))[:cfg.max_tracks]",
      "kept = np.argsort(-scores, kind=\"stable\")[:cfg.max_tracks]", "the most confident tracks get regions, however long unseen"),
    M("RT3", "roi-strategies", "edge_sdk/roi/scheduler.py", "        det.data[TRACK_ID] = ids\n", "",
      "the stream's tracker's ids are not reported"),
    M("RT4", "roi-strategies", "edge_sdk/roi/scheduler.py", "left = (ids < 0) & ~self.tracker.config.starts_track(det.confidence)",
      "left = ids < -1", "what the tracker keeps no track of gets no region in the next frame"),
    M("KF1", "tracking", KF, "self.motion[:4, 4:] = np.eye(4)", "self.motion[:4, 4:] = 0.0", "no motion: the filter predicts no move"),
    M("KF2", "tracking", KF, "return np.stack([xyxy[:, 0] + w / 2, xyxy[:, 1] + h / 2, w / h, h], axis=1)",
      "return np.stack([xyxy[:, 0] + w / 2, xyxy[:, 1] + h / 2, h / w, h], axis=1)", "aspect taken as h / w"),
    # --- the top-level API -------------------------------------------------------------------------
    M("AP1", "api", API, "        parse_uri(source)  # no such file or scheme: SourceError now\n", "",
      "a missing source is found only at the first frame"),
    M("AP2", "api", API, "        Bundle.load(Path(bundle), verify=False)", "        Path(bundle)",
      "a folder that is not a bundle is found only at the first frame"),
    M("AP3", "api", API, "source={\"uri\": str(source), \"loop\": loop, \"fps\": fps}", "source={\"uri\": str(source)}",
      "loop and fps are taken and dropped"),
    M("AP4", "api", DETS, "return self[ids >= 0] if ids is not None", "return self[ids >= -1] if ids is not None",
      "detections without a confirmed track count as tracks"),
    M("AP5", "api", DETS, "else self[np.zeros(0, np.int64)]", "else self",
      "without tracking every detection is a track"),
    # --- the zone counter: unique tracks per zone, line crossings ---------------------------------
    M("ZC1", "zone-counter", ZC, "                if side == 0:\n                    continue  # on the line: a crossing is decided by the side it leaves to\n",
      "", "a track that touches the line and goes back is counted as crossing"),
    M("ZC2", "zone-counter", ZC, "last[0] != side and line.meets(last[1], centre)", "last[0] != side",
      "a track that passes beside the line's end is counted as crossing it"),
    M("ZC3", "zone-counter", ZC, "if h and name not in t.zones", "if h",
      "a track is counted again each frame it is in a zone"),
    M("ZC4", "zone-counter", ZC, "direction = line.names[0] if last[0] > 0 else line.names[1]",
      "direction = line.names[0] if last[0] < 0 else line.names[1]", "crossings counted under the other direction"),
    M("ZC5", "zone-counter", ZC, "confirmed = ids >= 0", "confirmed = ids >= -1",
      "detections without a confirmed track are counted as one track"),
    M("ZC6", "zone-counter", ZC, "        if sides[0] < 0:\n            line.names = (second, first)\n", "",
      "the side names follow the order in the file, not the side their points lie on"),
    M("ZC7", "zone-counter", ZC, "self._frame - t.seen > self.forget_after", "self._frame - t.seen >= self.forget_after",
      "a track is forgotten one frame early"),
    M("ZC8", "zone-counter", ZC, "        if row_stream != stream:\n            return\n", "",
      "--listen counts the frames of every stream of the device as one camera's"),
    M("ZC9", "zone-counter", ZC, "\n            frames.put_nowait(parsed)", "\n            frames.put_nowait(parsed) if False else None",
      "--listen drops every frame"),
    # --- video out ------------------------------------------------------------------------------
    M("VO1", "video-out", VOUT, "elif len(self._ready) >= self.queue:", "elif False:",
      "a full ring grows instead of dropping its oldest frame"),
    M("VO2", "video-out", VOUT, "                self.dropped += 1\n", "", "frames dropped from a full ring are not counted"),
    M("VO3", "video-out", VOUT, 'if "error" in self._hello:', "if False:", "a child that could not start is taken as ready"),
    M("VO4", "video-out", VOUT, "if not folder.is_dir():", "if False:", "an MP4 in a missing folder is accepted"),
    M("VO5", "video-out", VOUT, "if (index >> (bits - 1 - bit)) & 1", "if (index >> bit) & 1",
      "the burned index is written least significant bit first, read most significant first"),
    M("VO6", "video-out", GSTC, "if self.server.attach(None) == 0:", "if False:", "an RTSP port in use goes unnoticed"),
    M("VO7", "video-out", GSTC, '    names = ENCODERS if wanted == "auto" else (wanted,)\n', '    names = ENCODERS\n',
      "an encoder asked for by name falls back to another"),
    M("VO9", "video-out", GSTC, "if src is None or src.get_state(0)[1] != self.Gst.State.PLAYING:", "if src is None:",
      "frames pushed before the media plays are stamped with the clock's absolute time"),
    # --- a bundle archive fetched by URL ---------------------------------------------------------
    M("BF1", "bundle-fetch", ARC, 'gz.write(b"\\0" * (-size % _BLOCK))', 'gz.write(b"\\0" * (_BLOCK - size % _BLOCK))',
      "a file of a whole number of blocks (an empty one) gets a block of padding too many"),
    M("BF9", "bundle-fetch", ARC, "checksum = b\"%06o\\0 \" % sum(block)", "checksum = b\"%06o\\0 \" % (sum(block) + 1)",
      "a header checksum that no tar reader accepts"),
    M("BF2", "bundle-fetch", ARC, 'if not parts or ".." in parts:', "if not parts:", "a member named ../x is unpacked outside"),
    M("BF3", "bundle-fetch", ARC, "if not (member.isfile() or member.isdir()):", "if member.isdev():",
      "a symlink member is unpacked"),
    M("BF4", "bundle-fetch", FET, 'headers["Range"] = f"bytes={offset}-"', 'headers["X-Range"] = f"bytes={offset}-"',
      "a cut download starts over instead of resuming"),
    M("BF5", "bundle-fetch", FET, "            if response.status != 206:\n", "            if False:\n",
      "a server that ignores Range has its whole file appended to the part"),
    M("BF6", "bundle-fetch", FET, "            if got != sha256:", "            if False:", "the sha256 is never checked"),
    M("BF7", "bundle-fetch", FET, "        return total is None or offset == total", "        return True",
      "a connection closed halfway is taken as the whole file"),
    M("BF10", "bundle-fetch", FET, "urllib.request.build_opener(_HttpOnly())", "urllib.request.build_opener()",
      "a redirect to ftp:// or to a URL with credentials is followed"),
    M("BF8", "bundle-fetch", HND, '        rollout = {"role": args["role"], "bundle": name} if "role" in args else None',
      '        rollout = {"role": args["role"], "bundle": name} if "role" in args else d.rollout',
      "a reload without a role keeps the last role in the status"),
    # --- fleet rollout ------------------------------------------------------------------------------
    M("RO1", "rollout", RPLAN, "upto = min(len(rest), math.ceil(share * len(rest) - 1e-9))",
      "upto = min(len(rest), int(share * len(rest)))", "a wave's share rounded down: small waves left empty"),
    M("RO2", "rollout", RPLAN, "return value is not None and OPERATORS[self.op](value, self.bound)",
      "return value is None or OPERATORS[self.op](value, self.bound)", "a missing figure passes its gate"),
    M("RO3", "rollout", RDRV, "if not promoting and all(passed.get(d) or waiting.get(d) is None for d in devices):",
      "if not promoting and any(passed.get(d) or waiting.get(d) is None for d in devices):",
      "a wave promoted when one of its devices passes"),
    M("RO4", "rollout", RDRV, "back = sorted(set(st.promoted) | {", "back = sorted(set() | {",
      "a failure rolls back only the step that failed"),
    M("RO5", "rollout", RDRV, "            st.done += 1\n            st.save(self.bundle)\n",
      "            st.done += 1\n", "the finished step is not written to the state file"),
    # --- a reload's engine build in the status ----------------------------------------------------
    M("EB1", "engine-build", EBLD, "now - self._published >= EVERY_S", "now - self._published >= 0",
      "the status published on every frame while a build runs"),
    M("EB2", "engine-build", EBLD, "            self._ended = self._shown\n", "            self._ended = False\n",
      "the block's end never published: the status shows a finished build"),
    M("EB3", "engine-build", "edge_sdk/daemon/model.py", "        finally:\n            self.engine_build.end()\n", "",
      "a failed load leaves its build in the status"),
    M("EB4", "engine-build", "edge_sdk/runtime/model.py", 'options = {"progress": progress} if progress is not None else {}',
      "options = {}", "the builder's progress never reaches the status"),
]


# --- generated mutants ------------------------------------------------------------------------

# More generated mutants that change no promised behaviour, keyed by file, the mutated line as
# written (stripped) and the change, with the reason; they join EQUIVALENT below.
_EQUIVALENT_LINES: Dict[Tuple[str, str, str], str] = {
    ("edge_sdk/decoders/end2end.py", "n = int(np.asarray(outputs[index[\"count\"]][i]).reshape(-1)[0])", "-1 -> (1)"):
        ("the count output is [N, 1] (num_detections of EfficientNMS_TRT): for one number per image reshape(1) reads it "
         "as reshape(-1) does"),
    ("edge_sdk/runtime/cache.py", "self.last_difference = self._cv2.norm(gray, self._ref, self._cv2.NORM_INF)",
     "self._cv2.norm(gray, self._ref, self._cv2.NORM_INF) -> (self._cv2.norm(self._ref, gray, self._cv2.NORM_INF))"):
        "the largest absolute difference is the same either way round",
    ("edge_sdk/roi/geometry.py", "result: List[Tuple[int, int, int]] = [(0, 0, 0)] * len(sizes)", "0 -> 1"):
        "a placeholder: every entry is replaced by its placement before the list is returned",
    ("edge_sdk/telemetry/signing.py", 'out.pop("hmac", None)', 'dropped: out.pop("hmac", None)'):
        "the signature leaves the hmac field out (canonical) and the new one replaces it on the next line",
    ("edge_sdk/fsutil.py", "def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:", "1 -> 2"):
        "read chunk size: the digest is the same",
    ("edge_sdk/fsutil.py", "def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:", "20 -> 21"):
        "read chunk size: the digest is the same",
    ("edge_sdk/fsutil.py", "if sys.version_info >= (3, 11):", "sys.version_info >= (3, 11) -> (sys.version_info > (3, 11))"):
        "(3, 11, x, ...) > (3, 11) too: the same interpreters take tomllib",
    ("edge_sdk/fsutil.py", "if sys.version_info >= (3, 11):", "3 -> 2"):
        ("every Python 3 is past (2, 11): the same branch on the 3.11 that runs the sweep; on 3.8 it would import a "
         "tomllib that is not there, which CI's Python 3.8 run of the config tests finds"),
    ("edge_sdk/validate.py", "if digits > 19 or not -INT_LIMIT <= int(text) < INT_LIMIT:", "19 -> 20"):
        "JSON has no leading zeros: a 20-digit integer is beyond int64, and the range check refuses it",
    ("edge_sdk/validate.py", 'if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth(raw) > max_depth:',
     "raw.count(b\"[\") + raw.count(b\"{\") > max_depth -> (raw.count(b'[') + raw.count(b'{') >= max_depth)"):
        "with exactly max_depth brackets the depth cannot exceed max_depth: the exact count decides the same",
    ("edge_sdk/fsutil.py", "if self.final.is_dir() and not self.final.is_symlink():",
     "self.final.is_dir() and not self.final.is_symlink() -> (self.final.is_dir() or not self.final.is_symlink())"):
        "a lock on what a link points to, or a failed open of a plain file, changes nothing: the swap moves the entry itself",
    ("edge_sdk/fsutil.py", 'fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))', "0 -> 1"):
        "the default is used only where os has no O_DIRECTORY (not Linux)",
    ("edge_sdk/builder/sensitivity.py", "if value <= 0:", "value <= 0 -> (value < 0)"):
        "a zero sensitivity keyed (0, -0 / cost) sorts after every positive one and before every negative one, as (1, 0) does",
    ("edge_sdk/builder/sensitivity.py", "return (1, -value)", "1 -> 2"):
        "only the label of the group that sorts last changes",
    ("edge_sdk/builder/sensitivity.py", "return (0, -value / max(cost, 1))", "0 -> 1"):
        "positive sensitivities key below zero and the others at or above it: the same order in one group",
    ("edge_sdk/manifest_check.py", "if batch * channels * height * width > MAX_INPUT_ELEMENTS:",
     "batch * channels * height * width > MAX_INPUT_ELEMENTS -> (batch * channels * height * width >= MAX_INPUT_ELEMENTS)"):
        "three channels: no shape holds exactly 2**27 values",
    ("edge_sdk/decoders/end2end.py", "if 2 <= len(shapes) <= 3:", "2 <= len(shapes) <= 3 -> (2 < len(shapes) <= 3)"):
        "the branch returns only for three outputs",
    ("edge_sdk/builder/equalize.py", "if group == 1 and w2_shape[1] == out_channels:",
     "group == 1 and w2_shape[1] == out_channels -> (group == 1 or w2_shape[1] == out_channels)"):
        "in a valid graph a conv of group 1 reads all of A's channels, and a grouped one fewer",
    ("edge_sdk/builder/equalize.py", "params = list(bn.input[1:5])", "5 -> 6"):
        "BatchNormalization has exactly five inputs",
    ("edge_sdk/cuda/preprocess.py", "transform, slot = plan_slot((0, 0, w, h), self.spec)", "0 -> 1"):
        "a whole frame's crop origin is not passed to the frame kernel (and the transform does not depend on it)",
    ("edge_sdk/cuda/preprocess.py",
     'self._common = ([ctypes.c_int(1 if spec.color == "RGB" else 0), ctypes.c_int(1 if self._fp16 else 0),', "1 -> 2"):
        "the kernel reads the rgb and fp16 flags as true when not zero",
    ("edge_sdk/builder/probe.py", 'Normalization("0..255", (0.0,) * 3, (1.0,) * 3),', "3 -> 4"):
        "a fourth mean or scale is never read: for_color takes channels 0 to 2",
    ("edge_sdk/builder/equalize.py",
     'bias_name = node.input[2] if len(node.input) > 2 and node.input[2] else f"{node.input[1]}_bias"', "2 -> 3"):
        "the folded bias then gets a new name (its values are the same; the old one is left unread)",
    ("edge_sdk/builder/equalize.py", "shared = [n for n in (a.input[1], bias, b.input[1]) if n and uses.get(n, 0) != 1]",
     "0 -> 1"):
        "the default is never read: the pair's own nodes read each of these tensors",
    ("edge_sdk/builder/probe.py", 'cap = int(getattr(decoder, "max_detections", 0) or 0)', "0 -> 1"):
        "every decoder has max_detections >= 1 (spec_int's lower bound): neither default is read",
    ("edge_sdk/builder/probe.py", "if len(paths) <= limit:", "len(paths) <= limit -> (len(paths) < limit)"):
        "with exactly `limit` paths the even spread picks each of them once, in order",
    ("edge_sdk/decoders/_base.py",
     "return np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32), {}", "4 -> 5"):
        "no rows either way: Detections and Placement.inverse reshape the boxes to (-1, 4)",
    ("edge_sdk/builder/probe.py", 'Normalization("0..1", (0.0,) * 3, (1.0 / 255.0,) * 3),', "3 -> 4"):
        "a fourth mean or scale is never read: for_color takes channels 0 to 2",
    ("edge_sdk/manifest.py", "raw = f.read(MANIFEST_MAX_BYTES + 1)", "1 -> 2"):
        "reading one byte or two beyond the bound: the size check refuses either",
    ("edge_sdk/daemon/commands.py", "self.not_before_ms = 0", "0 -> 1"):
        "a ts below 1 ms (1970) is outside any clock window anyway",
    ("edge_sdk/daemon/commands.py", "self._writes = 0", "0 -> 1"):
        "when pruning runs: it removes only ids past their keep time",
    ("edge_sdk/daemon/commands.py", "self._writes += 1", "1 -> 2"):
        "when pruning runs: it removes only ids past their keep time",
    ("edge_sdk/daemon/commands.py", "if self._writes % 256 == 0:", "self._writes % 256 == 0 -> (self._writes % 256 != 0)"):
        "prunes more often; pruning removes only ids past their keep time",
}

EQUIVALENT += [Equivalent(file, line, why, reason) for (file, line, why), reason in _EQUIVALENT_LINES.items()]


_SWAPS = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.And: ast.Or, ast.Or: ast.And,
}


def _skipped(node: ast.AST, parents: Dict[ast.AST, ast.AST]) -> bool:
    """Messages and docstrings: a mutant there changes text, not behaviour."""
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.JoinedStr, ast.Raise, ast.Assert)):
            return True
        if isinstance(node, ast.Call) and _is_log(node):
            return True
    return False


def _is_log(call: ast.Call) -> bool:
    return getattr(call.func, "attr", "") in ("warning", "info", "debug", "error", "warn", "exception")


def _name(func: ast.AST) -> str:
    return getattr(func, "id", "") or getattr(func, "attr", "")


# calls whose swapped arguments only raise a TypeError (no bug anyone would ship)
_NOT_SWAPPED = ("isinstance", "getattr", "setattr", "hasattr", "round", "get", "setdefault", "pop",
                "min", "max", "minimum", "maximum")  # and calls whose arguments commute


def _sites(node: ast.AST) -> List[str]:
    """The kinds of mutation that apply to `node` (see _mutate_segment)."""
    kinds: List[str] = []
    if isinstance(node, ast.Compare):
        kinds += [f"op{k}" for k, op in enumerate(node.ops) if type(op) in _SWAPS]
    elif isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in _SWAPS:
        kinds.append("op")
    elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 4096:
        kinds += ["const+1"] + (["const-1"] if node.value >= 1 else [])
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        kinds.append("unary")
    elif isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args):
        name = _name(node.func)
        if name in ("abs", "fabs") and len(node.args) == 1:
            kinds.append("abs")
        if name in ("min", "max", "minimum", "maximum"):
            kinds.append("minmax")
        a = node.args[:2]
        if (len(a) == 2 and name not in _NOT_SWAPPED and not any(isinstance(x, ast.Constant) for x in a)
                and ast.unparse(a[0]) != ast.unparse(a[1])):
            kinds.append("swap")
    return kinds


def generated(group: str, files: Sequence[str], root: Path) -> Iterator[Mutant]:
    """Generated mutants of the group's files: an operator, constant, argument order or call
    changed within one line, or a statement that only calls something replaced by `pass`."""
    for rel in files:
        source = (root / rel).read_text()
        tree = ast.parse(source)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        lines = source.splitlines(keepends=True)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and not _is_log(node.value)
                    and node.col_offset == len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())):
                first, last = node.lineno - 1, node.end_lineno or node.lineno
                old = "".join(lines[first:last])
                new = " " * node.col_offset + "pass\n"
                find, replace = _unique(source, lines, first, old, new)
                yield Mutant(f"A:{rel.split('/')[-1]}:{node.lineno}:{node.col_offset}:drop", group, rel, find, replace,
                             f"dropped: {lines[first].strip()}")
                continue
            for kind in _sites(node):
                if _skipped(node, parents) or node.lineno != node.end_lineno:
                    continue
                if kind == "const+1" and _inferred_size(node, parents):
                    continue
                line = lines[node.lineno - 1]
                segment = line[node.col_offset:node.end_col_offset]
                mutated = _mutate_segment(node, kind)
                if mutated is None or mutated == segment:
                    continue
                find, replace = _unique(source, lines, node.lineno - 1, line,
                                        line[:node.col_offset] + mutated + line[node.end_col_offset:])
                yield Mutant(f"A:{rel.split('/')[-1]}:{node.lineno}:{node.col_offset}:{kind}", group, rel,
                             find, replace, f"{segment.strip()} -> {mutated.strip()}")


def _inferred_size(node: ast.AST, parents: Dict[ast.AST, ast.AST]) -> bool:
    """The 1 of a -1 given to reshape: numpy infers any negative size, so -2 is the same call."""
    minus = parents.get(node)
    call = parents.get(minus) if minus is not None else None
    return (isinstance(minus, ast.UnaryOp) and isinstance(minus.op, ast.USub) and isinstance(call, ast.Call)
            and _name(call.func) == "reshape")


def _unique(source: str, lines: Sequence[str], first: int, old: str, new: str) -> Tuple[str, str]:
    """(find, replace) widened with the lines before it until `find` occurs once in the file."""
    while source.count(old) > 1 and first > 0:
        first -= 1
        old, new = lines[first] + old, lines[first] + new
    return old, new


def _mutate_segment(node: ast.AST, kind: str) -> Optional[str]:
    import copy

    new = copy.deepcopy(node)
    if kind.startswith("const"):
        new.value = node.value + (1 if kind == "const+1" else -1)  # type: ignore[attr-defined]
        return ast.unparse(new)
    if kind == "op":
        new.op = _SWAPS[type(node.op)]()  # type: ignore[attr-defined]
    elif kind == "unary":
        return f"({ast.unparse(node.operand)})"  # type: ignore[attr-defined]
    elif kind == "abs":
        return f"({ast.unparse(node.args[0])})"  # type: ignore[attr-defined]
    elif kind == "minmax":
        other = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum"}
        func = new.func  # type: ignore[attr-defined]
        if isinstance(func, ast.Name):
            func.id = other[func.id]
        else:
            func.attr = other[func.attr]
    elif kind == "swap":
        args = new.args  # type: ignore[attr-defined]
        args[0], args[1] = args[1], args[0]
    else:
        k = int(kind[2:])
        new.ops[k] = _SWAPS[type(node.ops[k])]()  # type: ignore[attr-defined]
    return f"({ast.unparse(new)})"


# --- running ----------------------------------------------------------------------------------


def copy_repo(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


NOT_RUN = "not run: "  # the status of a run (or a mutant) that no test ran against: NOT_RUN + why
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_CLOSING = re.compile(r" in \d+(\.\d+)?s( \([\d:]+\))?$")
_RAN = ("passed", "failed", "error", "xfailed", "xpassed")  # outcomes of a test that ran


def summary_counts(output: str) -> Optional[Dict[str, int]]:
    """The counts on pytest's closing line ("2 passed, 1 skipped in 0.20s", "no tests ran in
    0.01s"), by outcome ("errors" read as "error"); None when the output has no such line."""
    for line in reversed(output.splitlines()):
        text = line.strip().strip("=").strip()
        if _CLOSING.search(text):
            counts: Dict[str, int] = {}
            for n, kind in _COUNT.findall(text):
                kind = "error" if kind.startswith("error") else kind
                counts[kind] = counts.get(kind, 0) + int(n)
            return counts
    return None


def no_test_ran(returncode: int, output: str) -> Optional[str]:
    """Why a pytest run that found no fault ran no test ("every test skipped", "no test
    collected", "every test deselected"); None when a test ran (or it failed)."""
    counts = summary_counts(output)
    # 5 is pytest's "no tests collected", also when every test file skipped itself at import
    if returncode == 5 or (returncode == 0 and counts is not None and not any(counts.get(k) for k in _RAN)):
        counts = counts or {}
        return ("every test skipped" if counts.get("skipped") else "every test deselected" if counts.get("deselected")
                else "no test collected")
    return None


def run_tests(copy: Path, tests: Sequence[str], python: str, timeout: float) -> Tuple[str, float]:
    """("SURVIVED" when the tests passed, "killed..." when one failed, NOT_RUN + why when none
    ran: every test skipped or none collected), and the seconds it took."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    cmd = [python, "-m", "pytest", "-x", "-q", "--color=no", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed (timeout)", time.monotonic() - started
    seconds = time.monotonic() - started
    why = no_test_ran(proc.returncode, proc.stdout.decode(errors="replace"))
    if why is not None:
        return NOT_RUN + why, seconds
    if proc.returncode == 0:
        return "SURVIVED", seconds
    return ("killed" if proc.returncode == 1 else f"killed (pytest exit {proc.returncode})"), seconds


def scores(results: Sequence[Tuple[Mutant, str, float]], modules: Sequence[str]) -> str:
    """The per-module table: killed / (run, equivalents not counted)."""
    rows = [f"\n{'module':18} {'run':>5} {'killed':>7} {'survived':>9} {'equivalent':>11} {'score':>7}"]
    for name in modules:
        mine = [status for m, status, _ in results if m.group == name]
        run = [st for st in mine if st.startswith(("killed", "SURVIVED"))]
        killed = sum(st.startswith("killed") for st in run)
        score = f"{100.0 * killed / len(run):6.1f}%" if run else "      -"
        rows.append(f"{name:18} {len(run):5} {killed:7} {len(run) - killed:9} {mine.count('equivalent'):11} {score}")
    return "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", nargs="*", choices=sorted(GROUPS), help="only these groups")
    parser.add_argument("--only", nargs="*", help="only these mutant ids")
    parser.add_argument("--auto", metavar="GROUP", choices=sorted(GROUPS), help="generated operator mutants of one group instead of the list")
    parser.add_argument("--sweep", nargs="*", metavar="MODULE", help=f"generated mutants of these SWEEP modules "
                        f"(all when none is named: {', '.join(SWEEP)}), one module at a time, and a score per module")
    parser.add_argument("--sample", type=int, default=0, help="with --auto or --sweep: run this many per module, drawn at random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs pytest (default: this one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    parser.add_argument("--tests-at", metavar="REV", help="run the tests as they were at this git revision (a before/after count)")
    args = parser.parse_args(argv)

    swept: List[str] = []
    if args.sweep is not None or args.auto:
        swept = [args.auto] if args.auto else (args.sweep or list(SWEEP))
        unknown = [name for name in swept if name not in GROUPS]
        if unknown:
            parser.error(f"not a module of the sweep: {', '.join(unknown)} (one of {', '.join(SWEEP)})")
    results: List[Tuple[Mutant, str, float]] = []
    if swept:
        mutants = []
        for name in swept:
            every = list(generated(name, GROUPS[name].files, ROOT))
            if args.only:
                every = [m for m in every if m.id in args.only]
            equivalent = [m for m in every if any(e.matches(m) for e in EQUIVALENT)]
            results += [(m, "equivalent", 0.0) for m in equivalent]
            chosen = [m for m in every if m not in equivalent]
            if args.sample and args.sample < len(chosen):
                chosen = random.Random(args.seed).sample(chosen, args.sample)
            print(f"{len(every)} generated mutants in {name} ({len(equivalent)} marked equivalent); running {len(chosen)}")
            mutants += chosen
    else:
        mutants = [m for m in MUTANTS if (not args.group or m.group in args.group) and (not args.only or m.id in args.only)]
    if args.list:
        for m in mutants:
            print(f"{m.id:8} {m.group:16} {m.file:45} {m.why}")
        return 0

    work = Path(tempfile.mkdtemp(prefix="edge-sdk-mutants-"))
    try:
        copy = work / "repo"
        copy_repo(copy)
        if args.tests_at:
            shutil.rmtree(copy / "tests")
            archive = subprocess.run(["git", "archive", args.tests_at, "tests"], cwd=ROOT, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
        where = subprocess.run([args.python, "-c", "import edge_sdk; print(edge_sdk.__file__)"], cwd=copy,
                               env=dict(os.environ, PYTHONPATH=str(copy)), capture_output=True, text=True).stdout.strip()
        if not where.startswith(str(copy)):
            print(f"the copy's edge_sdk is not the one imported ({where}); aborting", file=sys.stderr)
            return 2
        baselines: Dict[str, Optional[float]] = {}
        unrun: Dict[str, str] = {}  # group -> the status of its mutants when its baseline cannot judge them
        for m in mutants:
            group = GROUPS[m.group]
            group = Group(group.files, tuple(t for t in group.tests if (copy / t).exists()))
            if m.group not in baselines and not group.tests:
                baselines[m.group] = None
                unrun[m.group] = NOT_RUN + "none of the group's tests exist here"
                print(f"-- {m.group}: none of its tests exist here: group not run", flush=True)
            if m.group not in baselines:
                status, seconds = run_tests(copy, group.tests, args.python, timeout=1800)
                baselines[m.group] = seconds if status == "SURVIVED" else None
                mine = sum(1 for other in mutants if other.group == m.group)
                if status.startswith(NOT_RUN):  # a green that tested nothing: no mutant could be killed
                    unrun[m.group] = NOT_RUN + "baseline: " + status[len(NOT_RUN):]
                    verdict = f"ran no test ({status[len(NOT_RUN):]}): its {mine} mutant(s) not run"
                else:
                    unrun[m.group] = "baseline red"
                    verdict = "green" if status == "SURVIVED" else f"RED ({status}): group skipped"
                print(f"-- {m.group}: baseline {verdict} in {seconds:.0f} s", flush=True)
            if baselines[m.group] is None:
                results.append((m, unrun[m.group], 0.0))
                continue
            path = copy / m.file
            original = path.read_text()
            count = original.count(m.find)
            if count != 1:
                results.append((m, f"stale ({count} matches)", 0.0))
                print(f"{m.id:8} stale: its text occurs {count} times in {m.file}", flush=True)
                continue
            path.write_text(original.replace(m.find, m.replace))
            try:
                status, seconds = run_tests(copy, group.tests, args.python, timeout=max(60.0, 3 * (baselines[m.group] or 0)))
            finally:
                path.write_text(original)
            results.append((m, status, seconds))
            print(f"{m.id:8} {status:18} {seconds:5.0f} s  {m.file}: {m.why}", flush=True)
    finally:
        if args.keep:
            print(f"copy kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    ran = [r for r in results if r[1].startswith(("killed", "SURVIVED"))]
    survivors = [r for r in results if r[1] == "SURVIVED"]
    skipped = [r for r in results if r not in ran and r[1] != "equivalent"]
    why: Dict[str, int] = {}
    for _, status, _ in skipped:
        reason = status[len(NOT_RUN):] if status.startswith(NOT_RUN) else status
        why[reason] = why.get(reason, 0) + 1
    print(f"\n{len(ran)} mutants run: {len(ran) - len(survivors)} killed, {len(survivors)} survived"
          + (f", {len(skipped)} not run ({'; '.join(f'{n} {reason}' for reason, n in why.items())})" if skipped else ""))
    for m, _, _ in survivors:
        print(f"  SURVIVED {m.id}: {m.file}: {m.why}")
    if swept:
        print(scores(results, swept))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
