"""lineage/graph.py reads the pipeline two ways: with the lock (load_stages: md5s and params for lineage) and from
dvc.yaml alone (declared_stages: what a starting stage reads, without parsing a 300 kB lock). Both go through DVC's
own resolver, so on the project's real dvc.yaml they must list the same stages, commands and deps."""

from __future__ import annotations

from pathlib import Path

from stereolens.lineage.graph import declared_stages, load_stages

ROOT = Path(__file__).resolve().parents[2]


def test_declared_stages_are_the_locked_pipeline_without_its_md5s():
    declared = declared_stages(ROOT)
    locked = [(record.name, record.cmd, [dep.path for dep in record.deps]) for record in load_stages(ROOT)]
    assert len(declared) > 50 and any("@" in name for name, _, _ in declared)  # foreach expanded
    assert sorted(declared) == sorted(locked)
