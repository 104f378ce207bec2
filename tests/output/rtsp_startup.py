"""Frames that reach the RTSP output while a client's media starts up, pushed at the two moments a
reader thread can reach them: run by the GStreamer interpreter (standard library + gi), as the
output's child runs, against edge_sdk/output/gst_child.py's `Rtsp`.

    python3 rtsp_startup.py GST_CHILD_PATH MOMENT

MOMENT is `publish` (every time another thread releases the output's lock, as a reader thread
woken at that instant would run) or `clock` (when the pipeline, on its way to PLAYING, has given
its elements the clock and not yet their base time: the pipeline posts new-clock in between). A real client then asks for the stream over TCP (DESCRIBE, SETUP,
PLAY) and counts RTP packets for 3 s. Prints one JSON line: the DESCRIBE status line, the packets,
and the largest timestamp that left the appsrc less the running time at that moment (ms; above
zero means a buffer dated in the future, which a synchronised sink waits for)."""
import importlib.util
import json
import re
import socket
import sys
import threading
import time

W, H = 64, 48


def load(path):
    spec = importlib.util.spec_from_file_location("gst_child", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PushOnRelease:
    """A lock that pushes a frame each time a thread other than the main one releases it."""

    def __init__(self, push):
        self.inner = threading.Lock()
        self.push = push
        self.busy = threading.local()

    def __enter__(self):
        self.inner.acquire()
        return self

    def __exit__(self, *exc):
        self.inner.release()
        if threading.current_thread() is not threading.main_thread() and not getattr(self.busy, "on", False):
            self.busy.on = True
            try:
                self.push()
            finally:
                self.busy.on = False


def ask(sock, request):
    sock.sendall(request.encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(1)
    head = data.decode()
    found = re.search(r"Content-Length: (\d+)", head)
    body = b""
    while found and len(body) < int(found.group(1)):
        body += sock.recv(int(found.group(1)) - len(body))
    return head, body.decode()


def client(url, port):
    """The DESCRIBE status line and the RTP packets received in 3 s after PLAY."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        head, sdp = ask(sock, "DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n".format(url))
        status = head.split("\r\n", 1)[0]
        if " 200 " not in status:
            return status, 0
        control = re.search(r"a=control:(\S+)", sdp.split("m=video", 1)[1]).group(1)
        head, _ = ask(sock, "SETUP {}/{} RTSP/1.0\r\nCSeq: 2\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n"
                      .format(url, control))
        session = re.search(r"Session: ([^;\r]+)", head).group(1)
        ask(sock, "PLAY {} RTSP/1.0\r\nCSeq: 3\r\nSession: {}\r\n\r\n".format(url, session))
        packets, data, until = 0, b"", time.monotonic() + 3.0
        sock.settimeout(0.2)
        while time.monotonic() < until:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            data += chunk
            while len(data) >= 4 and data[:1] == b"$":  # interleaved frames: $, channel, length
                size = int.from_bytes(data[2:4], "big")
                if len(data) < 4 + size:
                    break
                packets += data[1] == 0
                data = data[4 + size:]
        return status, packets
    finally:
        sock.close()


def main():
    child = load(sys.argv[1])
    moment = sys.argv[2]
    GLib, Gst, GstRtspServer = child.load_gst(True)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    url = "rtsp://127.0.0.1:{}/live".format(port)
    out = child.Output(Gst, 30.0)
    sink = child.Rtsp(Gst, GstRtspServer, out, url, "x264enc")
    frame = bytes(W * H * 3)
    ahead_ms, buses = [], []

    def watch(src):
        def stamp(pad, info):
            buf, clock = info.get_buffer(), src.get_clock()
            if buf is not None and clock is not None:
                ahead_ms.append((buf.pts - (clock.get_time() - src.get_base_time())) / 1e6)
            return Gst.PadProbeReturn.OK

        src.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, stamp)

    def configured(factory, media):  # connected after the output's own handler: its src is known
        src = media.get_element().get_child_by_name("src")
        watch(src)
        if moment == "clock":
            def on_message(bus, message):
                if message.type == Gst.MessageType.NEW_CLOCK:
                    sink.push(frame)
                return Gst.BusSyncReply.PASS

            buses.append(media.get_element().get_parent().get_bus())  # the pipeline's own bus
            buses[-1].set_sync_handler(on_message)

    if moment == "publish":
        sink.lock = PushOnRelease(lambda: sink.push(frame))
    sink.factory.connect("media-configure", configured)
    loop = GLib.MainLoop()
    glib = threading.Thread(target=loop.run, daemon=True)
    glib.start()
    sink.start(W, H)
    stop = threading.Event()

    def feed():  # a camera at 100 FPS
        while not stop.wait(0.01):
            sink.push(frame)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    status, packets = client(url, port)
    stop.set()
    feeder.join(10)
    # Python runs on GStreamer's threads (the probe, the bus handler) and on the main loop's: all
    # stopped before the interpreter ends, which a callback would crash (SIGSEGV at exit).
    sink.finish()  # the output's own ending: each media's pipeline to NULL
    for bus in buses:
        bus.set_sync_handler(None)
    loop.quit()
    glib.join(10)
    print(json.dumps({"describe": status, "packets": packets, "ahead_ms": max(ahead_ms) if ahead_ms else None}))


if __name__ == "__main__":
    main()
