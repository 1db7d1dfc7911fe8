"""The cross-study model profile, built from two models' fake study outputs (every study, in the
per-model layout) and checked cell by cell: text, interval, provenance, link and the reason a
cell is empty.  The expected texts are written by hand from the numbers in the fake summaries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from stereolens.cli import main
from stereolens.report.markdown import MISSING, format_estimate
from stereolens.report.profile import (PROVENANCE_WORDS, build_profile, profile_frame, profile_text,
                                       provenance_label)

CLM, CHAT = "alpha-clm", "beta-chat"
CHAT_SKIP = "CrowS-Pairs needs sentence log-likelihoods, which a chat model does not give"
HUMAN = {"annotation_source": "human", "translation_status": "source", "machine_generated": False}
SEEGULL_PROV = {"annotation_source": "human", "translation_status": "source", "source": {"authored": 4}}
SEEGULL_SKIP = "ILPS needs a causal or seq2seq model's log-probabilities; beta-chat is 'chat'"


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj), encoding="utf-8")


def _pairs_run(lang: str, bias: float, low: float, high: float, hyper: float, pan: float) -> dict:
    return {"model": CLM, "language": lang, "n": 60, "bias_score": bias, "ci_low": low, "ci_high": high,
            "hyperlocal_vs_pan_regional": {"hyperlocal": hyper, "pan_regional": pan, "difference": hyper - pan,
                                           "n_hyperlocal": 30, "n_pan_regional": 30}}


@pytest.fixture()
def reports(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    # crows: the base model scores, the chat model is skipped by the study itself
    _write(root / "crows" / CLM / "summary.json",
           {"model": CLM, "n": 1508, "bias_score": 0.576, "ci_low": 0.551, "ci_high": 0.6, "p_value": 4.7e-9,
            "skipped": None, "provenance": HUMAN,
            # issue 32's robustness block: the headline's decision under every analysis choice the study varies
            "robustness": {"headline_decision": "stereotypical sentence preferred", "survives": 3, "of": 4,
                           "not_run": 1, "table": "robustness.csv"}})
    _write(root / "crows" / CHAT / "summary.json",
           {"model": CHAT, "n": 0, "bias_score": None, "skipped": CHAT_SKIP, "provenance": HUMAN})
    # leakage: two languages; one edge EN -> HI for the base model, none for the chat model, whose
    # edges.json holds an edge of the alternative missing-cell treatment and one of a fit that did not
    # converge: the report does not count those as edges, and neither may the profile
    leak_prov = {"annotation_source": "human", "translation_status": {"authored": 416, "original": 92}}
    not_reported = [{"panel": f"{CHAT}/ilps", "source": "HI", "target": "EN", "estimate": 0.0155, "ci_low": 0.0003,
                     "ci_high": 0.0306, "configured": False, "converged": True, "missing": "drop"},
                    {"panel": f"{CHAT}/ilps", "source": "EN", "target": "HI", "estimate": 0.04, "ci_low": 0.01,
                     "ci_high": 0.07, "configured": True, "converged": False, "missing": "zero"}]
    for model, edges, n_edges in ((CLM, [{"panel": f"{CLM}/ilps", "source": "EN", "target": "HI", "estimate": 0.0218,
                                          "ci_low": 0.0056, "ci_high": 0.038, "configured": True, "converged": True,
                                          "missing": "zero"}], 1), (CHAT, not_reported, 0)):
        _write(root / "leakage" / model / "summary.json",
               {"n_edges": n_edges, "coverage": {"EN": {}, "HI": {}}, "edges_are": "cross-language association edges",
                "provenance": leak_prov})
        _write(root / "leakage" / model / "edges.json", edges)
    # pairs: the base model has the starter set in two languages and the crows set; the chat model
    # has the crows set only, so its starter cells are 'not measured'
    starter_prov = {"source": "authored, not native-reviewed (data/seed/pairs)", "translation_status": "authored, source"}
    crows_prov = {"source": "CrowS-Pairs (Nangia et al. 2020), English", "translation_status": "source",
                  "annotation_source": "human"}
    _write(root / "pairs" / CLM / "summary.json",
           {"model": CLM, "sets": {
               "starter": {"runs": [_pairs_run("en", 0.5, 0.367, 0.633, 0.367, 0.633),
                                    _pairs_run("kok", 0.517, 0.383, 0.65, 0.533, 0.5)], "provenance": starter_prov},
               "crows": {"runs": [{"model": CLM, "language": "en", "n": 1508, "bias_score": 0.576, "ci_low": 0.551,
                                   "ci_high": 0.6}], "provenance": crows_prov}},
            "provenance": {"annotation_source": "simulated"}})
    _write(root / "pairs" / CHAT / "summary.json",
           {"model": CHAT, "sets": {
               "crows": {"runs": [{"model": CHAT, "language": "en", "n": 1508, "bias_score": 0.52, "ci_low": 0.495,
                                   "ci_high": 0.545}], "provenance": crows_prov}},
            "provenance": {"annotation_source": "simulated"}})
    # a per-set summary beside the per-model ones is not a model
    _write(root / "pairs" / "starter" / "summary.json", {"n": 60})
    # stereo: the first evaluated model's numbers at the top level and every model's under `models`, as
    # stereo-evaluate writes them (the base model), and top-level keys alone (the chat model)
    stereo_prov = {"source": {"authored": 40}, "annotation_source": ""}
    clm_stereo = {"ss": 27.18, "lms": 54.71, "icat": 29.74, "n": 40, "ss_ci": [15.2, 39.37], "lms_ci": [45.34, 66.67],
                  "icat_ci": [16.37, 45.98]}
    _write(root / "stereo" / CLM / "summary.json",
           {"model": CLM, **{k: clm_stereo[k] for k in ("ss", "lms", "icat", "n")}, "models": {CLM: clm_stereo},
            "provenance": stereo_prov})
    _write(root / "stereo" / CHAT / "summary.json",
           {"model": CHAT, "ss": 60.0, "lms": 80.0, "icat": 64.0, "n": 40, "provenance": stereo_prov})
    # pcs: PCS defined for the chat model (a ratio, not a percentage), undefined for the base model, which has no
    # valid Hindi response (run, all excluded as invalid)
    pcs_prov = {"annotation_source": "llm_panel, simulated", "translation_status": {"authored": 36}}
    _write(root / "pcs" / CLM / "summary.json",
           {"pcs": None, "pcs_note": "undefined: mean B - mean A = -0.0592 over all 24 cells is not above the minimum "
                                     "gain 0.25", "cap_util": None,
            "cap_util_note": "undefined: mean B - mean A = -0.059 is not above 0.25",
            "n_excluded": 24, "ldi": {"hi": {}, "ur": {"a": 3.0, "b": 2.0}}, "hud": {"overall": None},
            "ldi_notes": {"hi": "no valid responses: 6 of 6 judged Prompt A responses excluded as invalid "
                                "(wrong_language: 6)"}, "provenance": pcs_prov})
    _write(root / "pcs" / CLM / "gates.json",
           {"enforced": False, "gates": {"construct_validity": {"observed": 0.1875, "threshold": 0.8, "passed": False},
                                         "inter_judge_alpha": {"observed": None, "threshold": 0.6, "passed": None,
                                                               "note": "needs at least two judges"}}})
    # the base model was asked in Hindi too, and every Prompt A answer was invalid (wrong language): its LDI hi
    # has no valid response, which is not "not measured"
    (root / "pcs" / CLM / "tables").mkdir()
    pd.DataFrame({"model": [CLM] * 3, "language": ["hi", "hi", "ur"], "condition": ["A", "B", "A"],
                  "n_responses": [12, 12, 12], "n_excluded": [12, 3, 0]}).to_csv(
        root / "pcs" / CLM / "tables" / "excluded_responses.csv", index=False)
    _write(root / "pcs" / CHAT / "summary.json",
           {"pcs": 0.138, "pcs_ci_low_cluster": 0.0512, "pcs_ci_high_cluster": 0.221,
            "pcs_decision": "between 0 and 1 (partial implicit adaptation)", "pcs_n_cells": 20, "pcs_n_scenarios": 6,
            "cap_util": 0.135, "n_excluded": 0, "ldi": {"hi": {"a": 4.9}, "ur": {"a": 5.1, "b": 4.9}},
            "hud": {"overall": 0.1}, "provenance": pcs_prov})
    _write(root / "pcs" / CHAT / "gates.json",
           {"enforced": True, "gates": {"construct_validity": {"observed": 0.9, "threshold": 0.8, "passed": True}}})
    # heads: run on the base model only
    _write(root / "heads" / CLM / "summary.json",
           {"model": CLM, "value": "accuracy", "countries": [
               {"country": "Spain", "top_heads": "L16H1 (+0.094±0.060)", "probe_test_accuracy": 0.75,
                "pruning_instances": 2}], "provenance": {"source": "authored"}})
    # seegull: two locales for the base model (one with no stereotype-majority tuple, so no AUC); the chat model
    # is skipped by the study itself (ILPS needs log-probabilities)
    _write(root / "seegull" / CLM / "summary.json",
           {"model": CLM, "skipped": None, "provenance": SEEGULL_PROV, "by_locale": {
               "es-MX": {"auc": 0.612, "auc_ci": [0.55, 0.671], "spearman": 0.204, "spearman_ci": [0.1, 0.3],
                         "n_stereotype": 100, "n_not": 100, "n_identities": 150, "n_tuples": 200},
               "hi-IN": {"auc": None, "auc_ci": [None, None], "spearman": None, "spearman_ci": [None, None],
                         "n_stereotype": 0, "n_not": 20, "n_identities": 9, "n_tuples": 20}}})
    _write(root / "seegull" / CHAT / "summary.json",
           {"model": CHAT, "skipped": SEEGULL_SKIP, "by_locale": {}, "provenance": SEEGULL_PROV})
    return root


EXPECTED = {
    # (model, study, measure): (text, provenance, link)
    (CLM, "crows", "bias score"): ("57.6% [55.1, 60.0]", "human", "site/crows.html"),
    (CHAT, "crows", "bias score"): (f"n/a: skipped: {CHAT_SKIP}", "", "site/crows.html"),
    (CLM, "leakage", "edges into EN"): ("0", "human, authored translation", "site/leakage.html"),
    (CLM, "leakage", "edges out of EN"): ("1 (EN->HI 0.0218 [0.0056, 0.0380] (ilps))", "human, authored translation",
                                         "site/leakage.html"),
    (CLM, "leakage", "edges into HI"): ("1 (EN->HI 0.0218 [0.0056, 0.0380] (ilps))", "human, authored translation",
                                       "site/leakage.html"),
    (CLM, "leakage", "edges out of HI"): ("0", "human, authored translation", "site/leakage.html"),
    **{(CHAT, "leakage", f"edges {way} {lang}"): ("0", "human, authored translation", "site/leakage.html")
       for way in ("into", "out of") for lang in ("EN", "HI")},
    (CLM, "pairs", "bias (starter, en)"): ("50.0% [36.7, 63.3]", "authored, authored translation", "site/pairs.html"),
    (CLM, "pairs", "hyperlocal gap (starter, en)"): ("-26.6 pp", "authored, authored translation", "site/pairs.html"),
    (CLM, "pairs", "bias (starter, kok)"): ("51.7% [38.3, 65.0]", "authored, authored translation", "site/pairs.html"),
    (CLM, "pairs", "hyperlocal gap (starter, kok)"): ("3.3 pp", "authored, authored translation", "site/pairs.html"),
    (CLM, "pairs", "bias (crows, en)"): ("57.6% [55.1, 60.0]", "human", "site/pairs.html"),
    (CHAT, "pairs", "bias (starter, en)"): ("n/a: not measured for this model", "", "site/pairs.html"),
    (CHAT, "pairs", "hyperlocal gap (starter, en)"): ("n/a: not measured for this model", "", "site/pairs.html"),
    (CHAT, "pairs", "bias (starter, kok)"): ("n/a: not measured for this model", "", "site/pairs.html"),
    (CHAT, "pairs", "hyperlocal gap (starter, kok)"): ("n/a: not measured for this model", "", "site/pairs.html"),
    (CHAT, "pairs", "bias (crows, en)"): ("52.0% [49.5, 54.5]", "human", "site/pairs.html"),
    (CLM, "stereo", "ss"): ("27.2% [15.2, 39.4]", "authored", "site/stereo.html"),
    (CLM, "stereo", "lms"): ("54.7% [45.3, 66.7]", "authored", "site/stereo.html"),
    (CLM, "stereo", "icat"): ("29.7 [16.4, 46.0]", "authored", "site/stereo.html"),
    (CHAT, "stereo", "ss"): ("60.0%", "authored", "site/stereo.html"),
    (CHAT, "stereo", "lms"): ("80.0%", "authored", "site/stereo.html"),
    (CHAT, "stereo", "icat"): ("64", "authored", "site/stereo.html"),
    (CLM, "pcs", "PCS"): ("n/a: undefined: mean B - mean A = -0.0592 over all 24 cells is not above the minimum gain "
                          "0.25", "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CLM, "pcs", "capability utilisation"): ("n/a: undefined: mean B - mean A = -0.059 is not above 0.25",
                                             "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CLM, "pcs", "LDI ur"): ("2.5", "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CLM, "pcs", "HUD"): ("n/a: undefined for this run (needs valid hi and ur scores)",
                          "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CLM, "pcs", "gate: construct validity"): ("0.188 FAILED (threshold 0.8, not enforced)",
                                               "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CLM, "pcs", "gate: inter-judge agreement (Krippendorff's alpha)"): (
        "n/a: undefined for this run (needs at least two judges)", "llm_panel, simulated, authored translation",
        "site/pcs.html"),
    (CLM, "pcs", "LDI hi"): ("n/a: no valid responses: 6 of 6 judged Prompt A responses excluded as invalid "
                             "(wrong_language: 6)", "llm_panel, simulated, authored translation", "site/pcs.html"),
    # PCS and capability utilisation are ratios: never percentages (the index once showed PCS -127.8%)
    (CHAT, "pcs", "PCS"): ("0.138 [0.051, 0.221] between 0 and 1 (partial implicit adaptation)",
                           "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CHAT, "pcs", "capability utilisation"): ("0.135", "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CHAT, "pcs", "LDI hi"): ("4.9", "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CHAT, "pcs", "LDI ur"): ("5", "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CHAT, "pcs", "HUD"): ("0.1", "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CHAT, "pcs", "gate: construct validity"): ("0.9 passed (threshold 0.8)",
                                                "llm_panel, simulated, authored translation", "site/pcs.html"),
    (CHAT, "pcs", "gate: inter-judge agreement (Krippendorff's alpha)"): ("n/a: not measured for this model", "",
                                                                          "site/pcs.html"),
    (CLM, "heads", "top heads (Spain)"): ("L16H1 (+0.094±0.060)", "authored", "site/heads.html"),
    (CLM, "heads", "probe accuracy (Spain)"): ("75.0%", "authored", "site/heads.html"),
    (CHAT, "heads", "top heads (Spain)"): ("n/a: study not run for this model", "", "site/heads.html"),
    (CHAT, "heads", "probe accuracy (Spain)"): ("n/a: study not run for this model", "", "site/heads.html"),
    # beside every study's cells its robustness: the table where the study wrote one, else "not computed"
    (CLM, "crows", "robustness"): ("survives 3 of 4 (1 not run)", "human", f"crows/{CLM}/robustness.csv"),
    (CHAT, "crows", "robustness"): (f"n/a: skipped: {CHAT_SKIP}", "", "site/crows.html"),
    **{(model, study, "robustness"): ("n/a: not computed (no robustness block in summary.json)", "",
                                      f"site/{study}.html")
       for study in ("leakage", "pairs", "stereo", "pcs", "heads") for model in (CLM, CHAT)
       if (model, study) != (CHAT, "heads")},
    (CHAT, "heads", "robustness"): ("n/a: study not run for this model", "", "site/heads.html"),
    # the seegull study (issue 34) writes no robustness block yet
    (CLM, "seegull", "robustness"): ("n/a: not computed (no robustness block in summary.json)", "",
                                     "site/seegull.html"),
    (CHAT, "seegull", "robustness"): (f"n/a: skipped: {SEEGULL_SKIP}", "", "site/seegull.html"),
    (CLM, "seegull", "AUC es-MX"): ("0.612 [0.550, 0.671]", "human, authored", "site/seegull.html"),
    (CLM, "seegull", "Spearman es-MX"): ("0.204 [0.100, 0.300]", "human, authored", "site/seegull.html"),
    (CLM, "seegull", "AUC hi-IN"): ("n/a: undefined for this run (a verdict class has no tuple)", "human, authored",
                                    "site/seegull.html"),
    (CLM, "seegull", "Spearman hi-IN"): ("n/a: undefined for this run (the association or the vote share is "
                                         "constant)", "human, authored", "site/seegull.html"),
    **{(CHAT, "seegull", measure): (f"n/a: skipped: {SEEGULL_SKIP}", "", "site/seegull.html")
       for measure in ("AUC es-MX", "Spearman es-MX", "AUC hi-IN", "Spearman hi-IN")},
}
# the n behind each value (the terminal shows it after the value)
EXPECTED_N = {(CLM, "crows", "bias score"): 1508, (CLM, "pairs", "bias (starter, en)"): 60,
              (CLM, "pairs", "hyperlocal gap (starter, en)"): 60, (CLM, "pairs", "bias (starter, kok)"): 60,
              (CLM, "pairs", "hyperlocal gap (starter, kok)"): 60, (CLM, "pairs", "bias (crows, en)"): 1508,
              (CHAT, "pairs", "bias (crows, en)"): 1508, **{(m, "stereo", k): 40 for m in (CLM, CHAT)
                                                            for k in ("ss", "lms", "icat")},
              (CLM, "heads", "probe accuracy (Spain)"): 2}


def _cells(profile) -> dict:
    """(model, study, measure) -> (text, provenance, link) of every cell of ``profile``."""
    return {(model, study, measure): (c.text, c.provenance, c.link) for model in profile.models
            for study, measure in profile.columns() for c in [profile.cell(model, study, measure)]}


def test_every_cell_of_two_models_profile(reports):
    profile = build_profile(reports, models=[CLM, CHAT])
    assert profile.models == [CLM, CHAT]  # the per-set pairs/starter/summary.json is not a model
    assert _cells(profile) == EXPECTED
    assert {key: c.n for key in EXPECTED for c in [profile.cell(*key)] if c.n is not None} == EXPECTED_N
    # numbers stay numbers beside their text, with the interval in the study's own scale
    crows = profile.cell(CLM, "crows", "bias score")
    assert (crows.value, crows.low, crows.high, crows.unit) == (0.576, 0.551, 0.6, "share")
    icat = profile.cell(CLM, "stereo", "icat")
    assert (icat.value, icat.low, icat.high) == (29.74, 16.37, 45.98)
    chat_crows = profile.cell(CHAT, "crows", "bias score")
    assert chat_crows.reason == f"skipped: {CHAT_SKIP}" and chat_crows.value is None
    # the column groups come in the profile's study order
    assert list(dict.fromkeys(study for study, _ in profile.columns())) == ["crows", "leakage", "pairs", "stereo",
                                                                           "pcs", "heads", "seegull"]


def test_models_are_found_without_being_named(reports):
    # leakage and pcs summaries do not name their model: their folders are known by the name
    # crows, pairs, stereo and heads gave
    profile = build_profile(reports)
    assert profile.models == [CLM, CHAT]
    assert _cells(profile) == EXPECTED


def _csv_field(row, study: str, measure: str, field: str):
    """A cell's ``field`` from a wide CSV row: its own column, else its study's (provenance, link)."""
    own = f"{study}.{measure}.{field}"
    value = row[own] if own in row.index else row[f"{study}.{field}"]
    return "" if pd.isna(value) else value


def test_the_csv_is_a_row_per_model_with_every_cell_in_its_columns(reports, tmp_path):
    from stereolens.io import write_csv

    profile = build_profile(reports, models=[CLM, CHAT])
    write_csv(tmp_path / "profile.csv", profile_frame(profile))
    table = pd.read_csv(tmp_path / "profile.csv")
    assert list(table.model) == [CLM, CHAT]
    rows = table.set_index("model")
    # a column group per study, in the profile's order; the interval, verdict and reason only where a cell has one
    assert list(table.columns[:11]) == ["model", "crows.bias score", "crows.bias score.low", "crows.bias score.high",
                                        "crows.bias score.n", "crows.bias score.reason", "crows.robustness",
                                        "crows.robustness.reason", "crows.robustness.link", "crows.provenance",
                                        "crows.link"]
    assert [c for c in table.columns if c.startswith("stereo.")] == [
        "stereo.ss", "stereo.ss.low", "stereo.ss.high", "stereo.ss.n", "stereo.lms", "stereo.lms.low",
        "stereo.lms.high", "stereo.lms.n", "stereo.icat", "stereo.icat.low", "stereo.icat.high", "stereo.icat.n",
        "stereo.robustness", "stereo.robustness.reason", "stereo.provenance", "stereo.link"]
    # pairs' sets rest on different data: a provenance per cell, not one for the study
    assert "pairs.provenance" not in table.columns and "pairs.bias (crows, en).provenance" in table.columns
    # numbers stay numbers, the interval in its own columns, in the study's own scale
    assert table["crows.bias score"].dtype.kind == "f" and table["stereo.ss"].dtype.kind == "f"
    assert tuple(rows.loc[CLM, ["crows.bias score", "crows.bias score.low", "crows.bias score.high"]]) == \
        (0.576, 0.551, 0.6)
    assert tuple(rows.loc[CLM, ["stereo.icat", "stereo.icat.low", "stereo.icat.high"]]) == (29.74, 16.37, 45.98)
    assert pd.isna(rows.loc[CHAT, "crows.bias score"])
    assert rows.loc[CHAT, "crows.bias score.reason"] == f"skipped: {CHAT_SKIP}"
    assert (rows.loc[CHAT, "pcs.PCS"], rows.loc[CHAT, "pcs.provenance"], rows.loc[CHAT, "pcs.link"]) == \
        (0.138, "llm_panel, simulated, authored translation", "site/pcs.html")
    assert (rows.loc[CLM, "pcs.gate: construct validity"], rows.loc[CLM, "pcs.gate: construct validity.verdict"]) == \
        (0.1875, "FAILED (threshold 0.8, not enforced)")
    assert (rows.loc[CLM, "leakage.edges out of EN"], rows.loc[CLM, "leakage.edges out of EN.verdict"]) == \
        (1, "(EN->HI 0.0218 [0.0056, 0.0380] (ilps))")
    # the n behind each value in a column of its own; the robustness as the count of choices that agree
    assert (rows.loc[CLM, "crows.bias score.n"], rows.loc[CLM, "stereo.ss.n"]) == (1508, 40)
    assert (rows.loc[CLM, "crows.robustness"], rows.loc[CLM, "crows.robustness.link"]) == \
        (3, f"crows/{CLM}/robustness.csv")
    # every cell of the profile is in the CSV, with its provenance and link
    for (model, study, measure), (_, provenance, link) in EXPECTED.items():
        cell, row = profile.cell(model, study, measure), rows.loc[model]
        value = row[f"{study}.{measure}"]
        # the CSV writer keeps seven significant digits (io.SIGNIFICANT_DIGITS)
        assert (cell.value is None and pd.isna(value)) or value == (
            pytest.approx(cell.value, rel=1e-6) if isinstance(cell.value, float) else cell.value), (model, study, measure)
        for field in ("low", "high"):
            got = _csv_field(row, study, measure, field) if f"{study}.{measure}.{field}" in row.index else ""
            assert got == ("" if getattr(cell, field) is None else pytest.approx(getattr(cell, field), rel=1e-6)), \
                (model, study, measure)
        for field in ("verdict", "reason"):
            got = _csv_field(row, study, measure, field) if f"{study}.{measure}.{field}" in row.index else ""
            assert got == getattr(cell, field), (model, study, measure, field)
        if f"{study}.{measure}.provenance" not in row.index:
            # one column for the study: the provenance of this model's measured cells, which a cell the
            # model lacks (no value, so no provenance of its own) shares
            provenance = next((p for (m, s, _), (_, p, _) in EXPECTED.items() if (m, s) == (model, study) and p), "")
        assert (_csv_field(row, study, measure, "provenance"), _csv_field(row, study, measure, "link")) == \
            (provenance, link), (model, study, measure)


def test_a_study_never_run_and_the_single_model_layout(tmp_path):
    root = tmp_path / "reports"
    # today's layout: one summary per study, naming its model (crows) or not (pcs: the run's primary)
    _write(root / "crows" / "summary.json", {"model": CLM, "bias_score": 0.6, "ci_low": 0.55, "ci_high": 0.65,
                                              "n": 100, "provenance": HUMAN})
    _write(root / "pcs" / "summary.json", {"pcs": 0.2, "cap_util": 0.18, "n_excluded": 0, "ldi": {}, "hud": {"overall": None},
                                            "provenance": {"annotation_source": "llm_panel"}})
    profile = build_profile(root, studies=["crows", "pcs", "heads"], default_model="primary-x")
    assert profile.models == ["primary-x", CLM]
    assert profile.cell(CLM, "crows", "bias score").text == "60.0% [55.0, 65.0]"
    assert profile.cell("primary-x", "crows", "bias score").reason == "study not run for this model"
    assert profile.cell("primary-x", "pcs", "PCS").text == "0.2"  # a ratio, not a percentage
    assert profile.cell("primary-x", "pcs", "judge gates").reason == "no gates.json beside summary.json"
    assert profile.cell(CLM, "heads", "all measures").text == "n/a: study not run (no summary.json under reports/heads/)"


def test_a_bias_score_with_ties_is_shown_bare_and_its_tested_share_carries_the_interval(tmp_path):
    """Issue 31: the interval and the p are of the share among the untied pairs; beside a bias score over all
    pairs (ties not stereotypical) they would bracket another number."""
    root = tmp_path / "reports"
    _write(root / "crows" / "summary.json", {"model": CLM, "bias_score": 0.4, "share_untied": 0.667, "ties": 80,
                                              "ci_low": 0.575, "ci_high": 0.75, "p_value": 0.00033, "n": 200,
                                              "provenance": HUMAN})
    cell = build_profile(root, studies=["crows"], default_model=CLM).cell(CLM, "crows", "bias score")
    assert cell.text == "40.0%"
    assert cell.detail == ("200 pairs, binomial p 0.00033, 80 ties: the interval and p test the untied pairs, "
                           "66.7% [57.5, 75.0]")


def test_a_models_own_study_page_is_linked_where_the_site_has_one(reports):
    page = reports / "site" / f"crows@{CLM}.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html></html>")
    profile = build_profile(reports, studies=["crows"], models=[CLM, CHAT])
    assert profile.cell(CLM, "crows", "bias score").link == f"site/crows@{CLM}.html"
    assert profile.cell(CHAT, "crows", "bias score").link == "site/crows.html"


@pytest.mark.parametrize("prov, label", [
    (None, "not declared"),
    ({"annotation_source": "human", "translation_status": "source"}, "human"),
    ({"annotation_source": "llm_panel, simulated", "translation_status": {"authored": 36}},
     "llm_panel, simulated, authored translation"),
    ({"source": {"authored": 40}}, "authored"),
    ({"source": "generator output, tuple validation", "machine_generated": True}, "machine"),
    ({"translation_status": "machine_translated:gemma3-270m"}, "machine_translated translation"),
])
def test_provenance_label(prov, label):
    assert provenance_label(prov) == label


@pytest.mark.parametrize("args, kwargs, text", [
    ((0.5755968, 0.5503979, 0.6001326), {"unit": "share"}, "57.6% [55.0, 60.0]"),
    ((27.179, 15.196, 39.367), {"unit": "percent"}, "27.2% [15.2, 39.4]"),
    ((-0.2666667,), {"unit": "share_points"}, "-26.7 pp"),
    ((29.7406, 16.372, 45.98), {}, "29.7 [16.4, 46.0]"),
    # bounds at the estimate's decimals, whatever their own digits: the interval reads as one precision
    ((0.5755968, 0.55, 0.6), {}, "0.576 [0.550, 0.600]"),
    ((0.0218, 0.0056, 0.038), {}, "0.0218 [0.0056, 0.0380]"),
    ((-1.2781, -1.9, 0.4), {"unit": "ratio"}, "-1.28 [-1.90, 0.40]"),
    ((-0.00001, -0.2, 0.3), {}, "0.000 [-0.200, 0.300]"),
    ((6.603e-05, 1e-05, 9e-05), {}, "6.6e-05 [1e-05, 9e-05]"),
    ((1234.5678,), {}, "1235"),
    ((3,), {}, "3"),
    ((None, 0.1, 0.2), {"unit": "share"}, "n/a"),
    ((float("nan"),), {}, "n/a"),
    ((0.5, float("nan"), 0.6), {"unit": "share"}, "50.0%"),
    (("L16H0",), {}, "L16H0"),
])
def test_format_estimate(args, kwargs, text):
    assert format_estimate(*args, **kwargs) == text


def test_profile_command_writes_the_csv(reports, tmp_path, capsys):
    out = tmp_path / "profile.csv"
    params = tmp_path / "params.yaml"
    params.write_text(f"model:\n  id: {CLM}\nmodels:\n  {CLM}: {{}}\n  {CHAT}: {{}}\n", encoding="utf-8")
    assert main(["profile", "--reports", str(reports), "--params", str(params), "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "57.6% [55.1, 60.0] n=1508" in printed and f"[1] skipped: {CHAT_SKIP}" in printed
    assert f"profile: 2 model(s) x {len(EXPECTED) // 2} cell(s) -> {out}" in printed
    # the run the summaries come from, as the report pages name it (no git work tree, no dvc.lock here)
    assert "\nrun: no git commit, no dvc.lock\n" in printed
    table = pd.read_csv(out)
    assert list(table.model) == [CLM, CHAT]
    row = table[table.model == CHAT].iloc[0]
    assert (row["pcs.PCS"], row["pcs.provenance"], row["pcs.link"]) == \
        (0.138, "llm_panel, simulated, authored translation", "site/pcs.html")


def test_profile_command_refuses_a_broken_params_file_in_one_line(reports, tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text(f"model:\n  id: {CLM}\nmodels: [unclosed\n", encoding="utf-8")
    assert main(["profile", "--reports", str(reports), "--params", str(params)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith(f"stereolens: error: {params} line 4, column 1: not valid YAML") and "\n" not in err
    assert captured.out == ""  # refused before any table is printed


def test_profile_command_refuses_a_missing_reports_folder(tmp_path, capsys):
    assert main(["profile", "--reports", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stereolens: error: --reports") and "no such folder" in err and "\n" not in err


@pytest.mark.parametrize("where, content, message", [
    (f"crows/{CLM}/summary.json", "{not json", "not valid JSON"),
    (f"crows/{CLM}/summary.json", "[1, 2]", "a study summary must be a JSON object"),
    (f"leakage/{CLM}/edges.json", '{"EN": 1}', "the top level must be a list of a mapping, got {'EN': 1}"),
    (f"pcs/{CLM}/gates.json", '{"gates": [1]}', "gates must be a mapping, got [1]"),
])
def test_a_broken_study_file_is_one_line_naming_it(reports, capsys, monkeypatch, where, content, message):
    monkeypatch.chdir(reports.parent)  # no params.yaml: the models are the ones found under --reports
    (reports / where).write_text(content, encoding="utf-8")
    assert main(["profile", "--reports", str(reports)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(reports / where) in err and message in err


def _terminal_cells(text: str) -> dict:
    """(model, study, measure) -> what the terminal shows, with an ``n/a [k]`` cell replaced by ``n/a: `` and
    note k of its block: the terminal read back cell by cell."""
    cells, study, header, notes, pending = {}, None, None, {}, []
    for line in text.splitlines():
        if not line.strip():
            cells.update({key: f"{MISSING}: {notes[k]}" if k else shown for key, shown, k in pending})
            study, header, notes, pending = None, None, {}, []
        elif study is None:
            study = line.split()[0]
        elif re.match(r"  \[\d+\] ", line):
            number, reason = re.match(r"  \[(\d+)\] (.*)", line).groups()
            notes[number] = reason
        elif line.startswith("      ") and notes:  # a wrapped note goes on
            notes[max(notes, key=int)] += " " + line.strip()
        elif line.startswith("  model  "):
            header = re.split(r"\s{2,}", line.strip())[1:]
        elif header is not None and line.startswith("  ") and not line.startswith("    "):
            model, *shown = re.split(r"\s{2,}", line.strip())
            for measure, value in zip(header, shown, strict=True):
                number = re.fullmatch(rf"{MISSING} \[(\d+)\]", value)
                pending.append(((model, study, measure), value, number.group(1) if number else None))
    return cells


def test_terminal_shows_a_row_per_model_in_each_studys_column_group(reports):
    text = profile_text(build_profile(reports, models=[CLM, CHAT]))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    start = lines.index("stereo  (provenance: authored; pages: site/stereo.html)")
    assert [re.split(r"\s{2,}", line.strip()) for line in lines[start + 1:start + 4]] == [
        ["model", "ss", "lms", "icat", "robustness"],
        [CLM, "27.2% [15.2, 39.4] n=40", "54.7% [45.3, 66.7] n=40", "29.7 [16.4, 46.0] n=40", "n/a [1]"],
        [CHAT, "60.0% n=40", "80.0% n=40", "64 n=40", "n/a [1]"]]
    start = lines.index("crows  (provenance: human; pages: site/crows.html)")
    assert lines[start + 1:start + 5] == ["  model      bias score                 robustness",
                                          f"  {CLM}  57.6% [55.1, 60.0] n=1508  survives 3 of 4 (1 not run)",
                                          f"  {CHAT}  n/a [1]                    n/a [1]",
                                          f"  [1] skipped: {CHAT_SKIP}"]
    # pairs has more measures than 100 columns hold: its group is cut into tables, each with every model
    pairs = lines[lines.index(next(x for x in lines if x.startswith("pairs  "))):]
    pairs = pairs[:pairs.index("")]
    assert sum(line.startswith("  model  ") for line in pairs) >= 2
    # every cell is shown, with the reason of every empty one
    assert _terminal_cells(text) == {key: text + (f" n={EXPECTED_N[key]}" if key in EXPECTED_N else "")
                                     for key, (text, _, _) in EXPECTED.items()}
    assert lines[-len(PROVENANCE_WORDS) - 1] == "provenance words:"
    assert lines[-len(PROVENANCE_WORDS)].startswith("  human: written or judged by people")


def _set(path: list, value):
    def edit(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return doc
    return edit


@pytest.mark.parametrize("where, edit, message", [
    (f"stereo/{CLM}/summary.json", _set(["models", CLM, "ss"], "27.17949abc"),
     f"models.{CLM}.ss must be a number in [0, 100] (or null), got '27.17949abc'"),
    (f"stereo/{CHAT}/summary.json", _set(["icat"], KeyError), "icat: missing"),
    (f"crows/{CLM}/summary.json", _set(["bias_score"], 1.7), "bias_score must be a number in [0, 1] (or null), got 1.7"),
    (f"crows/{CLM}/summary.json", _set(["n"], KeyError), "n: missing"),
    (f"pairs/{CLM}/summary.json", _set(["sets", "starter", "runs"], KeyError), "sets.starter.runs: missing"),
    (f"pairs/{CLM}/summary.json", _set(["sets", "crows", "runs", 0, "bias_score"], "0.6"),
     "sets.crows.runs[0].bias_score must be a number in [0, 1] (or null), got '0.6'"),
    (f"heads/{CLM}/summary.json", _set(["countries", 0, "top_heads"], KeyError), "countries[0].top_heads: missing"),
    (f"pcs/{CHAT}/summary.json", _set(["ldi", "hi", "a"], True), "ldi.hi.a must be a number (or null), got True"),
    (f"pcs/{CLM}/gates.json", _set(["gates", "construct_validity", "passed"], KeyError),
     "gates.construct_validity.passed: missing"),
    (f"leakage/{CLM}/edges.json", _set([0, "estimate"], "0.02x"), "[0].estimate must be a number (or null), got '0.02x'"),
])
def test_a_summary_the_profile_would_misread_is_refused_naming_its_key(reports, capsys, monkeypatch, where, edit, message):
    """A value of the wrong type or a key stripped from what the profile reads is refused, in one line naming the
    file and the key, rather than printed as a measure or shown as 'not measured' (the report contract's MEASURES)."""
    monkeypatch.chdir(reports.parent)
    path = reports / where
    path.write_text(json.dumps(edit(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")
    assert main(["profile", "--reports", str(reports), "--csv", str(reports.parent / "p.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"stereolens: error: {path}: {message}"
    assert not (reports.parent / "p.csv").exists()
