"""Fixtures of the pcs tests."""

from __future__ import annotations

import pytest
import yaml

from stereolens.io import write_json


@pytest.fixture
def analyze_stage(tmp_path, monkeypatch):
    """A folder (the working directory) where `stereolens stage pcs-analyze` can run on the scores a test writes
    to data/interim/pcs/m/scores.csv: gates passed, tracking off, Hindi and Urdu.  Returns a function that rewrites
    params.yaml with another ``study.pcs.analysis`` block."""
    monkeypatch.chdir(tmp_path)
    write_json(tmp_path / "reports/pcs/m/gates.json", {"enforced": False, "all_passed": True, "gates": {}})

    def write_params(analysis: dict | None = None) -> None:
        params = {"model": {"id": "m", "name": "m"}, "language": {"include": None}, "tracking": {"enabled": False},
                  "seed": 0, "study": {"pcs": {"name": "t", "languages": ["hi", "ur"], "collection": {"samples": 1},
                                               "judges": {"panel": [{"id": "j", "model": None}]}, "human_validation": {},
                                               "analysis": analysis or {}}}}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")

    write_params()
    return write_params
