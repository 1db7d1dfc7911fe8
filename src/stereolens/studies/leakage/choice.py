"""The generative choice task of Cao et al. 2024 ("You are a writer..."): for a group, which of two traits of the
same polarity (or neither) the model picks, by option log-probabilities (``logprob``, normalised over the
three options) or by ``n`` samples with exact matching (non-matching outputs counted per group and
language, never dropped)."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.scoring.continuations import causal_continuation_logprobs
from stereolens.scoring.shared_context import prefixed_context_logprobs
from stereolens.studies.leakage.items import select_words, trait_forms
from stereolens.studies.leakage.lexicon import Lexicon, select_groups

NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th"})


@dataclass(frozen=True)
class ChoiceQuery:
    language: str
    group: str
    trait1: str
    trait2: str
    word1: str
    word2: str
    neither: str
    system: str
    user: str
    answer_prefix: str
    group_part: str = ""  # the user turn up to the first trait: the same for every pair of a group

    @property
    def options(self) -> tuple[str, str, str]:
        return (self.word1, self.word2, self.neither)

    def plain_prompt(self) -> str:
        """The chat turn as plain text for a base LM, ending at the answer slot."""
        return f"{self.system}\n\n{self.user}\n{self.answer_prefix}"

    def shared_prompt_prefix(self) -> str:
        """The part of :meth:`plain_prompt` every pair of this group and language shares."""
        return f"{self.system}\n\n{self.group_part}"


def same_polarity_pairs(
    lex: Lexicon, *, design: Literal["all", "cyclic", "matching"] = "all", opponents: int | None = None,
    both_orders: bool = True,
) -> list[tuple[str, str]]:
    """Trait pairs of the same polarity class (positive with positive, negative with negative, neutral
    with neutral: traits.csv ``polarity``), each also asked with the traits swapped when ``both_orders``.

    ``all``: every pair of a class (the paper's design).  ``cyclic``: each trait against the next
    ``opponents`` traits of its class in table order (every trait in 2k comparisons).  ``matching``:
    consecutive traits of the class paired once (every trait in one comparison per group, the cheapest
    design); in a class of odd size the last trait is paired with the first, which so gets two.
    """
    pairs: list[tuple[str, str]] = []
    for _, block in lex.traits.groupby("polarity", sort=True):
        names = list(block["trait"])
        if design == "all":
            chosen = list(itertools.combinations(names, 2))
        elif design == "cyclic":
            if not opponents or opponents < 1:
                raise ConfigError(f"choice design cyclic needs opponents >= 1, got {opponents}")
            k = min(int(opponents), len(names) // 2)
            chosen = [(names[i], names[(i + d) % len(names)]) for d in range(1, k + 1) for i in range(len(names))]
            if len(names) % 2 == 0 and k == len(names) // 2:
                chosen = chosen[: len(chosen) - len(names) // 2]  # the opposite pairs appear twice otherwise
        elif design == "matching":
            if len(names) < 2:
                raise ConfigError(f"choice design matching needs two {block['polarity'].iloc[0]} traits or more")
            chosen = [(names[i], names[(i + 1) % len(names)]) for i in range(0, len(names), 2)]
        else:
            raise ConfigError(f"choice design must be all, cyclic or matching, got {design!r}")
        pairs.extend(chosen)
        if both_orders:
            pairs.extend((b, a) for a, b in chosen)
    return pairs



def choice_queries(
    lex: Lexicon, language: str, pairs: Sequence[tuple[str, str]], groups: Sequence[str] | None = None
) -> list[ChoiceQuery]:
    prompt = lex.choice_prompts[lex.choice_prompts["language"] == language]
    if prompt.empty:
        raise DataError(f"choice_prompts.csv has no prompt for language {language!r}")
    p = prompt.iloc[0]
    groups = select_groups(lex, groups)
    # each trait's base form once, not once per group and pair (see items.build_items)
    base = {t: trait_forms(lex, language, t, "", "base")[0] for t in dict.fromkeys(t for pair in pairs for t in pair)}
    out = []
    for g in groups:
        gw = select_words(lex.group_words, language=language, group=g, form=p["group_form"])
        if gw.empty:
            raise DataError(f"group_words.csv has no {language!r} form {p['group_form']!r} for group {g!r}")
        group_word = gw["word"].iloc[0]
        for t1, t2 in pairs:
            w1, w2 = base[t1], base[t2]
            user = p["user"].replace("{group}", group_word).replace("{trait1}", w1).replace("{trait2}", w2)
            head = p["user"].split("{trait1}", 1)[0].split("{trait2}", 1)[0].replace("{group}", group_word)
            out.append(ChoiceQuery(language, g, t1, t2, w1, w2, p["neither"], p["system"], user, p["answer_prefix"], head))
    return out


def _option_continuation(q: ChoiceQuery, option: str) -> str:
    return option if q.language in NO_SPACE_LANGUAGES else " " + option


def choice_logprob_table(
    model: Any, queries: Sequence[ChoiceQuery], *, cache: Any | None = None, batch_tokens: int | None = None,
    truncate: bool = False,
) -> pd.DataFrame:
    """One row per query: normalised probabilities of trait1 / trait2 / neither.

    An option's log-probability is the sum over its sub-tokens; the three are
    renormalised with a softmax over the options.  Chat backends get the system and
    user turns as messages; base LMs the plain transcript ending in the answer prefix.
    """
    from stereolens.models.base import ChatMessage, LoglikelihoodRequest

    contexts, conts = [], []
    for q in queries:
        for opt in q.options:
            contexts.append(q.plain_prompt())
            conts.append(_option_continuation(q, opt))
    kind = getattr(getattr(model, "spec", None), "kind", None)
    if kind == "chat":
        reqs = [
            LoglikelihoodRequest(
                "", opt, messages=(ChatMessage("system", q.system), ChatMessage("user", q.user))
            )
            for q in queries for opt in q.options
        ]
        lps = [r.logprob for r in model.loglikelihood(reqs)]
    else:
        if truncate:
            scored = causal_continuation_logprobs(model, contexts, conts, cache=cache, batch_tokens=batch_tokens, truncate=True)
        else:
            prefixes = [q.shared_prompt_prefix() for q in queries for _opt in q.options]
            scored = prefixed_context_logprobs(model, prefixes, contexts, conts, cache=cache)
        lps = [lp for lp, _n in scored]
    arr = np.asarray(lps, dtype=float).reshape(len(queries), 3)
    arr = arr - arr.max(axis=1, keepdims=True)
    probs = np.exp(arr) / np.exp(arr).sum(axis=1, keepdims=True)
    return pd.DataFrame(
        {
            "language": [q.language for q in queries],
            "group": [q.group for q in queries],
            "trait1": [q.trait1 for q in queries],
            "trait2": [q.trait2 for q in queries],
            "p_trait1": probs[:, 0],
            "p_trait2": probs[:, 1],
            "p_neither": probs[:, 2],
        }
    )


_PUNCT = re.compile(r"[\s\"'`«»“”‘’„。，、．.,!?！？;；:：()（）\[\]।]+")


def normalise_answer(text: str) -> str:
    """Lower-case, NFC, punctuation and surrounding quotes removed (exact match after this only)."""
    text = unicodedata.normalize("NFC", text.strip().splitlines()[0] if text.strip() else "")
    return _PUNCT.sub(" ", text).strip().lower()


def choice_sample_table(
    model: Any, queries: Sequence[ChoiceQuery], *, n_samples: int = 10, temperature: float = 1.0,
    max_tokens: int = 10, seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-query shares of trait1 / trait2 / neither / non-matching, every generation with its match).

    Each sample is its own request (seed = seed + sample index), so the cache keeps
    all of them.  An output counts for an option only on an exact match after
    :func:`normalise_answer`; anything else is ``nonmatching`` and stays in the table.
    """
    from stereolens.models.base import ChatMessage, GenerationRequest

    kind = getattr(getattr(model, "spec", None), "kind", None)
    reqs = []
    for q in queries:
        for s in range(n_samples):
            if kind == "chat":
                reqs.append(GenerationRequest(
                    messages=(ChatMessage("system", q.system), ChatMessage("user", q.user)),
                    max_tokens=max_tokens, temperature=temperature, seed=seed + s,
                ))
            else:
                reqs.append(GenerationRequest(
                    prompt=q.plain_prompt(), max_tokens=max_tokens, temperature=temperature, seed=seed + s, stop=("\n",),
                ))
    gens = model.generate(reqs)
    rows, shares = [], []
    for qi, q in enumerate(queries):
        norm_opts = {normalise_answer(q.word1): "trait1", normalise_answer(q.word2): "trait2", normalise_answer(q.neither): "neither"}
        counts = {"trait1": 0, "trait2": 0, "neither": 0, "nonmatching": 0}
        for s in range(n_samples):
            text = gens[qi * n_samples + s].text
            match = norm_opts.get(normalise_answer(text), "nonmatching")
            counts[match] += 1
            rows.append({"language": q.language, "group": q.group, "trait1": q.trait1, "trait2": q.trait2,
                         "sample": s, "output": text, "match": match})
        shares.append({"language": q.language, "group": q.group, "trait1": q.trait1, "trait2": q.trait2,
                       "p_trait1": counts["trait1"] / n_samples, "p_trait2": counts["trait2"] / n_samples,
                       "p_neither": counts["neither"] / n_samples, "n_nonmatching": counts["nonmatching"],
                       "n_samples": n_samples})
    return pd.DataFrame(shares), pd.DataFrame(rows)


def nonmatching_counts(generations: pd.DataFrame) -> pd.DataFrame:
    """Appendix B.1 table: generations that matched no option, per language and group."""
    g = generations.assign(nonmatching=generations["match"] == "nonmatching")
    out = g.groupby(["language", "group"], sort=False).agg(
        n_generations=("match", "size"), n_nonmatching=("nonmatching", "sum")
    ).reset_index()
    out["share_nonmatching"] = out["n_nonmatching"] / out["n_generations"]
    return out


def choice_group_trait_scores(per_query: pd.DataFrame) -> pd.DataFrame:
    """Group-trait score = mean over the trait's comparisons of its (normalised) choice probability."""
    a = per_query[["language", "group", "trait1", "p_trait1"]].rename(columns={"trait1": "trait", "p_trait1": "p"})
    b = per_query[["language", "group", "trait2", "p_trait2"]].rename(columns={"trait2": "trait", "p_trait2": "p"})
    both = pd.concat([a, b], ignore_index=True)
    out = both.groupby(["language", "group", "trait"], sort=False).agg(score=("p", "mean"), n_items=("p", "size")).reset_index()
    out.insert(1, "method", "choice")
    return out


ChoiceMode = Literal["auto", "logprob", "sample"]


def resolve_choice_mode(model: Any, mode: str) -> str:
    """``auto``: ``logprob`` where the backend scores given continuations, else ``sample``.

    OpenAI-style chat endpoints only score what they generate themselves, so their loglikelihood raises
    UnsupportedRequest; auto sends them to exact-match sampling instead (Cao et al. 2024's protocol for them).
    """
    if mode in ("logprob", "sample"):
        return mode
    if mode != "auto":
        raise ConfigError(f"choice mode must be auto, logprob or sample, got {mode!r}")
    return "logprob" if bool(getattr(model, "supports_loglikelihood", True)) else "sample"


def choice_scores(
    model: Any,
    lex: Lexicon,
    language: str,
    *,
    mode: ChoiceMode = "auto",
    design: Literal["all", "cyclic", "matching"] = "all",
    opponents: int | None = None,
    both_orders: bool = True,
    n_samples: int = 10,
    temperature: float = 1.0,
    seed: int = 0,
    groups: Sequence[str] | None = None,
    cache: Any | None = None,
    batch_tokens: int | None = None,
    truncate: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """(group-trait scores, per-query table, non-matching counts or None in logprob mode).

    ``mode`` is resolved with :func:`resolve_choice_mode`; in ``auto`` mode an endpoint that claims
    log-likelihoods but refuses them (a completions server without echo) falls back to sampling.
    The mode that ran is ``logprob`` exactly when the third element is None.
    """
    from stereolens.models.base import UnsupportedRequest

    resolved = resolve_choice_mode(model, mode)
    pairs = same_polarity_pairs(lex, design=design, opponents=opponents, both_orders=both_orders)
    queries = choice_queries(lex, language, pairs, groups)
    if resolved == "logprob":
        try:
            per_query = choice_logprob_table(model, queries, cache=cache, batch_tokens=batch_tokens, truncate=truncate)
            return choice_group_trait_scores(per_query), per_query, None
        except UnsupportedRequest:
            if mode != "auto":
                raise
    per_query, gens = choice_sample_table(model, queries, n_samples=n_samples, temperature=temperature, seed=seed)
    return choice_group_trait_scores(per_query), gens, nonmatching_counts(gens)
