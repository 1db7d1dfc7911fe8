"""`stereolens annotation ...` and `stereolens leakage human`."""

from __future__ import annotations

import json

import krippendorff
import numpy as np
import pandas as pd
import pytest

from stereolens.studies.leakage.matrices import read_matrix
from stereolens.annotation.scales import LIKERT5
from stereolens.annotation.simulate import simulate_annotations
from stereolens.cli import build_parser, main


@pytest.fixture()
def judgements(tmp_path):
    df = simulate_annotations([f"i{k}" for k in range(60)], 4, LIKERT5, reliability=0.7, seed=5)
    path = tmp_path / "judgements.csv"
    df.to_csv(path, index=False)
    return path, df


def test_agreement_prints_json(judgements, capsys):
    path, df = judgements
    assert main(["annotation", "agreement", "--input", str(path), "--metric", "krippendorff",
                 "--level", "ordinal", "--resamples", "200"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"metric", "level", "value", "ci_low", "ci_high", "n"} <= set(out)
    wide = df.pivot(index="annotator_id", columns="item_id", values="label").to_numpy(dtype=float)
    assert out["value"] == pytest.approx(krippendorff.alpha(reliability_data=wide, level_of_measurement="ordinal"))
    assert out["ci_low"] < out["value"] < out["ci_high"] and out["n"] == 60 and out["level"] == "ordinal"
    assert out["n_boot"] == 200  # --resamples, the one name of the bootstrap count across the CLIs


def test_agreement_errors_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("item,annotator_id,label\n1,a,x\n")
    assert main(["annotation", "agreement", "--input", str(bad), "--metric", "fleiss"]) == 2
    assert "missing column(s) item_id" in capsys.readouterr().err
    good = tmp_path / "good.csv"
    good.write_text("item_id,annotator_id,label\n1,a,x\n1,b,y\n")
    assert main(["annotation", "agreement", "--input", str(good), "--metric", "fleiss", "--level", "ordinal"]) == 2


def test_export_import_simulate_roundtrip(tmp_path, capsys):
    items = tmp_path / "items.csv"
    pd.DataFrame({"item_id": ["a", "b"], "text": ["x", "y"]}).to_csv(items, index=False)
    assert main(["annotation", "export", "--items", str(items), "--scale", "yes_no",
                 "--instructions", "Valid?", "--output", str(tmp_path / "tasks")]) == 0
    assert (tmp_path / "tasks" / "tasks.label_studio.json").exists()
    sim = tmp_path / "sim.csv"
    assert main(["annotation", "simulate", "--items", str(items), "--scale", "yes_no",
                 "--annotators", "3", "--output", str(sim)]) == 0
    assert (pd.read_csv(sim)["source"] == "simulated").all()
    assert main(["annotation", "import", "--input", str(sim), "--scale", "yes_no", "--items", str(items),
                 "--output", str(tmp_path / "clean.csv")]) == 0
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("item_id,annotator_id,label\na,1,yes\nzz,1,no\n")
    assert main(["annotation", "import", "--input", str(wrong), "--scale", "yes_no", "--items", str(items),
                 "--output", str(tmp_path / "x.csv")]) == 2
    assert "line 3: unknown item_id 'zz'" in capsys.readouterr().err


def test_leakage_parser_is_shared():
    from stereolens.cli_support import get_or_create_subparser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    leakage = get_or_create_subparser(sub, "leakage")
    leakage.add_parser("test-only-action")  # another module attaching to the same command
    assert {"human", "test-only-action"} <= set(leakage.choices)
    assert get_or_create_subparser(sub, "leakage") is leakage


def test_leakage_human_writes_matrices(data_mirror, tmp_path, capsys):
    survey = data_mirror / "stereotype_leakage"
    # the study's minimum (5) flags the thinner groups the published files keep; it does not blank them
    assert main(["leakage", "human", "--survey", str(survey), "--output", str(tmp_path)]) == 0
    for lang in ("EN", "RU", "ZH", "HI"):
        ours = read_matrix(tmp_path / f"H_{lang}.csv", missing_code=None)
        published = read_matrix(survey / f"aggregated_data_{lang}.csv")
        assert ours.shape == (32, 30) and (ours.isna() == published.isna()).all().all()
        # written at seven significant digits (stereolens.io.SIGNIFICANT_DIGITS): equal to half a unit of the seventh
        np.testing.assert_allclose(ours.to_numpy(dtype=float), published.to_numpy(dtype=float), rtol=5e-7, atol=0)
    header = (tmp_path / "H_EN.csv").read_text().splitlines()[0]
    assert header.startswith("Traits,woman,immigrant,")
    assert (tmp_path / "thin_groups.csv").read_text().splitlines() == [
        "language,group,n_annotators,min_annotators_per_group", "HI,immigrant,1,5", "HI,Asian person,4,5"]
