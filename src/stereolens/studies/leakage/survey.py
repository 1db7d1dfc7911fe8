"""New leakage surveys through the annotation layer: import, quality control, pole-split H matrices.

The published survey of Cao et al. 2024 comes as ``data_full_<language>.json`` and is rebuilt by
:func:`stereolens.studies.leakage.matrices.survey_to_matrices`.  A new survey (a rerun, another
language, other annotators) comes as long-format judgements, one slider rating per row::

    item_id,annotator_id,label,language,group,trait_pair[,repeat][,gold]

``label`` is the slider position in [-50, 50] on the ``trait_pair`` ("left - right", both traits of
the study's traits.csv) for ``group`` (a column of the H matrices, groups.csv); ``repeat`` = 1 marks
the second answer to an item (Cao et al. 2024 repeated one group); a row with ``gold`` filled is an
attention check (``group`` and ``trait_pair`` may be empty) answered correctly when ``label`` equals
``gold``.  Attention checks outside the rating grid go in a separate table
(``annotator_id,check_id,passed[,language]``).

Per language the judgements go through :func:`stereolens.annotation.qc.run_qc` (attention checks,
self-agreement on repeated items, annotators per group); the first answers of the annotators who
pass are averaged with :func:`stereolens.annotation.aggregate.pole_split_mean`.  A group rated by fewer
than ``min_annotations_per_group`` passing annotators keeps its mean and is flagged (``groups.meets_min``):
it is thin, not missing (the leakage fit treats thin groups by its own rule); a group no passing annotator
rated is a missing column.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stereolens.errors import ConfigError, DataError

LAYOUT = "item_id,annotator_id,label,language,group,trait_pair[,repeat][,gold]"


@dataclass
class SurveyMatrices:
    """H matrices built from judgements, and the QC tables behind them."""

    matrices: dict[str, pd.DataFrame]  # LANG -> traits x groups (NaN = missing)
    annotators: pd.DataFrame  # run_qc's annotator table, all languages
    per_language: pd.DataFrame  # language, n_annotators, n_passed, n_failed, pass_rate, ...
    groups: pd.DataFrame  # language, group, n_annotators (passing), rated, meets_min (False: thin or unrated)
    sources: dict[str, str] = field(default_factory=dict)  # LANG -> annotation source(s) of its rows
    min_annotations_per_group: int = 5
    ignored_languages: list[str] = field(default_factory=list)


def _blank(series: pd.Series) -> pd.Series:
    return series.isna() | (series.astype(str).str.strip() == "")


def read_survey_judgements(
    path: str | os.PathLike, traits: Sequence[str], groups: Sequence[str]
) -> pd.DataFrame:
    """Import and validate the judgements with the slider scale; one line naming the row on bad input."""
    from stereolens.annotation.aggregate import split_pair
    from stereolens.annotation.scales import SLIDER_50
    from stereolens.annotation.tasks import import_judgements

    path = Path(path)
    if not path.is_file():
        raise DataError(f"survey judgements not found: {path}")
    df = import_judgements(path, SLIDER_50, source="human")
    for col in ("language", "group", "trait_pair"):
        if col not in df.columns:
            raise DataError(f"{path} lacks column {col!r} (layout: {LAYOUT})")
    bad_lang = _blank(df["language"])
    if bad_lang.any():
        raise DataError(f"{path} line {int(bad_lang.idxmax()) + 2}, column language: empty language")
    df["language"] = df["language"].astype(str).str.strip().str.upper()
    attention = ~_blank(df["gold"]) if "gold" in df.columns else pd.Series(False, index=df.index)
    if "gold" in df.columns:
        gold = pd.to_numeric(df["gold"], errors="coerce")
        bad_gold = attention & gold.isna()
        if bad_gold.any():
            pos = int(bad_gold.idxmax())
            raise DataError(f"{path} line {pos + 2}, column gold: gold {df.at[pos, 'gold']!r} is not a slider position")
        df["gold"] = gold
    known_traits, known_groups = set(traits), set(groups)
    for pos in np.flatnonzero(~attention.to_numpy()):
        row = df.iloc[pos]
        where = f"{path} line {pos + 2}"
        if _blank(pd.Series([row["group"], row["trait_pair"]])).any():
            raise DataError(f"{where}: a rating needs a group and a trait_pair (or a gold answer if it is an attention check)")
        try:
            left, right = split_pair(str(row["trait_pair"]))
        except DataError as exc:
            raise DataError(f"{where}, column trait_pair: {exc}") from None
        unknown = [t for t in (left, right) if t not in known_traits]
        if unknown:
            raise DataError(f"{where}, column trait_pair: trait {unknown[0]!r} of {row['trait_pair']!r} is not in the study's traits.csv")
        if str(row["group"]).strip() not in known_groups:
            raise DataError(f"{where}, column group: group {row['group']!r} is not in the study's groups.csv (the H matrix columns)")
    rating = ~attention
    df.loc[rating, "group"] = df.loc[rating, "group"].astype(str).str.strip()
    df.loc[rating, "trait_pair"] = df.loc[rating, "trait_pair"].astype(str).str.strip()
    # self-agreement compares answers to the same item_id: it must be one question everywhere
    questions = df[rating].groupby("item_id")[["language", "group", "trait_pair"]].nunique()
    clash = questions[(questions > 1).any(axis=1)]
    if len(clash):
        raise DataError(f"{path}: item_id {clash.index[0]!r} names more than one (language, group, trait_pair)")
    return df


def judgements_to_matrices(
    judgements: pd.DataFrame,
    *,
    languages: Sequence[str],
    traits: Sequence[str],
    groups: Sequence[str],
    qc: Any = None,
    checks: pd.DataFrame | None = None,
) -> SurveyMatrices:
    """Quality control and pole-split aggregation per language present in ``judgements`` and ``languages``.

    ``qc`` is a :class:`stereolens.annotation.qc.QCConfig` (default: :func:`qc_config` of nothing, i.e. seed
    001's thresholds with same-pole self-agreement).
    """
    from stereolens.annotation.aggregate import pole_split_mean
    from stereolens.annotation.qc import run_qc

    qc = qc or qc_config(None)
    wanted = [lang.upper() for lang in languages]
    present = list(dict.fromkeys(judgements["language"]))
    matrices: dict[str, pd.DataFrame] = {}
    annotators, per_language, group_tables = [], [], []
    sources: dict[str, str] = {}
    attention = judgements["gold"].notna() if "gold" in judgements.columns else pd.Series(False, index=judgements.index)
    for lang in [lang for lang in wanted if lang in present]:
        sub = judgements[judgements["language"] == lang].reset_index(drop=True)
        sub_attention = attention[judgements["language"] == lang].to_numpy()
        items = None
        if sub_attention.any():
            items = sub.loc[sub_attention, ["item_id", "gold"]].drop_duplicates("item_id")
        lang_checks = None
        if checks is not None:
            lang_checks = checks
            if "language" in checks.columns:
                lang_checks = checks[checks["language"].astype(str).str.upper() == lang]
            lang_checks = lang_checks[lang_checks["annotator_id"].astype(str).isin(set(sub["annotator_id"]))]
        # gold travels in ``items`` only: run_qc merges it onto the judgements, and a second gold column clashes
        report = run_qc(sub.drop(columns=["gold"], errors="ignore"), qc, items=items, checks=lang_checks, group_col="group")
        kept = report.kept[report.kept["group"].notna() & report.kept["trait_pair"].notna()]
        if kept.empty:
            raise DataError(f"survey judgements for {lang}: no annotator passed quality control "
                            f"({int(report.per_language['n_annotators'].sum())} failed)")
        matrix = pole_split_mean(kept, rating_col="label", trait_order=list(traits), group_order=list(groups))
        counts = kept.groupby("group")["annotator_id"].nunique()
        table = pd.DataFrame({"language": lang, "group": list(groups)})
        table["n_annotators"] = table["group"].map(counts).fillna(0).astype(int)
        table["rated"] = table["group"].isin(set(sub.loc[~sub_attention, "group"]))
        # Cao et al. 2024: at least five valid annotations per group.  A group with fewer keeps its mean here and
        # is thin (listed by the human stage, treated by the fit's thin rule): blanking it would make it a
        # missing cell, which the fit fills with 0 as if nobody had rated the group
        table["meets_min"] = table["n_annotators"] >= qc.min_annotations_per_group
        matrices[lang] = matrix
        annotators.append(report.annotators.assign(language=lang))
        per_language.append(report.per_language.assign(language=lang))
        group_tables.append(table)
        sources[lang] = "+".join(sorted(set(sub["source"].astype(str)))) if "source" in sub.columns else "human"
    ignored = [lang for lang in present if lang not in wanted]
    return SurveyMatrices(
        matrices=matrices,
        annotators=pd.concat(annotators, ignore_index=True) if annotators else pd.DataFrame(),
        per_language=pd.concat(per_language, ignore_index=True) if per_language else pd.DataFrame(),
        groups=pd.concat(group_tables, ignore_index=True) if group_tables else pd.DataFrame(),
        sources=sources,
        min_annotations_per_group=int(qc.min_annotations_per_group),
        ignored_languages=ignored,
    )


# Two slider answers agree when they fall on the same pole: exact equality (QCConfig's default, meant
# for closed scales) would fail nearly every annotator of a continuous slider.
SLIDER_QC_DEFAULTS = {"self_agreement_rule": "same_side", "midpoint": 0.0}


def qc_config(cfg: dict[str, Any] | None) -> Any:
    """The ``study.leakage.judgements.qc`` mapping over the slider defaults, as a QCConfig (unknown keys refused)."""
    from stereolens.annotation.qc import QCConfig

    try:
        return QCConfig.from_config({**SLIDER_QC_DEFAULTS, **(cfg or {})})
    except ConfigError as exc:
        raise ConfigError(f"study.leakage.judgements.qc: {exc}") from None
