"""Leakage seed data, template rendering, ILPS (causal, seq2seq) and generative choice on tiny models."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stereolens.models import ModelSpec, load_model
from stereolens.models.cache import ResponseCache
from stereolens.errors import ConfigError
from stereolens.scoring.shared_context import prefixed_context_logprobs, shared_context_logprobs
from stereolens.studies.leakage.choice import choice_queries, choice_scores, normalise_answer, resolve_choice_mode, same_polarity_pairs
from stereolens.studies.leakage.ilps import ilps_causal_item_scores, ilps_scores, ilps_seq2seq_item_scores
from stereolens.studies.leakage.items import AssociationItem, GENERIC, aggregate_scores, build_items, to_matrix
from stereolens.studies.leakage.lexicon import load_lexicon, select_groups

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "data" / "seed" / "leakage"


@pytest.fixture(scope="module")
def lex():
    return load_lexicon(SEED)


def test_seed_data_covers_table1_and_table2(lex):
    assert len(lex.traits) == 32 and lex.traits["pair_id"].nunique() == 16
    # Cao et al. 2024 section 4.2.3: the conservative-progressive beliefs traits are non-polar
    assert lex.traits["polarity"].value_counts().to_dict() == {"negative": 13, "positive": 13, "neutral": 6}
    assert len(lex.groups) == 30
    assert lex.groups["category"].value_counts().to_dict() == {"non-shared": 12, "shared/shared": 10, "shared/non-shared": 8}
    for lang in ("en", "ru", "zh", "hi"):
        words = lex.group_words[lex.group_words["language"] == lang]
        assert set(words["group"]) == set(lex.group_order), lang
        assert set(lex.trait_words.loc[lex.trait_words["language"] == lang, "trait"]) == set(lex.trait_order), lang
        assert (lex.templates["language"] == lang).sum() >= 3
        assert set(lex.translation_status(lang)) <= {"original", "authored", "reviewed"}
    # Russian and Hindi group words carry the grammatical gender the templates agree with
    for lang in ("ru", "hi"):
        assert set(lex.group_words.loc[lex.group_words["language"] == lang, "gender"]) <= {"m", "f"}


def test_seed_groups_and_traits_match_the_survey(lex, data_mirror):
    published = Path(data_mirror) / "stereotype_leakage" / "aggregated_data_EN.csv"
    if not published.exists():
        pytest.skip(f"{published} not in the mirror")
    table = pd.read_csv(published)
    assert list(table["Traits"]) == lex.trait_order
    assert list(table.columns[1:]) == lex.group_order


def test_templates_agree_in_gender_and_number(lex):
    items = build_items(lex, "ru", template_ids=["this"], groups=["woman", "man"], traits=["wealthy"])
    sentences = {(it.group, it.sentence) for it in items}
    assert ("woman", "Эта женщина богатая.") in sentences
    assert ("man", "Этот мужчина богатый.") in sentences
    assert (GENERIC, "Этот человек богатый.") in sentences
    hi = build_items(lex, "hi", template_ids=["hote"], groups=["woman"], traits=["cold"])
    assert {it.sentence for it in hi} == {"महिलाएँ रूखी होती हैं।", "लोग रूखे होते हैं।"}
    en = build_items(lex, "en", template_ids=["are"], groups=["gay man"], traits=["non religious"])
    assert [it.sentence for it in en] == ["Gay men are non-religious.", "People are non-religious."]


def test_aggregate_subtracts_prior_and_takes_median():
    items = [
        AssociationItem("en", t, g, "warm", "warm", "", "")
        for t in ("a", "b", "c") for g in ("woman", GENERIC)
    ]
    raw = [-1.0, -3.0, -2.0, -2.5, -5.0, -4.0]  # woman - prior: 2.0, 0.5, -1.0
    out = aggregate_scores(items, raw)
    assert out.loc[0, "score"] == pytest.approx(0.5)
    assert aggregate_scores(items, raw, template_aggregation="mean").loc[0, "score"] == pytest.approx(0.5)
    assert out.loc[0, "n_items"] == 3


@pytest.fixture(scope="module")
def causal(tiny_causal_lm_dir):
    return load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal"), cache=ResponseCache(enabled=False))


def test_shared_context_scores_equal_plain_continuation_scores(lex, causal):
    items = build_items(lex, "hi", template_ids=["hote", "vah"], groups=["woman", "Texan"], traits=lex.trait_order[:10])
    shared = ilps_causal_item_scores(causal, items, shared_context=True)
    plain = ilps_causal_item_scores(causal, items, shared_context=False)
    np.testing.assert_allclose(shared, plain, atol=1e-4)


def test_ilps_causal_is_target_minus_generic_prior(lex, causal):
    from stereolens.scoring import score_continuations

    out = ilps_scores(causal, lex, "en", template_ids=["are"], groups=["housewife", "Texan"])
    assert len(out) == 2 * 32 and out["score"].notna().all()
    row = out[(out["group"] == "housewife") & (out["trait"] == "warm")].iloc[0]
    t, p = score_continuations(causal, None, ["Housewives are", "People are"], [" warm", " warm"])
    assert row["target"] == pytest.approx(t.logprob, abs=1e-4)
    assert row["prior"] == pytest.approx(p.logprob, abs=1e-4)
    assert row["score"] == pytest.approx(t.logprob - p.logprob, abs=1e-4)
    matrix = to_matrix(out, lex.trait_order, lex.group_order)
    assert matrix.shape == (32, 30) and matrix.index.name == "Traits"
    assert matrix["Texan"].notna().all() and matrix["woman"].isna().all()


def test_ilps_seq2seq_equals_minus_model_loss(lex, tiny_seq2seq_lm_dir):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    lm = load_model(ModelSpec(name=str(tiny_seq2seq_lm_dir), kind="seq2seq"), cache=ResponseCache(enabled=False))
    items = build_items(lex, "en", template_ids=["are"], groups=["veteran"], traits=["confident"])
    scores = ilps_seq2seq_item_scores(lm, items)
    tok = AutoTokenizer.from_pretrained(tiny_seq2seq_lm_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_seq2seq_lm_dir).eval()
    for it, score in zip(items, scores):
        ids = tok(it.prefix + "<extra_id_0>" + it.suffix, return_tensors="pt").input_ids
        labels = tok("<extra_id_0> confident <extra_id_1>", return_tensors="pt").input_ids
        with torch.no_grad():
            loss = model(input_ids=ids, labels=labels).loss.item()
        assert score == pytest.approx(-loss, abs=1e-4)


def _direct_logprob(causal, context: str, continuation: str) -> float:
    """log P(continuation | BOS + context) from one plain forward pass (no length limit, no cache)."""
    import torch

    tok, model = causal.tokenizer, causal.model
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    ids = [tok.bos_token_id] + whole
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
    return float(sum(logp[t - 1, ids[t]] for t in range(1 + len(ctx), len(ids))))


def test_choice_logprob_normalises_option_probabilities(lex, causal):
    scores, per_query, nonmatching = choice_scores(causal, lex, "en", design="matching", groups=["woman", "man"])
    assert nonmatching is None
    assert len(per_query) == 2 * 34  # 17 matching pairs in both orders, 2 groups
    total = per_query[["p_trait1", "p_trait2", "p_neither"]].sum(axis=1)
    np.testing.assert_allclose(total, 1.0, atol=1e-9)
    # by hand for the first query: softmax over the three options' summed sub-token log-probs
    q = choice_queries(lex, "en", same_polarity_pairs(lex, design="matching"), ["woman"])[0]
    lps = [_direct_logprob(causal, q.plain_prompt(), " " + o) for o in q.options]
    expect = np.exp(lps) / np.exp(lps).sum()
    np.testing.assert_allclose(per_query.iloc[0][["p_trait1", "p_trait2", "p_neither"]].astype(float), expect, atol=1e-4)
    assert set(scores["trait"]) == set(lex.trait_order) and len(scores) == 2 * 32


def test_same_polarity_designs(lex):
    pol = dict(zip(lex.traits["trait"], lex.traits["polarity"]))
    # by hand: 13 positive, 13 negative, 6 neutral traits; all = 2 C(13, 2) + C(6, 2) = 171; cyclic k = 2:
    # 2 k per trait / 2 = 64; matching: 7 + 7 + 3 (an odd class pairs its last trait with its first)
    for design, k, n in (("all", None, 171), ("cyclic", 2, 64), ("matching", None, 17)):
        pairs = same_polarity_pairs(lex, design=design, opponents=k, both_orders=False)
        assert len(pairs) == n
        assert all(pol[a] == pol[b] and a != b for a, b in pairs)
        assert {t for pair in pairs for t in pair} == set(lex.trait_order)  # every trait compared
    both = same_polarity_pairs(lex, design="matching")  # both orders by default
    assert len(both) == 34 and set(both) == {(b, a) for a, b in both}
    assert select_groups(lex, ["category:shared/shared"])[:2] == ["woman", "disabled person"]


@pytest.mark.slow
def test_choice_sample_mode_counts_nonmatching_never_drops(lex, causal):
    scores, generations, nonmatching = choice_scores(
        causal, lex, "ru", mode="sample", design="matching", groups=["woman"], n_samples=2, temperature=1.0
    )
    assert len(generations) == 34 * 2  # 17 pairs in both orders, 2 samples: every generation kept, matched or not
    assert set(generations["match"]) <= {"trait1", "trait2", "neither", "nonmatching"}
    row = nonmatching.iloc[0]
    assert (row["language"], row["group"], row["n_generations"]) == ("ru", "woman", 68)
    assert row["n_nonmatching"] == (generations["match"] == "nonmatching").sum()
    assert scores["score"].between(0, 1).all()


def test_normalise_answer_exact_match_rules():
    assert normalise_answer("  «Богатые».\n more") == "богатые"
    assert normalise_answer('"Warm"') == "warm"
    assert normalise_answer("富有。") == "富有"
    assert normalise_answer("") == ""
    assert math.isclose(len(normalise_answer("non-religious")), len("non-religious"))


def test_two_level_prompt_sharing_equals_one_level(lex, causal):
    queries = choice_queries(lex, "ru", same_polarity_pairs(lex, design="matching")[:6], ["woman", "Texan"])
    contexts = [q.plain_prompt() for q in queries for _ in q.options]
    conts = [" " + o for q in queries for o in q.options]
    prefixes = [q.shared_prompt_prefix() for q in queries for _ in q.options]
    assert all(c.startswith(p) for c, p in zip(contexts, prefixes))
    one = np.array(shared_context_logprobs(causal, contexts, conts))
    two = np.array(prefixed_context_logprobs(causal, prefixes, contexts, conts, max_rows=7))
    np.testing.assert_allclose(two[:, 0], one[:, 0], atol=1e-4)
    np.testing.assert_array_equal(two[:, 1], one[:, 1])


def test_causal_ilps_refuses_a_template_with_the_group_after_the_trait(lex, causal, tmp_path):
    import shutil

    seed = tmp_path / "seed"
    shutil.copytree(SEED, seed)
    with open(seed / "templates.csv", "a", encoding="utf-8") as f:
        f.write("en,typical,pl,any,{trait} is typical of {group}.,authored\n")
    late = load_lexicon(seed)
    with pytest.raises(ConfigError, match=r"en/typical .*\{group\} comes after \{trait\}"):
        ilps_scores(causal, late, "en", kind="causal", template_ids=["are", "typical"], groups=["woman"])
    # every template at once (templates: null) names it too; group-first templates still score
    with pytest.raises(ConfigError, match="en/typical"):
        ilps_scores(causal, late, "en", kind="causal", groups=["woman"])
    ok = ilps_scores(causal, late, "en", kind="causal", template_ids=["are"], groups=["woman"])
    assert ok["score"].notna().all()


def test_choice_auto_mode_uses_logprobs_on_the_tiny_causal_lm(lex, causal, tmp_path):
    from stereolens.studies.leakage.scores import score_model

    assert resolve_choice_mode(causal, "auto") == "logprob"
    study = {"choice": {"mode": "auto", "design": "matching", "groups": ["woman"]}}
    done = score_model(causal, "causal", ["choice"], lex, "en", study, None, tmp_path)["choice"]
    assert (done["mode_requested"], done["mode"]) == ("auto", "logprob")
    assert (done["design"], done["n_groups"], done["groups"], done["queries"]) == ("matching", 1, ["woman"], 34)
    assert not (tmp_path / "choice_nonmatching.csv").exists()
    # the same numbers as asking for logprob explicitly
    explicit = choice_scores(causal, lex, "en", mode="logprob", design="matching", groups=["woman"])[0]
    auto = pd.read_csv(tmp_path / "choice_long.csv")
    np.testing.assert_allclose(auto["score"], explicit["score"], atol=1e-9)
