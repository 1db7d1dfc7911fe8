"""Writing scores at :data:`stereolens.io.SIGNIFICANT_DIGITS` (seven) significant digits leaves the
headlines computed from them unchanged.

The report stages read the scores the scoring stages wrote, and :func:`stereolens.io.write_csv` rounds
them: a pair whose two log-probabilities agree to seven digits would become a tie and move a bias score.
The scores on disk are the rounded ones, so the unrounded scores lie within half a unit of the seventh
digit of them.  These tests recompute the CrowS-Pairs and AmchiBias summaries of every model of the
default run (params.yaml's ``model_ids``) from its scores as written and from those scores moved to the
edges of that rounding interval: each pair's two scores pushed towards each other (the closest the
unrounded values can be) and apart both ways (a stored tie split either way).  Every number of the
summaries prints the same at the precision the report pages print (four significant digits, three
decimals), so whatever the unrounded scores were, the headlines are these.  The tests need the default
run's outputs, ``data/processed/<study>/<model_id>/scores.csv`` (``make run`` or ``dvc pull``), and are
skipped without them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from stereolens.io import SIGNIFICANT_DIGITS, read_csv_checked, write_csv

REPO = Path(__file__).resolve().parents[1]
MODEL_IDS = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))["model_ids"]


def _committed(path: str) -> pd.DataFrame:
    full = REPO / path
    if not full.exists():
        pytest.skip(f"{path} is a DVC output of the default run: make run or dvc pull first")
    return pd.read_csv(full)


def _round_trip(scores: pd.DataFrame, tmp_path: Path) -> pd.DataFrame:
    write_csv(tmp_path / "scores.csv", scores)
    return read_csv_checked(tmp_path / "scores.csv", [])


def _half_unit(values: pd.Series) -> np.ndarray:
    """Half a unit of the last digit :func:`write_csv` keeps: how far an unrounded value can be from its
    written one."""
    x = np.abs(values.to_numpy(dtype=float))
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log10(np.where(x > 0, x, 1.0)))
    return np.where(x > 0, 0.5 * 10.0 ** (exponent - (SIGNIFICANT_DIGITS - 1)), 0.0)


# each score a pair compares, with the one it is compared with
PAIRED = (("score_stereo", "score_anti"), ("score_stereo_mean", "score_anti_mean"))


def _rounding_edges(scores: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``scores`` moved to the edges of their rounding interval: each pair's scores towards each other, and
    apart, the first up and the second down or the other way round."""
    edges = {}
    for name, move in (("towards", None), ("first up", 1.0), ("first down", -1.0)):
        moved = scores.copy()
        for a, b in PAIRED:
            if {a, b} <= set(scores.columns):
                ha, hb = _half_unit(scores[a]), _half_unit(scores[b])
                side = np.sign(scores[b] - scores[a]).to_numpy() if move is None else move
                moved[a] = scores[a] + side * ha
                moved[b] = scores[b] - side * hb
        edges[name] = moved
    return edges


def test_the_rounding_edges_are_half_a_unit_of_the_last_kept_digit():
    scores = pd.DataFrame({"score_stereo": [-58.58968, -0.001234567], "score_anti": [-60.55151, -0.001234567]})
    edges = _rounding_edges(scores)
    assert list(_half_unit(scores["score_stereo"])) == pytest.approx([5e-6, 5e-10])
    # towards: the stereo score down to the anti one, the anti one up; a tie stays a tie
    assert list(edges["towards"]["score_stereo"]) == pytest.approx([-58.589685, -0.001234567], rel=1e-12)
    assert list(edges["towards"]["score_anti"]) == pytest.approx([-60.551505, -0.001234567], rel=1e-12)
    # apart: the tie split, both ways
    assert edges["first up"]["score_stereo"][1] > edges["first up"]["score_anti"][1]
    assert edges["first down"]["score_stereo"][1] < edges["first down"]["score_anti"][1]


def _numbers(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{prefix}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{prefix}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield prefix, float(obj)


def _printed(key: str, x: float) -> tuple[str, ...]:
    # the report pages print at most four significant digits (``:.4g``) or three decimals (``:.3f``).
    # A mean or median log-probability difference (``*_diff``) is a difference of two float32 sums of
    # about -40 whose fourth significant digit is float32 noise already: three decimals for those
    if "_diff" in key:
        return (f"{x:.3f}",)
    return f"{x:.4g}", f"{x:.3f}"


def _assert_same_headlines(before: dict, after: dict) -> None:
    a, b = dict(_numbers(before)), dict(_numbers(after))
    assert a.keys() == b.keys()
    for key, x in a.items():
        y = b[key]
        if math.isnan(x):
            assert math.isnan(y), key
        else:
            assert _printed(key, x) == _printed(key, y), (key, x, y)


def _crows_summary(scores: pd.DataFrame) -> dict:
    from stereolens.studies.crows.analysis import bias_by_type, crows_summary, length_control

    table, corrections = bias_by_type(scores)
    return crows_summary(table, corrections, length_control(scores), model="m", metric="causal",
                         dataset="crows_pairs", skipped=None)


def test_a_pair_closer_than_the_rounding_is_caught():
    """The check can fail: ten pairs, one of whose scores differ by less than the rounding can hide, so its
    decision (and the bias score, 60% as written) depends on digits the file does not hold."""
    rng = np.random.default_rng(0)
    stereo = np.round(-60 + rng.normal(size=10), 4)
    anti = stereo + np.where(np.arange(10) < 6, -1.0, 1.0)
    anti[0] = stereo[0] - 3e-6  # written apart, but within half a unit of the seventh digit of each other
    scores = pd.DataFrame({"id": [f"p{i}" for i in range(10)], "bias_type": ["gender"] * 10,
                           "direction": ["stereo"] * 10, "score_stereo": stereo, "score_anti": anti,
                           "n_tokens_stereo": 12, "n_tokens_anti": 12})
    written = _crows_summary(scores)
    assert written["bias_score"] == 0.6
    with pytest.raises(AssertionError):
        _assert_same_headlines(written, _crows_summary(_rounding_edges(scores)["towards"]))


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_crows_headlines_survive_the_fixed_precision_scores(tmp_path, model_id):
    summary = _crows_summary
    scores = _committed(f"data/processed/crows/{model_id}/scores.csv")
    written = summary(scores)
    for edge in _rounding_edges(scores).values():
        _assert_same_headlines(written, summary(edge))
    # what the report stage reads is what the scoring stage wrote
    _assert_same_headlines(written, summary(_round_trip(scores, tmp_path)))


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_pairs_headlines_survive_the_fixed_precision_scores(tmp_path, model_id):
    from stereolens.studies.pairs.analysis import analyze_scores

    scores = _committed(f"data/processed/pairs/{model_id}/scores.csv")
    variants = [*_rounding_edges(scores).values(), _round_trip(scores, tmp_path)]
    for name, part in scores.groupby("set", sort=False):
        written = analyze_scores(part, n_resamples=200).summary
        for variant in variants:
            _assert_same_headlines(written, analyze_scores(variant[variant["set"] == name], n_resamples=200).summary)
