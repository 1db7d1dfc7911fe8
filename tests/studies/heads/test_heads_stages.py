"""The heads stages end to end on a tiny causal model, and the input checks."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.studies.heads.inputs import read_instances

from heads_data import make_instances


def test_an_empty_sentence_is_refused_with_file_row_and_column(tmp_path):
    table = make_instances(4, countries=("MX",))
    table.loc[2, "sent_anti"] = " "
    path = tmp_path / "instances.csv"
    table.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"instances.csv line 4, column sent_anti: empty sentence"):
        read_instances(path, None, None)


def test_unknown_country_and_the_per_country_limit(tmp_path):
    path = tmp_path / "instances.csv"
    make_instances(6).to_csv(path, index=False)
    assert read_instances(path, ["ES"], 4)["country"].tolist() == ["ES"] * 4
    with pytest.raises(DataError, match="column country has no rows for"):
        read_instances(path, ["AR"], None)


@pytest.mark.slow
def test_probe_and_report_stages_write_every_output(tmp_path, monkeypatch, tiny_causal_lm_dir, repo_root):
    from stereolens.studies.heads.stages import heads_probe, heads_report

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/processed/stereo").mkdir(parents=True)
    make_instances(12).to_csv(tmp_path / "data/processed/stereo/instances.csv", index=False)
    subprocess.run([sys.executable, "-m", "stereolens", "config", "compose", "--config-dir", str(repo_root / "conf"),
                    "--output", "params.yaml", f"model.name={tiny_causal_lm_dir}",
                    "model.id=tiny-causal", "model.source=null", "study.heads.shapley.permutations=4",
                    "study.heads.probe.epochs=5", "study.heads.pruning.stereoset_items_per_country=4",
                    "study.heads.countries=null", "tracking=disabled"],
                   check=True, capture_output=True)
    args = argparse.Namespace(params="params.yaml")
    heads_probe(args)
    heads_report(args)
    shap = pd.read_csv("data/processed/heads/tiny-causal/shapley.csv")
    assert len(shap) == 2 * 2 * 2  # two countries x (last two layers x two heads)
    sweeps = pd.read_csv("data/processed/heads/tiny-causal/sweeps.csv")
    assert set(sweeps["direction"]) == {"top_down", "bottom_up"}
    assert sweeps.loc[sweeps["direction"] == "top_down", "ss"].notna().all()
    summary = json.loads((tmp_path / "reports/heads/tiny-causal/summary.json").read_text())
    assert summary["config"]["shapley"]["permutations"] == 4 and summary["instance_sources"] == ["test"]
    for stem in ("head_contributions", "country_correlation", "pruning_probe", "pruning_stereoset"):
        for ext in ("png", "svg"):
            assert (tmp_path / f"reports/heads/tiny-causal/{stem}.{ext}").stat().st_size > 0
    report = (tmp_path / "reports/heads/tiny-causal/report.md").read_text()
    assert "pooling auto (used: last)" in report
    # every choice of ours is named on the page
    for choice in ("value function", "encoder", "split", "probe set", "epochs", "optimiser", "players",
                   "permutations", "pruning step", "StereoSet items", "head removal"):
        assert f"- **{choice}**:" in report, choice
    # the exact early stop is gone (issue 26); "exact" alone now names the robustness table's exact values
    assert "frozen; only the probe is trained" in report and "exact stop" not in report
    # robustness (issue 32): 2 other seeds and the exact values per country, from the same game's coalitions
    stability = pd.read_csv("data/processed/heads/tiny-causal/shapley_stability.csv")
    assert sorted(stability.groupby(["country", "estimate"]).size().items()) == [
        (("ES", "exact"), 4), (("ES", "seed"), 8), (("MX", "exact"), 4), (("MX", "seed"), 8)]
    robustness = pd.read_csv("reports/heads/tiny-causal/robustness.csv")
    assert robustness.groupby("cell")["variant"].apply(list).to_dict() == {
        country: ["headline", "seed 1", "seed 2", "exact"] for country in ("ES", "MX")}
    assert summary["robustness"]["of"] == 6 and summary["robustness"]["not_run"] == 0
    assert summary["paired"]["applicable"] is False and summary["power"]["applicable"] is False
    assert "## Robustness" in report and "Paired comparison between models: not applicable" in report
    probe = json.loads((tmp_path / "data/processed/heads/tiny-causal/probe.json").read_text())
    instances = make_instances(12)
    for country in probe["countries"]:
        # 12 instances: 4 (round 3.6) valued, 2 (round 2.4) for pruning, 6 train the probe, recorded by id
        split = country["split"]
        assert (len(split["probe_train"]), len(split["shapley"]), len(split["pruning"])) == (6, 4, 2)
        ids = [set(split[name]) for name in ("probe_train", "shapley", "pruning")]
        assert set.union(*ids) == set(instances.loc[instances["country"] == country["country"], "id"])
        assert sum(map(len, ids)) == 12
        # StereoSet during pruning: the pruning set's 2 instances, not the first 4 of the country
        part = sweeps[(sweeps["country"] == country["country"]) & (sweeps["direction"] == "top_down")]
        assert country["n_stereoset_items"] == 2 and (part["n_stereoset_items"] == 2).all()
    # times are run facts (MLflow, the printed line), not outputs: a second run writes the same bytes
    tables = sorted(p for folder in ("data/processed/heads/tiny-causal", "reports/heads/tiny-causal")
                    for p in (tmp_path / folder).iterdir() if p.suffix in (".json", ".csv", ".md"))
    first = {p.name: p.read_bytes() for p in tables}
    assert "seconds" not in first["probe.json"].decode() and "seconds" not in first["summary.json"].decode()
    heads_probe(args)
    heads_report(args)
    assert {p.name: p.read_bytes() for p in tables} == first
