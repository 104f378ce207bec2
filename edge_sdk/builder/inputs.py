"""The build's inputs: the model file (the embedded default, fetched on first use, or a path), its
network input (:class:`~edge_sdk.preprocess.InputSpec`) and its output decoder.

The embedded model brings its own input and decoder, and so does its file given by path
(recognised by its sha256); `--input-name`, `--input-size`, `[input]` and `--decoder` override
them. Any other model gets its family's preset where its metadata or its decoder names one
(:mod:`~edge_sdk.builder.presets`: Ultralytics, YOLOX), its input size from the graph or the
metadata's `imgsz`, and the rest from InputSpec's defaults. The decoder is then fitted to the
model's head and given its class names (:mod:`~edge_sdk.builder.heads`). Where each setting came
from is recorded (:class:`~edge_sdk.builder.presets.Provenance`) and printed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from edge_sdk.builder import graph as graph_mod
from edge_sdk.builder import presets
from edge_sdk.builder.default_model import DEFAULT_MODEL, ensure_model
from edge_sdk.builder.heads import resolve_head
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import ConfigError
from edge_sdk.fsutil import sha256_file
from edge_sdk.preprocess import InputSpec


@dataclass
class ModelInputs:
    """What the build starts from, resolved and checked (see :func:`resolve_model`)."""

    path: Path  # the model file: as given, or the default's in the model cache
    name: str  # the manifest's model name
    source: str  # where the file came from, for the manifest
    model: Any  # the ModelProto as read from `path`
    spec: InputSpec
    decoder_spec: Optional[Dict[str, Any]]
    decoder: Any  # made from decoder_spec; None without one
    provenance: presets.Provenance = field(default_factory=presets.Provenance)


def resolve_model(config: BuildConfig, cache_dir: Optional[Path], progress: BuildProgress) -> ModelInputs:
    """Read the model `config` names (the embedded default when none) and resolve its input and
    decoder; a bad input name or size, or an unknown decoder, fails here, before any long work."""
    if config.model is None:
        path = ensure_model(cache_dir=cache_dir)
        name, default_spec, decoder_spec = DEFAULT_MODEL.name, DEFAULT_MODEL.input_spec, dict(DEFAULT_MODEL.decoder)
        progress.info(f"model: embedded default {DEFAULT_MODEL.name} ({DEFAULT_MODEL.requirement}, {DEFAULT_MODEL.license})")
    else:
        path = Path(config.model)
        name, default_spec, decoder_spec = path.stem, None, None
        if path.is_file() and sha256_file(path) == DEFAULT_MODEL.sha256:
            # The default model's file given by path: it gets its known input and decoder too.
            default_spec, decoder_spec = DEFAULT_MODEL.input_spec, dict(DEFAULT_MODEL.decoder)
        progress.info(f"model: {path}")
    model = graph_mod.model_from_path(path)
    provenance = presets.Provenance()
    if default_spec is not None:
        choice = presets.FamilyChoice(None, "the embedded model's own input and decoder")
        meta = presets.ModelMetadata()
    else:
        meta = presets.read_metadata(model, str(path))
        for why in meta.ignored.values():
            progress.warn(f"{why} (left out: not an Ultralytics export)")
        outputs = [(o.name, graph_mod.input_dims(o)) for o in model.graph.output]
        choice = presets.choose(meta, outputs, None if config.decoder is None else str(config.decoder.get("type")))
    provenance.preset = choice.to_dict()
    if config.decoder is not None:
        decoder_spec = dict(config.decoder)
        origin = config.origins.get("decoder", "flag: --decoder")
        provenance.decoder = {key: origin for key in decoder_spec}
    elif decoder_spec is not None:
        provenance.decoder = {key: "embedded model" for key in decoder_spec}
    elif choice.decoder is not None:
        assert choice.preset is not None
        decoder_spec = dict(choice.decoder)
        provenance.decoder = {"type": f"preset: {choice.preset.name} ({choice.decoder_evidence})"}
        if "num_classes" in decoder_spec:
            provenance.decoder["num_classes"] = "metadata: names"
    spec, provenance.input = resolve_input(config, model, default_spec, choice.preset, meta)
    fitted = resolve_head(model, decoder_spec, config.labels, progress)
    if fitted is not None:
        known = provenance.decoder or {}
        added = {key: _fitted_origin(key, config) for key in fitted
                 if key not in known or (decoder_spec or {}).get(key) != fitted.get(key)}
        provenance.decoder = dict(known, **added)
    decoder_spec = fitted
    inputs = ModelInputs(path=path, name=name, source=_model_source(config, path), model=model, spec=spec,
                         decoder_spec=decoder_spec, decoder=_make_decoder(decoder_spec, spec), provenance=provenance)
    if choice.preset is not None:
        progress.info(f"preset: {choice.preset.name} ({choice.evidence})")
    if choice.note:
        progress.info(choice.note)
    values = {"input": dict(spec.to_dict(), size=f"{spec.width}x{spec.height}"), "decoder": decoder_spec or {}}
    for line in provenance.lines(values):
        progress.info(line)
    return inputs


def resolve_input_spec(config: BuildConfig, model: Any, default: Optional[InputSpec]) -> InputSpec:
    """The network input: the embedded model's spec or the graph's input, then config overrides."""
    return resolve_input(config, model, default)[0]


def resolve_input(config: BuildConfig, model: Any, default: Optional[InputSpec],
                  preset: Optional[presets.Preset] = None,
                  meta: Optional[presets.ModelMetadata] = None) -> Tuple[InputSpec, Dict[str, str]]:
    """The network input and where each of its settings came from. Each setting is taken from the
    first of: the configuration (a flag or edge.toml), the embedded model's spec, the family
    `preset`, the graph (name; a fixed size), the metadata's `imgsz` (a dynamic size), InputSpec's
    default."""
    real = graph_mod.real_inputs(model)
    names = [i.name for i in real]
    origins: Dict[str, str] = {}

    def configured(key: str) -> str:
        return config.origins.get(key, "flag: --" + key.replace("_", "-"))

    if config.input_name is not None:
        name, origins["name"] = config.input_name, configured("input_name")
    elif default is not None:
        name, origins["name"] = default.name, "embedded model"
    elif len(names) == 1:
        name, origins["name"] = names[0], "graph"
    else:
        raise ConfigError(f"the model has {len(names)} inputs ({', '.join(names)}); choose one with --input-name")
    if name not in names:
        raise ConfigError(f"the model has no input {name!r}; its inputs are: {', '.join(names) or 'none'}. Fix --input-name")
    if config.input_size is not None:
        w, h = config.input_size
        shape, origins["size"] = [1, 3, h, w], configured("input_size")
    elif default is not None:
        shape, origins["size"] = list(default.shape), "embedded model"
    else:
        dims = graph_mod.input_dims(next(i for i in real if i.name == name))
        if len(dims) != 4 or dims[1] != 3:
            raise ConfigError(f"input {name!r} has shape {dims}; give the size with --input-size WxH (e.g. 640x640)")
        if all(isinstance(d, int) and d > 0 for d in dims[2:]):
            shape, origins["size"] = [1, 3, int(dims[2]), int(dims[3])], "graph"
        elif meta is not None and meta.imgsz is not None:
            shape, origins["size"] = [1, 3, meta.imgsz[1], meta.imgsz[0]], "metadata: imgsz"
        else:
            raise ConfigError(f"input {name!r} has shape {dims}; give the size with --input-size WxH (e.g. 640x640)")
    base = default or InputSpec(name=name, shape=shape)
    preset_fields = preset.input_fields() if preset is not None and default is None else {}
    fields: Dict[str, Any] = {}
    for key in ("color", "mean", "scale", "resize", "placement", "pad_value", "interpolation"):
        value = getattr(config, key)
        if value is not None:
            fields[key], origins[key] = value, configured(key)
        elif default is not None:
            fields[key], origins[key] = getattr(default, key), "embedded model"
        elif key in preset_fields:
            fields[key], origins[key] = preset_fields[key], f"preset: {preset.name}"  # type: ignore[union-attr]
        else:
            fields[key], origins[key] = getattr(base, key), "default"
    return InputSpec(name=name, shape=shape, **fields), origins


def _fitted_origin(key: str, config: BuildConfig) -> str:
    """Where a decoder setting that :func:`resolve_head` added or changed came from."""
    if key != "labels":
        return "model head: the output signature and metadata"
    if config.labels is not None:
        return config.origins.get("labels", f"--labels {config.labels}")
    return "metadata: names"


def _make_decoder(spec: Optional[Dict[str, Any]], input_spec: InputSpec) -> Any:
    if not spec:
        return None
    from edge_sdk.decoders import make_decoder

    return make_decoder(spec, input_spec)


def _model_source(config: BuildConfig, path: Path) -> str:
    if config.model is None:
        return f"pypi:{DEFAULT_MODEL.requirement}/{DEFAULT_MODEL.member}"
    return path.name
