"""Calibration-set recorder: keep diverse frames of the scene as it is now, for the next build.

    # now, for 10 minutes (on demand):
    python apps/calibration_recorder/calibration_recorder.py --source csi://0 --out calib-new --duration 600
    # wait for the daemon's calibration_drift alert, then record:
    python apps/calibration_recorder/calibration_recorder.py --source rtsp://cam/stream --out calib-new \\
        --on-alert --broker mqtts://broker:8883 --device cam-entrance
    # then, on the host:
    edge-sdk build model.onnx --calib calib-new --target xavier-nx --out bundle

A frame is kept when it is new and fills a gap (see `Selector`):

* scene change: its 32×18 grey thumbnail differs from every kept frame's by more than
  `--min-change` grey levels on average (near-duplicates teach the calibration nothing);
* brightness spread: frames are binned by mean brightness into `BRIGHTNESS_BINS` bins, and a
  bin holds at most `--max-images / BRIGHTNESS_BINS` (at least 1) frames, so a long bright
  afternoon cannot crowd out dusk;
* no content: a near-constant frame (black, covered lens, "no signal") is never kept.

Images are written as JPEG (quality 95), each atomically (a temporary name, fsync, rename), named
by time and count, up to `--max-images`. With `--on-alert` the recorder subscribes to the device's
`alerts` topic and starts when a `calibration_drift` alert is raised (each message is checked
against the alert schema first; anything else is ignored). The camera: a V4L2/CSI camera opens
once, so run the recorder while the daemon is stopped, or on a second stream of the camera (RTSP).

A full disk (or quota) stops the recording cleanly: the images written before stay (each one
complete: the frame being written is dropped with its temporary file), the summary says how many,
and the exit code is DiskFullError's.
"""
from __future__ import annotations

import argparse
import errno
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import EdgeSdkError

BRIGHTNESS_BINS = 8
THUMB = (32, 18)
NO_CONTENT_STD = 3.0  # as edge_sdk.frame_stats: a frame this flat holds nothing to calibrate on


class DiskFullError(EdgeSdkError):
    """The disk under --out is full: recording stopped, and the images written before are kept."""

    exit_code = 12

    def __init__(self, out: Path, written: List[Path], cause: OSError) -> None:
        self.out = out
        self.written = written
        super().__init__(
            f"the disk holding {out} is full ({cause.strerror or cause}): recording stopped after {len(written)} "
            f"image(s), kept in {out} (each complete; the frame being written was dropped). Free some space or "
            "choose another --out, then record again to add to them"
        )


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


class Selector:
    """Decides which frames to keep; keeps only thumbnails (a few hundred bytes each)."""

    def __init__(self, max_images: int = 200, min_change: float = 12.0) -> None:
        self.max_images = int(max_images)
        self.min_change = float(min_change)
        self.per_bin = max(1, self.max_images // BRIGHTNESS_BINS)
        self.bins = [0] * BRIGHTNESS_BINS
        self.thumbs: List[np.ndarray] = []
        self._thumb_bins: List[int] = []
        self._grey: Optional[np.ndarray] = None
        self._thumb = np.empty((THUMB[1], THUMB[0]), np.uint8)

    @property
    def kept(self) -> int:
        return len(self.thumbs)

    def offer(self, frame: np.ndarray) -> Optional[str]:
        """Why `frame` is kept ("scene change, brightness bin 3"), or None when it is not."""
        if self.kept >= self.max_images:
            return None
        cv2 = _imports.cv2()
        if self._grey is None or self._grey.shape != frame.shape[:2]:
            self._grey = np.empty(frame.shape[:2], np.uint8)
        cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY, dst=self._grey)
        cv2.resize(self._grey, THUMB, dst=self._thumb, interpolation=cv2.INTER_AREA)
        if float(self._thumb.std()) < NO_CONTENT_STD:
            return None
        b = min(int(self._thumb.mean()) * BRIGHTNESS_BINS // 256, BRIGHTNESS_BINS - 1)
        if self.bins[b] >= self.per_bin:
            return None
        thumb = self._thumb.astype(np.int16)
        if self.thumbs and min(float(np.abs(thumb - t).mean()) for t in self.thumbs) <= self.min_change:
            return None
        self.thumbs.append(thumb)
        self._thumb_bins.append(b)
        self.bins[b] += 1
        return f"scene change, brightness bin {b}"

    def forget_last(self) -> None:
        """Undo the last frame kept (it could not be written)."""
        self.thumbs.pop()
        self.bins[self._thumb_bins.pop()] -= 1


def record(source_uri: str, out: Path, selector: Selector, duration_s: float = 0.0, max_frames: int = 0,
           every: int = 1, stop: Optional[threading.Event] = None) -> List[Path]:
    """Read the source, offer every `every`-th frame to `selector`, write what it keeps into `out`;
    until `duration_s` (0: no limit), `max_frames` read (0: no limit), the source ends, the
    selector is full or `stop` is set. Returns the files written; DiskFullError (holding them) when
    the disk is full."""
    from edge_sdk.fsutil import atomic_write_bytes
    from edge_sdk.runtime.sources import open_source

    cv2 = _imports.cv2()
    written: List[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in FULL_DISK:
            raise DiskFullError(out, written, exc) from exc
        raise
    source = open_source(source_uri)
    source.open()
    start = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    n = 0
    try:
        while selector.kept < selector.max_images:
            if stop is not None and stop.is_set():
                break
            if duration_s and time.monotonic() - start > duration_s:
                break
            if max_frames and n >= max_frames:
                break
            frame = source.read()
            if frame is None:
                break
            n += 1
            if (n - 1) % every or selector.offer(frame) is None:
                continue
            ok, jpg = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 95])
            if not ok:
                continue
            path = out / f"rec_{stamp}_{selector.kept:04d}.jpg"
            try:
                atomic_write_bytes(path, jpg.tobytes())  # on an error it leaves no file behind
            except OSError as exc:
                if exc.errno not in FULL_DISK:
                    raise
                selector.forget_last()
                raise DiskFullError(out, written, exc) from exc
            written.append(path)
    finally:
        source.close()
    return written


class AlertTrigger:
    """Sets `fired` when the device's `calibration_drift` alert is raised (schema-checked)."""

    def __init__(self, broker_url: str, device_id: str) -> None:
        from edge_sdk.telemetry import schemas
        from edge_sdk.telemetry.broker import BrokerConfig, make_client

        self.fired = threading.Event()
        self.message: Optional[str] = None
        self.ignored = 0
        self._schemas = schemas
        self.topic = schemas.topic(device_id, "alerts")
        self.device_id = device_id
        self.broker = BrokerConfig(url=broker_url)
        self.client = make_client(self.broker, f"calibration-recorder-{device_id}")
        self.subscribed = threading.Event()
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self._on_message

    def start(self) -> "AlertTrigger":
        self.client.connect_async(self.broker.host, self.broker.port)
        self.client.loop_start()
        return self

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if not reason.is_failure:
            client.subscribe(self.topic, qos=1)

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        from edge_sdk.validate import UntrustedInput, loads_untrusted

        try:
            payload = loads_untrusted(msg.payload, 64 * 1024, what="alert")
        except UntrustedInput:
            self.ignored += 1
            return
        if (not isinstance(payload, dict) or payload.get("device_id") != self.device_id
                or self._schemas.errors(payload, "edge-sdk/alert/1")):
            self.ignored += 1
            return
        if payload["alert"] == "calibration_drift" and payload["state"] == "raised":
            self.message = payload["message"]
            self.fired.set()


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Record diverse frames of the scene into a calibration folder.")
    p.add_argument("--source", required=True, help="source URI (csi://0, v4l2:///dev/video0, rtsp://..., synthetic://faces)")
    p.add_argument("--out", type=Path, required=True, help="folder for the images (the next build's --calib)")
    p.add_argument("--max-images", type=int, default=200)
    p.add_argument("--min-change", type=float, default=12.0, help="mean grey-level change from every kept thumbnail")
    p.add_argument("--duration", type=float, default=600.0, help="seconds to record (0: until the source ends or the set is full)")
    p.add_argument("--max-frames", type=int, default=0, help="frames to read at most (0: no limit)")
    p.add_argument("--every", type=int, default=1, help="offer every N-th frame")
    p.add_argument("--on-alert", action="store_true", help="wait for the device's calibration_drift alert first")
    p.add_argument("--broker", default="mqtt://127.0.0.1:1883")
    p.add_argument("--device", default="", help="device id whose alerts start the recording (with --on-alert)")
    p.add_argument("--wait", type=float, default=0.0, help="with --on-alert: give up after this many seconds (0: wait forever)")
    args = p.parse_args(argv)
    if args.on_alert and not args.device:
        p.error("--on-alert needs --device")
    if args.max_images < 1 or args.every < 1:
        p.error("--max-images and --every must be >= 1")
    return args


def main(argv: Optional[Sequence[str]] = None, ready: Optional[threading.Event] = None) -> int:
    """`ready` is set once an --on-alert recorder listens (tests)."""
    args = parse_args(argv)
    try:
        if args.on_alert:
            trigger = AlertTrigger(args.broker, args.device).start()
            try:
                if ready is not None:
                    trigger.subscribed.wait(10)
                    ready.set()
                print(f"waiting for calibration_drift on {trigger.topic}", file=sys.stderr)
                if not trigger.fired.wait(args.wait or None):
                    print("no calibration_drift alert: nothing recorded", file=sys.stderr)
                    return 1
            finally:
                trigger.stop()
            print(f"calibration_drift: {trigger.message}", file=sys.stderr)
        selector = Selector(args.max_images, args.min_change)
        written = record(args.source, args.out, selector, args.duration, args.max_frames, args.every)
    except DiskFullError as exc:
        print(json.dumps({"out": str(args.out), "images": len(exc.written), "brightness_bins": selector.bins,
                          "stopped": "disk full"}))
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except EdgeSdkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps({"out": str(args.out), "images": len(written), "brightness_bins": selector.bins}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
