"""The stereo study's per-instance scores as a file: the columns a scores table has and the checks it passes
before any statistic reads it (``stereolens stereo evaluate``, the ``stereo-paired`` stage).  Kept apart from
``evaluation.py`` so that reading scores does not import the scorer and the models."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import score_column
from stereolens.stats.stereoset import CANDIDATE_SCORES, DEFAULT_CANDIDATE_SCORE

SCORE_INPUT_COLUMNS = ("id", "country", "category", "target", "score_stereo", "score_anti", "score_unrelated")


def refuse_duplicate_ids(df: pd.DataFrame, where: str | Path) -> None:
    dup = df["id"].duplicated()
    if dup.any():
        row = int(dup.idxmax())
        first = int(df.index[df["id"] == df.at[row, "id"]][0])
        raise DataError(f"{where} line {row + 2}, column id: {df.at[row, 'id']!r} already on line {first + 2}")


def check_scores(df: pd.DataFrame, where: str, *, score: str = DEFAULT_CANDIDATE_SCORE) -> pd.DataFrame:
    """Scores as finite numbers and filled labels, else one line naming the file, line and column (``df`` read as text).

    ``score`` says what the scores are (:data:`CANDIDATE_SCORES`): ``mean`` and ``sum`` are log-likelihoods, never
    positive; ``stereoset_generative`` scores are ratios of two negative means, positive by construction."""
    if score not in CANDIDATE_SCORES:
        raise ConfigError(f"--score must be one of {', '.join(CANDIDATE_SCORES)}, got {score!r}")
    for col in ("id", "country", "category", "target"):
        bad = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if bad.any():
            raise DataError(f"{where} line {int(bad.idxmax()) + 2}, column {col}: empty")
    refuse_duplicate_ids(df, where)
    for col in ("score_stereo", "score_anti", "score_unrelated"):
        generative = score == "stereoset_generative"
        df[col] = score_column(df[col], where=where, column=col, log_likelihood=not generative,
                               ratio_of_negatives=generative)
    return df
