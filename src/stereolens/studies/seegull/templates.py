"""The association templates of the seegull study (``data/seed/seegull/templates.csv``): per language,
sentences with an ``{identity}`` slot before an ``{attribute}`` slot, and the generic group that stands in
the identity's place in the template's generic form ("las personas", "लोग").  Authored by this project,
not reviewed by native speakers (``source`` says so in every row)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pandera.pandas as pa

from stereolens.errors import ConfigError, DataError
from stereolens.scoring.ilps import group_follows_word
from stereolens.tables import read_table, text_column

IDENTITY, ATTRIBUTE = "{identity}", "{attribute}"
TEMPLATES_FILE = "templates.csv"


@dataclass(frozen=True)
class Template:
    language: str
    template_id: str
    template: str
    generic: str
    source: str

    def prefix(self, identity: str) -> str:
        """The sentence up to the attribute slot with ``identity`` in its place, its first letter capitalised."""
        return _capitalise(self.template.split(ATTRIBUTE, 1)[0].replace(IDENTITY, identity))

    def suffix(self) -> str:
        """The sentence after the attribute slot (not scored by a causal LM; a seq2seq LM reads it)."""
        return self.template.split(ATTRIBUTE, 1)[1]

    @property
    def generic_prefix(self) -> str:
        return self.prefix(self.generic)


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].isalpha() else text


def templates_schema() -> pa.DataFrameSchema:
    return pa.DataFrameSchema({c: text_column(what=c) for c in ("language", "template_id", "template", "generic",
                                                                 "source")},
                              unique=["language", "template_id"])


def load_templates(seed_dir: str | os.PathLike) -> list[Template]:
    """Every template of ``<seed_dir>/templates.csv``; a template without exactly one ``{identity}`` before
    exactly one ``{attribute}`` is refused with its line (a causal LM could not see an identity named after the
    attribute, and every association would be 0)."""
    path = Path(seed_dir) / TEMPLATES_FILE
    table = read_table(path, templates_schema(), what="seegull templates")
    found = []
    for line, row in enumerate(table.itertuples(index=False), start=2):
        text = str(row.template)
        if text.count(IDENTITY) != 1 or text.count(ATTRIBUTE) != 1:
            raise DataError(f"seegull templates {path} line {line}, column template: needs exactly one {IDENTITY} "
                            f"and one {ATTRIBUTE}, got {text!r}")
        if group_follows_word(text, IDENTITY, ATTRIBUTE):
            raise DataError(f"seegull templates {path} line {line}, column template: {IDENTITY} comes after "
                            f"{ATTRIBUTE}, so a causal LM could not condition the attribute on it ({text!r})")
        found.append(Template(str(row.language).strip(), str(row.template_id).strip(), text,
                              str(row.generic).strip(), str(row.source).strip()))
    return found


def templates_for(templates: Sequence[Template], language: str, chosen: Sequence[str] | None = None,
                  *, key: str = "study.seegull.association.templates") -> list[Template]:
    """The templates of ``language`` (those named in ``chosen``, or all); none for the language is refused."""
    mine = [t for t in templates if t.language == language]
    if not mine:
        raise ConfigError(f"{TEMPLATES_FILE} has no template for language {language!r} "
                          f"(languages: {', '.join(sorted({t.language for t in templates}))})")
    if chosen:
        unknown = sorted(set(chosen) - {t.template_id for t in mine})
        if unknown:
            raise ConfigError(f"{key}.{language}: {unknown} not among the {language!r} templates "
                              f"({', '.join(t.template_id for t in mine)})")
        mine = [t for t in mine if t.template_id in set(chosen)]
    return mine


def template_table(templates: Sequence[Template]) -> pd.DataFrame:
    """The templates as a table (for the report: what the sentences were, and that they are authored)."""
    return pd.DataFrame([{"language": t.language, "template_id": t.template_id, "template": t.template,
                          "generic": t.generic, "source": t.source} for t in templates])
