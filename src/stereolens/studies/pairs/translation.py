"""Translation (seed 002 section 3.6, appendix F): machine translation through the model layer,
marked ``machine``, and import of reviewed translations with the Table 11 error categories."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd

from stereolens.errors import DataError
from stereolens.io import read_csv_checked
from stereolens.studies.pairs.generation import TRANSLATION_PROMPT
from stereolens.studies.pairs.minimal_pairs import Group, non_identity_changes

ERROR_CATEGORIES = ("gender_agreement", "literal_translation", "lexical_borrowing", "other")
REVIEW_STATUSES = ("approved", "corrected", "rejected")
REVIEW_COLUMNS = ("pair_id", "language", "sent_stereo", "sent_anti", "reviewer", "status", "error_categories")


def machine_translate(lm, pairs: pd.DataFrame, *, language: str, language_name: str, script: str,
                      max_tokens: int = 48, chat: bool = False) -> pd.DataFrame:
    """Both sentences of every pair translated by ``lm`` (one batched, cached call); the first
    output line is the translation.  Rows are marked ``translation_status=machine``."""
    from stereolens.models.base import ChatMessage, GenerationRequest

    sentences = [*pairs["sent_stereo"], *pairs["sent_anti"]]
    prompts = [TRANSLATION_PROMPT.format(language_name=language_name, script=script, sentence=s) for s in sentences]
    if chat:
        requests = [GenerationRequest(messages=(ChatMessage("user", q),), max_tokens=max_tokens) for q in prompts]
    else:
        requests = [GenerationRequest(prompt=q, max_tokens=max_tokens, stop=("\n",)) for q in prompts]
    out = [g.text.strip().splitlines()[0].strip() if g.text.strip() else "" for g in lm.generate(requests)]
    n = len(pairs)
    return pairs.assign(language=language, sent_stereo=out[:n], sent_anti=out[n:], translation_status="machine")


def flag_translations(translated: pd.DataFrame, groups: Sequence[Group], *, language: str) -> pd.DataFrame:
    """``minimal_ok`` and ``minimal_issue``: a translated pair whose two sentences differ in more than
    the identity term (in the target language's or the English surface forms) is flagged."""
    by_name = {g.name: g for g in groups}
    ok, issue = [], []
    for row in translated.to_dict("records"):
        a, b = by_name.get(row["group_stereo"]), by_name.get(row["group_anti"])
        forms_a = [*(a.surface(language) if a else ()), *(a.surface() if a else ())]
        forms_b = [*(b.surface(language) if b else ()), *(b.surface() if b else ())]
        bad = non_identity_changes(str(row["sent_stereo"]), str(row["sent_anti"]), forms_a, forms_b)
        ok.append(not bad)
        issue.append("; ".join(bad))
    return translated.assign(minimal_ok=ok, minimal_issue=issue)


def import_reviewed(path: str | os.PathLike, known_pairs: Sequence[str] | None = None) -> pd.DataFrame:
    """Reviewed translations: ``pair_id, language, sent_stereo, sent_anti, reviewer, status,
    error_categories`` (status approved / corrected / rejected; categories ``;``-separated from
    Table 11, empty for none).  Errors name the file, row and column."""
    df = read_csv_checked(path, REVIEW_COLUMNS, what="reviewed translations", keep_default_na=False, dtype=str)
    known = set(map(str, known_pairs)) if known_pairs is not None else None
    for i, row in enumerate(df.to_dict("records")):
        line = i + 2
        if row["status"] not in REVIEW_STATUSES:
            raise DataError(f"{path} line {line}, column status: {row['status']!r} is not one of "
                            f"{', '.join(REVIEW_STATUSES)}")
        cats = [c.strip() for c in row["error_categories"].split(";") if c.strip()]
        unknown = [c for c in cats if c not in ERROR_CATEGORIES]
        if unknown:
            raise DataError(f"{path} line {line}, column error_categories: {unknown[0]!r} is not one of "
                            f"{', '.join(ERROR_CATEGORIES)}")
        if row["status"] != "rejected" and (not row["sent_stereo"].strip() or not row["sent_anti"].strip()):
            raise DataError(f"{path} line {line}: an {row['status']} translation needs sent_stereo and sent_anti")
        if not row["reviewer"].strip():
            raise DataError(f"{path} line {line}, column reviewer: empty reviewer")
        if known is not None and row["pair_id"] not in known:
            raise DataError(f"{path} line {line}, column pair_id: {row['pair_id']!r} is not a constructed pair")
    return df.assign(translation_status="reviewed")


def merge_reviewed(machine: pd.DataFrame, reviewed: pd.DataFrame | None) -> pd.DataFrame:
    """Reviewed rows replace machine ones (rejected pairs leave); the rest stay ``machine``."""
    if reviewed is None or reviewed.empty:
        return machine
    out = machine.set_index(["pair_id", "language"])
    for row in reviewed.to_dict("records"):
        key = (row["pair_id"], row["language"])
        if key not in out.index:
            continue
        if row["status"] == "rejected":
            out = out.drop(index=key)
            continue
        for col in ("sent_stereo", "sent_anti"):
            out.loc[key, col] = row[col]
        out.loc[key, "translation_status"] = "reviewed"
        out.loc[key, "error_categories"] = row["error_categories"]
        out.loc[key, "reviewer"] = row["reviewer"]
    return out.reset_index()


def error_category_counts(reviewed: pd.DataFrame | None) -> dict[str, int]:
    counts = {c: 0 for c in ERROR_CATEGORIES}
    if reviewed is None:
        return counts
    for value in reviewed["error_categories"]:
        for c in str(value).split(";"):
            if c.strip() in counts:
                counts[c.strip()] += 1
    return counts
