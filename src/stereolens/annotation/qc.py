"""Quality control of annotators and coverage of items (Cao et al. 2024 appendix A.2).

Cao et al. 2024 excluded annotators who failed either of two attention questions, then
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
  columns exist, counted over every item and group in the input so that one
  whose annotators all failed QC shows up with zero annotations.

Unanswered attention checks (``unanswered_check_is_failure``, default on): an
annotator who skips a check cannot be shown to have read the task, so a skipped
check counts as a failed one.  Which checks an annotator was given is read from

- a ``checks`` row with an empty ``passed`` (assigned, not answered), or a
  ``checks`` row whose ``check_id`` is a gold item (assigned; passed or failed
  from that annotator's judgement on it, unanswered if there is none);
- otherwise, with gold items but no assignment rows for an annotator: if they
  answered none of the gold items, one check counts as unanswered (at least one
  must have been shown; which ones is unknown, so no more are charged).

Annotators without a repeated item cannot be checked for self-agreement; they
are kept (``self_agreement_checked`` false, counted as ``n_without_repeat`` per
language) unless ``require_repeat`` is set.
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
    # a check an annotator was given but did not answer counts as failed
    unanswered_check_is_failure: bool = True
    # fail annotators who have no repeated item (their self-agreement is unknown)
    require_repeat: bool = False

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
    # annotator_id, [language], attention_checks, attention_unanswered, attention_failures, n_repeats,
    # self_agreement, self_agreement_checked, reason, passed
    annotators: pd.DataFrame
    kept: pd.DataFrame  # judgements of passing annotators, first answers, attention items removed
    per_language: pd.DataFrame  # language, n_annotators, n_passed, n_failed, pass_rate, n_without_repeat
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


_PASSED_TRUE = ("1", "true", "yes", "pass", "passed")
_PASSED_FALSE = ("0", "false", "no", "fail", "failed")


def _passed_value(value: Any) -> float:
    """1.0 passed, 0.0 failed, NaN not answered (empty cell)."""
    if value is None or (isinstance(value, float) and value != value):
        return float("nan")
    text = str(value).strip().lower()
    if text in ("", "nan", "none", "null"):
        return float("nan")
    if text in _PASSED_TRUE:
        return 1.0
    if text in _PASSED_FALSE:
        return 0.0
    raise DataError(f"attention-check table: passed={value!r} is not one of {_PASSED_TRUE + _PASSED_FALSE} or empty")


def attention_failures(
    judgements: pd.DataFrame,
    items: pd.DataFrame | None = None,
    checks: pd.DataFrame | None = None,
    *,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
    unanswered_is_failure: bool = True,
) -> pd.DataFrame:
    """Per annotator: ``attention_checks`` (given), ``attention_unanswered`` and ``attention_failures``.

    A check is a judgement on a gold item (compared with ``gold``) or a row of the
    ``checks`` table.  Which checks were given, and so which went unanswered, is
    read as the module docstring describes; with ``unanswered_is_failure`` the
    unanswered ones are added to ``attention_failures``.
    """
    columns = [annotator_col, "attention_checks", "attention_unanswered", "attention_failures"]
    # one row per (annotator, check): passed is 1.0, 0.0 or NaN (given but not answered)
    frames = []
    gold = None
    if items is not None and "gold" in items.columns:
        gold = items.dropna(subset=["gold"])[[item_col, "gold"]].drop_duplicates(item_col)
        # the items table is the one authority on gold answers: a ``gold`` column the
        # judgements happen to carry would otherwise collide in the merge
        answered = (judgements.drop(columns=["gold"], errors="ignore").dropna(subset=[label_col])
                    .merge(gold, on=item_col, how="inner"))
        ok = answers_agree(answered[label_col], answered["gold"], QCConfig(self_agreement_rule="exact"))
        frames.append(pd.DataFrame({
            annotator_col: answered[annotator_col].to_numpy(), "check": answered[item_col].astype(str).to_numpy(),
            "passed": ok.to_numpy(dtype=float),
        }))
    assigned_gold: set = set()
    if checks is not None:
        missing = [c for c in (annotator_col,) if c not in checks.columns]
        if "passed" not in checks.columns and "check_id" not in checks.columns:
            missing.append("passed (or check_id naming gold items)")
        if missing:
            raise DataError(f"attention-check table lacks column(s) {missing}")
        table = checks.reset_index(drop=True)
        check_ids = table["check_id"].astype(str) if "check_id" in table.columns else pd.Series(
            [f"check{k}" for k in range(len(table))])
        passed = table["passed"].map(_passed_value) if "passed" in table.columns else pd.Series(np.nan, index=table.index)
        is_gold = check_ids.isin(set(gold[item_col].astype(str))) if gold is not None else pd.Series(False, index=table.index)
        # a gold item named in the checks table is an assignment: its outcome comes from the judgement
        for ann, check in zip(table.loc[is_gold, annotator_col], check_ids[is_gold]):
            assigned_gold.add((ann, check))
        own = ~is_gold
        frames.append(pd.DataFrame({
            annotator_col: table.loc[own, annotator_col].to_numpy(), "check": check_ids[own].to_numpy(),
            "passed": passed[own].to_numpy(dtype=float),
        }))
    if not frames:
        return pd.DataFrame(columns=columns)
    all_checks = pd.concat(frames, ignore_index=True)
    extra = []
    answered_pairs = set(zip(all_checks[annotator_col], all_checks["check"]))
    extra += [(ann, check) for ann, check in sorted(assigned_gold, key=str) if (ann, check) not in answered_pairs]
    if gold is not None and len(gold):
        with_gold_rows = {ann for ann, _ in assigned_gold} | set(frames[0][annotator_col])
        everyone = pd.unique(pd.concat([judgements[annotator_col], checks[annotator_col] if checks is not None else
                                        pd.Series(dtype=object)], ignore_index=True))
        # no assignment known and no gold item answered: at least one check was skipped
        extra += [(ann, "(any gold item)") for ann in everyone if ann not in with_gold_rows]
    if extra:
        all_checks = pd.concat([all_checks, pd.DataFrame({
            annotator_col: [a for a, _ in extra], "check": [c for _, c in extra], "passed": np.nan,
        })], ignore_index=True)
    grouped = all_checks.groupby(annotator_col, sort=False)["passed"]
    out = grouped.agg(
        attention_checks="size",
        attention_unanswered=lambda s: int(s.isna().sum()),
        answered_failures=lambda s: int((s == 0.0).sum()),
    ).reset_index()
    out["attention_failures"] = out["answered_failures"] + (out["attention_unanswered"] if unanswered_is_failure else 0)
    return out[columns]


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
    """Apply attention and self-agreement checks, then count coverage over the kept judgements.

    Coverage (``items``, ``groups``) lists every item and group of the input,
    with zero where no kept annotator labelled it.
    """
    annotators = annotator_checks(judgements, config, items=items, checks=checks, item_col=item_col,
                                  annotator_col=annotator_col, label_col=label_col, repeat_col=repeat_col,
                                  language_col=language_col)
    annotators["reason"] = [exclusion_reason(row, config) for row in annotators.itertuples(index=False)]
    annotators["passed"] = annotators["reason"] == ""
    attention_items = _gold_items(items, item_col)
    passed_ids = set(annotators.loc[annotators["passed"], annotator_col])
    kept = _kept_judgements(judgements, passed_ids, attention_items, item_col=item_col,
                            annotator_col=annotator_col, repeat_col=repeat_col)
    # an unparsed answer (missing label) is not an annotation
    labelled = kept.dropna(subset=[label_col])
    return QCReport(
        annotators=annotators,
        kept=kept,
        per_language=_pass_rates(annotators, language_col),
        items=_item_coverage(judgements, items, labelled, attention_items, config, item_col=item_col),
        groups=_group_coverage(judgements, labelled, attention_items, config, item_col=item_col,
                               annotator_col=annotator_col, language_col=language_col, group_col=group_col),
        config=config,
    )


def annotator_checks(
    judgements: pd.DataFrame,
    config: QCConfig,
    *,
    items: pd.DataFrame | None,
    checks: pd.DataFrame | None,
    item_col: str,
    annotator_col: str,
    label_col: str,
    repeat_col: str,
    language_col: str,
) -> pd.DataFrame:
    """One row per annotator (input order): [language], attention counts, repeats and self-agreement."""
    ann = pd.DataFrame({annotator_col: pd.unique(judgements[annotator_col])})
    if language_col in judgements.columns:
        lang = judgements.groupby(annotator_col, sort=False)[language_col].first()
        ann[language_col] = ann[annotator_col].map(lang)
    att = attention_failures(judgements, items, checks, item_col=item_col, annotator_col=annotator_col,
                             label_col=label_col, unanswered_is_failure=config.unanswered_check_is_failure)
    sa = self_agreement(judgements, config, item_col=item_col, annotator_col=annotator_col, label_col=label_col,
                        repeat_col=repeat_col)
    ann = ann.merge(att, on=annotator_col, how="left").merge(sa, on=annotator_col, how="left")
    for col in ("attention_checks", "attention_unanswered", "attention_failures", "n_repeats"):
        ann[col] = pd.to_numeric(ann[col], errors="coerce").fillna(0).astype(int)
    ann["self_agreement"] = pd.to_numeric(ann["self_agreement"], errors="coerce")
    ann["self_agreement_checked"] = ann["n_repeats"] > 0
    return ann


def exclusion_reason(row: Any, config: QCConfig) -> str:
    """Why the annotator ``row`` (of :func:`annotator_checks`) is excluded, ``""`` when they pass."""
    why = []
    if row.attention_failures > config.max_attention_failures:
        unanswered = row.attention_unanswered and config.unanswered_check_is_failure
        skipped = f" ({row.attention_unanswered} unanswered)" if unanswered else ""
        why.append(f"failed {row.attention_failures} attention check(s){skipped}")
    if row.n_repeats and row.self_agreement < config.self_agreement_min:
        why.append(f"self-agreement {row.self_agreement:.2f} < {config.self_agreement_min}")
    if config.require_repeat and not row.n_repeats:
        why.append("no repeated item: self-agreement unknown")
    return "; ".join(why)


def _gold_items(items: pd.DataFrame | None, item_col: str) -> set:
    """Ids of the attention items (those with a known ``gold`` answer)."""
    if items is None or "gold" not in items.columns:
        return set()
    return set(items.dropna(subset=["gold"])[item_col])


def _kept_judgements(
    judgements: pd.DataFrame, passed_ids: set, attention_items: set, *, item_col: str, annotator_col: str,
    repeat_col: str,
) -> pd.DataFrame:
    """The passing annotators' first answers, attention items removed."""
    kept = judgements[judgements[annotator_col].isin(passed_ids)]
    if repeat_col in kept.columns:
        kept = kept[pd.to_numeric(kept[repeat_col], errors="coerce").fillna(0).astype(int) == 0]
    return kept[~kept[item_col].isin(attention_items)].reset_index(drop=True)


def _pass_rates(annotators: pd.DataFrame, language_col: str) -> pd.DataFrame:
    """Annotators, passed, failed, pass rate and those without a repeat, per language (or ``all``)."""
    if language_col in annotators.columns:
        rates = annotators.groupby(language_col).agg(
            n_annotators=("passed", "size"), n_passed=("passed", "sum"),
            n_without_repeat=("self_agreement_checked", lambda s: int((~s).sum())),
        ).reset_index()
    else:
        rates = pd.DataFrame({
            language_col: ["all"], "n_annotators": [len(annotators)], "n_passed": [int(annotators["passed"].sum())],
            "n_without_repeat": [int((~annotators["self_agreement_checked"]).sum())],
        })
    rates["n_failed"] = rates["n_annotators"] - rates["n_passed"]
    rates["pass_rate"] = rates["n_passed"] / rates["n_annotators"]
    return rates[[language_col, "n_annotators", "n_passed", "n_failed", "pass_rate", "n_without_repeat"]]


def _item_coverage(
    judgements: pd.DataFrame, items: pd.DataFrame | None, labelled: pd.DataFrame, attention_items: set,
    config: QCConfig, *, item_col: str,
) -> pd.DataFrame:
    """Kept annotations per item, for every item listed or judged (one whose annotators all failed has 0)."""
    counts = labelled.groupby(item_col).size().rename("n_annotations")
    universe = [judgements[[item_col]]]
    if items is not None and item_col in items.columns:
        universe.insert(0, items[[item_col]])
    coverage = pd.concat(universe, ignore_index=True).drop_duplicates().reset_index(drop=True)
    coverage = coverage[~coverage[item_col].isin(attention_items)].reset_index(drop=True)
    coverage["n_annotations"] = coverage[item_col].map(counts).fillna(0).astype(int)
    coverage["meets_min"] = coverage["n_annotations"] >= config.min_annotations_per_item
    return coverage


def _group_coverage(
    judgements: pd.DataFrame, labelled: pd.DataFrame, attention_items: set, config: QCConfig, *, item_col: str,
    annotator_col: str, language_col: str, group_col: str | None,
) -> pd.DataFrame | None:
    """Kept annotators per group (and language), for every group judged; None without a group column."""
    if not group_col or group_col not in judgements.columns:
        return None
    keys = [language_col, group_col] if language_col in judgements.columns else [group_col]
    seen = judgements.loc[~judgements[item_col].isin(attention_items)].dropna(subset=[group_col])
    n_ann = labelled.groupby(keys)[annotator_col].nunique().rename("n_annotators")
    groups = seen[keys].drop_duplicates().sort_values(keys).reset_index(drop=True)
    groups = groups.merge(n_ann.reset_index(), on=keys, how="left")
    groups["n_annotators"] = groups["n_annotators"].fillna(0).astype(int)
    groups["meets_min"] = groups["n_annotators"] >= config.min_annotations_per_group
    return groups
