"""Stereotype retrieval (EspanStereo section 3.1, appendix C): prompt, parse, extract, repeat until saturation.

For every country x category x point of view the generator is asked, after
the paper's two-turn preamble, for social-media posts carrying that
country's negative stereotypes of the category.  Each round repeats the
request with a new seed; a round's *new* stereotypes are those that are not a
near-duplicate of one that the same point of view (the same prompt) produced
in an earlier round: the paper repeats each prompt "until no new stereotypes
are generated", per point of view.  The stereotypes are then merged into one
pool per country and category, in an order that does not depend on the order
of the configured lists (round, then country, category and point of view by
name, then the post's place in its reply).

Extraction of (target group, stereotype statement) from a post is ours (the
paper does not describe it), in one of two ways (``extraction``):

* ``rule``: the target is the first plural noun phrase introduced by
  "los/las", with a following "de ..." complement ("las mujeres de
  Monterrey"), else empty; the statement is the post's first sentence naming
  it.
* ``model``: the generator reads each post (the ``extraction`` template of
  ``prompts.yaml``) and answers with one JSON object ``{"target": ...,
  "stereotype": ...}``; an answer that is not exactly that (a code fence
  aside) is a parse failure, counted, and the post falls back to the rule.

Each stereotype records which method produced it (``extraction``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.studies.stereo.prompts import PromptSet, RefusalMarkers
from stereolens.studies.stereo.text import fold, is_near_duplicate, normalise

_BULLET = re.compile(r"^\s*(?:\(?\d{1,2}[.)\]:-]|[-*•·]|#\d+)\s*")
_HASHTAG = re.compile(r"#\w+")
_SENTENCE = re.compile(r"(?<=[.!?¡¿])\s+")
_TARGET = re.compile(r"\b(?:los|las)\s+([a-záéíóúüñ]+(?:\s+de\s+(?:la\s+|los\s+|las\s+)?[a-záéíóúüñ]+)?)", re.IGNORECASE)
# words after los/las that are not a group
EXTRACTION_METHODS = ("rule", "model")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_NOT_GROUPS = {"que", "cuales", "demas", "otros", "otras", "mismos", "mismas", "dos", "tres", "mas", "menos", "cosas",
               "calles", "dias", "anos", "veces", "ejemplos", "sesgos", "estereotipos", "redes", "publicaciones"}


# ---------------------------------------------------------------- saturation


@dataclass(frozen=True)
class SaturationRule:
    """Stop after ``k`` consecutive answered rounds that each add fewer than ``m`` new stereotypes, or at ``max_rounds``.

    The paper's rule is k=1, m=1: stop at the first round that adds nothing new.
    A refused round (see :func:`read_reply`) and a round without output (an
    empty reply, or one with no readable post) are no evidence that nothing new
    is left: they neither count towards saturation nor break a run of answered
    rounds, but they do count towards the round cap.  A cell that reaches the cap
    without an answered round ends as ``refused`` when every round was refused,
    else as ``no_output``.
    """

    k: int = 1
    m: int = 1
    max_rounds: int = 10

    def __post_init__(self) -> None:
        if self.k < 1 or self.m < 1 or self.max_rounds < 1:
            raise ConfigError(f"saturation needs k >= 1, m >= 1 and max_rounds >= 1, got {self}")

    def decide(self, new_per_round: Sequence[int], refused: Sequence[bool] | None = None,
               no_output: Sequence[bool] | None = None) -> str | None:
        """Why to stop after the rounds so far (``saturated`` / ``round_cap`` / ``refused`` / ``no_output``), or None.

        ``refused[i]`` says whether round i was refused, ``no_output[i]`` whether it gave no readable post
        (default: neither).
        """
        n = len(new_per_round)
        refused = _round_flags(refused, n, "refusal")
        no_output = _round_flags(no_output, n, "no-output")
        answered = [c for c, r, e in zip(new_per_round, refused, no_output) if not (r or e)]
        if len(answered) >= self.k and all(c < self.m for c in answered[-self.k:]):
            return "saturated"
        if n >= self.max_rounds:
            if answered:
                return "round_cap"
            return "refused" if all(refused) else "no_output"
        return None


def _round_flags(flags: Sequence[bool] | None, n: int, what: str) -> list[bool]:
    flags = list(flags) if flags is not None else [False] * n
    if len(flags) != n:
        raise ValueError(f"{n} rounds but {len(flags)} {what} flags")
    return flags


# ---------------------------------------------------------------- parsing and extraction


def _quoted_or_listed(line: str) -> bool:
    """A line that is a numbered, bulleted or quoted item: a post, never the reply's own opening statement."""
    return bool(_BULLET.match(line)) or line.lstrip().startswith(('"', "“", "«", "'"))


class Reply(NamedTuple):
    """One reply read: whether it is a refusal, its posts, and the lines read as a refusal (never posts)."""

    refused: bool
    posts: list[str]
    refusal_lines: list[str]


def _has_words(folded: str, marker: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(fold(marker))}(?!\w)", folded) is not None


def is_refusal_line(line: str, refusals: RefusalMarkers) -> bool:
    """A line that refuses, spoken to the requester: not a numbered, bulleted or quoted item, holding one of the
    refusal phrases and one of the markers of a line addressed to the requester (an apology, the request, the
    assistant speaking of itself).  A phrase alone is not enough: a post may open with "No es apropiado que ..."."""
    if _quoted_or_listed(line):
        return False
    folded = fold(line)
    return any(fold(p) in folded for p in refusals.phrases) and any(_has_words(folded, m) for m in refusals.addressed)


def read_reply(text: str, refusals: RefusalMarkers, *, min_words: int = 4) -> Reply:
    """(refused, posts, refusal lines) of one reply.

    Refusal is decided only on text that is not a post: the refusal lines
    (:func:`is_refusal_line`), wherever they stand in the reply.  Every other
    line is read as a post (:func:`parse_posts`: numbering stripped, headings and
    lines below ``min_words`` dropped), numbered or not, since the paper's prompt
    asks for bare examples.  A reply is a refusal when it has a refusal line and
    no post; a refusal line followed by posts is a partial compliance: the posts
    count, the refusal line is returned apart (and counted by the loop).  An
    empty reply is not a refusal (it is a round without output).
    """
    lines = [line for line in str(text).splitlines() if line.strip()]
    refusing = [is_refusal_line(line, refusals) for line in lines]
    posts = parse_posts("\n".join(line for line, r in zip(lines, refusing) if not r), min_words=min_words)
    refusal_lines = [line.strip() for line, r in zip(lines, refusing) if r]
    return Reply(bool(refusal_lines) and not posts, posts, refusal_lines)


def is_refusal(text: str, refusals: RefusalMarkers, *, min_words: int = 4) -> bool:
    """Whether the reply is a refusal (:func:`read_reply`)."""
    return read_reply(text, refusals, min_words=min_words).refused


def parse_posts(text: str, *, min_words: int = 4) -> list[str]:
    """The posts of a response: one per non-empty line, numbering and bullets stripped, headings dropped."""
    posts = []
    for line in str(text).splitlines():
        line = _BULLET.sub("", line).strip().strip('"“”«»').strip()
        if not line or line.endswith(":") or len(line.split()) < min_words:
            continue
        posts.append(line)
    return posts


def extract(post: str) -> tuple[str, str]:
    """(target group, stereotype statement) from one post; target "" when no group phrase is found."""
    clean = _HASHTAG.sub("", post).strip()
    target = ""
    for match in _TARGET.finditer(clean):
        words = match.group(1).split()
        if fold(words[0]) in _NOT_GROUPS:
            continue
        target = match.group(1)
        break
    sentences = [s.strip() for s in _SENTENCE.split(clean) if s.strip()]
    statement = next((s for s in sentences if target and fold(target) in fold(s)), sentences[0] if sentences else clean)
    return target.lower(), statement


def parse_extraction(text: str) -> tuple[str, str] | None:
    """(target, statement) from a model's answer that is exactly one JSON object with string ``target`` and non-empty
    ``stereotype`` (a surrounding code fence is tolerated); None for anything else."""
    raw = str(text).strip()
    fenced = _FENCE.match(raw)
    if fenced:
        raw = fenced.group(1)
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("target"), str) or not isinstance(obj.get("stereotype"), str):
        return None
    statement = obj["stereotype"].strip()
    return (obj["target"].strip().lower(), statement) if statement else None


def extract_with_model(model: Any, prompts: PromptSet, items: Sequence[tuple[str, str, str]], *, max_tokens: int, seed: int,
                       stop: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Model extraction for ``(country, category, post)`` items, one batch; the rule extractor where the answer does not parse.

    Returns per item ``target, statement, extraction (model|rule), answer, parsed``.
    """
    from stereolens.models import ChatMessage, GenerationRequest

    if not prompts.extraction:
        raise ConfigError("extraction: model needs an `extraction` template in the study's prompts.yaml")
    reqs = []
    for country, category, post in items:
        text = prompts.extraction.format(post=post, country=prompts.country(country)["name"],
                                         category_adj=prompts.category(category))
        reqs.append(GenerationRequest(messages=(ChatMessage("user", text),), max_tokens=max_tokens, temperature=0.0, seed=seed,
                                      stop=tuple(stop)))
    gens = model.generate(reqs) if reqs else []
    out = []
    for (_, _, post), gen in zip(items, gens):
        parsed = parse_extraction(gen.text)
        target, statement = parsed if parsed else extract(post)
        out.append({"target": target, "statement": statement, "extraction": "model" if parsed else "rule",
                    "answer": gen.text, "parsed": parsed is not None, "cached": bool(gen.cached)})
    return out


# ---------------------------------------------------------------- the pool of stereotypes


@dataclass
class Stereotype:
    stereotype_id: str
    country: str
    category: str
    target: str
    stereotype: str
    first_pov: str
    first_round: int
    examples: list[str] = field(default_factory=list)
    mentions: int = 1
    extraction: str = "rule"
    points_of_view: list[str] = field(default_factory=list)  # every point of view whose posts were merged into it


class StereotypePool:
    """Stereotypes collected per country and category, with near-duplicate merging."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.items: list[Stereotype] = []

    def add(self, country: str, category: str, pov: str, round_no: int, post: str,
            extracted: tuple[str, str, str] | None = None) -> bool:
        """Add the post's stereotype; True when it is new (no near-duplicate in its country x category).

        ``extracted`` is ``(target, statement, method)`` from the model extractor; without it the rule extracts.
        """
        target, statement, method = extracted if extracted else (*extract(post), "rule")
        if not normalise(statement):
            return False
        for item in self.items:
            if item.country == country and item.category == category and is_near_duplicate(
                item.stereotype, statement, self.threshold
            ):
                item.mentions += 1
                if post not in item.examples:
                    item.examples.append(post)
                if pov not in item.points_of_view:
                    item.points_of_view.append(pov)
                return False
        n = sum(1 for i in self.items if i.country == country and i.category == category)
        sid = f"{country}-{category}-{n + 1:03d}"  # the full name: two countries may share a prefix
        self.items.append(Stereotype(sid, country, category, target, statement, pov, round_no, [post], extraction=method,
                                     points_of_view=[pov]))
        return True

    def table(self) -> pd.DataFrame:
        cols = ["stereotype_id", "country", "category", "target", "stereotype", "normalised", "first_pov", "first_round",
                "points_of_view", "mentions", "examples", "extraction", "source"]
        rows = [
            {**{k: getattr(s, k) for k in ("stereotype_id", "country", "category", "target", "stereotype")},
             "normalised": normalise(s.stereotype), "first_pov": s.first_pov, "first_round": s.first_round,
             "points_of_view": json.dumps(sorted(s.points_of_view)), "mentions": s.mentions,
             "examples": json.dumps(s.examples, ensure_ascii=False), "extraction": s.extraction, "source": "machine"}
            for s in self.items
        ]
        return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------- the retrieval loop


@dataclass(frozen=True)
class RetrievalSettings:
    countries: tuple[str, ...]
    categories: tuple[str, ...]
    points_of_view: tuple[str, ...]
    mode: str = "negative"
    n_posts: int = 10
    max_tokens: int = 256
    preamble_max_tokens: int = 64
    temperature: float = 0.8
    seed: int = 0
    rule: SaturationRule = SaturationRule()
    near_duplicate_threshold: float = 0.8
    min_words: int = 4
    # a base model continues a plain chat transcript with the next "User:" turn: cut it there
    stop: tuple[str, ...] = ()
    extraction: str = "rule"  # rule | model (the generator answers JSON; rule as the fallback)
    extraction_max_tokens: int = 96

    def __post_init__(self) -> None:
        if self.extraction not in EXTRACTION_METHODS:
            raise ConfigError(f"study.stereo.retrieval.extraction must be one of {', '.join(EXTRACTION_METHODS)}, "
                              f"got {self.extraction!r}")


@dataclass
class RetrievalResult:
    responses: pd.DataFrame
    stereotypes: pd.DataFrame
    curve: pd.DataFrame
    refusals: pd.DataFrame
    extractions: pd.DataFrame  # one row per post read: its method, and the model's raw answer where it was asked


def _preamble(model: Any, prompts: PromptSet, s: RetrievalSettings) -> list[Any]:
    """The preamble conversation with the generator's own replies (generated once, cached like every call)."""
    from stereolens.models import ChatMessage, GenerationRequest

    messages: list[Any] = []
    for turn in prompts.preamble:
        messages.append(ChatMessage("user", turn))
        req = GenerationRequest(messages=tuple(messages), max_tokens=s.preamble_max_tokens, temperature=0.0, seed=s.seed,
                                stop=s.stop)
        messages.append(ChatMessage("assistant", model.generate([req])[0].text.strip()))
    return messages


def retrieve(model: Any, prompts: PromptSet, s: RetrievalSettings, *, model_label: str, progress: bool = False) -> RetrievalResult:
    """Run every country x category x point of view to saturation; one batch of model calls per round and turn.

    A round's new stereotypes are counted per point of view, against what the same prompt produced in its earlier
    rounds (one pool per cell), so one point of view never saturates on another's output.  The country x category
    pool is filled from every cell's posts in the order round, country, category, point of view (by name), post:
    what it keeps (and its ids, first point of view, mentions) does not depend on the order of the configured lists.
    """
    from tqdm.auto import tqdm

    preamble = _preamble(model, prompts, s)
    # by name, not in the configured order: the country pool is filled in this order (the HF backend samples each
    # request from its own seed, and the response cache keys each request, so the replies do not depend on it)
    cells = sorted((c, k, p) for c in s.countries for k in s.categories for p in s.points_of_view)
    turns = {cell: prompts.retrieval_turns(s.mode, country=cell[0], category=cell[1], pov=cell[2], n_posts=s.n_posts) for cell in cells}
    pool = StereotypePool(s.near_duplicate_threshold)
    cell_pools = {cell: StereotypePool(s.near_duplicate_threshold) for cell in cells}  # novelty per point of view
    new_counts: dict[tuple, list[int]] = {cell: [] for cell in cells}
    refused_rounds: dict[tuple, list[bool]] = {cell: [] for cell in cells}
    no_output_rounds: dict[tuple, list[bool]] = {cell: [] for cell in cells}
    active = list(cells)
    responses, curve, extractions = [], [], []
    bar = tqdm(total=len(cells) * s.rule.max_rounds, desc="stereo retrieval", disable=not progress, unit="round")
    round_no = 0
    while active:
        round_no += 1
        replies = _converse_round(model, preamble, turns, active, s, round_no)
        still = []
        # the last turn's reply carries the posts (earlier turns of positive_then_negative lead up to it)
        read_of = {cell: read_reply(replies[cell][-1].text, prompts.refusals, min_words=s.min_words) for cell in active}
        # every post of the round in one batch of extraction requests
        items = [(cell, post) for cell in active for post in read_of[cell].posts]
        read = _extract_posts(model, prompts, s, items)
        extracted: dict[tuple, list[tuple[str, tuple[str, str, str]]]] = {cell: [] for cell in active}
        for (cell, post), r in zip(items, read):
            extracted[cell].append((post, (r["target"], r["statement"], r["extraction"])))
            extractions.append({"country": cell[0], "category": cell[1], "pov": cell[2], "round": round_no, "post": post, **r})
        for cell in active:
            country, category, pov = cell
            reply = read_of[cell]
            for post, ext in extracted[cell]:
                pool.add(country, category, pov, round_no, post, ext)
            n_new = sum(cell_pools[cell].add(country, category, pov, round_no, post, ext) for post, ext in extracted[cell])
            # no post with a readable statement: an empty or unparseable reply, no evidence of saturation
            no_output = not reply.refused and not any(normalise(ext[1]) for _, ext in extracted[cell])
            last = len(replies[cell]) - 1
            for step, gen in enumerate(replies[cell]):
                responses.append({
                    "model": model_label, "country": country, "category": category, "pov": pov, "round": round_no,
                    "step": step, "prompt": turns[cell][step], "response": gen.text, "finish_reason": gen.finish_reason,
                    "refusal": is_refusal(gen.text, prompts.refusals, min_words=s.min_words), "empty": not gen.text.strip(),
                    "n_posts": len(reply.posts) if step == last else 0,
                    "n_refusal_lines": len(reply.refusal_lines) if step == last else 0,
                    "no_output": no_output if step == last else False, "cached": gen.cached,
                })
            new_counts[cell].append(n_new)
            refused_rounds[cell].append(reply.refused)
            no_output_rounds[cell].append(no_output)
            reason = s.rule.decide(new_counts[cell], refused_rounds[cell], no_output_rounds[cell])
            curve.append({"country": country, "category": category, "pov": pov, "round": round_no, "n_posts": len(reply.posts),
                          "n_new": n_new, "cumulative": sum(new_counts[cell]), "refusal": reply.refused,
                          "no_output": no_output, "stop": reason or ""})
            bar.update(1)
            if reason is None:
                still.append(cell)
            else:
                bar.update(s.rule.max_rounds - round_no)
        active = still
    bar.close()
    resp = pd.DataFrame(responses)
    ext = pd.DataFrame(extractions, columns=["country", "category", "pov", "round", "post", "target", "statement", "extraction",
                                             "answer", "parsed", "cached"])
    return RetrievalResult(resp, pool.table(), pd.DataFrame(curve), _refusal_table(resp), ext)


def _converse_round(model: Any, preamble: list[Any], turns: dict[tuple, list[str]], active: list[tuple],
                    s: RetrievalSettings, round_no: int) -> dict[tuple, list[Any]]:
    """One round's conversation for every active cell, turn by turn, each turn one batch: the replies per cell."""
    from stereolens.models import ChatMessage, GenerationRequest

    convo = {cell: list(preamble) for cell in active}
    replies: dict[tuple, list[Any]] = {cell: [] for cell in active}
    for step in range(len(turns[active[0]])):
        reqs = []
        for cell in active:
            convo[cell].append(ChatMessage("user", turns[cell][step]))
            reqs.append(GenerationRequest(messages=tuple(convo[cell]), max_tokens=s.max_tokens,
                                          temperature=s.temperature, seed=s.seed + round_no, stop=s.stop))
        gens = model.generate(reqs)
        for cell, gen in zip(active, gens):
            convo[cell].append(ChatMessage("assistant", gen.text))
            replies[cell].append(gen)
    return replies


def _extract_posts(model: Any, prompts: PromptSet, s: RetrievalSettings, items: list[tuple[tuple, str]]) -> list[dict[str, Any]]:
    """(target, statement) of each (cell, post), by the model (one batch) or by the rule."""
    if s.extraction == "model":
        return extract_with_model(model, prompts, [(c[0], c[1], post) for c, post in items],
                                  max_tokens=s.extraction_max_tokens, seed=s.seed, stop=s.stop)
    return [{"target": t, "statement": st, "extraction": "rule", "answer": None, "parsed": None, "cached": None}
            for t, st in (extract(post) for _, post in items)]


def _refusal_table(responses: pd.DataFrame) -> pd.DataFrame:
    """Requests, refusals, empty replies, rounds without output and the refusal rate per model, country and category."""
    refusals = (
        responses.groupby(["model", "country", "category"], sort=True)
        .agg(n_requests=("refusal", "size"), n_refusals=("refusal", "sum"), n_empty=("empty", "sum"),
             n_no_output=("no_output", "sum"))
        .reset_index()
    )
    refusals[["n_refusals", "n_empty", "n_no_output"]] = refusals[["n_refusals", "n_empty", "n_no_output"]].astype(int)
    refusals["refusal_rate"] = refusals["n_refusals"] / refusals["n_requests"]
    return refusals


def settings_from_config(cfg: Mapping[str, Any], seed: int) -> RetrievalSettings:
    """RetrievalSettings from ``study.stereo`` (its ``retrieval`` block, with the defaults the paper implies)."""
    r = cfg["retrieval"]
    sat = r.get("saturation", {})
    return RetrievalSettings(
        countries=tuple(cfg["countries"]), categories=tuple(cfg["categories"]), points_of_view=tuple(cfg["points_of_view"]),
        mode=r.get("mode", "negative"), n_posts=int(r.get("n_posts", 10)), max_tokens=int(r.get("max_tokens", 256)),
        preamble_max_tokens=int(r.get("preamble_max_tokens", 64)), temperature=float(r.get("temperature", 0.8)),
        seed=int(seed), rule=SaturationRule(int(sat.get("k", 1)), int(sat.get("m", 1)), int(sat.get("max_rounds", 10))),
        near_duplicate_threshold=float(r.get("near_duplicate_threshold", 0.8)), min_words=int(r.get("min_words", 4)),
        stop=tuple(r.get("stop") or ()), extraction=str(r.get("extraction", "rule")),
        extraction_max_tokens=int(r.get("extraction_max_tokens", 96)),
    )


def check_cells(prompts: PromptSet, s: RetrievalSettings) -> None:
    """Refuse a country, category or point of view the prompts do not know (before any model loads)."""
    for c in s.countries:
        prompts.country(c)
    for k in s.categories:
        prompts.category(k)
    for v in s.points_of_view:
        prompts.pov(v)


def retrieval_summary(result: RetrievalResult, s: RetrievalSettings, *, generator: str) -> dict[str, Any]:
    """reports/stereo/retrieval/summary.json: counts, the saturation outcome per cell and the extraction's record."""
    responses, stereotypes, curve, ext = result.responses, result.stereotypes, result.curve, result.extractions
    rounds = curve.groupby(["country", "category", "pov"])["round"].max()
    return {"generator": generator, "generator_source": "machine", "n_requests": len(responses),
            "n_refusals": int(responses["refusal"].sum()), "n_empty": int(responses["empty"].sum()),
            "n_stereotypes": len(stereotypes),
            "n_without_target": int((stereotypes["target"].fillna("") == "").sum()),
            "mean_rounds_per_pov": float(rounds.mean()), "saturated_cells": int((curve["stop"] == "saturated").sum()),
            "round_cap_cells": int((curve["stop"] == "round_cap").sum()),
            # cells whose every round was refused, or that gave no readable post in any round: no evidence of
            # saturation either way
            "refused_cells": int((curve["stop"] == "refused").sum()),
            "no_output_cells": int((curve["stop"] == "no_output").sum()),
            "refused_rounds": int(curve["refusal"].sum()), "no_output_rounds": int(curve["no_output"].sum()),
            "mode": s.mode,
            "rule": {"k": s.rule.k, "m": s.rule.m, "max_rounds": s.rule.max_rounds},
            # the extraction step is ours (the paper does not describe it)
            "extraction": {"method": s.extraction, "posts_read": len(ext),
                           "model_answers_parsed": int((ext["extraction"] == "model").sum()),
                           "parse_failures": int((ext["parsed"] == False).sum()),  # noqa: E712 (None = not asked)
                           "stereotypes_by_method": {k: int((stereotypes["extraction"] == k).sum())
                                                     for k in ("model", "rule")}}}
