"""StereoSet candidate scores given the context, with some heads switched off.

These are plain forward passes of our own, not the shared scoring engine: the
engine's fast paths recompute parts of BERT-like layers themselves and its
cache is keyed by model identity, which knows nothing of a head gate.  Here
every pass goes through the model's modules, so the gate's hooks always fire.

- causal LMs: log P(candidate | context) over the candidate's tokens;
- masked LMs: PLL-word-l2r over the candidate's words with the context present
  (each token scored with itself and the rest of its word to the right masked).

``score`` aggregates the candidate's token log-probabilities as the stereo
study's evaluation does (``stereolens.stats.stereoset.aggregate_logprob``):
``mean`` over its tokens (the default there) or ``sum``.  The stage passes the
configured setting; StereoSet's own generative score is not offered under a gate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from stereolens.errors import ConfigError
from stereolens.stats.stereoset import DEFAULT_CANDIDATE_SCORE, aggregate_logprob
from stereolens.studies.heads.config import GATED_SCORES
from stereolens.studies.heads.gates import HeadGate


def _output_head(model):
    for name in ("lm_head", "cls", "generator_lm_head"):
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    return model.get_output_embeddings()


def _log_probs_at(model, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = _output_head(model)(hidden).float()
    cap = getattr(getattr(model.config, "text_config", None) or model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _run(model, rows: list[list[int]], pad_id: int, wanted: list[list[tuple[int, int]]], batch_size: int) -> list[float]:
    """Sum of log-probabilities of (predicting position, target id) per row, in batches."""
    base = model.base_model
    out = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, r in enumerate(chunk):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        with torch.no_grad():
            hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state
            sel_rows, sel_pos, targets, owner = [], [], [], []
            for i, pairs in enumerate(wanted[start:start + batch_size]):
                for pos, target in pairs:
                    sel_rows.append(i), sel_pos.append(pos), targets.append(target), owner.append(i)
            lp = _log_probs_at(model, hidden[torch.tensor(sel_rows), torch.tensor(sel_pos)], torch.tensor(targets))
            sums = torch.zeros(len(chunk), dtype=torch.float64).index_add_(0, torch.tensor(owner), lp.double())
        out.extend(sums.tolist())
    return out


def _aggregated(totals: Sequence[float], counts: Sequence[int], score: str) -> np.ndarray:
    return np.asarray([aggregate_logprob(t, n, score) for t, n in zip(totals, counts)], dtype=float)


def causal_scores(model, tokenizer, contexts: Sequence[str], candidates: Sequence[str], *, batch_size: int = 16,
                  score: str = DEFAULT_CANDIDATE_SCORE) -> np.ndarray:
    rows, wanted = [], []
    for context, candidate in zip(contexts, candidates):
        ctx = tokenizer(str(context).strip())["input_ids"]
        cand = tokenizer(" " + str(candidate).strip(), add_special_tokens=False)["input_ids"]
        rows.append(ctx + cand)
        wanted.append([(len(ctx) + k - 1, tok) for k, tok in enumerate(cand)])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return _aggregated(_run(model, rows, pad, wanted, batch_size), [len(w) for w in wanted], score)


def masked_scores(model, tokenizer, contexts: Sequence[str], candidates: Sequence[str], *, batch_size: int = 32,
                  score: str = DEFAULT_CANDIDATE_SCORE) -> np.ndarray:
    rows, wanted, owner = [], [], []
    for item, (context, candidate) in enumerate(zip(contexts, candidates)):
        context = str(context).strip()
        enc = tokenizer(context + " " + str(candidate).strip(), return_offsets_mapping=True)
        ids, offsets, words = enc["input_ids"], enc["offset_mapping"], enc.word_ids()
        special = set(tokenizer.all_special_ids)
        scored = [i for i, (s, e) in enumerate(offsets)
                  if s >= len(context) and e > s and words[i] is not None and ids[i] not in special]
        for i in scored:
            copy = list(ids)
            for j in scored:
                if j >= i and words[j] == words[i]:
                    copy[j] = tokenizer.mask_token_id
            rows.append(copy)
            wanted.append([(i, ids[i])])
            owner.append(item)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    per_row = _run(model, rows, pad, wanted, batch_size)
    totals = np.zeros(len(contexts))
    np.add.at(totals, np.asarray(owner, dtype=int), np.asarray(per_row))
    counts = np.bincount(np.asarray(owner, dtype=int), minlength=len(contexts))
    return _aggregated(totals, counts, score)


def candidate_scores(model, tokenizer, kind: str, contexts: Sequence[str], candidates: Sequence[str],
                     gate: HeadGate | None = None, gate_values: torch.Tensor | None = None, *,
                     batch_size: int = 16, score: str = DEFAULT_CANDIDATE_SCORE) -> np.ndarray:
    """Scores of ``candidates`` given ``contexts`` with ``gate_values`` (layers x heads) applied.

    ``score``: ``mean`` (per token) or ``sum`` of the candidate's token log-probabilities.
    """
    if score not in GATED_SCORES:
        raise ConfigError(f"the heads study scores StereoSet candidates by {' or '.join(GATED_SCORES)}, not {score!r}")
    fn = causal_scores if kind == "causal" else masked_scores
    if gate is None:
        return fn(model, tokenizer, contexts, candidates, batch_size=batch_size, score=score)
    with gate.applied(gate_values):
        return fn(model, tokenizer, contexts, candidates, batch_size=batch_size, score=score)
