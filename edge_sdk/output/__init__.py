"""Annotated video out: an RTSP server, an H.264 file or a Jetson's display, each fed by its own
GStreamer process (edge_sdk/output/gst_child.py) through a bounded queue that drops the oldest
frame, so that no client or encoder can hold up the pipeline (edge_sdk/output/video.py)."""
