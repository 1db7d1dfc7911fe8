"""Ingest copies pinned public data byte-for-byte, or refuses it and keeps what was there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from stereolens.datasets import ingest_dataset, load_registry
from stereolens.errors import DataError
from stereolens.io import sha256_file

REGISTRY = Path(__file__).resolve().parents[2] / "data" / "seed" / "datasets.yaml"


def test_registry_lists_both_public_datasets():
    registry = load_registry(REGISTRY)
    assert {"crows_pairs", "stereotype_leakage"} <= set(registry)
    for spec in registry.values():
        assert spec.commit and len(spec.commit) == 40
        assert all(len(f.sha256) == 64 for f in spec.files)


def test_ingest_from_mirror_verifies_every_file(tmp_path, data_mirror):
    spec = load_registry(REGISTRY)["stereotype_leakage"]
    out = ingest_dataset(spec, tmp_path / "raw" / spec.name, mirror=data_mirror)
    for fspec in spec.files:
        assert sha256_file(out / fspec.name) == fspec.sha256
    provenance = json.loads((out / "PROVENANCE.json").read_text())
    assert provenance["license"] == "MIT" and provenance["source"] == "mirror"
    assert all(entry["origin"].startswith("mirror:") for entry in provenance["files"])


def test_checksum_mismatch_refuses_and_keeps_previous_output(tmp_path, data_mirror):
    spec = load_registry(REGISTRY)["crows_pairs"]
    out = tmp_path / "raw" / spec.name
    ingest_dataset(spec, out, mirror=data_mirror)
    before = sha256_file(out / "crows_pairs_anonymized.csv")

    tampered = tmp_path / "mirror"
    shutil.copytree(data_mirror / spec.name, tampered / spec.name)
    target = tampered / spec.name / "crows_pairs_anonymized.csv"
    target.chmod(0o644)
    with open(target, "a", encoding="utf-8") as fh:
        fh.write("tampered\n")
    with pytest.raises(DataError, match="checksum mismatch for crows_pairs_anonymized.csv"):
        ingest_dataset(spec, out, mirror=tampered)
    assert sha256_file(out / "crows_pairs_anonymized.csv") == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "staging directory left behind"


def test_missing_mirror_file_is_one_clear_line(tmp_path):
    spec = load_registry(REGISTRY)["crows_pairs"]
    (tmp_path / "mirror" / spec.name).mkdir(parents=True)
    with pytest.raises(DataError) as err:
        ingest_dataset(spec, tmp_path / "out", mirror=tmp_path / "mirror")
    assert "not found in mirror" in str(err.value) and "\n" not in str(err.value)


def test_a_raw_file_changed_after_ingest_is_refused_by_the_stage_that_reads_it(tmp_path):
    """#18: the stage reading data/raw/ re-verifies the sha256 recorded at ingest."""
    import json as _json

    from stereolens.datasets.crows_pairs import crows_pairs_table
    from stereolens.datasets.ingest import verify_ingested
    from stereolens.errors import DataError
    from stereolens.io import sha256_file

    raw = tmp_path / "crows_pairs"
    raw.mkdir()
    csv = raw / "crows_pairs_anonymized.csv"
    csv.write_text(",sent_more,sent_less,stereo_antistereo,bias_type\n0,Poor people steal.,Rich people steal.,"
                   "stereo,socioeconomic\n", encoding="utf-8")
    (raw / "PROVENANCE.json").write_text(_json.dumps({"files": [{"file": csv.name, "sha256": sha256_file(csv)}]}))
    assert len(crows_pairs_table(csv)) == 1
    csv.write_text(csv.read_text().replace("Poor", "Lazy"), encoding="utf-8")
    with pytest.raises(DataError, match=r"changed after ingest: .*dvc checkout"):
        crows_pairs_table(csv)
    (raw / "other.csv").write_text("x\n")
    with pytest.raises(DataError, match="not listed in"):
        verify_ingested(raw / "other.csv")


def test_a_crows_sample_is_the_same_seeded_subset_in_file_order(tmp_path):
    """`study.crows.sample`: N pairs drawn uniformly with the seed, kept in file order, identical on every call (so
    every model of a run scores the same pairs); `limit` then takes the first N of them."""
    import json as _json

    from stereolens.datasets.crows_pairs import crows_pairs_table
    from stereolens.io import sha256_file

    raw = tmp_path / "crows_pairs"
    raw.mkdir()
    csv = raw / "crows_pairs_anonymized.csv"
    rows = [f"{i},Sentence {i} more.,Sentence {i} less.,stereo,{'age' if i % 2 else 'gender'}" for i in range(20)]
    csv.write_text(",sent_more,sent_less,stereo_antistereo,bias_type\n" + "\n".join(rows) + "\n", encoding="utf-8")
    (raw / "PROVENANCE.json").write_text(_json.dumps({"files": [{"file": csv.name, "sha256": sha256_file(csv)}]}))
    full = crows_pairs_table(csv)
    drawn = crows_pairs_table(csv, sample=6, seed=3)
    # the known answer: numpy's seeded draw of 6 of the 20 row positions, sorted
    expected = sorted(np.random.RandomState(3).permutation(20)[:6])
    assert list(drawn.index) == expected and list(drawn["id"]) == [f"crows-{i}" for i in expected]
    assert drawn.equals(crows_pairs_table(csv, sample=6, seed=3)) and not drawn.equals(crows_pairs_table(csv, sample=6, seed=4))
    assert list(crows_pairs_table(csv, sample=6, seed=3, limit=2)["id"]) == list(drawn["id"][:2])
    assert crows_pairs_table(csv, sample=50).equals(full)  # a sample as large as the set is the set
