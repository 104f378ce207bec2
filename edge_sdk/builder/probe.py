"""The preprocessing probe: does the configured input preprocessing look like the one the model
was trained with?

Wrong channel order and wrong scaling are the most common deployment bugs, and nothing else in
the build notices them: the accuracy gate compares FP16/INT8 with FP32 under the same
preprocessing. The probe runs the FP32 model on a few of the build's images under the configured
preprocessing and under plausible alternatives — the channel order swapped, pixels in 0..255,
0..1, -1..1 or ImageNet mean/std — and compares what the decoder makes of each: detections above
the decoder's score threshold, the mean over images of the top score, and the scores of the
objects two preprocessings both find. It only reports; it never changes the configuration.

Every candidate goes through the runtime's own :class:`~edge_sdk.preprocess.Preprocessor`;
the model runs in the builder's ONNX Runtime runner (:class:`OnnxRuntimeRunner`).

A model fed the wrong pixel range often fires everywhere, and more detections from it are no
evidence of a better input. So each candidate also runs on *controls*: copies of two probe
images with their pixels shuffled (same colours, no objects). A candidate is *spurious* when it
finds at least max(2, a quarter of its rate on the real images) detections per control image,
or fills an image up to the decoder's `max_detections`.

The rule (:func:`clearly_better`). With `n` images, an alternative A is clearly better than the
configured preprocessing C when A is not spurious and one of these holds:

1. *more detections*: A finds at least 1.5x the detections of C and at least max(4, n/2) more,
   and A's mean top score is not lower than C's by more than 0.05;
2. *higher top scores*: A's mean top score is at least 0.2 higher than C's, with at least as many
   detections;
3. *the same objects, more confidently*: of the objects both find (detections matched one to one
   at IoU 0.5, one of the two above the decoder's threshold), there are at least 20, A scores
   higher on at least 75 % of them with a median gain of at least 0.03, and A finds at least as
   many detections. A small, systematic gain on the same objects is what a wrong channel order
   costs a model on colour scenes with small objects (CenterFace: about -0.06 on 80 % of its
   faces), where the detection count moves little; on gray images the gains split both ways.

When C itself is spurious, an alternative that is not and finds at least one detection per image
on average is reported instead. Among several clearly better alternatives the probe names one of
those with the most detections (within 5 %), preferring the smallest change (the channel order
or the pixel range alone), then the higher mean top score.

The advice states its confidence (:data:`CONFIDENCE_RULE`). It is *high* only with two independent
pieces of evidence: C fires on the controls and the alternative does not (and finds at least one
detection per image); or C finds nothing on any image and the alternative, quiet on the controls,
finds objects on at least half of them; or the alternative is what the model itself says (its
family's preset, :mod:`~edge_sdk.builder.presets`), C departs from it, and the detections agree
(rules 1-3). Then the model under C would ship detecting little or nothing real, and the build
stops (exit 6, :meth:`ProbeResult.refusal`) unless `--force-preprocessing`. Any other advice
(rules 1-3 alone, which images from another domain than the model's can produce) is *low*
confidence: a warning, so a preset is never overridden without evidence from both the detections
and the controls.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.builder.evaluate import SPURIOUS_MIN, SPURIOUS_SHARE, OnnxRuntimeRunner, is_spurious
from edge_sdk.detections import Detections, box_iou
from edge_sdk.errors import BackendError, ConfigError, SourceError
from edge_sdk.preprocess import InputSpec, Preprocessor, load_image

PROBE_IMAGES = 8  # at most this many images: a few seconds on the default model
CONTROL_IMAGES = 2  # pixel-shuffled copies of the first probe images
SCORE_FLOOR = 0.05  # candidates decode at this threshold (or the decoder's, if lower): top scores and pairs
MATCH_IOU = 0.5
DETECTION_RATIO = 1.5
MIN_EXTRA_DETECTIONS = 4
TOP_SCORE_TOLERANCE = 0.05
TOP_SCORE_GAIN = 0.2
MIN_PAIRS = 20
PAIR_SHARE = 0.75
PAIR_MEDIAN_GAIN = 0.03
TIE = 0.95  # alternatives within 5 % of the most detections count as equally good

RULE = (
    f"an alternative that is not spurious is clearly better when (1) it finds >= {DETECTION_RATIO:g}x the detections "
    f"of the configured preprocessing and >= max({MIN_EXTRA_DETECTIONS}, images/2) more, with a mean top score at most "
    f"{TOP_SCORE_TOLERANCE:g} lower; or (2) its mean top score is >= {TOP_SCORE_GAIN:g} higher with at least as many "
    f"detections; or (3) of >= {MIN_PAIRS} objects both find (IoU {MATCH_IOU:g}) it scores >= {PAIR_SHARE:.0%} higher, "
    f"median gain >= {PAIR_MEDIAN_GAIN:g}, with at least as many detections. Spurious: >= max({SPURIOUS_MIN:g}, {SPURIOUS_SHARE:g} x "
    f"its rate on the images) detections per pixel-shuffled control image, or an image filled up to the decoder's "
    f"max_detections"
)

CONFIDENCE_RULE = (
    "high: the configured preprocessing fires on the pixel-shuffled controls and the alternative does not (with >= 1 "
    "detection per image), or the configured one finds nothing on any image and the alternative, quiet on the controls, "
    "finds objects on >= half of them, or the alternative is the model's own preset and the configured one departs "
    "from it; low: any other advice (more or more confident detections alone)"
)

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Normalization:
    """A pixel range: the network sees `(pixel - mean) * scale`, mean and scale given in RGB order."""

    label: str
    mean_rgb: Sequence[float]
    scale_rgb: Sequence[float]

    def for_color(self, color: str) -> List[List[float]]:
        """[mean, scale] per network channel for a network that takes `color` order."""
        order = (0, 1, 2) if color == "RGB" else (2, 1, 0)
        return [[float(self.mean_rgb[i]) for i in order], [float(self.scale_rgb[i]) for i in order]]

    def matches(self, spec: InputSpec) -> bool:
        mean, scale = self.for_color(spec.color)
        return bool(np.allclose(spec.mean, mean, rtol=1e-3, atol=1e-3) and np.allclose(spec.scale, scale, rtol=1e-3, atol=1e-7))


_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
NORMALIZATIONS = (
    Normalization("0..255", (0.0,) * 3, (1.0,) * 3),
    Normalization("0..1", (0.0,) * 3, (1.0 / 255.0,) * 3),
    Normalization("-1..1", (127.5,) * 3, (1.0 / 127.5,) * 3),
    Normalization("ImageNet mean/std", tuple(255.0 * m for m in _IMAGENET_MEAN), tuple(1.0 / (255.0 * s) for s in _IMAGENET_STD)),
)


def normalization_of(spec: InputSpec) -> str:
    """The label of the known pixel range `spec` uses, or 'mean [...] scale [...]'."""
    for norm in NORMALIZATIONS:
        if norm.matches(spec):
            return norm.label
    return f"mean {_fmt_list(spec.mean)} scale {_fmt_list(spec.scale)}"


def _fmt_list(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.6g}" for v in values) + "]"


@dataclass
class Pairs:
    """The objects an alternative and the configured preprocessing both find, and their score gains."""

    count: int = 0
    higher_share: float = 0.0
    median_gain: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return {"count": self.count, "higher_share": round(self.higher_share, 4), "median_gain": round(self.median_gain, 4)}


@dataclass
class Candidate:
    """One preprocessing the probe tries, and what the decoder found with it."""

    spec: InputSpec
    normalization: str
    configured: bool = False
    preset: bool = False  # the model's own preset (ProbeResult.preset) has this colour order and range
    detections: int = 0
    images_with_detections: int = 0
    mean_top_score: float = 0.0
    control_detections: float = 0.0  # per pixel-shuffled control image
    filled: bool = False  # an image filled up to the decoder's max_detections
    spurious: bool = False
    pairs: Optional[Pairs] = None  # against the configured preprocessing (alternatives only)
    found: List[Detections] = field(default_factory=list, repr=False)  # per image, above SCORE_FLOOR

    @property
    def name(self) -> str:
        return f"{self.spec.color}, {self.normalization}"

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "name": self.name,
            "configured": self.configured,
            "preset": self.preset,
            "color": self.spec.color,
            "normalization": self.normalization,
            "mean": [round(v, 6) for v in self.spec.mean],
            "scale": [float(f"{v:.6g}") for v in self.spec.scale],
            "detections": self.detections,
            "images_with_detections": self.images_with_detections,
            "mean_top_score": round(self.mean_top_score, 4),
            "control_detections_per_image": round(self.control_detections, 2),
            "spurious": self.spurious,
        }
        if self.pairs is not None:
            d["pairs_with_configured"] = self.pairs.to_dict()
        return d


def candidates(spec: InputSpec) -> List[Candidate]:
    """The configured preprocessing first, then each colour order x each known pixel range.

    Mean and scale are per network channel: swapping the colour order keeps them as configured."""
    own = normalization_of(spec)
    swapped = "RGB" if spec.color == "BGR" else "BGR"
    out = [Candidate(spec, own, configured=True), Candidate(replace(spec, color=swapped), own)]
    for color in (spec.color, swapped):
        for norm in NORMALIZATIONS:
            if norm.label != own:
                mean, scale = norm.for_color(color)
                out.append(Candidate(replace(spec, color=color, mean=mean, scale=scale), norm.label))
    return out


def pair_scores(alt: Sequence[Detections], conf: Sequence[Detections], threshold: float) -> Pairs:
    """Match `alt`'s detections with `conf`'s image by image (one to one, same class, IoU >= 0.5,
    highest scores first); keep the pairs where either score is above `threshold`."""
    gains: List[float] = []
    for a, c in zip(alt, conf):
        if not len(a) or not len(c):
            continue
        ious = np.where(a.class_id[:, None] == c.class_id[None, :], box_iou(a.xyxy, c.xyxy), 0.0)
        taken = np.zeros(len(c), dtype=bool)
        for i in np.argsort(-a.confidence, kind="stable"):
            row = np.where(taken, -1.0, ious[i])
            j = int(np.argmax(row))
            if row[j] >= MATCH_IOU:
                taken[j] = True
                if max(a.confidence[i], c.confidence[j]) > threshold:
                    gains.append(float(a.confidence[i]) - float(c.confidence[j]))
    if not gains:
        return Pairs()
    g = np.asarray(gains)
    return Pairs(len(g), float(np.mean(g > 0)), float(np.median(g)))


def clearly_better(alt: Candidate, conf: Candidate, images: int) -> bool:
    """The documented rule (module docstring, RULE)."""
    if alt.spurious:
        return False
    if conf.spurious:
        return alt.detections >= images
    as_many = alt.detections >= conf.detections
    more = (alt.detections >= DETECTION_RATIO * conf.detections
            and alt.detections - conf.detections >= max(MIN_EXTRA_DETECTIONS, images / 2)
            and alt.mean_top_score >= conf.mean_top_score - TOP_SCORE_TOLERANCE)
    higher_top = as_many and alt.mean_top_score >= conf.mean_top_score + TOP_SCORE_GAIN
    p = alt.pairs or Pairs()
    more_confident = (as_many and p.count >= MIN_PAIRS and p.higher_share >= PAIR_SHARE
                      and p.median_gain >= PAIR_MEDIAN_GAIN)
    return more or higher_top or more_confident


@dataclass
class ProbeResult:
    """What the probe found; `to_dict()` is the manifest's `preprocess_probe`."""

    verdict: str  # "configured" | "alternative" | "no_signal" | "skipped"
    reason: str = ""
    images: int = 0
    candidates: List[Candidate] = field(default_factory=list)
    better: Optional[Candidate] = None
    seconds: float = 0.0
    files: List[str] = field(default_factory=list)  # names of the images it ran on
    preset: Optional[str] = None  # the model's own preset ("ultralytics"), where it has one

    @property
    def configured(self) -> Optional[Candidate]:
        return next((c for c in self.candidates if c.configured), None)

    @property
    def confidence(self) -> Optional[str]:
        """"high" or "low" (CONFIDENCE_RULE) for an alternative; None without one."""
        alt, conf = self.better, self.configured
        if self.verdict != "alternative" or alt is None or conf is None or alt.spurious:
            return None
        fires = conf.spurious and alt.detections >= self.images
        blind = conf.detections == 0 and alt.images_with_detections >= max(2, self.images / 2)
        return "high" if fires or blind or alt.preset else "low"

    def refuses(self) -> bool:
        """Whether the build must stop here: advice of high confidence (see :func:`refusal`)."""
        return self.confidence == "high"

    def warning(self, source: str = "command line") -> Optional[str]:
        """The build's warning (without its `warning: ` prefix), or None when nothing is wrong."""
        if self.verdict == "skipped":
            return f"preprocessing probe skipped: {self.reason}"
        if self.verdict != "alternative" or self.better is None:
            return None
        alt, conf = self.better, self.configured
        assert conf is not None
        lead, numbers = self._evidence()
        keeps = (f"this build keeps {conf.name} (--force-preprocessing)" if self.refuses()
                 else f"confidence low (detections alone, no control shows {conf.name} makes noise): "
                      f"this build keeps {conf.name}")
        return f"preprocessing probe: {lead}: {numbers}. {fix_hint(alt, conf, source)}; {keeps}"

    def _evidence(self) -> Tuple[str, str]:
        alt, conf = self.better, self.configured
        assert alt is not None and conf is not None
        if conf.spurious:
            lead = (f"the configured {conf.name} makes the model fire on images without objects "
                    f"({conf.control_detections:.0f} detections per pixel-shuffled image) and {alt.name} does not")
        elif conf.detections == 0 and self.refuses():
            lead = (f"the configured {conf.name} finds nothing on any of {self.images} images, and {alt.name} finds "
                    f"objects on {alt.images_with_detections} of them and none of the pixel-shuffled controls")
        elif alt.preset:
            lead = (f"the configured {conf.name} departs from what the model says ({self.preset} preset: {alt.name}), "
                    f"and the detections agree with the model")
        else:
            lead = f"{alt.name} fits the model clearly better than the configured {conf.name}"
        ratio = f" ({alt.detections / conf.detections:.1f}x)" if 0 < conf.detections <= alt.detections else ""
        numbers = (f"on {self.images} images it finds {alt.detections} vs {conf.detections} detections{ratio}, "
                   f"mean top score {alt.mean_top_score:.2f} vs {conf.mean_top_score:.2f}")
        p = alt.pairs or Pairs()
        if p.count:
            numbers += f", higher scores on {p.higher_share:.0%} of the {p.count} objects both find (median {p.median_gain:+.2f})"
        return lead, numbers

    def refusal(self, source: str = "command line", origins: Optional[Mapping[str, str]] = None) -> str:
        """Why the build stops (an advice of high confidence): the evidence, where the configured
        setting came from (`origins`: input key → source), the fix and the override."""
        alt, conf = self.better, self.configured
        assert alt is not None and conf is not None
        lead, numbers = self._evidence()
        changed = [k for k, differs in (("color", alt.spec.color != conf.spec.color),
                                        ("scale", alt.spec.scale != conf.spec.scale or alt.spec.mean != conf.spec.mean))
                   if differs]
        where = ", ".join(f"{k} from {origins[k]}" for k in changed if origins and k in origins)
        if conf.spurious:
            outcome = "fires on noise, and every variant of the bundle would agree with that noise"
        elif conf.detections == 0:
            outcome = "finds nothing"
        else:
            outcome = "misses objects and scores the rest lower"
        return (f"preprocessing probe (confidence high): {lead}: {numbers}. Under {conf.name}"
                f"{f' ({where})' if where else ''} the model {outcome}. {fix_hint(alt, conf, source)}; or, if the "
                "images are not what the model sees, build anyway with --force-preprocessing")

    def to_dict(self) -> Dict[str, Any]:
        conf = self.configured
        d: Dict[str, Any] = {"verdict": self.verdict}
        if self.verdict == "skipped":
            d["reason"] = self.reason
            return d
        d.update({
            "images": self.images,
            "files": list(self.files),
            "configured": None if conf is None else conf.name,
            "better": None if self.better is None else self.better.name,
            "signal": "detections above the decoder's score_threshold; mean over images of the top score; "
                      "scores of the objects both find",
            "rule": RULE,
            "confidence": self.confidence,
            "preset": self.preset,
            "confidence_rule": CONFIDENCE_RULE,
            "candidates": [c.to_dict() for c in self.candidates],
            "seconds": round(self.seconds, 2),
        })
        return d


def fix_hint(better: Candidate, configured: Candidate, source: str) -> str:
    """What to change, in the file the configuration came from (or on the command line)."""
    where = f"in {source}" if source != "command line" else "in edge.toml"
    b, c = better.spec, configured.spec
    keys, flags, takes = [], [], []
    if b.color != c.color:
        takes.append(b.color)
        keys.append(f'color = "{b.color}"')
        flags.append(f"--color {b.color}")
    if b.mean != c.mean or b.scale != c.scale:
        takes.append(better.normalization)
        keys.append(f"mean = {_fmt_list(b.mean)}, scale = {_fmt_list(b.scale)}")
        flags.append(f"--mean {','.join(f'{v:.6g}' for v in b.mean)} --scale {','.join(f'{v:.6g}' for v in b.scale)}")
    return f"If the model takes {', '.join(takes)}, set [input] {', '.join(keys)} {where} (or pass {' '.join(flags)})"


def skipped(reason: str) -> ProbeResult:
    return ProbeResult("skipped", reason=reason)


def pick_images(paths: Sequence[Path], limit: int = PROBE_IMAGES) -> List[Path]:
    """At most `limit` of `paths`, evenly spread over them (deterministic)."""
    paths = list(paths)
    if len(paths) <= limit:
        return paths
    return [paths[i] for i in np.linspace(0, len(paths) - 1, limit).round().astype(int)]


def shuffled(frame: np.ndarray, seed: int = 0) -> np.ndarray:
    """The frame's pixels in a random order: the same colours, no objects."""
    pixels = frame.reshape(-1, frame.shape[2])
    order = np.random.default_rng(seed).permutation(len(pixels))
    return np.ascontiguousarray(pixels[order].reshape(frame.shape))


def cannot_run(model: Any, spec: InputSpec, decoder_spec: Optional[Mapping[str, Any]], paths: Sequence[Path]) -> Optional[str]:
    """Why the probe cannot say anything here (one line), or None when it can run."""
    from edge_sdk.builder.graph import real_inputs

    inputs = [i.name for i in real_inputs(model)]
    if len(inputs) != 1:
        return f"the model has {len(inputs)} inputs ({', '.join(inputs)}); the probe feeds images to a model with one input"
    if not decoder_spec:
        return "no decoder, so no detections or scores to compare; name one with --decoder or [decoder] type in edge.toml"
    if not paths:
        return "no images to run the model on; pass a folder of images with --calib"
    try:
        decoder = _decoder(decoder_spec, spec)
    except ConfigError as exc:
        return f"cannot make the decoder ({exc})"
    if getattr(decoder, "score_threshold", None) is None:
        return f"decoder {decoder_spec.get('type')!r} has no score threshold to count detections with"
    return None


def probe(model: Any, spec: InputSpec, decoder_spec: Optional[Mapping[str, Any]], paths: Sequence[Path],
          progress: Optional[Progress] = None, preset: Optional[Tuple[str, InputSpec]] = None) -> ProbeResult:
    """Run the probe for the FP32 `model` on the images at `paths` (see :func:`pick_images`).

    Returns a skipped result, with the reason, when the probe cannot say anything (see
    :func:`cannot_run`; also images it cannot read, outputs the decoder rejects).
    `progress(1)` is called once per model run: ``runs(len(paths)) * len(candidates(spec))`` in all.
    """
    started = time.perf_counter()
    reason = cannot_run(model, spec, decoder_spec, paths)
    if reason is not None:
        return skipped(reason)
    assert decoder_spec is not None
    threshold = float(_decoder(decoder_spec, spec).score_threshold)
    decoder = _decoder(dict(decoder_spec, score_threshold=min(SCORE_FLOOR, threshold)), spec)
    try:
        frames = [load_image(str(p)) for p in paths]
    except SourceError as exc:
        return skipped(str(exc))
    controls = [shuffled(f, seed=i) for i, f in enumerate(frames[:CONTROL_IMAGES])]
    cands = candidates(spec)
    cap = int(getattr(decoder, "max_detections", 0) or 0)
    with OnnxRuntimeRunner(model, "fp32") as runner:
        for cand in cands:
            pre = Preprocessor(cand.spec, batch=1)
            try:
                cand.found = [_detect(runner, pre, decoder, f, progress) for f in frames]
                on_controls = [_detect(runner, pre, decoder, c, progress) for c in controls]
            except BackendError as exc:
                return skipped(f"the decoder cannot read the model's outputs ({exc})")
            _score(cand, on_controls, threshold, cap)
    if preset is not None:
        for cand in cands:
            cand.preset = (cand.spec.color == preset[1].color and np.allclose(cand.spec.mean, preset[1].mean)
                           and np.allclose(cand.spec.scale, preset[1].scale))
    result = judge(cands, len(frames), threshold)
    result.preset = None if preset is None else preset[0]
    result.seconds = time.perf_counter() - started
    result.files = [Path(p).name for p in paths]
    return result


def runs(images: int) -> int:
    """Model runs per candidate for `images` probe images (the images and the controls)."""
    return images + min(images, CONTROL_IMAGES)


def _detect(runner: Any, pre: Preprocessor, decoder: Any, frame: np.ndarray, progress: Optional[Progress]) -> Detections:
    tensor, transform = pre(frame)
    found = decoder(runner.infer({pre.spec.name: tensor}), [transform])[0]
    if progress is not None:
        progress(1)
    return found


def _decoder(decoder_spec: Mapping[str, Any], spec: InputSpec) -> Any:
    from edge_sdk.decoders import make_decoder

    return make_decoder(dict(decoder_spec), spec)


def _score(cand: Candidate, on_controls: Sequence[Detections], threshold: float, cap: int) -> None:
    counts = [int(np.count_nonzero(d.confidence > threshold)) for d in cand.found]
    n = max(len(counts), 1)
    cand.detections = int(sum(counts))
    cand.images_with_detections = int(sum(1 for c in counts if c))
    cand.mean_top_score = float(sum(float(d.confidence.max()) if len(d) else 0.0 for d in cand.found) / n)
    noise = [int(np.count_nonzero(d.confidence > threshold)) for d in on_controls]
    cand.control_detections = float(sum(noise) / max(len(noise), 1))
    cand.filled = cap > 0 and max(counts + noise, default=0) >= cap
    cand.spurious = cand.filled or (bool(noise) and is_spurious(cand.control_detections, cand.detections / n))


def judge(cands: List[Candidate], images: int, threshold: float) -> ProbeResult:
    """Apply the rule to scored candidates (the configured one among them)."""
    conf = next(c for c in cands if c.configured)
    for cand in cands:
        if not cand.configured:
            cand.pairs = pair_scores(cand.found, conf.found, threshold)
    if all(c.detections == 0 or c.spurious for c in cands):  # nothing to go by
        return ProbeResult("no_signal", images=images, candidates=cands)
    better = [c for c in cands if not c.configured and clearly_better(c, conf, images)]
    if not better:
        return ProbeResult("configured", images=images, candidates=cands)
    most = max(c.detections for c in better)
    tied = [c for c in better if c.detections >= TIE * most]
    # the model's own preset, when it is among the clearly better ones, over any other
    best = next((c for c in better if c.preset), None) or min(tied, key=lambda c: (_changes(c, conf), -c.mean_top_score))
    return ProbeResult("alternative", images=images, candidates=cands, better=best)


def _changes(cand: Candidate, conf: Candidate) -> int:
    """How many of (channel order, pixel range) `cand` changes."""
    return int(cand.spec.color != conf.spec.color) + int(cand.normalization != conf.normalization)


__all__ = [
    "CONFIDENCE_RULE", "Candidate", "NORMALIZATIONS", "Pairs", "ProbeResult", "RULE", "candidates", "cannot_run",
    "clearly_better", "is_spurious", "judge",
    "pair_scores", "pick_images", "probe", "runs", "shuffled", "skipped",
]
