"""Writing scores at six significant digits leaves the headlines computed from them unchanged.

The report stages read the scores the scoring stages wrote; with :func:`stereolens.io.write_csv`
rounding them, a pair whose two log-probabilities agree to six digits would become a tie and move
a bias score.  These tests recompute the CrowS-Pairs and AmchiBias summaries from the default run's
scores as they are and after a round trip through the writer: every number of the summaries
prints the same at the precision the report pages print (four significant digits, three decimals).  They need the default run's outputs in ``data/processed``
(``make run`` or ``dvc pull``) and are skipped without them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from stereolens.io import read_csv_checked, write_csv

REPO = Path(__file__).resolve().parents[1]


def _committed(path: str) -> pd.DataFrame:
    full = REPO / path
    if not full.exists():
        pytest.skip(f"{path} is a DVC output of the default run: make run or dvc pull first")
    return pd.read_csv(full)


def _round_trip(scores: pd.DataFrame, tmp_path: Path) -> pd.DataFrame:
    write_csv(tmp_path / "scores.csv", scores)
    return read_csv_checked(tmp_path / "scores.csv", [])


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


def test_crows_headlines_survive_the_fixed_precision_scores(tmp_path):
    from stereolens.studies.crows.analysis import bias_by_type, crows_summary, length_control

    def summary(scores):
        table, corrections = bias_by_type(scores)
        return crows_summary(table, corrections, length_control(scores), model="m", metric="causal",
                             dataset="crows_pairs", skipped=None)

    scores = _committed("data/processed/crows/scores.csv")
    rounded = _round_trip(scores, tmp_path)
    assert not scores[["score_stereo", "score_anti"]].equals(rounded[["score_stereo", "score_anti"]])
    _assert_same_headlines(summary(scores), summary(rounded))


def test_pairs_headlines_survive_the_fixed_precision_scores(tmp_path):
    from stereolens.studies.pairs.analysis import analyze_scores

    scores = _committed("data/processed/pairs/scores.csv")
    rounded = _round_trip(scores, tmp_path)
    for name, part in scores.groupby("set", sort=False):
        after = rounded[rounded["set"] == name]
        _assert_same_headlines(analyze_scores(part, n_resamples=200).summary,
                               analyze_scores(after, n_resamples=200).summary)
