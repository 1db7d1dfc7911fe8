"""StereoSet ss / lms / icat: hand-computed known answers (macro average over target terms)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.stats.stereoset import icat, stereoset_intervals, stereoset_scores, stereoset_table


def _items():
    # target A: one stereotypical win, one tie (counts as anti); target B: one anti win
    return pd.DataFrame({
        "target": ["A", "A", "B"],
        "country": ["ES", "ES", "MX"],
        "score_stereo": [3.0, 1.0, 0.0],
        "score_anti": [1.0, 1.0, 1.0],
        "score_unrelated": [0.0, 2.0, 5.0],
    })


def test_known_answer_is_a_macro_average_over_targets():
    d = _items()
    got = stereoset_scores(d.target, d.score_stereo, d.score_anti, d.score_unrelated)
    # ss_A = 50, ss_B = 0 -> 25 (a micro average would give 33.3); lms_A = 50, lms_B = 0 -> 25
    assert got["ss"] == pytest.approx(25.0) and got["lms"] == pytest.approx(25.0)
    assert got["icat"] == pytest.approx(25.0 * 25.0 / 50.0)
    assert got["n"] == 3 and got["n_targets"] == 2


def test_icat_is_lms_for_an_unbiased_model_and_zero_for_a_fully_biased_one():
    assert icat(50.0, 80.0) == pytest.approx(80.0)
    assert icat(100.0, 80.0) == 0.0 and icat(0.0, 80.0) == 0.0


def test_intervals_hold_the_point_estimate_and_table_groups():
    rng = np.random.default_rng(0)
    n = 60
    d = pd.DataFrame({"target": rng.choice(["a", "b", "c"], n), "country": rng.choice(["ES", "MX"], n),
                      "score_stereo": rng.normal(0.3, 1, n), "score_anti": rng.normal(0, 1, n),
                      "score_unrelated": rng.normal(-1, 1, n)})
    point = stereoset_scores(d.target, d.score_stereo, d.score_anti, d.score_unrelated)
    ci = stereoset_intervals(d.target, d.score_stereo, d.score_anti, d.score_unrelated, n_resamples=300)
    for name in ("ss", "lms", "icat"):
        assert ci[name][0] <= point[name] <= ci[name][1]
    table = stereoset_table(d, by=["country"], n_resamples=100)
    assert list(table["country"]) == ["all", "ES", "MX"]
    es = d[d.country == "ES"]
    assert table.loc[1, "ss"] == pytest.approx(stereoset_scores(es.target, es.score_stereo, es.score_anti,
                                                                 es.score_unrelated)["ss"])


def test_bad_input_is_refused():
    with pytest.raises(DataError, match="at least one item"):
        stereoset_scores([], [], [], [])
    with pytest.raises(DataError, match="NaN"):
        stereoset_scores(["a"], [float("nan")], [0.0], [0.0])
    with pytest.raises(DataError, match="lacks columns"):
        stereoset_table(pd.DataFrame({"target": ["a"]}))
