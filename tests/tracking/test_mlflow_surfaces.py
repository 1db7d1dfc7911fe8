"""MLflow as a researcher opens it: the experiment's kind, run inputs taken from dvc.yaml, short run names,
and the UI's runs table in headless Chromium showing the runs of two models."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stereolens.tracking import declare_run, stage_run
from stereolens.tracking.mlflow_run import (EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, experiment_url, invoked_stage,
                                            run_name, stage_inputs)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "report"))
from chromium import open_browser  # noqa: E402

SCORE_RUN = declare_run("uitest", "score", metrics=("bias_score",))
MODELS = ("gemma3-270m", "smollm2-135m")


def _tracking(root: Path) -> dict:
    return {"enabled": True, "tracking_uri": f"sqlite:///{root}/mlruns/mlflow.db",
            "artifact_location": str(root / "mlruns/artifacts"), "experiment": "stereolens"}


def _client(root: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root}/mlruns/mlflow.db")
    return client, client.get_experiment_by_name("stereolens")


def _dvc_project(root: Path) -> str:
    """A DVC project with one foreach stage over languages; returns the md5 of its input table (hashlib's)."""
    table = root / "data/raw/uitest/items.csv"
    table.parent.mkdir(parents=True)
    table.write_text("sent_more,sent_less\nA,B\n", encoding="utf-8")
    (root / "src").mkdir()
    stages = {"stages": {"uitest_score": {"foreach": ["en", "hi"], "do": {
        "cmd": "stereolens stage uitest-score --language ${item}",
        "deps": ["data/raw/uitest/items.csv", "src", "models/tiny"],
        "outs": ["data/processed/uitest/${item}.csv"]}}}}
    (root / "dvc.yaml").write_text(yaml.safe_dump(stages), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=root, check=True,
                   env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    return hashlib.md5(table.read_bytes()).hexdigest()


def test_the_experiment_is_recorded_as_model_runs_not_genai(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with stage_run(_tracking(tmp_path), SCORE_RUN, model="m") as run:
        run.log_metrics({"bias_score": 0.5})
    _, experiment = _client(tmp_path)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"


def test_a_run_inside_a_stage_logs_the_data_deps_dvc_yaml_declares_with_their_md5(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    digest = _dvc_project(tmp_path)
    with invoked_stage("uitest-score", {"language": "hi", "params": "params.yaml"}):
        assert stage_inputs() == ["data/raw/uitest/items.csv"]  # not the code folder, not the model folder
        with stage_run(_tracking(tmp_path), SCORE_RUN, model="m", language="hi") as run:
            run.log_dataset(tmp_path / "data/raw/uitest/items.csv", name="again")  # logged once, not twice
            run.log_metrics({"bias_score": 0.5})
    client, experiment = _client(tmp_path)
    (logged,) = client.search_runs([experiment.experiment_id])
    inputs = [(d.dataset.name, d.dataset.digest) for d in logged.inputs.dataset_inputs]
    assert inputs == [("data/raw/uitest/items.csv", digest[:36])]


def test_no_inputs_are_guessed_outside_a_stage_or_for_a_command_dvc_yaml_does_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dvc_project(tmp_path)
    assert stage_inputs() == []
    with invoked_stage("uitest-score", {"language": "zh"}):
        assert stage_inputs() == []
    with invoked_stage("uitest-report", {}):
        assert stage_inputs() == []


def test_run_names_are_study_and_stage_first_and_name_a_hub_model_by_its_last_part():
    assert run_name("crows", "score", "gemma3-270m", "en") == "crows/score/gemma3-270m/en"
    assert run_name("crows", "score", "HuggingFaceTB/SmolLM2-135M-Instruct", "en") == \
        "crows/score/SmolLM2-135M-Instruct/en"
    assert run_name("leakage", "fit", "/tmp/models/tiny/", "hi", "ilps") == "leakage/fit/tiny/hi/ilps"


@pytest.mark.parametrize("where", ["nowhere/mlflow.db", "mlruns"])
def test_ui_refuses_a_store_that_does_not_exist_and_creates_none(tmp_path, capsys, where):
    from stereolens.cli import main

    uri = f"sqlite:///{tmp_path / where}" if where.endswith(".db") else str(tmp_path / where)
    assert main(["ui", "--tracking-uri", uri, "--port", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"stereolens: error: no MLflow store at {uri} (run a tracked stage first, or check --tracking-uri)"
    assert list(tmp_path.iterdir()) == []  # no database, no folder left behind


def test_ui_refuses_a_store_without_the_experiment(tmp_path, capsys, monkeypatch):
    from stereolens.cli import main

    monkeypatch.chdir(tmp_path)
    with stage_run(_tracking(tmp_path), SCORE_RUN, model="m") as run:
        run.log_metrics({"bias_score": 0.5})
    uri = _tracking(tmp_path)["tracking_uri"]
    capsys.readouterr()  # MLflow's own lines while the run above created the store
    assert main(["ui", "--tracking-uri", uri, "--experiment", "other", "--port", "1"]) == 2
    assert capsys.readouterr().err.strip() == (f"stereolens: error: no MLflow experiment 'other' in {uri} "
                                               "(run a tracked stage first)")


def _matching(text: str) -> int | None:
    """The runs table's count, ``N matching runs`` under the table."""
    found = re.search(r"(?<!\d)(\d+) matching runs?\b", text)
    return int(found.group(1)) if found else None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = open_browser(tmp_path_factory.mktemp("profile"))
    yield b
    b.close()


@pytest.mark.slow
def test_the_ui_opens_the_experiment_on_its_runs_table_with_both_models(tmp_path, monkeypatch, browser):
    """`stereolens ui`'s server and address, as a researcher opens them: the runs table (not the GenAI
    traces overview), listing the runs of both models by their short names; filtered to one model, that
    model's run only."""
    from stereolens.tracking.ui import mlflow_server

    monkeypatch.chdir(tmp_path)
    for model in MODELS:
        with stage_run(_tracking(tmp_path), SCORE_RUN, model=model, language="en") as run:
            run.log_metrics({"bias_score": 0.5})
    _, experiment = _client(tmp_path)
    names = [run_name("uitest", "score", model, "en") for model in MODELS]
    with mlflow_server(_tracking(tmp_path)["tracking_uri"]) as url:
        text = browser.text_when(experiment_url(url, experiment.experiment_id),
                                 lambda t: all(name in t for name in names), timeout=90,
                                 screenshot=tmp_path / "runs.png")
        assert all(name in text for name in names), text[-2000:]
        assert "Run Name" in text and _matching(text) == 2
        assert "Token Usage" not in text  # the GenAI overview's panel
        # the count under the table can show before the filtered table's rows do (CI, 2026-11-28): wait for the rows
        one = browser.text_when(experiment_url(url, experiment.experiment_id, f"params.model_id = '{MODELS[1]}'"),
                                lambda t: _matching(t) == 1 and names[1] in t and names[0] not in t, timeout=60)
        assert _matching(one) == 1 and names[1] in one and names[0] not in one, one[-2000:]


@pytest.mark.slow
def test_a_plain_experiment_address_still_opens_on_genai_in_this_mlflow(tmp_path, monkeypatch):
    """Why `stereolens ui` prints its own address (docs/running.md, 'The MLflow UI'): MLflow 3.17's UI
    opens `#/experiments/<id>` (what a plain `mlflow ui` reaches) on the empty GenAI overview in a new
    browser, whatever the store says: the experiment carries `mlflow.experimentKind =
    custom_model_development`, and the page still reads its view from the browser's GenAI / Model
    training switch.  When this fails, MLflow reads the store again: make the plain address the one
    documented."""
    from stereolens.tracking.ui import mlflow_server

    monkeypatch.chdir(tmp_path)
    for model in MODELS:
        with stage_run(_tracking(tmp_path), SCORE_RUN, model=model, language="en") as run:
            run.log_metrics({"bias_score": 0.5})
    _, experiment = _client(tmp_path)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    names = [run_name("uitest", "score", model, "en") for model in MODELS]
    fresh = open_browser(tmp_path / "new-browser")  # no switch remembered: as a first visit
    try:
        with mlflow_server(_tracking(tmp_path)["tracking_uri"]) as url:
            text = fresh.text_when(f"{url}/#/experiments/{experiment.experiment_id}",
                                   lambda t: "Token Usage" in t or all(name in t for name in names), timeout=90,
                                   screenshot=tmp_path / "plain.png")
    finally:
        fresh.close()
    assert "Token Usage" in text and not any(name in text for name in names), text[-2000:]


DEFAULT_STORE = ROOT / "mlruns" / "mlflow.db"


@pytest.mark.slow
@pytest.mark.skipif(not DEFAULT_STORE.is_file(),
                    reason="no default MLflow store (mlruns/mlflow.db): a clean clone has none; `make run` writes it")
def test_the_default_stores_runs_table_shows_the_runs_of_every_model_of_the_run(browser, tmp_path):
    """The store `make run` leaves, opened as `stereolens ui` opens it: for each model of params.yaml's
    `models`, the runs table filtered to that model shows as many runs as the store holds for it, the
    newest first.  Reads the store only."""
    from stereolens.tracking.store import open_experiment
    from stereolens.tracking.ui import mlflow_server

    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    models = list(params["models"])
    assert len(models) >= 2, models
    uri = f"sqlite:///{DEFAULT_STORE}"
    client, experiment = open_experiment(uri, params["tracking"]["experiment"])
    runs = {m: client.search_runs([experiment.experiment_id], f"params.model_id = '{m}'", max_results=100,
                                  order_by=["attributes.start_time DESC"]) for m in models}
    assert all(runs.values()), {m: len(r) for m, r in runs.items()}
    with mlflow_server(uri) as url:
        for model, found in runs.items():
            newest = found[0].info.run_name
            text = browser.text_when(experiment_url(url, experiment.experiment_id, f"params.model_id = '{model}'"),
                                     lambda t: _matching(t) == len(found) and newest in t,  # noqa: B023
                                     timeout=90, screenshot=tmp_path / f"{model}.png")
            assert _matching(text) == len(found) and newest in text, (model, len(found), newest, text[-2000:])
            assert "Token Usage" not in text
