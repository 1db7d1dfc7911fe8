"""Quality control of annotators and coverage of items (seed 001 appendix A.2).

Seed 001 excluded annotators who failed either of two attention questions, then
compared each annotator's answers on a repeated group with their first answers
and discarded annotators below 80% self-agreement; at least five valid
annotations per group were required.  This module implements those checks for
any judgement table in long format:

- attention checks: rows for items whose ``gold`` answer is known (an ``items``
  table with a ``gold`` column), or a separate ``checks`` table
  (``annotator_id, check_id, passed``);
- repeated items: judgements with ``repeat`` = 1 for the second answer to an item
  the same annotator answered with ``repeat`` = 0;
- coverage: annotations per item, and per group (and language) when those
  columns exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from stereolens.errors import DataError

AgreementRule = Literal["exact", "same_side", "within"]


@dataclass(frozen=True)
class QCConfig:
    # an annotator is discarded below this share of consistent repeated answers
    self_agreement_min: float = 0.8
    # how two answers to a repeated item are compared: exact label, same side of the
    # scale midpoint (slider surveys), or within ``tolerance`` scale units
    self_agreement_rule: AgreementRule = "exact"
    tolerance: float = 0.0
    midpoint: float = 0.0
    # |rating - midpoint| <= neutral_band counts as the neutral side for "same_side"
    neutral_band: float = 0.0
    max_attention_failures: int = 0
    min_annotations_per_item: int = 5
    min_annotations_per_group: int = 5

    @classmethod
    def from_config(cls, cfg: dict[str, Any] | None) -> "QCConfig":
        cfg = dict(cfg or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(cfg) - known)
        if unknown:
            from stereolens.errors import ConfigError

            raise ConfigError(f"unknown key(s) {unknown} in annotation qc config (known: {sorted(known)})")
        return cls(**cfg)


@dataclass
class QCReport:
    annotators: pd.DataFrame  # annotator_id, [language], attention_failures, n_repeats, self_agreement, passed, reason
    kept: pd.DataFrame  # judgements of passing annotators, first answers, attention items removed
    per_language: pd.DataFrame  # language, n_annotators, n_passed, n_failed, pass_rate
    items: pd.DataFrame  # item_id, n_annotations, meets_min
    groups: pd.DataFrame | None = None  # [language], group, n_annotators, meets_min
    config: QCConfig = field(default_factory=QCConfig)

    @property
    def failing_share(self) -> float:
        n = len(self.annotators)
        return float((~self.annotators["passed"]).sum() / n) if n else float("nan")


def _side(values: np.ndarray, midpoint: float, band: float) -> np.ndarray:
    centred = values - midpoint
    return np.where(np.abs(centred) <= band, 0, np.sign(centred))


def answers_agree(first: pd.Series, second: pd.Series, config: QCConfig) -> pd.Series:
    if config.self_agreement_rule == "exact":
        # numbers compare as numbers (a gold 0.0 read from CSV equals an answer 0), the rest as text
        num_a, num_b = pd.to_numeric(first, errors="coerce"), pd.to_numeric(second, errors="coerce")
        both = num_a.notna().to_numpy() & num_b.notna().to_numpy()
        as_text = first.astype(str).str.strip().str.lower().to_numpy() == second.astype(str).str.strip().str.lower().to_numpy()
        return pd.Series(np.where(both, num_a.to_numpy() == num_b.to_numpy(), as_text), index=first.index)
    a = pd.to_numeric(first, errors="coerce").to_numpy(dtype=float)
    b = pd.to_numeric(second, errors="coerce").to_numpy(dtype=float)
    if config.self_agreement_rule == "same_side":
        same = _side(a, config.midpoint, config.neutral_band) == _side(b, config.midpoint, config.neutral_band)
    elif config.self_agreement_rule == "within":
        same = np.abs(a - b) <= config.tolerance
    else:
        raise DataError(f"unknown self_agreement_rule {config.self_agreement_rule!r}")
    return pd.Series(same & ~np.isnan(a) & ~np.isnan(b), index=first.index)


def self_agreement(
    judgements: pd.DataFrame,
    config: QCConfig = QCConfig(),
    *,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
    repeat_col: str = "repeat",
) -> pd.DataFrame:
    """Per annotator with repeated items: ``n_repeats`` and ``self_agreement`` (share consistent)."""
    if repeat_col not in judgements.columns:
        return pd.DataFrame(columns=[annotator_col, "n_repeats", "self_agreement"])
    rep = pd.to_numeric(judgements[repeat_col], errors="coerce").fillna(0).astype(int)
    first = judgements[rep == 0][[annotator_col, item_col, label_col]]
    second = judgements[rep > 0][[annotator_col, item_col, label_col]]
    pairs = second.merge(first, on=[annotator_col, item_col], how="left", suffixes=("_repeat", "_first"))
    orphan = pairs[f"{label_col}_first"].isna()
    if orphan.any():
        row = pairs[orphan].iloc[0]
        raise DataError(
            f"repeated answer without a first answer: item {row[item_col]!r}, annotator {row[annotator_col]!r}"
        )
    pairs["agree"] = answers_agree(pairs[f"{label_col}_first"], pairs[f"{label_col}_repeat"], config).to_numpy()
    out = pairs.groupby(annotator_col)["agree"].agg(n_repeats="size", self_agreement="mean").reset_index()
    return out


def attention_failures(
    judgements: pd.DataFrame,
    items: pd.DataFrame | None = None,
    checks: pd.DataFrame | None = None,
    *,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
) -> pd.DataFrame:
    """Per annotator: ``attention_checks`` answered and ``attention_failures``."""
    frames = []
    if items is not None and "gold" in items.columns:
        gold = items.dropna(subset=["gold"])[[item_col, "gold"]]
        answered = judgements.merge(gold, on=item_col, how="inner")
        ok = answers_agree(answered[label_col], answered["gold"], QCConfig(self_agreement_rule="exact"))
        frames.append(pd.DataFrame({annotator_col: answered[annotator_col].to_numpy(), "passed": ok.to_numpy()}))
    if checks is not None:
        missing = [c for c in (annotator_col, "passed") if c not in checks.columns]
        if missing:
            raise DataError(f"attention-check table lacks column(s) {missing}")
        passed = checks["passed"].map(lambda v: str(v).strip().lower() in ("1", "true", "yes", "pass", "passed"))
        frames.append(pd.DataFrame({annotator_col: checks[annotator_col].to_numpy(), "passed": passed.to_numpy()}))
    if not frames:
        return pd.DataFrame(columns=[annotator_col, "attention_checks", "attention_failures"])
    all_checks = pd.concat(frames, ignore_index=True)
    return (
        all_checks.groupby(annotator_col)["passed"]
        .agg(attention_checks="size", attention_failures=lambda s: int((~s.astype(bool)).sum()))
        .reset_index()
    )


def run_qc(
    judgements: pd.DataFrame,
    config: QCConfig = QCConfig(),
    *,
    items: pd.DataFrame | None = None,
    checks: pd.DataFrame | None = None,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
    repeat_col: str = "repeat",
    language_col: str = "language",
    group_col: str | None = "group",
) -> QCReport:
    """Apply attention and self-agreement checks, then count coverage over the kept judgements."""
    ann = pd.DataFrame({annotator_col: pd.unique(judgements[annotator_col])})
    has_language = language_col in judgements.columns
    if has_language:
        lang = judgements.groupby(annotator_col, sort=False)[language_col].first()
        ann[language_col] = ann[annotator_col].map(lang)
    att = attention_failures(judgements, items, checks, item_col=item_col, annotator_col=annotator_col, label_col=label_col)
    sa = self_agreement(judgements, config, item_col=item_col, annotator_col=annotator_col, label_col=label_col, repeat_col=repeat_col)
    ann = ann.merge(att, on=annotator_col, how="left").merge(sa, on=annotator_col, how="left")
    for col in ("attention_checks", "attention_failures", "n_repeats"):
        ann[col] = pd.to_numeric(ann[col], errors="coerce").fillna(0).astype(int)
    ann["self_agreement"] = pd.to_numeric(ann["self_agreement"], errors="coerce")

    reasons = []
    for row in ann.itertuples(index=False):
        why = []
        if row.attention_failures > config.max_attention_failures:
            why.append(f"failed {row.attention_failures} attention check(s)")
        if row.n_repeats and row.self_agreement < config.self_agreement_min:
            why.append(f"self-agreement {row.self_agreement:.2f} < {config.self_agreement_min}")
        reasons.append("; ".join(why))
    ann["reason"] = reasons
    ann["passed"] = ann["reason"] == ""

    passed_ids = set(ann.loc[ann["passed"], annotator_col])
    kept = judgements[judgements[annotator_col].isin(passed_ids)]
    if repeat_col in kept.columns:
        kept = kept[pd.to_numeric(kept[repeat_col], errors="coerce").fillna(0).astype(int) == 0]
    if items is not None and "gold" in items.columns:
        attention_items = set(items.dropna(subset=["gold"])[item_col])
        kept = kept[~kept[item_col].isin(attention_items)]
    kept = kept.reset_index(drop=True)

    if has_language:
        per_language = ann.groupby(language_col).agg(n_annotators=("passed", "size"), n_passed=("passed", "sum")).reset_index()
    else:
        per_language = pd.DataFrame({language_col: ["all"], "n_annotators": [len(ann)], "n_passed": [int(ann["passed"].sum())]})
    per_language["n_failed"] = per_language["n_annotators"] - per_language["n_passed"]
    per_language["pass_rate"] = per_language["n_passed"] / per_language["n_annotators"]

    item_counts = kept.groupby(item_col).size().rename("n_annotations").reset_index()
    if items is not None and item_col in items.columns:
        wanted = items if "gold" not in items.columns else items[items["gold"].isna()]
        item_counts = wanted[[item_col]].drop_duplicates().merge(item_counts, on=item_col, how="left")
        item_counts["n_annotations"] = item_counts["n_annotations"].fillna(0).astype(int)
    item_counts["meets_min"] = item_counts["n_annotations"] >= config.min_annotations_per_item

    groups = None
    if group_col and group_col in kept.columns:
        keys = [language_col, group_col] if has_language else [group_col]
        groups = kept.groupby(keys)[annotator_col].nunique().rename("n_annotators").reset_index()
        groups["meets_min"] = groups["n_annotators"] >= config.min_annotations_per_group

    return QCReport(annotators=ann, kept=kept, per_language=per_language, items=item_counts, groups=groups, config=config)
