"""Label Studio exports recorded from the real application (tests/annotation/fixtures/label_studio,
RECORDED_WITH.json names the version) back into the pipeline: every task kind, every format.

The answers are the ones tests/annotation/label_studio/driver.py submits (ANSWERS, REVIEW_ANSWERS): users 1 (lead),
2 and 3 answer each of three tasks, and user 3 answers the first task a second time, later, and that
second answer is the one that counts.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from stereolens.annotation.scales import YES_NO
from stereolens.annotation.tasks import import_judgements
from stereolens.errors import DataError
from stereolens.studies.pcs.human_validation import PAIRWISE_SCALE, TIE
from stereolens.studies.pairs.review import REVIEW_SCALE, apply_review
from stereolens.studies.stereo import validation as v

FIXTURES = Path(__file__).parent / "fixtures" / "label_studio"
FORMATS = ("json", "min.json", "csv")
LEAD, A, B = "1", "2", "3"


def export(kind: str, fmt: str) -> Path:
    return FIXTURES / f"{kind}.{fmt}"


def table(df: pd.DataFrame) -> list[tuple]:
    return [tuple(r) for r in df[["item_id", "annotator_id", "label"]].itertuples(index=False)]


def by_user(items, answers):
    """(item, user, label) in item order, users in id order."""
    return sorted((i, u, lab) for i, row in zip(items, answers) for u, lab in zip((LEAD, A, B), row))


PCS = by_user(["pv-1", "pv-2", "pv-3"], [("1", "2", "1"), ("2", "2", "1"), (TIE, "1", "2")])
TUPLES = by_user(["Bamon::Caste", "Kharvi::Fishing", "Render::Toddy"],
                 [("yes", "no", "yes"), ("no", "no", "yes"), ("yes", "yes", "no")])
REVIEW = by_user(["s1", "s2", "s3"], [("keep", "keep", "keep"), ("rewrite", "remove", "rewrite"),
                                      ("remove", "keep", "keep")])
STEREO = by_user(["Mexico-gender-001", "Mexico-gender-002", "Mexico-gender-003"], [(5, 4, 5), (4, 4, 5), (3, 5, 4)])


def test_fixtures_were_recorded_by_label_studio():
    recorded = json.loads((FIXTURES / "RECORDED_WITH.json").read_text())
    assert recorded["label_studio"] == "1.23.2"
    assert recorded["recorded"] == "2026-11-27"
    assert recorded["users"] == {"lead": 1, "a": 2, "b": 3}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind, scale, expected", [
    ("pairwise_tasks", PAIRWISE_SCALE, PCS),
    ("tuple_tasks", YES_NO, TUPLES),
    ("sentence_review", REVIEW_SCALE, REVIEW),
])
def test_every_export_format_gives_the_same_judgements(kind, scale, expected, fmt):
    df = import_judgements(export(kind, fmt), scale)
    assert sorted(table(df)) == expected
    assert (df["source"] == "human").all()
    # one answer per (item, annotator): user 3's second answer to the first task replaced the first
    assert len(df) == 9
    first = df[(df["annotator_id"] == B) & (df["item_id"] == expected[0][0])]
    assert len(first) == 1 and first["annotation_id"].iloc[0] == df["annotation_id"].max()


@pytest.mark.parametrize("fmt", FORMATS)
def test_stereo_scores_come_from_each_tasks_own_country_options(fmt):
    df = import_judgements(export("validation", fmt), v.figure_d1_scale())
    assert sorted(table(df)) == STEREO
    # the item's provenance is kept apart from the annotation's (issue 25, item 6)
    assert (df["item_source"] == "machine").all() and (df["source"] == "human").all()


def todays_task_files(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("ls_driver", Path(__file__).parent / "label_studio" / "driver.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    return driver.task_files(tmp_path)


def test_fixture_configs_are_what_the_studies_write_today(tmp_path):
    for kind, paths in todays_task_files(tmp_path).items():
        assert paths["label_config"].read_text() == (FIXTURES / f"{kind}.label_config.xml").read_text(), kind


def test_stereo_tasks_show_the_country_not_a_placeholder(tmp_path):
    files = todays_task_files(tmp_path)["validation"]
    config = files["label_config"].read_text()
    tasks = json.loads(files["label_studio"].read_text())
    assert "<country>" not in config and "&lt;country&gt;" not in config
    assert ET.fromstring(config).find("Choices").get("value") == "$choices"
    assert tasks[0]["data"]["choices"][0]["value"] == "Casi todo el mundo en México cree este estereotipo."


def test_sentence_review_config_collects_rewrite_and_reason(tmp_path):
    config = ET.fromstring(todays_task_files(tmp_path)["sentence_review"]["label_config"].read_text())
    assert [t.get("name") for t in config.iter("TextArea")] == ["rewrite", "reason"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_review_export_applies_the_latest_decision(fmt):
    sentences = pd.DataFrame({"sentence_id": ["s1", "s2", "s3"], "sentence": ["one", "two", "three"],
                              "review_status": "unreviewed", "review_reason": ""})
    kept, removed = apply_review(sentences, export("sentence_review", fmt))
    # user 3 answered last on every sentence: keep, rewrite ("(made up) A Bamon wrote."), keep
    assert kept["sentence"].tolist() == ["one", "(made up) A Bamon wrote.", "three"]
    assert kept["review_status"].tolist() == ["reviewed:keep", "reviewed:rewrite", "reviewed:keep"]
    assert kept["review_reason"].tolist()[1] == "odd" and removed.empty


def test_resolution_does_not_depend_on_row_order(tmp_path):
    rows = pd.read_csv(export("pairwise_tasks", "csv"), dtype=str, keep_default_na=False)
    flipped = tmp_path / "flipped.csv"
    rows.iloc[::-1].to_csv(flipped, index=False)
    same = import_judgements(flipped, PAIRWISE_SCALE)
    assert table(same) == table(import_judgements(export("pairwise_tasks", "csv"), PAIRWISE_SCALE))


def test_stereo_panels_credit_label_studio_users_to_team_ids(tmp_path):
    items = pd.DataFrame({"item_id": ["Mexico-gender-001", "Mexico-gender-002", "Mexico-gender-003"],
                          "panel": "Mexico/gender"})
    demo = {c: vals[0] for c, vals in v.DEMOGRAPHIC_VALUES.items()}
    team = pd.DataFrame([{"annotator_id": f"MX-{n}", "panel": "Mexico/gender", "label_studio_user": user, **demo}
                         for n, user in (("01", LEAD), ("02", A), ("03", B))])
    team.to_csv(tmp_path / "annotators.csv", index=False)
    for fmt in FORMATS:
        judgements, _ = v.import_panels(export("validation", fmt), tmp_path / "annotators.csv", v.figure_d1_scale(), items)
        assert sorted(judgements["annotator_id"].unique()) == ["MX-01", "MX-02", "MX-03"]
    team.iloc[:2].to_csv(tmp_path / "annotators.csv", index=False)
    with pytest.raises(DataError, match="Label Studio user\\(s\\) 3 are not in the annotator map"):
        v.import_panels(export("validation", "csv"), tmp_path / "annotators.csv", v.figure_d1_scale(), items)


@pytest.mark.parametrize("text, message", [
    ("[]", "holds no annotated task"),
    ('[{"id": 1, "data": {"item_id": "t1"}, "annotations": []}]', "holds no submitted annotations"),
    ('[{"id": 1, "text": "x"}]', "neither a Label Studio JSON export .* nor JSON-MIN"),
    ("annotation_id,annotator,id,item_id,label\n", "holds no submitted annotations"),
    ("", "are empty"),
])
def test_empty_or_unrecognised_export_is_refused(tmp_path, text, message):
    path = tmp_path / ("export.csv" if "," in text or not text else "export.json")
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        import_judgements(path, YES_NO)


def test_cli_imports_every_study_scale_by_name(tmp_path, capsys):
    from stereolens.cli import main

    for kind, scale in (("pairwise_tasks", "pairwise_preference"), ("sentence_review", "sentence_review"),
                        ("validation", "figure_d1"), ("tuple_tasks", "yes_no")):
        out = tmp_path / f"{kind}.csv"
        assert main(["annotation", "import", "--input", str(export(kind, "min.json")), "--scale", scale,
                     "--output", str(out)]) == 0
        assert len(pd.read_csv(out)) == 9
    assert "9 judgements, 3 items, 3 annotators" in capsys.readouterr().out
    users = tmp_path / "users.csv"
    users.write_text("label_studio_user,annotator_id\n1,lead\n2,goa-02\n3,goa-03\n")
    main(["annotation", "import", "--input", str(export("tuple_tasks", "csv")), "--scale", "yes_no",
          "--annotator-map", str(users), "--output", str(tmp_path / "mapped.csv")])
    assert sorted(pd.read_csv(tmp_path / "mapped.csv")["annotator_id"].unique()) == ["goa-02", "goa-03", "lead"]
    # Label Studio's own user list (GET /api/users, recorded as docs/annotation.md fetches it) credits each user
    # to their email
    main(["annotation", "import", "--input", str(export("tuple_tasks", "json")), "--scale", "yes_no",
          "--annotator-map", str(FIXTURES / "users.json"), "--output", str(tmp_path / "emails.csv")])
    assert sorted(pd.read_csv(tmp_path / "emails.csv")["annotator_id"].unique()) == [
        "ann-a@example.org", "ann-b@example.org", "lead@example.org"]
    users.write_text("label_studio_user,annotator_id\n1,lead\n2,goa-02\n")
    assert main(["annotation", "import", "--input", str(export("tuple_tasks", "csv")), "--scale", "yes_no",
                 "--annotator-map", str(users), "--output", str(tmp_path / "refused.csv")]) == 2
    assert "Label Studio user(s) 3 are not in the annotator map" in capsys.readouterr().err


def test_cli_help_lists_the_study_scales(capsys):
    from stereolens.cli import main

    with pytest.raises(SystemExit):
        main(["annotation", "import", "--help"])
    help_text = capsys.readouterr().out
    for name in ("pairwise_preference", "sentence_review", "figure_d1", "yes_no", "likert5"):
        assert name in help_text


def test_stage_round_reads_an_export(tmp_path, repo_root):
    """pcs / pairs stages call collect_judgements with the configured path: an export goes straight in."""
    import yaml

    from stereolens.annotation.config import AnnotationConfig
    from stereolens.annotation.round import collect_judgements, review_round

    raw = yaml.safe_load((repo_root / "conf" / "annotation" / "human.yaml").read_text())
    cfg = AnnotationConfig.from_config({**raw, "scale": "yes_no"})
    items = pd.DataFrame({"item_id": ["Bamon::Caste", "Kharvi::Fishing", "Render::Toddy"]})
    for fmt in FORMATS:
        judgements = collect_judgements(cfg, items, judgements_path=export("tuple_tasks", fmt))
        review = review_round(judgements, cfg, study="pairs", artefact=fmt, items=items, gate=False)
        assert review.source == "human" and len(review.aggregated) == 3


def test_review_decision_follows_time_not_row_order(tmp_path):
    """Two reviewers disagree; the file lists the later decision first: the later one counts."""
    path = tmp_path / "review.csv"
    path.write_text("item_id,annotator_id,label,rewrite,reason,timestamp\n"
                    "s1,r2,remove,,off-topic,2026-01-02T10:00:00Z\n"
                    "s1,r1,keep,,,2026-01-01T10:00:00Z\n")
    sentences = pd.DataFrame({"sentence_id": ["s1"], "sentence": ["one"], "review_status": "unreviewed",
                              "review_reason": ""})
    kept, removed = apply_review(sentences, path)
    assert kept.empty and removed["review_reason"].tolist() == ["off-topic"]


# A round left unfinished, recorded (driver.UNFINISHED): on the first tuple the lead said yes, user 2 no and user 3
# skipped; user 3 skipped the second tuple and nobody else touched it; nobody touched the third.  "all" exports
# were made with download_all_tasks=true, the others as the Export button makes them.
UNFINISHED_FORMATS = ("json", "min.json", "csv", "all.json", "all.min.json", "all.csv")


def test_unfinished_exports_are_what_label_studio_writes():
    """The recorded shapes the import relies on (a re-recording that changes them fails here first)."""
    def records(fmt):
        path = export("unfinished", fmt)
        if fmt.endswith("csv"):
            return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict(orient="records")
        return json.loads(path.read_text())

    tasks = {t["data"]["item_id"]: t["annotations"] for t in records("json")}
    # JSON: the skipped annotations are there (no result, was_cancelled); the untouched task is not
    assert sorted(tasks) == ["Bamon::Caste", "Kharvi::Fishing"]
    assert [(a["completed_by"], a["was_cancelled"], a["result"] == []) for a in tasks["Kharvi::Fishing"]] == [(3, True, True)]
    assert {t["data"]["item_id"]: len(t["annotations"]) for t in records("all.json")}["Render::Toddy"] == 0
    # JSON-MIN and CSV: skipped annotations are left out, and a task with nothing else with them
    for fmt in ("min.json", "csv"):
        assert sorted((r["item_id"], str(r["annotator"])) for r in records(fmt)) == [("Bamon::Caste", LEAD), ("Bamon::Caste", A)]
    # every task: the untouched one is a record with no annotator and no annotation id (null, or blank in CSV)
    untouched = [r for r in records("all.min.json") if r["item_id"] == "Render::Toddy"]
    assert [(r["annotator"], r["annotation_id"]) for r in untouched] == [(None, None)]
    untouched = [r for r in records("all.csv") if r["item_id"] == "Render::Toddy"]
    assert [(r["annotator"], r["annotation_id"]) for r in untouched] == [("", "")]


@pytest.mark.parametrize("fmt", UNFINISHED_FORMATS)
def test_unfinished_round_imports_the_submitted_answers_only(fmt):
    df = import_judgements(export("unfinished", fmt), YES_NO)
    assert sorted(table(df)) == [("Bamon::Caste", LEAD, "yes"), ("Bamon::Caste", A, "no")]


@pytest.mark.parametrize("fmt", UNFINISHED_FORMATS)
def test_pairs_stage_names_the_tuples_nobody_judged(tmp_path, repo_root, fmt):
    """Skipped or untouched, and whether the export lists the task or not: the tuple is unjudged, and the stage says
    which before writing anything (it would otherwise count as rejected)."""
    import yaml

    from stereolens.annotation.config import AnnotationConfig
    from stereolens.studies.pairs.validation import validate_tuples

    raw = yaml.safe_load((repo_root / "conf" / "annotation" / "human.yaml").read_text())
    tuples = pd.DataFrame({"tuple_id": ["Bamon::Caste", "Kharvi::Fishing", "Render::Toddy"],
                           "group": ["Bamon", "Kharvi", "Render"], "attribute": ["Caste", "Fishing", "Toddy"]})
    with pytest.raises(DataError, match=r"2 item\(s\) nobody judged, which would count as rejected: "
                                        r"'Kharvi::Fishing', 'Render::Toddy'"):
        validate_tuples(tuples, AnnotationConfig.from_config({**raw, "scale": "yes_no"}), region="Goa",
                        judgements_path=export("unfinished", fmt), valid_share=0.5, seed=0, min_yes=2,
                        enforce_gate=False, judgements_out=tmp_path / "judgements.csv", report_dir=tmp_path / "report")
    assert not (tmp_path / "report").exists() and not (tmp_path / "judgements.csv").exists()


@pytest.mark.parametrize("fmt, message", [
    ("json", "holds no submitted annotations"),       # three tasks, each with one skipped annotation
    ("min.json", "holds no annotated task"),          # [] : the skips and their tasks are left out
    ("csv", "holds no submitted annotations"),        # the header alone
])
def test_a_round_of_skips_only_is_refused_in_one_line(tmp_path, capsys, fmt, message):
    from stereolens.cli import main

    with pytest.raises(DataError, match=message):
        import_judgements(export("skipped", fmt), YES_NO)
    assert main(["annotation", "import", "--input", str(export("skipped", fmt)), "--scale", "yes_no",
                 "--output", str(tmp_path / "out.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stereolens: error: ") and message in err[0]
    assert not (tmp_path / "out.csv").exists()


def test_a_refused_user_list_request_is_named(tmp_path):
    """What Label Studio 1.23.2 answers GET /api/users when the personal access token itself is sent as the Bearer
    token (it is a refresh token, to be traded for an access token first): saved by `curl > users.json`."""
    from stereolens.annotation.label_studio import read_annotator_map

    answer = tmp_path / "users.json"
    answer.write_text(json.dumps({"id": "67ededbc-0f47-49c7-87eb-92976c1d1939", "status_code": 401, "version": "1.23.2",
                                  "detail": "Authentication credentials were not provided.", "exc_info": None}))
    with pytest.raises(DataError, match=r"Label Studio refused the request \(401: Authentication credentials were not "
                                        r"provided\.\), so this is no user list"):
        read_annotator_map(answer)
    assert read_annotator_map(FIXTURES / "users.json") == {"1": "lead@example.org", "2": "ann-a@example.org",
                                                             "3": "ann-b@example.org"}


def test_a_time_without_fraction_of_a_second_still_orders_the_answers(tmp_path):
    """Label Studio writes no fraction of a second when it is zero; such a time must parse like the others, or the
    answer would sort first and lose to an earlier one.  User 3 answered task 4 twice: annotation 20 at 06:13:23.049;
    annotation 17, moved here to 06:13:24 sharp and to "No", is the later one and counts (whatever the ids say)."""
    records = json.loads(export("tuple_tasks", "min.json").read_text())
    later = next(r for r in records if r["annotation_id"] == 17)
    later.update(updated_at="2026-11-27T06:13:24Z", label="No")
    path = tmp_path / "export.min.json"
    path.write_text(json.dumps(records))
    df = import_judgements(path, YES_NO)
    answer = df[(df["item_id"] == "Bamon::Caste") & (df["annotator_id"] == B)]
    assert answer[["label", "annotation_id"]].values.tolist() == [["no", 17]]


def test_stereo_demographics_credit_each_user_once(tmp_path):
    """The label_studio_user column of the stereo demographics is an annotator map: a user on two rows (two team
    ids for one person) is refused naming the row; a row with no user maps nobody."""
    items = pd.DataFrame({"item_id": ["Mexico-gender-001", "Mexico-gender-002", "Mexico-gender-003"],
                          "panel": "Mexico/gender"})
    demo = {c: vals[0] for c, vals in v.DEMOGRAPHIC_VALUES.items()}
    rows = [("MX-01", LEAD), ("MX-02", A), ("MX-03", B), ("MX-04", "")]
    team = pd.DataFrame([{"annotator_id": aid, "panel": "Mexico/gender", "label_studio_user": user, **demo}
                         for aid, user in rows])
    team.to_csv(tmp_path / "annotators.csv", index=False)
    judgements, _ = v.import_panels(export("validation", "json"), tmp_path / "annotators.csv", v.figure_d1_scale(), items)
    assert sorted(judgements["annotator_id"].unique()) == ["MX-01", "MX-02", "MX-03"]
    team.loc[3, "label_studio_user"] = B
    team.to_csv(tmp_path / "annotators.csv", index=False)
    with pytest.raises(DataError, match=r"annotators.csv line 5, column label_studio_user: Label Studio user '3' is "
                                        r"mapped twice \(first at line 4, column label_studio_user\)"):
        v.import_panels(export("validation", "json"), tmp_path / "annotators.csv", v.figure_d1_scale(), items)
