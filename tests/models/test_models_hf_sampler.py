"""The batched PerRowSampler draws every token the one-row-at-a-time sampler drew.

Cached answers and seeded reruns depend on each draw, so the comparison is exact: the
token of every row at every step, and each row's generator state afterwards (a sampler
that consumed its random stream differently would drift on a later step even if this one
agreed).  The reference is the old sampler, kept verbatim in tests/reference_per_row_sampler.py.
"""

from __future__ import annotations

import pytest
import torch
from reference_per_row_sampler import ReferencePerRowSampler

from stereolens.models import GenerationRequest, ModelSpec, ResponseCache, load_model
from stereolens.models import hf
from stereolens.models.hf import PerRowSampler

SETTINGS = {
    "t1": [(1.0, 1.0)],
    "t0.8": [(0.8, 1.0)],
    "t0.7-p0.9": [(0.7, 0.9)],
    "t1.3-p0.5": [(1.3, 0.5)],
    "t0.3-p0.99": [(0.3, 0.99)],
    # rows with different settings in one batch (generate() never builds one, the sampler allows it)
    "mixed": [(1.0, 1.0), (0.7, 0.9), (0.8, 1.0), (0.7, 0.9), (1.5, 0.6)],
}


def _scores(generator: torch.Generator, rows: int, vocab: int, kind: str) -> torch.Tensor:
    logits = torch.randn(rows, vocab, generator=generator) * 4
    if kind == "ties":
        # coarse values: many equal logits, so sorting (top-p) and argmax meet ties
        logits = logits.round()
    elif kind == "masked":
        # what a bad-words or stop processor leaves: many entries at -inf
        logits[:, torch.randperm(vocab, generator=generator)[: vocab // 2]] = float("-inf")
    elif kind == "peaked":
        logits[:, 3] += 30.0  # almost all mass on one token: draws rarely leave it
    return logits


# Gemma 3's vocabulary size (where the batched draw matters) for a few cases, a small one for the rest
CASES = [(vocab, batch, setting) for vocab in (50, 1000) for batch in (1, 3, 8) for setting in SETTINGS]
CASES += [(262_144, 1, "t0.7-p0.9"), (262_144, 4, "t0.8"), (262_144, 5, "mixed")]


@pytest.mark.parametrize("vocab,batch,setting", CASES)
def test_every_draw_equals_the_one_row_at_a_time_sampler(vocab, batch, setting):
    settings = SETTINGS[setting]
    steps = ["plain", "ties", "masked", "peaked", "plain", "ties"][: 3 if vocab > 1000 else 6]
    for seeds in ([0] * batch, list(range(batch)), [12345 + 7 * r for r in range(batch)]):
        rows = [(*settings[r % len(settings)], seeds[r]) for r in range(batch)]
        old, new = ReferencePerRowSampler(rows, "cpu"), PerRowSampler(rows, "cpu")
        data = torch.Generator().manual_seed(sum(seeds) + batch)
        input_ids = torch.randint(0, vocab, (batch, 5), generator=data)
        for step, kind in enumerate(steps):
            scores = _scores(data, batch, vocab, kind)
            expected = old(input_ids, scores.clone())
            got = new(input_ids, scores.clone())
            assert torch.equal(got, expected), f"step {step} ({kind}), seeds {seeds}: draws differ"
            assert (got == 0).sum(dim=-1).tolist() == [1] * batch  # one token per row
            input_ids = torch.cat([input_ids, got.argmax(dim=-1, keepdim=True)], dim=1)
        for a, b in zip(old._generators, new._generators):
            assert torch.equal(a.get_state(), b.get_state())


def test_a_row_with_no_finite_score_is_refused_as_multinomial_refuses_it():
    scores = torch.zeros(2, 10)
    scores[1] = float("-inf")
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        ReferencePerRowSampler([(1.0, 1.0, 0), (1.0, 1.0, 1)], "cpu")(torch.zeros(2, 1, dtype=torch.long), scores)
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        PerRowSampler([(1.0, 1.0, 0), (1.0, 1.0, 1)], "cpu")(torch.zeros(2, 1, dtype=torch.long), scores)


@pytest.mark.parametrize("batch_size,temperature,top_p", [(1, 1.0, 1.0), (16, 1.0, 1.0), (5, 0.7, 0.9), (8, 0.8, 1.0),
                                                      (None, 0.8, 1.0)])
def test_generate_gives_the_reference_sampler_texts(tiny_causal_lm_dir, tmp_path, monkeypatch, batch_size, temperature,
                                                    top_p):
    # a batch size given: generation batches of exactly that many rows; None: the backend's own
    # (at least hf.GENERATION_BATCH_ROWS, all 16 requests in one batch)
    if batch_size is not None:
        monkeypatch.setattr(hf, "GENERATION_BATCH_ROWS", 1)
    prompts = ["The doctor", "A much longer prompt about the nurse and the", "Она", "El", "The teacher said that",
               "Die Lehrerin", "ये लोग", "The poor are"]
    reqs = [GenerationRequest(prompt=p, max_tokens=12, temperature=temperature, top_p=top_p, seed=seed)
            for seed in (0, 1234) for p in prompts]
    model = load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal", batch_size=batch_size or 8),
                       cache=ResponseCache(tmp_path, enabled=False))
    sizes = []
    run_batch = model._generate_batch
    model._generate_batch = lambda reqs, prompts: sizes.append(len(reqs)) or run_batch(reqs, prompts)
    batched = [g.text for g in model.generate(reqs)]
    assert max(sizes) == min(len(reqs), batch_size or hf.GENERATION_BATCH_ROWS)  # the batch size asked for ran
    model.sampler = ReferencePerRowSampler
    reference = [g.text for g in model.generate(reqs)]
    assert batched == reference
    # the draws were exercised: the two seeds of a prompt drew different texts
    assert any(batched[k] != batched[k + len(prompts)] for k in range(len(prompts)))
