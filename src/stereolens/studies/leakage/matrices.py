"""The Cao et al. 2024 survey files and the human stereotype matrices (H) built from them.

:func:`survey_to_matrices` turns the published survey (``data_full_<language>.json``)
into one 32 traits x 30 groups matrix per language, reproducing the published
``aggregated_data_<LANG>.csv`` with the cells published as 999 returned as NaN;
:func:`read_matrix` / :func:`write_matrix` are the H matrix file format (first
column ``Traits``, one column per group, empty = missing).
"""

from __future__ import annotations

import difflib

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from stereolens.annotation.aggregate import pole_split_mean
from stereolens.errors import DataError
from stereolens.io import write_csv


LANGUAGE_FILES = {"EN": "english", "RU": "russian", "ZH": "chinese", "HI": "hindi"}
DEFAULT_NAME_MAP = Path("data/seed/leakage/survey_group_names.csv")
# The published matrices show a group that is unique to another country only if at
# least five annotators in this language chose it (Cao et al. 2024 datasheet: "at least 5
# annotations per group"); verified on all four aggregated_data_*.csv files, where
# shared groups appear even with a single annotator (Hindi: immigrants, n = 1).
DEFAULT_MIN_FOREIGN_NONSHARED = 5
# The study's one rule for every group, published survey and new surveys alike (config key
# study.leakage.min_annotators_per_group): Cao et al. 2024 section 3.2 "a minimum of five annotations per
# social group".  The published files break it for two shared groups (Hindi: immigrant n = 1, Asian
# person n = 4) and the reference fit uses their values: a group rated by fewer is *thin*, kept in the H
# matrix and listed in thin_groups.csv, and the fit treats it by study.leakage.fit.thin_groups; it is not
# a missing (never rated, 999) column.
MIN_ANNOTATORS_PER_GROUP = 5


@dataclass(frozen=True)
class GroupNames:
    """The survey's group spellings mapped to the published matrix columns, with group categories."""

    table: pd.DataFrame  # survey_name, group, category, home_language

    @property
    def survey_to_group(self) -> dict[str, str]:
        return dict(zip(self.table["survey_name"], self.table["group"]))

    @property
    def groups(self) -> list[str]:
        return list(dict.fromkeys(self.table["group"]))

    def category(self, group: str) -> str:
        return str(self.table.loc[self.table["group"] == group, "category"].iloc[0])

    def home_language(self, group: str) -> str:
        return str(self.table.loc[self.table["group"] == group, "home_language"].iloc[0])


def load_group_names(path: str | os.PathLike | None = None) -> GroupNames:
    """The name map at ``path``, or the repository's ``data/seed/leakage/survey_group_names.csv``."""
    path = Path(path) if path is not None else _default_name_map()
    if not path.exists():
        raise DataError(f"survey group name map not found: {path}")
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    need = {"survey_name", "group", "category", "home_language"}
    if not need <= set(table.columns):
        raise DataError(f"{path} needs columns {sorted(need)} (has: {list(table.columns)})")
    return GroupNames(table)


def repository_root(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest directory at or above ``start`` (default: this package) holding ``pyproject.toml``."""
    here = Path(start if start is not None else __file__).resolve()
    for parent in (here, *here.parents):
        if (parent / "pyproject.toml").is_file():
            return parent
    return None


def _default_name_map(package_file: str | os.PathLike | None = None) -> Path:
    # the seed file lives in the repository, not the package; the working directory is
    # not a reliable anchor (a stage, a test or a notebook may run from anywhere)
    root = repository_root(package_file)
    if root is None:
        where = Path(package_file if package_file is not None else __file__).resolve().parent
        raise DataError(
            f"survey group name map: no repository (pyproject.toml) above {where} to find {DEFAULT_NAME_MAP}; "
            "pass the map's path (--name-map)"
        )
    path = root / DEFAULT_NAME_MAP
    if not path.is_file():
        raise DataError(f"survey group name map not found at the expected {path}; pass the map's path (--name-map)")
    return path


def survey_file(survey_dir: Path, language: str) -> Path:
    language = language.upper()
    if language not in LANGUAGE_FILES:
        raise DataError(f"unknown survey language {language!r}; known: {', '.join(LANGUAGE_FILES)}")
    return Path(survey_dir) / f"data_full_{LANGUAGE_FILES[language]}.json"


def read_survey(path: str | os.PathLike, language: str | None = None) -> pd.DataFrame:
    """One survey file as long rows: annotator_id, group (survey spelling), trait_pair, rating."""
    from stereolens.datasets.ingest import verify_ingested

    path = Path(path)
    if not path.exists():
        raise DataError(f"survey file not found: {path} (the survey folder lacks this language)")
    verify_ingested(path)  # a file changed after ingest is refused
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"survey file {path} is not valid JSON: {exc}") from exc
    rows = []
    for annotator, groups in raw.items():
        for group, pairs in groups.items():
            for pair, rating in pairs.items():
                if rating is None or not isinstance(rating, (int, float)) or not -50 <= rating <= 50:
                    raise DataError(f"{path}: annotator {annotator}, group {group!r}, {pair!r}: rating {rating!r} not in [-50, 50]")
                rows.append((annotator, group, pair, float(rating)))
    df = pd.DataFrame(rows, columns=["annotator_id", "survey_group", "trait_pair", "rating"])
    if language:
        df.insert(0, "language", language.upper())
    return df


def survey_to_matrices(
    survey_dir: Path,
    languages: Iterable[str] = ("EN", "RU", "ZH", "HI"),
    name_map: str | os.PathLike | GroupNames | None = None,
    *,
    min_foreign_nonshared: int = DEFAULT_MIN_FOREIGN_NONSHARED,
    min_annotators: int = 1,
) -> dict[str, pd.DataFrame]:
    """One traits x groups matrix per language (index ``Traits``; NaN = missing).

    A cell is missing when nobody rated the group, when fewer than ``min_annotators``
    did, or when the group is unique to another country (category ``nonshared``
    with a different ``home_language`` in the name map) and fewer than
    ``min_foreign_nonshared`` annotators rated it: that is the rule behind the 999
    cells of the published files.
    """
    names = name_map if isinstance(name_map, GroupNames) else load_group_names(name_map)
    mapping = names.survey_to_group
    out: dict[str, pd.DataFrame] = {}
    for language in languages:
        language = language.upper()
        path = survey_file(Path(survey_dir), language)
        long = read_survey(path, language)
        unknown = sorted(set(long["survey_group"]) - set(mapping))
        if unknown:
            raise DataError(f"{path}: group(s) {unknown} are not in the survey group name map")
        long["group"] = long["survey_group"].map(mapping)
        matrix = pole_split_mean(long, group_order=names.groups)
        n_annotators = long.groupby("group")["annotator_id"].nunique()
        for group in matrix.columns:
            n = int(n_annotators.get(group, 0))
            foreign = names.category(group) == "nonshared" and names.home_language(group) != language
            if n < min_annotators or (foreign and n < min_foreign_nonshared):
                matrix[group] = np.nan
        out[language] = matrix
    return out


def survey_judgements(
    survey_dir: Path,
    languages: Iterable[str] = ("EN", "RU", "ZH", "HI"),
    name_map: str | os.PathLike | GroupNames | None = None,
) -> pd.DataFrame:
    """The survey as long-format judgements for QC and agreement.

    ``item_id`` is ``<LANG>|<group>|<trait pair>`` (annotators of different languages
    answered different questions), ``annotator_id`` is ``<LANG>:<id>`` (ids restart
    per file), ``label`` the slider rating in [-50, 50]; ``source`` is ``human``.
    """
    names = name_map if isinstance(name_map, GroupNames) else load_group_names(name_map)
    frames = []
    for language in languages:
        language = language.upper()
        long = read_survey(survey_file(Path(survey_dir), language), language)
        long["group"] = long["survey_group"].map(names.survey_to_group)
        if long["group"].isna().any():
            raise DataError(f"survey group {long.loc[long['group'].isna(), 'survey_group'].iloc[0]!r} is not in the name map")
        long["item_id"] = language + "|" + long["group"] + "|" + long["trait_pair"]
        long["annotator_id"] = language + ":" + long["annotator_id"]
        frames.append(long.rename(columns={"rating": "label"}))
    out = pd.concat(frames, ignore_index=True)
    out["source"] = "human"
    return out[["item_id", "annotator_id", "label", "language", "group", "trait_pair", "source"]]


def survey_annotation_counts(
    survey_dir: Path,
    languages: Iterable[str] = ("EN", "RU", "ZH", "HI"),
    name_map: str | os.PathLike | GroupNames | None = None,
) -> pd.DataFrame:
    """Annotators per (language, group): the coverage table behind the missing cells."""
    names = name_map if isinstance(name_map, GroupNames) else load_group_names(name_map)
    frames = []
    for language in languages:
        long = read_survey(survey_file(Path(survey_dir), language), language.upper())
        long["group"] = long["survey_group"].map(names.survey_to_group)
        counts = long.groupby("group")["annotator_id"].nunique().reindex(names.groups, fill_value=0)
        frames.append(pd.DataFrame({"language": language.upper(), "group": counts.index, "n_annotators": counts.to_numpy()}))
    return pd.concat(frames, ignore_index=True)


THIN_GROUPS_FILE = "thin_groups.csv"
THIN_GROUPS_COLUMNS = ["language", "group", "n_annotators", "min_annotators_per_group"]


def thin_groups_table(
    matrices: Mapping[str, pd.DataFrame], counts: pd.DataFrame, minimum: int
) -> pd.DataFrame:
    """The groups that carry ratings but were rated by fewer than ``minimum`` annotators in a language.

    ``counts`` is :func:`survey_annotation_counts`' table (language, group, n_annotators).  Such a group is
    *thin*, not missing: its cells keep their values in the H matrix (the published files keep them, and the
    reference fit ``mixed_effect.py`` uses them) and the fit treats them by ``study.leakage.fit.thin_groups``.
    A column with no value (nobody rated it, or the 999 code of the published files) is missing, never thin.
    Returns THIN_GROUPS_COLUMNS, one row per thin (language, group), in matrix column order.
    """
    rows = []
    n = counts.set_index(["language", "group"])["n_annotators"]
    for lang, matrix in matrices.items():
        for group in matrix.columns:
            k = int(n.get((lang, group), 0))
            if k < minimum and matrix[group].notna().any():
                rows.append({"language": lang, "group": group, "n_annotators": k, "min_annotators_per_group": minimum})
    return pd.DataFrame(rows, columns=THIN_GROUPS_COLUMNS)


def write_thin_groups(table: pd.DataFrame, directory: str | os.PathLike) -> Path:
    return write_csv(Path(directory) / THIN_GROUPS_FILE, table[THIN_GROUPS_COLUMNS])


def read_thin_groups(directory: str | os.PathLike, *, required: bool = True) -> dict[str, list[str]]:
    """Language -> its thin groups, from ``thin_groups.csv`` beside the H matrices (:func:`thin_groups_table`).

    ``required=False`` (a folder of your own H matrices) reads a folder without the file as one with no
    thin group."""
    path = Path(directory) / THIN_GROUPS_FILE
    if not path.is_file():
        if required:
            raise DataError(f"{path} not found: rerun the leakage-human stage (it lists the groups rated by too few "
                            "annotators beside the H matrices)")
        return {}
    from stereolens.io import read_csv_checked

    table = read_csv_checked(path, ["language", "group"], what="thin group table", dtype={"language": str, "group": str})
    out: dict[str, list[str]] = {}
    for row in table.itertuples(index=False):
        out.setdefault(str(row.language).upper(), []).append(str(row.group))
    return out


def write_matrix(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """H_<LANG>.csv layout: first column ``Traits``, one column per group, missing cells empty."""
    out = df.copy()
    out.index.name = "Traits"
    return write_csv(path, out.reset_index())


def read_matrix(path: str | os.PathLike, *, missing_code: float | None = 999) -> pd.DataFrame:
    """A matrix written by :func:`write_matrix` (or a published file, whose 999 cells become NaN)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"matrix not found: {path}")
    df = pd.read_csv(path)
    if "Traits" not in df.columns:
        raise DataError(f"{path} has no 'Traits' column (first column must be Traits)")
    df = df.set_index("Traits")
    for column in df.columns:
        numeric = pd.to_numeric(df[column], errors="coerce")
        bad = numeric.isna() & df[column].notna()
        if bad.any():
            raise DataError(
                f"{path}: cell ({bad.idxmax()!r}, {column!r}) is {df[column][bad].iloc[0]!r}, not a number or empty"
            )
        df[column] = numeric.astype(float)
    if missing_code is not None:
        df = df.mask(df == missing_code)
    df.columns.name = None
    return df


def write_matrices(matrices: Mapping[str, pd.DataFrame], out_dir: str | os.PathLike) -> list[Path]:
    return [write_matrix(m, Path(out_dir) / f"H_{lang}.csv") for lang, m in matrices.items()]


_HUMAN_FILE = re.compile(r"^H_([A-Za-z]{2,3})\.csv$")


def read_score_matrix(path: str | Path, what: str) -> pd.DataFrame:
    """A traits x groups matrix in the H_<LANG>.csv layout (999 and empty cells are missing)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")
    try:
        return read_matrix(path)
    except ValueError as exc:
        raise DataError(f"{what} {path}: cells must be numbers or empty ({str(exc).splitlines()[0]})") from exc


def check_matrix_labels(
    matrix: pd.DataFrame, path: str | Path, what: str, traits: set[str], groups: set[str]
) -> None:
    """Every trait (row) and group (column) of ``matrix`` is one the study knows (seed traits.csv, groups.csv).

    A misspelt trait or group would otherwise become a cell with no partner in the
    other matrices and vanish from the fit as an anonymous "no score" count.
    """
    for pos, trait in enumerate(matrix.index):
        if str(trait) not in traits:
            close = difflib.get_close_matches(str(trait), sorted(traits), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise DataError(f"{what} {path} line {pos + 2}, column Traits: unknown trait {trait!r} "
                            f"(not in traits.csv{hint})")
    for group in matrix.columns:
        if str(group) not in groups:
            close = difflib.get_close_matches(str(group), sorted(groups), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise DataError(f"{what} {path} line 1, column {group}: unknown group {group!r} (not in groups.csv{hint})")


def read_human_dir(directory: str | Path) -> dict[str, pd.DataFrame]:
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"human matrix directory not found: {directory}")
    out = {}
    for path in sorted(directory.iterdir()):
        m = _HUMAN_FILE.match(path.name)
        if m:
            out[m.group(1).upper()] = read_score_matrix(path, "human matrix")
    if not out:
        raise DataError(f"{directory} holds no H_<LANG>.csv files")
    return out
