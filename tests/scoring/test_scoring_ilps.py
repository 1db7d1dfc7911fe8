"""The ILPS item score of the scoring engine (shared by the leakage and seegull studies) against a direct
computation from the model's logits."""

from __future__ import annotations

import pytest

from stereolens.errors import ConfigError
from stereolens.models import ModelSpec, load_model
from stereolens.models.cache import ResponseCache
from stereolens.scoring.ilps import DEFAULT_REDUCTION, group_follows_word, word_logprobs


@pytest.fixture(scope="module")
def causal(tiny_causal_lm_dir):
    return load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal"), cache=ResponseCache(enabled=False))


def direct_word_logprob(causal, prefix: str, word: str) -> tuple[float, int]:
    """(sum of log P(word's tokens), n tokens) after BOS + the prefix, the prefix's trailing space belonging to
    the word, from one plain forward pass and a log-softmax over the logits."""
    import torch

    tok, model = causal.tokenizer, causal.model
    context = prefix.rstrip()
    continuation = prefix[len(context):] + word
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    ids = [tok.bos_token_id] + tok(context + continuation, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
    positions = range(1 + len(ctx), len(ids))
    return float(sum(logp[t - 1, ids[t]] for t in positions)), len(positions)


def test_causal_item_scores_are_log_probabilities_from_the_logits(causal):
    prefixes = ["Doctors are ", "People are ", "Doctors are ", "The farmers were "]
    words = ["kind", "kind", "lazy", "brave"]
    summed = word_logprobs(causal, "causal", prefixes, words)
    meaned = word_logprobs(causal, "causal", prefixes, words, reduction="mean")
    for prefix, word, s, m in zip(prefixes, words, summed, meaned):
        direct, n = direct_word_logprob(causal, prefix, word)
        assert s == pytest.approx(direct, abs=1e-4) and m == pytest.approx(direct / n, abs=1e-4)
    # an ILPS is the difference of two such scores: the group's prefix minus the generic group's
    assert summed[0] - summed[1] == pytest.approx(direct_word_logprob(causal, "Doctors are ", "kind")[0]
                                                  - direct_word_logprob(causal, "People are ", "kind")[0], abs=1e-4)


def test_kinds_reductions_and_slot_order():
    assert DEFAULT_REDUCTION == {"causal": "sum", "seq2seq": "mean"}
    with pytest.raises(ConfigError, match="ILPS needs a causal or seq2seq model, got kind 'masked'"):
        word_logprobs(None, "masked", ["a "], ["b"])
    assert group_follows_word("{trait} are {group}.", "{group}", "{trait}")
    assert not group_follows_word("{group} are {trait}.", "{group}", "{trait}")
    assert not group_follows_word("People are {trait}.", "{group}", "{trait}")
