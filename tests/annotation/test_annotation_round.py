"""A whole annotation round from config: collect, QC, agreement, aggregation, gate."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from stereolens.annotation.config import AnnotationConfig
from stereolens.annotation.round import collect_judgements, review_round
from stereolens.cli import main
from stereolens.errors import ConfigError, DataError, GateFailed

ITEMS = pd.DataFrame({"item_id": [f"s{k}" for k in range(60)], "text": ["x"] * 60, "truth": [1, 2, 3, 4, 5] * 12})


def config(repo_root, source, **overrides):
    cfg = yaml.safe_load((repo_root / "conf" / "annotation" / f"{source}.yaml").read_text())
    cfg.update(overrides)
    cfg.setdefault("bootstrap", {})["n_boot"] = 100
    return AnnotationConfig.from_config(cfg)


def test_config_refuses_unknown_keys_and_sources(repo_root):
    with pytest.raises(ConfigError, match="annotation.thresold"):
        AnnotationConfig.from_config({"source": "human", "thresold": 1})
    with pytest.raises(ConfigError, match="not one of"):
        AnnotationConfig.from_config({"source": "crowd"})
    for source in ("human", "simulated", "llm_panel"):
        assert config(repo_root, source).source == source


def test_simulated_round_median_discard_and_metrics(repo_root, tmp_path):
    cfg = config(repo_root, "simulated", simulator={"n_annotators": 5, "reliability": 0.9, "seed": 1})
    judgements = collect_judgements(cfg, ITEMS)
    assert (judgements["source"] == "simulated").all()
    review = review_round(judgements, cfg, study="stereo", artefact="sim.csv", report_dir=tmp_path)
    assert review.gate.success
    agg = review.aggregated.set_index("item_id").join(ITEMS.set_index("item_id")["truth"])
    # reliable annotators: the median recovers the truth, and truths <= 2 are discarded
    assert (agg["median"] == agg["truth"]).mean() > 0.9
    assert (agg["keep"] == (agg["truth"] > 2)).mean() > 0.9
    metrics = review.metrics()
    assert metrics["krippendorff_alpha_ci_low"] < metrics["krippendorff_alpha"] < metrics["krippendorff_alpha_ci_high"]
    paths = review.write(tmp_path / "out")
    assert json.loads(paths["agreement"].read_text())["source"] == "simulated"
    assert (pd.read_csv(paths["items"])["source"] == "simulated").all()


def test_noisy_round_fails_gate(repo_root, tmp_path):
    cfg = config(repo_root, "simulated", simulator={"n_annotators": 5, "reliability": 0.0, "seed": 1})
    with pytest.raises(GateFailed, match=r"column .fleiss_kappa. observed 0\.\d+, threshold min_value=0\.4 \(\+1 more"):
        review_round(collect_judgements(cfg, ITEMS), cfg, study="stereo", artefact="sim.csv", report_dir=tmp_path)


def test_human_round_needs_a_file(repo_root):
    with pytest.raises(ConfigError, match="judgements file"):
        collect_judgements(config(repo_root, "human"), ITEMS)


def test_review_cli_writes_outputs_then_gates(repo_root, tmp_path, capsys):
    cfg = config(repo_root, "simulated", simulator={"n_annotators": 5, "reliability": 0.0, "seed": 2})
    path = tmp_path / "judgements.csv"
    collect_judgements(cfg, ITEMS).to_csv(path, index=False)
    args = ["annotation", "review", "--input", str(path), "--config", str(repo_root / "conf/annotation/simulated.yaml"),
            "--study", "stereo", "--output", str(tmp_path / "out"), "--report-dir", str(tmp_path / "q")]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "[stereo] gate 'annotation_quality' failed" in captured.err
    assert json.loads(captured.out)["source"] == "simulated"
    assert (tmp_path / "out" / "annotators.csv").exists() and (tmp_path / "q" / "stereo__annotation_quality.json").exists()


def test_round_refuses_mixed_or_contradicting_sources(repo_root, tmp_path):
    cfg = config(repo_root, "simulated", simulator={"n_annotators": 5, "reliability": 0.9, "seed": 1})
    judgements = collect_judgements(cfg, ITEMS)
    mixed = judgements.assign(source=["simulated"] * (len(judgements) - 1) + ["human"])
    with pytest.raises(DataError, match=r"^sim.csv mix sources \['human', 'simulated'\]; review one source per round$"):
        review_round(mixed, cfg, study="stereo", artefact="sim.csv", report_dir=tmp_path)
    with pytest.raises(DataError, match=r"sim.csv say source='simulated' but annotation.source='human'"):
        review_round(judgements, config(repo_root, "human"), study="stereo", artefact="sim.csv", report_dir=tmp_path)
    with pytest.raises(DataError, match=r"^sim.csv line 5, column source: empty source while other rows have one"):
        review_round(judgements.assign(source=judgements["source"].where(judgements.index != 3)), cfg,
                     study="stereo", artefact="sim.csv", report_dir=tmp_path)


def test_every_round_output_and_the_gate_report_carry_the_source(repo_root, tmp_path):
    cfg = config(repo_root, "simulated", simulator={"n_annotators": 6, "reliability": 0.95, "seed": 3})
    judgements = collect_judgements(cfg, ITEMS)
    judgements["group"] = judgements["item_id"].map(lambda i: "a" if int(i[1:]) < 30 else "b")
    review = review_round(judgements, cfg, study="stereo", artefact="sim.csv", report_dir=tmp_path / "q")
    assert review.source == "simulated" and review.gate.success
    paths = review.write(tmp_path / "out")
    for key in ("judgements", "annotators", "per_language", "groups", "items", "coverage"):
        table = pd.read_csv(paths[key])
        assert len(table) and (table["source"] == "simulated").all(), key
    assert json.loads(review.gate.report_path.read_text())["source"] == "simulated"


def test_item_whose_annotators_all_fail_qc_fails_the_round(repo_root, tmp_path):
    cfg = config(repo_root, "simulated", simulator={"n_annotators": 5, "reliability": 0.95, "seed": 4})
    judgements = collect_judgements(cfg, ITEMS)
    # s0 was labelled only by five annotators who all got the attention item wrong
    careless = judgements[judgements["item_id"] == "s0"].assign(annotator_id=lambda d: "c" + d["annotator_id"])
    judgements = pd.concat([judgements[judgements["item_id"] != "s0"], careless], ignore_index=True)
    att = pd.DataFrame({"item_id": "att", "annotator_id": judgements["annotator_id"].unique(), "source": "simulated"})
    att["label"] = att["annotator_id"].str.startswith("c").map({True: 1, False: 5})
    items = pd.concat([ITEMS.assign(gold=None), pd.DataFrame({"item_id": ["att"], "gold": [5]})], ignore_index=True)
    with pytest.raises(GateFailed, match=r"'min_annotations_per_item' observed 0, threshold min_value=5"):
        review_round(pd.concat([judgements, att], ignore_index=True), cfg, study="stereo", artefact="sim.csv",
                     items=items, report_dir=tmp_path)


def test_review_cli_writes_its_gate_report_under_its_output_and_leaves_reports_untouched(repo_root, tmp_path,
                                                                                           monkeypatch, capsys):
    """A review tried on trial data must not leave a gate report where `stereolens release` looks for one."""
    monkeypatch.chdir(tmp_path)
    cfg = config(repo_root, "simulated", simulator={"n_annotators": 5, "reliability": 0.95, "seed": 2})
    collect_judgements(cfg, ITEMS).to_csv(tmp_path / "judgements.csv", index=False)
    assert main(["annotation", "review", "--input", "judgements.csv", "--study", "stereo", "--output", "trial",
                 "--config", str(repo_root / "conf/annotation/simulated.yaml")]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "trial/quality/stereo__annotation_quality.json").read_text())["success"] is True
    assert not (tmp_path / "reports").exists()
