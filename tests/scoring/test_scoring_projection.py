"""The vocabulary projection behind every scored token: blocked normaliser, deferred rows, shared prefixes.

Known answers: a zero projection gives log(vocabulary size); the blocked
normaliser equals torch's logsumexp over whole logit rows; causal scores with
shared prefixes equal the model's own forward pass sentence by sentence; a head
the projection cannot describe falls back to the model's head and still scores
right.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from stereolens.scoring import score_sentences
from stereolens.scoring.access import split_head
from stereolens.scoring.causal import prefix_nodes
from stereolens.scoring.encoding import CausalEncoding
from stereolens.scoring.projection import DeferredLogprobs, VocabProjection

from test_scoring_exact import direct_causal, direct_pll  # noqa: E402  (tests/ is on sys.path)


def _projection(n_vocab=1000, hidden=16, bias=True, cap=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(n_vocab, hidden, generator=g)
    return VocabProjection(weight, torch.randn(n_vocab, generator=g) if bias else None, None, cap), g


def test_zero_projection_normaliser_is_log_vocabulary_size():
    proj = VocabProjection(torch.zeros(5000, 8), None)
    x = torch.randn(7, 8)
    assert torch.allclose(proj.logsumexp(x, rows=3, block=1024), torch.full((7,), math.log(5000)), atol=1e-5)
    lp = proj.target_logprobs(x, torch.tensor([0, 1, 2, 3, 4, 4999, 17]))
    assert torch.allclose(lp, torch.full((7,), -math.log(5000)), atol=1e-5)


@pytest.mark.parametrize("cap", [None, 3.0])
@pytest.mark.parametrize("rows, block", [(1000, 4096), (10, 128), (7, 333), (1, 1)])
def test_blocked_normaliser_equals_whole_rows(cap, rows, block):
    # 1000 words in blocks of 128 or 333 leave a short last block; 37 rows in groups of 7 or 10 a short last group
    proj, g = _projection(cap=cap)
    x = torch.randn(37, 16, generator=g) * 3
    whole = torch.nn.functional.linear(x, proj.weight, proj.bias)
    if cap is not None:
        whole = torch.tanh(whole / cap) * cap
    assert torch.allclose(proj.logsumexp(x, rows=rows, block=block), torch.logsumexp(whole, -1), atol=1e-5)
    targets = torch.randint(0, 1000, (37,), generator=g)
    expected = torch.log_softmax(whole, -1).gather(1, targets[:, None]).squeeze(1)
    assert torch.allclose(proj.target_logprobs(x, targets), expected, atol=1e-5)


def test_large_logits_do_not_overflow():
    proj = VocabProjection(torch.eye(4).repeat(1000, 1), None)  # 4,000 words
    x = torch.tensor([[1e4, 0.0, 0.0, 0.0], [-1e4, 0.0, 0.0, 0.0]])
    got = proj.logsumexp(x, block=64)
    assert torch.isfinite(got).all()
    assert got[0].item() == pytest.approx(1e4 + math.log(1000), rel=1e-6)
    assert got[1].item() == pytest.approx(math.log(3000), abs=1e-4)


def test_deferred_rows_wait_for_a_group_and_come_back_in_order():
    proj, g = _projection()
    seen = []
    deferred = DeferredLogprobs(proj, lambda tag, lp: seen.append((tag, lp)), group_rows=10)
    batches = [torch.randn(n, 16, generator=g) for n in (4, 4, 4, 3)]
    targets = [torch.randint(0, 1000, (x.shape[0],), generator=g) for x in batches]
    deferred.add("a", batches[0], targets[0])
    deferred.add("b", batches[1], targets[1])
    assert seen == []  # 8 rows: still waiting
    deferred.add("c", batches[2], targets[2])  # 12 >= 10: one group of 12
    assert [t for t, _ in seen] == ["a", "b", "c"]
    deferred.add("d", batches[3], targets[3])
    deferred.flush()
    assert [t for t, _ in seen] == ["a", "b", "c", "d"]
    for (_, lp), x, t in zip(seen, batches, targets):
        assert torch.allclose(torch.tensor(lp), proj.target_logprobs(x, t), atol=1e-5)


def _plan_group_logprobs(proj, batches, targets, groups):
    """Known answer: each pass's log-probabilities when its rows are normalised beside exactly its plan group's."""
    out = []
    for group in groups:
        x = torch.cat([proj.prepare(batches[i]) for i in group])
        lse = proj.logsumexp(x)
        r = 0
        for i in group:
            n = batches[i].shape[0]
            out.append((proj.target_logits(proj.prepare(batches[i]), targets[i]) - lse[r : r + n]).tolist())
            r += n
    return out


def test_passes_added_out_of_order_are_grouped_and_delivered_in_plan_order():
    proj, g = _projection()
    batches = [torch.randn(n, 16, generator=g) for n in (4, 4, 4, 3, 5, 2, 1)]
    targets = [torch.randint(0, 1000, (x.shape[0],), generator=g) for x in batches]
    # group_rows 10 cuts the plan after pass 2 (12 rows) and after pass 5 (10 rows); pass 6 waits for flush
    expected = _plan_group_logprobs(proj, batches, targets, [[0, 1, 2], [3, 4, 5], [6]])
    seen = []
    deferred = DeferredLogprobs(proj, lambda tag, lp: seen.append((tag, lp)), group_rows=10)
    for i in (5, 3, 4, 6, 2, 0):
        deferred.add(i, batches[i], targets[i], index=i)
    assert seen == []  # pass 1 is missing: nothing after it can be grouped
    deferred.add(1, batches[1], targets[1], index=1)
    assert [t for t, _ in seen] == [0, 1, 2, 3, 4, 5]
    deferred.flush()
    assert [t for t, _ in seen] == list(range(7))
    assert [lp for _, lp in seen] == expected  # bit for bit


def test_passes_from_threads_give_the_plan_groups_bits_whatever_the_timing():
    import random
    import threading

    proj, g = _projection(n_vocab=3000, hidden=48)
    batches = [torch.randn(n, 48, generator=g) for n in (7, 1, 5, 3, 9, 2, 6, 4, 8, 3, 1, 5)]
    targets = [torch.randint(0, 3000, (x.shape[0],), generator=g) for x in batches]
    groups = [[0, 1, 2, 3], [4, 5, 6], [7, 8], [9, 10, 11]]  # cut at 16 rows or more
    expected = _plan_group_logprobs(proj, batches, targets, groups)
    for seed in range(5):
        rng = random.Random(seed)
        delays = [rng.random() * 0.003 for _ in batches]
        seen = []
        deferred = DeferredLogprobs(proj, lambda tag, lp: seen.append((tag, lp)), group_rows=16)
        queue = iter(range(len(batches)))
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    i = next(queue, None)
                if i is None:
                    return
                time.sleep(delays[i])
                deferred.add(i, batches[i], targets[i], index=i)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deferred.flush()
        assert [t for t, _ in seen] == list(range(len(batches)))
        assert [lp for _, lp in seen] == expected


def test_flush_refuses_a_plan_with_a_pass_missing():
    proj, g = _projection()
    deferred = DeferredLogprobs(proj, lambda tag, lp: None)
    deferred.add("b", torch.randn(2, 16, generator=g), torch.tensor([1, 2]), index=1)
    with pytest.raises(RuntimeError, match="pass 0 never was"):
        deferred.flush()


def test_rows_with_one_key_share_the_first_rows_normaliser():
    proj, g = _projection()
    x = torch.randn(3, 16, generator=g)
    targets = torch.tensor([5, 6, 7])
    got = []
    deferred = DeferredLogprobs(proj, lambda tag, lp: got.extend(lp), n_keys=2)
    deferred.add(None, x, targets, keys=[0, 1, 0])
    deferred.flush()
    lse = proj.logsumexp(x)
    logits = proj.target_logits(x, targets)
    # the third row is declared the same state as the first: its normaliser is the first row's
    expected = torch.stack([logits[0] - lse[0], logits[1] - lse[1], logits[2] - lse[0]])
    assert torch.allclose(torch.tensor(got), expected, atol=1e-6)


def test_prefix_nodes_are_equal_exactly_for_equal_prefixes():
    items = [
        CausalEncoding((2, 10, 11, 12), 1, False),
        CausalEncoding((2, 10, 11, 13, 14), 1, False),
        CausalEncoding((2, 10, 9), 1, False),
        CausalEncoding((2, 10, 11, 12), 2, False),  # same ids, scored from the second token
    ]
    nodes, n = prefix_nodes(items)
    # prefixes: (2) (2,10) (2,10,11) (2,10,11,13) — (2,10,11,12) is never a prefix of a scored token
    assert n == 4
    assert nodes[0] == nodes[1][:3] == [0, 1, 2]
    assert nodes[1][3] == 3
    assert nodes[2] == [0, 1]
    assert nodes[3] == nodes[0][1:]


SHARED_PREFIXES = [
    "Women are kind.", "Women are cruel.", "Women are kind to animals.", "Men are kind.",
    "The poor are really ignorant about how to handle money.", "The poor are really ignorant.",
    "The rich are really ignorant about how to handle money.", "Women are kind.",
]


def test_causal_scores_with_shared_prefixes_equal_the_models_forward_pass(clm):
    model, tok = clm
    assert split_head(model, "causal", [1, 2, 3]).projection is not None
    got = score_sentences(model, tok, SHARED_PREFIXES, "causal", batch_tokens=16)
    for sentence, score in zip(SHARED_PREFIXES, got):
        ids = tok(sentence)["input_ids"]
        assert score.logprob == pytest.approx(direct_causal(model, tok, ids[:1], ids[1:]), abs=1e-4)


def _double_output(module, args, output):
    return output * 2


def test_a_head_the_projection_cannot_describe_falls_back_to_the_head(tiny_causal_lm_dir, tiny_masked_lm_dir, caplog):
    # a hook after the vocabulary matrix changes the model's logits where the projection cannot see
    causal = AutoModelForCausalLM.from_pretrained(tiny_causal_lm_dir).eval()
    causal.get_output_embeddings().register_forward_hook(_double_output)
    tok = AutoTokenizer.from_pretrained(tiny_causal_lm_dir)
    assert split_head(causal, "causal", tok("Women are kind.")["input_ids"]).projection is None
    assert "vocabulary projection" in caplog.text
    for sentence, score in zip(SHARED_PREFIXES, score_sentences(causal, tok, SHARED_PREFIXES, "causal")):
        ids = tok(sentence)["input_ids"]
        assert score.logprob == pytest.approx(direct_causal(causal, tok, ids[:1], ids[1:]), abs=1e-4)

    masked = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    masked.get_output_embeddings().register_forward_hook(_double_output)
    mtok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    assert split_head(masked, "masked", mtok("Women are kind.")["input_ids"]).projection is None
    score = score_sentences(masked, mtok, ["Women are kind."], "pll")[0]
    assert score.logprob == pytest.approx(direct_pll(masked, mtok, "Women are kind.", False), abs=1e-4)


def test_masked_projection_runs_the_heads_own_transform(tiny_masked_lm_dir):
    model = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    ids = tok("Women are kind.")["input_ids"]
    bh = split_head(model, "masked", ids)
    assert bh.projection is not None and bh.projection.pre is not None
    with torch.inference_mode():
        rows = bh.rows(torch.tensor([ids]), None, torch.tensor([1]))
        assert torch.allclose(bh.projection.logits(bh.projection.prepare(rows)), bh.head(rows), atol=1e-5)


def test_seq2seq_projection_includes_final_logits_bias_and_fallback(tiny_seq2seq_lm_dir, caplog):
    from transformers import AutoModelForSeq2SeqLM, BartConfig, BartForConditionalGeneration

    from stereolens.scoring import score_seq2seq
    from stereolens.scoring.access import split_seq2seq

    tok = AutoTokenizer.from_pretrained(tiny_seq2seq_lm_dir)
    src, tgt = tok("<extra_id_0> are kind.")["input_ids"], tok("<extra_id_0> women <extra_id_1>")["input_ids"]

    def reference(model):
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([src]), labels=torch.tensor([tgt]))
        return -out.loss.item() * len(tgt)

    # BART adds final_logits_bias after its projection; the projection must carry it
    config = BartConfig(
        vocab_size=len(tok), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id, forced_eos_token_id=None,
    )
    torch.manual_seed(0)
    model = BartForConditionalGeneration(config).eval()
    model.final_logits_bias.copy_(torch.linspace(-2, 2, len(tok))[None, :])
    assert split_seq2seq(model, src, tgt).projection is not None
    got = score_seq2seq(model, tok, ["<extra_id_0> are kind."], ["<extra_id_0> women <extra_id_1>"])[0]
    assert got.logprob == pytest.approx(reference(model), abs=1e-4)

    hooked = AutoModelForSeq2SeqLM.from_pretrained(tiny_seq2seq_lm_dir).eval()
    hooked.lm_head.register_forward_hook(_double_output)
    assert split_seq2seq(hooked, src, tgt).projection is None
    got = score_seq2seq(hooked, tok, ["<extra_id_0> are kind."], ["<extra_id_0> women <extra_id_1>"])[0]
    assert got.logprob == pytest.approx(reference(hooked), abs=1e-4)
