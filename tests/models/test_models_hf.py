"""Hugging Face backends on tiny locally built models (fixtures in conftest.py)."""

from __future__ import annotations

import shutil

import pytest
import torch

from stereolens.errors import ModelLoadError
from stereolens.models import (
    ChatMessage,
    GenerationRequest,
    LoglikelihoodRequest,
    ModelSpec,
    ResponseCache,
    UnsupportedRequest,
    load_model,
)
from stereolens.models.hf import directory_content_hash

REQUESTS = [
    LoglikelihoodRequest(context="", continuation="The doctor said hello."),
    LoglikelihoodRequest(context="The nurse", continuation=" was kind to everyone in the ward."),
    LoglikelihoodRequest(context="Она сказала ", continuation="привет."),  # trailing space moves over
    LoglikelihoodRequest(context="यह एक", continuation=" वाक्य है।"),
    LoglikelihoodRequest(context="A", continuation=" b"),
    LoglikelihoodRequest(context="他们说", continuation="你好。"),
]


def causal(path, tmp_path, **kw):
    spec = ModelSpec(name=str(path), kind="causal", **kw)
    return load_model(spec, cache=ResponseCache(tmp_path / "cache"))


def count_forwards(model) -> list[int]:
    calls = [0]
    model.model.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_causal_loglikelihood_batched_equals_unbatched(tiny_causal_lm_dir, tmp_path):
    batched = causal(tiny_causal_lm_dir, tmp_path / "a", batch_size=4).loglikelihood(REQUESTS)
    single = causal(tiny_causal_lm_dir, tmp_path / "b", batch_size=1).loglikelihood(REQUESTS)
    for x, y in zip(batched, single):
        assert x.n_tokens == y.n_tokens
        assert abs(x.logprob - y.logprob) < 1e-4
    assert all(r.logprob < 0 and not r.cached for r in batched)


def test_causal_loglikelihood_equals_manual_computation(tiny_causal_lm_dir, tmp_path):
    model = causal(tiny_causal_lm_dir, tmp_path)
    got = model.loglikelihood(REQUESTS)
    tok, net = model.tokenizer, model.model
    for req, res in zip(REQUESTS, got):
        # independent of the backend's code: BOS + whole string, boundary at len(encode(context))
        ctx, cont = req.context, req.continuation
        stripped = ctx.rstrip()
        cont = ctx[len(stripped) :] + cont
        ctx = stripped
        whole = tok.encode(ctx + cont, add_special_tokens=False)
        n_ctx = len(tok.encode(ctx, add_special_tokens=False)) if ctx else 0
        ids = [tok.bos_token_id] + whole
        with torch.no_grad():
            logp = torch.log_softmax(net(torch.tensor([ids])).logits[0], dim=-1)
        expected = sum(float(logp[t - 1, ids[t]]) for t in range(1 + n_ctx, len(ids)))
        assert res.n_tokens == len(whole) - n_ctx
        assert abs(res.logprob - expected) < 1e-4


def test_causal_loglikelihood_continuation_at_and_over_the_maximum_length(tiny_causal_lm_dir, tmp_path):
    model = causal(tiny_causal_lm_dir, tmp_path)
    limit = model.max_length
    context = "The nurse said that"
    by_len = {len(model.encode_pair(context, " kind" * k)[1]): " kind" * k for k in range(limit - 10, limit + 10)}
    assert limit in by_len and limit + 1 in by_len
    # exactly `limit` continuation tokens fit: the context keeps only its last token
    (res,) = model.loglikelihood([LoglikelihoodRequest(context=context, continuation=by_len[limit])])
    ctx, cont = model.encode_pair(context, by_len[limit])
    window = (ctx + cont)[-(limit + 1) :]
    with torch.no_grad():
        logp = torch.log_softmax(model.model(torch.tensor([window[:-1]])).logits[0], dim=-1)
    assert res.n_tokens == limit
    assert abs(res.logprob - sum(float(logp[t, window[t + 1]]) for t in range(limit))) < 1e-4
    # one more cannot be scored in one window: a clear refusal, not a misaligned slice
    with pytest.raises(UnsupportedRequest, match=rf"has {limit + 1} tokens, more than the model's maximum of {limit}"):
        model.loglikelihood([LoglikelihoodRequest(context=context, continuation=by_len[limit + 1])])


def test_causal_loglikelihood_cache_hit_makes_no_forward_calls(tiny_causal_lm_dir, tmp_path):
    first = causal(tiny_causal_lm_dir, tmp_path).loglikelihood(REQUESTS)
    again = causal(tiny_causal_lm_dir, tmp_path)
    calls = count_forwards(again)
    second = again.loglikelihood(REQUESTS)
    assert calls[0] == 0
    assert all(r.cached for r in second)
    assert [r.logprob for r in first] == [r.logprob for r in second]
    # a new request alongside cached ones computes only the new one
    again.loglikelihood([*REQUESTS, LoglikelihoodRequest(context="New", continuation=" one")])
    assert calls[0] == 1


def test_identity_is_content_hash_and_survives_a_move(tiny_causal_lm_dir, tmp_path):
    copy = tmp_path / "moved"
    shutil.copytree(tiny_causal_lm_dir, copy)
    a = causal(tiny_causal_lm_dir, tmp_path)
    b = causal(copy, tmp_path)
    assert a.identity == b.identity and a.identity.startswith("hf:sha256:")
    # a changed weight file changes the identity even with size and mtime kept, also
    # through the remembered-hash sidecar that the backend itself uses
    sidecar = tmp_path / "identity-sidecar"
    before = directory_content_hash(copy, sidecar)
    assert directory_content_hash(copy, sidecar) == before
    weights = copy / "model.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    import os

    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert directory_content_hash(copy) != directory_content_hash(tiny_causal_lm_dir)
    assert directory_content_hash(copy, sidecar) != before


def test_seeded_sampling_is_reproducible_and_leaves_global_rng_alone(tiny_causal_lm_dir, tmp_path):
    model = load_model(
        ModelSpec(name=str(tiny_causal_lm_dir), kind="causal"), cache=ResponseCache(tmp_path, enabled=False)
    )
    req = GenerationRequest(prompt="The teacher", max_tokens=12, temperature=1.0, seed=7)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    one = model.generate([req])[0]
    after = torch.rand(1)
    assert torch.equal(before, after)
    two = model.generate([req])[0]
    assert one.text == two.text
    others = {model.generate([GenerationRequest(prompt="The teacher", max_tokens=12, temperature=1.0, seed=s)])[0].text
              for s in range(1, 5)}
    assert len(others | {one.text}) > 1


def _transformers_sample_alone(model, req: GenerationRequest) -> str:
    """The reference: transformers' own sampling loop on the request alone, seeded globally
    (what the backend did before sampled requests were batched)."""
    ids = torch.tensor([model.render_prompt(req)])
    tok = model.tokenizer
    with torch.random.fork_rng():
        torch.manual_seed(req.seed)
        out = model.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=req.max_tokens,
                                   do_sample=True, temperature=req.temperature, top_p=req.top_p, top_k=0,
                                   pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    gen = out[0, ids.shape[1]:].tolist()
    eos = model._eos_ids()
    gen = gen[: next((k for k, t in enumerate(gen) if t in eos), len(gen))]
    return tok.decode(gen, skip_special_tokens=True)


def test_sampled_generations_batched_equal_transformers_sampling_each_request_alone(tiny_causal_lm_dir, tmp_path):
    """Sampled requests share batched forward passes, yet each answer is the one transformers'
    sampler gives the request alone under its own seed, whatever else is in the batch."""
    prompts = ["The doctor", "A much longer prompt about the nurse and the", "Она", "El", "The teacher said that",
               "Die Lehrerin"]
    reqs = [GenerationRequest(prompt=p, max_tokens=14, temperature=1.0, seed=11 + k) for k, p in enumerate(prompts)]
    reqs += [GenerationRequest(prompt=p, max_tokens=14, temperature=0.7, top_p=0.9, seed=3) for p in prompts[:3]]
    model = causal(tiny_causal_lm_dir, tmp_path, batch_size=8)
    forwards = count_forwards(model)
    batched = [g.text for g in model.generate(reqs)]
    # 2 batches (one per decoding setting) of at most 14 steps, not one generation per request
    assert forwards[0] <= 2 * 14
    assert batched == [_transformers_sample_alone(model, r) for r in reqs]
    # different seeds in one batch draw differently (one shared generator would not be tested above)
    assert len(set(batched[:6])) == 6
    # the same request in another batch composition and batch size: the same answer
    other = causal(tiny_causal_lm_dir, tmp_path / "other", batch_size=2)
    regrouped = other.generate([reqs[4], GenerationRequest(prompt="Some other words entirely", max_tokens=14,
                                                           temperature=1.0, seed=99), reqs[0]])
    assert [regrouped[0].text, regrouped[2].text] == [batched[4], batched[0]]


def test_greedy_generation_batched_stop_and_top_logprobs(tiny_causal_lm_dir, tmp_path):
    model = causal(tiny_causal_lm_dir, tmp_path, batch_size=4)
    prompts = ["The doctor", "A much longer prompt about the nurse and the", "Она"]
    batched = model.generate([GenerationRequest(prompt=p, max_tokens=10) for p in prompts])
    alone = [causal(tiny_causal_lm_dir, tmp_path / "x", batch_size=1).generate(
        [GenerationRequest(prompt=p, max_tokens=10)])[0] for p in prompts]
    assert [g.text for g in batched] == [g.text for g in alone]
    text = batched[0].text
    assert len(text) >= 3, text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cut = model.generate([GenerationRequest(prompt=prompts[0], max_tokens=10, stop=(stop,))])[0]
    assert cut.text == text[: text.find(stop)]
    assert cut.finish_reason == "stop"
    withlp = model.generate([GenerationRequest(prompt=prompts[0], max_tokens=5, top_logprobs=3)])[0]
    assert withlp.text == model.generate([GenerationRequest(prompt=prompts[0], max_tokens=5)])[0].text
    assert withlp.top_logprobs and all(0 < len(d) <= 3 for d in withlp.top_logprobs)
    assert all(v <= 0 for d in withlp.top_logprobs for v in d.values())
    # greedy: the first generated token is the most likely alternative at its position
    first_tok = max(withlp.top_logprobs[0].items(), key=lambda kv: kv[1])[0]
    assert withlp.text.startswith(first_tok.strip()) or withlp.text.startswith(first_tok)


def test_chat_messages_use_the_chat_template(tiny_causal_lm_dir, tmp_path):
    model = causal(tiny_causal_lm_dir, tmp_path)
    req = GenerationRequest(messages=(ChatMessage("user", "Hello there"),), max_tokens=4)
    text = model.tokenizer.decode(model.render_prompt(req))
    assert "<|user|>" in text and text.rstrip().endswith("<|assistant|>")
    assert model.generate([req])[0].finish_reason in ("stop", "length")
    assert text.count(model.tokenizer.bos_token) == 1
    # a transcript in a loglikelihood request is the text before the context
    msgs = (ChatMessage("user", "Pick one"),)
    with_msgs = model.loglikelihood([LoglikelihoodRequest(context="Answer:", continuation=" A", messages=msgs)])[0]
    spelled = model.loglikelihood([LoglikelihoodRequest(context=model.chat_text(msgs) + "Answer:", continuation=" A")])[0]
    assert with_msgs.logprob == pytest.approx(spelled.logprob, abs=1e-6)


def test_seq2seq_loglikelihood_batched_and_manual(tiny_seq2seq_lm_dir, tmp_path):
    reqs = [
        LoglikelihoodRequest(context="The <extra_id_0> is kind.", continuation="<extra_id_0> doctor"),
        LoglikelihoodRequest(context="Она <extra_id_0> врач.", continuation="<extra_id_0> хороший"),
        LoglikelihoodRequest(context="短い", continuation="文"),
    ]
    spec = dict(name=str(tiny_seq2seq_lm_dir), kind="seq2seq")
    batched = load_model(ModelSpec(**spec, batch_size=3), cache=ResponseCache(tmp_path / "a")).loglikelihood(reqs)
    m = load_model(ModelSpec(**spec, batch_size=1), cache=ResponseCache(tmp_path / "b"))
    single = m.loglikelihood(reqs)
    for req, x, y in zip(reqs, batched, single):
        assert abs(x.logprob - y.logprob) < 1e-4
        enc = m.tokenizer(req.context, return_tensors="pt")
        labels = m.tokenizer(text_target=req.continuation, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            loss = m.model(**enc, labels=labels).loss  # mean NLL over target tokens
        assert abs(x.logprob - (-float(loss) * labels.shape[1])) < 1e-4
        assert x.n_tokens == labels.shape[1]


def test_masked_lm_exposes_network_and_refuses_loglikelihood(tiny_masked_lm_dir, tmp_path):
    model = load_model(ModelSpec(name=str(tiny_masked_lm_dir), kind="masked"), cache=ResponseCache(tmp_path))
    assert model.tokenizer.mask_token is not None
    assert model.model.config.model_type
    assert not model.supports_loglikelihood
    with pytest.raises(UnsupportedRequest, match="masked LM"):
        model.loglikelihood(REQUESTS[:1])


@pytest.mark.parametrize(
    "name, expected",
    [
        ("/nonexistent/model-dir", "no such directory"),
        ("some-org/not-a-real-model-xyz", "offline"),
    ],
)
def test_load_errors_are_one_clear_line(name, expected, tmp_path):
    with pytest.raises(ModelLoadError) as info:
        load_model(ModelSpec(name=name, kind="causal"), cache=ResponseCache(tmp_path))
    message = str(info.value)
    assert "\n" not in message and name in message and expected in message


def test_directory_without_config_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json") as info:
        load_model(ModelSpec(name=str(tmp_path / "empty"), kind="causal"), cache=ResponseCache(tmp_path / "c"))
    assert "\n" not in str(info.value)


def test_unprepared_default_model_says_how_to_prepare_it(tmp_path):
    spec = ModelSpec(name=str(tmp_path / "models" / "gemma3-270m"), kind="causal", source={"package": "x"})
    with pytest.raises(ModelLoadError, match="stereolens models prepare"):
        load_model(spec, cache=ResponseCache(tmp_path / "c"))
