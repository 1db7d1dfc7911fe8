"""SeeGULL Multilingual (Bhutani et al., ACL 2024) as one tuples table every study can read.

Upstream keeps one CSV per language-locale pair under ``dataset/stereotypes/``, named
``<Language> (<code>) in <Country>.csv`` (``Spanish (es) in Mexico.csv``), with the columns
``identity, attribute, non_stereotype, stereotype, unsure, mean_offensive_score,
translated_identity, translated_attribute_list``.  Each (identity, attribute) tuple was judged by
three annotators of that locale: the three vote columns count how many said "not a stereotype",
"stereotype" and "unsure", so they are whole numbers summing to three.  ``mean_offensive_score`` is
the mean offensiveness rating of the attribute on the dataset's scale from -1 (not offensive)
through 0 (unsure) to 4 (extremely offensive); it is blank for some Arabic tuples.  The English
translations of identity and attribute were written by the dataset's authors.

The locale code (``es-MX``) is derived from the file name: the language name and the code in
parentheses must agree with :data:`LANGUAGES` and the country must be in :data:`COUNTRIES`; any
other name is refused in one line naming the file.  A vote that is not a whole number, votes that
do not sum to the annotators, a missing column or a tuple listed twice are refused in one line
naming the file, the line and the column.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pandera.pandas as pa

from stereolens.datasets.ingest import verify_ingested
from stereolens.errors import ConfigError, DataError
from stereolens.io import read_csv_checked
from stereolens.tables import count_column, number_column, text_column, validate_table

DATASET = "seegull_multilingual"
SEEGULL_COLUMNS = ("identity", "attribute", "non_stereotype", "stereotype", "unsure", "mean_offensive_score",
                   "translated_identity", "translated_attribute_list")
# upstream vote column -> the column of the tuples table (what each count is of)
VOTE_COLUMNS = {"stereotype": "stereotype_votes", "non_stereotype": "non_stereotype_votes", "unsure": "unsure_votes"}
# every tuple was judged by three annotators of its locale (Bhutani et al. 2024, section 3; the data card)
ANNOTATORS_PER_TUPLE = 3
# the dataset's offensiveness scale: -1 not offensive, 0 unsure, 1 slightly ... 4 extremely offensive
OFFENSIVENESS_RANGE = (-1.0, 4.0)
# the verdict of a tuple: what more than half of its annotators said (a share of exactly half is no majority)
STEREOTYPE, NOT_STEREOTYPE, NO_MAJORITY = "stereotype", "not_stereotype", "no_majority"

# the language names of the 23 file names -> ISO 639-1 codes
LANGUAGES = {
    "Arabic": "ar", "Bengali": "bn", "Dutch": "nl", "French": "fr", "German": "de", "Hindi": "hi",
    "Indonesian": "id", "Italian": "it", "Japanese": "ja", "Korean": "ko", "Malay": "ms", "Marathi": "mr",
    "Portuguese": "pt", "Spanish": "es", "Swahili": "sw", "Tamil": "ta", "Telugu": "te", "Thai": "th",
    "Turkish": "tr", "Vietnamese": "vi",
}
# the file names write Vietnamese as "(vn)", Vietnam's country code; its ISO 639-1 code is vi
FILE_CODE_ALIASES = {"vn": "vi"}
# the country names of the file names -> ISO 3166-1 alpha-2 codes
COUNTRIES = {
    "UAE": "AE", "Bangladesh": "BD", "India": "IN", "Netherlands": "NL", "France": "FR", "Germany": "DE",
    "Indonesia": "ID", "Italy": "IT", "Japan": "JP", "Korea": "KR", "Malaysia": "MY", "Brazil": "BR",
    "Portugal": "PT", "Mexico": "MX", "Spain": "ES", "Kenya": "KE", "Thailand": "TH", "Turkey": "TR",
    "Vietnam": "VN",
}
_FILE_NAME = re.compile(r"^(?P<language>[A-Za-z]+) \((?P<code>[a-z]{2,3})\) in (?P<country>[A-Za-z][A-Za-z ]*)\.csv$")
# the columns of the tuples table, in order
TUPLE_COLUMNS = ("locale", "language", "country", "identity", "attribute", "stereotype_votes", "non_stereotype_votes",
                 "unsure_votes", "n_annotators", "stereotype_share", "verdict", "mean_offensive_score", "identity_en",
                 "attribute_en", "source_file", "source_line")


@dataclass(frozen=True)
class Locale:
    """One language-locale pair of the dataset: ``code`` is ``<language>-<COUNTRY>`` (``es-MX``)."""

    code: str
    language: str        # ISO 639-1 code
    language_name: str   # as the file name writes it
    country: str         # as the file name writes it
    file_name: str

    @property
    def country_code(self) -> str:
        return self.code.split("-", 1)[1]


def locale_of(file_name: str) -> Locale:
    """The locale a SeeGULL file name stands for; an unknown language or country, or a code that is not the
    language's, is refused in one line naming the file."""
    match = _FILE_NAME.match(file_name)
    if not match:
        raise DataError(f"SeeGULL file {file_name!r}: not named '<Language> (<code>) in <Country>.csv' "
                        "(e.g. 'Spanish (es) in Mexico.csv'), so its locale is unknown")
    name, code, country = match.group("language"), match.group("code"), match.group("country")
    if name not in LANGUAGES:
        raise DataError(f"SeeGULL file {file_name!r}: unknown language {name!r} (known: {', '.join(sorted(LANGUAGES))})")
    if country not in COUNTRIES:
        raise DataError(f"SeeGULL file {file_name!r}: unknown country {country!r} (known: {', '.join(sorted(COUNTRIES))})")
    language = FILE_CODE_ALIASES.get(code, code)
    if language != LANGUAGES[name]:
        raise DataError(f"SeeGULL file {file_name!r}: code ({code}) is not {name}'s ({LANGUAGES[name]})")
    return Locale(f"{language}-{COUNTRIES[country]}", language, name, country, file_name)


def locale_files(folder: str | os.PathLike) -> dict[str, Path]:
    """Every SeeGULL file in ``folder`` by locale code, in code order; every CSV there must name a known locale."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"SeeGULL folder not found: {folder} (run the ingest stage: `dvc repro ingest@{DATASET}`)")
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.csv")):
        locale = locale_of(path.name)
        if locale.code in found:
            raise DataError(f"SeeGULL folder {folder}: {path.name!r} and {found[locale.code].name!r} are both {locale.code}")
        found[locale.code] = path
    return dict(sorted(found.items()))


def tuples_schema(annotators: int = ANNOTATORS_PER_TUPLE) -> pa.DataFrameSchema:
    """A SeeGULL stereotypes file: text identity and attribute (a tuple once), whole-number votes summing to the
    annotators, an offensiveness score on the dataset's scale or blank, the English translations."""
    low, high = OFFENSIVENESS_RANGE
    votes = [c for c in SEEGULL_COLUMNS if c in VOTE_COLUMNS]  # in the file's order

    def sums_to_annotators(df: pd.DataFrame) -> pd.Series:
        counts = df[votes].apply(lambda s: pd.to_numeric(s.astype(str).str.strip(), errors="coerce"))
        # a row whose votes are not whole numbers is reported by its own column's check first
        return counts.isna().any(axis=1) | (counts.sum(axis=1) == annotators)

    return pa.DataFrameSchema(
        {"identity": text_column(what="identity"), "attribute": text_column(what="attribute"),
         **{c: count_column(minimum=0, maximum=annotators, what=f"{c} vote count") for c in votes},
         "mean_offensive_score": number_column(minimum=low, maximum=high, nullable=True, what="mean_offensive_score"),
         "translated_identity": text_column(what="translated identity"),
         "translated_attribute_list": text_column(what="translated attribute")},
        checks=[pa.Check(sums_to_annotators, error=f"the votes {' + '.join(votes)} must sum to the {annotators} "
                                                   "annotators of a tuple")],
        unique=["identity", "attribute"],
    )


def verdict_of(stereotype_votes: pd.Series, non_stereotype_votes: pd.Series, annotators: pd.Series) -> pd.Series:
    """``stereotype`` / ``not_stereotype`` where more than half of the annotators said so, else ``no_majority``
    (an unsure majority, or a tie)."""
    verdict = pd.Series(NO_MAJORITY, index=stereotype_votes.index, dtype=object)
    verdict[2 * non_stereotype_votes > annotators] = NOT_STEREOTYPE
    verdict[2 * stereotype_votes > annotators] = STEREOTYPE
    return verdict


def _without_trailing_comma(cells: pd.Series) -> pd.Series:
    return cells.astype(str).str.strip().str.replace(r"\s*[,\u060c]+$", "", regex=True)


def read_locale(path: str | os.PathLike, *, annotators: int = ANNOTATORS_PER_TUPLE) -> pd.DataFrame:
    """One SeeGULL file (checked against its ingest record, then its schema) as rows of :data:`TUPLE_COLUMNS`."""
    path = Path(path)
    locale = locale_of(path.name)
    verify_ingested(path)
    raw = read_csv_checked(path, SEEGULL_COLUMNS, what="SeeGULL file", dtype=str, keep_default_na=False,
                           allow_empty=False)
    # a blank offensiveness score is missing (some Arabic tuples), not zero
    raw = raw.assign(mean_offensive_score=raw["mean_offensive_score"].str.strip().replace("", None))
    checked = validate_table(raw, tuples_schema(annotators), f"SeeGULL file {path}")
    votes = {VOTE_COLUMNS[c]: pd.to_numeric(checked[c].astype(str).str.strip()).astype(int) for c in VOTE_COLUMNS}
    # the Arabic file ends every identity and its English translation with a comma ("زامبي ،", "Zambian,"), an
    # export artefact: dropped, so that the identity reads as a name in a sentence and aligns across locales
    identity, identity_en = (_without_trailing_comma(checked[c]) for c in ("identity", "translated_identity"))
    n = pd.Series(annotators, index=checked.index)
    return pd.DataFrame({
        "locale": locale.code, "language": locale.language, "country": locale.country,
        "identity": identity, "attribute": checked["attribute"].astype(str).str.strip(),
        **votes, "n_annotators": n, "stereotype_share": votes["stereotype_votes"] / n,
        "verdict": verdict_of(votes["stereotype_votes"], votes["non_stereotype_votes"], n),
        "mean_offensive_score": checked["mean_offensive_score"].astype(float),
        "identity_en": identity_en,
        "attribute_en": checked["translated_attribute_list"].astype(str).str.strip(),
        "source_file": path.name, "source_line": checked.index + 2,
    }, columns=list(TUPLE_COLUMNS))


def read_seegull(folder: str | os.PathLike, locales: Iterable[str] | None = None, *,
                 key: str = "locales") -> pd.DataFrame:
    """The tuples of ``locales`` (codes such as ``es-MX``; None = every file) from the ingested folder, in the
    order given.  A locale the folder lacks is refused naming ``key`` (the config key that asked for it)."""
    files = locale_files(folder)
    wanted: Sequence[str] = list(files) if locales is None else list(locales)
    unknown = [code for code in wanted if code not in files]
    if unknown:
        raise ConfigError(f"{key}: {unknown} not among the SeeGULL locales in {folder} ({', '.join(files)})")
    frames = [read_locale(files[code]) for code in wanted]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(TUPLE_COLUMNS))


def alignment_key(identity_en: pd.Series, attribute_en: pd.Series) -> pd.Series:
    """The key that aligns tuples across locales: the authors' English identity and attribute, case- and
    space-folded (``Mexicans|lazy``)."""
    def fold(s: pd.Series) -> pd.Series:
        return s.astype(str).str.strip().str.lower().str.split().str.join(" ")

    return fold(identity_en) + "|" + fold(attribute_en)
