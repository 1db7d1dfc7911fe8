"""Aggregation: majority vote, median Likert, pole-split means and the Cao et al. 2024 survey matrices."""

from __future__ import annotations

import pandas as pd

from stereolens.annotation.aggregate import majority_vote, median_likert, pole_split_mean


def long(rows):
    return pd.DataFrame(rows, columns=["item_id", "annotator_id", "label"])


def test_majority_vote_two_of_three_quorum():
    df = long([
        ("t1", "a", "yes"), ("t1", "b", "yes"), ("t1", "c", "no"),
        ("t2", "a", "no"), ("t2", "b", "yes"), ("t2", "c", "no"),
        ("t3", "a", "yes"), ("t3", "b", "no"),
    ])
    out = majority_vote(df, quorum=2).set_index("item_id")
    assert out.loc["t1", "label"] == "yes" and out.loc["t1", "votes"] == 2 and out.loc["t1", "decided"]
    assert out.loc["t2", "label"] == "no"
    assert not out.loc["t3", "decided"] and pd.isna(out.loc["t3", "label"])  # 1:1 tie
    strict = majority_vote(df, quorum=3).set_index("item_id")
    assert not strict["decided"].any()
    share = majority_vote(df, quorum=0.5).set_index("item_id")  # strictly more than half
    assert share.loc["t1", "decided"] and not share.loc["t3", "decided"]


def test_median_likert_discard_rule():
    df = long([("s1", a, v) for a, v in zip("abcde", [1, 2, 2, 5, 5])] +
              [("s2", a, v) for a, v in zip("abcde", [3, 3, 1, 1, 4])] +
              [("s3", a, v) for a, v in zip("abcd", [2, 3, 2, 3])])
    out = median_likert(df, discard_at_or_below=2).set_index("item_id")
    assert out.loc["s1", "median"] == 2 and not out.loc["s1", "keep"]
    assert out.loc["s2", "median"] == 3 and out.loc["s2", "keep"]
    assert out.loc["s3", "median"] == 2.5 and out.loc["s3", "keep"]


def test_pole_split_mean_known_answer():
    ratings = pd.DataFrame({
        "annotator_id": ["a", "b", "a", "b"],
        "group": ["g1", "g1", "g2", "g2"],
        "trait_pair": ["cold - warm"] * 4,
        "rating": [-20.0, 10.0, 0.0, 50.0],
    })
    m = pole_split_mean(ratings)
    assert list(m.index) == ["cold", "warm"]
    assert m.loc["cold", "g1"] == 10.0 and m.loc["warm", "g1"] == 5.0
    assert m.loc["cold", "g2"] == 0.0 and m.loc["warm", "g2"] == 25.0
