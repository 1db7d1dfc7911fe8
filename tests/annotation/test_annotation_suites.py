"""The annotation gate really fails (and passes) through Great Expectations."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from stereolens.annotation.agreement import fleiss_kappa, krippendorff_alpha
from stereolens.annotation.qc import QCConfig, run_qc
from stereolens.annotation.scales import LIKERT5, YES_NO
from stereolens.annotation.simulate import simulate_annotations
from stereolens.errors import ConfigError, GateFailed
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
    paths = sorted((repo_root / "conf" / "annotation").glob("*.yaml"))
    assert [p.stem for p in paths] == ["human", "llm_panel", "simulated"]
    for path in paths:
        cfg = yaml.safe_load(path.read_text())
        assert cfg["source"] == path.stem
        thresholds = AnnotationThresholds.from_config(cfg["thresholds"])
        qc = QCConfig.from_config(cfg["qc"])
        # every field is set from the YAML (none falls back to a default) to the YAML's value
        assert set(cfg["thresholds"]) == {f.name for f in dataclasses.fields(AnnotationThresholds)}, path.name
        assert set(cfg["qc"]) == {f.name for f in dataclasses.fields(QCConfig)}, path.name
        assert dataclasses.asdict(thresholds) == cfg["thresholds"] and dataclasses.asdict(qc) == cfg["qc"]
    human = AnnotationThresholds.from_config(yaml.safe_load((repo_root / "conf/annotation/human.yaml").read_text())["thresholds"])
    assert (human.min_fleiss_kappa, human.min_annotations_per_item, human.min_annotations_per_group) == (0.4, 5, 5)
    assert human.min_cohen_kappa is None and human.max_top_label_share == 0.95
    panel = yaml.safe_load((repo_root / "conf/annotation/llm_panel.yaml").read_text())["thresholds"]
    assert AnnotationThresholds.from_config(panel).min_annotations_per_group is None
    with pytest.raises(ConfigError, match="min_annotation_per_group"):
        AnnotationThresholds.from_config({"min_annotation_per_group": 5})


def test_summary_from_qc_report():
    df = simulate_annotations(IDS[:10], 5, LIKERT5, seed=2)
    qc = run_qc(df, QCConfig())
    summary = annotation_summary(qc.kept, annotators=qc.annotators).iloc[0]
    assert summary["min_annotations_per_item"] == 5 and summary["failing_annotator_share"] == 0.0


def test_item_left_without_annotators_by_qc_fails_the_gate(good, tmp_path):
    # t0 was labelled only by five annotators who all failed the attention check
    careless = good[good["item_id"] == "t0"].assign(annotator_id=lambda d: "careless_" + d["annotator_id"])
    judgements = pd.concat([good[good["item_id"] != "t0"], careless], ignore_index=True)
    gold = pd.DataFrame({"item_id": ["att"], "gold": ["no"]})
    answers = pd.DataFrame({"item_id": "att", "annotator_id": judgements["annotator_id"].unique()})
    answers["label"] = answers["annotator_id"].str.startswith("careless").map({True: "yes", False: "no"})
    qc = run_qc(pd.concat([judgements, answers], ignore_index=True), QCConfig(), items=gold)
    assert qc.items.set_index("item_id").loc["t0", "n_annotations"] == 0
    # counted from the kept judgements alone, t0 has vanished and every item has five
    assert annotation_summary(qc.kept).iloc[0]["min_annotations_per_item"] == 5
    with pytest.raises(GateFailed, match=r"'min_annotations_per_item' observed 0, threshold min_value=5"):
        run_annotation_gate(qc.kept, AnnotationThresholds(), study="pairs", artefact=ARTEFACT,
                            agreement=agreement_of(qc.kept), annotators=qc.annotators, item_counts=qc.items,
                            report_dir=tmp_path)


def test_group_with_too_few_annotators_fails_the_gate(good, tmp_path):
    # items t0-t59 are group 'a' (5 annotators); t60-t119 group 'b', where sim3 and sim4 did not take part
    grouped = good.assign(group=["a" if int(i[1:]) < 60 else "b" for i in good["item_id"]])
    grouped = grouped[~((grouped["group"] == "b") & grouped["annotator_id"].isin(["sim3", "sim4"]))]
    qc = run_qc(grouped, QCConfig(min_annotations_per_item=3))
    assert qc.groups.set_index("group")["n_annotators"].to_dict() == {"a": 5, "b": 3}
    thresholds = AnnotationThresholds(min_annotations_per_item=3)
    with pytest.raises(GateFailed, match=r"'min_annotations_per_group' observed 3, threshold min_value=5"):
        run_annotation_gate(grouped, thresholds, study="pairs", artefact=ARTEFACT, agreement=agreement_of(grouped),
                            item_counts=qc.items, group_counts=qc.groups, report_dir=tmp_path)
    relaxed = AnnotationThresholds(min_annotations_per_item=3, min_annotations_per_group=3)
    result = run_annotation_gate(grouped, relaxed, study="pairs", artefact=ARTEFACT, agreement=agreement_of(grouped),
                                 item_counts=qc.items, group_counts=qc.groups, report_dir=tmp_path, source="simulated")
    assert result.success
    report = json.loads(Path(result.report_path).read_text())
    assert report["source"] == "simulated"
    observed = {r["kwargs"]["column"]: r["observed_value"] for r in report["results"]}
    assert observed["min_annotations_per_group"] == 3 and observed["min_annotations_per_item"] == 3


def test_undefined_agreement_fails_the_gate_as_undefined(tmp_path):
    # every annotator gives every item the same label: kappa and alpha are 0/0
    same = pd.DataFrame([(i, f"a{k}", "yes") for i in IDS[:10] for k in range(5)],
                        columns=["item_id", "annotator_id", "label"])
    agreement = agreement_of(same)
    assert np.isnan(agreement["fleiss_kappa"]) and np.isnan(agreement["krippendorff_alpha"])
    thresholds = AnnotationThresholds(max_top_label_share=None)
    with pytest.raises(GateFailed, match=r"column 'fleiss_kappa' observed undefined \(NaN.*threshold min_value=0.4"):
        run_annotation_gate(same, thresholds, study="pairs", artefact=ARTEFACT, agreement=agreement, report_dir=tmp_path)
    report = json.loads((tmp_path / "pairs__annotation_quality.json").read_text())
    undefined = {r["kwargs"]["column"] for r in report["results"] if r["observed_value"] == "undefined"}
    assert undefined == {"fleiss_kappa", "krippendorff_alpha"} and report["success"] is False
