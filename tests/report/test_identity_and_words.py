"""The run's identity (report/identity.py) and the words the report uses for gates (report/words.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import yaml

from stereolens.report.identity import lock_digest, run_identity
from stereolens.report.words import expectation_words, gate_name, panel_gate_words

LOCK = {"schema": "2.0", "stages": {
    "crows_score@m": {"cmd": "stereolens stage crows-score --model m", "outs": [{"path": "scores.csv", "md5": "a1"}]},
    "report": {"cmd": "stereolens stage report", "outs": [{"path": "reports/index.html", "md5": "b2"}]}}}


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_lock_hash_ignores_the_report_stage_and_the_yaml_layout(tmp_path):
    lock = tmp_path / "dvc.lock"
    lock.write_text(yaml.safe_dump(LOCK), encoding="utf-8")
    # by hand: the stages but the report's, as sorted-key JSON
    expected = hashlib.sha256(json.dumps({"schema": "2.0", "stages": {"crows_score@m": LOCK["stages"]["crows_score@m"]}},
                                         sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    assert lock_digest(lock) == expected
    # DVC records the report stage after it ran: its entry does not change what the pages show
    report_rerun = {**LOCK, "stages": {**LOCK["stages"], "report": {"cmd": "x", "outs": [{"md5": "c3"}]}}}
    lock.write_text(yaml.safe_dump(report_rerun, default_flow_style=True, width=40), encoding="utf-8")
    assert lock_digest(lock) == expected
    # a study stage's new output does
    changed = {**LOCK, "stages": {**LOCK["stages"], "crows_score@m": {"cmd": "x", "outs": [{"md5": "zz"}]}}}
    lock.write_text(yaml.safe_dump(changed), encoding="utf-8")
    assert lock_digest(lock) != expected
    assert lock_digest(tmp_path / "none.lock") is None
    (tmp_path / "bad.lock").write_text("- a list\n", encoding="utf-8")
    assert lock_digest(tmp_path / "bad.lock") is None


def test_the_commit_and_uncommitted_changes_to_the_code(tmp_path):
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "x.py").write_text("x = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", "src/x.py")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    when = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    identity = run_identity(root, built=when)
    head = _git(root, "rev-parse", "HEAD")
    assert (identity.commit, identity.changed, identity.lock_sha256) == (head, False, None)
    assert identity.words() == f"report built 2025-03-04 05:06:07 UTC, commit {head[:12]}, no dvc.lock"
    # files the pipeline writes (untracked outputs) are no change to the code; an edit to src is
    (root / "reports").mkdir()
    (root / "reports" / "index.html").write_text("<html></html>")
    assert run_identity(root).changed is False
    (root / "src" / "x.py").write_text("x = 2\n")
    assert run_identity(root, built=when).words() == (
        f"report built 2025-03-04 05:06:07 UTC, commit {head[:12]} with uncommitted changes to its code or "
        "configuration, no dvc.lock")
    # a folder inside another work tree is not that work tree's run
    inner = root / "reports"
    assert run_identity(inner).commit is None


def test_gate_ids_in_words():
    assert gate_name("annotation_quality") == "annotation quality (agreement and coverage of the judgements)"
    assert gate_name("some_new_suite") == "some new suite"  # unknown ids: words, never underscores
    assert expectation_words({"expectation": "expect_column_min_to_be_between", "success": False,
                              "kwargs": {"column": "fleiss_kappa", "min_value": 0.4},
                              "observed_value": 0.3125}) == "Fleiss' kappa at least 0.4 (observed 0.312)"
    assert expectation_words({"expectation": "expect_column_max_to_be_between",
                              "kwargs": {"column": "max_abs_diff", "min_value": 0, "max_value": 1e-6},
                              "observed_value": "undefined"}) == (
        "largest difference from the published matrix between 0 and 1e-06 (observed undefined (could not be "
        "computed))")
    assert expectation_words({"expectation": "expect_column_mean_to_be_between",
                              "kwargs": {"column": "top_label_share", "max_value": 0.9}}) == (
        "mean of share of the most frequent label at most 0.9")
    assert expectation_words({"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": "label"},
                              "observed_value": {"unexpected_count": 3}}) == "no label missing (observed 3 value(s) outside)"
    assert panel_gate_words("construct_validity", {"observed": 0.458, "threshold": 0.8}) == (
        "construct validity at least 0.8 (observed 0.458)")
