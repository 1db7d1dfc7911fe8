"""The manual sentence review (seed 002 section 3.4) as an annotation-layer round: a task file with
keep / rewrite / remove per sentence, and the import that applies the decisions."""

from __future__ import annotations

import os

import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import DataError

REVIEW_SCALE = Scale("sentence_review", "nominal", options=("keep", "rewrite", "remove"))
INSTRUCTIONS = ("Keep, rewrite or remove each sentence. Remove or rewrite sentences that are incoherent, culturally "
                "inaccurate, template-like or restate the attribute; give the rewrite in column 'rewrite' and the "
                "reason in column 'reason'.")


def export_review(sentences: pd.DataFrame, out_dir: str | os.PathLike):
    from stereolens.annotation.tasks import export_tasks

    items = sentences.assign(item_id=sentences["sentence_id"], text=sentences["sentence"])
    return export_tasks(items[["item_id", "text", "group", "attribute"]], REVIEW_SCALE, INSTRUCTIONS, out_dir,
                        name="sentence_review")


def apply_review(sentences: pd.DataFrame, path: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kept, removed) after the decisions in ``path`` (``item_id, annotator_id, label[, rewrite, reason]``;
    the last decision per sentence counts).  Sentences without a decision stay ``unreviewed``."""
    from stereolens.annotation.tasks import import_judgements

    review = import_judgements(path, REVIEW_SCALE, known_items=sentences["sentence_id"], source="human")
    decisions = review.drop_duplicates("item_id", keep="last").set_index("item_id")
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
                row = int(review.index[review["item_id"] == sid][-1]) + 2
                raise DataError(f"{path} line {row}, column rewrite: sentence {sid} is marked rewrite but has no rewrite")
            out.loc[idx, "sentence"] = rewrite
    dropped = out["review_status"] == "reviewed:remove"
    return out[~dropped], out[dropped].assign(reason="review: remove")
