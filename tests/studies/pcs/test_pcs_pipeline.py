"""The pcs stages end to end on a tiny model, and `stereolens pcs analyze` (Fifteen Percent Fluency)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from stereolens.cli import main
from stereolens.report.markdown import format_cell

RUBRICS = {
    "dimensions": {
        "PDI": {"features": [
            {"id": "directness", "name": "Directness", "anchors": {1: "Blunt", 4: "Balanced", 7: "Highly indirect"}},
            {"id": "deference", "name": "Deference", "anchors": {1: "Equal", 4: "Neutral", 7: "Explicit respect"}},
        ]},
        "IDV": {"features": [
            {"id": "agency_attribution", "name": "Agency attribution", "anchors": {1: "Individual", 4: "Balanced", 7: "Collective"}},
        ]},
    }
}
TEXT = {"hi": "आपके प्रबंधक ने एक योजना प्रस्तावित की है।", "ur": "آپ کے مینیجر نے ایک منصوبہ پیش کیا ہے۔"}


def _write_bank(root):
    bank = root / "data" / "seed" / "pcs"
    bank.mkdir(parents=True)
    rows = []
    for sid, dim in (("PDI-workplace-01", "PDI"), ("IDV-family-01", "IDV")):
        for lang, text in TEXT.items():
            rows.append({"scenario_id": sid, "dimension": dim, "domain": sid.split("-")[1], "language": lang,
                         "prompt_a": text, "prompt_b": text + " (B)", "prompt_c": text + " (C)",
                         "translation_status": "authored", "notes": ""})
    pd.DataFrame(rows).to_csv(bank / "scenarios.csv", index=False)
    (bank / "rubrics.yaml").write_text(yaml.safe_dump(RUBRICS), encoding="utf-8")
    (bank / "indexical_markers.yaml").write_text(yaml.safe_dump({"hi": ["भारत"], "ur": ["پاکستان"]}, allow_unicode=True), encoding="utf-8")


def _params(root, model_dir, **gates):
    study = {
        "name": "test", "bank": "data/seed/pcs", "languages": ["hi", "ur"], "dimensions": None, "domains": None,
        "scenario_ids": None, "per_dimension_domain": 1, "conditions": ["A", "B", "C"], "responders": None,
        "collection": {"temperature": 0.7, "max_tokens": 6, "samples": 1},
        "validity": {"min_script_share": 0.0},  # a tiny random model writes any script
        "calibration": {"source": "template", "language": "hi", "pairs_per_feature": 1},
        "judges": {"panel": [{"id": "tiny", "model": None, "mode": "logprob", "logprob_method": "loglikelihood"}]},
        "gates": {"enforce": False, "construct_validity_min": 0.8, "alpha_min": 0.6, "calibration_min": 0.9, **gates},
        "analysis": {"min_gain_steps": 1e-6, "hindi": "hi", "urdu": "ur"},
        "human_validation": {"items_per_comparison": None, "tie_margin": 0.0, "judgements": None},
    }
    annotation = {
        "source": "simulated", "scale": "likert5", "quorum": 3,
        "simulator": {"n_annotators": 5, "reliability": 0.9, "bias": 0.0, "per_item": None, "seed": 0},
        "qc": {"min_annotations_per_item": 5},
        # a tiny random judge gives a random truth: the pipeline must run whatever the agreement
        "thresholds": {"min_fleiss_kappa": None, "min_krippendorff_alpha": None, "min_annotations_per_item": 5,
                       "max_top_label_share": None},
        "bootstrap": {"n_boot": 20},
    }
    params = {
        "model": {"id": "tiny", "name": str(model_dir), "kind": "causal", "backend": "hf", "dtype": "float32"},
        "language": {"include": None}, "tracking": {"enabled": False}, "seed": 0, "study": {"pcs": study},
        "annotation": annotation,
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")


@pytest.mark.slow
def test_stages_end_to_end_on_tiny_model(tmp_path, monkeypatch, tiny_causal_lm_dir, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEREOLENS_CACHE_DIR", str(tmp_path / "cache"))
    _write_bank(tmp_path)
    _params(tmp_path, tiny_causal_lm_dir)
    for name in ("pcs-collect", "pcs-calibration-set", "pcs-judge", "pcs-validate", "pcs-human-validation",
                 "pcs-analyze"):
        assert main(["stage", name]) == 0, name
    responses = pd.read_csv(tmp_path / "data/interim/pcs/tiny/responses.csv")
    assert len(responses) == 2 * 2 * 3 and {"valid", "invalid_reason", "script_share"} <= set(responses.columns)
    scores = pd.read_csv(tmp_path / "data/interim/pcs/tiny/scores.csv")
    # PDI responses have 2 features, IDV responses 1: (2 + 1) x 2 languages x 3 conditions
    assert len(scores) == 18 and set(scores["judge"]) == {"tiny"}
    assert scores["score"].between(1, 7).all()
    gates = json.loads((tmp_path / "reports/pcs/tiny/gates.json").read_text())
    assert gates["enforced"] is False and gates["gates"]["inter_judge_alpha"]["passed"] is None
    import hashlib

    calib_bytes = (tmp_path / "data/interim/pcs/calibration_set.csv").read_bytes()
    assert gates["calibration_set"]["sha256"] == hashlib.sha256(calib_bytes).hexdigest()
    prefs = pd.read_csv(tmp_path / "data/interim/pcs/tiny/human_validation/preferences.csv", keep_default_na=False)
    # 2 scenarios x 2 languages x (A-C, B-C), every row labelled simulated
    assert len(prefs) == 8 and (prefs["source"] == "simulated").all()
    assert set(prefs.loc[prefs["decided"], "preference"]) <= {"A", "B", "C", "tie"}
    assert (tmp_path / "reports/pcs/tiny/human_validation/agreement.json").exists()
    summary = json.loads((tmp_path / "reports/pcs/tiny/summary.json").read_text())
    assert list(summary) == ["pcs", "pcs_note", "pcs_ci_low_cluster", "pcs_ci_high_cluster", "pcs_ci_low", "pcs_ci_high",
                             "pcs_decision", "pcs_n_cells", "pcs_n_scenarios", "cap_util", "cap_util_note", "n_excluded",
                             "by_dimension", "ldi", "hud", "ldi_notes", "hud_note", "hindi_urdu", "robustness", "paired",
                             "headline", "provenance"]
    assert set(summary["ldi"]) == {"hi", "ur"} and "overall" in summary["hud"]
    # the report site's contract: the page's banner rests on these
    assert summary["provenance"]["annotation_source"] == "llm_panel, simulated"
    assert summary["provenance"]["translation_status"].get("authored", 0) > 0
    # the headline's PCS is the number, or why there is none (a tiny random judge rarely gives a gain)
    assert summary["headline"]["PCS"] == (summary["pcs"] if summary["pcs"] is not None else summary["pcs_note"])
    assert summary["headline"]["judge gates"] in ("passed", "FAILED")
    # one model in the run and no pcs_paired: the paired block says why it is empty
    assert summary["paired"]["comparisons"] == [] and summary["paired"]["reason"]
    assert (tmp_path / "reports/pcs/tiny/robustness.csv").exists()
    report = (tmp_path / "reports/pcs/tiny/report.md").read_text()
    assert "config**: test" in report and "reported, not enforced" in report
    assert "**Human-validation preferences in this report are SIMULATED" in report.splitlines()[2]
    for line in ("- **dimensions**: IDV, PDI", "- **domains**: family, workplace", "- **scenarios**: 2 (",
                 "- **samples**: 1", "- **temperature**: 0.7", "- **max_tokens**: 6", "- **judges**: tiny (logprob)",
                 "- **gates**: reported, not enforced"):
        assert line in report, line
    statistics = json.loads((tmp_path / "reports/pcs/tiny/statistics.json").read_text())
    assert statistics["human_validation_source"] == "simulated" and "A-C" in statistics["human_validation"]
    assert (tmp_path / "reports/pcs/tiny/figures/hindi_urdu_dumbbell.svg").exists()
    # rerun: everything comes from the cache
    capsys.readouterr()
    assert main(["stage", "pcs-collect"]) == 0
    assert f"{len(responses)} responses ({len(responses)} from the cache)" in capsys.readouterr().out
    assert "cached" not in pd.read_csv(tmp_path / "data/interim/pcs/tiny/responses.csv").columns

    # an enforced gate that cannot pass stops the pipeline, naming every failing figure and its threshold
    _params(tmp_path, tiny_causal_lm_dir, enforce=True, construct_validity_min=1.0, allow_not_applicable=False)  # the schema's upper bound; a tiny random judge stays below it
    capsys.readouterr()
    assert main(["stage", "pcs-validate"]) == 2
    assert main(["stage", "pcs-analyze"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    observed = gates["gates"]["construct_validity"]["observed"]
    for line in err:
        # the observed value as the report writes numbers (report/markdown.format_cell), the threshold as configured
        assert observed < 1 and f"construct_validity observed {format_cell(observed)} vs threshold 1" in line
        assert "(below)" in line.split("construct_validity", 1)[1].split(";")[0]
        assert "inter_judge_alpha observed n/a vs threshold 0.6 (not computable)" in line


def test_pcs_analyze_cli(tmp_path, capsys):
    rows = []
    for lang, shift in (("hi", 0.0), ("ur", 0.2)):
        for i in range(5):  # 5 scenarios: the fewest that give a scenario interval (stats.cluster.MIN_CLUSTERS)
            for feat, dim in (("deference", "PDI"), ("agency_attribution", "IDV")):
                for cond, v in (("A", 4.0), ("B", 6.0), ("C", 4.5)):
                    for judge in ("j1", "j2"):
                        rows.append(dict(model="m", language=lang, scenario_id=f"s{i}", dimension=dim, feature=feat,
                                         condition=cond, judge=judge, sample=0, score=v + shift + 0.1 * i))
    pd.DataFrame(rows).to_csv(tmp_path / "scores.csv", index=False)
    out = tmp_path / "out"
    assert main(["pcs", "analyze", "--scores", str(tmp_path / "scores.csv"), "--output", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["pcs", "pcs_note", "pcs_ci_low_cluster", "pcs_ci_high_cluster", "pcs_ci_low", "pcs_ci_high",
                             "pcs_decision", "pcs_n_cells", "pcs_n_scenarios", "cap_util", "cap_util_note", "n_excluded",
                             "by_dimension", "ldi", "hud", "ldi_notes", "hud_note", "hindi_urdu", "robustness", "headline",
                             "provenance"]
    assert (out / "robustness.csv").exists() and summary["robustness"]["table"] == "robustness.csv"
    assert summary["provenance"]["annotation_source"] == "llm_panel" and summary["headline"]["judge gates"] == "not run"
    assert summary["pcs"] == pytest.approx(0.25) and summary["cap_util"] == pytest.approx(0.25)
    assert summary["hud"]["overall"] == pytest.approx(0.2)
    for name in ("table01_model_dimension", "table10_model_summary", "table11_ldi", "table13_hud_by_feature",
                 "table14_feature_ranking", "table15_anova_language", "table16_paired_a_vs_c"):
        assert (out / "tables" / f"{name}.csv").exists(), name
    for fig in ("waterfall", "pcs_heatmap", "feature_ranking", "hindi_urdu_dumbbell"):
        assert (out / "figures" / f"{fig}.png").exists() and (out / "figures" / f"{fig}.svg").exists()
    # a ratio through the one formatter, with its scenario interval and decision (every scenario's PCS is 0.25)
    assert "PCS 0.250 [0.250, 0.250] (between 0 and 1 (partial implicit adaptation))" in capsys.readouterr().out


def test_pcs_analyze_cli_reports_missing_columns(tmp_path, capsys):
    pd.DataFrame({"model": ["m"], "score": [1]}).to_csv(tmp_path / "bad.csv", index=False)
    assert main(["pcs", "analyze", "--scores", str(tmp_path / "bad.csv"), "--output", str(tmp_path / "o")]) == 2
    assert "missing column(s) language" in capsys.readouterr().err


def test_greedy_samples_warn(caplog):
    from stereolens.studies.pcs.stages import warn_sampling

    with caplog.at_level("WARNING", logger="stereolens.studies.pcs.stages"):
        assert warn_sampling({"samples": 4, "temperature": 0.0})
    assert "samples=4 with temperature=0" in caplog.text
    assert warn_sampling({"samples": 1, "temperature": 0.0}) is None
    assert warn_sampling({"samples": 4, "temperature": 0.7}) is None


def test_pcs_analyze_cli_refuses_blank_sample(tmp_path, capsys):
    rows = [dict(model="m", language="hi", scenario_id="s", dimension="PDI", feature="deference", condition=c, judge="j",
                 sample=s, score=4.0) for c in "ABC" for s in (0, 1)]
    df = pd.DataFrame(rows).astype({"sample": object})
    df.loc[3, "sample"] = None
    df.to_csv(tmp_path / "scores.csv", index=False)
    assert main(["pcs", "analyze", "--scores", str(tmp_path / "scores.csv"), "--output", str(tmp_path / "o")]) == 2
    assert "line 5, column sample: blank 'sample'" in capsys.readouterr().err


@pytest.mark.parametrize("stage_name,where,key", [
    ("pcs-collect", "responders", "study.pcs.responders"),
    ("pcs-calibration-set", "generator", "study.pcs.calibration.generator"),
    ("pcs-judge", "judges", "study.pcs.judges.panel"),
])
def test_a_model_that_cannot_generate_is_refused_before_it_loads(tmp_path, monkeypatch, capsys, stage_name, where, key):
    """A masked LM as a responder, the calibration generator or a judge: one line naming the key, before any load
    (the path does not exist, so a load would fail with another message)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEREOLENS_CACHE_DIR", str(tmp_path / "cache"))
    _write_bank(tmp_path)
    _params(tmp_path, tmp_path / "no-such-model")
    params = yaml.safe_load((tmp_path / "params.yaml").read_text(encoding="utf-8"))
    masked = {"id": "mlm", "name": str(tmp_path / "no-such-model"), "kind": "masked", "backend": "hf"}
    if where == "responders":
        params["study"]["pcs"]["responders"] = [masked]
    elif where == "judges":
        params["study"]["pcs"]["judges"]["panel"] = [{"id": "mlm", "model": masked, "mode": "logprob"}]
    else:
        params["study"]["pcs"]["calibration"].update(source="model", generator=masked)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    capsys.readouterr()
    assert main(["stage", stage_name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{key}: 'mlm' is a 'masked' model and cannot generate text" in err[0]
