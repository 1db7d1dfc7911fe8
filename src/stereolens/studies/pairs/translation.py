"""Translation (AmchiBias section 3.6, appendix F): machine translation through the model layer,
marked ``machine``, and import of reviewed translations with the Table 11 error categories."""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from stereolens.errors import DataError
from stereolens.io import read_csv_checked
from stereolens.studies.pairs.generation import TRANSLATION_PROMPT
from stereolens.studies.pairs.minimal_pairs import CaseSuffixes, Group, minimality_problems

ERROR_CATEGORIES = ("gender_agreement", "literal_translation", "lexical_borrowing", "other")
REVIEW_STATUSES = ("approved", "corrected", "rejected")
REVIEW_COLUMNS = ("pair_id", "language", "sent_stereo", "sent_anti", "reviewer", "status", "error_categories")


def machine_translate(lm, pairs: pd.DataFrame, *, language: str, language_name: str, script: str,
                      max_tokens: int = 48) -> pd.DataFrame:
    """Both sentences of every pair translated by ``lm`` (one batched, cached call; a user message
    for a model with a chat format, a completion prompt for a base model); the first output line is
    the translation.  Rows are marked ``translation_status=machine``."""
    from stereolens.models.base import ChatMessage, GenerationRequest

    sentences = [*pairs["sent_stereo"], *pairs["sent_anti"]]
    prompts = [TRANSLATION_PROMPT.format(language_name=language_name, script=script, sentence=s) for s in sentences]
    if lm.takes_chat_messages:
        requests = [GenerationRequest(messages=(ChatMessage("user", q),), max_tokens=max_tokens) for q in prompts]
    else:
        requests = [GenerationRequest(prompt=q, max_tokens=max_tokens, stop=("\n",)) for q in prompts]
    out = [g.text.strip().splitlines()[0].strip() if g.text.strip() else "" for g in lm.generate(requests)]
    n = len(pairs)
    return pairs.assign(language=language, sent_stereo=out[:n], sent_anti=out[n:], translation_status="machine")


def flag_translations(translated: pd.DataFrame, groups: Sequence[Group], *, language: str,
                      suffixes: Mapping[str, CaseSuffixes] | None = None) -> pd.DataFrame:
    """``minimal_ok`` and ``minimal_issue`` for every row: a translated pair whose two sentences differ
    in more than the identity term (the target language's or the English surface forms, a target form
    with one of ``suffixes[language]``'s case suffixes), are identical, or keep a form of the stereotyped
    group in the counter-sentence is flagged."""
    by_name = {g.name: g for g in groups}
    ok, issue = [], []
    for row in translated.to_dict("records"):
        bad = minimality_problems(str(row["sent_stereo"]), str(row["sent_anti"]), by_name.get(row["group_stereo"]),
                                  by_name.get(row["group_anti"]), languages=dict.fromkeys((language, "en")),
                                  suffixes=suffixes)
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


def script_share(text: str, script: str) -> float:
    """Share of the letters of ``text`` whose Unicode name starts with ``script`` ("Devanagari")."""
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return 0.0
    return sum(unicodedata.name(ch, "").startswith(script.upper()) for ch in letters) / len(letters)


def merge_reviewed(machine: pd.DataFrame, reviewed: pd.DataFrame | None, groups: Sequence[Group],
                   scripts: dict[str, str] | None = None, suffixes: Mapping[str, CaseSuffixes] | None = None,
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reviewed rows replace machine ones (rejected pairs leave); the rest stay ``machine``.

    Every reviewed pair is checked for minimality again and carries that result (a corrected
    translation can fix a flagged pair or break a good one; an approved pair whose two sentences are
    identical is no pair; ``suffixes`` as in :func:`flag_translations`).  A reviewed row is not used
    when no machine translation has its ``(pair_id, language)`` or when its text is not in the language's script (``scripts``:
    language -> script name, e.g. ``{"kok": "Devanagari"}``).  Returns the merged table and one
    row per reviewed row: ``pair_id, language, status, used, reason``."""
    usage = []
    if reviewed is None or reviewed.empty:
        return machine, pd.DataFrame(usage, columns=["pair_id", "language", "status", "used", "reason"])
    by_name = {g.name: g for g in groups}
    out = machine.set_index(["pair_id", "language"])
    translated = set(machine.loc[machine.get("translation_status", pd.Series(dtype=str)).isin(
        ["machine", "reviewed"]), ["pair_id", "language"]].itertuples(index=False, name=None))
    for row in reviewed.to_dict("records"):
        key = (row["pair_id"], row["language"])
        note = {"pair_id": row["pair_id"], "language": row["language"], "status": row["status"]}
        script = (scripts or {}).get(row["language"])
        if key not in translated or key not in out.index:
            usage.append({**note, "used": False, "reason": f"no machine translation of {row['pair_id']} into "
                                                           f"{row['language']!r}"})
            continue
        if row["status"] != "rejected" and script and min(script_share(row["sent_stereo"], script),
                                                          script_share(row["sent_anti"], script)) < 0.5:
            usage.append({**note, "used": False, "reason": f"not in {script} script, the script of "
                                                           f"{row['language']!r}"})
            continue
        usage.append({**note, "used": True, "reason": ""})
        if row["status"] == "rejected":
            out = out.drop(index=key)
            continue
        for col in ("sent_stereo", "sent_anti"):
            out.loc[key, col] = row[col]
        out.loc[key, "translation_status"] = "reviewed"
        out.loc[key, "error_categories"] = row["error_categories"]
        out.loc[key, "reviewer"] = row["reviewer"]
        bad = minimality_problems(row["sent_stereo"], row["sent_anti"], by_name.get(out.loc[key, "group_stereo"]),
                                  by_name.get(out.loc[key, "group_anti"]), languages=dict.fromkeys((key[1], "en")),
                                  suffixes=suffixes)
        out.loc[key, "minimal_ok"] = not bad
        out.loc[key, "minimal_issue"] = "; ".join(bad)
    return out.reset_index(), pd.DataFrame(usage, columns=["pair_id", "language", "status", "used", "reason"])


def error_category_counts(reviewed: pd.DataFrame | None, usage: pd.DataFrame | None = None) -> dict[str, int]:
    """Table 11 category counts over the reviewed rows that were used (``usage`` from :func:`merge_reviewed`)."""
    counts = {c: 0 for c in ERROR_CATEGORIES}
    if reviewed is None:
        return counts
    if usage is not None:
        used = set(usage.loc[usage["used"].astype(bool), ["pair_id", "language"]].itertuples(index=False, name=None))
        reviewed = reviewed[[k in used for k in zip(reviewed["pair_id"], reviewed["language"])]]
    for value in reviewed["error_categories"]:
        for c in str(value).split(";"):
            if c.strip() in counts:
                counts[c.strip()] += 1
    return counts


def _not_minimal(table: pd.DataFrame) -> pd.Series:
    return table.get("minimal_ok", pd.Series(dtype=bool)).astype(str).str.lower() == "false"


def translate_pairs(lm, english: pd.DataFrame, *, targets: Sequence[Mapping[str, str]], groups: Sequence[Group],
                    max_tokens: int, generator: str, reviewed_path: str | os.PathLike | None = None,
                    suffixes: Mapping[str, CaseSuffixes] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The English pairs and their machine translations into every target (``language, name,
    script``), flagged when not minimal (a target form may carry one of ``suffixes``' case suffixes),
    with reviewed translations from ``reviewed_path`` merged in: (the table, the translation summary)."""
    frames = [english]
    for target in targets:
        machine = machine_translate(lm, english, language=target["language"], language_name=target["name"],
                                    script=target["script"], max_tokens=max_tokens)
        machine = machine.assign(source=f"machine translation:{generator}")
        frames.append(flag_translations(machine, groups, language=target["language"], suffixes=suffixes))
    out = pd.concat(frames, ignore_index=True)
    reviewed = import_reviewed(reviewed_path, known_pairs=english["pair_id"]) if reviewed_path else None
    out, usage = merge_reviewed(out, reviewed, groups, scripts={t["language"]: t["script"] for t in targets},
                                suffixes=suffixes)
    is_reviewed = out["translation_status"] == "reviewed"
    summary = {"generator": generator, "machine": int((out["translation_status"] == "machine").sum()),
               "reviewed": int(is_reviewed.sum()), "flagged_not_minimal": int(_not_minimal(out).sum()),
               "reviewed_flagged_not_minimal": int((is_reviewed & _not_minimal(out)).sum()),
               "review_rows": len(usage), "review_rows_used": int(usage["used"].sum()) if len(usage) else 0,
               "review_rows_not_used": usage.loc[~usage["used"].astype(bool)].to_dict("records") if len(usage) else [],
               "error_categories": error_category_counts(reviewed, usage)}
    return out, summary
