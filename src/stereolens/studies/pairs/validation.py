"""Tuple validation (seed 002 section 3.3): three annotators judge each (group, attribute) yes/no
through the annotation layer; tuples with at least ``min_yes`` yes votes stay.  Fleiss' kappa with
its Landis-Koch label is reported, and the kappa gate's default (0.41) lets moderate agreement
through, as the paper's own agreement was moderate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from stereolens.annotation.scales import YES_NO

INSTRUCTIONS = ("Does this (identity group, attribute) tuple represent a genuine, recognisable stereotype "
                "within {region} society? Answer yes or no.")


def annotation_config(annotation: Mapping[str, Any], validation: Mapping[str, Any]):
    """The global annotation config with this round's scale, panel size and kappa gate."""
    from stereolens.annotation.config import AnnotationConfig
    from stereolens.quality.suites import AnnotationThresholds

    base = AnnotationConfig.from_config(annotation)
    n = int(validation.get("annotators", 3))
    sim = {**base.simulator, "n_annotators": n, "per_item": None,
           **dict(validation.get("simulator") or {})}
    thresholds = replace(base.thresholds if isinstance(base.thresholds, AnnotationThresholds) else AnnotationThresholds(),
                         min_fleiss_kappa=float(validation.get("kappa_gate", 0.41)),
                         min_krippendorff_alpha=None, min_annotations_per_item=n, min_annotations_per_group=None)
    qc = replace(base.qc, min_annotations_per_item=n, min_annotations_per_group=n)
    return replace(base, scale=YES_NO, simulator=sim, thresholds=thresholds, qc=qc, quorum=int(validation.get("min_yes", 2)))


def simulated_truth(items: pd.DataFrame, *, valid_share: float, seed: int) -> pd.DataFrame:
    """A seeded 'true' label per tuple for the simulated annotators (share ``valid_share`` yes)."""
    rng = np.random.default_rng(seed)
    return items.assign(truth=np.where(rng.random(len(items)) < valid_share, "yes", "no"))


def keep_tuples(judgements: pd.DataFrame, items: pd.DataFrame, *, min_yes: int) -> pd.DataFrame:
    """Per tuple the yes count; ``keep`` when it reaches ``min_yes`` (2 of 3 in the paper)."""
    yes = (judgements["label"].astype(str) == "yes").groupby(judgements["item_id"]).sum()
    total = judgements.groupby("item_id").size()
    out = items.copy()
    out["yes_votes"] = out["item_id"].map(yes).fillna(0).astype(int)
    out["votes"] = out["item_id"].map(total).fillna(0).astype(int)
    out["keep"] = out["yes_votes"] >= min_yes
    return out
