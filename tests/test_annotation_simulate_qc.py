"""Simulated annotators (known truth) and quality control (seed 001 appendix A.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stereolens.annotation.agreement import krippendorff_alpha
from stereolens.annotation.qc import QCConfig, run_qc, self_agreement
from stereolens.annotation.scales import LIKERT5, SLIDER_50, YES_NO
from stereolens.annotation.simulate import simulate_annotations
from stereolens.errors import ConfigError, DataError


def test_perfect_annotators_reproduce_truth():
    items = pd.DataFrame({"item_id": [f"i{k}" for k in range(20)], "truth": [1, 2, 3, 4, 5] * 4})
    df = simulate_annotations(items, 4, LIKERT5, reliability=1.0, bias=0.0, seed=0)
    assert (df["label"] == df["truth"]).all()
    assert (df["source"] == "simulated").all() and df["annotator_id"].nunique() == 4


def test_simulation_is_seeded_and_reliability_orders_agreement():
    ids = [f"i{k}" for k in range(200)]
    a = simulate_annotations(ids, 5, LIKERT5, reliability=0.7, bias=0.0, seed=3)
    b = simulate_annotations(ids, 5, LIKERT5, reliability=0.7, bias=0.0, seed=3)
    pd.testing.assert_frame_equal(a, b)
    alphas = [
        krippendorff_alpha(simulate_annotations(ids, 5, LIKERT5, reliability=r, seed=1), "ordinal", n_boot=0).value
        for r in (0.3, 0.7, 0.95)
    ]
    assert alphas[0] < alphas[1] < alphas[2]


def test_bias_shifts_labels_and_per_item_coverage():
    ids = [f"i{k}" for k in range(300)]
    biased = simulate_annotations(ids, 2, SLIDER_50, reliability=[0.9, 0.9], bias=[0.0, 10.0], seed=2)
    wide = biased.pivot(index="item_id", columns="annotator_id", values="label")
    assert (wide["sim1"] - wide["sim0"]).mean() == pytest.approx(10.0, abs=1.5)
    yes_sayer = simulate_annotations(ids, 1, YES_NO, reliability=0.0, bias=1.0, seed=2)
    assert (yes_sayer["label"] == "yes").all()
    sparse = simulate_annotations(ids, 10, YES_NO, per_item=3, seed=4)
    assert sparse.groupby("item_id").size().eq(3).all()
    with pytest.raises(DataError):
        simulate_annotations(ids, 3, YES_NO, reliability=[0.5, 0.5])


def survey_judgements() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three annotators rate 4 trait pairs of a group, then the same group again (repeat = 1);
    attention item 'att' has a gold answer."""
    pairs = ["cold - warm", "poor - wealthy", "powerless - powerful", "dishonest - sincere"]
    rows = []
    first = {"good": [20, -10, 5, 30], "flaky": [20, -10, 5, 30], "inattentive": [1, 1, 1, 1]}
    again = {"good": [25, -5, 10, 35], "flaky": [-20, 10, 5, 30], "inattentive": [2, 3, 1, 1]}
    for ann, lang in (("good", "EN"), ("flaky", "EN"), ("inattentive", "RU")):
        for pair, r1, r2 in zip(pairs, first[ann], again[ann]):
            rows.append((f"women|{pair}", ann, r1, 0, lang, "women"))
            rows.append((f"women|{pair}", ann, r2, 1, lang, "women"))
        rows.append(("att", ann, 0 if ann != "inattentive" else 40, 0, lang, None))
    df = pd.DataFrame(rows, columns=["item_id", "annotator_id", "label", "repeat", "language", "group"])
    items = pd.DataFrame({"item_id": ["att"] + [f"women|{p}" for p in pairs], "gold": [0] + [None] * 4})
    return df, items


def test_self_agreement_same_side_rule():
    df, _ = survey_judgements()
    sa = self_agreement(df, QCConfig(self_agreement_rule="same_side")).set_index("annotator_id")
    assert sa.loc["good", "self_agreement"] == 1.0
    assert sa.loc["flaky", "self_agreement"] == 0.5  # two of four pairs flipped side
    within = self_agreement(df, QCConfig(self_agreement_rule="within", tolerance=5)).set_index("annotator_id")
    assert within.loc["good", "self_agreement"] == 1.0 and within.loc["flaky", "self_agreement"] == 0.5


def test_run_qc_excludes_failures_and_reports_per_language():
    df, items = survey_judgements()
    report = run_qc(df, QCConfig(self_agreement_rule="same_side", min_annotations_per_item=1,
                                 min_annotations_per_group=2), items=items)
    ann = report.annotators.set_index("annotator_id")
    assert ann.loc["good", "passed"]
    assert not ann.loc["flaky", "passed"] and "self-agreement 0.50 < 0.8" in ann.loc["flaky", "reason"]
    assert not ann.loc["inattentive", "passed"] and "attention" in ann.loc["inattentive", "reason"]
    assert report.failing_share == pytest.approx(2 / 3)
    per_lang = report.per_language.set_index("language")
    assert per_lang.loc["EN", ["n_annotators", "n_passed"]].tolist() == [2, 1]
    assert per_lang.loc["RU", "pass_rate"] == 0.0
    # kept: the passing annotator's first answers, without the attention item
    assert set(report.kept["annotator_id"]) == {"good"} and (report.kept["repeat"] == 0).all()
    assert "att" not in set(report.kept["item_id"]) and len(report.kept) == 4
    assert report.items["n_annotations"].eq(1).all() and report.items["meets_min"].all()
    assert not report.groups["meets_min"].any()  # one annotator for 'women' < 2


def test_eighty_percent_boundary_and_config_keys():
    rows = [(f"i{k}", "a", "yes", 0) for k in range(5)] + [(f"i{k}", "a", "yes" if k < 4 else "no", 1) for k in range(5)]
    df = pd.DataFrame(rows, columns=["item_id", "annotator_id", "label", "repeat"])
    assert run_qc(df, QCConfig(self_agreement_min=0.8)).annotators["passed"].item()  # 4/5 = 0.8 passes
    assert not run_qc(df, QCConfig(self_agreement_min=0.81)).annotators["passed"].item()
    with pytest.raises(ConfigError):
        QCConfig.from_config({"self_agreement": 0.8})
