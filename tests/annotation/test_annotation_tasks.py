"""Task export (CSV, Label Studio) and judgement import with schema validation."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from stereolens.annotation.scales import LIKERT5, SLIDER_50, YES_NO, scale_from_config
from stereolens.annotation.tasks import export_tasks, import_judgements
from stereolens.errors import ConfigError, DataError

ITEMS = pd.DataFrame({"item_id": ["t1", "t2", "t3"], "text": ["(Bhatkars, rich)", "(Kharvis, fishermen)", "(Render, toddy)"],
                      "group": ["Bhatkar", "Kharvi", "Render"]})


def write(tmp_path, text, name="judgements.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_export_writes_csv_label_studio_and_config(tmp_path):
    paths = export_tasks(ITEMS, YES_NO, 'Is this a "recognisable" stereotype in Goa?', tmp_path, name="tuples")
    table = pd.read_csv(paths["csv"])
    assert table["item_id"].tolist() == ["t1", "t2", "t3"]
    assert (table["options"] == "Yes | No").all() and (table["scale"] == "yes_no").all()
    tasks = json.loads(paths["label_studio"].read_text())
    assert tasks[1]["data"] == {"item_id": "t2", "text": "(Kharvis, fishermen)", "group": "Kharvi"}
    config = ET.fromstring(paths["label_config"].read_text())
    assert [c.get("value") for c in config.iter("Choice")] == ["Yes", "No"]
    assert config.find("Header").get("value").startswith('Is this a "recognisable"')


def test_export_slider_uses_number_control(tmp_path):
    paths = export_tasks(ITEMS, SLIDER_50, "Rate.", tmp_path)
    number = ET.fromstring(paths["label_config"].read_text()).find("Number")
    assert (number.get("min"), number.get("max")) == ("-50", "50")


def test_import_valid_judgements(tmp_path):
    path = write(tmp_path, "item_id,annotator_id,label,timestamp,age\nt1,a1,Yes,2025-01-01,30\nt1,a2,no,2025-01-01,41\n")
    df = import_judgements(path, YES_NO, known_items=ITEMS["item_id"])
    assert df["label"].tolist() == ["yes", "no"] and (df["source"] == "human").all()
    assert "age" in df.columns


def test_import_likert_coerces_numbers(tmp_path):
    df = import_judgements(write(tmp_path, "item_id,annotator_id,label\nt1,a1,4\nt2,a1,1.0\n"), LIKERT5)
    assert df["label"].tolist() == [4.0, 1.0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("item,annotator_id,label\nt1,a1,yes\n", "lack column\\(s\\) item_id"),
        ("item_id,annotator_id,label\nt1,a1,yes\nt2,a1,maybe\n", "line 3, column label .*'maybe' is not one of"),
        ("item_id,annotator_id,label\nt1,a1,yes\nt2,a1,no\nt1,a1,no\n", "line 4: duplicate judgement of item 't1' by annotator 'a1' \\(first at line 2\\)"),
        ("item_id,annotator_id,label\nt1,a1,yes\nt9,a1,no\n", "line 3: unknown item_id 't9'"),
        ("item_id,annotator_id,label\nt1,,yes\n", "line 2: empty annotator_id"),
    ],
)
def test_import_rejects_bad_rows(tmp_path, text, message):
    with pytest.raises(DataError, match=message):
        import_judgements(write(tmp_path, text), YES_NO, known_items=ITEMS["item_id"])


def test_import_out_of_range_slider(tmp_path):
    with pytest.raises(DataError, match="line 2, column label .*outside \\[-50.0, 50.0\\]"):
        import_judgements(write(tmp_path, "item_id,annotator_id,label\nt1,a1,51\n"), SLIDER_50)


def test_repeat_column_allows_second_answer(tmp_path):
    path = write(tmp_path, "item_id,annotator_id,label,repeat\nt1,a1,3,0\nt1,a1,4,1\n")
    df = import_judgements(path, LIKERT5)
    assert df["repeat"].tolist() == [0, 1]
    with pytest.raises(DataError, match="line 3: duplicate"):
        import_judgements(write(tmp_path, "item_id,annotator_id,label,repeat\nt1,a1,3,0\nt1,a1,4,0\n"), LIKERT5)


def test_import_label_studio_export(tmp_path):
    tasks = [
        {"id": 1, "data": {"item_id": "t1", "text": "x"}, "annotations": [
            {"completed_by": 7, "created_at": "2025-01-01", "result": [{"value": {"choices": ["Yes"]}}]},
            {"completed_by": 8, "was_cancelled": True, "result": []},
        ]},
        {"id": 2, "data": {"item_id": "t2", "text": "y"}, "annotations": [
            {"completed_by": 7, "result": [{"value": {"choices": ["No"]}}]},
        ]},
    ]
    path = write(tmp_path, json.dumps(tasks), "export.json")
    df = import_judgements(path, YES_NO, known_items=ITEMS["item_id"])
    assert df[["item_id", "annotator_id", "label"]].values.tolist() == [["t1", "7", "yes"], ["t2", "7", "no"]]


def test_scale_config():
    assert scale_from_config("likert5") is LIKERT5
    custom = scale_from_config({"name": "valid3", "level": "ordinal", "options": [0, 1, 2]})
    assert custom.coerce("2") == 2
    with pytest.raises(ConfigError):
        scale_from_config("nope")
