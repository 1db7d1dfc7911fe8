"""Simulated annotators (known truth) and quality control (Cao et al. 2024 appendix A.2)."""

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


def test_skipped_attention_check_fails_and_rule_is_configurable():
    df, items = survey_judgements()
    # 'skipper' rates the group consistently but never answers the attention item
    pairs = sorted({i for i in df["item_id"] if i != "att"})
    skipper = pd.DataFrame(
        [(item, "skipper", 10, rep, "EN", "women") for item in pairs for rep in (0, 1)],
        columns=df.columns,
    )
    df = pd.concat([df, skipper], ignore_index=True)
    cfg = QCConfig(self_agreement_rule="same_side", min_annotations_per_item=1)
    ann = run_qc(df, cfg, items=items).annotators.set_index("annotator_id")
    assert ann.loc["skipper", ["attention_unanswered", "attention_failures"]].tolist() == [1, 1]
    assert not ann.loc["skipper", "passed"] and "(1 unanswered)" in ann.loc["skipper", "reason"]
    assert ann.loc["good", ["attention_checks", "attention_unanswered", "attention_failures"]].tolist() == [1, 0, 0]
    lenient = run_qc(df, QCConfig(self_agreement_rule="same_side", min_annotations_per_item=1,
                                  unanswered_check_is_failure=False), items=items)
    lenient_ann = lenient.annotators.set_index("annotator_id")
    assert lenient_ann.loc["skipper", "passed"] and lenient_ann.loc["skipper", "attention_unanswered"] == 1
    assert QCConfig.from_config({"unanswered_check_is_failure": False}).unanswered_check_is_failure is False


def test_checks_table_assignments_count_unanswered_checks():
    df, items = survey_judgements()
    items = pd.concat([items, pd.DataFrame({"item_id": ["att2"], "gold": [-50]})], ignore_index=True)
    # 'good' was given both gold items (answered only 'att') and an external check it left empty;
    # 'flaky' passed an external check
    checks = pd.DataFrame({
        "annotator_id": ["good", "good", "good", "flaky"],
        "check_id": ["att", "att2", "instructions_quiz", "instructions_quiz"],
        "passed": [None, None, "", "yes"],
    })
    ann = run_qc(df, QCConfig(self_agreement_rule="same_side", max_attention_failures=1), items=items,
                 checks=checks).annotators.set_index("annotator_id")
    # good: att answered correctly, att2 and the quiz unanswered
    assert ann.loc["good", ["attention_checks", "attention_unanswered", "attention_failures"]].tolist() == [3, 2, 2]
    assert not ann.loc["good", "passed"] and "failed 2 attention check(s) (2 unanswered)" in ann.loc["good", "reason"]
    # flaky: att answered correctly (no assignment row needed), quiz passed
    assert ann.loc["flaky", ["attention_checks", "attention_unanswered", "attention_failures"]].tolist() == [2, 0, 0]
    with pytest.raises(DataError, match=r"passed='maybe'"):
        run_qc(df, QCConfig(), items=items, checks=checks.assign(passed="maybe"))


def test_annotators_without_repeat_are_reported_and_optionally_failed():
    rows = [(f"i{k}", "rep", "yes", 0, "EN") for k in range(3)] + [("i0", "rep", "yes", 1, "EN")]
    rows += [(f"i{k}", "norep", "no", 0, "EN") for k in range(3)] + [(f"i{k}", "ru", "no", 0, "RU") for k in range(3)]
    df = pd.DataFrame(rows, columns=["item_id", "annotator_id", "label", "repeat", "language"])
    report = run_qc(df, QCConfig(min_annotations_per_item=1))
    ann = report.annotators.set_index("annotator_id")
    assert ann["self_agreement_checked"].to_dict() == {"rep": True, "norep": False, "ru": False}
    assert ann["passed"].all()  # not failed by default
    per_lang = report.per_language.set_index("language")
    assert per_lang["n_without_repeat"].to_dict() == {"EN": 1, "RU": 1}
    strict = run_qc(df, QCConfig(min_annotations_per_item=1, require_repeat=True)).annotators.set_index("annotator_id")
    assert strict["passed"].to_dict() == {"rep": True, "norep": False, "ru": False}
    assert strict.loc["norep", "reason"] == "no repeated item: self-agreement unknown"


def test_coverage_keeps_items_and_groups_whose_annotators_all_failed():
    df, items = survey_judgements()
    lone = pd.DataFrame([("men|cold - warm", "inattentive", 3, 0, "RU", "men")], columns=df.columns)
    df = pd.concat([df, lone], ignore_index=True)
    # the items table lists only the attention item: coverage comes from the judgements too
    report = run_qc(df, QCConfig(self_agreement_rule="same_side"), items=items[items["item_id"] == "att"])
    assert set(report.annotators.loc[report.annotators["passed"], "annotator_id"]) == {"good"}
    assert "att" not in set(report.items["item_id"])
    counts = report.items.set_index("item_id")["n_annotations"]
    assert counts["men|cold - warm"] == 0 and counts["women|cold - warm"] == 1
    groups = report.groups.set_index(["language", "group"])["n_annotators"]
    assert groups[("RU", "men")] == 0 and groups[("RU", "women")] == 0 and groups[("EN", "women")] == 1


def test_a_gold_column_in_the_judgements_does_not_break_attention_checks():
    """Exports often carry the gold answer beside each judgement; the items table stays the authority."""
    df, items = survey_judgements()
    plain = run_qc(df, QCConfig(self_agreement_rule="same_side", min_annotations_per_item=1), items=items)
    with_gold = df.merge(items[["item_id", "gold"]], on="item_id", how="left")
    with_gold["gold"] = 999  # a stale or wrong copy must not be what the check compares against
    got = run_qc(with_gold, QCConfig(self_agreement_rule="same_side", min_annotations_per_item=1), items=items)
    pd.testing.assert_frame_equal(got.annotators, plain.annotators)
