"""The annotation gate really fails (and passes) through Great Expectations."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stereolens.annotation.agreement import fleiss_kappa, krippendorff_alpha
from stereolens.annotation.qc import QCConfig, run_qc
from stereolens.annotation.scales import LIKERT5, YES_NO
from stereolens.annotation.simulate import simulate_annotations
from stereolens.errors import GateFailed
from stereolens.quality.suites import AnnotationThresholds, annotation_summary, run_annotation_gate

IDS = [f"t{k}" for k in range(120)]
ARTEFACT = "data/interim/pairs/tuple_judgements.csv"


def agreement_of(df):
    return {"fleiss_kappa": fleiss_kappa(df, n_boot=0).value, "krippendorff_alpha": krippendorff_alpha(df, n_boot=0).value}


def gate(df, tmp_path, thresholds=AnnotationThresholds(), annotators=None):
    return run_annotation_gate(
        df, thresholds, study="pairs", artefact=ARTEFACT, agreement=agreement_of(df),
        annotators=annotators, report_dir=tmp_path,
    )


@pytest.fixture(scope="module")
def good():
    items = pd.DataFrame({"item_id": IDS, "truth": ["yes", "no"] * 60})
    return simulate_annotations(items, 5, YES_NO, reliability=0.9, seed=0)


def test_good_round_passes_and_writes_report(good, tmp_path):
    result = gate(good, tmp_path)
    assert result.success
    report = json.loads(Path(result.report_path).read_text())
    assert report["study"] == "pairs" and report["artefact"] == ARTEFACT
    assert {r["expectation"] for r in report["results"]} == {
        "expect_column_min_to_be_between", "expect_column_max_to_be_between"
    }


def test_low_agreement_fails_naming_everything(tmp_path):
    noise = simulate_annotations(IDS, 5, YES_NO, reliability=0.0, seed=1)
    with pytest.raises(GateFailed) as err:
        gate(noise, tmp_path)
    msg = str(err.value)
    kappa = agreement_of(noise)["fleiss_kappa"]
    assert "[pairs]" in msg and ARTEFACT in msg and "expect_column_min_to_be_between" in msg
    assert "'fleiss_kappa'" in msg and repr(kappa) in msg and "min_value=0.4" in msg


def test_too_few_annotations_per_item_fails(good, tmp_path):
    thin = good[~((good["item_id"] == "t3") & good["annotator_id"].isin(["sim0", "sim1"]))]
    with pytest.raises(GateFailed, match=r"min_annotations_per_item' observed 3, threshold min_value=5"):
        gate(thin, tmp_path)


def test_too_many_failing_annotators_fails(good, tmp_path):
    annotators = pd.DataFrame({"annotator_id": list("abcde"), "passed": [True, False, False, False, True]})
    with pytest.raises(GateFailed, match=r"failing_annotator_share' observed 0.6, threshold max_value=0.5"):
        gate(good, tmp_path, AnnotationThresholds(max_failing_annotator_share=0.5), annotators)


def test_degenerate_label_distribution_fails(tmp_path):
    items = pd.DataFrame({"item_id": IDS, "truth": ["yes"] * 118 + ["no"] * 2})
    skewed = simulate_annotations(items, 5, YES_NO, reliability=1.0, seed=0)
    thresholds = AnnotationThresholds(min_fleiss_kappa=None, min_krippendorff_alpha=None)
    with pytest.raises(GateFailed, match=r"top_label_share' observed 0.98\d*, threshold max_value=0.95"):
        gate(skewed, tmp_path, thresholds)


def test_thresholds_from_every_annotation_config(repo_root):
    for path in sorted((repo_root / "conf" / "annotation").glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        assert cfg["source"] == path.stem
        AnnotationThresholds.from_config(cfg["thresholds"])
        QCConfig.from_config(cfg["qc"])


def test_summary_from_qc_report():
    df = simulate_annotations(IDS[:10], 5, LIKERT5, seed=2)
    qc = run_qc(df, QCConfig())
    summary = annotation_summary(qc.kept, annotators=qc.annotators).iloc[0]
    assert summary["min_annotations_per_item"] == 5 and summary["failing_annotator_share"] == 0.0
