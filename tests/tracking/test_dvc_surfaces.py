"""DVC's comparison surfaces: a compact headline metrics file per study (``dvc metrics show`` /
``dvc exp show`` columns), the full summaries as plain outputs, and plots whose sources are stage outputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stereolens.stages.kit import write_study_summary
from stereolens.tracking.headline import HEADLINES, study_of

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ("crows", "pairs", "stereo", "heads", "leakage", "pcs", "seegull")

# Small summaries shaped as each study writes them (the keys the headline functions read, beside noise that
# must not become a column); the expected headlines are written out by hand.
SUMMARIES = {
    "crows": {"bias_score": 0.6, "share_untied": 0.6, "ci_low": 0.55, "ci_high": 0.65, "n": 1508,
              "by_bias_type": {"age": 0.64},
              "headline": {"bias score": 0.6}},
    "pairs": {"sets": {"starter": {"runs": [{"language": "en", "bias_score": 0.5, "n": 60},
                                            {"language": "kok", "bias_score": 0.52, "n": 60}]},
                       "crows": {"language": "en", "bias_score": 0.58, "runs": [{"language": "en", "bias_score": 0.58}]},
                       "constructed": {"n": 0, "note": "no constructed pairs were scored"}},
              "headline": {"starter bias score (en)": 0.5}},
    "stereo": {"ss": 27.2, "lms": 54.7, "icat": 29.7, "n": 40, "by_country": {"Spain": {"ss": 50.0}}},
    "heads": {"countries": [{"country": "Mexico", "probe_test_accuracy": 0.75, "ss_before": 0.0, "ss_all_pruned": 0.0,
                             "top_heads": "L16H0"},
                            {"country": "Spain", "probe_test_accuracy": 0.5, "ss_before": 50.0, "ss_all_pruned": 25.0}],
              "metrics": {"Mexico.train_instances": 4}},
    "leakage": {"n_edges": 1, "n_fits": 8, "n_edges_not_converged": 0, "multiple_comparisons": {"n_edges_holm": 0},
                "edges": [{"from": "EN", "to": "HI"}]},
    "pcs": {"pcs": None, "cap_util": float("nan"), "hud": {"overall": 0.25}, "n_excluded": 24,
            "ldi": {"ur": {"deference": 3.0}}, "headline": {"PCS": None, "judge gates": "FAILED"}},
    "seegull": {"by_locale": {"es-MX": {"auc": 0.61, "auc_low": 0.55, "auc_high": 0.67, "spearman": 0.2, "n_not": 100},
                              "es-ES": {"auc": 0.52, "auc_low": 0.45, "auc_high": 0.6, "spearman": None, "n_not": 100},
                              "hi-IN": {"auc": 0.5, "auc_low": 0.43, "auc_high": 0.58, "spearman": -0.01}},
                "cross_locale": [{"locale": "es-MX", "other_locale": "es-ES", "n_aligned": 40,
                                  "own verdict": {"estimate": 0.3}, "other locale's verdict": {"estimate": 0.1}},
                                 {"locale": "es-ES", "other_locale": "es-MX", "n_aligned": 4, "note": "too few"}],
                "headline": {"AUC es-MX": 0.61}, "locales": ["es-MX", "es-ES", "hi-IN"]},
}
HEADLINE_COLUMNS = {
    "crows": {"bias_score": 0.6, "share_untied": 0.6, "ci_low": 0.55, "ci_high": 0.65},
    "pairs": {"starter.en.bias_score": 0.5, "starter.kok.bias_score": 0.52, "crows.en.bias_score": 0.58},
    "stereo": {"ss": 27.2, "lms": 54.7, "icat": 29.7},
    "heads": {"Mexico.probe_test_accuracy": 0.75, "Mexico.ss_before": 0.0, "Mexico.ss_all_pruned": 0.0,
              "Spain.probe_test_accuracy": 0.5, "Spain.ss_before": 50.0, "Spain.ss_all_pruned": 25.0},
    "leakage": {"n_edges": 1, "n_edges_holm": 0, "n_fits": 8},
    "pcs": {"pcs": None, "cap_util": None, "hud": 0.25, "n_excluded": 24, "judge_gates_passed": False},
    "seegull": {"es-MX.auc": 0.61, "es-MX.spearman": 0.2, "es-ES.auc": 0.52, "es-ES.spearman": None, "hi-IN.auc": 0.5,
                "hi-IN.spearman": -0.01, "es-MX~es-ES.other_verdict": 0.1, "es-ES~es-MX.other_verdict": None},
}


def _dvc_yaml() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))


def _stage_bodies(spec: dict):
    for name, stage in spec["stages"].items():
        yield name, stage.get("do", stage)


@pytest.mark.parametrize("study", STUDIES)
def test_each_study_headline_is_its_few_comparable_numbers(study):
    assert HEADLINES[study](SUMMARIES[study]) == HEADLINE_COLUMNS[study]


def test_a_skipped_seegull_model_has_the_same_headline_columns_all_null():
    skipped = {"skipped": "ILPS needs log-probabilities", "locales": ["es-MX", "es-ES", "hi-IN"], "by_locale": {},
               "cross_locale": [{"locale": "es-MX", "other_locale": "es-ES", "n_aligned": 0},
                                {"locale": "es-ES", "other_locale": "es-MX", "n_aligned": 0}]}
    assert HEADLINES["seegull"](skipped) == dict.fromkeys(HEADLINE_COLUMNS["seegull"])


def test_about_twenty_headline_columns_across_studies():
    columns = sum(len(HEADLINES[study](SUMMARIES[study])) for study in STUDIES)
    # two heads countries and two starter languages (24), and seegull's three locales with two cross-locale pairs
    # (8), as in the default run
    assert columns == 24 + 8


def test_the_headline_file_sits_beside_a_study_summary_in_either_layout(tmp_path):
    # under the study and, in the per-model layout, the model: DVC's column names (crows.gemma3-270m.bias_score)
    # are then unique without the file's path in front
    for where, record in (("reports/crows", {"crows": HEADLINE_COLUMNS["crows"]}),
                          ("reports/crows/gemma3-270m", {"crows": {"gemma3-270m": HEADLINE_COLUMNS["crows"]}})):
        write_study_summary(tmp_path / where / "summary.json", SUMMARIES["crows"])
        assert json.loads((tmp_path / where / "headline.json").read_text()) == record
    # the pairs report's per-set summaries are not a study's top-level one: no headline beside them
    write_study_summary(tmp_path / "reports/pairs/starter/summary.json", {"runs": [], "definition": "x"})
    assert not (tmp_path / "reports/pairs/starter/headline.json").exists()
    assert study_of("/x/reports/pcs/smollm2-135m/summary.json") == "pcs" and study_of("out/summary.json") is None


def test_dvc_metrics_are_the_headline_files_and_the_summaries_plain_outputs():
    spec = _dvc_yaml()
    metrics, outs = [], []
    for _, body in _stage_bodies(spec):
        metrics += [next(iter(m)) if isinstance(m, dict) else m for m in body.get("metrics", [])]
        outs += [next(iter(o)) if isinstance(o, dict) else o for o in body.get("outs", [])]
    # per model: a foreach over the run's models (`${item}`), heads on the primary only (`${model.id}`)
    per_model = {study: "${model.id}" if study == "heads" else "${item}" for study in STUDIES}
    assert sorted(metrics) == sorted(f"reports/{study}/{m}/headline.json" for study, m in per_model.items())
    assert ({f"reports/{study}/{m}/summary.json" for study, m in per_model.items()}
            | {"reports/pcs/${item}/gates.json"}) <= set(outs)


def test_every_plot_names_its_columns_and_reads_a_stage_output():
    spec = _dvc_yaml()
    outs = [next(iter(o)) if isinstance(o, dict) else o for _, body in _stage_bodies(spec) for o in body.get("outs", [])]
    plots = {name: body for entry in spec["plots"] for name, body in entry.items()}
    assert {"crows_bias_by_type", "pairs_starter_bias_by_dimension", "stereo_retrieval_saturation",
            "heads_pruning", "pcs_by_language"} <= set(plots)
    for name, body in plots.items():
        assert body.get("template") and isinstance(body.get("x"), str) and isinstance(body.get("y"), dict), name
        for source in body["y"]:
            # an output path with `${...}` (a foreach member's model) stands for any one path segment
            patterns = [re.compile(re.sub(r"\\\$\\\{[^}]*\\\}", "[^/]+", re.escape(out.rstrip("/"))) + "(/.*)?$")
                        for out in outs]
            assert any(p.match(source) for p in patterns), (name, source)


def write_headlines(root: Path) -> dict[str, dict]:
    """Each study's summary (SUMMARIES) for every model of params.yaml's run, written by write_study_summary
    under ``root``; returns {headline.json path: its headline numbers}."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    written = {}
    for study in STUDIES:
        for model in ([params["model"]["id"]] if study == "heads" else params["model_ids"]):
            path = root / "reports" / study / model / "summary.json"
            write_study_summary(path, SUMMARIES[study])
            written[f"reports/{study}/{model}/headline.json"] = json.loads(path.with_name("headline.json").read_text())[study][model]
    return written


def write_plot_sources(root: Path) -> dict[str, dict]:
    """Every plot source of dvc.yaml under ``root``, holding exactly the plot's x and y columns (two rows);
    returns {plot name: its dvc.yaml definition}."""
    plots = {name: body for entry in _dvc_yaml()["plots"] for name, body in entry.items()}
    for body in plots.values():
        for source, y in body["y"].items():
            columns = [body["x"], *([y] if isinstance(y, str) else y)]
            path = root / source
            path.parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame([dict.fromkeys(columns, 1), dict.fromkeys(columns, 2)]).to_csv(path, index=False)
    return plots


def test_dvc_shows_the_headline_columns_and_draws_every_plot_from_its_sources(tmp_path):
    """`dvc metrics show --json` and `dvc plots show --json` on a project holding the repository's dvc.yaml,
    each study's headline written by write_study_summary and each plot source holding exactly the plot's x
    and y columns: DVC reads every non-null headline column and draws every plot with its x and y fields."""
    for name in ("dvc.yaml", "params.yaml"):
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True,
                   env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    written = write_headlines(tmp_path)
    plots = write_plot_sources(tmp_path)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    shown = json.loads(subprocess.run([sys.executable, "-m", "dvc", "metrics", "show", "--json"], cwd=tmp_path,
                                      env=env, check=True, capture_output=True, text=True).stdout)
    files = shown[""]["data"]
    # DVC leaves null values out (a quantity the run could not define shows as '-')
    assert sum(_leaves(f["data"]) for f in files.values()) == sum(
        sum(v is not None for v in headline.values()) for headline in written.values())
    assert set(files) == set(written)
    drawn = json.loads(subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "--json"], cwd=tmp_path,
                                      env=env, check=True, capture_output=True, text=True).stdout)
    assert "errors" not in drawn, drawn.get("errors")
    for name, body in plots.items():
        (rendered,) = drawn["data"][name]
        encoding = rendered["content"]["encoding"]
        assert encoding["x"]["field"] == body["x"], name
        values = rendered["content"]["data"]["values"]
        assert len(values) == 2 * len(body["y"]) * max(1, *(len(y) if isinstance(y, list) else 1
                                                             for y in body["y"].values())), name


def _leaves(tree) -> int:
    """How many values a (nested) metrics mapping holds."""
    return sum(_leaves(v) for v in tree.values()) if isinstance(tree, dict) else 1


def _default_run_plot_sources() -> list[tuple[str, str, list[str]]]:
    """(plot, source, columns) for every plot source dvc.yaml declares for the default run: the per-model files
    of params.yaml's ``model_ids`` and the files of study-wide outputs (a literal path, no ``${...}``); a line
    naming another model (added to compare another run) is not this run's."""
    models = set(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["model_ids"])
    literal = [out.rstrip("/") for _, body in _stage_bodies(_dvc_yaml()) for o in body.get("outs", [])
               for out in [next(iter(o)) if isinstance(o, dict) else o] if "${" not in out]
    sources = []
    for entry in _dvc_yaml()["plots"]:
        for name, body in entry.items():
            for source, y in body["y"].items():
                if set(Path(source).parts) & models or any(source == o or source.startswith(f"{o}/") for o in literal):
                    sources.append((name, source, [body["x"], *([y] if isinstance(y, str) else y)]))
    return sources


def _default_run_done() -> bool:
    return any((ROOT / source).is_file() for _, source, _ in _default_run_plot_sources())


def test_the_plots_name_every_model_of_the_default_run():
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    named = {part for _, source, _ in _default_run_plot_sources() for part in Path(source).parts}
    assert set(params["model_ids"]) <= named, sorted(set(params["model_ids"]) - named)


@pytest.mark.skipif(not _default_run_done(), reason="needs the default run's outputs (make run): no plot source of "
                                                    "dvc.yaml exists under reports/")
def test_the_default_runs_plot_sources_hold_each_plots_columns():
    """After `make run`, every plot source dvc.yaml declares for the run's models exists and holds the plot's x
    and y columns (what `dvc plots show` draws)."""
    missing = [source for _, source, _ in _default_run_plot_sources() if not (ROOT / source).is_file()]
    assert not missing, missing
    for name, source, columns in _default_run_plot_sources():
        header = set(pd.read_csv(ROOT / source, nrows=0).columns)
        assert set(columns) <= header, (name, source, header)
