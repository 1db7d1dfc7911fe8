"""`stereolens power`: the planning questions, each cell's MDE on the real CrowS-Pairs, files with
their cell column, and bad input as one line with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from stereolens.cli import main
from stereolens.datasets import ingest_dataset, load_registry
from stereolens.datasets.crows_pairs import CROWS_BIAS_TYPES
from stereolens.stats.power import minimum_detectable_rate

REPO = Path(__file__).resolve().parents[2]


def run_json(capsys, *argv: str) -> dict:
    assert main(["power", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_rate_gives_194_pairs_and_the_family_level(capsys):
    result = run_json(capsys, "--rate", "0.60", "--cells", "9", "--ties", "0.1")
    plain, family = result["levels"]
    assert plain["level"] == "unadjusted" and plain["normal"] == 194 and plain["normal_raw"] == 216
    assert family["level"] == "bonferroni" and family["alpha"] == pytest.approx(0.05 / 9)
    assert family["normal"] > plain["normal"] and family["exact"] >= family["normal"] - 5
    assert main(["power", "--rate", "0.60", "--cells", "9"]) == 0
    text = capsys.readouterr().out
    assert "194" in text and "Holm's first step" in text and "0.00556" in text


def test_effect_and_two_models(capsys):
    assert run_json(capsys, "--effect", "0.2")["levels"][0]["items"] == 199
    mcnemar = run_json(capsys, "--discordance", "0.2", "--difference", "0.05")["levels"][0]
    assert mcnemar["normal"] == 626 and mcnemar["exact"] >= 626


def test_crows_cells_on_the_real_dataset(capsys, tmp_path, monkeypatch, data_mirror):
    """The MDE of each CrowS-Pairs bias type from the ingested file: disability has 60 pairs, MDE about
    0.68 unadjusted and 0.73 at Bonferroni over the 9 types (issue 32)."""
    spec = load_registry(REPO / "data/seed/datasets.yaml")["crows_pairs"]
    ingest_dataset(spec, tmp_path / "data/raw/crows_pairs", mirror=data_mirror)
    monkeypatch.chdir(tmp_path)
    result = run_json(capsys, "--dataset", "crows")
    cells = {row["cell"]: row for row in result["cells"]}
    assert set(cells) == set(CROWS_BIAS_TYPES) and result["family_size"] == 9
    disability = cells["disability"]
    assert disability["n"] == 60
    assert disability["mde_normal"] == pytest.approx(0.68, abs=0.005)
    assert disability["mde_adjusted_normal"] == pytest.approx(0.73, abs=0.006)
    assert disability["mde"] == pytest.approx(minimum_detectable_rate(60).above)
    assert disability["mde_adjusted"] == pytest.approx(minimum_detectable_rate(60, alpha=0.05 / 9).above)
    assert main(["power", "--dataset", "crows"]) == 0
    text = capsys.readouterr().out
    assert "disability" in text and "0.739" in text


def test_a_scored_file_counts_untied_pairs_per_cell_and_model(capsys, tmp_path):
    rows = [("m1", "caste", -1.0, -2.0), ("m1", "caste", -3.0, -3.0), ("m1", "gender", -1.0, -2.0),
            ("m2", "caste", -1.0, -2.0), ("m2", "caste", -2.0, -1.0), ("m2", "gender", -2.0, -2.0)]
    path = tmp_path / "scores.csv"
    pd.DataFrame(rows, columns=["model", "dimension", "score_stereo", "score_anti"]).to_csv(path, index=False)
    result = run_json(capsys, "--dataset", str(path))
    counts = {row["cell"]: (row["pairs"], row["n"]) for row in result["cells"]}
    assert counts == {"m1 / caste": (2, 1), "m1 / gender": (1, 1), "m2 / caste": (2, 2), "m2 / gender": (1, 0)}
    assert result["cell_columns"] == ["model", "dimension"] and result["family_size"] == 4


def test_an_unscored_file_shrinks_its_cells_by_the_expected_ties(capsys):
    result = run_json(capsys, "--dataset", str(REPO / "examples/stereo_instances.csv"), "--ties", "0.5")
    assert result["cell_columns"] == ["country"]
    assert all(row["n"] == row["pairs"] // 2 for row in result["cells"])


def same_up_to_stored_precision(written, printed) -> bool:
    """The file holds floats at the project's stored precision (io.write_json); stdout holds them whole."""
    if isinstance(printed, dict):
        return written.keys() == printed.keys() and all(same_up_to_stored_precision(written[k], printed[k]) for k in printed)
    if isinstance(printed, list):
        return len(written) == len(printed) and all(map(same_up_to_stored_precision, written, printed))
    if isinstance(printed, float):
        return written == pytest.approx(printed, rel=1e-6)
    return written == printed


@pytest.mark.parametrize("argv", [["--rate", "0.7", "--cells", "3"], ["--dataset", str(REPO / "examples/pairs_scores.csv")]])
def test_output_writes_the_same_object(argv, capsys, tmp_path):
    out = tmp_path / "power.json"
    printed = run_json(capsys, *argv, "--output", str(out))
    assert same_up_to_stored_precision(json.loads(out.read_text()), printed)


@pytest.mark.parametrize("argv, expect", [
    (["--rate", "-0.1"], "--rate must be in [0, 1], got -0.1"),
    (["--rate", "0.5"], "--rate 0.5 is no preference"),
    (["--dataset", "nope"], "--dataset 'nope': unknown dataset"),
    (["--dataset", "missing.csv"], "not found: missing.csv"),
    (["--dataset", "crows", "--raw-dir", "{tmp}"], "CrowS-Pairs is not ingested"),
    ([], "give exactly one of"),
    (["--rate", "0.6", "--effect", "0.2"], "not --rate and --effect"),
    (["--discordance", "0.2"], "--discordance and --difference go together"),
    (["--difference", "0.05"], "--discordance and --difference go together"),
    (["--rate", "0.6", "--output", "{tmp}"], "it is a folder"),
    (["--discordance", "0.1", "--difference", "0.2"], "--difference must be nonzero and at most the --discordance"),
    (["--effect", "0"], "--effect must be a nonzero"),
    (["--rate", "0.6", "--alpha", "1.5"], "--alpha must be in (0, 1)"),
    (["--rate", "0.6", "--ties", "1"], "--ties must be in [0, 1)"),
    (["--rate", "0.6", "--cells", "0"], "--cells must be a whole number"),
    (["--dataset", "{tmp}/bad.csv"], "line 3, column score_anti: 'x' is not a number"),
    (["--dataset", str(REPO / "examples/pairs.csv"), "--cell", "bias_type"], "missing column(s) bias_type"),
])
def test_bad_input_is_one_line_and_exit_2(argv, expect, capsys, tmp_path):
    (tmp_path / "bad.csv").write_text("dimension,score_stereo,score_anti\ncaste,-1,-2\ncaste,-1,x\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["power", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stereolens: error: ") and expect in err[0], err
