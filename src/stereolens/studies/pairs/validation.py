"""Tuple validation (AmchiBias section 3.3): three annotators judge each (group, attribute) yes/no
through the annotation layer; tuples with at least ``min_yes`` yes votes stay.  Fleiss' kappa with
its Landis-Koch label is reported, and the kappa gate's default (0.41) lets moderate agreement
through, as the paper's own agreement was moderate."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stereolens.annotation.scales import YES_NO
from stereolens.errors import ConfigError
from stereolens.io import refuse_unjudged

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


def keep_tuples(judgements: pd.DataFrame, items: pd.DataFrame, *, min_yes: int, where: str = "judgements") -> pd.DataFrame:
    """Per tuple the yes count; ``keep`` when it reaches ``min_yes`` (2 of 3 in the paper).  A tuple nobody judged is
    refused (``where`` names the judgements), not kept out with zero votes as if the annotators had said no."""
    refuse_unjudged(items["item_id"], judgements["item_id"], where=where)
    yes = (judgements["label"].astype(str) == "yes").groupby(judgements["item_id"]).sum()
    total = judgements.groupby("item_id").size()
    out = items.copy()
    out["yes_votes"] = out["item_id"].map(yes).fillna(0).astype(int)
    out["votes"] = out["item_id"].map(total).fillna(0).astype(int)
    out["keep"] = out["yes_votes"] >= min_yes
    return out


@dataclass
class TupleValidation:
    """What one validation round produced: every judgement, the tuples with their votes and
    ``keep``, and the round's summary (agreement, gate, the paper's counts beside ours)."""

    judgements: pd.DataFrame
    tuples: pd.DataFrame
    summary: dict[str, Any]


def validate_tuples(tuples: pd.DataFrame, acfg, *, region: str, judgements_path: str | os.PathLike | None,
                    valid_share: float, seed: int, min_yes: int, enforce_gate: bool,
                    judgements_out: str | os.PathLike, report_dir: str | os.PathLike,
                    study: str = "pairs") -> TupleValidation:
    """One annotation round over ``tuples`` (``tuple_id, group, attribute``): task files, judgements
    (human ones from ``judgements_path``, else simulated), Fleiss' kappa and its gate, the kept tuples.

    Writes the task files and the review under ``report_dir`` and the judgements to ``judgements_out``
    (the review names that file as its artefact)."""
    from stereolens.annotation.agreement import landis_koch
    from stereolens.annotation.round import collect_judgements, gate_round, review_round
    from stereolens.annotation.tasks import export_tasks, judgements_file
    from stereolens.io import write_csv

    report_dir = Path(report_dir)
    items = tuples.assign(item_id=tuples["tuple_id"], text=tuples["group"] + ": " + tuples["attribute"])
    instructions = INSTRUCTIONS.format(region=region)
    imported = bool(acfg.source == "human" and not items.empty
                    and judgements_file(judgements_path, key="study.pairs.validation.judgements"))
    if imported:
        # read and checked before anything is written: a bad or incomplete file leaves the earlier outputs (the
        # task files the annotators worked from among them) as they were
        judgements = collect_judgements(acfg, items[["item_id"]], judgements_path=judgements_path)
        refuse_unjudged(items["item_id"], judgements["item_id"], where=str(judgements_path))
    export_tasks(items[["item_id", "text"]], acfg.scale, instructions, report_dir / "tasks", name="tuple_tasks")
    if items.empty:
        raise ConfigError("pairs-validate: the generator gave no tuples to validate (see attributes_raw.json)")
    if acfg.source == "human":
        if not imported:
            # the task files are written first: a round that has no judgements yet starts from them
            what = (f"study.pairs.validation.judgements: judgements not found: {judgements_path}" if judgements_path
                    else "annotation.source=human needs study.pairs.validation.judgements")
            raise ConfigError(f"{what} (a long CSV or a Label Studio export); the tasks are in {report_dir / 'tasks'}")
    else:
        truth = simulated_truth(items[["item_id"]], valid_share=valid_share, seed=seed)
        judgements = collect_judgements(acfg, truth, instructions=instructions)
    write_csv(judgements_out, judgements)
    review = review_round(judgements, acfg, study=study, artefact=str(judgements_out), items=items[["item_id"]],
                          gate=False, seed=seed)
    review.gate = gate_round(review, acfg, study=study, artefact=str(judgements_out),
                             report_dir=report_dir / "quality", raise_on_failure=enforce_gate)
    review.write(report_dir)
    kept = keep_tuples(judgements, tuples.assign(item_id=tuples["tuple_id"]), min_yes=min_yes, where=str(judgements_out))
    kept = kept.drop(columns=["item_id"]).assign(annotation_source=acfg.source)
    kappa = review.agreement["fleiss_kappa"]
    summary = {"source": acfg.source, "tuples": int(len(kept)), "kept": int(kept["keep"].sum()),
               "fleiss_kappa": kappa.value, "ci_low": kappa.ci_low, "ci_high": kappa.ci_high,
               "landis_koch": landis_koch(kappa.value), "kappa_gate": acfg.thresholds.min_fleiss_kappa,
               "gate_passed": bool(review.gate.success), "gate_enforced": enforce_gate,
               "paper": {"tuples": 370, "kept": 316, "agreement": "moderate"}}
    return TupleValidation(judgements, kept, summary)
