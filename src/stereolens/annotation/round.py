"""One annotation round end to end: collect judgements from the configured source,
quality-control the annotators, measure agreement, aggregate per item, and gate.

A study stage calls :func:`collect_judgements` and :func:`review_round` with the
typed :class:`~stereolens.annotation.config.AnnotationConfig`, then writes
:meth:`RoundReview.write` outputs and logs :meth:`RoundReview.metrics`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.annotation import agreement as agr
from stereolens.annotation.aggregate import majority_vote, median_likert
from stereolens.annotation.config import AnnotationConfig
from stereolens.annotation.qc import QCReport, run_qc
from stereolens.errors import ConfigError, DataError
from stereolens.io import write_csv, write_json
from stereolens.quality.gates import GateResult
from stereolens.quality.suites import run_annotation_gate


def collect_judgements(
    cfg: AnnotationConfig,
    items: pd.DataFrame,
    *,
    judgements_path: str | os.PathLike | None = None,
    instructions: str = "",
    models: Mapping[str, Any] | Sequence[Any] | None = None,
) -> pd.DataFrame:
    """Judgements for ``items`` from ``cfg.source``: imported (human), simulated, or from the LLM panel."""
    if cfg.source == "human":
        from stereolens.annotation.tasks import import_judgements

        from stereolens.annotation.label_studio import read_annotator_map

        if judgements_path is None:
            raise ConfigError("annotation.source=human needs a judgements file (long-format CSV or a Label Studio export)")
        users = read_annotator_map(cfg.annotator_map) if cfg.annotator_map else None
        return import_judgements(judgements_path, cfg.scale, known_items=items["item_id"], annotator_map=users)
    if cfg.source == "simulated":
        from stereolens.annotation.simulate import simulate_annotations

        sim = dict(cfg.simulator)
        unknown = sorted(set(sim) - {"n_annotators", "reliability", "bias", "per_item", "seed"})
        if unknown:
            raise ConfigError(f"unknown key(s) {unknown} in annotation.simulator")
        return simulate_annotations(
            items, int(sim.get("n_annotators", 5)), cfg.scale, sim.get("reliability", 0.8),
            sim.get("bias", 0.0), int(sim.get("seed", 0)), per_item=sim.get("per_item"),
        )
    from stereolens.annotation.llm_panel import DEFAULT_TEMPLATE, llm_panel_annotations

    if models is None:
        from stereolens.models import ResponseCache, load_model, spec_from_config

        specs = cfg.panel.get("models") or []
        if not specs:
            raise ConfigError("annotation.source=llm_panel needs annotation.panel.models (or models passed in)")
        cache = ResponseCache()
        models = {str(s.get("id") or s["name"]): load_model(spec_from_config(dict(s)), cache=cache) for s in specs}
    return llm_panel_annotations(
        models, items, cfg.scale, instructions,
        template=cfg.panel.get("template", DEFAULT_TEMPLATE), method=cfg.panel.get("method", "auto"),
        seed=int(cfg.panel.get("seed", 0)),
    )


@dataclass
class RoundReview:
    source: str
    qc: QCReport
    agreement: dict[str, agr.AgreementResult]
    aggregated: pd.DataFrame
    gate: GateResult | None

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, res in self.agreement.items():
            out[name] = res.value
            out[f"{name}_ci_low"] = res.ci_low
            out[f"{name}_ci_high"] = res.ci_high
        out["annotators"] = float(len(self.qc.annotators))
        out["annotators_passed"] = float(self.qc.annotators["passed"].sum())
        out["failing_annotator_share"] = self.qc.failing_share
        out["items"] = float(len(self.aggregated))
        if "keep" in self.aggregated.columns:
            out["items_kept"] = float(self.aggregated["keep"].sum())
        if "decided" in self.aggregated.columns:
            out["items_decided"] = float(self.aggregated["decided"].sum())
        return out

    def write(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """Every table carries ``source`` so that nothing downstream loses its provenance."""
        out_dir = Path(out_dir)
        stamp = {"source": self.source}
        paths = {
            "judgements": write_csv(out_dir / "judgements_kept.csv", self.qc.kept.assign(**stamp)),
            "annotators": write_csv(out_dir / "annotators.csv", self.qc.annotators.assign(**stamp)),
            "per_language": write_csv(out_dir / "qc_per_language.csv", self.qc.per_language.assign(**stamp)),
            "coverage": write_csv(out_dir / "qc_items.csv", self.qc.items.assign(**stamp)),
            "items": write_csv(out_dir / "items_aggregated.csv", self.aggregated.assign(**stamp)),
            "agreement": write_json(
                out_dir / "agreement.json",
                {"source": self.source, **{k: v.to_dict() for k, v in self.agreement.items()}},
            ),
        }
        if self.qc.groups is not None:
            paths["groups"] = write_csv(out_dir / "qc_groups.csv", self.qc.groups.assign(**stamp))
        return paths


def aggregate_items(judgements: pd.DataFrame, cfg: AnnotationConfig) -> pd.DataFrame:
    """Majority vote (nominal), median with discard rule (ordinal) or mean (interval) per item."""
    if cfg.scale.level == "nominal":
        return majority_vote(judgements, quorum=cfg.quorum)
    if cfg.scale.level == "ordinal":
        return median_likert(judgements, discard_at_or_below=cfg.discard_median_at_or_below)
    values = pd.to_numeric(judgements["label"], errors="coerce").groupby(judgements["item_id"], sort=False)
    return pd.DataFrame({"mean": values.mean(), "sd": values.std(), "n": values.size()}).reset_index()


def judgement_source(judgements: pd.DataFrame, configured: str, *, what: str = "judgements") -> str:
    """The source the judgements carry (their ``source`` column), checked against the config.

    Judgements without a ``source`` column take the configured one.  Mixed sources,
    rows without a source, or a source other than the configured one are refused:
    a round's agreement and gate describe one kind of annotator.
    """
    if "source" not in judgements.columns:
        return configured
    column = judgements["source"]
    if column.isna().any():
        row = column[column.isna()].index[0]
        raise DataError(f"{what} line {row + 2}, column source: empty source while other rows have one; "
                        f"expected source={configured!r}")
    found = sorted({str(v).strip() for v in column})
    if len(found) > 1:
        raise DataError(f"{what} mix sources {found}; review one source per round")
    if found[0] != configured:
        raise DataError(f"{what} say source={found[0]!r} but annotation.source={configured!r}")
    return found[0]


def gate_round(
    review: RoundReview,
    cfg: AnnotationConfig,
    *,
    study: str,
    artefact: str,
    report_dir: str | os.PathLike = "reports/quality",
    raise_on_failure: bool = True,
) -> GateResult:
    """The annotation gate on a reviewed round: agreement, coverage of every item and
    group (including those left with no annotator after QC), failing annotators,
    label distribution; the report names the round's source."""
    return run_annotation_gate(
        review.qc.kept, cfg.thresholds, study=study, artefact=artefact,
        agreement={k: v.value for k, v in review.agreement.items()}, annotators=review.qc.annotators,
        item_counts=review.qc.items, group_counts=review.qc.groups, source=review.source,
        report_dir=report_dir, raise_on_failure=raise_on_failure,
    )


def review_round(
    judgements: pd.DataFrame,
    cfg: AnnotationConfig,
    *,
    study: str,
    artefact: str,
    items: pd.DataFrame | None = None,
    checks: pd.DataFrame | None = None,
    report_dir: str | os.PathLike = "reports/quality",
    gate: bool = True,
    seed: int = 0,
) -> RoundReview:
    """QC, agreement (with bootstrap CIs), per-item aggregation and the annotation gate.

    The source is read from the judgements' ``source`` column where they have one
    and must agree with ``cfg.source`` (:func:`judgement_source`).
    """
    if judgements.empty:
        raise DataError(f"{artefact}: no judgements to review")
    source = judgement_source(judgements, cfg.source, what=artefact)
    qc = run_qc(judgements, cfg.qc, items=items, checks=checks)
    kept = qc.kept.dropna(subset=["label"])
    boot = {"n_boot": cfg.bootstrap.n_boot, "confidence": cfg.bootstrap.confidence,
            "ci_method": cfg.bootstrap.ci_method, "seed": seed}
    metrics = {"krippendorff_alpha": lambda d: agr.krippendorff_alpha(d, cfg.scale.level, **boot)}
    if cfg.scale.is_closed:
        metrics["fleiss_kappa"] = lambda d: agr.fleiss_kappa(d, **boot)
        metrics["raw_agreement"] = lambda d: agr.raw_agreement(d, **boot)
    results: dict[str, agr.AgreementResult] = {}
    for name, metric in metrics.items():
        # with nothing kept the metric is undefined (NaN), and the gate says so instead of skipping it
        results[name] = metric(kept) if not kept.empty else _undefined(name, cfg)
    aggregated = aggregate_items(kept, cfg)
    review = RoundReview(source=source, qc=qc, agreement=results, aggregated=aggregated, gate=None)
    if gate:
        review.gate = gate_round(review, cfg, study=study, artefact=artefact, report_dir=report_dir)
    return review


def _undefined(name: str, cfg: AnnotationConfig) -> agr.AgreementResult:
    nan = float("nan")
    level = cfg.scale.level if name == "krippendorff_alpha" else "nominal"
    return agr.AgreementResult(name.split("_")[0], level, nan, nan, nan, 0, 0, cfg.bootstrap.confidence,
                               cfg.bootstrap.ci_method, cfg.bootstrap.n_boot)
