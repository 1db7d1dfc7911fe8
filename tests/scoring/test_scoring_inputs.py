"""Input handling, caching, backends and the ``stereolens score`` commands."""

from __future__ import annotations

import argparse
import json

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from stereolens.errors import ConfigError, DataError
from stereolens.models.cache import ResponseCache
from stereolens.scoring import score_pairs, score_sentences
from stereolens.scoring.cli import register

MULTI_SCRIPT = {
    "m1": ("Люди из этой деревни очень добрые.", "Врачи из этой деревни очень добрые."),
    "m2": ("医生们每天都工作很长时间。", "这些人非常聪明，也很勤奋。"),
    "m3": ("ये लोग बहुत मेहनती हैं।", "डॉक्टर हर दिन बहुत काम करते हैं।"),
    "m4": ("یہ لوگ بہت محنتی ہیں۔", "ڈاکٹر ہر روز بہت کام کرتے ہیں۔"),
    "m5": ("NA", "null"),
}


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stereolens")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r", "causal"])
@pytest.mark.parametrize("empty", ["", "   ", None])
def test_empty_sentence_names_row(mlm, clm, metric, empty):
    model, tok = clm if metric == "causal" else mlm
    with pytest.raises(DataError, match=r"^id 'r2': empty sentence$"):
        score_sentences(model, tok, ["Women are kind.", empty], metric, ids=["r1", "r2"])


def test_too_long_names_row_and_truncate_reports(mlm, clm):
    model, tok = mlm
    long = " ".join(["Women are kind and the doctors were smart."] * 20)  # > 64 positions
    with pytest.raises(DataError, match=r"^id 'x7': sentence has \d+ tokens, more than the model's maximum of 64"):
        score_sentences(model, tok, ["Women are kind.", long], "pll", ids=["x6", "x7"])
    short, cut = score_sentences(model, tok, ["Women are kind.", long], "pll", truncate=True)
    assert not short.truncated and cut.truncated and cut.n_tokens == 62  # 64 minus [CLS] and [SEP]

    model, tok = clm
    with pytest.raises(DataError, match=r"^id 0: sentence has \d+ tokens, more than the model's maximum of 128"):
        score_sentences(model, tok, [long * 2], "causal")
    (cut,) = score_sentences(model, tok, [long * 2], "causal", truncate=True)
    assert cut.truncated and cut.n_tokens == 128


@pytest.mark.parametrize("metric", ["pll", "crows"])
def test_too_long_in_pairs_names_row_and_column(mlm, metric):
    model, tok = mlm
    long = " ".join(["Women are kind and the doctors were smart."] * 20)
    df = pd.DataFrame({"id": ["p1", "p2"], "sent_stereo": ["Women are kind.", "Men are kind."], "sent_anti": ["Men are kind.", long]})
    with pytest.raises(DataError, match=r"^id 'p2': sentence in column sent_anti has \d+ tokens, more than the model's maximum of 64"):
        score_pairs(model, tok, df, metric)
    renamed = df.rename(columns={"sent_stereo": "more", "sent_anti": "less"})
    with pytest.raises(DataError, match=r"^id 'p2': empty sentence in column more$"):
        score_pairs(model, tok, renamed.assign(more=["Women are kind.", " "]), metric, columns=("more", "less"))


def test_seq2seq_target_longer_than_model_maximum_names_row(tiny_seq2seq_lm_dir):
    from transformers import AutoModelForSeq2SeqLM

    from stereolens.scoring import score_seq2seq

    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_seq2seq_lm_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_seq2seq_lm_dir, model_max_length=8)
    inputs = ["<extra_id_0> are kind.", "<extra_id_0> are kind."]
    targets = ["<extra_id_0> women <extra_id_1>", "<extra_id_0> women and men and the doctors and nurses <extra_id_1>"]
    assert len(tok(text_target=targets[1]).input_ids) > 8 >= len(tok(inputs[1]).input_ids)
    with pytest.raises(DataError, match=r"^id 't2': target has \d+ tokens, more than the model's maximum of 8"):
        score_seq2seq(model, tok, inputs, targets, ids=["t1", "t2"])
    ok, cut = score_seq2seq(model, tok, inputs, targets, truncate=True, per_token=True)
    assert not ok.truncated and cut.truncated and cut.n_tokens == 8
    # a truncated target is scored as its prefix: the first tokens keep their log-probabilities
    (full,) = score_seq2seq(model, AutoTokenizer.from_pretrained(tiny_seq2seq_lm_dir), inputs[1:], targets[1:], per_token=True)
    assert list(cut.token_logprobs) == pytest.approx(list(full.token_logprobs[:8]), abs=1e-5)


def test_missing_column_in_pairs(mlm):
    model, tok = mlm
    with pytest.raises(DataError, match="missing column.*sent_anti"):
        score_pairs(model, tok, pd.DataFrame({"id": [1], "sent_stereo": ["Women are kind."]}), "pll")


def test_slow_tokenizer_refused_for_word_l2r(mlm, tmp_path):
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    model, tok = mlm
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab), encoding="utf-8")
    slow = BertTokenizerLegacy(str(tmp_path / "vocab.txt"), do_lower_case=False)
    assert not slow.is_fast
    with pytest.raises(ConfigError, match="pll_word_l2r needs word boundaries from a fast"):
        score_sentences(model, slow, ["Women are kind."], "pll_word_l2r")
    # the other masked metric works with a slow tokenizer
    assert score_sentences(model, slow, ["Women are kind."], "pll")[0].n_tokens > 0


def test_unknown_metric_and_crows_single(mlm):
    model, tok = mlm
    with pytest.raises(ConfigError, match="unknown scoring metric"):
        score_sentences(model, tok, ["a"], "ppl")
    with pytest.raises(ConfigError, match="score_pairs"):
        score_sentences(model, tok, ["a"], "crows")


def test_causal_conditions_on_eos_without_bos(clm):
    # a tokenizer without BOS conditions on EOS, as lm-evaluation-harness does
    model, tok = clm
    (a,) = score_sentences(model, tok, ["Women are kind."], "causal", per_token=True)
    bos = tok.bos_token
    tok.bos_token = None
    try:
        (b,) = score_sentences(model, tok, ["Women are kind."], "causal")
    finally:
        tok.bos_token = bos
    ids = [tok.eos_token_id] + tok("Women are kind.", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
    assert b.logprob == pytest.approx(sum(lp[i, t].item() for i, t in enumerate(ids[1:])), abs=1e-4)
    assert a.logprob != pytest.approx(b.logprob)


# ---------------------------------------------------------------- text in every script


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r"])
def test_multiscript_text_is_scored_without_unknown_tokens(mlm, metric):
    model, tok = mlm
    sents = [s for pair in MULTI_SCRIPT.values() for s in pair][:8]
    for s, score in zip(sents, score_sentences(model, tok, sents, metric, per_token=True)):
        assert tok.unk_token not in score.tokens, s
        # the scored pieces spell the sentence (whitespace aside): nothing was stripped
        assert "".join(t.removeprefix("##") for t in score.tokens) == s.replace(" ", "")


# ---------------------------------------------------------------- cache and dedup


def test_cache_resumes_and_hits(mlm, tmp_path):
    model, tok = mlm
    sents = [s for pair in MULTI_SCRIPT.values() for s in pair]
    cache = ResponseCache(tmp_path / "cache")
    first = score_sentences(model, tok, sents[:4], "pll", cache=cache)  # an "interrupted" run
    assert cache.stats() == {"hits": 0, "misses": 4}
    full = score_sentences(model, tok, sents, "pll", cache=cache)
    assert cache.stats() == {"hits": 4, "misses": 4 + len(sents) - 4}
    assert [f.logprob for f in first] == [f.logprob for f in full[:4]]
    again = score_sentences(model, tok, sents, "pll", cache=cache, per_token=True)
    assert [a.logprob for a in again] == [f.logprob for f in full]
    assert again[0].tokens is not None
    # another metric or parameter is another key
    score_sentences(model, tok, sents[:1], "pll_word_l2r", cache=cache)
    assert cache.misses == 4 + len(sents) - 4 + 1


def test_cache_key_tells_tokenizers_of_equal_class_and_size_apart(tiny_masked_lm_dir, mlm, tmp_path):
    import shutil

    model, tok = mlm
    # the same vocabulary behind a lowercasing normaliser: same class, same length, other token ids
    other_dir = tmp_path / "lowercasing"
    shutil.copytree(tiny_masked_lm_dir, other_dir)
    spec = json.loads((other_dir / "tokenizer.json").read_text(encoding="utf-8"))
    spec["normalizer"]["lowercase"] = True
    (other_dir / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    other = AutoTokenizer.from_pretrained(other_dir)
    assert type(other) is type(tok) and len(other) == len(tok)
    sents = ["Women are kind.", "The poor are really ignorant about how to handle money."]
    assert other(sents[0])["input_ids"] != tok(sents[0])["input_ids"]
    cache = ResponseCache(tmp_path / "cache")
    first = score_sentences(model, tok, sents, "pll", cache=cache)
    cached_other = score_sentences(model, other, sents, "pll", cache=cache)
    assert cache.stats() == {"hits": 0, "misses": 4}
    fresh_other = score_sentences(model, other, sents, "pll")
    assert [c.logprob for c in cached_other] == [f.logprob for f in fresh_other]
    assert [c.logprob for c in cached_other] != pytest.approx([f.logprob for f in first])
    # the same tokenizer loaded again is the same key
    score_sentences(model, AutoTokenizer.from_pretrained(tiny_masked_lm_dir), sents, "pll", cache=cache)
    assert cache.stats() == {"hits": 2, "misses": 4}


def test_identical_sentences_scored_once(mlm):
    model, tok = mlm
    score_sentences(model, tok, ["Men are kind."], "pll")  # first use checks the scoring path once per model
    rows = []
    # every forward pass starts at the embeddings (the engine may stop before the last layer)
    handle = model.base_model.embeddings.register_forward_hook(lambda m, i, o: rows.append(o.shape[0]))
    try:
        (single,) = score_sentences(model, tok, ["Women are kind."], "pll")
        n_single = sum(rows)
        rows.clear()
        many = score_sentences(model, tok, ["Women are kind."] * 5, "pll")
    finally:
        handle.remove()
    assert sum(rows) == n_single == single.n_tokens
    assert {m.logprob for m in many} == {single.logprob}


def test_memory_budget_bounds_rows_per_pass(mlm):
    model, tok = mlm
    shapes = []
    handle = model.base_model.embeddings.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape[:2])))
    try:
        score_sentences(model, tok, [" ".join(["Women are kind."] * 10)], "pll", batch_tokens=64)
    finally:
        handle.remove()
    assert len(shapes) > 1 and all(r * w <= 64 for r, w in shapes)


# ---------------------------------------------------------------- backend objects


def test_accepts_hf_backend(tiny_masked_lm_dir, mlm):
    pytest.importorskip("stereolens.models.hf")
    from stereolens.models import ModelSpec, load_model

    backend = load_model(ModelSpec(name=str(tiny_masked_lm_dir), kind="masked"))
    model, tok = mlm
    a = score_sentences(backend, None, ["Women are kind."], "pll")
    b = score_sentences(model, tok, ["Women are kind."], "pll")
    assert a[0].logprob == pytest.approx(b[0].logprob, abs=1e-5)


# ---------------------------------------------------------------- CLI


def _pairs_csv(path):
    df = pd.DataFrame(
        {"id": list(MULTI_SCRIPT), "sent_stereo": [p[0] for p in MULTI_SCRIPT.values()], "sent_anti": [p[1] for p in MULTI_SCRIPT.values()]}
    )
    df.to_csv(path, index=False, encoding="utf-8")
    return df


@pytest.mark.parametrize("metric", ["pll_word_l2r", "crows"])
def test_cli_score_pairs(tiny_masked_lm_dir, mlm, tmp_path, metric):
    pytest.importorskip("stereolens.models.hf")
    df = _pairs_csv(tmp_path / "pairs.csv")
    out = tmp_path / "out" / "scores.csv"
    rc = run_cli(["score", "pairs", "--model", str(tiny_masked_lm_dir), "--metric", metric, "--input", str(tmp_path / "pairs.csv"),
                  "--output", str(out), "--cache-dir", str(tmp_path / "cache"), "--batch-tokens", "256"])
    assert rc == 0
    scored = pd.read_csv(out, dtype={"id": str, "sent_stereo": str, "sent_anti": str}, keep_default_na=False)
    assert list(scored["sent_stereo"]) == list(df["sent_stereo"]) and list(scored["sent_anti"]) == list(df["sent_anti"])
    summary = json.loads((tmp_path / "out" / "scores.summary.json").read_text(encoding="utf-8"))
    assert summary["n"] == len(df) and summary["metric"] == metric and summary["truncate"] is False
    assert summary["bias_score"] == pytest.approx(float((scored["score_stereo"] > scored["score_anti"]).mean()))
    model, tok = mlm
    direct = score_pairs(model, tok, df, metric)
    assert list(scored["score_stereo"]) == pytest.approx(list(direct["score_stereo"]), abs=1e-4)


def test_cli_errors_name_row_and_column(tiny_masked_lm_dir, tmp_path):
    pytest.importorskip("stereolens.models.hf")
    pd.DataFrame({"id": ["a", "b"], "sent_stereo": ["Women are kind.", ""], "sent_anti": ["Men are kind.", "x"]}).to_csv(
        tmp_path / "p.csv", index=False
    )
    base = ["score", "pairs", "--model", str(tiny_masked_lm_dir), "--metric", "pll", "--output", str(tmp_path / "o.csv"), "--no-cache"]
    # the place as a person reading the file counts it: header = line 1, row "b" = line 3
    with pytest.raises(DataError, match=r"p\.csv line 3, column sent_stereo: empty sentence"):
        run_cli([*base, "--input", str(tmp_path / "p.csv")])
    pd.DataFrame({"id": ["a"], "sent_stereo": ["Women are kind."]}).to_csv(tmp_path / "q.csv", index=False)
    with pytest.raises(DataError, match="missing column.*sent_anti"):
        run_cli([*base, "--input", str(tmp_path / "q.csv")])


def test_cli_truncate_reported(tiny_masked_lm_dir, tmp_path):
    pytest.importorskip("stereolens.models.hf")
    long = " ".join(["Women are kind and the doctors were smart."] * 20)
    pd.DataFrame({"id": ["a"], "sent_stereo": [long], "sent_anti": ["Men are kind."]}).to_csv(tmp_path / "p.csv", index=False)
    out = tmp_path / "s.csv"
    run_cli(["score", "pairs", "--model", str(tiny_masked_lm_dir), "--metric", "pll", "--input", str(tmp_path / "p.csv"),
             "--output", str(out), "--truncate", "--no-cache"])
    scored = pd.read_csv(out)
    assert bool(scored.loc[0, "truncated_stereo"]) and not bool(scored.loc[0, "truncated_anti"])
    summary = json.loads((tmp_path / "s.summary.json").read_text())
    assert summary["truncate"] is True and summary["n_truncated_sentences"] == 1


def test_cli_score_sentences(tiny_causal_lm_dir, clm, tmp_path, capsys):
    pytest.importorskip("stereolens.models.hf")
    run_cli(["score", "sentences", "--model", str(tiny_causal_lm_dir), "--metric", "causal", "--text", "Women are kind.",
             "--text", "ये लोग बहुत मेहनती हैं।", "--no-cache", "--output", str(tmp_path / "s.csv")])
    got = pd.read_csv(tmp_path / "s.csv")
    model, tok = clm
    ref = score_sentences(model, tok, ["Women are kind.", "ये लोग बहुत मेहनती हैं।"], "causal")
    assert list(got["score"]) == pytest.approx([r.logprob for r in ref], abs=1e-4)
    assert list(got["sentence"]) == ["Women are kind.", "ये लोग बहुत मेहनती हैं।"]


@pytest.mark.parametrize("metric", ["pll", "causal"])
def test_half_precision_scores_close_to_float32(tiny_masked_lm_dir, tiny_causal_lm_dir, metric):
    auto = AutoModelForCausalLM if metric == "causal" else AutoModelForMaskedLM
    path = tiny_causal_lm_dir if metric == "causal" else tiny_masked_lm_dir
    tok = AutoTokenizer.from_pretrained(path)
    sents = ["Women are kind.", MULTI_SCRIPT["m1"][0]]
    full = score_sentences(auto.from_pretrained(path).eval(), tok, sents, metric)
    half = score_sentences(auto.from_pretrained(path, dtype=torch.bfloat16).eval(), tok, sents, metric)
    for a, b in zip(full, half):
        assert a.n_tokens == b.n_tokens
        assert b.logprob == pytest.approx(a.logprob, rel=0.05)
