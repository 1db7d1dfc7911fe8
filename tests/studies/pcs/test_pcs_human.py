"""Human validation of the pcs judges through the annotation layer (Fifteen Percent Fluency appendix J)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from stereolens.studies.pcs import human_validation as ph
from stereolens.errors import ConfigError, DataError
from stereolens.studies.pcs.human_validation import human_validation_round

ANNOTATION = {
    "source": "simulated", "scale": "likert5", "quorum": 3,
    "simulator": {"n_annotators": 5, "reliability": 1.0, "bias": 0.0, "per_item": None, "seed": 0},
    "qc": {"min_annotations_per_item": 5, "min_annotations_per_group": 5},
    "thresholds": {"min_fleiss_kappa": 0.4, "min_krippendorff_alpha": 0.4, "min_annotations_per_item": 5,
                   "max_failing_annotator_share": 0.6, "max_top_label_share": 0.95},
    "bootstrap": {"n_boot": 50, "confidence": 0.95, "ci_method": "percentile"},
}
# condition -> judged score per scenario; C above A in s1, below A in s2, C == B in s3
SCORES = {"s1": {"A": 3.0, "B": 6.0, "C": 5.0}, "s2": {"A": 5.0, "B": 6.0, "C": 4.0}, "s3": {"A": 2.0, "B": 4.0, "C": 4.0}}
DIMS = {"s1": "PDI", "s2": "IDV", "s3": "UAI"}


def _data(languages=("hi", "ur")):
    responses, scores = [], []
    for lang in languages:
        for sid, by_cond in SCORES.items():
            for cond, value in by_cond.items():
                rid = f"m|{lang}|{sid}|{cond}|0"
                responses.append({"response_id": rid, "model": "m", "language": lang, "scenario_id": sid,
                                  "dimension": DIMS[sid], "condition": cond, "sample": 0,
                                  "prompt": f"{sid} prompt {cond}", "response": f"{sid} reply {cond}",
                                  "invalid_reason": ""})
                # two judges, two features: the means are the values above (all on the 1-7 scale)
                for judge, off in (("j1", -0.25), ("j2", 0.25)):
                    for feat, foff in (("f1", -0.5), ("f2", 0.5)):
                        scores.append({"response_id": rid, "judge": judge, "feature": feat, "score": value + off + foff})
    return pd.DataFrame(responses), pd.DataFrame(scores)


def test_items_are_blinded_and_carry_the_judged_truth():
    responses, scores = _data()
    items = ph.preference_items(responses, scores, seed=0)
    assert len(items) == 2 * 3 * 2  # languages x scenarios x (A-C, B-C)
    assert items["item_id"].str.match(r"^pv-[0-9a-f]{12}$").all() and items["item_id"].is_unique
    for r in items.itertuples():
        winner = ("tie" if r.first_score == r.second_score else
                  "1" if r.first_score > r.second_score else "2")
        assert r.truth == winner
        assert {r.first_condition, r.second_condition} == set(r.comparison.split("-"))
        assert r.response_1 == f"{r.scenario_id} reply {r.first_condition}"
    # the shown order is randomised (seeded): both orders occur, and a rebuild is identical
    assert set(items["first_condition"]) == {"A", "B", "C"}
    pd.testing.assert_frame_equal(items, ph.preference_items(responses, scores, seed=0))
    s3 = items.loc[(items["scenario_id"] == "s3") & (items["comparison"] == "B-C")]
    assert (s3["truth"] == "tie").all()


def test_wrong_language_reply_is_excluded_from_the_items_and_counted_in_table_17(tmp_path):
    """Issue 31 item 8: an English reply to a Hindi prompt is no Hindi A-vs-C item (judged or not), and the
    pairs it would have formed are counted in the validation table and the binomial tests."""
    from stereolens.studies.pcs.analysis import human_validation

    responses, scores = _data()
    # s1's Hindi Prompt A was answered in English (and judged: the default judges wrong-language replies);
    # s2's Urdu Prompt C is empty (never judged)
    wrong, empty = "m|hi|s1|A|0", "m|ur|s2|C|0"
    responses.loc[responses["response_id"] == wrong, "invalid_reason"] = "wrong_language"
    responses.loc[responses["response_id"] == empty, "invalid_reason"] = "empty"
    scores = scores.loc[scores["response_id"] != empty]
    items = ph.preference_items(responses, scores, seed=0)
    shown = set(items["first_response_id"]) | set(items["second_response_id"])
    assert wrong not in shown and empty not in shown
    kept = items.groupby(["language", "comparison"])["scenario_id"].agg(lambda s: sorted(s)).to_dict()
    assert kept == {("hi", "A-C"): ["s2", "s3"], ("hi", "B-C"): ["s1", "s2", "s3"],
                    ("ur", "A-C"): ["s1", "s3"], ("ur", "B-C"): ["s1", "s3"]}

    excluded = ph.excluded_pairs(responses, scores)
    got = {(r.language, r.comparison, r.scenario_id, r.invalid_reason, r.response_ids) for r in excluded.itertuples()}
    assert got == {("hi", "A-C", "s1", "wrong_language", wrong), ("ur", "A-C", "s2", "empty", empty),
                   ("ur", "B-C", "s2", "empty", empty)}

    # through the round to Table 17 and its binomial tests
    items, _, _, prefs, excluded = human_validation_round(
        responses, scores, ANNOTATION, {}, seed=0, interim=tmp_path / "interim", reports=tmp_path / "reports",
        report_dir=tmp_path / "quality")
    assert len(items) == len(prefs) == 9 and len(excluded) == 3
    on_disk = pd.read_csv(tmp_path / "interim" / "excluded_pairs.csv", keep_default_na=False)
    assert len(on_disk) == 3 and set(on_disk["invalid_reason"]) == {"wrong_language", "empty"}
    table, tests = human_validation(prefs, excluded=on_disk)
    rows = table.set_index("language")
    assert (rows.loc["hi", "A_C_excluded_invalid"], rows.loc["hi", "B_C_excluded_invalid"]) == (1, 0)
    assert (rows.loc["ur", "A_C_excluded_invalid"], rows.loc["ur", "B_C_excluded_invalid"]) == (1, 1)
    assert (rows.loc["total", "A_C_excluded_invalid"], rows.loc["total", "B_C_excluded_invalid"]) == (2, 1)
    assert rows.loc["hi", "n"] == 5 and rows.loc["ur", "n"] == 4  # the items annotators judged
    assert tests["A-C"]["n_excluded_invalid"] == 2 and tests["B-C"]["n_excluded_invalid"] == 1
    # perfectly reliable annotators: A-C over the kept pairs is hi s2 (A), s3 (C); ur s1 (C), s3 (C)
    assert (tests["A-C"]["n_A"], tests["A-C"]["n_C"], tests["A-C"]["n_decisive"]) == (1, 3, 4)


def test_stratified_cap_takes_every_dimension():
    responses, scores = _data()
    items = ph.preference_items(responses, scores, items_per_comparison=2, seed=1)
    counts = items.groupby(["language", "comparison"]).size()
    assert (counts == 2).all()
    assert (items.groupby(["language", "comparison"])["dimension"].nunique() == 2).all()


def test_simulated_round_recovers_the_truth_and_feeds_the_analysis(tmp_path):
    from stereolens.studies.pcs.analysis import human_validation

    responses, scores = _data()
    items, judgements, review, prefs, _ = human_validation_round(
        responses, scores, ANNOTATION, {}, seed=0, interim=tmp_path / "interim", reports=tmp_path / "reports",
        report_dir=tmp_path / "quality")
    assert (judgements["source"] == "simulated").all() and (prefs["source"] == "simulated").all()
    # one pool of annotators per language
    assert judgements.groupby("annotator_id")["language"].nunique().max() == 1
    assert judgements["annotator_id"].str[:3].isin(["hi-", "ur-"]).all()
    # perfectly reliable annotators: the majority is the judges' own ordering, mapped back to conditions
    assert prefs["decided"].all()
    expected = {("s1", "A-C"): "C", ("s2", "A-C"): "A", ("s3", "A-C"): "C",
                ("s1", "B-C"): "B", ("s2", "B-C"): "B", ("s3", "B-C"): "tie"}
    got = {(r.scenario_id, r.comparison): r.preference for r in prefs.loc[prefs["language"] == "hi"].itertuples()}
    assert got == expected
    assert review.agreement["krippendorff_alpha"].value == pytest.approx(1.0)
    table, tests = human_validation(prefs)
    assert tests["A-C"]["n_decisive"] == 6 and tests["A-C"]["n_C"] == 4 and tests["B-C"]["n_tie"] == 2
    # the annotators' files carry no condition, only the shown positions
    tasks = pd.read_csv(tmp_path / "reports" / "tasks" / "pairwise_tasks.csv")
    assert not {"first_condition", "second_condition", "comparison", "truth"} & set(tasks.columns)
    ls = json.loads((tmp_path / "reports" / "tasks" / "pairwise_tasks.label_studio.json").read_text())
    assert len(ls) == len(items) and "response_1" in ls[0]["data"]
    assert (tmp_path / "quality" / "pcs__annotation_quality.json").exists()


def test_human_source_imports_a_completed_csv(tmp_path):
    responses, scores = _data(("hi",))
    cfg = {**ANNOTATION, "source": "human"}
    with pytest.raises(ConfigError, match="not a completed judgements CSV.*tasks to annotate are in"):
        human_validation_round(responses, scores, cfg, {"judgements": str(tmp_path / "none.csv")}, seed=0,
                               interim=tmp_path / "i", reports=tmp_path / "r", report_dir=tmp_path / "q")
    # the exported tasks are what a team fills in
    tasks = pd.read_csv(tmp_path / "r" / "tasks" / "pairwise_tasks.csv")
    key = pd.read_csv(tmp_path / "i" / "items.csv").set_index("item_id")
    rows = []
    for item in tasks["item_id"]:
        for a in range(5):
            rows.append({"item_id": item, "annotator_id": f"ann{a}", "label": key.loc[item, "truth"]})
    path = tmp_path / "done.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    _, judgements, _, prefs, _ = human_validation_round(responses, scores, cfg, {"judgements": str(path)}, seed=0,
                                                     interim=tmp_path / "i", reports=tmp_path / "r",
                                                     report_dir=tmp_path / "q")
    assert (judgements["source"] == "human").all() and (prefs["source"] == "human").all() and prefs["decided"].all()

    bad = pd.DataFrame(rows)
    bad.loc[7, "label"] = "C"  # annotators answer with positions, never conditions
    bad.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"line 9, column label .*label 'C' is not one of"):
        human_validation_round(responses, scores, cfg, {"judgements": str(path)}, seed=0,
                               interim=tmp_path / "i", reports=tmp_path / "r", report_dir=tmp_path / "q")


def test_llm_panel_and_unknown_keys_are_config_errors(tmp_path):
    responses, scores = _data(("hi",))
    with pytest.raises(ConfigError, match="not supported for pcs pairwise preferences yet"):
        human_validation_round(responses, scores, {**ANNOTATION, "source": "llm_panel"}, {}, seed=0,
                               interim=tmp_path, reports=tmp_path)
    with pytest.raises(ConfigError, match="unknown key"):
        human_validation_round(responses, scores, ANNOTATION, {"items": 3}, seed=0, interim=tmp_path, reports=tmp_path)


def test_undecided_majority_is_not_a_preference():
    items = pd.DataFrame([{"item_id": "pv-1", "language": "hi", "comparison": "A-C", "model": "m", "scenario_id": "s",
                           "dimension": "PDI", "first_condition": "C", "second_condition": "A"}])
    agg = pd.DataFrame([{"item_id": "pv-1", "label": float("nan"), "votes": 2, "n": 4, "decided": False}])
    prefs = ph.to_preferences(agg, items, source="human")
    assert prefs.loc[0, "preference"] == "" and not prefs.loc[0, "decided"]
    agg = pd.DataFrame([{"item_id": "pv-1", "label": "1", "votes": 3, "n": 4, "decided": True}])
    assert ph.to_preferences(agg, items, source="human").loc[0, "preference"] == "C"


def test_stage_tags_mlflow_runs_with_the_preference_source(tmp_path, monkeypatch):
    """pcs-human-validation and pcs-analyze runs carry annotation_source = simulated."""
    import mlflow
    import yaml

    from stereolens.cli import main
    from stereolens.io import write_csv, write_json

    monkeypatch.chdir(tmp_path)
    responses, scores = _data()
    meta = responses.set_index("response_id")[["model", "language", "scenario_id", "dimension", "condition", "sample"]]
    scores = scores.join(meta, on="response_id")
    # one English reply to a Hindi prompt A: the stages leave its pair out of the round and count it
    responses.loc[responses["response_id"] == "m|hi|s1|A|0", "invalid_reason"] = "wrong_language"
    write_csv(tmp_path / "data/interim/pcs/m/responses.csv", responses.assign(domain="workplace", translation_status="authored"))
    write_csv(tmp_path / "data/interim/pcs/m/scores.csv", scores)
    write_json(tmp_path / "reports/pcs/m/gates.json", {"enforced": False, "all_passed": True, "gates": {}})
    tracking = {"enabled": True, "tracking_uri": "sqlite:///mlruns/mlflow.db", "artifact_location": "mlruns/artifacts",
                "experiment": "t"}
    params = {"model": {"id": "m", "name": "m"}, "language": {"include": None}, "tracking": tracking, "seed": 0,
              "annotation": ANNOTATION,
              "study": {"pcs": {"name": "t", "languages": ["hi", "ur"], "collection": {"samples": 1},
                                "judges": {"panel": [{"id": "j", "model": None}]}, "human_validation": {}, "analysis": {}}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    assert main(["stage", "pcs-human-validation"]) == 0
    assert main(["stage", "pcs-analyze"]) == 0
    mlflow.set_tracking_uri("sqlite:///mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["t"])
    tags = dict(zip(runs["tags.stage"], runs["tags.annotation_source"]))
    assert tags == {"human_validation": "simulated", "analyze": "simulated"}
    assert set(runs["tags.judge_source"].dropna()) == {"llm_panel"}
    assert "SIMULATED" in (tmp_path / "reports/pcs/m/report.md").read_text()
    hv = json.loads((tmp_path / "reports/pcs/m/human_validation/summary.json").read_text())
    assert hv["n_items"] == 11 and hv["n_pairs_excluded_invalid"] == 1
    assert hv["binomial_tests"]["A-C"]["n_excluded_invalid"] == 1
    table17 = pd.read_csv(tmp_path / "reports/pcs/m/tables/table17_human_validation.csv").set_index("language")
    assert table17.loc["hi", "A_C_excluded_invalid"] == 1 and table17.loc["total", "A_C_excluded_invalid"] == 1
    assert table17.loc["total", "n"] == 11
