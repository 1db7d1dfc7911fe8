"""Decision-exact reduced precision (scoring/verified.py): bfloat16 scores, float32 wherever a decision could flip.

Known answers: the boundary rule on hand-made values (a difference exactly at the bound is rescored,
one just above it is not); on the tiny models, a fixture whose first pairs are built to sit inside the
bound (identical sentences: margin 0 in either precision; one-word changes) gives float32's decisions
on every pair, and every score labelled fp32 equals the float32 engine's score exactly.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from tiny_models import EXTRA, SUBJECTS, TRAITS

from stereolens.models.cache import ResponseCache
from stereolens.models.registry import load_local, spec_from_config
from stereolens.scoring import score_pairs
from stereolens.scoring.types import SentenceScore
from stereolens.models.hardware import precision_mode
from stereolens.scoring.verified import (ErrorModel, calibration_sample, error_rate, margin_error_rate, near_boundary,
                                         verified_pairs, verify_decisions, verifying_models)

# pairs built to sit inside any bound: identical sentences (margin exactly 0) ...
TIES = [(f"{s.capitalize()} are {t}.",) * 2 for s in SUBJECTS for t in TRAITS[:3]]
# ... and ordinary pairs, one word apart, most of them decided by more than the bfloat16 error
ORDINARY = [(f"{s.capitalize()} are {t}.", f"{s.capitalize()} are {u}.") for s in SUBJECTS
            for t, u in zip(TRAITS[3:9], TRAITS[4:10])] + list(zip(EXTRA[:6], EXTRA[6:12]))


def _pairs(rows) -> pd.DataFrame:
    return pd.DataFrame({"id": range(len(rows)), "sent_stereo": [a for a, _ in rows], "sent_anti": [b for _, b in rows]})


def test_a_difference_exactly_at_the_bound_is_rescored_and_one_above_it_is_not():
    model = ErrorModel(rate=0.25, mean_rate=0.5, safety=2.0, calibration_items=4)
    assert model.bound(3) == 1.5 and model.bound(3, mean=True) == 0.5  # 2 x 0.25 x 3 tokens; a mean: 2 x 0.5 / 2
    # group 0: |1.0 - 4.0| = 3.0 = 1.5 + 1.5 exactly (binary fractions: no rounding); group 1 just above
    values = [[1.0, 4.0], [1.0, 4.0 + 2 ** -20], [0.0, 10.0, 0.25]]
    bounds = [[model.bound(3), model.bound(3)], [1.5, 1.5], [0.125, 0.125, 0.125]]
    # group 2: its first two members are far apart, its first and third within 0.25 = 0.125 + 0.125
    assert near_boundary(values, bounds) == [0, 2]
    # the rounding slack widens the rule: group 1 is within 1.5 + 1.5 + 0.001
    assert near_boundary(values, bounds, 1e-3) == [0, 1, 2]


def test_error_rate_is_the_largest_error_per_token():
    half = [SentenceScore(-10.5, 5, False), SentenceScore(-3.0, 2, False), SentenceScore(0.0, 0, False)]
    exact = [SentenceScore(-10.0, 5, False), SentenceScore(-3.25, 2, False), SentenceScore(0.0, 0, False)]
    assert error_rate(half, exact) == 0.125  # max(0.5/5, 0.25/2); the tokenless item counts for nothing


def test_the_margin_error_rate_is_taken_over_every_two_members_of_a_group():
    exact = [[SentenceScore(-10.0, 5, False), SentenceScore(-3.0, 3, False), SentenceScore(-4.0, 2, False)]]
    # errors -0.5, +0.25, -0.5: margins 0-1 off by 0.75 (/8 tokens), 0-2 by 0 (/7), 1-2 by 0.75 (/5 = 0.15)
    half = [[SentenceScore(-10.5, 5, False), SentenceScore(-2.75, 3, False), SentenceScore(-4.5, 2, False)]]
    assert margin_error_rate(half, exact) == pytest.approx(0.15)
    # means: -2 vs -2.1, -1 vs -0.91667, -2 vs -2.25: mean margins 0-1 off by 0.18333, 0-2 by 0.15, 1-2 by 0.33333
    assert margin_error_rate(half, exact, mean=True) == pytest.approx(1 / 3)
    # errors that move both members alike leave the margin alone
    same = [[SentenceScore(-10.5, 5, False), SentenceScore(-3.5, 3, False)]]
    assert margin_error_rate(same, [exact[0][:2]]) == 0.0


def test_the_calibration_sample_is_fixed_and_covers_small_sets():
    assert calibration_sample(10, 64) == list(range(10))
    first = calibration_sample(1000, 64)
    assert first == calibration_sample(1000, 64) and len(set(first)) == 64 and first == sorted(first)


def test_verify_decisions_rescores_exactly_the_near_groups():
    # a "model" is a table of scores; the fast one is off by 0.1 per token on every item
    exact_scores = [[-10.0, -10.2], [-20.0, -30.0], [-5.0, -5.0], [-7.0, -9.0]]
    n_tokens = [[2, 2], [4, 4], [1, 1], [2, 2]]

    def score(model, groups):
        # the fast "model" moves a group's first member up and its second down by 0.1 nats per token
        shift = 0.0 if model == "exact" else 0.1
        return [[SentenceScore(v + sign * shift * n, n, False)
                 for v, n, sign in zip(exact_scores[g], n_tokens[g], (1, -1))] for g in groups]

    got = verify_decisions(score, "fast", "exact", 4, calibration_groups=1, safety=2.0, views=("sum",), slack=0.0)
    # the sample (seed 0) is pair 3, whose margin is 0.1 x (2 + 2) off: rate 0.1, so each item's bound is
    # 2 x 0.1 x n_tokens: pair 0 differs by 0.2 <= 0.4 + 0.4, pair 2 ties, pair 1 differs by 10 > 0.8 + 0.8
    assert got.calibration == [3] and got.error_model.rate == pytest.approx(0.1)
    assert got.rescored == [0, 2]
    assert got.precision == ["fp32", "bf16", "fp32", "fp32"]
    assert [s.logprob for s in got.scores[2]] == [-5.0, -5.0]
    assert [s.logprob for s in got.scores[1]] == pytest.approx([-19.6, -30.4])
    # a group far apart in sums but level in per-token means: only the mean view finds it
    exact_scores[1], n_tokens[1] = [-10.0, -100.0], [2, 20]  # sums 90 apart (> 0.4 + 4.0), means both -5
    assert verify_decisions(score, "fast", "exact", 4, calibration_groups=1, safety=2.0, views=("sum",), slack=0.0).rescored == [0, 2]
    assert verify_decisions(score, "fast", "exact", 4, calibration_groups=1, safety=2.0, slack=0.0).rescored == [0, 1, 2]
    assert got.summary()["groups_fp32"] == 3 and got.summary()["groups_rescored_near_boundary"] == 2


@pytest.fixture(scope="module")
def backends(tiny_causal_lm_dir, tiny_masked_lm_dir, tmp_path_factory):
    cache = ResponseCache(tmp_path_factory.mktemp("verify-cache"), enabled=False)
    out = {}
    for kind, path in (("causal", tiny_causal_lm_dir), ("masked", tiny_masked_lm_dir)):
        cfg = {"name": str(path), "kind": kind, "dtype": "bfloat16", "verify": "fp32", "reduced_precision": "emulate"}
        out[kind] = (load_local(spec_from_config(cfg), cache),
                     load_local(spec_from_config({"name": str(path), "kind": kind}), cache))
    return out


@pytest.mark.parametrize("kind,metric", [("causal", "causal"), ("masked", "pll_word_l2r"), ("masked", "crows")])
def test_verified_pairs_give_float32_decisions_and_float32_scores_where_rescored(backends, kind, metric):
    half, full = backends[kind]
    fast, exact, label = verifying_models(half)
    assert next(fast.model.parameters()).dtype == torch.bfloat16 and label == "bf16"
    assert next(exact.model.parameters()).dtype == torch.float32
    pairs = _pairs(TIES + ORDINARY)
    reference = score_pairs(full, None, pairs, metric)
    got, verified = verified_pairs(half, pairs, metric)
    assert verified.error_model.rate > 0  # bfloat16 did run: the calibration saw its error
    # every tie sits inside the bound, so it is rescored (or was in the calibration sample)
    assert set(got["precision"].iloc[: len(TIES)]) == {"fp32"}
    if metric != "crows":
        # the decided pairs stay in bfloat16: the mode saves something (the tiny random masked LM's CrowS
        # margins, over shared tokens only, are all near zero: there every pair is rescored)
        assert (got["precision"] == "bf16").any()
    wins = lambda t: (t["score_stereo"] > t["score_anti"]).tolist()  # noqa: E731
    assert wins(got) == wins(reference)
    exact_rows = got["precision"] == "fp32"
    # the float32 engine on the same pairs, scored together as the mode rescored them: the same numbers, bit for bit
    # (the float32 reference model itself: a second load's memoised body/head split, verified on another probe,
    # may take another exact path, equal to the engine's batch invariance below)
    rescored = sorted(verified.calibration + verified.rescored)
    alone = score_pairs(exact, None, pairs.iloc[verified.calibration], metric)
    together = score_pairs(exact, None, pairs.iloc[verified.rescored], metric) if verified.rescored else alone.head(0)
    for col in ("score_stereo", "score_anti", "n_tokens_stereo", "n_tokens_anti"):
        assert got[col].iloc[verified.calibration].tolist() == alone[col].tolist()
        assert got[col].iloc[verified.rescored].tolist() == together[col].tolist()
        # and the whole set's float32 scores, to the engine's batch invariance (tests/scoring/test_scoring_batch_invariance.py)
        assert got.loc[exact_rows, col].tolist() == pytest.approx(reference.loc[exact_rows, col].tolist(), rel=1e-6)
    assert exact_rows.to_numpy().nonzero()[0].tolist() == rescored


def test_a_float32_model_or_no_verify_scores_in_one_precision(backends, tiny_causal_lm_dir):
    _, full = backends["causal"]
    assert verifying_models(full) is None
    assert precision_mode("bfloat16", "fp32") == "bfloat16+verify-fp32"
    assert precision_mode("float32", "fp32") == "float32" and precision_mode(None, None) == "float32"


def test_the_mlflow_precision_param_names_the_verify_mode():
    from stereolens.tracking.mlflow_run import computed_precision

    cfg = {"dtype": "bfloat16", "verify": "fp32", "reduced_precision": "emulate"}
    assert computed_precision(cfg) == "bfloat16+verify-fp32"
    assert computed_precision({**cfg, "verify": None}) == "bfloat16"
    assert computed_precision({"dtype": None}) == "float32"  # the default run: unchanged


def test_the_pairs_study_verifies_a_pair_with_its_control(backends):
    from stereolens.studies.pairs.evaluation import score_set

    half, full = backends["causal"]
    rows = TIES + ORDINARY
    part = _pairs(rows).assign(sent_control=[a if k % 3 == 0 else None for k, (a, _) in enumerate(rows)])
    # a control identical to its stereotypical sentence ties it: that group must be rescored
    got = score_set(half, part, "causal", batch_tokens=8192, truncate=False)
    want = score_set(full, part, "causal", batch_tokens=8192, truncate=False)
    assert (got["precision"].iloc[::3] == "fp32").all() and (got["precision"] == "bf16").any()
    assert (got["score_stereo"] > got["score_anti"]).tolist() == (want["score_stereo"] > want["score_anti"]).tolist()
    has = part["sent_control"].notna()
    assert (got.loc[has, "score_stereo"] > got.loc[has, "score_control"]).tolist() == \
        (want.loc[has, "score_stereo"] > want.loc[has, "score_control"]).tolist()
    assert got["score_control"].isna().tolist() == want["score_control"].isna().tolist()


@pytest.mark.parametrize("score", ["mean", "sum"])
def test_stereoset_triples_keep_float32_candidate_order(backends, score):
    from stereolens.studies.stereo.evaluation import score_instances

    half, full = backends["causal"]
    # more instances than the calibration sample (64), so that some stay in bfloat16
    contexts = [f"The {s} were here." for s in SUBJECTS for _ in TRAITS]
    triples = [(f"They are {TRAITS[k]}.", f"They are {TRAITS[(k + 1) % 12]}.", f"They were {TRAITS[(k + 5) % 12]}.")
               for k in range(len(TRAITS)) for _ in SUBJECTS][: len(contexts)]
    instances = pd.DataFrame({"id": [f"i{k}" for k in range(len(contexts))], "context": contexts,
                              "sent_stereo": [a for a, _, _ in triples], "sent_anti": [b for _, b, _ in triples],
                              "sent_unrelated": [c for _, _, c in triples]})
    instances.loc[0, "sent_anti"] = instances.loc[0, "sent_stereo"]  # a tie: rescored
    got = score_instances(half, "causal", instances, score=score)
    want = score_instances(full, "causal", instances, score=score)
    assert got.loc[0, "precision"] == "fp32" and got.attrs["precision"]["groups"] == len(instances) == 120
    assert (got["precision"] == "bf16").any()
    cols = ["score_stereo", "score_anti", "score_unrelated"]
    assert (got[cols].to_numpy().argsort(axis=1) == want[cols].to_numpy().argsort(axis=1)).all()


def test_the_fast_pass_normaliser_is_half_precision_and_cached_apart(backends, tiny_causal_lm_dir):
    from stereolens.scoring.access import split_head
    from stereolens.scoring.engine import _base_payload

    half, _ = backends["causal"]
    fast, exact, _ = verifying_models(half)
    probe = fast.tokenizer("Women are kind.")["input_ids"]
    assert split_head(fast.model, "causal", probe).projection.widen is False  # the normaliser in bfloat16 too
    assert split_head(exact.model, "causal", probe).projection.weight.dtype == torch.float32
    # its cache entries are not those of a bfloat16 model with the float32 normaliser (the default bfloat16 run)
    params = _base_payload(ResponseCache(enabled=False), fast.model, "x", "causal", {})["params"]
    assert params["normaliser"] == "bfloat16"


def test_the_crows_slice_labels_each_pair_and_its_report_says_how_many_were_rescored(backends):
    from stereolens.report.words import precision_lines
    from stereolens.studies.crows.scoring import score_crows

    half, full = backends["causal"]
    pairs = _pairs(TIES + ORDINARY)
    got = score_crows(half, pairs, "engine", "causal", batch_tokens=8192, truncate=False)
    want = score_crows(full, pairs, "engine", "causal", batch_tokens=8192, truncate=False)
    assert "precision" not in want.columns and not want.attrs  # the default run: unchanged
    block = got.attrs["precision"]
    assert block["groups"] == len(pairs) and block["groups_fp32"] == (got["precision"] == "fp32").sum()
    assert (got["score_stereo"] > got["score_anti"]).tolist() == (want["score_stereo"] > want["score_anti"]).tolist()
    text = " ".join(precision_lines(block, "pairs"))
    assert f"{block['groups_fp32']} of {len(pairs)} pairs carry float32 scores" in text
    assert "by a causal model, its first 4 tokens in float32" in text and block["float32_prefix_targets"] == 4
    assert precision_lines(None, "pairs") == []


def test_the_fast_pass_scores_the_first_targets_in_float32_and_the_rest_in_bfloat16(backends, tmp_path):
    from stereolens.models.base import FLOAT32_PREFIX_ATTR, VERIFY_FLOAT32_PREFIX
    from stereolens.scoring import score_continuations, score_sentences

    half, _ = backends["causal"]
    fast, exact, _ = verifying_models(half)
    k = VERIFY_FLOAT32_PREFIX
    sentences = [f"{s.capitalize()} are {t}." for s in SUBJECTS for t in TRAITS[:2]] + EXTRA[:4] + ["Women"]
    cache = ResponseCache(tmp_path / "cache")

    def scored(model, **kw):
        return score_sentences(model.model, model.tokenizer, sentences, "causal", per_token=True, **kw)

    mixed, want_exact = scored(fast, cache=cache), scored(exact)
    # the same model without its float32 beginning: bfloat16 throughout
    prefix = getattr(fast.model, FLOAT32_PREFIX_ATTR)
    delattr(fast.model, FLOAT32_PREFIX_ATTR)
    try:
        # a second call with the same cache: the mixed scores are cached apart, so these are computed anew
        plain = scored(fast, cache=cache)
    finally:
        setattr(fast.model, FLOAT32_PREFIX_ATTR, prefix)
    for m, e, p in zip(mixed, want_exact, plain, strict=True):
        # targets 1..k (predicted from BOS and at most k - 1 tokens after it) are float32's, to float32 rounding
        assert m.token_logprobs[:k] == pytest.approx(e.token_logprobs[:k], rel=1e-5, abs=1e-5)
        assert m.token_logprobs[k:] == p.token_logprobs[k:]  # the rest bfloat16's, bit for bit
        assert m.logprob == pytest.approx(sum(m.token_logprobs))
    assert any(abs(a - b) > 1e-3 for m, p in zip(mixed, plain) for a, b in zip(m.token_logprobs[:k], p.token_logprobs[:k]))
    # a one-token sentence: its single target is float32's
    assert len(mixed[-1].token_logprobs) == 1 and mixed[-1].token_logprobs == pytest.approx(want_exact[-1].token_logprobs, rel=1e-5)
    # a continuation after a context of k tokens or more starts later: nothing of it is predicted from the beginning
    ctx = ["The nurses said that"] * 2
    cont = [" they are kind.", " they are cruel."]
    got = score_continuations(fast.model, fast.tokenizer, ctx, cont, per_token=True)
    delattr(fast.model, FLOAT32_PREFIX_ATTR)
    try:
        bf16 = score_continuations(fast.model, fast.tokenizer, ctx, cont, per_token=True)
    finally:
        setattr(fast.model, FLOAT32_PREFIX_ATTR, prefix)
    assert [g.token_logprobs for g in got] == [b.token_logprobs for b in bf16]
