"""Model presets: the preprocessing and decoder a model family was trained and exported with,
chosen from what the model says about itself.

What a model says:

* ONNX `metadata_props`. Ultralytics' exporter (`ultralytics/engine/exporter.py`) writes
  `author` "Ultralytics", `task` ("detect", "segment", "pose", "obb", "classify"), `stride`
  ("32"), `batch` ("1"), `imgsz` as a Python list "[height, width]", `names` as a Python dict
  literal "{0: 'person', 1: 'bicycle'}", and, in newer versions, `args` as a dict literal
  ("{'batch': 1, 'half': False, 'nms': False, ...}"); some versions write `half` on its own.
  YOLOv5's own `export.py` writes only `stride` and `names`. Values are parsed with
  :func:`ast.literal_eval` (literals only, nothing is evaluated).
* Its output layout: one output [N, 4 + C, boxes] is a YOLOv8 / YOLO11 head, [N, boxes, 5 + C]
  a YOLOv5 head.

The families (upstream's own inference code is the reference for each):

| preset | colour | pixels | resize | placement | pad | decoder |
|---|---|---|---|---|---|---|
| ultralytics (YOLOv5 / v8 / 11) | RGB | ÷255 | letterbox (LetterBox, INTER_LINEAR) | center | 114 | yolov8 or yolov5 by output layout |
| yolox (official `preproc`) | BGR | 0..255 | letterbox, ratio min(h / ih, w / iw) | top-left | 114 | yolox |

A model is Ultralytics' when its metadata has `author` Ultralytics, or YOLOv5's `stride` and
`names` without an author. A `--decoder` (or `[decoder] type`) of a family implies its preset
when the metadata names none. Every value the configuration gives (edge.toml, a flag) wins over
the preset and the metadata; :class:`Provenance` records where each setting came from.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from edge_sdk.errors import ModelError

METADATA_MAX_CHARS = 1_000_000  # a names literal of a few thousand classes is far below this


@dataclass(frozen=True)
class Preset:
    """A family's preprocessing (InputSpec fields) and its decoder types."""

    name: str
    color: str
    mean: Tuple[float, float, float]
    scale: Tuple[float, float, float]
    resize: str
    placement: str
    pad_value: int
    interpolation: str
    reference: str  # the upstream code the values come from

    def input_fields(self) -> Dict[str, Any]:
        return {"color": self.color, "mean": list(self.mean), "scale": list(self.scale), "resize": self.resize,
                "placement": self.placement, "pad_value": self.pad_value, "interpolation": self.interpolation}


ULTRALYTICS = Preset("ultralytics", "RGB", (0.0, 0.0, 0.0), (1 / 255.0,) * 3, "letterbox", "center", 114, "linear",
                     "ultralytics LetterBox(auto=False) + BGR->RGB + /255 (the exporter's OpenVINO rt_info: "
                     "reverse_input_channels, scale_values 255, pad_value 114, fit_to_window_letterbox)")
YOLOX = Preset("yolox", "BGR", (0.0, 0.0, 0.0), (1.0,) * 3, "letterbox", "top-left", 114, "linear",
               "YOLOX preproc: cv2 BGR 0..255, resized by min(h / ih, w / iw) to the top-left of a canvas of 114")
PRESETS: Dict[str, Preset] = {p.name: p for p in (ULTRALYTICS, YOLOX)}
# The preset a decoder type implies when the model's metadata names no family.
DECODER_PRESETS: Dict[str, Preset] = {"yolov5": ULTRALYTICS, "yolov8": ULTRALYTICS, "yolo11": ULTRALYTICS,
                                      "yolox": YOLOX}
INPUT_KEYS = ("name", "size", "color", "mean", "scale", "resize", "placement", "pad_value", "interpolation")


@dataclass
class ModelMetadata:
    """What a model's `metadata_props` say, parsed (see the module docstring)."""

    props: Dict[str, str] = field(default_factory=dict)
    author: Optional[str] = None
    task: Optional[str] = None
    imgsz: Optional[Tuple[int, int]] = None  # (width, height); the metadata writes [height, width]
    names: Optional[Dict[int, str]] = None
    stride: Optional[int] = None
    batch: Optional[int] = None
    half: Optional[bool] = None
    nms: Optional[bool] = None
    ignored: Dict[str, str] = field(default_factory=dict)  # key → why (another exporter's malformed key)

    @property
    def ultralytics(self) -> bool:
        """Ultralytics' exporter (author), or YOLOv5's (stride and names, no author)."""
        if self.author is not None:
            return self.author.strip().lower().startswith("ultralytics")
        return self.stride is not None and self.names is not None

    def describe(self) -> str:
        parts = []
        if self.author:
            parts.append(f"author {self.author}")
        if self.task:
            parts.append(f"task {self.task}")
        if self.imgsz:
            parts.append(f"imgsz {self.props.get('imgsz', '').strip()}")
        if self.names is not None:
            parts.append(f"{len(self.names)} class names")
        if self.stride is not None:
            parts.append(f"stride {self.stride}")
        return ", ".join(parts) or "no metadata"


def read_metadata(model: Any, origin: str = "the model") -> ModelMetadata:
    """Parse `model.metadata_props`. Unknown keys are kept in `props` only. A known key with a
    value of the wrong form is a ModelError naming the key, the value and the override in an
    Ultralytics export (whose exporter writes these keys); other exporters' keys of the same name
    are left out (`ignored`), and the preset does not rest on them."""
    props = {p.key: p.value for p in getattr(model, "metadata_props", [])}
    meta = ModelMetadata(props=props)
    meta.author = props.get("author")
    meta.task = props.get("task")
    strict = (meta.author or "").strip().lower().startswith("ultralytics")
    for key, parse in (("imgsz", _imgsz), ("names", _names), ("stride", _count), ("batch", _count), ("args", _flags)):
        if key not in props and not (key == "args" and ("half" in props or "nms" in props)):
            continue
        try:
            parse(meta, key, props, origin)
        except ModelError as exc:
            if strict:
                raise
            meta.ignored[key] = str(exc)
    return meta


def _imgsz(meta: ModelMetadata, key: str, props: Mapping[str, str], origin: str) -> None:
    value = _literal(props, key, origin, "--input-size WxH")
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value, value]
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(_positive_int(v) for v in value)):
        raise _bad(origin, key, props[key], "[height, width] with positive integers", "--input-size WxH")
    meta.imgsz = (int(value[1]), int(value[0]))


def _names(meta: ModelMetadata, key: str, props: Mapping[str, str], origin: str) -> None:
    """`names`, read as the labels are (one parser: :func:`edge_sdk.labels.parse_names_literal`)."""
    from edge_sdk.labels import parse_names_literal

    try:
        names = parse_names_literal(props[key], f"{origin}: metadata '{key}'", ModelError)
    except ModelError as exc:
        raise ModelError(f"{exc}; give the class names with --labels FILE, or the class count with "
                         "--decoder '{\"type\": ..., \"num_classes\": N}'") from None
    meta.names = dict(enumerate(names))


def _count(meta: ModelMetadata, key: str, props: Mapping[str, str], origin: str) -> None:
    value = _literal(props, key, origin, "--input-size WxH")
    if not _positive_int(value):
        raise _bad(origin, key, props[key], "a positive integer", "--input-size WxH")
    setattr(meta, key, int(value))


def _flags(meta: ModelMetadata, key: str, props: Mapping[str, str], origin: str) -> None:
    """`args` (newer exports) and `half` / `nms` written on their own (older ones)."""
    args = _literal(props, key, origin, "--decoder") if key in props else {}
    if not isinstance(args, dict):
        raise _bad(origin, key, props[key], "a dict of export arguments", "--decoder")
    for flag in ("half", "nms"):
        raw = props.get(flag, args.get(flag))
        if raw is None:
            continue
        value = _literal({flag: raw}, flag, origin, "--decoder") if isinstance(raw, str) else raw
        if not isinstance(value, bool):
            raise _bad(origin, flag, raw, "True or False", "--decoder")
        setattr(meta, flag, value)


def _literal(props: Mapping[str, Any], key: str, origin: str, override: str) -> Any:
    text = props[key]
    if not isinstance(text, str) or len(text) > METADATA_MAX_CHARS:
        raise _bad(origin, key, text, f"a Python literal of at most {METADATA_MAX_CHARS:,} characters", override)
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise _bad(origin, key, text, "a Python literal", override) from None


def _bad(origin: str, key: str, value: Any, expected: str, override: str) -> ModelError:
    return ModelError(f"{origin}: metadata {key!r} is {str(value)[:80]!r}, expected {expected}; "
                      f"export the model again, or give the value yourself ({override})")


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _non_negative_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


@dataclass
class FamilyChoice:
    """The preset chosen for a model and the decoder it implies (None where none fits)."""

    preset: Optional[Preset]
    evidence: str  # why this preset, in words
    decoder: Optional[Dict[str, Any]] = None  # the decoder the preset implies, when the config gives none
    decoder_evidence: str = ""
    note: str = ""  # why no decoder was implied, where one could have been

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": None if self.preset is None else self.preset.name, "evidence": self.evidence}
        if self.preset is not None:
            d["reference"] = self.preset.reference
        if self.note:
            d["note"] = self.note
        return d


def output_layout(outputs: Sequence[Tuple[str, List[Any]]], num_classes: Optional[int]) -> Tuple[Optional[str], str]:
    """The YOLO decoder type an output signature fits ("yolov8" for [N, 4 + C, boxes], "yolov5"
    for [N, boxes, 5 + C]) and the evidence in words; (None, why) when it fits neither."""
    if len(outputs) != 1:
        return None, f"{len(outputs)} outputs, not the one output of a YOLO detection head"
    name, dims = outputs[0]
    shown = f"{name} [{', '.join(str(d) if len(str(d)) <= 12 else '?' for d in dims)}]"
    if len(dims) != 3:
        return None, f"output {shown} is not [N, channels, boxes]"
    d1, d2 = dims[1], dims[2]
    if num_classes:
        if d1 == 4 + num_classes:
            return "yolov8", f"output {shown} = 4 + {num_classes} classes per box"
        if d2 == 5 + num_classes:
            return "yolov5", f"output {shown} = 5 + {num_classes} classes per box"
        return None, f"output {shown} fits neither 4 + {num_classes} nor 5 + {num_classes} channels"
    if isinstance(d1, int) and d1 > 4 and (not isinstance(d2, int) or d2 > 4 * d1):
        return "yolov8", f"output {shown}: channels first, boxes last"
    if isinstance(d2, int) and d2 > 5 and (not isinstance(d1, int) or d1 > 4 * d2):
        return "yolov5", f"output {shown}: boxes first, channels last"
    return None, f"output {shown} has no clear channel axis"


def choose(meta: ModelMetadata, outputs: Sequence[Tuple[str, List[Any]]], decoder_type: Optional[str]) -> FamilyChoice:
    """The preset for a model: from its metadata, else from the configured decoder's type."""
    if meta.ultralytics:
        who = "Ultralytics" if meta.author else "YOLOv5 (stride and names)"
        choice = FamilyChoice(ULTRALYTICS, f"metadata: {who} export ({meta.describe()})")
        if decoder_type is None:
            task = (meta.task or "detect").strip().lower()
            if meta.nms:
                choice.note = "metadata args nms True: the export ends in NMS; no YOLO head decoder implied"
            elif task != "detect":
                # A segment / pose head is the detection head with more columns, read by the YOLOv8/11
                # decoder once edge_sdk.builder.heads has fitted it; OBB and classifiers are refused there.
                choice.decoder = {"type": "yolov8"}
                if meta.names is not None:
                    choice.decoder["num_classes"] = len(meta.names)
                choice.decoder_evidence = f"metadata task {task}: the YOLOv8/11 head, fitted to the outputs"
            else:
                kind, why = output_layout(outputs, None if meta.names is None else len(meta.names))
                if kind is None:
                    choice.note = f"no decoder implied: {why}"
                else:
                    choice.decoder = {"type": kind}
                    if meta.names is not None:
                        choice.decoder["num_classes"] = len(meta.names)
                    choice.decoder_evidence = why
        return choice
    if decoder_type is not None and decoder_type.lower() in DECODER_PRESETS:
        preset = DECODER_PRESETS[decoder_type.lower()]
        return FamilyChoice(preset, f"decoder {decoder_type} implies the {preset.name} preset")
    return FamilyChoice(None, "no family metadata and no decoder of a known family")


@dataclass
class Provenance:
    """Where every input and decoder setting of a build came from: "metadata: imgsz",
    "preset: ultralytics", "edge.toml: PATH", "flag: --color", "graph", "default", "embedded model"
    (the kinds :data:`edge_sdk.manifest_check.PROVENANCE_KINDS` accepts)."""

    input: Dict[str, str] = field(default_factory=dict)
    decoder: Dict[str, str] = field(default_factory=dict)
    preset: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"input": dict(self.input), "decoder": dict(self.decoder), "preset": dict(self.preset)}

    def lines(self, values: Mapping[str, Mapping[str, Any]]) -> List[str]:
        """One line per group ("input", "decoder"): its settings grouped by where they came from."""
        out = []
        for group, sources in (("input", self.input), ("decoder", self.decoder)):
            by_source: Dict[str, List[str]] = {}
            for key, source in sources.items():
                by_source.setdefault(source, []).append(f"{key} {_show(values.get(group, {}).get(key))}")
            if by_source:
                out.append(f"{group}: " + "; ".join(f"{', '.join(keys)} ← {src}" for src, keys in by_source.items()))
        return out


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        if len(value) == 3 and len(set(value)) == 1:
            return _show(value[0])
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


__all__ = [
    "DECODER_PRESETS", "FamilyChoice", "ModelMetadata", "PRESETS", "Preset", "Provenance", "ULTRALYTICS", "YOLOX",
    "choose", "output_layout", "read_metadata",
]
