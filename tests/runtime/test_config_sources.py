"""Several sources in one config: `[[sources]]` tables, each with its id, and the one `[source]`
as stream "0" (the sentences of docs/configuration.md and the config module, one row each)."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.config import MAX_SOURCES, PipelineConfig, SourceConfig, StreamConfig, config_from_dict, load_config
from edge_sdk.roi.config import RoiConfig

TWO = """
mode = "full"
[roi]
sweep_tiles = 2

[[sources]]
id = "door"
uri = "synthetic://faces?width=320&height=240"
mode = "roi"
fps = 15
[sources.roi]
sweep_tiles = 3

[[sources]]
id = "yard_2"
uri = "rtsp://cam-yard/stream"
"""


def test_two_sources_from_toml_keep_their_ids_modes_and_roi(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(TWO)
    cfg = load_config(path)
    assert cfg.stream_ids() == ["door", "yard_2"]
    door, yard = cfg.streams()
    assert (door.uri, door.mode, door.fps, door.roi.sweep_tiles) == ("synthetic://faces?width=320&height=240", "roi", 15.0, 3)
    assert (yard.uri, yard.mode, yard.fps, yard.roi) == ("rtsp://cam-yard/stream", None, 0.0, None)


def test_the_old_single_source_is_stream_0() -> None:
    cfg = config_from_dict({"source": {"uri": "csi://0", "fps": 10, "loop": True, "options": {"width": 640}}})
    assert cfg.streams() == [StreamConfig(id="0", uri="csi://0", loop=True, fps=10.0, options={"width": 640})]
    assert cfg.single_stream() is cfg


def test_one_source_table_runs_as_the_single_stream_with_its_own_settings() -> None:
    cfg = config_from_dict({"mode": "full", "sources": [{"id": "door", "uri": "synthetic://faces", "mode": "tiles",
                                                         "fps": 5, "roi": {"sweep_tiles": 4}}]})
    one = cfg.single_stream()
    assert one.source == SourceConfig(uri="synthetic://faces", fps=5.0)
    assert (one.mode, one.roi.sweep_tiles, one.stream_ids()) == ("tiles", 4, ["door"])
    fallback = config_from_dict({"mode": "roi", "roi": {"sweep_tiles": 3},
                                 "sources": [{"id": "door", "uri": "synthetic://faces"}]}).single_stream()
    assert (fallback.mode, fallback.roi.sweep_tiles) == ("roi", 3)  # the top-level mode and [roi]


def _many(n: int) -> list:
    return [{"id": f"cam{i}", "uri": "csi://0"} for i in range(n)]


BAD = [
    ({"sources": [{"id": "a", "uri": "x"}, {"id": "a", "uri": "y"}]}, "sources[1].id 'a' is the id of an earlier source"),
    ({"sources": [{"id": "a b", "uri": "x"}]}, "sources[0].id may hold only letters, digits, '-' and '_'"),
    ({"sources": [{"id": "cam.1", "uri": "x"}]}, "sources[0].id may hold only letters, digits, '-' and '_'"),
    ({"sources": [{"id": "", "uri": "x"}]}, "sources[0].id may hold only"),
    ({"sources": [{"id": "a" * 65, "uri": "x"}]}, "sources[0].id must have at most 64 characters"),
    ({"sources": [{"uri": "x"}]}, "sources[0] needs id"),
    ({"sources": [{"id": "a"}]}, "sources[0] needs uri"),
    ({"sources": [{"id": "a", "uri": "x", "fsp": 5}]}, "unknown key(s) sources[0].fsp"),
    ({"sources": [{"id": "a", "uri": "x", "mode": "fast"}]}, "sources[0].mode must be one of full, tiles, roi"),
    ({"sources": [{"id": "a", "uri": "x", "fps": -1}]}, "sources[0].fps must be a number in [0, 1000]"),
    ({"sources": [{"id": "a", "uri": "x", "roi": {"sweep_tile": 2}}]}, "unknown key(s) sources[0].roi.sweep_tile"),
    ({"sources": [{"id": "a", "uri": "x", "roi": {"score_threshold": 0.3}}]},
     "sources[0].roi.score_threshold is not a key: the output threshold is one value for every stream"),
    ({"sources": [{"id": "a", "uri": "x", "roi": {"track_iou": 0.2}}]},
     "sources[0].roi.track_iou is not a key any more: the roi scheduler follows the [tracking] tracker's tracks; "
     "set tracking.match_cost"),
    ({"roi": {"track_iou": 0.2}}, "roi.track_iou is not a key any more"),
    ({"source": {"uri": "csi://0"}, "sources": [{"id": "a", "uri": "x"}]}, "both [source] and [[sources]] are set: keep one"),
    ({"sources": {"id": "a", "uri": "x"}}, "sources must be a list of tables: write [[sources]]"),
    ({"sources": _many(MAX_SOURCES + 1)}, f"at most {MAX_SOURCES} sources run in one process"),
]


@pytest.mark.parametrize("data, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_sources_are_a_config_error_naming_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict(data, origin="edge.toml")
    assert str(err.value).startswith("edge.toml: ") and message in str(err.value), str(err.value)


def test_the_documented_limit_is_allowed() -> None:
    assert len(config_from_dict({"sources": _many(MAX_SOURCES)}).streams()) == MAX_SOURCES


def test_a_duplicate_toml_table_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(TWO.replace('id = "yard_2"', 'id = "door"'))
    with pytest.raises(ConfigError, match=f"{path}: sources\\[1\\].id 'door' is the id of an earlier source"):
        load_config(path)


def test_a_config_built_in_code_is_held_to_the_same_checks() -> None:
    with pytest.raises(ConfigError, match="both \\[source\\] and \\[\\[sources\\]\\]"):
        PipelineConfig(source=SourceConfig(uri="csi://0"), sources=[StreamConfig(id="a", uri="x")]).validate()
    with pytest.raises(ConfigError, match="sources\\[1\\].id 'a'"):
        PipelineConfig(sources=[StreamConfig(id="a", uri="x"), StreamConfig(id="a", uri="y")]).validate()
    with pytest.raises(ConfigError, match="sources\\[0\\].id may hold only"):
        PipelineConfig(sources=[StreamConfig(id="../a", uri="x")]).validate()
    with pytest.raises(ConfigError, match="tile_overlap"):
        PipelineConfig(sources=[StreamConfig(id="a", uri="x", roi=RoiConfig(tile_overlap=1.0))]).validate()


def test_several_sources_in_the_one_stream_pipeline_are_refused_with_the_way_out() -> None:
    cfg = config_from_dict({"sources": _many(2)}, origin="edge.toml")
    with pytest.raises(ConfigError, match="2 sources \\(cam0, cam1\\), but this pipeline runs one.*one process per source"):
        cfg.single_stream("edge.toml")


def test_command_line_overrides_replace_the_sources_list(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(TWO)
    cfg = load_config(path, {"sources": [{"id": "0", "uri": "synthetic://faces"}]})
    assert cfg.stream_ids() == ["0"]


def test_one_source_table_runs_in_the_pipeline_and_every_result_carries_its_id(tiny_bundle: Path) -> None:
    from edge_sdk.runtime.pipeline import Pipeline

    cfg = config_from_dict({"bundle": str(tiny_bundle), "backend": "onnxruntime-cpu", "max_frames": 3,
                            "sources": [{"id": "door", "uri": "synthetic://faces?width=128&height=64&count=1&min_size=16&max_size=24",
                                         "mode": "tiles"}]})
    with Pipeline(cfg) as pipeline:
        results = list(pipeline)
        assert pipeline.config.mode == "tiles"  # the source's own mode
    assert len(results) == 3
    assert {r.stream for r in results} == {"door"} and all(r.to_json()["stream"] == "door" for r in results)
    assert {r.captured.stream_id for r in results} == {"door"}


def test_the_pipeline_refuses_several_sources_before_opening_any(tiny_bundle: Path) -> None:
    from edge_sdk.runtime.pipeline import Pipeline

    cfg = config_from_dict({"bundle": str(tiny_bundle), "sources": _many(2)})
    with pytest.raises(ConfigError, match="running several sources in one process is not available yet"):
        Pipeline(cfg)


def test_the_one_stream_form_is_itself_valid_and_stays_the_same() -> None:
    one = config_from_dict({"sources": [{"id": "door", "uri": "csi://0", "mode": "roi"}]}).single_stream()
    assert one.validate() is one and one.single_stream() == one and one.stream_ids() == ["door"]
    with pytest.raises(ConfigError, match="both \\[source\\] and \\[\\[sources\\]\\]"):
        one.replace(source=SourceConfig(uri="csi://1")).validate()  # another source beside the table


def _three(**batching: object) -> PipelineConfig:
    tables = [{"id": sid, "uri": "synthetic://faces"} for sid in ("a", "b", "c")]
    return config_from_dict({"sources": tables, "batching": batching})


def test_batching_defaults_to_one_batch_of_every_source_at_once() -> None:
    assert _three().batching.policy(3) == BatchPolicy(3, (3,), 5.0)
    # the bundle takes fewer: a default max is capped there, a max the config sets is kept (the CLI refuses it)
    assert _three().batching.policy(3, limit=1) == BatchPolicy(1, (1,), 5.0)
    assert _three(max_batch_size=4).batching.policy(3, limit=1) == BatchPolicy(4, (4,), 5.0)
    assert _three(max_batch_size=4, preferred_batch_sizes=[2, 4], max_queue_delay_ms=2).batching.policy(3) == \
        BatchPolicy(4, (2, 4), 2.0)


@pytest.mark.parametrize("batching, message", [
    ({"max_batch_size": 0}, r"batching.max_batch_size must be an integer in \[1, 64\], got 0"),
    ({"preferred_batch_sizes": [4]}, r"batching.preferred_batch_sizes: 4 is not an integer in \[1, max_batch_size = 3\]"),
    ({"preferred_batch_sizes": [2, 2]}, r"batching.preferred_batch_sizes must be sorted and unique"),
    ({"max_queue_delay_ms": -1}, r"batching.max_queue_delay_ms must be a number in \[0, 10000\], got -1"),
    ({"frames_in_flight": 3}, r"batching.frames_in_flight must be at most pool_size - 2 = 2, got 3; raise pool_size"),
    ({"max_batch_size": "4"}, r"batching.max_batch_size must be an integer"),
])
def test_bad_batching_is_a_config_error_naming_the_key(batching: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _three(**batching)


def test_each_of_several_sources_runs_its_own_mode_and_roi_or_the_top_level_ones() -> None:
    tables = [{"id": "a", "uri": "synthetic://faces"},
              {"id": "b", "uri": "synthetic://faces", "mode": "tiles", "roi": {"sweep_tiles": 5}}]
    cfg = config_from_dict({"sources": tables, "mode": "roi", "roi": {"sweep_tiles": 3}})
    a, b = cfg.batched_streams()
    assert (a.id, a.mode, a.roi.sweep_tiles) == ("a", "roi", 3)
    assert (b.id, b.mode, b.roi.sweep_tiles) == ("b", "tiles", 5)
    assert cfg.sources[0].mode is None and cfg.sources[0].roi is None  # the config itself is left as written
