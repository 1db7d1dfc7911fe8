"""The seed data of the leakage study (Cao et al. 2024): traits, groups, their words per language, templates and
choice prompts under ``data/seed/leakage/`` (see its README), read and checked by :func:`load_lexicon`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import read_csv_checked


@dataclass(frozen=True)
class Lexicon:
    """The seed data of the leakage study (see data/seed/leakage/README.md)."""

    traits: pd.DataFrame  # trait, pair_id, dimension, pole, polarity
    groups: pd.DataFrame  # group, category, origin
    group_words: pd.DataFrame  # language, group, form, word, gender, translation_status
    trait_words: pd.DataFrame  # language, trait, form, word, translation_status
    generic_words: pd.DataFrame  # language, form, word, gender, translation_status
    templates: pd.DataFrame  # language, template_id, number, gender, template, translation_status
    choice_prompts: pd.DataFrame  # language, group_form, system, user, answer_prefix, neither, translation_status

    @property
    def trait_order(self) -> list[str]:
        return list(self.traits["trait"])

    @property
    def group_order(self) -> list[str]:
        return list(self.groups["group"])

    def translation_status(self, language: str) -> dict[str, int]:
        """How many of the language's words and templates are authored / reviewed / original."""
        frames = [self.group_words, self.trait_words, self.generic_words, self.templates, self.choice_prompts]
        status = pd.concat([f.loc[f["language"] == language, "translation_status"] for f in frames])
        return {str(k): int(v) for k, v in status.value_counts().sort_index().items()}


_LEXICON_FILES = {
    "traits": ("traits.csv", ["trait", "pair_id", "dimension", "pole", "polarity"]),
    "groups": ("groups.csv", ["group", "category"]),
    "group_words": ("group_words.csv", ["language", "group", "form", "word", "gender", "translation_status"]),
    "trait_words": ("trait_words.csv", ["language", "trait", "form", "word", "translation_status"]),
    "generic_words": ("generic_words.csv", ["language", "form", "word", "gender", "translation_status"]),
    "templates": ("templates.csv", ["language", "template_id", "number", "gender", "template", "translation_status"]),
    "choice_prompts": (
        "choice_prompts.csv",
        ["language", "group_form", "system", "user", "answer_prefix", "neither", "translation_status"],
    ),
}
TRANSLATION_STATUSES = frozenset({"original", "authored", "reviewed"})
# neutral: the non-polar traits (Cao et al. 2024 section 4.2.3), compared only with each other in the choice task
POLARITIES = frozenset({"positive", "negative", "neutral"})


def load_lexicon(seed_dir: str | os.PathLike = "data/seed/leakage") -> Lexicon:
    """Read and check the seed tables; one-line DataError naming file, row and column otherwise."""
    seed_dir = Path(seed_dir)
    tables: dict[str, pd.DataFrame] = {}
    for key, (name, required) in _LEXICON_FILES.items():
        df = read_csv_checked(seed_dir / name, required, what=f"leakage seed table {name}", dtype=str, keep_default_na=False)
        if "translation_status" in df.columns:
            bad = df.index[~df["translation_status"].isin(TRANSLATION_STATUSES)]
            if len(bad):
                raise DataError(
                    f"{seed_dir / name} line {bad[0] + 2}, column translation_status: translation_status {df.loc[bad[0], 'translation_status']!r}"
                    f" is not one of {', '.join(sorted(TRANSLATION_STATUSES))}"
                )
        tables[key] = df
    bad = tables["traits"].index[~tables["traits"]["polarity"].isin(POLARITIES)]
    if len(bad):
        raise DataError(f"{seed_dir / 'traits.csv'} line {bad[0] + 2}, column polarity: "
                        f"{tables['traits'].loc[bad[0], 'polarity']!r} is not one of {', '.join(sorted(POLARITIES))}")
    lex = Lexicon(**tables)
    traits, groups = set(lex.traits["trait"]), set(lex.groups["group"])
    for name, df, col, known in (
        ("group_words.csv", lex.group_words, "group", groups),
        ("trait_words.csv", lex.trait_words, "trait", traits),
    ):
        unknown = df.index[~df[col].isin(known)]
        if len(unknown):
            raise DataError(f"{seed_dir / name} line {unknown[0] + 2}, column {col}: {col} {df.loc[unknown[0], col]!r} is not in the seed list")
    return lex



def select_groups(lex: Lexicon, selection: Sequence[str] | None) -> list[str]:
    """Group ids from a selection of ids and ``category:<name>`` entries (None = every group, seed order)."""
    if selection is None:
        return lex.group_order
    chosen: set[str] = set()
    for entry in selection:
        if entry.startswith("category:"):
            members = set(lex.groups.loc[lex.groups["category"] == entry.split(":", 1)[1], "group"])
            if not members:
                raise ConfigError(f"no group has category {entry.split(':', 1)[1]!r} (groups.csv)")
            chosen |= members
        elif entry in set(lex.group_order):
            chosen.add(entry)
        else:
            raise ConfigError(f"unknown group {entry!r} (groups.csv ids or category:<name>)")
    return [g for g in lex.group_order if g in chosen]

