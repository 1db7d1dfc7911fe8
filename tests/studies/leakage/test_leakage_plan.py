"""`stereolens plan` for leakage: request counts that can be checked by hand from the seed tables, for every
model of the run, under dvc.yaml's stage names."""

from __future__ import annotations

import pytest

from stereolens.cli import main, plan_requests

RUN = ("gemma3-270m", "smollm2-135m")  # the default run: the primary model, then compare_with


@pytest.fixture(autouse=True)
def _in_repo(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)  # conf/ and data/seed/leakage, as the stages read them


def _counts(rows):
    return {(r["stage"], r["model"], r["request"]): r["count"] for r in rows}


def test_default_design_counts_by_hand():
    # one template per language; 30 groups + the generic prior x 32 traits, one word each = 31 x 32;
    # matching design: 13 positive, 13 negative, 6 neutral traits paired once = 7 + 7 + 3 pairs, in both orders,
    # x 10 shared/shared groups = 340 queries, 3 options each (log-probability mode for a causal model);
    # every model of the run in its own leakage_scores@<model>-<language> stage (dvc.yaml's matrix)
    # the default runs ILPS only for a causal model; `methods.causal` with choice adds the choice queries
    rows = plan_requests(["leakage"], ["language=en"])
    assert _counts(rows) == {(f"leakage_scores@{m}-en", m, "ilps: continuation scores"): 31 * 32 for m in RUN}
    rows = plan_requests(["leakage"], ["language=en", "study.leakage.methods.causal=[ilps,choice]"])
    assert _counts(rows) == {**{(f"leakage_scores@{m}-en", m, "ilps: continuation scores"): 31 * 32 for m in RUN},
                             **{(f"leakage_scores@{m}-en", m, "choice: continuation scores"): 3 * 10 * 17 * 2
                                for m in RUN}}


def test_paper_choice_design_and_sampling_mode_by_hand():
    # design all, both orders: 2 C(13, 2) + C(6, 2) = 171 pairs, x 2 orders, x 30 groups;
    # a chat model cannot score given continuations, so it samples n_samples answers per query; the compared
    # causal model (smollm2-135m) runs ILPS, its default
    rows = plan_requests(["leakage"], ["language=ru", "study.leakage.choice.design=all",
                                       "study.leakage.choice.both_orders=true", "study.leakage.choice.groups=null",
                                       "study.leakage.choice.n_samples=3", "model=openai_chat"])
    assert _counts(rows) == {("leakage_scores@gpt-4o-mini-ru", "gpt-4o-mini", "choice: generations"): 3 * 30 * 2 * 171,
                             ("leakage_scores@smollm2-135m-ru", "smollm2-135m", "ilps: continuation scores"): 31 * 32}


def test_the_papers_design_counts_every_model_and_finishes_in_seconds(monkeypatch, repo_root):
    """`plan --study leakage study/leakage=paper` ran past 600 s: every item looked its trait's forms up in the
    whole trait-word table (3968 items per language), and the items were rebuilt for every model and method.
    Now each (trait, gender, number) is looked up once per build, and the items once per language."""
    import pandas as pd

    from stereolens.studies.leakage import choice, items, plan

    calls = {"trait_forms": 0, "build_items": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(items, "trait_forms", counted("trait_forms", items.trait_forms))
    monkeypatch.setattr(choice, "trait_forms", counted("trait_forms", choice.trait_forms))
    monkeypatch.setattr(plan, "build_items", counted("build_items", plan.build_items))
    rows = plan_requests(["leakage"], ["study/leakage=paper"])
    languages = ("en", "ru", "zh", "hi")
    assert calls["build_items"] == len(languages)
    # at most a lookup per trait and template form per language (32 traits x a few forms), and 32 base forms
    # for the choice queries, not one per item
    assert calls["trait_forms"] <= len(languages) * (32 * 6 + 32)
    # every template: 30 groups + the prior x 32 traits (one word each) per template
    templates = pd.read_csv(repo_root / "data/seed/leakage/templates.csv", dtype=str)
    per_language = {lang: templates.loc[templates["language"] == lang, "template_id"].nunique() * 31 * 32
                    for lang in languages}
    counts = _counts(rows)
    for lang in languages:
        primary = f"leakage_scores@gemma3-270m-{lang}"
        assert counts[(primary, "gemma3-270m", "ilps: continuation scores")] == per_language[lang]
        assert counts[(primary, "gemma3-270m", "choice: continuation scores")] == 3 * 2 * 171 * 30
        # the paper's extra models are scored beside the primary model only, as the stage does
        assert counts[(primary, "mbert", "set: masked trait scores")] == per_language[lang]
        assert counts[(primary, "mt5-base", "ilps: continuation scores")] == per_language[lang]
        compared = f"leakage_scores@smollm2-135m-{lang}"
        assert counts[(compared, "smollm2-135m", "ilps: continuation scores")] == per_language[lang]
        assert not any(stage == compared and model in ("mbert", "mt5-base") for stage, model, _ in counts)
        # the monolingual baseline in every model's stage
        assert sum(stage.endswith(f"-{lang}") and "baseline" in request for stage, _, request in counts) == 2


def test_language_filter_and_cli(capsys):
    assert plan_requests(["leakage"], ["language=de"]) == []
    assert main(["plan", "--study", "leakage", "--json", "language=zh"]) == 0
    out = capsys.readouterr().out
    assert '"count": 992' in out and '"stage": "leakage_scores@smollm2-135m-zh"' in out


def test_every_planned_stage_is_a_dvc_yaml_stage(repo_root, data_mirror, tmp_path, monkeypatch):
    """The stage names `plan` prints are the ones `dvc stage list` gives (dvc.yaml's foreach and matrix names)."""
    import os
    import subprocess

    from stereolens.datasets import ingest_dataset, load_registry

    listed = subprocess.run(["dvc", "stage", "list", "--name-only"], cwd=repo_root, capture_output=True, text=True,
                            check=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"}).stdout.split()
    planned = {r["stage"] for r in plan_requests(["leakage", "pcs"], [])}
    monkeypatch.chdir(tmp_path)  # crows reads data/raw/ relative to the project
    ingest_dataset(load_registry(repo_root / "data/seed/datasets.yaml")["crows_pairs"], "data/raw/crows_pairs",
                   mirror=str(data_mirror))
    planned |= {r["stage"] for r in plan_requests(["crows"], [], config_dir=str(repo_root / "conf"))}
    assert planned and planned <= set(listed), sorted(planned - set(listed))
    assert {"crows_score@smollm2-135m", "leakage_scores@smollm2-135m-hi", "pcs_judge@smollm2-135m"} <= planned
