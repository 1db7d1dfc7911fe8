"""Lineage and release audit on a real scratch DVC repository with a two-stage pipeline.

The pipeline: an "ingest" stage copies a seed table (with provenance columns, two
rows simulated and one an authored translation) into data/raw/bank with a
PROVENANCE.json, a "build" stage derives data/processed/items.csv from it with a
params key, and a "summarise" stage writes reports/toy/summary.json.  Everything
lineage and release report is checked against md5s, counts and rows known here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from stereolens.io import md5_file, sha256_file
from stereolens.lineage.release import ReleaseRefused, release
from stereolens.lineage.trace import format_lineage, trace

pytestmark = pytest.mark.slow

SEED = textwrap.dedent("""\
    item_id,text,source,translation_status
    q1,Nurses are kind.,human,source
    q2,Engineers are precise.,human,source
    q3,Lehrer sind streng.,human,authored
    q4,Farmers are strong.,simulated,source
    q5,Pilots are brave.,simulated,source
""")

INGEST = textwrap.dedent("""\
    import json, pathlib, shutil
    out = pathlib.Path("data/raw/bank"); out.mkdir(parents=True, exist_ok=True)
    shutil.copy("data/seed/bank.csv", out / "bank.csv")
    (out / "PROVENANCE.json").write_text(json.dumps({"dataset": "bank", "license": "CC BY 4.0",
        "attribution": "A. Author. 2024. The Bank.", "upstream_commit": "0123456789abcdef0123456789abcdef01234567", "source": "mirror",
        "files": [{"file": "bank.csv"}]}))
""")

BUILD = textwrap.dedent("""\
    import pandas as pd, yaml
    import pathlib
    pathlib.Path("data/processed").mkdir(parents=True, exist_ok=True)
    limit = yaml.safe_load(open("params.yaml"))["toy"]["limit"]
    frame = pd.read_csv("data/raw/bank/bank.csv").head(limit)
    frame.assign(length=frame["text"].str.len()).to_csv("data/processed/items.csv", index=False)
""")

SUMMARISE = textwrap.dedent("""\
    import json, pathlib, pandas as pd
    frame = pd.read_csv("data/processed/items.csv")
    pathlib.Path("reports/toy").mkdir(parents=True, exist_ok=True)
    json.dump({"headline": {"items": len(frame)}}, open("reports/toy/summary.json", "w"))
""")

DVC_YAML = {
    "stages": {
        "ingest": {"cmd": "python ingest.py", "deps": ["data/seed/bank.csv", "ingest.py"], "outs": ["data/raw/bank"]},
        "toy_build": {"cmd": "python build.py", "deps": ["data/raw/bank", "build.py"], "params": ["toy.limit"],
                      "outs": ["data/processed/items.csv"]},
        "toy_summarise": {"cmd": "python summarise.py", "deps": ["data/processed/items.csv", "summarise.py"],
                          "metrics": [{"reports/toy/summary.json": {"cache": False}}]},
        "toy_gate": {"cmd": "python gate.py", "deps": ["data/processed/items.csv", "gate.py"],
                     "metrics": [{"reports/toy/quality/toy__items.json": {"cache": False}}]},
    }
}

GATE = textwrap.dedent("""\
    import json, pathlib
    pathlib.Path("reports/toy/quality").mkdir(parents=True, exist_ok=True)
    json.dump({"study": "toy", "suite": "items", "success": True}, open("reports/toy/quality/toy__items.json", "w"))
""")

RELEASE = {"title": "Toy bank", "dataset": ["data/processed/items.csv"],
           "items": [{"path": "data/processed/items.csv", "id": ["item_id"]}], "gates": [], "agreement": [],
           "datasheet": {"motivation": "A test of the release audit."}}


def _run(cmd: list[str], cwd: Path) -> None:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("toy_repo")
    (root / "data/seed").mkdir(parents=True)
    (root / "data/seed/bank.csv").write_text(SEED, encoding="utf-8")
    for name, text in (("ingest.py", INGEST), ("build.py", BUILD), ("summarise.py", SUMMARISE), ("gate.py", GATE)):
        (root / name).write_text(text, encoding="utf-8")
    (root / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False), encoding="utf-8")
    (root / "params.yaml").write_text(yaml.safe_dump({"toy": {"limit": 4}}), encoding="utf-8")
    _run(["git", "init", "-q"], root)
    _run([sys.executable, "-m", "dvc", "init", "-q"], root)
    _run([sys.executable, "-m", "dvc", "repro", "-q"], root)
    return root


def test_lineage_names_every_stage_md5_param_source_and_provenance_count(repo):
    info = trace(repo / "reports/toy/summary.json", root=repo)
    assert [s["name"] for s in info["stages"]] == ["toy_summarise", "toy_build", "ingest"]
    assert info["md5_recorded"] == md5_file(repo / "reports/toy/summary.json") == info["md5_now"]
    assert info["up_to_date"] is True
    build = info["stages"][1]
    assert build["params"] == {"toy.limit": 4}
    (items_out,) = build["outs"]
    assert items_out == {"path": "data/processed/items.csv", "md5": md5_file(repo / "data/processed/items.csv")}
    assert {"path": "data/seed/bank.csv", "md5": md5_file(repo / "data/seed/bank.csv")} in info["inputs"]
    (record,) = info["ingested"]
    assert record["license"] == "CC BY 4.0" and record["upstream_commit"].startswith("0123456789")
    # limit 4: q1-q4 reach items.csv, one of them simulated and one an authored translation
    assert info["provenance"]["chain"]["data/processed/items.csv"] == {
        "source": {"human": 3, "simulated": 1}, "translation_status": {"authored": 1, "source": 3}}
    text = format_lineage(info)
    assert "toy.limit = 4" in text and "licence CC BY 4.0" in text
    # the credit CC BY asks for travels with the licence
    assert "attribution: A. Author. 2024. The Bank." in text and "files: bank.csv" in text


def test_lineage_sees_a_stale_artefact(repo, tmp_path):
    items = repo / "data/processed/items.csv"
    original = items.read_bytes()
    try:
        items.write_bytes(original + b"q9,extra,human,source,5\n")
        info = trace(items, root=repo)
        assert info["produced_by"] == "toy_build" and info["up_to_date"] is False
    finally:
        items.write_bytes(original)


def test_lineage_command_line_json(repo):
    proc = subprocess.run([sys.executable, "-m", "stereolens", "lineage", "data/processed/items.csv", "--json"],
                          cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["produced_by"] == "toy_build"
    assert info["provenance"]["artefact"] == {"data/processed/items.csv": {
        "source": {"human": 3, "simulated": 1}, "translation_status": {"authored": 1, "source": 3}}}


def test_release_refuses_naming_the_simulated_and_unreviewed_items(repo, tmp_path):
    with pytest.raises(ReleaseRefused) as caught:
        release("toy", RELEASE, tmp_path / "out", root=repo)
    message = str(caught.value)
    assert "2 item(s)" in message
    assert "data/processed/items.csv line 4: q3: translation_status=authored" in message
    assert "data/processed/items.csv line 5: q4: source=simulated" in message
    assert "q1" not in message and "q2" not in message
    assert not (tmp_path / "out").exists()


def test_release_with_allow_unreviewed_says_so_first_and_checksums_everything(repo, tmp_path):
    out = tmp_path / "out"
    result = release("toy", RELEASE, out, root=repo, allow_unreviewed=True)
    assert result["flagged"] == 2
    datasheet = (out / "DATASHEET.md").read_text(encoding="utf-8")
    assert datasheet.splitlines()[0].startswith("**UNREVIEWED RELEASE: 2 item(s)")
    for heading in ("## Motivation", "## Composition", "## Collection process", "## Uses", "## Distribution"):
        assert heading in datasheet
    assert "*A test of the release audit.*" in datasheet
    assert ("upstream commit `0123456789abcdef0123456789abcdef01234567`, licence CC BY 4.0; "
            "attribution: A. Author. 2024. The Bank.") in datasheet
    assert json.loads((out / "SOURCES.json").read_text(encoding="utf-8"))[0]["attribution"] == "A. Author. 2024. The Bank."
    assert (out / "data/data/processed/items.csv").read_bytes() == (repo / "data/processed/items.csv").read_bytes()
    sums = dict(reversed(line.split("  ", 1)) for line in (out / "SHA256SUMS").read_text().splitlines())
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {"SHA256SUMS"}
    assert set(sums) == files
    assert all(sha256_file(out / name) == digest for name, digest in sums.items())
    audit = (out / "AUDIT.csv").read_text(encoding="utf-8")
    assert "q4" in audit and "q3" in audit
    lineage = json.loads((out / "LINEAGE.json").read_text(encoding="utf-8"))
    assert [s["name"] for s in lineage["data/processed/items.csv"]["stages"]] == ["toy_build", "ingest"]


def test_a_clean_dataset_is_released_without_a_warning(repo, tmp_path):
    clean = {**RELEASE, "dataset": ["data/raw/bank/PROVENANCE.json"], "items": []}
    release("toy", clean, tmp_path / "out", root=repo)
    assert not (tmp_path / "out/DATASHEET.md").read_text(encoding="utf-8").startswith("**UNREVIEWED")


def test_a_failed_gate_blocks_the_release(repo, tmp_path):
    gate = repo / "reports/toy/quality/toy__items.json"  # the toy_gate stage's declared output
    passed = gate.read_text(encoding="utf-8")
    gate.write_text(json.dumps({"study": "toy", "suite": "items", "success": False, "results": []}))
    try:
        with pytest.raises(ReleaseRefused, match="gate items: gate failed"):
            release("toy", {**RELEASE, "dataset": ["data/raw/bank/PROVENANCE.json"], "items": [],
                            "gates": ["reports/toy/quality/toy__*.json"]}, tmp_path / "out", root=repo)
    finally:
        gate.write_text(passed, encoding="utf-8")


def test_release_ignores_a_gate_report_no_stage_declares_with_a_one_line_warning(repo, tmp_path, capsys):
    """A failing report a hand-run command left beside the stage's (a trial `annotation review`) is not the gate."""
    stray = repo / "reports/toy/quality/toy__annotation_quality.json"
    stray.write_text(json.dumps({"study": "toy", "suite": "annotation_quality", "success": False}))
    try:
        result = release("toy", {**RELEASE, "dataset": ["data/raw/bank/PROVENANCE.json"], "items": [],
                                 "gates": ["reports/toy/quality/toy__*.json"]}, tmp_path / "out", root=repo)
    finally:
        stray.unlink()
    assert result["gates"] == [{"file": "reports/toy/quality/toy__items.json", "suite": "items", "passed": True}]
    assert not (tmp_path / "out/gates/reports/toy/quality/toy__annotation_quality.json").exists()
    # (this repository has no commit and no remote: the release also warns that FETCH.json can name neither)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")
                and "gate report" in line]
    assert warnings == ["warning: release ignores gate report reports/toy/quality/toy__annotation_quality.json: "
                        "no DVC stage declares it as an output (a command run by hand wrote it)"]


def test_an_undeclared_gate_report_alone_counts_as_missing(repo, tmp_path):
    stray = repo / "reports/quality/toy__annotation_quality.json"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text(json.dumps({"study": "toy", "suite": "annotation_quality", "success": True}))
    try:
        with pytest.raises(ReleaseRefused, match=r"reports/quality/toy__\*\.json: gate report: gate report missing"):
            release("toy", {**RELEASE, "dataset": ["data/raw/bank/PROVENANCE.json"], "items": [],
                            "gates": ["reports/quality/toy__*.json"]}, tmp_path / "out", root=repo)
    finally:
        stray.unlink()


def test_qualified_provenance_values_are_still_flagged():
    """Studies qualify a status ("authored, not native-reviewed", "machine translation:gemma3-270m");
    the audit must read the status word, not require the bare value."""
    from stereolens.lineage.provenance import is_unreviewed, status_word

    assert status_word("Authored, not native-reviewed") == "authored"
    assert is_unreviewed("translation_status", "authored, not native-reviewed")
    assert is_unreviewed("source", "machine translation:gemma3-270m")
    assert is_unreviewed("source", "generator")
    assert not is_unreviewed("translation_status", "reviewed")
    assert not is_unreviewed("source", "CrowS-Pairs")
    assert not is_unreviewed("translation_status", "source")


def test_a_table_with_nothing_flagged_gives_no_rows_even_with_id_columns(tmp_path):
    """The stereo release crashed here: an empty selection joined its id columns into a frame, not a column."""
    from stereolens.lineage.provenance import unreviewed_rows

    table = tmp_path / "instances.csv"
    table.write_text("id,source\na1,CrowS-Pairs\na2,human\n", encoding="utf-8")
    assert unreviewed_rows(table, ["id"]).empty
    # authored by the project is unreviewed; the old review column is no provenance column any more
    table.write_text("id,source,review,validation_source\na1,authored,not_native_reviewed,human\na2,human,native,simulated\n",
                     encoding="utf-8")
    flagged = unreviewed_rows(table, ["id"])
    assert flagged[["row", "item", "reason"]].values.tolist() == [
        [2, "a1", "source=authored"], [3, "a2", "validation_source=simulated"]]


def test_a_declared_gate_without_a_report_blocks_and_a_missing_agreement_file_is_refused(repo, tmp_path):
    from stereolens.errors import ConfigError

    clean = {**RELEASE, "dataset": ["data/raw/bank/PROVENANCE.json"], "items": []}
    with pytest.raises(ReleaseRefused, match=r"reports/quality/toy__\*\.json: gate report: gate report missing"):
        release("toy", {**clean, "gates": ["reports/quality/toy__*.json"]}, tmp_path / "out", root=repo)
    with pytest.raises(ConfigError, match=r"release.toy.agreement: \['reports/toy/agreement.json'\] match"):
        release("toy", {**clean, "agreement": ["reports/toy/agreement.json"]}, tmp_path / "out", root=repo)
    assert not (tmp_path / "out").exists()


def test_the_refusal_names_every_file_with_flagged_items(repo, tmp_path):
    """A long first table must not hide the items of the next one (the pairs starter set hid the constructed pairs)."""
    from stereolens.lineage.release import _describe_problems

    import pandas as pd

    problems = pd.DataFrame([{"file": "a.csv", "row": i + 2, "item": f"a{i}", "reason": "source=simulated"}
                             for i in range(100)]
                            + [{"file": "b.csv", "row": 2, "item": "b0", "reason": "translation_status=machine"}])
    text = _describe_problems(problems)
    assert "a.csv: 100 item(s) (source=simulated: 100)" in text and "b.csv line 2: b0: translation_status=machine" in text
    assert "... and 80 more in a.csv" in text


def test_the_documented_release_folder_is_ignored_by_git():
    """docs/lineage-and-release.md writes trial releases to release/<study>: they must not be committed by accident."""
    repo_root = Path(__file__).resolve().parents[2]
    documented = "release/pcs/DATASHEET.md"
    assert "--output release/pcs" in (repo_root / "docs/lineage-and-release.md").read_text(encoding="utf-8")
    proc = subprocess.run(["git", "check-ignore", "-q", documented], cwd=repo_root, capture_output=True, text=True)
    assert proc.returncode == 0, f"{documented} is not ignored by git ({proc.stderr.strip()})"
