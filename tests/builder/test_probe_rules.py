"""The probe's rules, from the sentences of its docstring, at their exact boundaries: a reference
written here from the text decides, and the code must agree on every drawn case (counts and
scores drawn from grids that hit each threshold exactly). Matching of detections is checked
against a brute-force one-to-one matcher with its own IoU."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.builder.probe import (
    Candidate,
    Pairs,
    ProbeResult,
    candidates,
    clearly_better,
    is_spurious,
    judge,
    normalization_of,
    pair_scores,
    pick_images,
    runs,
)
from edge_sdk.detections import Detections
from edge_sdk.preprocess import InputSpec

SPEC = InputSpec(name="images", shape=[1, 3, 64, 96], color="BGR", scale=[1 / 255] * 3)


def cand(det: int, top: float, pairs: Optional[Pairs] = None, spurious: bool = False, images_with: int = 0,
         color: str = "RGB", norm: str = "0..1", configured: bool = False) -> Candidate:
    c = Candidate(replace(SPEC, color=color), norm, configured=configured, detections=det, mean_top_score=top,
                  spurious=spurious, images_with_detections=images_with)
    c.pairs = pairs
    return c


def reference_better(alt: Candidate, conf: Candidate, n: int) -> bool:
    """The module docstring, sentence by sentence."""
    if alt.spurious:  # "A is not spurious"
        return False
    if conf.spurious:  # "an alternative that is not and finds at least one detection per image on average"
        return alt.detections / n >= 1
    # (1) at least 1.5x the detections of C and at least max(4, n/2) more, top score not lower by more than 0.05
    rule1 = (alt.detections >= 1.5 * conf.detections and alt.detections - conf.detections >= max(4, n / 2)
             and not conf.mean_top_score - alt.mean_top_score > 0.05 + 1e-12)
    # (2) mean top score at least 0.2 higher, with at least as many detections
    rule2 = alt.mean_top_score - conf.mean_top_score >= 0.2 - 1e-12 and alt.detections >= conf.detections
    p = alt.pairs or Pairs()
    # (3) at least 20 pairs, higher on at least 75 %, median gain at least 0.03, at least as many detections
    rule3 = p.count >= 20 and p.higher_share >= 0.75 and p.median_gain >= 0.03 and alt.detections >= conf.detections
    return rule1 or rule2 or rule3


counts = st.sampled_from([0, 1, 3, 4, 5, 6, 7, 8, 10, 11, 12, 14, 15, 16, 20, 24, 30, 40])
tops = st.sampled_from([0.0, 0.25, 0.45, 0.5, 0.55, 0.7, 0.75, 0.95, 1.0])
pairs = st.builds(Pairs, st.sampled_from([0, 19, 20, 21]), st.sampled_from([0.5, 0.74, 0.75, 0.76, 1.0]),
                  st.sampled_from([0.0, 0.0299, 0.03, 0.031, 0.1]))


@settings(max_examples=800, deadline=None)
@given(a=counts, c=counts, ta=tops, tc=tops, p=st.one_of(st.none(), pairs), n=st.sampled_from([1, 2, 7, 8, 9, 10, 16]),
       sa=st.booleans(), sc=st.booleans())
def test_clearly_better_is_the_documented_rule(a: int, c: int, ta: float, tc: float, p: Optional[Pairs], n: int,
                                              sa: bool, sc: bool) -> None:
    alt, conf = cand(a, ta, p, sa), cand(c, tc, spurious=sc)
    assert clearly_better(alt, conf, n) is reference_better(alt, conf, n)


@pytest.mark.parametrize("a,c,ta,tc,n,expected", [
    (6, 4, 0.5, 0.5, 4, False),     # 1.5x, but only 2 more (max(4, n/2) = 4 needed)
    (12, 8, 0.5, 0.5, 8, True),     # exactly 1.5x and exactly 4 more
    (11, 8, 0.5, 0.5, 8, False),    # 1.375x
    (11, 7, 0.5, 0.5, 8, True),     # 4 more, 1.57x
    (20, 10, 0.45, 0.5, 8, True),   # top score exactly 0.05 lower
    (20, 10, 0.44, 0.5, 8, False),  # 0.06 lower
    (10, 10, 0.75, 0.55, 8, True),  # top exactly 0.2 higher, as many detections
    (10, 10, 0.74, 0.55, 8, False),
    (9, 10, 0.95, 0.55, 8, False),  # much higher, but fewer detections
    (15, 10, 0.5, 0.5, 10, True),   # 5 more = n / 2, and 1.5x
    (14, 10, 0.5, 0.5, 10, False),  # 1.4x
    (24, 16, 0.5, 0.5, 16, True),   # 8 more = n / 2
    (23, 15, 0.5, 0.5, 16, True),
    (22, 15, 0.5, 0.5, 16, False),  # 7 more < n / 2 = 8
])
def test_clearly_better_at_the_edges(a: int, c: int, ta: float, tc: float, n: int, expected: bool) -> None:
    alt, conf = cand(a, ta), cand(c, tc)
    assert clearly_better(alt, conf, n) is expected is reference_better(alt, conf, n)


@settings(max_examples=500, deadline=None)
@given(control=st.sampled_from([0.0, 1.0, 1.99, 2.0, 2.5, 3.0, 4.99, 5.0, 5.01, 10.0]),
       rate=st.sampled_from([0.0, 4.0, 8.0, 16.0, 20.0, 40.0]), filled=st.booleans())
def test_spurious_is_at_least_max_of_two_and_a_quarter_of_the_rate(control: float, rate: float, filled: bool) -> None:
    assert is_spurious(control, rate, filled) is (filled or control >= max(2.0, rate / 4))


def test_spurious_edges() -> None:
    assert is_spurious(2.0, 0.0) and not is_spurious(1.999, 0.0)
    assert is_spurious(5.0, 20.0) and not is_spurious(4.999, 20.0)
    assert is_spurious(0.0, 0.0, filled=True)


def ious(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((len(a), len(b)))
    for i, p in enumerate(a):
        for j, q in enumerate(b):
            w = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
            h = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
            inter = w * h
            union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
            out[i, j] = inter / union if union > 0 else 0.0
    return out


def reference_pairs(alt: List[Detections], conf: List[Detections], threshold: float) -> List[float]:
    """One to one, same class, IoU >= 0.5, the alternative's highest scores first, each taking the
    free partner it overlaps most; a pair counts when either score is above the threshold."""
    gains = []
    for a, c in zip(alt, conf):
        m = ious(a.xyxy, c.xyxy)
        free = list(range(len(c)))
        for i in sorted(range(len(a)), key=lambda k: -a.confidence[k]):
            options = [j for j in free if a.class_id[i] == c.class_id[j] and m[i, j] >= 0.5]
            if not options:
                continue
            j = max(options, key=lambda k: (m[i, k], -k))
            free.remove(j)
            if max(a.confidence[i], c.confidence[j]) > threshold:
                gains.append(float(a.confidence[i]) - float(c.confidence[j]))
    return gains


boxes = st.lists(st.tuples(st.sampled_from([0, 2, 4, 10, 40]), st.sampled_from([0, 3, 10]),
                           st.sampled_from([8, 10, 20]), st.sampled_from([0.1, 0.3, 0.5, 0.6, 0.8, 0.9]),
                           st.integers(0, 1)), max_size=5)


def detections(rows) -> Detections:
    if not rows:
        return Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    xyxy = np.array([[x, y, x + s, y + s] for x, y, s, _, _ in rows], np.float32)
    return Detections(xyxy, np.array([r[3] for r in rows], np.float32), np.array([r[4] for r in rows], np.int32))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(boxes, boxes), min_size=1, max_size=3), st.sampled_from([0.3, 0.5, 0.8]))
def test_pair_scores_against_a_brute_force_matcher(images, threshold: float) -> None:
    # distinct scores within an image keep "highest first" unambiguous
    alt = [detections(list({r[3]: r for r in a}.values())) for a, _ in images]
    conf = [detections(c) for _, c in images]
    gains = reference_pairs(alt, conf, threshold)
    p = pair_scores(alt, conf, threshold)
    assert p.count == len(gains)
    if gains:
        assert p.higher_share == pytest.approx(float(np.mean(np.array(gains) > 0)))
        assert p.median_gain == pytest.approx(float(np.median(gains)), abs=1e-6)
    else:
        assert (p.higher_share, p.median_gain) == (0.0, 0.0)


def test_a_pair_at_exactly_iou_one_half_counts() -> None:
    a = detections([(0, 0, 10, 0.9, 0)])
    # [0, 0, 10, 10] against [0, 0, 10, 20]... use widths: overlap 100 / union 200 = 0.5
    c = Detections(np.array([[0, 0, 10, 20]], np.float32), np.array([0.6], np.float32), np.array([0], np.int32))
    assert pair_scores([a], [c], 0.5).count == 1
    c2 = Detections(np.array([[0, 0, 10, 20.5]], np.float32), np.array([0.6], np.float32), np.array([0], np.int32))
    assert pair_scores([a], [c2], 0.5).count == 0


def test_judge_names_the_most_detections_within_five_percent_preferring_the_smallest_change() -> None:
    conf = cand(10, 0.5, configured=True, color="BGR", norm="0..1")
    both = cand(100, 0.9, color="RGB", norm="0..255")       # two changes, the most detections
    one = cand(95, 0.6, color="RGB", norm="0..1")           # one change, exactly 95 %
    result = judge([conf, both, one], 8, 0.5)
    assert result.verdict == "alternative" and result.better is one
    below = cand(94, 0.6, color="RGB", norm="0..1")         # 94 %: not tied, the most detections win
    assert judge([conf, both, below], 8, 0.5).better is both
    same = cand(100, 0.95, color="BGR", norm="0..255")      # tie on detections and changes: higher top score
    other = cand(100, 0.9, color="RGB", norm="0..1")
    assert judge([conf, other, same], 8, 0.5).better is same


def test_judge_without_signal_or_without_a_better_one() -> None:
    conf = cand(0, 0.0, configured=True)
    assert judge([conf, cand(0, 0.0), cand(50, 1.0, spurious=True)], 8, 0.5).verdict == "no_signal"
    conf = cand(10, 0.5, configured=True)
    assert judge([conf, cand(11, 0.5)], 8, 0.5).verdict == "configured"


@pytest.mark.parametrize("images,alt_with,conf_det,conf_spurious,alt_det,expected", [
    (8, 4, 0, False, 20, "high"),    # C finds nothing, A finds objects on exactly half the images
    (8, 3, 0, False, 20, "low"),     # on fewer than half
    (8, 8, 1, False, 20, "low"),     # C finds something: detections alone
    (8, 8, 20, True, 8, "high"),     # C fires on the controls, A finds one per image
    (8, 7, 20, True, 7, None),       # fewer than one per image: not better at all
])
def test_confidence_rule(images: int, alt_with: int, conf_det: int, conf_spurious: bool, alt_det: int,
                         expected: Optional[str]) -> None:
    conf = cand(conf_det, 0.5 if conf_det else 0.0, spurious=conf_spurious, configured=True)
    alt = cand(alt_det, 0.9, images_with=alt_with)
    result = judge([conf, alt], images, 0.5)
    assert result.confidence == expected
    assert result.refuses() is (expected == "high")


@pytest.mark.parametrize("n,limit", [(0, 8), (3, 8), (8, 8), (9, 8), (100, 8), (17, 5), (2, 1)])
def test_pick_images_spreads_evenly_and_keeps_the_ends(n: int, limit: int) -> None:
    paths = [Path(f"{i:03}.jpg") for i in range(n)]
    picked = pick_images(paths, limit)
    assert len(picked) == min(n, limit) and picked == sorted(set(picked))
    if n > limit:
        expected = [paths[round(i * (n - 1) / (limit - 1))] for i in range(limit)] if limit > 1 else [paths[0]]
        assert picked == expected
    assert pick_images(paths, limit) == picked  # deterministic


def test_runs_count_the_images_and_at_most_two_controls() -> None:
    assert [runs(n) for n in (0, 1, 2, 3, 8)] == [0, 2, 4, 5, 10]


@pytest.mark.parametrize("color,mean,scale,label", [
    ("BGR", [0, 0, 0], [1, 1, 1], "0..255"),
    ("RGB", [0, 0, 0], [1 / 255] * 3, "0..1"),
    ("BGR", [127.5] * 3, [1 / 127.5] * 3, "-1..1"),
    ("RGB", [123.675, 116.28, 103.53], [1 / 58.395, 1 / 57.12, 1 / 57.375], "ImageNet mean/std"),
    ("BGR", [103.53, 116.28, 123.675], [1 / 57.375, 1 / 57.12, 1 / 58.395], "ImageNet mean/std"),
    ("BGR", [123.675, 116.28, 103.53], [1 / 58.395, 1 / 57.12, 1 / 57.375], "mean [123.675, 116.28, 103.53] "
                                                                            "scale [0.0171248, 0.0175070, 0.0174292]"),
])
def test_pixel_ranges_are_named_in_the_networks_channel_order(color, mean, scale, label) -> None:
    spec = replace(SPEC, color=color, mean=mean, scale=scale)
    if label.startswith("mean"):
        assert normalization_of(spec).startswith("mean [123.675, 116.28, 103.53] scale [")
    else:
        assert normalization_of(spec) == label
    cands = candidates(spec)
    assert cands[0].configured and cands[0].spec == spec and not any(c.configured for c in cands[1:])
    assert {(c.spec.color, c.normalization) for c in cands} >= {("BGR", "0..255"), ("RGB", "0..255"),
                                                                ("BGR", "0..1"), ("RGB", "0..1")}


def test_scores_per_image_and_per_control_image() -> None:
    """One control image: its detections are the rate per control image, not half of it."""
    from edge_sdk.builder.probe import _score

    c = Candidate(SPEC, "0..1")
    assert (c.detections, c.images_with_detections, c.mean_top_score, c.control_detections) == (0, 0, 0.0, 0.0)
    c.found = [detections([(0, 0, 8, 0.9, 0), (20, 0, 8, 0.6, 0)]), detections([])]
    _score(c, [detections([(0, 0, 8, 0.8, 0), (20, 0, 8, 0.7, 0), (40, 0, 8, 0.2, 0)])], 0.5, cap=0)
    assert (c.detections, c.images_with_detections, c.control_detections) == (2, 1, 2.0)
    assert c.mean_top_score == pytest.approx(0.45) and c.spurious  # 2 >= max(2, 1 / 4)


def test_the_report_rounds_scores_to_four_places() -> None:
    c = Candidate(SPEC, "0..1", mean_top_score=0.123456789, control_detections=1.23456)
    c.pairs = Pairs(3, 0.666666, 0.0123456)
    d = c.to_dict()
    assert d["mean_top_score"] == 0.1235 and d["control_detections_per_image"] == 1.23
    assert d["pairs_with_configured"] == {"count": 3, "higher_share": 0.6667, "median_gain": 0.0123}


def test_the_warning_gives_the_shared_objects_score_gain_and_nothing_without_pairs() -> None:
    """"higher scores on X% of the N objects both find (median ±g)" when both find objects."""
    conf = cand(10, 0.5, configured=True, color="BGR", norm="0..1")
    alt = cand(30, 0.8, color="RGB", norm="0..1")
    result = judge([conf, alt], 8, 0.5)
    assert result.better is alt
    alt.pairs = Pairs(8, 0.75, 0.125)  # judge() pairs what the two found: here, what they would have
    warning = result.warning()
    assert "higher scores on 75% of the 8 objects both find (median +0.12)" in warning
    alt.pairs = None
    assert "objects both find" not in result.warning()
