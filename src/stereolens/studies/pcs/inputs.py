"""What the pcs analysis reads besides the judged scores: the human-validation preferences (and the
pairs the round left out for an invalid response) and the collected responses (their validity and the
translation status of their prompts)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from stereolens.io import read_csv_checked

# how the report names each prompt translation status
TRANSLATION_STATUS_LABELS = {"authored": "authored (machine-written translation, unreviewed)",
                             "source": "source (English original)"}


def read_preferences(path: str | os.PathLike) -> tuple[pd.DataFrame | None, str | None]:
    """The decided human-validation preferences at ``path`` and their source(s) (None, None when absent)."""
    if not Path(path).exists():
        return None, None
    prefs = read_csv_checked(path, ["language", "comparison", "preference", "decided", "source"],
                             what="human-validation preferences", keep_default_na=False)
    decided = prefs.loc[prefs["decided"].astype(str).str.lower() == "true"]
    return decided, ", ".join(sorted(prefs["source"].astype(str).unique())) or None


def read_excluded_pairs(path: str | os.PathLike) -> pd.DataFrame | None:
    """The human-validation pairs the round left out for an invalid response (None when the file is absent)."""
    if not Path(path).exists():
        return None
    return read_csv_checked(path, ["language", "comparison", "invalid_reason"], what="excluded human-validation pairs",
                            keep_default_na=False, allow_empty=True)


def read_responses(path: str | os.PathLike) -> pd.DataFrame | None:
    """The collected responses with what the analysis needs of them (None when absent)."""
    if not Path(path).exists():
        return None
    return read_csv_checked(path, ["response_id", "scenario_id", "domain", "translation_status", "invalid_reason"],
                            what="pcs responses", keep_default_na=False)


def with_domains(scores: pd.DataFrame, responses: pd.DataFrame) -> pd.DataFrame:
    """``scores`` with each scenario's domain (what the report lists as the domains that ran)."""
    domains = responses.drop_duplicates("scenario_id").set_index("scenario_id")["domain"]
    return scores.assign(domain=scores["scenario_id"].map(domains))


def with_invalid_reasons(scores: pd.DataFrame, responses: pd.DataFrame) -> pd.DataFrame:
    """``scores`` with each response's ``invalid_reason`` (empty = valid).

    A judged response the validity check flagged (the default judges wrong-language replies) stays
    out of the analysis: ``analyze_scores`` drops it and counts it.
    """
    reasons = responses.set_index("response_id")["invalid_reason"]
    return scores.assign(invalid_reason=scores["response_id"].map(reasons).fillna(""))


def translation_status_line(responses: pd.DataFrame) -> str:
    """Responses per prompt translation status, as the report states it (machine-written prompts no reviewer
    has seen are labelled as such)."""
    counts = responses["translation_status"].value_counts()
    return ", ".join(f"{TRANSLATION_STATUS_LABELS.get(k, k)}: {v}" for k, v in counts.items())
