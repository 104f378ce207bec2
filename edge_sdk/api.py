"""The top-level API: a pipeline from one source URI and a bundle, and drawing its results.

    import edge_sdk

    with edge_sdk.Pipeline("csi://0", bundle="bundle") as pipe:
        for result in pipe:                        # FrameResult: .detections, .tracks, .stream, .frame
            edge_sdk.draw(result.frame, result)

`edge_sdk.Pipeline` is the runtime's Pipeline (edge_sdk.runtime.pipeline) built from a source
URI and settings given as keywords, which are the keys of a pipeline config (`mode="roi"`,
`backend="onnxruntime"`, `max_frames=100`, `roi={"sweep_tiles": 3}`; checked as a config file
is). A missing source or bundle fails here, when the pipeline is made, not at the first frame.
`edge_sdk` loads this module (and the runtime) only when one of its names is first used.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Union

from edge_sdk.errors import ConfigError
from edge_sdk.runtime.config import config_from_dict
from edge_sdk.runtime.pipeline import Pipeline as RuntimePipeline
from edge_sdk.runtime.sinks import draw_detections as draw
from edge_sdk.runtime.sources import parse_uri

__all__ = ["Pipeline", "draw"]

ORIGIN = "edge_sdk.Pipeline"


class Pipeline(RuntimePipeline):
    """Frames of `source` through the model of `bundle`, one FrameResult per frame.

    `source`: a URI as `edge-sdk detect` takes it (`csi://0`, `v4l2:///dev/video0`,
    `rtsp://...`, a video file, a folder of images, `synthetic://faces`). `bundle`: a folder
    written by `edge-sdk build` (default `bundle`, where the README's first command writes it).
    `loop` and `fps` apply to the source; every other
    keyword is a key of the pipeline config. Iterate it inside a `with` block: leaving it stops
    capture, closes the source and the model. SourceError for a source that does not exist or an
    unknown scheme, BundleError for a folder that is not a bundle, ConfigError for a bad setting.
    """

    def __init__(self, source: str, bundle: Union[str, Path] = "bundle", *, loop: bool = False,
                 fps: float = 0.0, **settings: Any) -> None:
        from edge_sdk.manifest import Bundle

        if "sources" in settings:
            raise ConfigError(f"{ORIGIN}: the source is the first argument, one URI; for several cameras through one "
                              "model see MultiStreamPipeline (edge_sdk.runtime.streams)")
        parse_uri(source)  # no such file or scheme: SourceError now
        config = config_from_dict(dict(settings, source={"uri": str(source), "loop": loop, "fps": fps}), ORIGIN)
        Bundle.load(Path(bundle), verify=False)  # not a bundle: BundleError now; its files are checked on open
        config.bundle = str(bundle)
        super().__init__(config)
