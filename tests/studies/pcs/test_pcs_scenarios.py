"""Scenario bank loading and schema checks (stereolens.studies.pcs.scenarios)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from stereolens.studies.pcs import scenarios as sc
from stereolens.errors import DataError

RUBRICS = {
    "PDI": [
        {"name": "directness", "label": "Directness", "anchors": {1: "Blunt", 4: "Balanced", 7: "Highly indirect"}},
        {"name": "deference", "label": "Deference", "anchors": {1: "Equal", 4: "Neutral", 7: "Explicit respect"}},
    ],
    "IDV": [
        {"name": "agency_attribution", "anchors": {1: "Individual", 4: "Balanced", 7: "Collective"}},
    ],
}


def _row(sid, dim, domain, lang, c="Colleagues plan to praise the plan in the meeting."):
    return {
        "scenario_id": sid, "dimension": dim, "domain": domain, "language": lang,
        "prompt_a": f"{sid} dilemma ({lang}).", "prompt_b": f"{sid} dilemma. Respond as someone ...",
        "prompt_c": f"{sid} dilemma. {c}", "translation_status": "source" if lang == "en" else "machine_unreviewed",
        "notes": "",
    }


def _bank(tmp_path: Path, rows, markers=None) -> Path:
    pd.DataFrame(rows).to_csv(tmp_path / "scenarios.csv", index=False)
    (tmp_path / "rubrics.yaml").write_text(yaml.safe_dump(RUBRICS), encoding="utf-8")
    (tmp_path / "indexical_markers.yaml").write_text(
        yaml.safe_dump(markers or {"en": ["India", "Priya"], "hi": ["भारत"], "ur": ["پاکستان"]}, allow_unicode=True),
        encoding="utf-8",
    )
    pd.DataFrame(
        [{"scenario_id": "PDI-w-1", "language": "hi", "condition": "C", "register_naturalness": 3,
          "address_forms": 3, "dilemma_preservation": 3, "no_calques": 2, "decision": "minor edits", "reviewer": "r1"}]
    ).to_csv(tmp_path / "translation_reviews.csv", index=False)
    return tmp_path


ROWS = [_row(sid, dim, dom, lang) for sid, dim, dom in
        (("PDI-w-1", "PDI", "workplace"), ("PDI-w-2", "PDI", "workplace"), ("PDI-f-1", "PDI", "family"),
         ("IDV-w-1", "IDV", "workplace"))
        for lang in ("en", "hi")]


def test_load_select_and_prompts(tmp_path):
    bank = sc.load_bank(_bank(tmp_path, ROWS), languages=["en", "hi"], per_dimension_domain=1)
    assert sorted(bank.scenarios["scenario_id"].unique()) == ["IDV-w-1", "PDI-f-1", "PDI-w-1"]
    assert [f.name for f in bank.features("PDI")] == ["directness", "deference"]
    assert bank.features("IDV")[0].label == "Agency attribution" and bank.features("IDV")[0].anchors[7] == "Collective"
    prompts = sc.triad_prompts(bank)
    assert len(prompts) == 3 * 2 * 3 and set(prompts["condition"]) == {"A", "B", "C"}
    summary = sc.review_summary(bank)
    assert summary.loc[0, "language"] == "hi" and summary.loc[0, "minor_edits"] == 1


def test_missing_condition_names_line_and_column(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[3]["prompt_b"] = ""
    with pytest.raises(DataError, match=r"scenarios.csv line 5, column prompt_b: empty prompt_b \(condition B"):
        sc.load_bank(_bank(tmp_path, rows), languages=["en", "hi"])


@pytest.mark.parametrize("edit,message", [
    (lambda rows: rows[2].update(language=""), r"line 4, column language: empty language"),
    (lambda rows: rows[6].update(dimension="XYZ"), r"line 8, column dimension: dimension \(from rubrics.yaml\) is not one of "
                                                   r"IDV, PDI, got 'XYZ'"),
    (lambda rows: rows[5].update(scenario_id="PDI-f-1", language="en"),
     r"line 7: duplicate row for scenario_id 'PDI-f-1', language 'en' \(first at line 6\)"),
    (lambda rows: rows[0].update(scenario_id=" "), r"line 2, column scenario_id: empty scenario_id"),
    (lambda rows: [r.pop("translation_status") for r in rows], r"line 1: missing column\(s\) translation_status"),
])
def test_scenario_bank_schema_names_file_line_and_column(tmp_path, edit, message):
    """The scenario bank's schema, at both entry points that read it (the bank and the calibration set)."""
    from stereolens.studies.pcs.calibration import load_calibration_inputs

    rows = [dict(r) for r in ROWS]
    edit(rows)
    path = _bank(tmp_path, rows)
    for load in (lambda: sc.load_bank(path, languages=["en", "hi"]), lambda: load_calibration_inputs(path)):
        with pytest.raises(DataError, match=rf"^scenario bank {path / 'scenarios.csv'} {message}") as err:
            load()
        assert "\n" not in str(err.value)


def test_missing_language_names_scenario(tmp_path):
    rows = [r for r in ROWS if not (r["scenario_id"] == "IDV-w-1" and r["language"] == "hi")]
    with pytest.raises(DataError, match=r"scenario IDV-w-1 lacks language hi"):
        sc.load_bank(_bank(tmp_path, rows), languages=["en", "hi"])


@pytest.mark.parametrize(
    "lang,cue,marker",
    [("en", "Priya from the team disagrees.", "Priya"), ("hi", "वह भारत में है।", "भारत")],
)
def test_marker_in_prompt_c_is_refused(tmp_path, lang, cue, marker):
    rows = [dict(r) for r in ROWS]
    idx = next(i for i, r in enumerate(rows) if r["scenario_id"] == "PDI-f-1" and r["language"] == lang)
    rows[idx] = _row("PDI-f-1", "PDI", "family", lang, c=cue)
    with pytest.raises(DataError, match=rf"scenario PDI-f-1 language {lang}: Prompt C contains the indexical marker '{marker}'"):
        sc.load_bank(_bank(tmp_path, rows))


def test_markers_match_case_insensitive_substrings():
    assert sc.contains_marker("They moved to INDIA last year", "india")
    assert sc.contains_marker("The Indians arrived", "Indian")  # inflected forms are caught too
    assert not sc.contains_marker("A calm family dinner", "India")


def test_rubric_anchor_missing_is_refused(tmp_path):
    path = _bank(tmp_path, ROWS)
    broken = {"PDI": [{"name": "directness", "anchors": {1: "a", 7: "c"}}]}
    (path / "rubrics.yaml").write_text(yaml.safe_dump(broken), encoding="utf-8")
    with pytest.raises(DataError, match=r"PDI/directness needs anchors 1, 4 and 7"):
        sc.load_bank(path)


def test_repository_bank_passes_its_own_check(repo_root):
    bank_dir = repo_root / "data" / "seed" / "pcs"
    languages = ["en", "de", "hi", "ne", "ur"]
    bank = sc.load_bank(bank_dir, languages=languages)
    # 3 dimensions x 4 domains x 5 scenarios, each in all 5 languages
    assert bank.scenarios["scenario_id"].nunique() == 60 and len(bank.scenarios) == 60 * 5
    per_scenario = bank.scenarios.groupby("scenario_id")["language"].agg(lambda s: ",".join(sorted(s)))
    assert (per_scenario == ",".join(sorted(languages))).all()
    cells = bank.scenarios.drop_duplicates("scenario_id").groupby(["dimension", "domain"]).size()
    assert len(cells) == 12 and (cells == 5).all()
    assert set(cells.index.get_level_values(0)) == set(bank.rubrics) and all(len(f) == 4 for f in bank.rubrics.values())
    # every non-English translation has a review record per condition
    assert len(bank.reviews) == 60 * 4 * 3


REVIEW = {"scenario_id": "PDI-w-1", "language": "hi", "condition": "C", "register_naturalness": "3",
          "address_forms": "3", "dilemma_preservation": "3", "no_calques": "2", "decision": "minor edits",
          "reviewer": "r1"}


@pytest.mark.parametrize(
    "change,message",
    [
        ({"no_calques": "6"}, r"line 3, column no_calques \(scenario PDI-w-1, language hi, condition C\): no_calques is '6', expected a score 1-5"),
        ({"address_forms": ""}, r"line 3, column address_forms .*address_forms is '', expected a score 1-5"),
        ({"decision": ""}, r"line 3, column decision .*decision '' is not one of"),
        ({"reviewer": "authored"}, r"line 3, column register_naturalness .*reviewer is 'authored' \(unreviewed\) but register_naturalness, address_forms, "
                                   r"dilemma_preservation, no_calques, decision are filled in"),
        ({"reviewer": ""}, r"line 3, column reviewer .*empty reviewer"),
    ],
)
def test_incomplete_review_record_is_refused_naming_the_row(tmp_path, change, message):
    path = _bank(tmp_path, ROWS)
    blank = {**REVIEW, "reviewer": "authored", **{c: "" for c in sc.REVIEW_CRITERIA}, "decision": ""}
    pd.DataFrame([blank, {**REVIEW, **change}]).to_csv(path / "translation_reviews.csv", index=False)
    with pytest.raises(DataError, match=message) as err:
        sc.load_bank(path, languages=["en", "hi"])
    assert "\n" not in str(err.value)


def test_review_file_without_a_criterion_column_is_refused(tmp_path):
    path = _bank(tmp_path, ROWS)
    pd.DataFrame([REVIEW]).drop(columns="no_calques").to_csv(path / "translation_reviews.csv", index=False)
    with pytest.raises(DataError, match="missing column.*no_calques"):
        sc.load_bank(path)


def test_collect_stops_on_a_bad_review_with_one_line(tmp_path, monkeypatch, capsys):
    from stereolens.cli import main

    (tmp_path / "bank").mkdir()
    bank = _bank(tmp_path / "bank", ROWS)
    pd.DataFrame([{**REVIEW, "register_naturalness": "9"}]).to_csv(bank / "translation_reviews.csv", index=False)
    params = {
        "model": {"id": "none", "name": "none", "kind": "causal", "backend": "hf"}, "language": {"include": None},
        "tracking": {"enabled": False}, "seed": 0,
        "study": {"pcs": {"bank": str(bank), "languages": ["en", "hi"], "collection": {"samples": 1}}},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["stage", "pcs-collect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2, column register_naturalness (scenario PDI-w-1, language hi, condition C): register_naturalness is '9'" in err[0]
