"""Hugging Face backends: masked, causal and seq2seq LMs through transformers + torch.

Log-likelihoods follow lm-evaluation-harness so that numbers are comparable with
published ones: the context is conditioned on BOS (EOS when the tokenizer has no
BOS), trailing spaces of the context move to the continuation, and the token
boundary comes from encoding context+continuation as one string and splitting it
at the length of the encoded context.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from stereolens.errors import ModelLoadError
from stereolens.io import write_json
from stereolens.models.base import (
    Generation,
    GenerationRequest,
    LanguageModel,
    Loglikelihood,
    LoglikelihoodRequest,
    ModelSpec,
    UnsupportedRequest,
)
from stereolens.models.cache import ResponseCache
from stereolens.models.common import (
    CachedBatch,
    cache_payload,
    cut_at_stop,
    first_line,
    generation_from_json,
    loglikelihood_from_json,
    render_plain_chat,
)

# Files whose content can change a model's outputs.  Everything else in a model
# directory (README, provenance notes, .git) is left out of the identity hash.
_IDENTITY_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".txt", ".gguf", ".pt", ".pth", ".jinja", ".tiktoken")
_IDENTITY_EXCLUDE = {"stereolens_provenance.json"}
IDENTITY_SIDECAR_DIR = "_identity"


# --- identity -----------------------------------------------------------------------


def directory_content_hash(path: str | os.PathLike, sidecar_dir: str | os.PathLike | None = None) -> str:
    """SHA-256 over the names and bytes of a model directory's config, tokenizer and weights.

    Hashing a 1 GB checkpoint takes a few seconds, so the result is remembered in a
    sidecar file keyed by every file's size, mtime, ctime and inode (the sidecar lives
    outside the model directory, which may be a DVC output that must not change).
    ctime is in the key because a rewrite that restores size and mtime (``utime``)
    cannot restore it.  The stat key only decides when to re-hash; the identity
    itself is always the content.
    """
    root = Path(path).resolve()
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.name.endswith(_IDENTITY_SUFFIXES)
        and p.name not in _IDENTITY_EXCLUDE
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    stat_key = []
    for p in files:
        st = p.stat()
        stat_key.append([str(p.relative_to(root)), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    sidecar = None
    if sidecar_dir is not None:
        name = hashlib.sha256(str(root).encode()).hexdigest()[:32]
        sidecar = Path(sidecar_dir) / f"{name}.json"
        try:
            saved = json.loads(sidecar.read_text(encoding="utf-8"))
            if saved.get("stat") == stat_key:
                return saved["sha256"]
        except (OSError, ValueError, KeyError):
            pass
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        with open(p, "rb") as fh:
            while block := fh.read(1 << 22):
                h.update(block)
        h.update(b"\0")
    digest = h.hexdigest()
    if sidecar is not None:
        try:
            write_json(sidecar, {"path": str(root), "stat": stat_key, "sha256": digest})
        except OSError:
            pass  # a read-only cache only costs re-hashing next time
    return digest


# --- loading ------------------------------------------------------------------------


def _torch_dtype(name: str | None):
    import torch

    if name in (None, "float32"):
        return torch.float32
    if name == "auto":
        return "auto"
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE forbid reaching the hub."""
    return any(os.environ.get(var, "").lower() in ("1", "true", "yes") for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def in_local_hf_cache(name: str, revision: str | None = None) -> bool:
    """Whether hub model ``name`` (at ``revision``) has its config in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json", revision=revision)
    except ValueError:  # not a valid repo id: nothing of that name can be cached
        return False
    return isinstance(found, str)


def _load_reason(spec: ModelSpec, exc: BaseException) -> str:
    """One line saying why ``spec.name`` did not load."""
    p = Path(spec.name).expanduser()
    offline = hub_offline()
    if spec.source and not p.exists():
        # a model the pipeline prepares itself (the embedded default) that is not there yet
        return f"not prepared yet: run `stereolens models prepare --output {spec.name}` (or dvc repro)"
    if p.exists():
        if p.is_dir() and not (p / "config.json").exists():
            return "directory has no config.json (not a saved model; run `stereolens models prepare` for the default)"
        return first_line(exc)
    looks_like_path = spec.name.startswith((".", "/", "~")) or spec.name.count("/") > 1
    if looks_like_path:
        return "no such directory"
    if offline:
        return "not a local directory and not in the Hugging Face cache (offline: HF_HUB_OFFLINE=1)"
    return f"not a local directory and not loadable from the Hugging Face hub ({first_line(exc)})"


class HFModel(LanguageModel):
    """A transformers model and tokenizer; subclasses choose the head via ``auto_class``."""

    backend = "hf"
    auto_class = "AutoModel"

    def __init__(self, spec: ModelSpec, cache: ResponseCache | None = None) -> None:
        import transformers

        from stereolens.models.hardware import resolve_dtype

        # a half-precision dtype this device would only emulate falls back to float32 (or stops) before loading
        spec = resolve_dtype(spec)
        self.spec = spec
        self.cache = cache if cache is not None else ResponseCache()
        auto = getattr(transformers, self.auto_class)
        kwargs: dict[str, Any] = {"revision": spec.revision} if spec.revision else {}
        if not sys.stderr.isatty():
            # the loader's progress bar is noise in logs, and an error must stay the one line on stderr
            transformers.utils.logging.disable_progress_bar()
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(spec.name, **kwargs)
            self.model = auto.from_pretrained(spec.name, dtype=_torch_dtype(spec.dtype), **kwargs)
        except Exception as exc:  # transformers raises OSError/ValueError/KeyError/... here
            raise ModelLoadError(f"cannot load {spec.kind} model {spec.name!r}: {_load_reason(spec, exc)}") from exc
        try:
            self.model.to(spec.device)
        except (RuntimeError, AssertionError, ValueError) as exc:  # e.g. "cuda" on a CPU-only torch
            raise ModelLoadError(f"cannot move model {spec.name!r} to device {spec.device!r}: {first_line(exc)}") from exc
        self.model.eval()
        if spec.verify and spec.dtype in ("bfloat16", "float16"):
            from stereolens.models.base import FLOAT32_PREFIX_ATTR, HALF_NORMALISER_ATTR, VERIFY_FLOAT32_PREFIX

            # model.verify: this model is the fast pass, half precision throughout (normaliser included) but for
            # the first positions of a causal sequence, which float32_reference scores (loaded when first needed);
            # every decision its error could change is rescored by float32_reference
            setattr(self.model, HALF_NORMALISER_ATTR, True)
            setattr(self.model, FLOAT32_PREFIX_ATTR, (VERIFY_FLOAT32_PREFIX, lambda: self.float32_reference().model))
        self._identity: str | None = None

    @classmethod
    def from_loaded(cls, model, tokenizer, spec: ModelSpec, *, identity: str, cache: ResponseCache | None = None):
        """Wrap a model already in memory (e.g. GGUF-loaded, or with pruned heads).

        ``identity`` must say what makes this model different (e.g. ``"...+pruned:3.1,5.0"``):
        it is the model part of every cache key, so two different models must never share it.
        """
        self = cls.__new__(cls)
        self.spec = spec
        self.cache = cache if cache is not None else ResponseCache()
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._identity = identity
        return self

    def float32_reference(self) -> HFModel:
        """This model with its weights loaded in float32 (itself when it already computes in float32), loaded
        on first use and kept: what ``model.verify=fp32`` rescores near-boundary decisions with
        (:mod:`stereolens.scoring.verified`).  Same identity and cache; its cache entries are float32's (the
        engine keys scores by the dtype of the weights)."""
        import torch
        import transformers

        if next(self.model.parameters()).dtype == torch.float32:
            return self
        reference = getattr(self, "_float32_reference", None)
        if reference is None:
            auto = getattr(transformers, self.auto_class)
            kwargs: dict[str, Any] = {"revision": self.spec.revision} if self.spec.revision else {}
            try:
                # from the checkpoint, not an upcast of the half-precision weights: those are already rounded
                full = auto.from_pretrained(self.spec.name, dtype=torch.float32, **kwargs).to(self.device)
            except Exception as exc:  # as in __init__: transformers raises many kinds here
                raise ModelLoadError(f"cannot load {self.spec.kind} model {self.spec.name!r} in float32 for "
                                     f"model.verify: {_load_reason(self.spec, exc)}") from exc
            spec = dataclasses.replace(self.spec, dtype="float32", verify=None)
            reference = type(self).from_loaded(full, self.tokenizer, spec, identity=self.identity, cache=self.cache)
            self._float32_reference = reference
        return reference

    @property
    def identity(self) -> str:
        if self._identity is None:
            path = Path(self.spec.name).expanduser()
            if path.is_dir():
                digest = directory_content_hash(path, self.cache.root / IDENTITY_SIDECAR_DIR)
                self._identity = f"hf:sha256:{digest}"
            else:
                # a hub name: pin the commit actually loaded, so "main" moving on changes the key
                commit = getattr(self.model.config, "_commit_hash", None) or self.spec.revision or "unpinned"
                self._identity = f"hf:{self.spec.name}@{commit}"
        return self._identity

    def _params(self) -> dict[str, Any]:
        # dtype changes the numbers; device does not beyond float noise, so cached
        # answers stay valid when the same model moves between CPU and GPU
        return {"kind": self.spec.kind, "dtype": self.spec.dtype or "float32"}

    @property
    def device(self):
        return next(self.model.parameters()).device

    def _local_rng(self):
        """Seeding inside this context leaves the caller's global RNG state as it was."""
        import torch

        return torch.random.fork_rng(devices=[self.device.index or 0] if self.device.type == "cuda" else [])

    @property
    def takes_chat_messages(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def _payload(self, op: str):
        params = self._params()
        return lambda req: cache_payload(self.backend, self.identity, op, req, params)

    def _batches(self, indices: list[int], lengths: dict[int, int], size: int | None = None):
        # longest first (as lm-eval): the first batch shows at once whether memory suffices,
        # and similar lengths together waste little on padding
        order = sorted(indices, key=lambda i: -lengths[i])
        size = max(1, size or self.spec.batch_size)
        for start in range(0, len(order), size):
            yield order[start : start + size]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        raise UnsupportedRequest(f"model {self.spec.name!r} ({self.spec.kind}) cannot generate text")

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[Loglikelihood]:
        raise UnsupportedRequest(f"model {self.spec.name!r} ({self.spec.kind}) cannot score continuations")


class HFMaskedLM(HFModel):
    """A masked LM.  PLL / SeT scoring needs the network itself: use ``.model`` and ``.tokenizer``."""

    auto_class = "AutoModelForMaskedLM"

    @property
    def supports_loglikelihood(self) -> bool:
        return False

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[Loglikelihood]:
        raise UnsupportedRequest(
            f"model {self.spec.name!r} is a masked LM: score it with stereolens.scoring (PLL, PLL-word-l2r, SeT)"
        )


class PerRowSampler:
    """A transformers logits processor that samples each row of a batch with its own generator.

    Row ``r`` has ``(temperature, top_p, seed)``; its scores go through transformers'
    ``TemperatureLogitsWarper`` and ``TopPLogitsWarper`` (as ``generate(do_sample=True,
    top_k=0)`` applies them), then a token is drawn from a ``torch.Generator`` seeded with
    the row's seed, one draw per step, exactly as ``torch.manual_seed(seed)`` followed by
    ``generate(do_sample=True)`` on that row alone draws from the global generator.  The
    returned scores are -inf except at the drawn token, so greedy decoding emits it.  A
    row's draws never touch another row's generator: its answer depends on its own prompt,
    settings and seed only, whatever else is in the batch (up to float noise in the padded
    forward pass, which can change a draw only when the uniform falls within that noise of
    a token's cumulative-probability boundary).

    The draw is ``torch.multinomial(probs, 1, generator)`` taken apart: for one sample,
    torch draws an Exp(1) variable per vocabulary entry from the generator and returns
    ``argmax(probs / noise)``.  Only the noise has to be drawn row by row (each row from its
    own generator), and that is most of the cost: about 5 ms per row over a 262k-word
    vocabulary, on one thread.  Rows draw it side by side on the torch threads; the
    warpers, the softmax, the division and the argmax are row-wise operations and run once
    over the rows that share settings, which gives every row the numbers it gets alone;
    multinomial's per-row validity checks become one look at the chosen entries.
    ``tests/models/test_models_hf_sampler.py`` checks every draw against the
    one-row-at-a-time sampler this replaced, kept in ``tests/reference_per_row_sampler.py``.
    """

    def __init__(self, rows: Sequence[tuple[float, float, int]], device) -> None:
        import torch
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        # rows with the same settings are warped together (generate() batches only such rows)
        groups: dict[tuple[float, float | None], list[int]] = {}
        self._generators = []
        for row, (temperature, top_p, seed) in enumerate(rows):
            groups.setdefault((temperature, top_p if top_p is not None and top_p < 1.0 else None), []).append(row)
            generator = torch.Generator(device=device)
            generator.manual_seed(int(seed))
            self._generators.append(generator)
        self._groups = []
        for (temperature, top_p), members in groups.items():
            warpers = [TemperatureLogitsWarper(temperature)]
            if top_p is not None:
                warpers.append(TopPLogitsWarper(top_p))
            index = None if len(members) == len(rows) else torch.tensor(members, device=device)
            self._groups.append((warpers, index))

    def __call__(self, input_ids, scores):
        import torch

        if len(self._groups) == 1 and self._groups[0][1] is None:
            warpers, _ = self._groups[0]
            warped = scores
            for warper in warpers:
                warped = warper(input_ids, warped)
            probs = torch.nn.functional.softmax(warped, dim=-1)
        else:
            probs = torch.empty_like(scores)
            for warpers, index in self._groups:
                warped, ids = scores[index], input_ids[index]
                for warper in warpers:
                    warped = warper(ids, warped)
                probs[index] = torch.nn.functional.softmax(warped, dim=-1)
        noise = torch.empty_like(probs)
        inference = torch.is_inference_mode_enabled()  # thread-local: the drawing threads take the caller's

        def draw(row: int) -> None:
            # a (1, vocabulary) row, the shape multinomial draws its noise in for a one-row input
            with torch.inference_mode(inference):
                noise[row : row + 1].exponential_(1, generator=self._generators[row])

        # torch draws exponential noise on one thread; rows have their own generators, so
        # they can draw side by side (the forward pass, which uses the threads, is not running)
        threads = min(len(self._generators), torch.get_num_threads())
        if threads > 1:
            with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="stereolens-sample") as pool:
                list(pool.map(draw, range(len(self._generators))))
        else:
            for row in range(len(self._generators)):
                draw(row)
        ratio = probs.div_(noise)
        tokens = ratio.argmax(dim=-1, keepdim=True)
        # argmax takes a NaN as the largest value, so a row softmax left NaN (no finite score,
        # or an inf) shows at its chosen token: what torch.multinomial refuses
        if bool(ratio.gather(1, tokens).isnan().any()):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return torch.full_like(scores, float("-inf")).scatter_(1, tokens, 0.0)


# Rows per batch of sampled generation at least (model.batch_size when larger; greedy and
# top_logprobs requests keep model.batch_size).  Measured 2026-11-27 with
# Gemma 3 270M, 32 sampled chat requests of 32 tokens on a 2-core CPU: 32 rows a batch took
# 0.56x the time of 8 rows a batch (16 rows: 0.69x), with every text identical to the
# request generated alone (benchmarks/results/sampled_generation_32.json).
GENERATION_BATCH_ROWS = 32


class HFCausalLM(HFModel):
    """A decoder-only LM: log-likelihoods (lm-eval style) and batched generation."""

    auto_class = "AutoModelForCausalLM"
    # draws sampled tokens; a class attribute so a check can run the same generation with
    # another sampler (the one-row-at-a-time reference in tests/reference_per_row_sampler.py)
    sampler = PerRowSampler

    @property
    def prefix_token_id(self) -> int:
        tok = self.tokenizer
        if tok.bos_token_id is not None:
            return tok.bos_token_id
        if tok.eos_token_id is not None:
            return tok.eos_token_id
        raise UnsupportedRequest(f"model {self.spec.name!r}: tokenizer has neither BOS nor EOS to condition on")

    @property
    def max_length(self) -> int:
        cfg = self.model.config
        for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(cfg, attr, None)
            if isinstance(value, int) and value > 0:
                return value
        model_max = getattr(self.tokenizer, "model_max_length", None)
        return model_max if isinstance(model_max, int) and 0 < model_max < 10**7 else 2048

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context tokens incl. BOS, continuation tokens) split the way lm-eval splits them."""
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        if context == "":
            return [self.prefix_token_id], self._encode(continuation)
        whole = self._encode(context + continuation)
        n_ctx = len(self._encode(context))
        return [self.prefix_token_id] + whole[:n_ctx], whole[n_ctx:]

    def _params(self) -> dict[str, Any]:
        return {**super()._params(), "prefix": "bos" if self.tokenizer.bos_token_id is not None else "eos"}

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[Loglikelihood]:
        batch = CachedBatch(self.cache, requests, self._payload("loglikelihood"), loglikelihood_from_json)
        if not batch.todo:
            return batch.finish()
        import torch

        limit = self.max_length
        encoded: dict[int, tuple[list[int], list[int]]] = {}
        for i in batch.todo:
            req = batch.requests[i]
            # a chat transcript, if given, comes before the context (e.g. an answer prefix)
            context = req.context if req.messages is None else self.chat_text(req.messages) + req.context
            ctx, cont = self.encode_pair(context, req.continuation)
            if not cont:
                raise UnsupportedRequest(
                    f"model {self.spec.name!r}: continuation {req.continuation!r} is empty after tokenisation "
                    f"(context {req.context[:40]!r})"
                )
            if len(cont) > limit:
                # the context can lose its oldest tokens, but every continuation token needs
                # the position before it inside one window of at most `limit` inputs
                raise UnsupportedRequest(
                    f"model {self.spec.name!r}: continuation {req.continuation[:40]!r} has {len(cont)} tokens, "
                    f"more than the model's maximum of {limit}; shorten it"
                )
            encoded[i] = (ctx, cont)
        lengths = {i: len(c) + len(t) for i, (c, t) in encoded.items()}
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        with torch.inference_mode():
            for chunk in self._batches(batch.todo, lengths):
                inputs, conts = [], []
                for i in chunk:
                    ctx, cont = encoded[i]
                    # the model predicts token t from tokens < t, so the last token is never fed;
                    # overlong inputs lose their oldest context tokens, as lm-eval truncates
                    inp = (ctx + cont)[-(limit + 1) :][:-1]
                    inputs.append(inp)
                    conts.append(cont)
                width = max(len(x) for x in inputs)
                ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(inputs), width), dtype=torch.long)
                for row, inp in enumerate(inputs):
                    ids[row, : len(inp)] = torch.tensor(inp, dtype=torch.long)
                    mask[row, : len(inp)] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                logprobs = torch.log_softmax(logits.float(), dim=-1)
                for row, i in enumerate(chunk):
                    n_in, cont = len(inputs[row]), conts[row]
                    positions = logprobs[row, n_in - len(cont) : n_in]
                    target = torch.tensor(cont, dtype=torch.long, device=positions.device)
                    picked = positions.gather(1, target.unsqueeze(1)).squeeze(1)
                    greedy = bool((positions.argmax(dim=-1) == target).all())
                    batch.store(i, {"logprob": float(picked.sum()), "n_tokens": len(cont), "is_greedy": greedy})
        return batch.finish()

    # --- generation -------------------------------------------------------------------

    def chat_text(self, messages) -> str:
        """A chat transcript as text ending where the assistant speaks, without a leading BOS.

        The tokenizer's chat template when it has one, else :func:`render_plain_chat`.
        The BOS a template writes is dropped because callers add exactly one BOS themselves.
        """
        if self.takes_chat_messages:
            dicts = [{"role": m.role, "content": m.content} for m in messages]
            text = self.tokenizer.apply_chat_template(dicts, tokenize=False, add_generation_prompt=True)
            bos = self.tokenizer.bos_token
            return text[len(bos) :] if bos and text.startswith(bos) else text
        return render_plain_chat(messages)

    def render_prompt(self, req: GenerationRequest) -> list[int]:
        """Token ids of a generation prompt: one BOS, then the prompt or the rendered chat."""
        text = self.chat_text(req.messages) if req.messages is not None else (req.prompt or "")
        bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None else []
        return bos + self._encode(text)

    def _gen_params(self) -> dict[str, Any]:
        fmt = "chat_template" if self.takes_chat_messages else "plain"
        return {**self._params(), "chat_format": fmt}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        params = self._gen_params()
        batch = CachedBatch(
            self.cache,
            requests,
            lambda r: cache_payload(self.backend, self.identity, "generate", r, params),
            generation_from_json,
        )
        if not batch.todo:
            return batch.finish()
        prompts = {i: self.render_prompt(batch.requests[i]) for i in batch.todo}
        # requests with equal decoding settings share a batch.  Sampled ones draw their tokens
        # from their own generator seeded with their own seed (PerRowSampler), so an answer
        # does not depend on what it was batched with, and equals the answer the request gets alone
        groups: dict[tuple, list[int]] = {}
        for i in batch.todo:
            r = batch.requests[i]
            key = (r.temperature, r.top_p if r.temperature else None, r.max_tokens, r.stop, r.top_logprobs)
            groups.setdefault(key, []).append(i)
        for key, members in groups.items():
            # a step of a small model costs about the same for 8 rows as for 1, so a stage that
            # sends many sampled requests at once (stereo retrieval: up to 150 a round) gets
            # bigger batches: measured exact for sampled requests (each row draws from its own
            # generator); not when every step's logits are kept for top_logprobs (262k floats a row)
            temperature, top_logprobs = key[0], key[-1]
            sampled_in_bulk = temperature != 0 and not top_logprobs
            size = max(self.spec.batch_size, GENERATION_BATCH_ROWS) if sampled_in_bulk else self.spec.batch_size
            for chunk in self._batches(members, {i: len(prompts[i]) for i in members}, size):
                for i, answer in zip(chunk, self._generate_batch([batch.requests[i] for i in chunk], [prompts[i] for i in chunk])):
                    batch.store(i, answer)
        return batch.finish()

    def _generate_batch(self, reqs: list[GenerationRequest], prompts: list[list[int]]) -> list[dict[str, Any]]:
        import torch

        tok = self.tokenizer
        req0 = reqs[0]
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        width = max(len(p) for p in prompts)
        # left padding: every row's next token comes right after its own prompt
        ids = torch.full((len(prompts), width), pad_id if pad_id is not None else 0, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p) :] = 1
        kwargs: dict[str, Any] = {
            "max_new_tokens": req0.max_tokens,
            "return_dict_in_generate": True,
            "output_logits": bool(req0.top_logprobs),
            "pad_token_id": pad_id,
        }
        # transformers' own loop (KV cache, stop strings, EOS) runs "greedy" over the scores the
        # sampler leaves: one finite entry per row, the token the row's generator drew
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if req0.temperature != 0:
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList(
                [self.sampler([(r.temperature, r.top_p, r.seed) for r in reqs], self.device)])
        if req0.stop:
            kwargs.update(stop_strings=list(req0.stop), tokenizer=tok)
        with torch.inference_mode(), self._local_rng():
            out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs)
        new = out.sequences[:, width:].tolist()
        answers = []
        eos_ids = self._eos_ids()
        for row, req in enumerate(reqs):
            gen = new[row]
            finish = "length"
            for k, t in enumerate(gen):
                if t in eos_ids:
                    gen, finish = gen[:k], "stop"
                    break
            text = tok.decode(gen, skip_special_tokens=True)
            text, stopped = cut_at_stop(text, req.stop)
            if stopped:
                finish = "stop"
            top = None
            if req.top_logprobs:
                top = self._top_logprobs(out.logits, row, gen, text, req.top_logprobs)
            answers.append({"text": text, "finish_reason": finish, "top_logprobs": top})
        return answers

    def _eos_ids(self) -> set[int]:
        ids = set()
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for value in (self.tokenizer.eos_token_id, gen_eos):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list):
                ids.update(v for v in value if isinstance(v, int))
        return ids

    def _top_logprobs(self, logits, row: int, gen: list[int], text: str, k: int) -> list[dict[str, float]]:
        import torch

        # raw logits (before temperature / top-p), as OpenAI reports logprobs; only the
        # positions that produced the returned text (up to a stop string) are kept
        tok = self.tokenizer
        n = 0
        while n < len(gen) and len(tok.decode(gen[:n], skip_special_tokens=True)) < len(text):
            n += 1
        # even an empty answer had a first decision (a rubric judge reads "1".."7" from it)
        n = max(n, 1)
        result = []
        for pos in range(min(n, len(logits))):
            lp = torch.log_softmax(logits[pos][row].float(), dim=-1)
            values, indices = lp.topk(k)
            alts: dict[str, float] = {}
            for v, t in zip(values.tolist(), indices.tolist()):
                alts.setdefault(tok.decode([t]), float(v))  # keep the likelier of two same-looking tokens
            result.append(alts)
        return result


class HFSeq2SeqLM(HFModel):
    """An encoder-decoder LM: log P(target | input) and generation."""

    auto_class = "AutoModelForSeq2SeqLM"

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[Loglikelihood]:
        batch = CachedBatch(self.cache, requests, self._payload("loglikelihood"), loglikelihood_from_json)
        if not batch.todo:
            return batch.finish()
        import torch

        tok = self.tokenizer
        # both sides with special tokens (EOS closes the target), as lm-eval's seq2seq path does
        enc = {i: tok(batch.requests[i].context)["input_ids"] for i in batch.todo}
        tgt = {i: tok(text_target=batch.requests[i].continuation)["input_ids"] for i in batch.todo}
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        lengths = {i: len(enc[i]) + len(tgt[i]) for i in batch.todo}
        with torch.inference_mode():
            for chunk in self._batches(batch.todo, lengths):
                w_in = max(len(enc[i]) for i in chunk)
                w_out = max(len(tgt[i]) for i in chunk)
                ids = torch.full((len(chunk), w_in), pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), w_in), dtype=torch.long)
                labels = torch.full((len(chunk), w_out), -100, dtype=torch.long)
                for row, i in enumerate(chunk):
                    ids[row, : len(enc[i])] = torch.tensor(enc[i])
                    mask[row, : len(enc[i])] = 1
                    labels[row, : len(tgt[i])] = torch.tensor(tgt[i])
                out = self.model(
                    input_ids=ids.to(self.device), attention_mask=mask.to(self.device), labels=labels.to(self.device)
                )
                logprobs = torch.log_softmax(out.logits.float(), dim=-1)
                for row, i in enumerate(chunk):
                    n = len(tgt[i])
                    target = torch.tensor(tgt[i], dtype=torch.long, device=logprobs.device)
                    positions = logprobs[row, :n]
                    picked = positions.gather(1, target.unsqueeze(1)).squeeze(1)
                    greedy = bool((positions.argmax(dim=-1) == target).all())
                    batch.store(i, {"logprob": float(picked.sum()), "n_tokens": n, "is_greedy": greedy})
        return batch.finish()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        params = self._params()
        batch = CachedBatch(
            self.cache,
            requests,
            lambda r: cache_payload(self.backend, self.identity, "generate", r, params),
            generation_from_json,
        )
        import torch

        tok = self.tokenizer
        for i in batch.todo:  # one at a time: seq2seq generation here is for small, occasional use
            req = batch.requests[i]
            text_in = req.prompt if req.prompt is not None else render_plain_chat(req.messages or ())
            enc = tok(text_in, return_tensors="pt").to(self.device)
            kwargs: dict[str, Any] = {"max_new_tokens": req.max_tokens}
            if req.temperature == 0:
                kwargs.update(do_sample=False)
            else:
                kwargs.update(do_sample=True, temperature=req.temperature, top_p=req.top_p, top_k=0)
            with torch.inference_mode(), self._local_rng():
                torch.manual_seed(req.seed)
                out = self.model.generate(**enc, **kwargs)
            text = tok.decode(out[0], skip_special_tokens=True)
            text, stopped = cut_at_stop(text, req.stop)
            batch.store(i, {"text": text, "finish_reason": "stop" if stopped else None, "top_logprobs": None})
        return batch.finish()
