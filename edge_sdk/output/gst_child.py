"""The GStreamer side of a video output, run as its own process by an interpreter that has
PyGObject (`gi`): on a Jetson, JetPack's /usr/bin/python3 with `python3-gi` from apt. It
imports nothing of edge_sdk, only the standard library and gi, so it runs from its file path.

    python3 gst_child.py rtsp rtsp://0.0.0.0:8554/live --fps 30 [--encoder auto]
    python3 gst_child.py file /data/out.mp4 --fps 30
    python3 gst_child.py display 0 --fps 30

stdin: frames, each a 12-byte header (b"EDGF", width, height as little-endian uint32) and
width*height*3 bytes of BGR; end of input ends the stream (a file gets its EOS and is finished).
stdout: JSON lines: first {"ready": ...} or {"error": ..., "code": ...}, then every second
{"frames": N, "dropped": N, "encode_ms": ms, "encode_ms_mean": ms, "clients": N} (the encoder's
ms per frame over the last second and since the start), and a last one at exit.

A separate process keeps GStreamer off the caller's threads: a stalled client or encoder
stops this process's reads, never the pipeline that feeds it (edge_sdk.output.video drops
frames into a bounded queue). An RTSP media that is full (a slow client) drops frames here
too, counted.
"""
import argparse
import collections
import json
import struct
import sys
import threading
import time
from urllib.parse import urlsplit

HEADER = struct.Struct("<4sII")
MAGIC = b"EDGF"

# element -> the Debian/Ubuntu package that has it (JetPack's for the nv* elements)
PACKAGES = {
    "appsrc": "gstreamer1.0-plugins-base",
    "videoconvert": "gstreamer1.0-plugins-base",
    "queue": "libgstreamer1.0-0",
    "x264enc": "gstreamer1.0-plugins-ugly",
    "h264parse": "gstreamer1.0-plugins-bad",
    "mp4mux": "gstreamer1.0-plugins-good",
    "rtph264pay": "gstreamer1.0-plugins-good",
    "filesink": "libgstreamer1.0-0",
    "nvv4l2h264enc": "JetPack's nvidia-l4t-gstreamer",
    "nvvidconv": "JetPack's nvidia-l4t-gstreamer",
    "nv3dsink": "JetPack's nvidia-l4t-gstreamer",
}
ENCODERS = ("nvv4l2h264enc", "x264enc")  # preferred first


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def fail(code, text):
    say({"error": text, "code": code})
    sys.exit(2)


def load_gst(rtsp):
    try:
        import gi

        gi.require_version("Gst", "1.0")
        if rtsp:
            gi.require_version("GstRtspServer", "1.0")
    except (ImportError, ValueError) as exc:
        fail("no_gi", "{} lacks GStreamer's Python bindings ({}): sudo apt install python3-gi gir1.2-gstreamer-1.0{}"
             .format(sys.executable, exc, " gir1.2-gst-rtsp-server-1.0 gstreamer1.0-rtsp" if rtsp else ""))
    from gi.repository import GLib, Gst

    Gst.init(None)
    server = None
    if rtsp:
        from gi.repository import GstRtspServer as server
    return GLib, Gst, server


def pick_encoder(Gst, wanted):
    """The H.264 encoder element: `wanted`, or the first of ENCODERS that GStreamer has."""
    names = ENCODERS if wanted == "auto" else (wanted,)
    for name in names:
        if Gst.ElementFactory.find(name) is not None:
            return name
    fail("no_encoder", "GStreamer has no H.264 encoder element {}: {}".format(
        " or ".join(names), "; or ".join("{} ({})".format(package(n), n) for n in names)))


def package(name):
    known = PACKAGES.get(name)
    if known is None:
        return "install its GStreamer plugin"
    return "install " + known if "JetPack" in known else "sudo apt install " + known


def check_elements(Gst, names):
    for name in names:
        if Gst.ElementFactory.find(name) is None:
            fail("no_element", "GStreamer has no element {}: {}".format(name, package(name)))


def encode_chain(encoder, fps):
    """Raw BGR in, H.264 byte-stream out, low latency: a keyframe every second (a late client
    waits at most that long), SPS/PPS repeated with it. x264enc's zerolatency tune cuts each
    frame into slices, one per thread, which FFmpeg's RTSP clients decode as corrupt frames (the
    top of the picture smeared); frame threads hold back a frame each (66 ms at 30 FPS on two
    cores): one slice, one thread (ultrafast still encodes 1080p faster than 30 FPS)."""
    gop = max(1, int(round(fps)))
    if encoder == "nvv4l2h264enc":
        return ("videoconvert ! video/x-raw,format=BGRx ! nvvidconv ! video/x-raw(memory:NVMM),format=I420 ! "
                "nvv4l2h264enc insert-sps-pps=true idrinterval={0} iframeinterval={0} maxperf-enable=true".format(gop))
    return ("videoconvert ! video/x-raw,format=I420 ! x264enc tune=zerolatency sliced-threads=false threads=1 speed-preset=ultrafast "
            "key-int-max={} bframes=0 byte-stream=true".format(gop))


class Output:
    """Counts and the encoder's cost, shared by the reader thread and the pad probes."""

    def __init__(self, Gst, fps):
        self.Gst = Gst
        self.fps = fps
        self.lock = threading.Lock()
        self.frames = 0
        self.dropped = 0
        self.encode_ms = []
        self.encoded = 0
        self.encode_ms_total = 0.0
        self.pushed_at = collections.deque(maxlen=256)
        self.clients = 0

    def probe_encoder(self, element):
        """Time from a buffer entering the encoder to its coded frame leaving it. Frames leave in
        the order they enter (no B-frames); x264enc shifts timestamps, so they are not the key."""
        Gst = self.Gst

        def enter(pad, info):
            buf = info.get_buffer()
            if buf is not None:
                with self.lock:
                    self.pushed_at.append(time.perf_counter())
            return Gst.PadProbeReturn.OK

        def leave(pad, info):
            buf = info.get_buffer()
            if buf is not None:
                with self.lock:
                    if self.pushed_at:
                        self.encode_ms.append((time.perf_counter() - self.pushed_at.popleft()) * 1000.0)
            return Gst.PadProbeReturn.OK

        element.get_static_pad("sink").add_probe(Gst.PadProbeType.BUFFER, enter)
        element.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, leave)

    def report(self):
        with self.lock:
            spent = self.encode_ms
            self.encode_ms = []
            self.encoded += len(spent)
            self.encode_ms_total += sum(spent)
            row = {"frames": self.frames, "dropped": self.dropped, "clients": self.clients,
                   "encode_ms": round(sum(spent) / len(spent), 3) if spent else None,
                   "encode_ms_mean": round(self.encode_ms_total / self.encoded, 3) if self.encoded else None}
        say(row)


def caps_string(width, height, fps):
    return "video/x-raw,format=BGR,width={},height={},framerate={}/1000".format(width, height, int(round(fps * 1000)))


def read_frames(stream):
    """(width, height, bytes) per frame on stdin until its end."""
    while True:
        head = stream.read(HEADER.size)
        if len(head) < HEADER.size:
            return
        magic, width, height = HEADER.unpack(head)
        if magic != MAGIC:
            fail("bad_input", "frame header {!r} is not {!r}".format(magic, MAGIC))
        data = stream.read(width * height * 3)
        if len(data) < width * height * 3:
            return
        yield width, height, data


class FileOrDisplay:
    """One pipeline from appsrc: H.264 in MP4 (every frame, at the writer's pace) or a screen."""

    def __init__(self, Gst, out, kind, target, encoder):
        self.Gst, self.out, self.kind, self.target, self.encoder = Gst, out, kind, target, encoder
        self.pipeline = None
        self.src = None
        self.duration = int(1e9 / out.fps)

    def start(self, width, height):
        Gst = self.Gst
        if self.kind == "file":
            tail = "{} name=enc ! h264parse ! mp4mux ! filesink location=\"{}\"".format(
                encode_chain(self.encoder, self.out.fps), self.target.replace('"', '\\"'))
        else:
            tail = "videoconvert ! video/x-raw,format=BGRx ! nvvidconv ! nv3dsink sync=false"
        self.pipeline = Gst.parse_launch("appsrc name=src format=time block=true max-bytes={} caps={} ! queue ! {}".format(
            width * height * 3 * 4, caps_string(width, height, self.out.fps), tail))
        self.src = self.pipeline.get_by_name("src")
        enc = self.pipeline.get_by_name("enc")
        if enc is not None:
            self.out.probe_encoder(enc)
        if self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            fail("start_failed", "GStreamer could not start the {} pipeline for {}".format(self.kind, self.target))

    def push(self, data):
        Gst = self.Gst
        buf = Gst.Buffer.new_wrapped(data)
        buf.pts = self.out.frames * self.duration
        buf.duration = self.duration
        self.src.emit("push-buffer", buf)
        with self.out.lock:
            self.out.frames += 1

    def finish(self):
        if self.pipeline is None:
            return
        Gst = self.Gst
        self.src.emit("end-of-stream")
        bus = self.pipeline.get_bus()
        msg = bus.timed_pop_filtered(30 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
        self.pipeline.set_state(Gst.State.NULL)
        if msg is not None and msg.type == Gst.MessageType.ERROR:
            fail("stream_error", "GStreamer: {}".format(msg.parse_error()[0].message))


class Rtsp:
    """GStreamer's RTSP server with one shared media at the URL's path, listening from the start
    (a client that comes before the first frame waits for it). Frames that arrive while no client
    watches, or while a client's media is still starting (not yet PLAYING), are counted as sent
    and go nowhere; a media whose queue is full drops them, counted."""

    def __init__(self, Gst, GstRtspServer, out, url, encoder):
        self.Gst, self.out = Gst, out
        parts = urlsplit(url)
        self.server = GstRtspServer.RTSPServer()
        self.server.set_address(parts.hostname or "0.0.0.0")
        self.server.set_service(str(parts.port or 8554))
        self.factory = GstRtspServer.RTSPMediaFactory()
        self.factory.set_shared(True)
        self.factory.set_launch("( appsrc name=src is-live=true do-timestamp=true format=time block=false "
                                "! queue leaky=downstream max-size-buffers=4 ! {} name=enc ! h264parse ! "
                                "rtph264pay name=pay0 pt=96 config-interval=-1 )".format(encode_chain(encoder, out.fps)))
        self.caps = None
        self.src = None
        self.medias = []  # prepared media (one while the shared media lives)
        self.limit = 0
        self.lock = threading.Lock()
        self.factory.connect("media-configure", self._configure)
        self.server.get_mount_points().add_factory(parts.path or "/", self.factory)
        self.server.connect("client-connected", self._client)
        if self.server.attach(None) == 0:
            fail("port_in_use", "cannot serve {}: port {} on {} is in use or not allowed; choose another port "
                                "(--out rtsp://HOST:PORT/PATH)".format(url, parts.port or 8554, parts.hostname or "0.0.0.0"))

    def _client(self, server, client):
        with self.out.lock:
            self.out.clients += 1
        client.connect("closed", self._closed)

    def _closed(self, client):
        with self.out.lock:
            self.out.clients -= 1

    def start(self, width, height):
        """The first frame sets the size: a client that came before it has waited for it."""
        with self.lock:
            self.caps = self.Gst.Caps.from_string(caps_string(width, height, self.out.fps))
            self.limit = width * height * 3 * 4
            if self.src is not None:
                self._shape(self.src)

    def _shape(self, src):
        src.set_property("caps", self.caps)
        src.set_property("max-bytes", self.limit)

    def _configure(self, factory, media):
        element = media.get_element()
        src = element.get_child_by_name("src")
        self.out.probe_encoder(element.get_child_by_name("enc"))
        media.connect("unprepared", self._gone)
        with self.lock:  # caps before the reader thread can push: a buffer ahead of them is not-negotiated
            if self.caps is not None:
                self._shape(src)
            self.src = src
            self.medias.append(media)

    def _gone(self, media):
        with self.lock:
            self.src = None
            self.medias = [m for m in self.medias if m is not media]

    def push(self, data):
        with self.lock:
            src, limit = self.src, self.limit
        with self.out.lock:
            self.out.frames += 1
        if src is None or src.get_state(0)[1] != self.Gst.State.PLAYING:
            return  # do-timestamp stamps a buffer with the running time at the push: before PLAYING there is
            # none, and a buffer stamped with the clock's absolute time holds the sink for that long
        if src.get_property("current-level-bytes") + len(data) > limit:
            with self.out.lock:
                self.out.dropped += 1
            return
        src.emit("push-buffer", self.Gst.Buffer.new_wrapped(data))

    def finish(self):
        """End of the stream for the clients, then every media's pipeline stopped (NULL joins
        its streaming threads): no pad probe, which is Python, runs while the interpreter ends,
        where one crashes the process."""
        with self.lock:
            src, medias = self.src, list(self.medias)
        if src is not None:
            src.emit("end-of-stream")
        for media in medias:
            pipeline = media.get_element().get_parent()
            if pipeline is not None:
                pipeline.set_state(self.Gst.State.NULL)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("rtsp", "file", "display"))
    parser.add_argument("target")
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--encoder", default="auto")
    args = parser.parse_args(argv)
    GLib, Gst, GstRtspServer = load_gst(args.kind == "rtsp")
    check_elements(Gst, ("appsrc", "videoconvert", "queue"))
    encoder = None
    if args.kind == "display":
        check_elements(Gst, ("nvvidconv", "nv3dsink"))
    else:
        encoder = pick_encoder(Gst, args.encoder)
        check_elements(Gst, ("h264parse", "rtph264pay" if args.kind == "rtsp" else "mp4mux"))
    out = Output(Gst, args.fps if args.fps > 0 else 30.0)
    if args.kind == "rtsp":
        sink = Rtsp(Gst, GstRtspServer, out, args.target, encoder)
    else:
        sink = FileOrDisplay(Gst, out, args.kind, args.target, encoder)
    loop = GLib.MainLoop()
    glib = threading.Thread(target=loop.run, name="glib", daemon=True)
    glib.start()
    say({"ready": True, "encoder": encoder, "gstreamer": Gst.version_string()})
    stop = threading.Event()

    def tick():
        while not stop.wait(1.0):
            out.report()

    reporter = threading.Thread(target=tick, name="report", daemon=True)
    reporter.start()
    started = False
    for width, height, data in read_frames(sys.stdin.buffer):
        if not started:
            sink.start(width, height)
            started = True
        sink.push(data)
    stop.set()
    sink.finish()
    loop.quit()
    # Python callbacks (pad probes, the server's signals) run on GStreamer's and the main loop's
    # threads: both are stopped before the interpreter ends, which a callback would crash.
    glib.join(10)
    reporter.join(10)
    out.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
