"""Expectation suites for annotation data, run through :func:`stereolens.quality.gates.run_gate`.

The annotation gate validates a one-row summary of an annotation round (its
agreement values, the fewest annotations any item got, the fewest annotators any
group got, the share of annotators who failed quality control, the share of the
most frequent label), so that each expectation's observed value is the number a
reader of the failure message needs.  Thresholds come from
``conf/annotation/<source>.yaml`` (``thresholds:``); a threshold set to null is
not checked.  An agreement value that is NaN (undefined) fails its check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.quality.gates import Expectation, GateResult, run_gate

SUITE = "annotation_quality"


@dataclass(frozen=True)
class AnnotationThresholds:
    min_fleiss_kappa: float | None = 0.4
    min_krippendorff_alpha: float | None = 0.4
    min_cohen_kappa: float | None = None
    min_raw_agreement: float | None = None
    min_annotations_per_item: int | None = 5
    # Cao et al. 2024: at least five valid annotations per group (checked where judgements carry a group)
    min_annotations_per_group: int | None = 5
    max_failing_annotator_share: float | None = 0.6
    max_top_label_share: float | None = 0.95

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "AnnotationThresholds":
        cfg = dict(cfg or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ConfigError(f"unknown annotation threshold(s) {unknown} (known: {sorted(known)})")
        return cls(**cfg)


# summary column -> (threshold attribute, bound)
_CHECKS: dict[str, tuple[str, str]] = {
    "fleiss_kappa": ("min_fleiss_kappa", "min"),
    "krippendorff_alpha": ("min_krippendorff_alpha", "min"),
    "cohen_kappa": ("min_cohen_kappa", "min"),
    "raw_agreement": ("min_raw_agreement", "min"),
    "min_annotations_per_item": ("min_annotations_per_item", "min"),
    "min_annotations_per_group": ("min_annotations_per_group", "min"),
    "failing_annotator_share": ("max_failing_annotator_share", "max"),
    "top_label_share": ("max_top_label_share", "max"),
}


def annotation_summary(
    judgements: pd.DataFrame,
    *,
    agreement: Mapping[str, float] | None = None,
    annotators: pd.DataFrame | None = None,
    item_col: str = "item_id",
    label_col: str = "label",
    item_counts: pd.DataFrame | None = None,
    group_counts: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row: agreement values (``fleiss_kappa``, ``krippendorff_alpha``, ...), the
    fewest annotations on any item, the fewest annotators on any group, the
    failing-annotator share (from a QC annotator table with a ``passed`` column) and
    the share of the most frequent label.

    Pass the QC report's ``items`` (``item_id, n_annotations``) as ``item_counts``:
    counted from ``judgements`` alone, an item whose annotators all failed QC has no
    row and cannot lower the minimum.  ``group_counts`` is the QC report's ``groups``
    (``n_annotators`` per group); without it there is no per-group value.
    """
    row: dict[str, Any] = {}
    for name, value in (agreement or {}).items():
        value = getattr(value, "value", value)
        row[name] = float("nan") if value is None else float(value)
    labelled = judgements.dropna(subset=[label_col])
    if item_counts is not None:
        per_item = pd.Series(pd.to_numeric(item_counts["n_annotations"]).to_numpy(), index=item_counts[item_col])
    else:
        per_item = labelled.groupby(item_col).size()
    row["min_annotations_per_item"] = int(per_item.min()) if len(per_item) else 0
    if group_counts is not None and len(group_counts):
        row["min_annotations_per_group"] = int(pd.to_numeric(group_counts["n_annotators"]).min())
    if annotators is not None and len(annotators):
        row["failing_annotator_share"] = float((~annotators["passed"].astype(bool)).mean())
    shares = labelled[label_col].astype(str).value_counts(normalize=True)
    row["top_label_share"] = float(shares.iloc[0]) if len(shares) else float("nan")
    row["top_label"] = str(shares.index[0]) if len(shares) else ""
    row["n_items"] = int(len(per_item))
    row["n_judgements"] = int(len(labelled))
    return pd.DataFrame([row])


def annotation_expectations(summary: pd.DataFrame, thresholds: AnnotationThresholds) -> list[Expectation]:
    """One expectation per threshold that is set and whose value the summary carries."""
    out = []
    for column, (attr, bound) in _CHECKS.items():
        limit = getattr(thresholds, attr)
        if limit is None or column not in summary.columns:
            continue
        if bound == "min":
            out.append(Expectation("expect_column_min_to_be_between", column=column, min_value=limit))
        else:
            out.append(Expectation("expect_column_max_to_be_between", column=column, max_value=limit))
    return out


def run_annotation_gate(
    judgements: pd.DataFrame,
    thresholds: AnnotationThresholds,
    *,
    study: str,
    artefact: str,
    agreement: Mapping[str, float] | None = None,
    annotators: pd.DataFrame | None = None,
    report_dir: str | os.PathLike = "reports/quality",
    suite: str = SUITE,
    raise_on_failure: bool = True,
    item_counts: pd.DataFrame | None = None,
    group_counts: pd.DataFrame | None = None,
    source: str | None = None,
) -> GateResult:
    """Fail (``GateFailed``) when agreement is too low or undefined, an item or a group
    has too few annotations, too many annotators failed QC, or one label dominates.

    ``item_counts`` / ``group_counts``: the QC report's ``items`` / ``groups`` (see
    :func:`annotation_summary`).  ``source`` (human, llm_panel, simulated) is
    written into the JSON report.
    """
    summary = annotation_summary(judgements, agreement=agreement, annotators=annotators,
                                 item_counts=item_counts, group_counts=group_counts)
    return run_gate(
        summary,
        annotation_expectations(summary, thresholds),
        study=study,
        artefact=artefact,
        suite=suite,
        report_dir=report_dir,
        raise_on_failure=raise_on_failure,
        metadata={"source": source} if source is not None else None,
    )
