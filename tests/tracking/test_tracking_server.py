"""The pipeline against a shared MLflow tracking server, as a research group runs one (issue 33, part 4).

A real ``mlflow server`` on loopback (a temporary SQLite backend and artifact root, ``--serve-artifacts``), and
``tracking.tracking_uri: http://127.0.0.1:PORT`` in params.yaml: stages of two studies (the CrowS-Pairs score and
report on a tiny model, the PCS analysis on a small judged table) log their runs, params, metrics, input datasets
and artifacts to the server, read back here through MLflow's own client; ``stereolens compare`` and ``ui`` read
the server named in params.yaml; the run link a stage prints opens the run in the model-training layout; a server
that does not answer is refused in one line naming it, before the stage has replaced any output.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stereolens.cli import main
from stereolens.io import write_csv, write_json
from stereolens.report.markdown import format_cell
from stereolens.tracking.ui import free_port, mlflow_server

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "studies" / "pairs"))
sys.path.insert(0, str(TESTS / "studies" / "pcs"))
sys.path.insert(0, str(TESTS / "report"))
from chromium import open_browser  # noqa: E402
from test_pairs_pipeline import CROWS  # noqa: E402  (three CrowS-Pairs rows)
from test_pcs_entry_points import scores as pcs_scores  # noqa: E402  (a judged table with a known PCS)

pytestmark = pytest.mark.slow

MODEL = "tiny"
CROWS_REPORT = f"crows/report/{MODEL}/en"


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _set_tracking_uri(root: Path, uri: str) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    params["tracking"] = {"enabled": True, "tracking_uri": uri, "artifact_location": "mlruns/artifacts",
                          "experiment": "stereolens"}
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(url, folder): an MLflow server on a free loopback port, proxying artifacts into folder/artifacts."""
    where = tmp_path_factory.mktemp("mlflow-server")
    with mlflow_server(f"sqlite:///{where}/backend.db", artifacts_destination=str(where / "artifacts")) as url:
        yield url, where


@pytest.fixture(scope="module")
def project(tmp_path_factory, repo_root, tiny_causal_lm_dir, server):
    """A project whose params.yaml logs to the server; the stages of two studies run in it once.
    Yields (root, {stage: its stdout})."""
    url, _ = server
    root = tmp_path_factory.mktemp("project")
    mp = pytest.MonkeyPatch()
    mp.chdir(root)
    mp.setenv("STEREOLENS_CACHE_DIR", str(root / "cache"))
    params = yaml.safe_load((repo_root / "params.yaml").read_text(encoding="utf-8"))
    model = {"id": MODEL, "name": str(tiny_causal_lm_dir), "kind": "causal", "backend": "hf", "dtype": "float32"}
    params.update({"model": model, "models": {MODEL: model}, "model_ids": [MODEL], "compare_with": [],
                   "metric": {"name": "causal", "batch_tokens": 4096, "truncate": False}})
    params["study"]["crows"].update({"limit": None, "bootstrap_resamples": 200})
    params["study"]["pcs"]["languages"] = ["hi", "ur"]
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    _set_tracking_uri(root, url)
    raw = root / "data/raw/crows_pairs"
    raw.mkdir(parents=True)
    CROWS.to_csv(raw / "crows_pairs_anonymized.csv", index=False)
    write_csv(root / f"data/interim/pcs/{MODEL}/scores.csv", pcs_scores().assign(model=MODEL))
    write_json(root / f"reports/pcs/{MODEL}/gates.json", {"enforced": False, "all_passed": True, "gates": {}})
    # the repository's pipeline, so that each run logs the data deps dvc.yaml declares for its stage as inputs
    shutil.copy(repo_root / "dvc.yaml", root / "dvc.yaml")
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=root, check=True,
                   env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    printed = {}
    for stage in ("crows-score", "crows-report", "pcs-analyze"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["stage", stage, "--model", MODEL]) == 0, stage
        printed[stage] = out.getvalue()
    yield root, printed
    mp.undo()


def _runs(url: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("stereolens")
    return client, experiment, {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}


def test_the_stages_of_two_studies_log_runs_params_metrics_inputs_and_artifacts_to_the_server(server, project):
    url, where = server
    root, _ = project
    client, experiment, runs = _runs(url)
    assert {"crows/score/tiny/en", CROWS_REPORT, f"pcs/analyze/{MODEL}"} <= set(runs), sorted(runs)
    report = runs[CROWS_REPORT]
    summary = yaml.safe_load((root / f"reports/crows/{MODEL}/summary.json").read_text(encoding="utf-8"))
    assert report.data.params["model_id"] == MODEL and {"model", "metric", "study"} <= set(report.data.params)
    assert report.data.metrics["bias_score"] == pytest.approx(summary["bias_score"])
    pcs = yaml.safe_load((root / f"reports/pcs/{MODEL}/summary.json").read_text(encoding="utf-8"))
    assert runs[f"pcs/analyze/{MODEL}"].data.metrics["pcs"] == pytest.approx(pcs["pcs"])
    # the input datasets dvc.yaml declares for the stage, with the file's md5
    inputs = {d.dataset.name: d.dataset.digest for d in runs["crows/score/tiny/en"].inputs.dataset_inputs}
    assert inputs, "the score run must record its input datasets"
    # artifacts went through the server (proxied) into its artifact root, byte for byte the stage's files
    assert experiment.artifact_location.startswith("mlflow-artifacts:"), experiment.artifact_location
    assert not (root / "mlruns").exists(), "a server's runs must not leave a local store or artifact folder"
    fetched = Path(client.download_artifacts(report.info.run_id, "", str(root.parent / "fetched")))
    written = {p.name: _md5(p) for p in (root / f"reports/crows/{MODEL}").rglob("*") if p.is_file()}
    same = {p.name for p in fetched.rglob("*") if p.is_file() and written.get(p.name) == _md5(p)}
    assert same, (sorted(p.name for p in fetched.rglob("*")), sorted(written))
    name = sorted(same)[0]
    assert any(p.name == name for p in (where / "artifacts").rglob("*")), "not in the server's artifact root"


def test_each_stage_prints_its_run_link_in_the_model_training_layout(server, project):
    url, _ = server
    _, printed = project
    _, experiment, runs = _runs(url)
    expected = (f"MLflow run {CROWS_REPORT}: {url}/#/experiments/{experiment.experiment_id}/runs/"
                f"{runs[CROWS_REPORT].info.run_id}?workflowType=machine_learning")
    assert expected in printed["crows-report"].splitlines(), printed["crows-report"]
    # MLflow's own links (no workflowType: the GenAI layout) are not printed
    assert "View run" not in printed["crows-report"] and "View experiment" not in printed["crows-report"]


def test_compare_and_ui_read_the_server_params_yaml_names(server, project, capsys):
    url, _ = server
    _, experiment, runs = _runs(url)
    capsys.readouterr()
    assert main(["compare", "--study", "crows", "--stage", "report"]) == 0
    table = capsys.readouterr().out
    assert CROWS_REPORT in table
    bias = runs[CROWS_REPORT].data.metrics["bias_score"]
    # the number as the report's formatter writes it, not the float's full repr
    assert re.search(rf"(?<![\d.]){re.escape(format_cell(bias))}(?![\d])", table), table
    if format_cell(bias) != repr(bias):
        assert repr(bias) not in table
    assert main(["ui"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"MLflow UI: {url}/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning")


def test_a_server_that_does_not_answer_is_one_line_and_no_output_is_lost(server, project, capsys):
    url, _ = server
    root, _ = project
    dead = f"http://127.0.0.1:{free_port()}"
    outputs = sorted(p for p in (root / f"reports/crows/{MODEL}").rglob("*") if p.is_file())
    before = {p: (p.stat().st_mtime_ns, _md5(p)) for p in outputs}
    _set_tracking_uri(root, dead)
    try:
        capsys.readouterr()
        assert main(["stage", "crows-report", "--model", MODEL]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and dead in err and "does not answer" in err, err
        assert {p: (p.stat().st_mtime_ns, _md5(p)) for p in outputs} == before
        for command in (["compare", "--study", "crows"], ["ui"]):
            assert main(command) == 2, command
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and dead in err, (command, err)
    finally:
        _set_tracking_uri(root, url)


def test_the_printed_run_link_opens_the_run_in_the_model_training_layout(server, project, tmp_path):
    """The link a stage prints, opened in a browser that has never chosen a layout: the run's page with the
    model-training sidebar (Runs, Models, Model registry) and its metric; MLflow's own link to the same run
    (no workflowType) opens the GenAI sidebar (Observability, Evaluation runs) in this MLflow: when that stops,
    MLflow reads the experiment's kind again and the workaround can go."""
    url, _ = server
    _, printed = project
    _, experiment, runs = _runs(url)
    link = next(line.split(": ", 1)[1] for line in printed["crows-report"].splitlines()
                if line.startswith(f"MLflow run {CROWS_REPORT}: "))
    plain = f"{url}/#/experiments/{experiment.experiment_id}/runs/{runs[CROWS_REPORT].info.run_id}"
    texts = {}
    for name, address in (("ours", link), ("plain", plain)):
        browser = open_browser(tmp_path / f"browser-{name}")  # a first visit: no layout remembered
        try:
            texts[name] = browser.text_when(address, lambda t: "bias_score" in t and "Model registry" in t
                                            or "Evaluation runs" in t, timeout=90, screenshot=tmp_path / f"{name}.png")
        finally:
            browser.close()
    ours = texts["ours"]
    assert CROWS_REPORT in ours and "bias_score" in ours and "Model registry" in ours, ours[:2000]
    assert "Evaluation runs" not in ours and "Observability" not in ours, ours[:2000]
    assert "Evaluation runs" in texts["plain"], texts["plain"][:2000]
