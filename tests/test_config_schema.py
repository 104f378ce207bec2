"""Every config key is typed and bounded in one table (edge_sdk.config_schema): a device config
file gives a config or a ConfigError (exit 2) naming the file, whatever it holds."""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import re
import tempfile
import typing
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.config_schema import MAX_ITEMS, MAX_STR, Bounds, bounds_of, check_value, hints
from edge_sdk.daemon.commands import CommandProcessor, sign
from edge_sdk.daemon.config import _SECTIONS, DaemonConfig, load_daemon_config
from edge_sdk.errors import ConfigError
from edge_sdk.runtime.config import PipelineConfig
from edge_sdk.telemetry.health import HealthMonitor, Rule

SECRET_ENV = "EDGE_SDK_SCHEMA_TEST_SECRET"
CA_FILE = Path(tempfile.gettempdir()) / "edge-sdk-schema-test-ca.pem"


# -- the schema, walked: (TOML table, dataclass) for every table of a device config -------------
def tables() -> List[Tuple[str, Any]]:
    out = [("", PipelineConfig)]
    for f in dataclasses.fields(PipelineConfig):
        if dataclasses.is_dataclass(hints(PipelineConfig)[f.name]):
            out.append((f.name, hints(PipelineConfig)[f.name]))
    return out + [(name, cls) for name, cls in _SECTIONS.items()]


def keys() -> Iterator[Tuple[str, Any, "dataclasses.Field[Any]"]]:
    """(dotted key, type, field) of every key that is not a table, those of list entries that
    are tables ([[health.extra]]) too."""
    todo = tables()
    while todo:
        table, cls = todo.pop()
        for f in dataclasses.fields(cls):
            tp, name = hints(cls)[f.name], f"{table}.{f.name}" if table else f.name
            if bounds_of(f).table is not None:
                todo.append((f"{name}[]", bounds_of(f).table))
            if not dataclasses.is_dataclass(tp):
                yield name, tp, f


def plain(tp: Any) -> Any:
    if typing.get_origin(tp) is typing.Union:
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def test_every_number_has_a_range_and_every_key_a_checked_type() -> None:
    """A key added without bounds fails here, before it reaches a device."""
    seen = 0
    for name, tp, f in keys():
        b, base = bounds_of(f), plain(tp)
        if base in (int, float):
            assert b.low is not None and b.high is not None and not b.choices, f"{name}: give it low= and high="
            assert math.isfinite(b.low) and math.isfinite(b.high), name
        if base is str:
            assert b.choices or b.max_len <= MAX_STR, name
        factory = f.default_factory  # type: ignore[misc]
        default = f.default if factory is dataclasses.MISSING else factory()
        if default is not None and default is not dataclasses.MISSING:  # MISSING: a required key
            check_value(default, tp, b, name)  # the default itself is inside the table (raises otherwise)
        seen += 1
    assert seen > 80  # the walk reached every table


# -- a TOML writer for the fuzz (the stdlib reads TOML, it does not write it) -------------------
def toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else toml_str(name)


class Raw(str):
    """TOML text written as it is (a value nested thousands deep)."""


def toml_value(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(doc: Dict[str, Any]) -> str:
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for table, body in doc.items():
        if isinstance(body, dict):
            lines.append(f"[{toml_key(table)}]")
            lines.extend(f"{toml_key(k)} = {toml_value(v)}" for k, v in body.items())
    return "\n".join(lines) + "\n"


# -- values: of every TOML type, and plausible ones for each key --------------------------------
names = st.text(min_size=1, max_size=12)
scalars = st.one_of(
    st.booleans(), st.integers(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.sampled_from([0, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 64, 1e300, -1e300, 1e-300, 5e-324]),
    st.sampled_from([Raw("0x" + "f" * 5000), Raw("9" * 5000)]),  # past what Python prints, past what it parses
    st.floats(), st.text(max_size=20),
    st.datetimes(timezones=st.sampled_from([None, datetime.timezone.utc])), st.dates(), st.times(),
    st.builds(lambda c, n: c * n, st.characters(), st.sampled_from([MAX_STR, MAX_STR + 1, 100000])),
)
nested = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4),
                      max_leaves=12)
any_value = st.one_of(
    nested, nested, nested, nested, nested, nested,
    st.integers(min_value=1, max_value=3000).map(lambda n: Raw("[" * n + "]" * n)),
    st.integers(min_value=1, max_value=3000).map(lambda n: Raw("{a = " * n + "1" + "}" * n)),
    st.sampled_from([MAX_ITEMS + 1, 5000]).map(lambda n: [0] * n),
)


def number_near(b: Bounds, integer: bool) -> st.SearchStrategy[Any]:
    """Mostly inside the range, its ends included; now and then just outside."""
    low, high = b.low, b.high
    assert low is not None and high is not None
    inside = st.integers(min_value=int(low), max_value=int(high)) if integer else st.floats(min_value=low, max_value=high)
    outside = st.sampled_from([low - 1, high + 1, -high, high * 10])
    return st.one_of(inside, inside, inside, st.sampled_from([low, high]), outside.map(int) if integer else outside)


def plausible(name: str, tp: Any, b: Bounds) -> st.SearchStrategy[Any]:
    base = plain(tp)
    if b.choices:
        return st.sampled_from(b.choices)
    if base is bool:
        return st.booleans()
    if base in (int, float):
        return number_near(b, base is int)
    if name.endswith("hmac_secret_env") or name.endswith("password_env"):
        return st.sampled_from([SECRET_ENV, "EDGE_SDK_UNSET_VARIABLE"])
    if name.endswith("_file"):
        return st.just(str(CA_FILE))
    if name == "mqtt.url":
        return st.sampled_from(["mqtt://127.0.0.1:1883", "mqtts://broker.example", "mqtt://[::1", "mqtt://h:99999"])
    if b.table is Rule:
        rule = st.fixed_dictionaries({"name": st.from_regex(r"[a-z_]{1,10}", fullmatch=True), "metric": st.just("fps"),
                                      "op": st.sampled_from(["<", "<=", ">", ">="]), "threshold": st.floats()})
        return st.lists(rule, max_size=3)
    if base is str:
        return st.from_regex(b.pattern, fullmatch=True) if b.pattern else st.text(max_size=30)
    if typing.get_origin(base) is list:
        coordinate = st.integers(min_value=-1, max_value=70000)
        return st.lists(st.lists(coordinate, min_size=3, max_size=5), max_size=3)
    return st.dictionaries(names, scalars, max_size=4)


@st.composite
def documents(draw: Any) -> Dict[str, Any]:
    """A device config: any subset of the schema's keys, each plausible or of any type, sometimes
    a table where a value goes (or the reverse), sometimes unknown keys."""
    doc: Dict[str, Any] = {}
    chaos = draw(st.sampled_from([0, 0, 4, 10]))  # one key in `chaos` of any type; 0: every key plausible
    for table, cls in tables():
        target = doc
        if table:
            if not draw(st.booleans()):
                continue
            if chaos and draw(st.integers(0, 5 * chaos)) == 0:
                doc[table] = draw(any_value)  # a value where a table goes
                continue
            target = doc.setdefault(table, {})
        for f in dataclasses.fields(cls):
            tp = hints(cls)[f.name]
            if dataclasses.is_dataclass(tp) or not draw(st.integers(0, 3)) == 0:
                continue
            name = f"{table}.{f.name}" if table else f.name
            plausible_value = plausible(name, tp, bounds_of(f))
            target[f.name] = draw(any_value if chaos and draw(st.integers(1, chaos)) == 1 else plausible_value)
        if chaos and draw(st.integers(0, 2 * chaos)) == 0:
            target[draw(names)] = draw(any_value)  # an unknown key
    return doc


@pytest.fixture(scope="module", autouse=True)
def ca_file() -> Iterator[None]:
    CA_FILE.write_text("not read by the loader, only checked to exist\n")
    yield
    CA_FILE.unlink()


def usable(cfg: DaemonConfig, folder: Path) -> None:
    """What the daemon does with a loaded config, on parts it takes from it at start and on SIGHUP."""
    json.dumps(dataclasses.asdict(cfg), allow_nan=False)  # every number finite, every value plain
    monitor = HealthMonitor(cfg.health.rules())
    monitor.evaluate({"fps": 30.0, "fps_ratio": 0.5, "latency_ms": {"total": {"p99": 1e6}},
                      "interval": {"drop_ratio": 0.5}, "system": {"temperature_max_c": 90.0}})
    processor = CommandProcessor({"ping": lambda args: {}}, secret=b"k", max_skew_s=cfg.device.max_skew_s,
                                 device_id=cfg.device.id, replay_path=folder / "replay.sqlite3")  # keep_ms: SQLite
    ping = sign({"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "ping"}, b"k", cfg.device.id)
    assert processor.handle(json.dumps(ping).encode())["ok"]
    processor.close()
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,64}", cfg.device.id)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(documents())
def test_any_device_config_gives_a_config_or_exit_2(doc: Dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {SECRET_ENV: "s3cret"}):
        path = Path(folder) / "device.toml"
        path.write_text(toml_document(doc), encoding="utf-8")
        try:
            cfg = load_daemon_config(path)
        except ConfigError as exc:
            assert exc.exit_code == 2
            assert str(path) in str(exc)
            assert len(str(exc)) < 8000  # the message goes into an alert: values are cut short
            return
        usable(cfg, Path(folder))


# -- what the issue found, one by one ------------------------------------------------------------
@pytest.mark.parametrize("text,key", [
    ('[health]\nlatency_p99_ms = "300"', "health.latency_p99_ms"),
    ("[health]\nfps_ratio = [1]", "health.fps_ratio"),
    ('[health]\ntemperature_c = {a = 1}', "health.temperature_c"),
    ('[health]\ndrift_sample_s = "1"', "health.drift_sample_s"),
    ('[[health.extra]]\nname = "hot"\nmetric = "fps"\nop = "<"\nthreshold = "x"', "health.extra[0].threshold"),
    ('[device]\nid = ["a"]', "device.id"),
    ("[device]\nid = 5", "device.id"),
    ("[device]\nmodels_dir = 5", "device.models_dir"),
    ("[device]\nsnapshot_dir = [1]", "device.snapshot_dir"),
    ("[device]\nhmac_secret_env = 3", "device.hmac_secret_env"),
    ("[device]\nmax_skew_s = 1e300", "device.max_skew_s"),
    ("[mqtt]\nurl = 5", "mqtt.url"),
    ('[mqtt]\nurl = "mqtt://[::1"', "mqtt.url"),
    ("[mqtt]\nkeepalive = 70000", "mqtt.keepalive"),
    ("[source]\noptions = {width = [[1]]}", "source.options.width"),
    ("threads = 100000000000000000000", "threads"),
    ("x = " + "[" * 5000 + "]" * 5000, "nest deeper"),
    ("[roi]\nzones = [[0, 0, 10, 1e9]]", "roi.zones[0][3]"),
    ("max_frames = " + "9" * 5000, "not valid TOML"),
    ("max_frames = 0x" + "f" * 5000, "max_frames"),
])
def test_what_crashed_the_loader_is_a_config_error_naming_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "device.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as info:
        load_daemon_config(path)
    assert str(path) in str(info.value) and key in str(info.value), info.value


def test_an_int_given_for_a_float_is_held_as_a_float(tmp_path: Path) -> None:
    path = tmp_path / "device.toml"
    path.write_text("[health]\nlatency_p99_ms = 250\n[telemetry]\ninterval_s = 2\n")
    cfg = load_daemon_config(path)
    assert type(cfg.health.latency_p99_ms) is float and type(cfg.telemetry.interval_s) is float
    assert cfg.health.latency_p99_ms == 250.0


def test_config_built_in_code_is_held_to_the_same_table() -> None:
    from edge_sdk.telemetry.health import HealthConfig

    with pytest.raises(ConfigError, match=r"health.latency_p99_ms must be a number in \[0, 600000\], got '300'"):
        HealthConfig(latency_p99_ms="300").rules()  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"source.fps must be a finite number"):
        PipelineConfig(source=dataclasses.replace(PipelineConfig().source, fps=math.inf)).validate()
