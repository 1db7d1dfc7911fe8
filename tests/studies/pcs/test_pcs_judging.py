"""Rubric judging, response collection and validity, judge-panel validation (Fifteen Percent Fluency appendix B)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from stereolens.studies.pcs.scenarios import RubricFeature
from stereolens.models import Generation, GenerationRequest, LanguageModel, ModelSpec, ResponseCache, load_model, spec_from_config
from stereolens.studies.pcs import judging as jd
from stereolens.studies.pcs import responses as rs

FEATURES = (
    RubricFeature("PDI", "directness", "Directness", {1: "Blunt challenge", 4: "Balanced", 7: "Highly indirect"}),
    RubricFeature("PDI", "deference", "Deference", {1: "Treats authority as equal", 4: "Neutral", 7: "Explicit respect"}),
)
ITEM = jd.JudgeItem("r1", "PDI", "Your manager proposed a plan you think is flawed.", "I would ask for a private chat.", FEATURES)


class ScriptedChat(LanguageModel):
    """Stands in for a remote chat endpoint: answers from a script, in order, and records the requests."""

    def __init__(self, answers: Sequence[str]) -> None:
        self.spec = ModelSpec(name="scripted", kind="chat", backend="openai")
        self.answers = list(answers)
        self.requests: list[GenerationRequest] = []

    @property
    def identity(self) -> str:
        return "scripted"

    def generate(self, requests):
        self.requests += list(requests)
        return [Generation(text=self.answers.pop(0)) for _ in requests]

    def loglikelihood(self, requests):
        raise NotImplementedError


def test_parse_judgement_accepts_valid_and_fenced_json():
    text = 'Sure.\n```json\n{"scores": {"directness": 6, "deference": "5"}, "rationale": "Private, polite."}\n```'
    parsed = jd.parse_judgement(text, FEATURES)
    assert parsed["scores"] == {"directness": 6, "deference": 5}


@pytest.mark.parametrize(
    "text,error",
    [
        ("no json here", "no JSON object"),
        ('{"scores": {"directness": 6}, "rationale": "x"}', "deference"),
        ('{"scores": {"directness": 9, "deference": 5}, "rationale": "x"}', "maximum"),
        ('{"scores": {"directness": 6, "deference": 5}}', "rationale"),
        ('{"scores": {"directness": 6, "deference": 5, "extra": 1}, "rationale": "x"}', "extra"),
    ],
)
def test_parse_judgement_rejects_schema_violations(text, error):
    with pytest.raises(jd.JudgementInvalid, match=error):
        jd.parse_judgement(text, FEATURES)


def test_json_judge_retries_once_then_records_failure():
    good = '{"scores": {"directness": 6, "deference": 5}, "rationale": "ok"}'
    model = ScriptedChat(["garbage", good])
    rows = jd.judge_items(model, jd.JudgeSpec("j", mode="json"), [ITEM])
    assert rows["status"].tolist() == ["retried", "retried"] and rows["score"].tolist() == [6.0, 5.0]
    # the retry is a different request (the bad answer and the error are in the conversation)
    assert len(model.requests) == 2 and len(model.requests[1].messages) == 4
    assert all(r.temperature == 0.0 for r in model.requests)

    failing = ScriptedChat(["garbage", "still garbage"])
    rows = jd.judge_items(failing, jd.JudgeSpec("j", mode="json"), [ITEM])
    assert rows["status"].tolist() == ["failed", "failed"] and rows["score"].isna().all()
    assert "no JSON object" in rows["error"].iloc[0]


def test_expected_score_known_answers():
    assert jd.expected_score({k: math.log(1 / 7) for k in range(1, 8)}) == pytest.approx((4.0, 1.0))
    score, mass = jd.expected_score({2: math.log(0.3), 6: math.log(0.1)})
    assert score == pytest.approx((2 * 0.3 + 6 * 0.1) / 0.4) and mass == pytest.approx(0.4)
    folded = jd.digits_from_top_logprobs({" 5": math.log(0.2), "5": math.log(0.1), "▁3": math.log(0.1), "10": -1.0, "a": -0.1})
    assert set(folded) == {3, 5} and math.exp(folded[5]) == pytest.approx(0.3)


@pytest.fixture(scope="module")
def tiny_model(tiny_causal_lm_dir, tmp_path_factory):
    spec = spec_from_config({"name": str(tiny_causal_lm_dir), "kind": "causal", "backend": "hf", "dtype": "float32"})
    return load_model(spec, cache=ResponseCache(tmp_path_factory.mktemp("cache")))


@pytest.mark.parametrize("method", ["loglikelihood", "top_logprobs"])
def test_logprob_judge_on_tiny_model(tiny_model, method):
    rows = jd.judge_items(tiny_model, jd.JudgeSpec("tiny", mode="logprob", logprob_method=method, top_logprobs=50), [ITEM])
    assert rows["feature"].tolist() == ["directness", "deference"]
    ok = rows.loc[rows["status"] == "ok", "score"]
    assert ((ok >= 1) & (ok <= 7)).all()
    # a judge whose top alternatives hold no digit is recorded as failed, never scored
    failed = rows.loc[rows["status"] == "failed"]
    assert failed["score"].isna().all()
    if method == "loglikelihood":
        assert len(ok) == 2


def test_collect_responses_through_cache(tiny_model):
    prompts = pd.DataFrame([
        {"scenario_id": "s1", "dimension": "PDI", "domain": "workplace", "language": "hi", "condition": c, "prompt": f"Prompt {c}"}
        for c in "AB"
    ])
    settings = rs.CollectionSettings(max_tokens=6, samples=2)
    first = rs.collect_responses(tiny_model, "tiny", prompts, settings)
    assert len(first) == 4 and first["sample"].tolist() == [0, 1, 0, 1]
    again = rs.collect_responses(tiny_model, "tiny", prompts, settings)
    assert again["cached"].all() and again["response"].tolist() == first["response"].tolist()


def test_validity_checks_known_answers():
    df = pd.DataFrame({
        "model": "m",
        "language": ["hi", "hi", "ur", "en", "ur"],
        "response": ["मैं निजी तौर पर बात करूँगा।", "   ", "I would talk to them.", "I'm sorry, but I can't help with that.",
                     "میں ان سے بات کروں گا۔"],
    })
    checked = rs.check_validity(df, rs.ValiditySettings())
    assert checked["invalid_reason"].tolist() == ["", "empty", "wrong_language", "refusal", ""]
    summary = rs.validity_summary(checked)
    assert summary.loc[summary["model"] == "all", "validity_rate"].iloc[0] == pytest.approx(0.4)
    # vowel signs are combining marks, not letters: "abc दे" has 3 Latin letters and 1 Devanagari letter
    assert rs.script_share("abc दे", "DEVANAGARI") == pytest.approx(1 / 4)


def test_construct_validity_and_calibration_accuracy():
    rows = []
    for i, (a, b) in enumerate([(3, 5), (4, 6), (5, 4), (2, 2)]):
        for cond, v in (("A", a), ("B", b)):
            rows.append({"model": "m", "language": "en", "scenario_id": f"s{i}", "feature": "f", "condition": cond, "score": v})
    assert jd.construct_validity(pd.DataFrame(rows))["construct_validity"] == pytest.approx(0.5)

    cal = pd.DataFrame([
        {"pair_id": "p1", "dimension": "PDI", "feature": "f", "pole": "high", "judge": "j1", "score": 6},
        {"pair_id": "p1", "dimension": "PDI", "feature": "f", "pole": "low", "judge": "j1", "score": 2},
        {"pair_id": "p2", "dimension": "IDV", "feature": "g", "pole": "high", "judge": "j1", "score": 3},
        {"pair_id": "p2", "dimension": "IDV", "feature": "g", "pole": "low", "judge": "j1", "score": 5},
    ])
    acc = jd.calibration_accuracy(cal)
    assert acc["accuracy"] == 0.5 and acc["by_dimension"] == {"IDV": 0.0, "PDI": 1.0}


def test_inter_judge_alpha_matches_krippendorff_package():
    import krippendorff

    rng = np.random.default_rng(0)
    truth = rng.integers(1, 8, 30).astype(float)
    rows = []
    for j, noise in (("j1", 0.5), ("j2", 1.0), ("j3", 0.8)):
        for i, t in enumerate(truth):
            rows.append({"model": "m", "language": "en", "scenario_id": f"s{i}", "condition": "A", "sample": 0,
                         "feature": "f", "judge": j, "score": float(np.clip(t + rng.normal(0, noise), 1, 7))})
    df = pd.DataFrame(rows)
    res = jd.inter_judge_alpha(df, n_boot=20)
    matrix = df.pivot(index="judge", columns="scenario_id", values="score").to_numpy()
    assert res["alpha"] == pytest.approx(krippendorff.alpha(reliability_data=matrix, level_of_measurement="interval"))
    assert res["n_judges"] == 3
    assert math.isnan(jd.inter_judge_alpha(df.loc[df["judge"] == "j1"])["alpha"])


def test_template_calibration_set_is_contrastive():
    from stereolens.studies.pcs.calibration import build_calibration_set

    scen = pd.DataFrame([{"scenario_id": "s1", "dimension": "PDI", "language": "en", "prompt_a": "dilemma"}])
    calib = build_calibration_set(scen, {"PDI": FEATURES}, pairs_per_feature=2)
    assert len(calib) == 2 * 2 * 2 and set(calib["pole"]) == {"high", "low"}
    high = calib.loc[(calib["feature"] == "directness") & (calib["pole"] == "high"), "response"].iloc[0]
    assert "highly indirect" in high and (calib["source"] == "template").all()


def test_calibration_set_reads_only_scenarios_and_rubrics(tmp_path, repo_root):
    """Generated once and versioned: nothing but scenarios.csv and rubrics.yaml may change it."""
    import shutil

    import yaml

    from stereolens.studies.pcs import calibration as cal

    bank = tmp_path / "bank"
    bank.mkdir()
    for name in ("scenarios.csv", "rubrics.yaml"):
        shutil.copy(repo_root / "data" / "seed" / "pcs" / name, bank / name)
    # no markers, no reviews: the builder must not need them
    scen, rubrics = cal.load_calibration_inputs(bank, language="en", dimensions=["PDI", "UAI"])
    calib = cal.build_calibration_set(scen, rubrics, pairs_per_feature=1)
    assert len(calib) == 2 * 4 * 2 and set(calib["dimension"]) == {"PDI", "UAI"}
    path = tmp_path / "set.csv"
    calib.to_csv(path, index=False)
    assert len(cal.file_sha256(path)) == 64

    dvc = yaml.safe_load((repo_root / "dvc.yaml").read_text(encoding="utf-8"))
    # the only data it reads; its code deps are the import closure (tests/test_dvc_deps.py), which lists the pcs
    # modules one by one so that an edit to the judging code does not regenerate the set
    deps = dvc["stages"]["pcs_calibration_set"]["deps"]
    assert [d for d in deps if not d.startswith("src/")] == ["data/seed/pcs/scenarios.csv", "data/seed/pcs/rubrics.yaml"]
    assert "src/stereolens/studies/pcs/calibration.py" in deps and "src/stereolens/studies/pcs" not in deps
