"""Log-likelihood of a target given an input under an encoder-decoder (T5-style) model.

Used for span-corruption templates: input ``"<extra_id_0> are kind."``,
target ``"<extra_id_0> women <extra_id_1>"``.  The target is tokenised as the
tokenizer does for labels (T5 appends ``</s>``), and the per-token mean equals
minus the model's own ``loss`` on those labels (what the leakage reference
code reports).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from stereolens.scoring.access import Seq2SeqBodyHead, device_of, shift_right
from stereolens.scoring.batching import plan_batches


def run_seq2seq(
    sh: Seq2SeqBodyHead,
    items: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
    *,
    pad_token_id: int,
    vocab_size: int,
    batch_tokens: int,
) -> list[list[float]]:
    """Per-token log P(target_t | input, target_<t) for every (input_ids, target_ids) item.

    The model runs on decoder inputs shifted from the targets (as its labels
    path builds them) but without labels: with labels it would project every
    decoder position through the full vocabulary and compute a loss.  Here only
    the target rows go through the head, a bounded number at a time.  Right
    padding of the targets needs no decoder mask: the decoder is causal, so
    padding after a target never reaches the target's positions.
    """
    model = sh.model
    device = device_of(model)
    lengths = [len(a) + len(b) for a, b in items]
    results: list[list[float]] = [[] for _ in items]
    with torch.inference_mode():
        for batch in plan_batches(lengths, [1] * len(items), batch_tokens):
            members = [s.item for s in batch]
            w_in = max(len(items[i][0]) for i in members)
            w_out = max(len(items[i][1]) for i in members)
            inputs = torch.full((len(members), w_in), pad_token_id, dtype=torch.long)
            attention = torch.zeros((len(members), w_in), dtype=torch.long)
            labels = torch.full((len(members), w_out), -100, dtype=torch.long)
            for b, i in enumerate(members):
                src, tgt = items[i]
                inputs[b, : len(src)] = torch.tensor(src)
                attention[b, : len(src)] = 1
                labels[b, : len(tgt)] = torch.tensor(tgt)
            labels = labels.to(device)
            hidden = sh.hidden(inputs.to(device), attention.to(device), shift_right(model, labels))
            valid = labels != -100
            lp = sh.logprobs(hidden[valid], labels[valid], vocab_size).tolist()
            r = 0
            for i in members:
                n = len(items[i][1])
                results[i] = lp[r : r + n]
                r += n
    return results
