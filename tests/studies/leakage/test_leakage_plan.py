"""`stereolens plan` for leakage: request counts that can be checked by hand from the seed tables."""

from __future__ import annotations

import pytest

from stereolens.cli import main, plan_requests


@pytest.fixture(autouse=True)
def _in_repo(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)  # conf/ and data/seed/leakage, as the stages read them


def _counts(rows):
    return {(r["language"], r["request"]): r["count"] for r in rows}


def test_default_design_counts_by_hand():
    # one template per language; 30 groups + the generic prior x 32 traits, one word each = 31 x 32;
    # matching design: 13 positive, 13 negative, 6 neutral traits paired once = 7 + 7 + 3 pairs, in both orders,
    # x 10 shared/shared groups = 340 queries, 3 options each (log-probability mode for a causal model)
    # the default runs ILPS only for a causal model; `methods.causal` with choice adds the choice queries
    rows = plan_requests(["leakage"], ["language=en"])
    assert _counts(rows) == {("en", "ilps: continuation scores"): 31 * 32}
    rows = plan_requests(["leakage"], ["language=en", "study.leakage.methods.causal=[ilps,choice]"])
    assert _counts(rows) == {("en", "ilps: continuation scores"): 31 * 32,
                             ("en", "choice: continuation scores"): 3 * 10 * 17 * 2}


def test_paper_choice_design_and_sampling_mode_by_hand():
    # design all, both orders: 2 C(13, 2) + C(6, 2) = 171 pairs, x 2 orders, x 30 groups;
    # a chat model cannot score given continuations, so it samples n_samples answers per query
    rows = plan_requests(["leakage"], ["language=ru", "study.leakage.choice.design=all",
                                       "study.leakage.choice.both_orders=true", "study.leakage.choice.groups=null",
                                       "study.leakage.choice.n_samples=3", "model=openai_chat"])
    assert _counts(rows) == {("ru", "choice: generations"): 3 * 30 * 2 * 171}


def test_language_filter_and_cli(capsys):
    assert plan_requests(["leakage"], ["language=de"]) == []
    assert main(["plan", "--study", "leakage", "--json", "language=zh"]) == 0
    assert '"count": 992' in capsys.readouterr().out
