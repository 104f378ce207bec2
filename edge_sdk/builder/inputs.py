"""The build's inputs: the model file (the embedded default, fetched on first use, or a path), its
network input (:class:`~edge_sdk.preprocess.InputSpec`) and its output decoder.

The embedded model brings its own input and decoder, and so does its file given by path
(recognised by its sha256); `--input-name`, `--input-size`, `[input]` and `--decoder` override
them. Any other model's input comes from its graph. The decoder is then fitted to the model's
head and given its class names (:mod:`~edge_sdk.builder.heads`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from edge_sdk.builder import graph as graph_mod
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
    if config.decoder is not None:
        decoder_spec = dict(config.decoder)
    model = graph_mod.model_from_path(path)
    spec = resolve_input_spec(config, model, default_spec)
    decoder_spec = resolve_head(model, decoder_spec, config.labels, progress)
    return ModelInputs(path=path, name=name, source=_model_source(config, path), model=model, spec=spec,
                       decoder_spec=decoder_spec, decoder=_make_decoder(decoder_spec, spec))


def resolve_input_spec(config: BuildConfig, model: Any, default: Optional[InputSpec]) -> InputSpec:
    """The network input: the embedded model's spec or the graph's input, then config overrides."""
    real = graph_mod.real_inputs(model)
    names = [i.name for i in real]
    if config.input_name is not None:
        name = config.input_name
    elif default is not None:
        name = default.name
    elif len(names) == 1:
        name = names[0]
    else:
        raise ConfigError(f"the model has {len(names)} inputs ({', '.join(names)}); choose one with --input-name")
    if name not in names:
        raise ConfigError(f"the model has no input {name!r}; its inputs are: {', '.join(names) or 'none'}. Fix --input-name")
    if config.input_size is not None:
        w, h = config.input_size
        shape = [1, 3, h, w]
    elif default is not None:
        shape = list(default.shape)
    else:
        dims = graph_mod.input_dims(next(i for i in real if i.name == name))
        if len(dims) != 4 or not all(isinstance(d, int) and d > 0 for d in dims[2:]) or dims[1] != 3:
            raise ConfigError(f"input {name!r} has shape {dims}; give the size with --input-size WxH (e.g. 640x640)")
        shape = [1, 3, int(dims[2]), int(dims[3])]
    base = default or InputSpec(name=name, shape=shape)
    return InputSpec(
        name=name,
        shape=shape,
        color=config.color or base.color,
        mean=config.mean if config.mean is not None else base.mean,
        scale=config.scale if config.scale is not None else base.scale,
        resize=config.resize or base.resize,
        interpolation=config.interpolation or base.interpolation,
        pad_value=base.pad_value,
    )


def _make_decoder(spec: Optional[Dict[str, Any]], input_spec: InputSpec) -> Any:
    if not spec:
        return None
    from edge_sdk.decoders import make_decoder

    return make_decoder(spec, input_spec)


def _model_source(config: BuildConfig, path: Path) -> str:
    if config.model is None:
        return f"pypi:{DEFAULT_MODEL.requirement}/{DEFAULT_MODEL.member}"
    return path.name
