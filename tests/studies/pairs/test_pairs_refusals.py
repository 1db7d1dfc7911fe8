"""Inputs of the pairs study that would vanish without a word: tuples nobody judged, controls with no rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stereolens.errors import DataError
from stereolens.studies.pairs.validation import keep_tuples

REPO = Path(__file__).resolve().parents[3]
EXPORT = REPO / "tests/annotation/fixtures/label_studio/tuple_tasks.json"  # recorded from Label Studio
TUPLES = pd.DataFrame({"tuple_id": ["Bamon::Caste", "Kharvi::Fishing", "Render::Toddy"],
                       "group": ["Bamon", "Kharvi", "Render"], "attribute": ["Caste", "Fishing", "Toddy"]})


def test_a_tuple_nobody_judged_is_refused_not_counted_as_rejected():
    judgements = pd.DataFrame({"item_id": ["t1", "t1", "t3"], "annotator_id": ["a", "b", "a"], "label": ["yes"] * 3})
    items = pd.DataFrame({"item_id": ["t1", "t2", "t3", "t4"]})
    with pytest.raises(DataError, match=r"^j.csv: 2 item\(s\) nobody judged, which would count as rejected: 't2', 't4' "):
        keep_tuples(judgements, items, min_yes=2, where="j.csv")
    kept = keep_tuples(judgements, items.iloc[[0, 2]], min_yes=2, where="j.csv")
    assert kept["yes_votes"].tolist() == [2, 1] and kept["keep"].tolist() == [True, False]


def _validate(path: Path, out: Path):
    from stereolens.annotation.config import AnnotationConfig
    from stereolens.studies.pairs.validation import validate_tuples

    raw = yaml.safe_load((REPO / "conf/annotation/human.yaml").read_text(encoding="utf-8"))
    acfg = AnnotationConfig.from_config({**raw, "scale": "yes_no"})
    return validate_tuples(TUPLES, acfg, region="Goa", judgements_path=path, valid_share=0.5, seed=0, min_yes=2,
                           enforce_gate=False, judgements_out=out / "judgements.csv", report_dir=out / "report")


def test_a_label_studio_task_without_a_submitted_annotation_is_unjudged(tmp_path):
    """In a Label Studio export, a task nobody annotated has ``annotations: []`` and a skipped one only cancelled
    annotations: neither gives a judgement, and the refusal names both tasks' items before anything is written."""
    tasks = json.loads(EXPORT.read_text(encoding="utf-8"))
    full = _validate(EXPORT, tmp_path / "full")
    assert full.tuples["keep"].tolist() == [True, False, True]  # yes votes 2, 1, 2
    tasks[1]["annotations"] = [{**a, "was_cancelled": True} for a in tasks[1]["annotations"]]  # Kharvi: skipped
    tasks[2]["annotations"] = []  # Render: nobody annotated it
    (tmp_path / "export.json").write_text(json.dumps(tasks), encoding="utf-8")
    with pytest.raises(DataError, match=r"export.json: 2 item\(s\) nobody judged, which would count as rejected: "
                                        r"'Kharvi::Fishing', 'Render::Toddy' \(a Label Studio task with no submitted "
                                        r"annotation, or only skipped ones, is unjudged\)"):
        _validate(tmp_path / "export.json", tmp_path / "partial")
    assert not (tmp_path / "partial").exists()  # not even the task files


def test_header_only_controls_are_refused_not_dropped_with_lms(tmp_path, monkeypatch):
    """Without a control sentence no pair has a control, and the language modelling score would vanish from
    every table: a controls.csv with a header and no rows is refused, naming it."""
    from stereolens.studies.pairs.evaluation import evaluation_sets

    shutil.copytree(REPO / "data/seed/pairs", tmp_path / "data/seed/pairs")
    monkeypatch.chdir(tmp_path)
    table = evaluation_sets({"starter_per_dimension": 1, "crows": False}, "m")
    assert table["sent_control"].notna().all()
    (tmp_path / "data/seed/pairs/controls.csv").write_text("control_id,language,sentence\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"^control sentences data/seed/pairs/controls.csv has a header but no rows$"):
        evaluation_sets({"starter_per_dimension": 1, "crows": False}, "m")
