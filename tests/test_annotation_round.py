"""A whole annotation round from config: collect, QC, agreement, aggregation, gate."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from stereolens.annotation.config import AnnotationConfig
from stereolens.annotation.round import collect_judgements, review_round
from stereolens.cli import main
from stereolens.errors import ConfigError, GateFailed

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
