"""The triad scenario bank of Fifteen Percent Fluency: loading, schema check, selection, rubrics.

Bank layout (``data/seed/pcs/``, git-tracked):

* ``scenarios.csv`` - one row per scenario and language: ``scenario_id,
  dimension, domain, language, prompt_a, prompt_b, prompt_c,
  translation_status, notes``.
* ``translation_reviews.csv`` - one row per scenario, language and condition
  with the reviewer's criteria, ``decision`` (acceptable / minor edits / major
  revision) and ``reviewer`` (an id, or ``authored`` for source text).
* ``indexical_markers.yaml`` - per language, the names, places and cultural
  labels Prompt C must not contain (section 3.1: implicit cues only).
* ``rubrics.yaml`` - per dimension, four features with 1 / 4 / 7 anchors
  (Tables 5-7).

The schema (:func:`scenario_bank_schema`, checked with ``stereolens.tables``)
refuses a row without its language, a prompt or a known dimension, and a second
row for the same scenario and language, naming ``FILE line N, column C``; the
bank check then refuses a Prompt C that contains an indexical marker and a
scenario that lacks a configured language.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from stereolens.errors import DataError

SCENARIO_COLUMNS = (
    "scenario_id", "dimension", "domain", "language", "prompt_a", "prompt_b", "prompt_c", "translation_status",
)
PROMPT_COLUMNS = {"A": "prompt_a", "B": "prompt_b", "C": "prompt_c"}
REVIEW_KEY_COLUMNS = ("scenario_id", "language", "condition", "decision", "reviewer")
REVIEW_DECISIONS = ("acceptable", "minor edits", "major revision")
# the four review criteria of Fifteen Percent Fluency section 3.3, each scored 1-5 by the reviewer
REVIEW_CRITERIA = ("register_naturalness", "address_forms", "dilemma_preservation", "no_calques")
REVIEW_SCORES = ("1", "2", "3", "4", "5")
UNREVIEWED = "authored"
ANCHOR_LEVELS = (1, 4, 7)


@dataclass(frozen=True)
class RubricFeature:
    """One scored feature with its behavioural anchors (Fifteen Percent Fluency Tables 5-7)."""

    dimension: str
    name: str
    label: str
    anchors: Mapping[int, str]  # 1, 4, 7 -> description
    description: str = ""


@dataclass(frozen=True)
class ScenarioBank:
    scenarios: pd.DataFrame  # one row per scenario_id x language
    reviews: pd.DataFrame | None
    markers: Mapping[str, tuple[str, ...]]
    rubrics: Mapping[str, tuple[RubricFeature, ...]]

    @property
    def languages(self) -> list[str]:
        return sorted(self.scenarios["language"].unique().tolist())

    def features(self, dimension: str) -> tuple[RubricFeature, ...]:
        if dimension not in self.rubrics:
            raise DataError(f"rubrics have no dimension {dimension!r} (have: {', '.join(self.rubrics)})")
        return self.rubrics[dimension]


# ---------------------------------------------------------------- reading


def _read_yaml(path: Path, what: str) -> Any:
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise DataError(f"{what} {path} is not valid YAML: {str(exc).splitlines()[0]}") from exc


def load_markers(path: str | os.PathLike) -> dict[str, tuple[str, ...]]:
    """``{language: (marker, ...)}``; a top-level ``markers:`` key is allowed, as is ``all`` for every language."""
    raw = _read_yaml(Path(path), "indexical markers") or {}
    if isinstance(raw, dict) and "markers" in raw and isinstance(raw["markers"], dict):
        raw = raw["markers"]
    if not isinstance(raw, dict):
        raise DataError(f"indexical markers {path} must map language -> list of markers")
    out: dict[str, tuple[str, ...]] = {}
    for lang, items in raw.items():
        if items is None:
            items = []
        if not isinstance(items, list):
            raise DataError(f"indexical markers {path}: language {lang!r} must list strings")
        out[str(lang)] = tuple(str(m).strip() for m in items if str(m).strip())
    return out


def load_rubrics(path: str | os.PathLike) -> dict[str, tuple[RubricFeature, ...]]:
    """Rubric features per dimension.

    Accepted shapes per dimension: a list of ``{name|feature, label?, anchors:
    {1: .., 4: .., 7: ..}}`` (or ``low/mid/high`` keys), or a mapping
    ``feature -> {label?, anchors}``; a top-level ``dimensions:`` key is allowed.
    """
    raw = _read_yaml(Path(path), "rubrics") or {}
    if isinstance(raw, dict) and isinstance(raw.get("dimensions"), dict):
        raw = raw["dimensions"]
    if not isinstance(raw, dict) or not raw:
        raise DataError(f"rubrics {path} must map dimension -> features")
    out: dict[str, tuple[RubricFeature, ...]] = {}
    for dim, body in raw.items():
        if isinstance(body, dict) and "features" in body:
            body = body["features"]
        if isinstance(body, dict):
            items = [{"name": k, **(v or {})} for k, v in body.items()]
        elif isinstance(body, list):
            items = body
        else:
            raise DataError(f"rubrics {path}: dimension {dim!r} must list its features")
        features = []
        for item in items:
            # `id` (snake_case) is the feature's key when present; `name` is then its printed label
            name = item.get("id") or item.get("feature") or item.get("name")
            if not name:
                raise DataError(f"rubrics {path}: a feature of dimension {dim!r} has no name")
            anchors_raw = item.get("anchors") or {k: item[k] for k in ("low", "mid", "high") if k in item}
            anchors: dict[int, str] = {}
            for key, text in (anchors_raw or {}).items():
                level = {"low": 1, "mid": 4, "high": 7}.get(str(key).lower(), None)
                if level is None:
                    try:
                        level = int(key)
                    except (TypeError, ValueError):
                        raise DataError(f"rubrics {path}: feature {name!r} has anchor key {key!r} (use 1, 4, 7)") from None
                anchors[level] = str(text).strip()
            if set(anchors) != set(ANCHOR_LEVELS):
                raise DataError(
                    f"rubrics {path}: feature {dim}/{name} needs anchors 1, 4 and 7 (has: {sorted(anchors)})"
                )
            label = item.get("label") or (item.get("name") if item.get("id") else None) or str(name).replace("_", " ").capitalize()
            features.append(RubricFeature(str(dim), str(name), str(label), anchors, str(item.get("description") or "")))
        out[str(dim)] = tuple(features)
    return out


def load_reviews(path: str | os.PathLike) -> pd.DataFrame:
    """Translation review records, checked for completeness (Fifteen Percent Fluency section 3.3).

    Every row has the four criteria columns; a row whose reviewer is ``authored``
    (a machine-written translation nobody has reviewed yet) carries no scores and
    no decision; any other row is a review: every criterion scored 1-5 and a
    decision.  The first bad row stops loading with its CSV line number.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"translation reviews not found: {path}")
    df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    missing = [c for c in (*REVIEW_KEY_COLUMNS, *REVIEW_CRITERIA) if c not in df.columns]
    if missing:
        raise DataError(f"translation reviews {path} are missing column(s) {', '.join(missing)}")
    for col in (*REVIEW_CRITERIA, "reviewer", "decision"):
        df[col] = df[col].str.strip()
    df["decision"] = df["decision"].str.lower().str.replace("_", " ")
    for pos, row in enumerate(df.itertuples(index=False)):
        def place(column: str) -> str:
            return (f"translation reviews {path} line {pos + 2}, column {column} (scenario {row.scenario_id}, "
                    f"language {row.language}, condition {row.condition})")

        scores = {c: getattr(row, c) for c in REVIEW_CRITERIA}
        if not row.reviewer:
            raise DataError(f"{place('reviewer')}: empty reviewer (a reviewer id, or {UNREVIEWED!r} for an "
                            "unreviewed translation)")
        if row.reviewer == UNREVIEWED:
            filled = [c for c, v in scores.items() if v] + (["decision"] if row.decision else [])
            if filled:
                raise DataError(f"{place(filled[0])}: reviewer is {UNREVIEWED!r} (unreviewed) but "
                                f"{', '.join(filled)} are filled in")
            continue
        for col, value in scores.items():
            if value not in REVIEW_SCORES:
                raise DataError(f"{place(col)}: {col} is {value!r}, expected a score 1-5")
        if row.decision not in REVIEW_DECISIONS:
            raise DataError(f"{place('decision')}: decision {row.decision!r} is not one of: {', '.join(REVIEW_DECISIONS)}")
    return df


# ---------------------------------------------------------------- checks


def contains_marker(text: str, marker: str) -> bool:
    """Case-insensitive substring match (the bank's documented rule: markers are chosen long enough
    not to occur inside ordinary words, and a substring rule also catches inflected forms)."""
    return bool(marker) and marker.casefold() in text.casefold()


def scenario_bank_schema(dimensions: Iterable[str] | None = None):
    """The scenario bank's table: one row per scenario and language, all three prompts, a known dimension.

    ``dimensions`` are the rubrics' (a scenario whose dimension has no rubric cannot be judged);
    None accepts any non-empty dimension.  ``notes`` is free text and optional.
    """
    import pandera.pandas as pa

    from stereolens.tables import choice_column, text_column

    columns = {
        "scenario_id": text_column(what="scenario_id"),
        "dimension": text_column(what="dimension") if dimensions is None
        else choice_column(sorted(dimensions), what="dimension (from rubrics.yaml)"),
        "domain": text_column(what="domain"),
        "language": text_column(what="language (each row is one scenario in one language)"),
        **{col: text_column(what=f"{col} (condition {cond}: every scenario needs A, B and C in every language)")
           for cond, col in PROMPT_COLUMNS.items()},
        "translation_status": text_column(what="translation_status (source, authored, or a review state)"),
    }
    return pa.DataFrameSchema(columns, unique=["scenario_id", "language"], report_duplicates="exclude_first",
                              name="scenario bank")


def read_scenarios(path: str | os.PathLike, dimensions: Iterable[str] | None = None) -> pd.DataFrame:
    """scenarios.csv, checked against :func:`scenario_bank_schema` (``FILE line N, column C`` on the first failure)."""
    from stereolens.tables import read_table

    return read_table(path, scenario_bank_schema(dimensions), what="scenario bank")


def check_bank(
    scenarios: pd.DataFrame,
    markers: Mapping[str, Sequence[str]],
    *,
    languages: Iterable[str] | None = None,
    dimensions: Iterable[str] | None = None,
    where: str = "scenario bank",
) -> None:
    """Raise DataError for the first row that breaks the schema, a Prompt C with a marker, or a missing language.

    ``scenarios`` are the file's rows in file order (line numbers are counted from them).
    """
    from stereolens.tables import validate_table

    validate_table(scenarios, scenario_bank_schema(dimensions), where)
    for pos, row in enumerate(scenarios.reset_index(drop=True).itertuples(index=False)):
        lang = str(row.language)
        for marker in (*markers.get(lang, ()), *markers.get("all", ())):
            if contains_marker(row.prompt_c, marker):
                raise DataError(
                    f"{where} line {pos + 2}, column prompt_c: scenario {row.scenario_id} language {lang}: "
                    f"Prompt C contains the indexical marker {marker!r}"
                )
    if languages is not None:
        check_languages(scenarios, languages, where)


def check_languages(scenarios: pd.DataFrame, languages: Iterable[str], where: str) -> None:
    """Every scenario of ``scenarios`` has a row in every one of ``languages``."""
    wanted = list(languages)
    have = scenarios.groupby("scenario_id", sort=True)["language"].agg(set)
    for sid, langs in have.items():
        for lang in wanted:
            if lang not in langs:
                raise DataError(f"{where}: scenario {sid} lacks language {lang} (add a row for it, or leave "
                                f"{lang} out of study.pcs.languages)")


def select_scenarios(
    scenarios: pd.DataFrame,
    *,
    scenario_ids: Sequence[str] | None = None,
    per_dimension_domain: int | None = None,
    dimensions: Sequence[str] | None = None,
    domains: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Restrict to explicit ids, or to the first N scenarios of every dimension x domain (a balanced subset)."""
    out = scenarios
    if dimensions:
        out = out.loc[out["dimension"].isin(list(dimensions))]
    if domains:
        out = out.loc[out["domain"].isin(list(domains))]
    if scenario_ids:
        unknown = sorted(set(scenario_ids) - set(out["scenario_id"]))
        if unknown:
            raise DataError(f"scenario bank has no scenario(s) {', '.join(unknown)}")
        out = out.loc[out["scenario_id"].isin(list(scenario_ids))]
    elif per_dimension_domain:
        ids = (
            out.drop_duplicates("scenario_id")
            .sort_values("scenario_id")
            .groupby(["dimension", "domain"], sort=True)
            .head(int(per_dimension_domain))["scenario_id"]
        )
        out = out.loc[out["scenario_id"].isin(set(ids))]
    return out.reset_index(drop=True)


def load_bank(
    directory: str | os.PathLike,
    *,
    languages: Sequence[str] | None = None,
    scenario_ids: Sequence[str] | None = None,
    per_dimension_domain: int | None = None,
    dimensions: Sequence[str] | None = None,
    domains: Sequence[str] | None = None,
) -> ScenarioBank:
    """Read and check the bank, then select the configured scenarios and languages.

    The whole bank is checked for markers and empty conditions (a broken row
    is an error even when not selected); language completeness is checked for
    the requested languages over the selected scenarios.
    """
    directory = Path(directory)
    path = directory / "scenarios.csv"
    markers = load_markers(directory / "indexical_markers.yaml")
    rubrics = load_rubrics(directory / "rubrics.yaml")
    scenarios = read_scenarios(path, rubrics.keys())
    check_bank(scenarios, markers, dimensions=rubrics.keys(), where=f"scenario bank {path}")
    selected = select_scenarios(
        scenarios, scenario_ids=scenario_ids, per_dimension_domain=per_dimension_domain, dimensions=dimensions,
        domains=domains,
    )
    if languages is not None:
        check_languages(selected, languages, f"scenario bank {path}")
        selected = selected.loc[selected["language"].isin(list(languages))].reset_index(drop=True)
    if selected.empty:
        raise DataError(f"{path}: no scenario left after selecting languages {languages} and scenarios")
    reviews_path = directory / "translation_reviews.csv"
    reviews = load_reviews(reviews_path) if reviews_path.exists() else None
    return ScenarioBank(selected.sort_values(["scenario_id", "language"]).reset_index(drop=True), reviews, markers, rubrics)


def review_summary(bank: ScenarioBank) -> pd.DataFrame:
    """Per language: reviewed translations and the share needing minor edits / major revision (section 3.3)."""
    if bank.reviews is None or bank.reviews.empty:
        return pd.DataFrame(columns=["language", "n_reviewed", "acceptable", "minor_edits", "major_revision", "major_revision_rate"])
    reviews = bank.reviews.loc[
        bank.reviews["scenario_id"].isin(set(bank.scenarios["scenario_id"]))
        & bank.reviews["language"].isin(set(bank.scenarios["language"]))
    ]
    rows = []
    for lang, group in reviews.groupby("language", sort=True):
        n = len(group)
        counts = group["decision"].value_counts()
        rows.append(
            {
                "language": lang,
                "n_reviewed": n,
                "acceptable": int(counts.get("acceptable", 0)),
                "minor_edits": int(counts.get("minor edits", 0)),
                "major_revision": int(counts.get("major revision", 0)),
                "major_revision_rate": counts.get("major revision", 0) / n if n else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def triad_prompts(bank: ScenarioBank, conditions: Sequence[str] = ("A", "B", "C")) -> pd.DataFrame:
    """Long table: one row per scenario x language x condition with its prompt text."""
    rows = []
    for _, row in bank.scenarios.iterrows():
        for cond in conditions:
            rows.append(
                {
                    "scenario_id": row["scenario_id"],
                    "dimension": row["dimension"],
                    "domain": row["domain"],
                    "language": row["language"],
                    "condition": cond,
                    "prompt": row[PROMPT_COLUMNS[cond]],
                    "translation_status": row["translation_status"],
                }
            )
    return pd.DataFrame(rows)
