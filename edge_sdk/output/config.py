"""The `[output]` table of `edge-sdk run`: where the annotated frames go (`edge-sdk detect`
takes the same as `--out`).

```toml
[output]
out = ["rtsp://0.0.0.0:8554/live", "/data/last-run.mp4"]   # several at once
encoder = "auto"              # nvv4l2h264enc on a Jetson, else x264enc
queue = 4                     # frames waiting per output; the oldest is dropped when it is full
```

Each output's frames, drops and encoder cost (ms per frame) are in telemetry as `output`. The
table is read at start; a SIGHUP does not change it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from edge_sdk.config_schema import Bounds, check_fields, key
from edge_sdk.errors import ConfigError
from edge_sdk.output.video import ENCODERS, AnnotatedSink, open_outputs, parse_output
MAX_OUTPUTS = 8


@dataclass
class OutputConfig:
    out: List[str] = key(factory=list, max_len=MAX_OUTPUTS, item=Bounds(max_len=1024))  # rtsp://HOST:PORT/PATH, FILE.mp4 (H.264) or display://0 (a Jetson's screen); several at once; empty: no video out
    encoder: str = key("auto", choices=ENCODERS)  # auto: nvv4l2h264enc where GStreamer has it (a Jetson), else x264enc
    queue: int = key(4, low=1, high=120)  # frames waiting for each output; when it is full the oldest is dropped and counted, the pipeline never waits
    fps: float = key(0.0, low=0, high=1000)  # the frame rate the outputs announce; 0: the source's `fps` (30 when that is 0)
    stream: str = key("", max_len=64)  # with several [[sources]], the id of the one shown; empty: the first
    python: str = key("", max_len=4096)  # the interpreter that runs GStreamer (it needs python3-gi); empty: this one when it has gi, else /usr/bin/python3

    def validate(self, streams: List[str], origin: str = "config") -> "OutputConfig":
        """The keys, then each `out` value as `--out` checks it (a missing folder, an unknown
        scheme, display:// off a Jetson) and `stream` against the config's `streams`;
        ConfigError naming the key and `origin`."""
        check_fields(self, origin, "output")
        for value in self.out:
            parse_output(value, f"{origin}: output.out")
        if self.stream and self.stream not in streams:
            raise ConfigError(f"{origin}: output.stream {self.stream!r} is not a stream of this config; "
                              f"use one of {', '.join(streams)}")
        return self

    def shown(self, streams: List[str]) -> str:
        """The id of the stream the outputs show."""
        return self.stream or streams[0]

    def open(self, fps: Optional[float], on_change: Optional[Callable[[str, bool, str], None]] = None) -> AnnotatedSink:
        """An AnnotatedSink over a started output per `out` value (errors at start, typed). With
        `on_change` (the daemon), each output that dies later is started again with backoff
        (edge_sdk.output.restart) and `on_change(name, down, message)` hears it go and come back."""
        rate = self.fps or fps or 30.0
        outputs = open_outputs(self.out, fps=rate, queue=self.queue, encoder=self.encoder, python=self.python or None,
                               origin="output.out")
        if on_change is None:
            return AnnotatedSink(outputs)
        from edge_sdk.output.restart import RestartingOutput
        from edge_sdk.output.video import VideoOutput

        def again(target: Any) -> Callable[[], VideoOutput]:
            return lambda: VideoOutput(target, fps=rate, queue=self.queue, encoder=self.encoder, python=self.python or None)

        return AnnotatedSink([RestartingOutput(out, again(out.target), on_change) for out in outputs])

