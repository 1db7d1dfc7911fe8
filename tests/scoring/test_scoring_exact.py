"""Known-answer tests of the scoring engine against direct definitions and reference libraries.

References: direct implementations of each definition (docs/methods.md), the
CrowS-Pairs ``metric.py`` procedure written out literally, minicons'
``within_word_l2r`` PLL, and lm-evaluation-harness' ``HFLM.loglikelihood``.
"""

from __future__ import annotations

import difflib

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

# reference libraries from the [test] extra: imported directly so that a missing one fails
# the run instead of silently skipping the comparisons the engine's exactness rests on
import lm_eval.models.huggingface as lm_eval_hf
import minicons.scorer as minicons_scorer
from lm_eval.api.instance import Instance

from stereolens.scoring import (
    score_continuations,
    score_pair_lists,
    score_pairs,
    score_sentences,
    score_seq2seq,
)
from stereolens.scoring.access import split_seq2seq

SENTENCES = [
    "Women are kind.",
    "The poor are really ignorant about how to handle money.",
    "Unbelievably, everything worked out perfectly in the end.",
    "Люди из этой деревни очень добрые и трудолюбивые.",
    "医生们每天都工作很长时间。",
    "ये लोग बहुत मेहनती और ईमानदार हैं।",
    "یہ لوگ بہت محنتی اور ایماندار ہیں۔",
    "Konkani: हे लोक खूब बरे आसात.",
]
PAIRS = [
    ("Women are kind.", "Men are kind."),
    ("The poor are really ignorant about how to handle money.", "The rich are really ignorant about how to handle money."),
    ("Люди из этой деревни очень добрые.", "Врачи из этой деревни очень добрые."),
    ("ये लोग बहुत मेहनती हैं।", "डॉक्टर बहुत मेहनती हैं।"),
    ("Women are kind.", "Women are kind."),
]
TOL = 1e-4


@pytest.fixture(scope="module")
def s2s(tiny_seq2seq_lm_dir):
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_seq2seq_lm_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_seq2seq_lm_dir)


# ---------------------------------------------------------------- direct definitions


@torch.no_grad()
def direct_pll(model, tok, sentence: str, word_l2r: bool) -> float:
    """Salazar et al. PLL (or Kauf & Ivanova's word-l2r variant) straight from the definition:
    one masked copy per token, full model forward, log-softmax over the vocabulary."""
    enc = tok(sentence, return_special_tokens_mask=True)
    ids, special, wids = enc["input_ids"], enc["special_tokens_mask"], enc.word_ids()
    targets = [p for p in range(len(ids)) if not special[p]]
    copies = torch.tensor([ids] * len(targets))
    for row, p in enumerate(targets):
        copies[row, p] = tok.mask_token_id
        if word_l2r:
            for j in range(p + 1, len(ids)):
                if not special[j] and wids[j] == wids[p]:
                    copies[row, j] = tok.mask_token_id
    logp = torch.log_softmax(model(input_ids=copies).logits.double(), -1)
    return sum(logp[row, p, ids[p]].item() for row, p in enumerate(targets))


def reference_crows(model, tok, sent1: str, sent2: str) -> tuple[float, float]:
    """nyu-mll/crows-pairs metric.py mask_unigram, step by step: difflib over token ids,
    shared positions without the first and last ([CLS], [SEP]), one masked token per pass."""
    t1, t2 = tok.encode(sent1), tok.encode(sent2)
    m = difflib.SequenceMatcher(None, [str(x) for x in t1], [str(x) for x in t2])
    tpl1, tpl2 = [], []
    for op in m.get_opcodes():
        if op[0] == "equal":
            tpl1 += list(range(op[1], op[2]))
            tpl2 += list(range(op[3], op[4]))
    # the script runs one masked copy per forward pass; the copies are stacked here (same numbers)
    return _one_mask_each(model, tok, t1, tpl1[1:-1]), _one_mask_each(model, tok, t2, tpl2[1:-1])


@torch.no_grad()
def _one_mask_each(model, tok, ids: list[int], positions: list[int]) -> float:
    if not positions:
        return 0.0
    copies = torch.tensor([ids] * len(positions))
    copies[torch.arange(len(positions)), positions] = tok.mask_token_id
    logp = torch.log_softmax(model(input_ids=copies).logits.double(), -1)
    return sum(logp[row, p, ids[p]].item() for row, p in enumerate(positions))


@torch.no_grad()
def direct_causal(model, tok, context_ids: list[int], cont_ids: list[int]) -> float:
    ids = torch.tensor([context_ids + cont_ids])
    logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
    return sum(logp[len(context_ids) + k - 1, t].item() for k, t in enumerate(cont_ids))


# ---------------------------------------------------------------- masked metrics


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r"])
def test_masked_metrics_equal_direct_definition(mlm, metric):
    model, tok = mlm
    got = score_sentences(model, tok, SENTENCES, metric)
    for sentence, score in zip(SENTENCES, got):
        assert score.logprob == pytest.approx(direct_pll(model, tok, sentence, metric == "pll_word_l2r"), abs=TOL)


def test_word_l2r_differs_from_pll_only_on_multi_piece_words(mlm):
    model, tok = mlm
    pll = score_sentences(model, tok, SENTENCES, "pll", per_token=True)
    l2r = score_sentences(model, tok, SENTENCES, "pll_word_l2r", per_token=True)
    for a, b in zip(pll, l2r):
        # the last piece of every word sees the same context under both metrics
        assert a.tokens == b.tokens and a.n_tokens == b.n_tokens
    # with several multi-piece words in the corpus the two metrics must differ somewhere
    assert any(abs(a.logprob - b.logprob) > 1e-6 for a, b in zip(pll, l2r))


def test_word_l2r_equals_minicons(mlm, tiny_masked_lm_dir):
    model, tok = mlm
    ref_tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    if not hasattr(ref_tok, "batch_encode_plus"):
        # minicons 0.3.39 still calls batch_encode_plus, which transformers 5 removed
        ref_tok.batch_encode_plus = ref_tok.__call__
    scorer = minicons_scorer.MaskedLMScorer(model, "cpu", tokenizer=ref_tok)
    ref = scorer.sequence_score(SENTENCES, PLL_metric="within_word_l2r", reduction=lambda x: x.sum(0).item())
    got = score_sentences(model, tok, SENTENCES, "pll_word_l2r")
    assert [g.logprob for g in got] == pytest.approx(ref, abs=TOL)
    ref_orig = scorer.sequence_score(SENTENCES, PLL_metric="original", reduction=lambda x: x.sum(0).item())
    got_orig = score_sentences(model, tok, SENTENCES, "pll")
    assert [g.logprob for g in got_orig] == pytest.approx(ref_orig, abs=TOL)


def test_crows_equals_reference_procedure(mlm):
    model, tok = mlm
    first, second = score_pair_lists(model, tok, [a for a, _ in PAIRS], [b for _, b in PAIRS], "crows")
    for (a, b), x, y in zip(PAIRS, first, second):
        ra, rb = reference_crows(model, tok, a, b)
        assert x.logprob == pytest.approx(ra, abs=TOL)
        assert y.logprob == pytest.approx(rb, abs=TOL)
        assert x.n_tokens == y.n_tokens  # the same shared tokens are scored on both sides


def test_crows_scores_only_shared_tokens(mlm):
    model, tok = mlm
    (x,), (y,) = score_pair_lists(model, tok, ["Women are kind."], ["Men are kind."], "crows", per_token=True)
    pll = score_sentences(model, tok, ["Women are kind."], "pll", per_token=True)[0]
    assert x.tokens == y.tokens
    assert x.n_tokens < pll.n_tokens


# ---------------------------------------------------------------- causal and seq2seq


def test_causal_equals_direct_bos_conditioned_sum(clm):
    model, tok = clm
    got = score_sentences(model, tok, SENTENCES, "causal", per_token=True)
    for sentence, score in zip(SENTENCES, got):
        cont = tok(sentence, add_special_tokens=False)["input_ids"]
        assert score.n_tokens == len(cont)
        assert score.logprob == pytest.approx(direct_causal(model, tok, [tok.bos_token_id], cont), abs=TOL)
        assert score.mean == pytest.approx(score.logprob / len(cont))
        assert sum(score.token_logprobs) == pytest.approx(score.logprob, abs=1e-9)


def test_causal_equals_lm_evaluation_harness(clm, tiny_causal_lm_dir):
    model, tok = clm
    # logits_cache off: lm-eval 0.4.13 shares logits between requests with the same
    # context+continuation[:-1] and then reads the wrong positions for the shorter continuation
    # (here "" + "Women are kind." and "Women are" + " kind."), which is its bug, not the definition
    lm = lm_eval_hf.HFLM(pretrained=str(tiny_causal_lm_dir), device="cpu", batch_size=4, logits_cache=False)
    contexts = ["", "", "Women are", "Люди из этой деревни очень "]
    conts = [SENTENCES[0], SENTENCES[3], " kind.", "добрые."]
    requests = [
        Instance(request_type="loglikelihood", doc={}, arguments=(c, s), idx=i) for i, (c, s) in enumerate(zip(contexts, conts))
    ]
    ref = [ll for ll, _greedy in lm.loglikelihood(requests)]
    # the harness conditions an empty context on BOS and encodes a non-empty one with the
    # tokenizer's own special tokens (BOS first for this tokenizer, as for Gemma's)
    got = score_continuations(model, tok, contexts, conts)
    assert [g.logprob for g in got] == pytest.approx(ref, abs=TOL)
    empty = score_sentences(model, tok, conts[:2], "causal")
    assert [g.logprob for g in empty] == pytest.approx(ref[:2], abs=TOL)


@pytest.fixture(scope="module")
def no_bos_clm_dir(tiny_causal_lm_dir, tmp_path_factory):
    """The tiny causal LM with a tokenizer that keeps its BOS token but does not add it (as GPT-2's)."""
    import json
    import shutil

    out = tmp_path_factory.mktemp("tiny-causal-no-bos")
    for f in tiny_causal_lm_dir.iterdir():
        shutil.copy(f, out / f.name)
    spec = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    spec["post_processor"] = None
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return out


def test_continuation_bos_follows_tokenizer_as_lm_evaluation_harness(no_bos_clm_dir):
    from stereolens.scoring.encoding import adds_bos

    model = AutoModelForCausalLM.from_pretrained(no_bos_clm_dir).eval()
    tok = AutoTokenizer.from_pretrained(no_bos_clm_dir)
    assert tok.bos_token_id is not None and tok("Women")["input_ids"][0] != tok.bos_token_id
    assert not adds_bos(tok)
    contexts, conts = ["Women are", "Люди из этой деревни очень ", ""], [" kind.", "добрые.", "Men are kind."]
    lm = lm_eval_hf.HFLM(pretrained=str(no_bos_clm_dir), device="cpu", batch_size=4, logits_cache=False)
    requests = [Instance(request_type="loglikelihood", doc={}, arguments=(c, s), idx=i) for i, (c, s) in enumerate(zip(contexts, conts))]
    ref = [ll for ll, _greedy in lm.loglikelihood(requests)]
    got = score_continuations(model, tok, contexts, conts)
    assert [g.logprob for g in got] == pytest.approx(ref, abs=TOL)
    ctx = tok("Women are", add_special_tokens=False)["input_ids"]
    cont = tok("Women are kind.", add_special_tokens=False)["input_ids"][len(ctx) :]
    assert got[0].logprob == pytest.approx(direct_causal(model, tok, ctx, cont), abs=TOL)
    # the explicit override still puts BOS first; an empty context is BOS either way
    forced = score_continuations(model, tok, contexts, conts, prepend_bos=True)
    assert forced[0].logprob == pytest.approx(direct_causal(model, tok, [tok.bos_token_id, *ctx], cont), abs=TOL)
    assert forced[2].logprob == pytest.approx(got[2].logprob, abs=1e-9)


def test_continuation_with_bos_equals_direct(clm):
    model, tok = clm
    got = score_continuations(model, tok, ["Women are", "The poor are "], [" kind.", "lazy."], per_token=True)
    ctx = [tok.bos_token_id] + tok("Women are", add_special_tokens=False)["input_ids"]
    cont = tok("Women are kind.", add_special_tokens=False)["input_ids"][len(ctx) - 1 :]
    assert got[0].logprob == pytest.approx(direct_causal(model, tok, ctx, cont), abs=TOL)
    # the context's trailing space moves to the continuation, as in the harness
    assert got[1].tokens[0].startswith("Ġ")


def test_seq2seq_equals_model_loss(s2s):
    model, tok = s2s
    inputs = ["<extra_id_0> are kind.", "Women are <extra_id_0>.", "<extra_id_0> очень добрые."]
    targets = ["<extra_id_0> women <extra_id_1>", "<extra_id_0> kind <extra_id_1>", "<extra_id_0> Люди <extra_id_1>"]
    got = score_seq2seq(model, tok, inputs, targets)
    for src, tgt, score in zip(inputs, targets, got):
        labels = tok(text_target=tgt, return_tensors="pt").input_ids
        with torch.no_grad():
            loss = model(**tok(src, return_tensors="pt"), labels=labels).loss.item()
        assert score.n_tokens == labels.shape[1]
        assert score.mean == pytest.approx(-loss, abs=TOL)


S2S_INPUTS = ["<extra_id_0> are kind.", "Women are <extra_id_0> and very nice.", "<extra_id_0> очень добрые."]
S2S_TARGETS = ["<extra_id_0> women <extra_id_1>", "<extra_id_0> kind <extra_id_1> nice", "<extra_id_0> Люди <extra_id_1>"]


@torch.no_grad()
def labels_path_logprobs(model, tok, src: str, tgt: str) -> list[float]:
    """Per-token log P(target) from the model's own labels path (full logits at every position)."""
    labels = tok(text_target=tgt, return_tensors="pt").input_ids
    out = model(**tok(src, return_tensors="pt"), labels=labels)
    logp = torch.log_softmax(out.logits[0].double(), -1)
    return [logp[t, y].item() for t, y in enumerate(labels[0].tolist())]


@pytest.mark.parametrize("tied", [True, False])
def test_seq2seq_projects_only_target_rows_and_equals_labels_path(s2s, tiny_seq2seq_lm_dir, tied):
    import transformers

    _, tok = s2s
    # a model of its own: the head path chosen below is remembered on the model
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_seq2seq_lm_dir).eval()
    if not tied:
        # a T5 v1.1-style config (tie_word_embeddings false in its file) does not scale decoder
        # states by d_model**-0.5 before the head; the tiny model's config does, so both
        # branches of T5's forward are covered
        fields = {k: v for k, v in model.config.to_dict().items() if k != "scale_decoder_outputs"}
        config = transformers.T5Config.from_dict({**fields, "tie_word_embeddings": False})
        torch.manual_seed(1)
        model = transformers.T5ForConditionalGeneration(config).eval()
    assert model.config.scale_decoder_outputs is tied
    # the head module is what the hook can watch: take the path that calls it (the vocabulary
    # projection, which reads its weight directly, gets the same rows; see test_scoring_projection)
    src_ids, tgt_ids = tok(S2S_INPUTS[0])["input_ids"], tok(text_target=S2S_TARGETS[0])["input_ids"]
    split_seq2seq(model, src_ids, tgt_ids).projection = None
    head_inputs = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, i, o: head_inputs.append(tuple(i[0].shape)))
    try:
        got = score_seq2seq(model, tok, S2S_INPUTS, S2S_TARGETS, per_token=True, batch_tokens=4096)
    finally:
        handle.remove()
    n_target = sum(len(tok(text_target=t).input_ids) for t in S2S_TARGETS)
    # the one-off check of the split runs the full model once; scoring itself projects target rows only
    scoring = head_inputs[-1:]
    assert scoring == [(n_target, model.config.d_model)]
    for src, tgt, score in zip(S2S_INPUTS, S2S_TARGETS, got):
        assert list(score.token_logprobs) == pytest.approx(labels_path_logprobs(model, tok, src, tgt), abs=TOL)




def _assert_close(a, b):
    assert [x.n_tokens for x in a] == [y.n_tokens for y in b]
    for x, y in zip(a, b):
        assert x.logprob == pytest.approx(y.logprob, abs=TOL)


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r", "causal"])
def test_batched_equals_one_at_a_time(mlm, clm, metric):
    model, tok = clm if metric == "causal" else mlm
    batched = score_sentences(model, tok, SENTENCES, metric, batch_tokens=4096)
    tight = score_sentences(model, tok, SENTENCES, metric, batch_tokens=1)  # one row per forward pass
    single = [score_sentences(model, tok, [s], metric)[0] for s in SENTENCES]
    _assert_close(batched, single)
    _assert_close(tight, single)


def test_batched_equals_one_at_a_time_crows_continuations_seq2seq(mlm, clm, s2s):
    model, tok = mlm
    a, b = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    batched = score_pair_lists(model, tok, a, b, "crows", batch_tokens=4096)
    single = [score_pair_lists(model, tok, [x], [y], "crows", batch_tokens=1) for x, y in zip(a, b)]
    _assert_close(batched[0], [s[0][0] for s in single])
    _assert_close(batched[1], [s[1][0] for s in single])

    model, tok = clm
    ctx, cont = ["Women are", "", "Люди"], [" kind.", SENTENCES[4], " из этой деревни."]
    _assert_close(
        score_continuations(model, tok, ctx, cont),
        [score_continuations(model, tok, [c], [s], batch_tokens=1)[0] for c, s in zip(ctx, cont)],
    )

    model, tok = s2s
    src, tgt = ["<extra_id_0> are kind.", "Women are <extra_id_0> and very nice."], ["<extra_id_0> women <extra_id_1>", "<extra_id_0> kind <extra_id_1>"]
    _assert_close(score_seq2seq(model, tok, src, tgt), [score_seq2seq(model, tok, [s], [t], batch_tokens=1)[0] for s, t in zip(src, tgt)])


def test_cpu_passes_hold_one_length_and_padded_passes_agree(mlm):
    from stereolens.scoring import masked
    from stereolens.scoring.access import split_head
    from stereolens.scoring.encoding import encode_masked

    model, tok = mlm
    score_sentences(model, tok, SENTENCES[:1], "pll")  # first use checks the scoring path once per model
    passes = []
    handle = model.base_model.embeddings.register_forward_pre_hook(
        lambda m, args, kwargs: passes.append(kwargs["input_ids"].clone()), with_kwargs=True
    )
    try:
        score_sentences(model, tok, SENTENCES, "pll", batch_tokens=1 << 16)
    finally:
        handle.remove()
    # on a CPU no pass pads: every row of every pass is a whole sentence of the pass's width;
    # one pass per length, except the passes cut so that the workers finish together
    from stereolens.scoring.batching import cpu_workers, longest_first, plan_batches

    workers = cpu_workers(torch.device("cpu"))
    pll = [masked.pll_item(encode_masked(tok, s, i, limit=64, truncate=False, word_ids=False)) for i, s in enumerate(SENTENCES)]
    lengths = [len(it.enc.ids) for it in pll]
    plan = list(plan_batches(lengths, [len(it.targets) for it in pll], (1 << 16) // workers, pad=False))
    assert len(plan) == len(set(lengths))
    assert len(passes) == len(longest_first(plan, lengths, workers))
    assert {p.shape[1] for p in passes} == set(lengths)
    assert all(not (p == tok.pad_token_id).any() for p in passes)
    # the padded plan (what a GPU gets) gives the same numbers, with an attention mask
    items = [masked.pll_word_l2r_item(encode_masked(tok, s, i, limit=64, truncate=False, word_ids=True)) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "masked", list(items[0].enc.ids))
    opts = dict(mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, vocab_size=len(tok), batch_tokens=1 << 16)
    padded, unpadded = masked.run_masked(bh, items, pad=True, **opts), masked.run_masked(bh, items, pad=False, **opts)
    for a, b in zip(padded, unpadded):
        assert a == pytest.approx(b, abs=TOL)


def test_order_and_duplicates_do_not_change_scores(mlm):
    model, tok = mlm
    shuffled = SENTENCES[::-1] + SENTENCES[:3]
    ref = {s: x.logprob for s, x in zip(SENTENCES, score_sentences(model, tok, SENTENCES, "pll"))}
    for s, x in zip(shuffled, score_sentences(model, tok, shuffled, "pll")):
        assert x.logprob == pytest.approx(ref[s], abs=TOL)


def test_score_pairs_table_columns(mlm):
    model, tok = mlm
    df = pd.DataFrame({"id": ["p1", "p2"], "sent_stereo": [PAIRS[0][0], PAIRS[2][0]], "sent_anti": [PAIRS[0][1], PAIRS[2][1]]})
    out = score_pairs(model, tok, df, "pll")
    expected = score_sentences(model, tok, [PAIRS[0][0], PAIRS[2][0], PAIRS[0][1], PAIRS[2][1]], "pll")
    assert list(out["score_stereo"]) == pytest.approx([e.logprob for e in expected[:2]], abs=1e-9)
    assert list(out["score_anti"]) == pytest.approx([e.logprob for e in expected[2:]], abs=1e-9)
    assert list(out["sent_stereo"]) == list(df["sent_stereo"])  # text untouched


# ---------------------------------------------------------------- other masked architectures


@pytest.mark.parametrize(("arch", "mode"), [
    ("bert-peaked", "shared-first-layer"), ("roberta", "shared-first-layer"), ("electra", "shared-first-layer"), ("electra-projected", "last-layer-rows"),
    ("distilbert", "head-rows"), ("albert", "head-rows"),
])
def test_pll_on_other_architectures_equals_direct(tiny_masked_lm_dir, arch, mode, caplog):
    import transformers

    from stereolens.scoring.access import split_head

    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    common = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id)
    config = {
        # weights large enough that attention is far from uniform, so a wrong score scale shows
        "bert-peaked": lambda: transformers.BertConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
                                                       max_position_embeddings=64, initializer_range=0.5, **common),
        "roberta": lambda: transformers.RobertaConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                                      intermediate_size=64, max_position_embeddings=70, **common),
        "electra": lambda: transformers.ElectraConfig(embedding_size=32, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                                      intermediate_size=64, max_position_embeddings=64, **common),
        # embeddings smaller than the hidden size go through a projection the shared first layer does not run
        "electra-projected": lambda: transformers.ElectraConfig(embedding_size=16, hidden_size=32, num_hidden_layers=3,
                                                                num_attention_heads=2, intermediate_size=64,
                                                                max_position_embeddings=64, **common),
        "distilbert": lambda: transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                            max_position_embeddings=64, **common),
        "albert": lambda: transformers.AlbertConfig(embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=64, max_position_embeddings=64, **common),
    }[arch]()
    torch.manual_seed(0)
    model = transformers.AutoModelForMaskedLM.from_config(config).eval()
    got = score_sentences(model, tok, SENTENCES[:4], "pll_word_l2r", batch_tokens=64)
    for sentence, score in zip(SENTENCES[:4], got):
        assert score.logprob == pytest.approx(direct_pll(model, tok, sentence, True), abs=TOL)
    assert split_head(model, "masked", [1, 2, 3]).mode == mode
    assert "differs from its forward pass" not in caplog.text  # no level was dropped on the way


def test_bert_paths_padded_and_unpadded_agree(mlm):
    from stereolens.scoring import masked
    from stereolens.scoring.access import split_head
    from stereolens.scoring.encoding import encode_masked

    model, tok = mlm
    items = [masked.pll_item(encode_masked(tok, s, i, limit=64, truncate=False, word_ids=False)) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "masked", list(items[0].enc.ids))
    assert bh.mode == "shared-first-layer"
    opts = dict(mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, vocab_size=len(tok), batch_tokens=1 << 12)
    # unpadded passes share the first layer's rows; padded ones (a GPU's) run the model's own layers
    shared = masked.run_masked(bh, items, pad=False, **opts)
    padded = masked.run_masked(bh, items, pad=True, **opts)
    for sentence, a, b in zip(SENTENCES, shared, padded):
        assert b == pytest.approx(a, abs=TOL)
        assert sum(a) == pytest.approx(direct_pll(model, tok, sentence, False), abs=TOL)


def test_option_probabilities_renormalise_continuation_scores(clm):
    from stereolens.scoring import option_probabilities

    model, tok = clm
    (probs,) = option_probabilities(model, tok, ["Women are"], [[" kind.", " lazy.", " smart."]])
    sums = [s.logprob for s in score_continuations(model, tok, ["Women are"] * 3, [" kind.", " lazy.", " smart."])]
    z = sum(torch.tensor(sums).exp().tolist())
    assert probs == pytest.approx([float(torch.tensor(s).exp()) / z for s in sums], rel=1e-6)
    assert sum(probs) == pytest.approx(1.0)
