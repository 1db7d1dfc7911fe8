"""The report's Spearman correlations between countries: a country whose Shapley values are constant
has no ranking, so its correlations are reported as undefined with the reason, never as NaN."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.studies.heads.report import country_correlations, write_report


def _shapley(values: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for country, vals in values.items():
        for i, v in enumerate(vals):
            rows.append({"country": country, "layer": i // 2, "head": i % 2, "shapley": v, "se": 0.01})
    table = pd.DataFrame(rows)
    table["rank"] = table.groupby("country")["shapley"].rank(ascending=False, method="first").astype(int)
    return table


VALUES = {"Mexico": [0.3, 0.1, -0.2, 0.0], "Spain": [0.0, 0.0, 0.0, 0.0], "Peru": [0.1, 0.4, -0.1, 0.2]}


def _probe() -> dict:
    """probe.json of a run over the countries of VALUES."""
    return {"instances": "x.csv", "instance_sources": ["test"],
            "countries": [{"country": c, "n_train_instances": 4, "n_shapley_instances": 2, "n_pruning_instances": 2,
                           "train_accuracy": 1.0, "test_value_all_heads": 0.5, "pooling": "last"} for c in VALUES]}


def _cfg(*, step: int) -> dict:
    """A study.heads section (the keys the report reads) removing ``step`` heads per pruning step."""
    return {"countries": None, "max_instances_per_country": None,
            "split": {"shapley_fraction": 0.3, "pruning_fraction": 0.2, "seed": 0},
            "probe": {"pooling": "auto", "learning_rate": 1e-4, "epochs": 1, "batch_size": 16, "weight_decay": 0.0,
                      "finetune": False},
            "shapley": {"layers": [-2, -1], "permutations": 4, "antithetic": True, "seed": 0, "value": "accuracy"},
            "pruning": {"step": step, "stereoset_items_per_country": None, "candidate_score": "mean"}}


def test_a_constant_country_has_undefined_correlations_with_the_reason():
    corr = country_correlations(_shapley(VALUES))
    # the defined pair against scipy
    rho = stats.spearmanr(VALUES["Mexico"], VALUES["Peru"]).statistic
    assert corr.rho.loc["Mexico", "Peru"] == pytest.approx(rho) and corr.rho.loc["Peru", "Peru"] == 1.0
    assert set(corr.undefined) == {("Mexico", "Spain"), ("Peru", "Spain"), ("Spain", "Spain")}
    assert all("Spain's Shapley values are all +0" in reason for reason in corr.undefined.values())
    shown = corr.display()
    assert shown.loc["Mexico", "Spain"] == shown.loc["Spain", "Mexico"] == "undefined"
    assert shown.loc["Spain", "Spain"] == "undefined"


def test_one_head_is_undefined_too():
    corr = country_correlations(_shapley({"Mexico": [0.3], "Spain": [0.1]}))
    assert "a rank correlation needs at least two" in corr.undefined[("Mexico", "Spain")]


def test_no_nan_reaches_the_tables_the_summary_the_page_or_the_figure(tmp_path):
    shap = _shapley(VALUES)
    sweeps = pd.DataFrame([{"country": c, "direction": d, "step": k, "n_removed": 2 * k, "probe_value": 0.5,
                            "removed_this_step": ""} for c in VALUES for d in ("top_down", "bottom_up") for k in range(3)])
    probe, cfg = _probe(), _cfg(step=2)
    summary = write_report(shap, sweeps, probe, cfg, tmp_path, model_id="tiny")
    assert summary["correlation"]["Spain"]["Mexico"] == "undefined"
    assert summary["correlation"]["Peru"]["Mexico"] == pytest.approx(
        stats.spearmanr(VALUES["Mexico"], VALUES["Peru"]).statistic, abs=1e-4)
    assert any(r["countries"] == ["Mexico", "Spain"] and "Spain's Shapley values" in r["reason"]
               for r in summary["correlation_undefined"])
    text = (tmp_path / "summary.json").read_text()
    json.loads(text)  # strict JSON: a NaN would be written as the bare word NaN
    assert "NaN" not in text
    table = pd.read_csv(tmp_path / "country_correlation.csv", index_col=0, keep_default_na=False)
    assert table.loc["Mexico", "Spain"] == "undefined" and "nan" not in table.to_string().lower()
    page = (tmp_path / "report.md").read_text()
    section = page[page.index("## Spearman"):]
    assert "nan" not in section.lower() and "undefined" in section and "Spain's Shapley values are all" in section
    svg = (tmp_path / "country_correlation.svg").read_text()
    assert "undef." in svg and "nan" not in svg.lower()
    # the configuration as a table of settings, not a YAML dump (issue 32: no raw YAML in a report)
    assert "```yaml" not in page and "| shapley.permutations | 4 |" in page and "| split.seed | 0 |" in page
    assert np.isnan(country_correlations(shap).rho.loc["Mexico", "Spain"])  # NaN stays internal only


def _real_sweeps(values: dict[str, list[float]], step: int = 1) -> pd.DataFrame:
    """Both sweeps of every country by the study's own run_sweep, the probe value being the share of heads on."""
    from stereolens.studies.heads.pruning import run_sweep

    frames = []
    for country, vals in values.items():
        players = [(i // 2, i % 2) for i in range(len(vals))]

        def value_fn(masks):
            return np.asarray(masks, dtype=float).mean(axis=1)

        for direction in ("top_down", "bottom_up"):
            frames.append(run_sweep(value_fn, vals, direction, step, players).assign(country=country))
    return pd.concat(frames, ignore_index=True)


def test_equal_shapley_values_make_one_pruning_order_and_the_report_says_so(tmp_path):
    """Spain's values are all 0: top-down and bottom-up remove the heads in the same order, so the page,
    summary.json and Figure F2/F5 say the two curves are one instead of drawing them as a contrast."""
    from stereolens.studies.heads.report import same_pruning_order

    shap, sweeps = _shapley(VALUES), _real_sweeps(VALUES)
    spain = sweeps[sweeps["country"] == "Spain"]
    top, bottom = (spain[spain["direction"] == d]["removed_this_step"].tolist() for d in ("top_down", "bottom_up"))
    assert top == bottom  # the premise: with all values equal the two orders are one
    assert same_pruning_order(shap, sweeps) == {"Spain": "all 4 Shapley values are +0"}
    sweeps.to_csv(tmp_path / "sweeps.csv", index=False)  # the report reads the sweeps back from CSV
    sweeps = pd.read_csv(tmp_path / "sweeps.csv")
    probe, cfg = _probe(), _cfg(step=1)
    summary = write_report(shap, sweeps, probe, cfg, tmp_path / "report", model_id="tiny")
    assert summary["same_pruning_order"] == [{"country": "Spain", "reason": "all 4 Shapley values are +0"}]
    page = (tmp_path / "report" / "report.md").read_text()
    assert "- Spain: top-down and bottom-up pruning remove the same heads at every step" in page
    assert "Mexico: top-down" not in page and "Peru: top-down" not in page
    svg = (tmp_path / "report" / "pruning_probe.svg").read_text()
    assert svg.count("top-down = bottom-up (same order)") == 1  # Spain's one curve; the others keep two
    assert svg.count("bottom-up") == 3 and svg.count("top-down") == 3


def test_an_authored_instance_is_not_called_machine_generated():
    """Issue 32: the page said "authored" and "machine-generated" of the same instances."""
    from stereolens.studies.heads.report import instance_source_note

    authored = instance_source_note(["authored"])
    assert "authored by the project" in authored and "machine" not in authored and "generated" not in authored
    both = instance_source_note(["authored", "machine", "human"])
    assert "authored by the project" in both and "generated by a model" in both
    assert instance_source_note(["human", "validated"]) == ""
