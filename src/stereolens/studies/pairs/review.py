"""The manual sentence review (AmchiBias section 3.4) as an annotation-layer round: a task file with
keep / rewrite / remove per sentence, and the import that applies the decisions."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import DataError

REVIEW_SCALE = Scale("sentence_review", "nominal", options=("keep", "rewrite", "remove"))
INSTRUCTIONS = ("Keep, rewrite or remove each sentence. Remove or rewrite sentences that are incoherent, culturally "
                "inaccurate, template-like or restate the attribute; give the rewritten sentence under 'rewrite' and "
                "your reason under 'reason'.")
# the text boxes of the Label Studio config (control name -> prompt); the CSV task file has these columns
REVIEW_FIELDS = {"rewrite": "Rewritten sentence (only when you choose rewrite)", "reason": "Reason (rewrite or remove)"}


def export_review(sentences: pd.DataFrame, out_dir: str | os.PathLike):
    from stereolens.annotation.tasks import export_tasks

    items = sentences.assign(item_id=sentences["sentence_id"], text=sentences["sentence"])
    return export_tasks(items[["item_id", "text", "group", "attribute"]], REVIEW_SCALE, INSTRUCTIONS, out_dir,
                        name="sentence_review", text_fields=REVIEW_FIELDS)


def apply_review(sentences: pd.DataFrame, path: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kept, removed) after the decisions in ``path`` (``item_id, annotator_id, label[, rewrite, reason]``,
    or a Label Studio export of the review tasks).  The last decision per sentence counts: the latest
    ``timestamp`` (then the higher ``annotation_id``) where the file has them, else the last row.
    Sentences without a decision stay ``unreviewed``."""
    from stereolens.annotation.tasks import import_judgements

    review = import_judgements(path, REVIEW_SCALE, known_items=sentences["sentence_id"], source="human")
    latest = latest_decisions(review)
    position = dict(zip(latest["item_id"], latest.index))
    decisions = latest.set_index("item_id")
    out = sentences.copy()
    for column in ("rewrite", "reason"):
        if column not in decisions.columns:
            decisions[column] = ""
    for idx, sid in out["sentence_id"].items():
        if sid not in decisions.index:
            continue
        d = decisions.loc[sid]
        out.loc[idx, "review_status"] = f"reviewed:{d['label']}"
        out.loc[idx, "review_reason"] = "" if pd.isna(d["reason"]) else str(d["reason"])
        if d["label"] == "rewrite":
            rewrite = "" if pd.isna(d["rewrite"]) else str(d["rewrite"]).strip()
            if not rewrite:
                where = (f"annotation {int(d['annotation_id'])}" if "annotation_id" in decisions.columns
                         else f"line {int(position[sid]) + 2}")
                raise DataError(f"{path} {where}, column rewrite: sentence {sid} is marked rewrite but has no rewrite")
            out.loc[idx, "sentence"] = rewrite
    dropped = out["review_status"] == "reviewed:remove"
    return out[~dropped], out[dropped].assign(reason="review: remove")


def latest_decisions(review: pd.DataFrame) -> pd.DataFrame:
    """The last decision per item: ordered by ``timestamp`` then ``annotation_id`` where present (a stable
    sort, so rows without either keep the file's order)."""
    keys = [c for c in ("timestamp", "annotation_id") if c in review.columns]
    ordered = review
    if keys:
        order = review.assign(_time=pd.to_datetime(review.get("timestamp"), utc=True, errors="coerce")
                              if "timestamp" in review.columns else 0)
        ordered = order.sort_values(["_time", *[k for k in keys if k != "timestamp"]], kind="mergesort",
                                    na_position="first").drop(columns="_time")
    return ordered.drop_duplicates("item_id", keep="last")


def curate_sentences(generated: pd.DataFrame, *, max_words: int, min_words: int, near_duplicate_ratio: float,
                     synonyms: Mapping[str, Sequence[str]], group_terms: Mapping[str, Sequence[str]],
                     review_dir: str | os.PathLike, review_path: str | os.PathLike | None = None,
                     ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The automatic filters with their reasons, the review task file under ``review_dir``, and the
    decisions in ``review_path`` when given: (kept, removed, filter summary)."""
    from stereolens.studies.pairs.filters import filter_sentences

    kept, removed = filter_sentences(generated, max_words=max_words, min_words=min_words,
                                     near_duplicate_ratio=near_duplicate_ratio, synonyms=synonyms,
                                     group_terms=group_terms)
    export_review(kept, review_dir)
    kept = kept.assign(review_status="unreviewed", review_reason="")
    if review_path:
        kept, dropped = apply_review(kept, review_path)
        removed = pd.concat([removed, dropped], ignore_index=True)
    reasons = removed["reason"].str.split(r" \(| of | into | '", regex=True).str[0].value_counts().to_dict() \
        if len(removed) else {}
    summary = {"generated": len(generated), "kept": len(kept), "removed": len(removed), "reasons": reasons,
               "reviewed": bool(review_path)}
    return kept, removed, summary
