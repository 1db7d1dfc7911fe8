"""DVC's own comparison views as docs/running.md ("Comparing experiments") documents them (issue 33, part 2).

``dvc exp show`` on a repository holding this project's dvc.yaml, params.yaml and dvc.lock (hundreds of params,
138 dependency columns) and each study's headline for every model of the run, with one experiment that changed
a CrowS-Pairs param and so the CrowS headline of both models and the md5s of the CrowS outputs: the documented
flags leave the changed params and headline numbers and no dependency column, and the one-model view is readable
at 200 columns.  ``dvc plots show`` with the repository's ``.dvc/config`` writes a page that draws every plot in
headless Chromium from the Vega files shipped in ``dvc_plots_templates/``, requesting nothing from the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stereolens.stages.kit import write_study_summary

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS / "tracking"))
sys.path.insert(0, str(TESTS / "report"))
from chromium import open_browser  # noqa: E402
from test_dvc_surfaces import SUMMARIES, write_headlines, write_plot_sources  # noqa: E402

pytestmark = pytest.mark.slow

ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
# the commands docs/running.md shows ("Comparing experiments"), checked to be there word for word below
GRID = ["dvc", "exp", "show", "--only-changed", "--drop", ".*/"]
ONE_MODEL = ["dvc", "exp", "show", "--only-changed", "--drop", ".*/", "--drop", r".*\.smollm2-135m\."]
CHANGED_PARAM = "study.crows.limit"
CROWS_COLUMNS = ("bias_score", "share_untied", "ci_low", "ci_high")


def _run(root: Path, *command: str, columns: int | None = None) -> str:
    env = {**ENV, **({"COLUMNS": str(columns)} if columns else {})}
    if command[0] == "dvc":
        command = (sys.executable, "-m", "dvc", *command[1:])
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def _models() -> list[str]:
    return list(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["model_ids"])


def _experiment_changes(root: Path) -> None:
    """What `dvc exp run -S study.crows.limit=100 crows_report` changes: the param, the CrowS headline of every
    model, and in dvc.lock the md5s of the CrowS outputs (and of the stages that read them)."""
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    params["study"]["crows"]["limit"] = 100
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True), encoding="utf-8")
    for model in _models():
        moved = {**SUMMARIES["crows"], "bias_score": 0.62, "share_untied": 0.63, "ci_low": 0.51, "ci_high": 0.72}
        write_study_summary(root / f"reports/crows/{model}/summary.json", moved)
    lock = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8"))
    for stage in lock["stages"].values():
        for entry in [*stage.get("deps", []), *stage.get("outs", [])]:
            if re.match(r"(reports|data/processed)/crows/", entry.get("path", "")) and entry.get("md5"):
                digest = hashlib.md5(entry["md5"].encode()).hexdigest()
                entry["md5"] = digest + (".dir" if entry["md5"].endswith(".dir") else "")
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False), encoding="utf-8")


@pytest.fixture(scope="module")
def experiments(tmp_path_factory):
    """A git + DVC repository: the project's dvc.yaml, params.yaml and dvc.lock and every headline, committed;
    one experiment, ``limit100``, recorded as DVC records one (a commit on the baseline under DVC's
    ``refs/exps/...`` ref), so that ``dvc exp show`` lists it without running the pipeline."""
    from dvc.repo.experiments.refs import ExpRefInfo

    root = tmp_path_factory.mktemp("experiments")
    for name in ("dvc.yaml", "params.yaml", "dvc.lock"):
        shutil.copy(ROOT / name, root / name)
    _run(root, "git", "init", "-q")
    _run(root, "dvc", "init", "-q")
    write_headlines(root)
    _run(root, "git", "add", "-A")
    _run(root, "git", "commit", "-qm", "baseline")
    baseline = _run(root, "git", "rev-parse", "HEAD").strip()
    _experiment_changes(root)
    _run(root, "git", "add", "-A")
    tree = _run(root, "git", "write-tree").strip()
    commit = _run(root, "git", "commit-tree", tree, "-p", baseline, "-m", "limit100").strip()
    _run(root, "git", "update-ref", str(ExpRefInfo(baseline, "limit100")), commit)
    _run(root, "git", "reset", "-q", "--hard", baseline)
    return root


def _csv_columns(text: str) -> list[str]:
    return text.splitlines()[0].split(",")


def test_the_documented_commands_are_in_the_docs():
    text = (ROOT / "docs/running.md").read_text(encoding="utf-8")
    for command in (GRID, ONE_MODEL):
        shown = " ".join(c if re.fullmatch(r"[\w.-]+", c) else f"'{c}'" for c in command)
        assert shown in text, shown


def test_the_grid_shows_the_changed_param_and_headline_numbers_and_no_dependency(experiments):
    every = _csv_columns(_run(experiments, "dvc", "exp", "show", "--csv"))
    deps = [c for c in every if "/" in c]
    assert len(every) > 500 and len(deps) > 100, (len(every), len(deps))  # what a plain `dvc exp show` lays out
    grid = _csv_columns(_run(experiments, *GRID, "--csv"))
    expected = {f"crows.{model}.{name}" for model in _models() for name in CROWS_COLUMNS}
    assert set(grid) == {"Experiment", "rev", "typ", "Created", CHANGED_PARAM, *expected}, grid
    rows = _run(experiments, *GRID, "--csv").splitlines()
    assert any(row.startswith("limit100,") for row in rows), rows


def test_one_models_view_is_readable_at_200_columns(experiments):
    table = _run(experiments, *ONE_MODEL, columns=200)
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 200, table
    assert "…" not in table, table  # rich's mark for a column or cell it had no room for
    for name in CROWS_COLUMNS:
        assert f"crows.{_models()[0]}.{name}" in table, table
    assert CHANGED_PARAM in table and "limit100" in table, table
    limit_row = next(line for line in lines if "limit100" in line)
    assert "0.62" in limit_row and "100" in limit_row.split(), limit_row


def test_plots_show_draws_every_plot_offline(tmp_path):
    """`dvc plots show` with the repository's .dvc/config (plots.html_template): every plot div holds a drawn
    chart (canvas or svg) and every request the page makes is for a local file."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, root / name)
    _run(root, "dvc", "init", "--no-scm", "-q")
    shutil.copy(ROOT / ".dvc/config", root / ".dvc/config")
    shutil.copytree(ROOT / "dvc_plots_templates", root / "dvc_plots_templates")
    plots = write_plot_sources(root)
    _run(root, "dvc", "plots", "show")
    page = root / "dvc_plots/index.html"
    html = page.read_text(encoding="utf-8")
    assert "cdn.jsdelivr.net" not in html and not re.search(r"<script[^>]+src=\"https?:", html)
    count = ("JSON.stringify(Array.from(document.querySelectorAll('body > div'))"
             ".map(d => d.querySelectorAll('canvas, svg').length))")
    browser = open_browser(tmp_path / "browser")
    try:
        drawn, requested = browser.evaluate_when(page.as_uri(), count,
                                                 lambda v: bool(v) and all(n > 0 for n in json.loads(v)), timeout=60)
    finally:
        browser.close()
    drawn = json.loads(drawn or "[]")
    assert len(drawn) == len(plots) and all(n > 0 for n in drawn), (drawn, sorted(plots))
    assert requested and all(url.startswith("file://") for url in requested), requested
    assert sum("/dvc_plots_templates/vendor/" in url for url in requested) == 3, requested
