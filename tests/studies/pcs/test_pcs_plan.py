"""`stereolens plan` for pcs: responses and judge calls that can be checked by hand."""

from __future__ import annotations

import pytest

from stereolens.cli import plan_requests


@pytest.fixture(autouse=True)
def _in_repo(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)  # conf/ and data/seed/pcs, as the stages read them


def test_default_selection_with_two_samples_by_hand():
    # 1 scenario per dimension x domain = 3 x 2 = 6, one language, 3 conditions, 2 samples = 36 responses;
    # the default judge asks one prompt per rubric feature (4 per dimension) = 144 calls
    # every model of the run in its own stages, named as dvc.yaml names them
    rows = plan_requests(["pcs"], ["study.pcs.languages=[hi]", "study.pcs.collection.samples=2"])
    assert [(r["stage"], r["model"], r["count"]) for r in rows] == [
        ("pcs_collect@gemma3-270m", "gemma3-270m", 36), ("pcs_judge@gemma3-270m", "smollm2-135m", 144),
        ("pcs_collect@smollm2-135m", "smollm2-135m", 36), ("pcs_judge@smollm2-135m", "smollm2-135m", 144)]
    # the primary model alone
    rows = plan_requests(["pcs"], ["study.pcs.languages=[hi]", "study.pcs.collection.samples=2", "compare_with=[]"])
    assert [(r["stage"], r["count"]) for r in rows] == [("pcs_collect@gemma3-270m", 36),
                                                        ("pcs_judge@gemma3-270m", 144)]


def test_json_panel_judges_each_response_once_per_judge():
    rows = plan_requests(["pcs"], ["study.pcs.languages=[hi,ur]", "study/pcs/judges=config_a_benchmark",
                                   "compare_with=[]"])
    assert [(r["stage"], r["count"]) for r in rows] == [("pcs_collect@gemma3-270m", 36)] + \
        [("pcs_judge@gemma3-270m", 36)] * 3
