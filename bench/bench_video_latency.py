"""Glass-to-glass latency of `--out rtsp://...`: from the frame loop handing a frame to the output
to an RTSP client holding the decoded picture.

    python bench/bench_video_latency.py                        # 1280x720 at 30 FPS, 300 frames read
    python bench/bench_video_latency.py --width 1920 --height 1080 --frames 600

A synthetic scene (real faces over a real photo) is drawn with its ground-truth boxes and its
frame index burned into the picture as 16 black/white blocks (edge_sdk.output.video.burn_index),
paced at --fps, and served by the real GStreamer RTSP server (x264enc here, nvv4l2h264enc on a
Jetson). The client is OpenCV's FFMPEG reader over RTSP/TCP with FFmpeg's low-delay flags
(`fflags nobuffer`, `flags low_delay`), in this process so that both ends read one clock: for each
picture it decodes, the index read back from the blocks (read_index) gives the moment that frame
was handed over. Printed: p50/p95/max latency in ms, frames read, frames whose index could not be
matched, the encoder's ms per frame and the frames the output dropped. The machine's load average
is printed with it: other processes' load raises every figure.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_sdk.output.video import AnnotatedSink, open_outputs, read_index  # noqa: E402
from edge_sdk.runtime.synthetic import SyntheticFaces  # noqa: E402
from edge_sdk.runtime.types import FrameResult  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--frames", type=int, default=300, help="pictures the client reads")
    parser.add_argument("--encoder", default="auto")
    args = parser.parse_args()
    import cv2

    scene = SyntheticFaces.from_uri(f"synthetic://faces?width={args.width}&height={args.height}&count=4&seed=1")
    url = f"rtsp://127.0.0.1:{free_port()}/bench"
    sink = AnnotatedSink(open_outputs([url], fps=args.fps, encoder=args.encoder), mark_index=True)
    stop = threading.Event()
    first = threading.Event()

    def feed() -> None:
        period, index = 1.0 / args.fps, 0
        next_at = time.perf_counter()
        while not stop.is_set():
            frame = scene.render(index % 65536)
            sink.write(FrameResult(index % 65536, time.time(), scene.ground_truth(index % 65536), {}, frame=frame))
            first.set()
            index += 1
            next_at += period
            stop.wait(max(0.0, next_at - time.perf_counter()))

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    first.wait(30)
    os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = "rtsp_transport;tcp|fflags;nobuffer|flags;low_delay"
    cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG)
    latencies, unmatched = [], 0
    try:
        if not cap.isOpened():
            print(f"OpenCV's FFMPEG reader could not open {url}", file=sys.stderr)
            return 1
        for _ in range(args.frames):
            ok, picture = cap.read()
            now = time.perf_counter()
            if not ok:
                break
            put = sink.put_at.get(read_index(picture))
            if put is None or now < put:
                unmatched += 1
            else:
                latencies.append((now - put) * 1000.0)
    finally:
        cap.release()
        stop.set()
        feeder.join(10)
        stats = sink.stats()[0]
        sink.close()
    if not latencies:
        print("no frame could be matched", file=sys.stderr)
        return 1
    ms = np.array(latencies[30:] or latencies)  # the first second: the client's start-up
    load = os.getloadavg()[0]
    print(f"{args.width}x{args.height} at {args.fps:g} FPS, {stats['encoder']}, OpenCV FFMPEG client over RTSP/TCP "
          f"(load average {load:.2f} on {os.cpu_count()} CPUs)")
    print(f"glass-to-glass latency: p50 {np.percentile(ms, 50):.1f} ms  p95 {np.percentile(ms, 95):.1f} ms  "
          f"max {ms.max():.1f} ms over {len(ms)} frames ({unmatched} unmatched)")
    print(f"encoder {stats['encode_ms_mean']} ms per frame, {stats['dropped']} frames dropped of {stats['frames']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
