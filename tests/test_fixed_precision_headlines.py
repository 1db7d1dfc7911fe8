"""Writing scores at :data:`stereolens.io.SIGNIFICANT_DIGITS` (seven) significant digits leaves the
headlines computed from them unchanged.

The report stages read the scores the scoring stages wrote, and :func:`stereolens.io.write_csv` rounds
them: a pair whose two log-probabilities agree to seven digits would become a tie and move a bias score.
The scores on disk are the rounded ones, so each unrounded score lies within half a unit of the seventh
digit of its written value.  These tests recompute the CrowS-Pairs and AmchiBias summaries of every model
of the default run (params.yaml's ``model_ids``) from its scores as written and as the unrounded scores
could have been: every comparison a headline counts (stereotypical against anti-stereotypical sentence,
their per-token means, stereotypical against control) that the rounding could turn is turned both ways,
and every score is moved by its own rounding error (uniform within the half unit, seeded draws, as
float32 values rounded to seven digits are).  Every number of the summaries prints the same at the
precision the report pages print (four significant digits, three decimals).  An error moving every
score the same way at once is not one of them: it shifts a mean difference by a full unit of its last
digit, which no rounding of independent values does.  The tests need the default run's outputs,
``data/processed/<study>/<model_id>/scores.csv`` (``make run`` or ``dvc pull``), and are skipped
without them.
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
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log10(np.where(x > 0, x, 1.0)))
    return np.where(x > 0, 0.5 * 10.0 ** (exponent - (SIGNIFICANT_DIGITS - 1)), 0.0)


# the comparisons the headlines count: the sentence a pair prefers (bias score), the same per token, and
# the stereotypical sentence against its control (AmchiBias' language modelling score)
COMPARED = (("score_stereo", "score_anti"), ("score_stereo_mean", "score_anti_mean"),
            ("score_stereo", "score_control"))
SCORES = ("score_stereo", "score_anti", "score_stereo_mean", "score_anti_mean", "score_control")


def _turnable(scores: pd.DataFrame, a: str, b: str) -> np.ndarray:
    """Rows whose ``a`` against ``b`` the rounding could turn: written no further apart than their rounding."""
    gap = (scores[a] - scores[b]).abs().to_numpy(dtype=float)
    return gap <= _half_unit(scores[a]) + _half_unit(scores[b])


def _turned(scores: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``scores`` with every comparison the rounding could turn moved to either side of it (the first score
    up and the second down, then the other way round); every other score as written."""
    edges = {}
    for name, side in (("first up", 1.0), ("first down", -1.0)):
        moved = scores.copy()
        for a, b in COMPARED:
            if {a, b} <= set(scores.columns):
                close = _turnable(scores, a, b)
                moved.loc[close, a] = scores.loc[close, a] + side * _half_unit(scores[a])[close]
                moved.loc[close, b] = scores.loc[close, b] - side * _half_unit(scores[b])[close]
        edges[name] = moved
    return edges


def _unrounded(scores: pd.DataFrame, draws: int = 3, seed: int = 0) -> list[pd.DataFrame]:
    """``draws`` versions of ``scores`` as the unrounded values could have been: each score moved by its own
    error, uniform within half a unit of its last written digit (an empty score stays empty)."""
    rng = np.random.default_rng(seed)
    versions = []
    for _ in range(draws):
        moved = scores.copy()
        for column in SCORES:
            if column in scores.columns:
                moved[column] = scores[column] + rng.uniform(-1.0, 1.0, len(scores)) * _half_unit(scores[column])
        versions.append(moved)
    return versions


def _as_unrounded(scores: pd.DataFrame, tmp_path: Path) -> list[pd.DataFrame]:
    """Every version of ``scores`` the headlines must not tell apart from the written one."""
    return [*_turned(scores).values(), *_unrounded(scores), _round_trip(scores, tmp_path)]


def test_the_rounding_is_half_a_unit_of_the_last_kept_digit_and_turns_only_close_comparisons():
    scores = pd.DataFrame({"score_stereo": [-58.58968, -0.001234567, -10.0],
                           "score_anti": [-60.55151, -0.001234567, -10.000004]})
    assert list(_half_unit(scores["score_stereo"])) == pytest.approx([5e-6, 5e-10, 5e-6])
    edges = _turned(scores)
    # a tie, and a pair 4e-6 apart (less than the 1e-5 the rounding can hide), go both ways; the first as written
    for name, wins in (("first up", True), ("first down", False)):
        moved = edges[name]
        assert list(moved["score_stereo"] > moved["score_anti"]) == [True, wins, wins]
        assert (moved.loc[0] == scores.loc[0]).all()
    for version in _unrounded(scores):
        assert ((version - scores).abs().to_numpy() <= np.stack([_half_unit(scores[c]) for c in scores], 1)).all()


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


def test_a_pair_closer_than_the_rounding_is_caught(tmp_path):
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
        for version in _as_unrounded(scores, tmp_path):
            _assert_same_headlines(written, _crows_summary(version))


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_crows_headlines_survive_the_fixed_precision_scores(tmp_path, model_id):
    scores = _committed(f"data/processed/crows/{model_id}/scores.csv")
    written = _crows_summary(scores)
    for version in _as_unrounded(scores, tmp_path):
        _assert_same_headlines(written, _crows_summary(version))


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_pairs_headlines_survive_the_fixed_precision_scores(tmp_path, model_id):
    from stereolens.studies.pairs.analysis import analyze_scores

    scores = _committed(f"data/processed/pairs/{model_id}/scores.csv")
    versions = _as_unrounded(scores, tmp_path)
    for name, part in scores.groupby("set", sort=False):
        written = analyze_scores(part, n_resamples=200).summary
        for version in versions:
            _assert_same_headlines(written, analyze_scores(version[version["set"] == name], n_resamples=200).summary)
