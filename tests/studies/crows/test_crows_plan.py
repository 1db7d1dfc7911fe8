"""`stereolens plan` for crows: two sentence scores per selected pair, none when English is filtered out."""

from __future__ import annotations

from stereolens.cli import plan_requests
from stereolens.datasets import ingest_dataset, load_registry


def test_crows_counts_follow_limit_language_and_metric(repo_root, data_mirror, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the stage reads data/raw/ relative to the project
    ingest_dataset(load_registry(repo_root / "data/seed/datasets.yaml")["crows_pairs"], "data/raw/crows_pairs",
                   mirror=str(data_mirror))
    conf = str(repo_root / "conf")

    def count(*overrides):
        (row,) = plan_requests(["crows"], [*overrides, "compare_with=[]"], config_dir=conf)
        return row["count"], row["request"]

    assert count() == (2 * 500, "sentence scores (one pass each)")  # the default's seeded sample
    assert count("study/crows=paper") == (2 * 1508, "sentence scores (one pass each)")
    assert count("study.crows.limit=25") == (50, "sentence scores (one pass each)")
    assert count("study.crows.limit=25", "language=hi")[0] == 0
    assert count("model=mbert", "metric=pll_word_l2r", "study.crows.limit=3") == (
        6, "sentence scores (one pass per scored token)")


def test_crows_counts_every_model_of_the_run(repo_root, data_mirror, tmp_path, monkeypatch):
    """The default run measures two models: each has its own crows_score@<model> stage (dvc.yaml's name)."""
    monkeypatch.chdir(tmp_path)
    ingest_dataset(load_registry(repo_root / "data/seed/datasets.yaml")["crows_pairs"], "data/raw/crows_pairs",
                   mirror=str(data_mirror))
    rows = plan_requests(["crows"], [], config_dir=str(repo_root / "conf"))
    assert [(r["stage"], r["model"], r["count"]) for r in rows] == [("crows_score@gemma3-270m", "gemma3-270m", 1000),
                                                                    ("crows_score@smollm2-135m", "smollm2-135m", 1000)]
    # a chat model compared with the primary is skipped by the stage, and so in the plan, with its reason
    rows = plan_requests(["crows"], ["model=openai_chat"], config_dir=str(repo_root / "conf"))
    assert [(r["model"], r["count"]) for r in rows] == [("gpt-4o-mini", 0), ("smollm2-135m", 1000)]
    assert "chat model" in rows[0]["note"]
