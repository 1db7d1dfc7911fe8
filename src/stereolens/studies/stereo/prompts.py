"""The study's prompt templates (data/seed/stereo/prompts.yaml), loaded and checked once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stereolens.errors import ConfigError

MODES = ("negative", "positive_then_negative")


@dataclass(frozen=True)
class RefusalMarkers:
    """What makes a reply line a refusal (``refusals`` of prompts.yaml; the rule is :func:`retrieval.read_reply`'s).

    ``phrases``: what a refusal says ("no puedo ayudarte", "no es apropiado"), matched as substrings;
    ``addressed``: what marks a line as spoken to the requester rather than a post (an apology, the request, the
    assistant speaking of itself), matched as whole words.  Both accent-folded, lower case.
    """

    phrases: tuple[str, ...]
    addressed: tuple[str, ...]


@dataclass(frozen=True)
class PromptSet:
    language: str
    preamble: tuple[str, ...]
    negative: str
    positive_then_negative: tuple[str, ...]
    points_of_view: dict[str, str]
    categories: dict[str, str]
    countries: dict[str, dict[str, str]]
    refusals: RefusalMarkers
    instantiation: tuple[str, ...]
    instance_labels: dict[str, tuple[str, ...]]
    likert_display: tuple[str, ...]
    # optional: only the model-based extraction and the overlap judge need them
    extraction: str = ""
    overlap_judge: str = ""
    validation_panel: str = ""

    def country(self, key: str) -> dict[str, str]:
        if key not in self.countries:
            raise ConfigError(f"country {key!r} has no entry in the prompt templates (have: {', '.join(self.countries)})")
        return self.countries[key]

    def category(self, key: str) -> str:
        if key not in self.categories:
            raise ConfigError(f"category {key!r} has no entry in the prompt templates (have: {', '.join(self.categories)})")
        return self.categories[key]

    def pov(self, key: str) -> str:
        if key not in self.points_of_view:
            raise ConfigError(f"point of view {key!r} has no entry in the prompt templates (have: {', '.join(self.points_of_view)})")
        return self.points_of_view[key]

    def retrieval_turns(self, mode: str, *, country: str, category: str, pov: str, n_posts: int) -> list[str]:
        """The user turns after the preamble; the stereotypes are read from the reply to the last one."""
        if mode not in MODES:
            raise ConfigError(f"study.stereo.retrieval.mode must be one of {MODES}, got {mode!r}")
        c = self.country(country)
        fields = {
            "n_posts": n_posts, "n_half": max(1, n_posts // 2), "category_adj": self.category(category),
            "culture_adj": c["culture_adj"], "pov": self.pov(pov), "country": c["name"],
        }
        turns = [self.negative] if mode == "negative" else list(self.positive_then_negative)
        return [t.format(**fields) for t in turns]


def template_countries(path: str | Path) -> list[str]:
    """Every country the templates of ``path`` have an entry for, in any language, in file order."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    found = [str(c) for block in data.values() if isinstance(block, dict)
             for c in (block.get("countries") or {})]
    return list(dict.fromkeys(found))


def load_prompts(path: str | Path, language: str) -> PromptSet:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"prompt templates not found: {path}")
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if language not in data:
        raise ConfigError(f"{path}: no templates for language {language!r} (have: {', '.join(data)})")
    d = data[language]
    required = ("preamble", "negative", "positive_then_negative", "points_of_view", "categories", "countries",
                "refusals", "instantiation", "instance_labels", "likert_display")
    missing = [k for k in required if k not in d]
    if missing:
        raise ConfigError(f"{path}: language {language!r} lacks {', '.join(missing)}")
    refusals = d["refusals"]
    if not isinstance(refusals, dict) or not refusals.get("phrases") or not refusals.get("addressed"):
        raise ConfigError(f"{path}: language {language!r}: refusals needs two non-empty lists, `phrases` and `addressed`")
    if len(d["likert_display"]) != 5:
        raise ConfigError(f"{path}: likert_display needs the five options of Figure D1, got {len(d['likert_display'])}")
    return PromptSet(
        language=language,
        preamble=tuple(d["preamble"]),
        negative=d["negative"],
        positive_then_negative=tuple(d["positive_then_negative"]),
        points_of_view=dict(d["points_of_view"]),
        categories=dict(d["categories"]),
        countries={k: dict(v) for k, v in d["countries"].items()},
        refusals=RefusalMarkers(tuple(refusals["phrases"]), tuple(refusals["addressed"])),
        instantiation=tuple(d["instantiation"]),
        instance_labels={k: tuple(v) for k, v in d["instance_labels"].items()},
        likert_display=tuple(d["likert_display"]),
        extraction=str(d.get("extraction") or ""),
        overlap_judge=str(d.get("overlap_judge") or ""),
        validation_panel=str(d.get("validation_panel") or ""),
    )
