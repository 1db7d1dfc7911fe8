"""Reaching into a loaded model: unwrap backends, split body from output head.

Scoring projects hidden states through the output head only at the positions
it scores (a 119k- or 262k-word vocabulary makes the projection at every
position cost more than the network itself).  That needs the model's body and
head separately; :func:`split_head` finds them for the common architectures and
checks the split against the model's own forward pass once per model, falling
back to the plain forward pass when an architecture does something the split
misses (logit scaling, a custom head).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import torch

from stereolens.errors import ConfigError
# set by the model loader on the fast pass of model.verify (its vocabulary normaliser stays half precision)
from stereolens.models.base import HALF_NORMALISER_ATTR
from stereolens.scoring.batching import target_logprobs
from stereolens.scoring.projection import VocabProjection, float32_normaliser

log = logging.getLogger(__name__)

HeadFn = Callable[[torch.Tensor], torch.Tensor]

# A tokenizer's model_max_length above this is the "no limit" placeholder.
_NO_LIMIT = 1_000_000


def unwrap(model: Any, tokenizer: Any | None) -> tuple[Any, Any, str | None]:
    """Return (torch model, tokenizer, identity or None) from raw objects or an HF backend."""
    identity = None
    if hasattr(model, "model") and hasattr(model, "tokenizer") and not isinstance(model, torch.nn.Module):
        identity = getattr(model, "identity", None)
        tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        model = model.model
    if tokenizer is None:
        raise ConfigError("scoring needs a tokenizer: pass one, or pass a loaded HF backend that carries it")
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"scoring needs a Hugging Face torch model, got {type(model).__name__}")
    return model, tokenizer, identity


def model_identity(model: torch.nn.Module) -> str:
    """A cache identity for a bare model: its name or path plus a fingerprint of its weights.

    The fingerprint hashes the first and last parameter tensors (cheap, and it
    changes when the weights do); backends with a proper identity pass their own.
    """
    name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    params = list(model.parameters())
    h = hashlib.sha256()
    for p in (params[0], params[-1]) if params else ():
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    h.update(str(sum(p.numel() for p in params)).encode())
    return f"hf:{name}@{h.hexdigest()[:16]}"


def max_length(model: torch.nn.Module, tokenizer: Any) -> int | None:
    """The longest input (in tokens) the model accepts, or None when it states no limit."""
    limits = []
    tok_max = getattr(tokenizer, "model_max_length", None)
    if tok_max and tok_max < _NO_LIMIT:
        limits.append(int(tok_max))
    config = getattr(model.config, "get_text_config", lambda: model.config)()
    pos_max = getattr(config, "max_position_embeddings", None)
    if pos_max:
        # RoBERTa-style position ids start after the padding index
        offset = (config.pad_token_id + 1) if getattr(config, "model_type", "") in {"roberta", "xlm-roberta", "camembert"} else 0
        limits.append(int(pos_max) - offset)
    return min(limits) if limits else None


def device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _softcap(model: torch.nn.Module) -> float | None:
    config = getattr(model.config, "get_text_config", lambda: model.config)()
    cap = getattr(config, "final_logit_softcapping", None)
    return float(cap) if cap else None


def _masked_head(model: torch.nn.Module) -> HeadFn | None:
    if hasattr(model, "cls") and hasattr(model.cls, "predictions"):  # BERT family
        return model.cls
    if hasattr(model, "vocab_projector") and hasattr(model, "vocab_transform"):  # DistilBERT
        return lambda h: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(h))))
    if hasattr(model, "predictions") and hasattr(model.predictions, "decoder"):  # ALBERT
        return model.predictions
    if hasattr(model, "generator_predictions") and hasattr(model, "generator_lm_head"):  # ELECTRA generator
        return lambda h: model.generator_lm_head(model.generator_predictions(h))
    if hasattr(model, "lm_head"):  # RoBERTa, XLM-R, CamemBERT, ...
        return model.lm_head
    return None


def _causal_head(model: torch.nn.Module) -> HeadFn | None:
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out is None:
        return None
    cap = _softcap(model)
    if cap is None:
        return out
    return lambda h: torch.tanh(out(h) / cap) * cap


def _vocab_projection(model: torch.nn.Module, kind: str, head: HeadFn | None) -> VocabProjection | None:
    """The head as ``pre(rows) @ W.T + b`` (then soft-capping for causal models), or None.

    A half-precision model's normaliser is computed in float32 (:func:`float32_normaliser`):
    on the CrowS-Pairs run of Gemma 3 270M in bfloat16 that is what kept every pair
    decision of float32 (docs/methods.md, "Reduced precision").
    """
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not isinstance(out, torch.nn.Linear):
        return None
    if kind == "causal":
        projection = VocabProjection(out.weight, out.bias, None, _softcap(model))
    elif head is out:
        projection = VocabProjection(out.weight, out.bias)
    else:
        # whatever the head does before its vocabulary matrix (BERT's dense + GELU + LayerNorm) runs as the model's own code
        projection = VocabProjection(out.weight, out.bias, _input_of(out, head))
    # under model.verify the fast pass is half precision throughout: its near-boundary decisions are rescored
    return projection if getattr(model, HALF_NORMALISER_ATTR, False) else float32_normaliser(projection)


def _input_of(module: torch.nn.Module, fn: HeadFn) -> HeadFn:
    """``rows -> the input module receives when fn(rows) runs``, stopping fn there."""
    return lambda rows: _input_to(module, lambda: fn(rows))


class _Reached(Exception):
    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__()
        self.hidden = hidden


def _raise_hidden(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    raise _Reached(args[0] if args else kwargs["hidden_states"])


_hook_lock = threading.Lock()
_stop_hooks: dict[int, list] = {}  # id(module) -> [hook handle, callers inside _input_to]


def _input_to(module: torch.nn.Module, run: Callable[[], object]) -> torch.Tensor:
    """The hidden states ``module`` receives when ``run()`` reaches it; ``run`` stops there.

    Scoring threads that run side by side share one hook per module, added by
    the first and removed by the last: a module's forward pass iterates over a
    snapshot of its hooks, and a hook removed by another thread in between would
    be called the wrong way.
    """
    key = id(module)
    with _hook_lock:
        entry = _stop_hooks.get(key)
        if entry is None:
            entry = _stop_hooks[key] = [module.register_forward_pre_hook(_raise_hidden, with_kwargs=True), 0]
        entry[1] += 1
    try:
        run()
        raise RuntimeError(f"{type(module).__name__} was never reached")  # pragma: no cover
    except _Reached as reached:
        return reached.hidden
    finally:
        with _hook_lock:
            entry[1] -= 1
            if entry[1] == 0:
                entry[0].remove()
                del _stop_hooks[key]


# encoder layers with BERT's structure, where the last layer can run for the scored rows only
_BERT_LIKE_LAYERS = {"BertLayer", "RobertaLayer", "XLMRobertaLayer", "CamembertLayer", "ElectraLayer"}


def _last_bert_layer(model: torch.nn.Module, base: torch.nn.Module | None) -> torch.nn.Module | None:
    config = model.config
    if getattr(config, "is_decoder", False) or getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not layers or type(layers[-1]).__name__ not in _BERT_LIKE_LAYERS:
        return None
    last = layers[-1]
    if getattr(last, "add_cross_attention", False) or getattr(last, "chunk_size_feed_forward", 0):
        return None
    return last


class BodyHead:
    """The model as ``rows(input_ids, attention_mask, positions) -> hidden rows`` plus ``head(rows) -> logits``.

    Four levels, fastest first, each verified against the model's own forward
    pass before use: (0) for BERT-like encoders on unpadded passes, level (1)
    with the first layer's queries, keys and values computed once per distinct
    (position, token) of a pass (a sentence's masked copies differ from it at a
    position or two, so most of their first-layer inputs are the same rows);
    (1) for BERT-like encoders, the last layer runs only for the scored position
    of each row (its output elsewhere is never used); (2) the body runs whole
    and only the scored rows go through the head; (3) the whole model runs and
    the scored rows of its logits are taken.  With (0) to (2), ``projection``
    describes the head as a vocabulary matrix (see
    :mod:`stereolens.scoring.projection`) when it is one, also verified.
    """

    def __init__(self, model: torch.nn.Module, kind: str) -> None:
        self.model = model
        self.kind = kind
        head = _masked_head(model) if kind == "masked" else _causal_head(model)
        base = getattr(model, "base_model", None)
        self.split = head is not None and base is not None and base is not model
        self._head = head
        self._base = base
        self._last = _last_bert_layer(model, base) if (kind == "masked" and self.split) else None
        self._shared_first = self._last is not None and _has_bert_embeddings(base)
        self.projection = _vocab_projection(model, kind, head) if self.split else None

    @property
    def mode(self) -> str:
        if self._last is not None:
            return "shared-first-layer" if self._shared_first else "last-layer-rows"
        return "head-rows" if self.split else "full"

    def body(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if self.split:
            return self._base(input_ids=input_ids, attention_mask=attention_mask)[0]
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    def rows(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, positions: torch.Tensor) -> torch.Tensor:
        """Final hidden states (or logits when not split) at one position per input row."""
        if self._last is None:
            index = torch.arange(input_ids.shape[0], device=input_ids.device)
            return self.body(input_ids, attention_mask)[index, positions]
        if self._shared_first and attention_mask is None:
            layers = self._base.encoder.layer
            hidden = _bert_first_layer_shared(self._base.embeddings, layers[0], input_ids)
            for layer in layers[1:-1]:
                out = layer(hidden, None)
                hidden = out[0] if isinstance(out, tuple) else out
            return _bert_layer_rows(self._last, hidden, None, positions)
        hidden = _input_to(self._last, lambda: self._base(input_ids=input_ids, attention_mask=attention_mask))
        return _bert_layer_rows(self._last, hidden, attention_mask, positions)

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        return self._head(rows) if self.split else rows

    def verify(self, input_ids: torch.Tensor) -> None:
        """Compare with the model's own forward pass on one input; step down a level if they differ."""
        if not self.split:
            return
        n = input_ids.shape[1]
        with torch.inference_mode():
            full = self.model(input_ids=input_ids).logits.float()[0]
            scale = max(1.0, full.abs().max().item())
            # half precision rounds differently along the two paths
            rel = 1e-3 if next(self.model.parameters()).dtype == torch.float32 else 3e-2
            while self.split:
                ids = input_ids.expand(n, n)
                rows = self.rows(ids, None, torch.arange(n, device=ids.device))
                mine = self.head(rows).float()
                err = (full - mine).abs().max().item()
                if math.isfinite(err) and err <= rel * scale:
                    self._verify_projection(rows, mine, rel * scale)
                    return
                log.warning("scoring path %s of %s differs from its forward pass by %.3g; falling back",
                            self.mode, type(self.model).__name__, err)
                if self._shared_first:
                    self._shared_first = False
                elif self._last is not None:
                    self._last = None
                else:
                    self.split = False
                    self.projection = None

    def _verify_projection(self, rows: torch.Tensor, logits: torch.Tensor, tolerance: float) -> None:
        if self.projection is None:
            return
        err = (self.projection.logits(self.projection.prepare(rows)) - logits).abs().max().item()
        if not (math.isfinite(err) and err <= tolerance):
            log.warning("vocabulary projection of %s differs from its head by %.3g; projecting whole rows",
                        type(self.model).__name__, err)
            self.projection = None


def _has_bert_embeddings(base: torch.nn.Module | None) -> bool:
    emb = getattr(base, "embeddings", None)
    if getattr(base, "embeddings_project", None) is not None:  # ELECTRA with a smaller embedding size
        return False
    return all(hasattr(emb, name) for name in ("word_embeddings", "position_embeddings", "LayerNorm"))


def _bert_first_layer_shared(embeddings: torch.nn.Module, layer: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """A BERT encoder's first layer on unpadded rows, with queries, keys and values
    computed once per distinct (position, token) of the pass.

    With absolute positions and one segment the first layer's input at a
    position depends on that position and its token only, so the rows of a
    pass's masked copies share all but a few; attention and everything after
    it mix positions and run per row.
    """
    n_rows, width = input_ids.shape
    # the model's own embeddings (RoBERTa-style models number positions their own way)
    embedded = embeddings(input_ids=input_ids)
    vocab = embeddings.word_embeddings.num_embeddings
    position = torch.arange(width, device=input_ids.device).expand(n_rows, width)
    distinct, inverse = torch.unique(position * vocab + input_ids, return_inverse=True)
    first = torch.full((distinct.shape[0],), n_rows * width, device=input_ids.device)
    first.scatter_reduce_(0, inverse.flatten(), torch.arange(n_rows * width, device=input_ids.device), "amin")
    x = embedded.reshape(n_rows * width, -1)[first]
    sa = layer.attention.self
    heads, size = sa.num_attention_heads, sa.attention_head_size

    def per_row(t: torch.Tensor) -> torch.Tensor:
        return t[inverse].view(n_rows, width, heads, size).transpose(1, 2)

    ctx = torch.nn.functional.scaled_dot_product_attention(per_row(sa.query(x)), per_row(sa.key(x)), per_row(sa.value(x)), scale=sa.scaling)
    attended = layer.attention.output(ctx.transpose(1, 2).reshape(n_rows, width, heads * size), embedded)
    return layer.output(layer.intermediate(attended), attended)


def _bert_layer_rows(
    layer: torch.nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor | None, positions: torch.Tensor
) -> torch.Tensor:
    """A BERT layer's output at one position per row.

    Only the scored position's query is needed, so keys and values are never
    formed: per head, q.(Wk x + bk) = (Wk^T q).x + q.bk, whose last term is the
    same for every key and cancels in the softmax, and sum_j a_j (Wv x_j + bv)
    = Wv (sum_j a_j x_j) + bv because the weights sum to one.  That costs two
    vector-matrix products per row instead of two matrix products per position.
    """
    sa = layer.attention.self
    n_rows, width, dim = hidden.shape
    heads, size = sa.num_attention_heads, sa.attention_head_size
    at = hidden[torch.arange(n_rows, device=hidden.device), positions]
    q = sa.query(at).view(n_rows, heads, size).transpose(0, 1)  # (heads, rows, size)
    w_key = sa.key.weight.view(heads, size, dim)
    w_value = sa.value.weight.view(heads, size, dim)
    probe = torch.bmm(q, w_key).transpose(0, 1) * sa.scaling  # (rows, heads, dim)
    scores = torch.bmm(probe, hidden.transpose(1, 2))  # (rows, heads, width)
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask[:, None, :].bool(), float("-inf"))
    mixed = torch.bmm(scores.float().softmax(dim=-1).to(hidden.dtype), hidden)  # (rows, heads, dim)
    ctx = torch.bmm(mixed.transpose(0, 1), w_value.transpose(1, 2)).transpose(0, 1)  # (rows, heads, size)
    if sa.value.bias is not None:
        ctx = ctx + sa.value.bias.view(heads, size)
    attended = layer.attention.output(ctx.reshape(n_rows, heads * size), at)
    return layer.output(layer.intermediate(attended), attended)


class Seq2SeqBodyHead:
    """An encoder-decoder model as ``hidden(...) -> decoder states`` plus ``head(rows) -> logits``.

    The decoder states are captured at the input of the model's own output
    projection, so whatever the architecture does on the way there is kept
    exactly: T5 multiplies them by ``d_model**-0.5`` when its embeddings are
    tied (``config.scale_decoder_outputs`` in transformers 5, ``tie_word_embeddings``
    before; MT5 no longer does, UMT5 does), and no rule of ours has to track
    which version does what.  BART-style models add ``final_logits_bias`` after
    the projection, which ``head`` adds too.  Checked once against the model's
    own forward pass; on a mismatch the whole model runs and its logits are used.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self._head = out if isinstance(out, torch.nn.Module) else None
        bias = getattr(model, "final_logits_bias", None)
        self._bias = bias if isinstance(bias, torch.Tensor) else None
        self.split = self._head is not None
        self.projection = None
        if isinstance(self._head, torch.nn.Linear):
            # BART's final_logits_bias is added after the head: one bias for both
            proj_bias = self._head.bias
            if self._bias is not None:
                extra = self._bias.reshape(-1)
                proj_bias = extra if proj_bias is None else proj_bias + extra.to(proj_bias.dtype)
            self.projection = float32_normaliser(VocabProjection(self._head.weight, proj_bias))

    @property
    def mode(self) -> str:
        return "head-rows" if self.split else "full"

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        """Decoder states as the output head receives them (or the logits when not split)."""
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False)
        if not self.split:
            return self.model(**kwargs).logits
        assert self._head is not None
        return _input_to(self._head, lambda: self.model(**kwargs))

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        if not self.split:
            return rows
        assert self._head is not None
        logits = self._head(rows)
        return logits + self._bias.to(logits.dtype) if self._bias is not None else logits

    def logprobs(self, rows: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """log P(target) per row of decoder states from :meth:`hidden`."""
        if self.projection is not None:
            return self.projection.target_logprobs(rows, targets)
        return target_logprobs(self.head, rows, targets, vocab_size)

    def verify(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> None:
        if not self.split:
            return
        with torch.inference_mode():
            full = self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False).logits.float()[0]
            hidden = self.hidden(input_ids, None, decoder_input_ids)[0]
            mine = self.head(hidden).float()
            projected = self.projection.logits(hidden) if self.projection is not None else None
        scale = max(1.0, full.abs().max().item())
        rel = 1e-3 if next(self.model.parameters()).dtype == torch.float32 else 3e-2
        err = (full - mine).abs().max().item()
        if not (math.isfinite(err) and err <= rel * scale):
            log.warning("seq2seq scoring path of %s differs from its forward pass by %.3g; using full logits",
                        type(self.model).__name__, err)
            self.split = False
            self.projection = None
        elif projected is not None:
            err = (projected - mine).abs().max().item()
            if not (math.isfinite(err) and err <= rel * scale):
                log.warning("vocabulary projection of %s differs from its head by %.3g; projecting whole rows",
                            type(self.model).__name__, err)
                self.projection = None


def shift_right(model: torch.nn.Module, labels: torch.Tensor) -> torch.Tensor:
    """Decoder inputs for ``labels`` (-100 = padding) exactly as the model builds them from labels."""
    prepare = getattr(model, "prepare_decoder_input_ids_from_labels", None)
    if prepare is not None:
        return prepare(labels=labels)
    config = model.config
    start = config.decoder_start_token_id
    if start is None or config.pad_token_id is None:
        raise ConfigError(f"{type(model).__name__} states no decoder_start_token_id or pad_token_id to build decoder inputs")
    shifted = labels.new_full(labels.shape, int(start))
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, int(config.pad_token_id))


_SEQ2SEQ_ATTR = "_stereolens_seq2seq_head"


def split_seq2seq(model: torch.nn.Module, probe_input: list[int], probe_target: list[int]) -> Seq2SeqBodyHead:
    """The (verified, memoised on the model) decoder/head split of an encoder-decoder model."""
    memo = getattr(model, _SEQ2SEQ_ATTR, None)
    if memo is not None:
        return memo
    sh = Seq2SeqBodyHead(model)
    device = device_of(model)
    labels = torch.tensor([probe_target], device=device)
    sh.verify(torch.tensor([probe_input], device=device), shift_right(model, labels))
    try:
        setattr(model, _SEQ2SEQ_ATTR, sh)
    except (AttributeError, TypeError):  # pragma: no cover - exotic module types
        pass
    return sh


_CACHE_ATTR = "_stereolens_body_head"


def split_head(model: torch.nn.Module, kind: str, probe_ids: list[int]) -> BodyHead:
    """The (verified, memoised on the model) body/head split for ``kind`` in {masked, causal}."""
    memo = getattr(model, _CACHE_ATTR, None)
    if memo is not None and memo.kind == kind:
        return memo
    bh = BodyHead(model, kind)
    bh.verify(torch.tensor([probe_ids], device=device_of(model)))
    try:
        setattr(model, _CACHE_ATTR, bh)
    except (AttributeError, TypeError):  # pragma: no cover - exotic module types
        pass
    return bh
