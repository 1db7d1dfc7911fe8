"""Known answers for the CrowS report's numbers: per-type tests with Holm / BH over the bias
types, and the length-controlled view with a planted length effect."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from stereolens.studies.crows.analysis import bias_by_type, length_control, length_table


def planted_length_effect() -> pd.DataFrame:
    """100 pairs.  Per token, the stereotypical sentence is better in exactly half of every group;
    summed, the shorter sentence always wins.  Stereotypical shorter: 40, longer: 20, equal: 40."""
    rows = []
    for i in range(100):
        n_stereo, n_anti = (5, 8) if i < 40 else (8, 5) if i < 60 else (6, 6)
        m_stereo, m_anti = (-2.0, -2.1) if i % 2 == 0 else (-2.1, -2.0)  # per-token means
        rows.append({"id": i, "bias_type": "gender" if i % 4 < 2 else "age",
                     "score_stereo": n_stereo * m_stereo, "score_anti": n_anti * m_anti,
                     "n_tokens_stereo": n_stereo, "n_tokens_anti": n_anti})
    return pd.DataFrame(rows)


def test_length_controlled_view_removes_a_planted_length_effect():
    scores = planted_length_effect()
    table, _ = bias_by_type(scores)
    reference = table.iloc[0].to_dict()
    # reference: 40 shorter (all win) + 20 longer (none) + 40 equal (half) = 60 of 100
    assert reference["bias_score"] == pytest.approx(0.6)
    view = length_control(scores)
    assert view["share_different_token_count"] == pytest.approx(0.6)
    assert view["stereotypical_shorter"] == {"n": 40, "stereotypical_wins": 1.0}
    assert view["stereotypical_longer"] == {"n": 20, "stereotypical_wins": 0.0}
    assert view["per_token"]["bias_score"] == pytest.approx(0.5) and view["per_token"]["n"] == 100
    assert view["equal_length_subset"]["bias_score"] == pytest.approx(0.5)
    assert view["equal_length_subset"]["n"] == 40
    assert not view["per_token"]["significant"]
    both = length_table(view, reference)
    assert both["bias_score"].tolist() == pytest.approx([0.6, 0.5, 0.5])


def test_length_view_says_when_token_counts_are_missing():
    scores = planted_length_effect().drop(columns=["n_tokens_stereo", "n_tokens_anti"])
    assert length_control(scores) == {"available": False,
                                      "note": "the scores carry no n_tokens_stereo / n_tokens_anti"}


def test_holm_and_bh_over_the_bias_types():
    rng = np.random.default_rng(0)
    types = ["gender"] * 30 + ["age"] * 30 + ["race"] * 30
    stereo = np.r_[np.ones(30), rng.normal(size=30), rng.normal(size=30) + 0.8]
    scores = pd.DataFrame({"id": range(90), "bias_type": types, "score_stereo": stereo, "score_anti": np.zeros(90)})
    table, legend = bias_by_type(scores)
    per_type = table[table["group"] != "all"].set_index("group")
    p = per_type["p_value"].to_numpy(dtype=float)
    assert per_type["p_holm"].astype(float).to_numpy() == pytest.approx(multipletests(p, method="holm")[1])
    assert per_type["p_bh"].astype(float).to_numpy() == pytest.approx(multipletests(p, method="fdr_bh")[1])
    assert table.loc[table["group"] == "all", "p_holm"].isna().all()  # the overall row is outside the family
    assert "3 tests" in legend and "Benjamini-Hochberg" in legend and "borderline" in legend
    assert per_type.loc["gender", "significant"] and per_type.loc["gender", "significant_holm"]
