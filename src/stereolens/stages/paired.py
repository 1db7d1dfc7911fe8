"""What a study's paired stage (``<study>_paired``: every pair of the run's models on the items both scored)
writes, the same way for every study: the paired file of the issue-32 contract and its MLflow run.  Kept out of
``stages.kit``, which every stage imports, so that only the paired stages depend on ``stats`` through it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.io import write_csv, write_json
from stereolens.stats.paired import paired_document
from stereolens.tracking import stage_run


def write_paired(path: str | os.PathLike, *, study: str, model_ids: list[str], compared: list[str],
                 comparisons: list[dict[str, Any]], columns: list[str], family: str, not_compared: dict[str, str],
                 tracking: Mapping[str, Any], schema, params: Mapping[str, Any],
                 cells: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A study's paired stage's outputs: ``reports/<study>/paired.json`` (``stats.paired.paired_document``) and
    ``paired.csv`` beside it, and one MLflow run (``schema``: ``comparisons`` and ``difference.{pair}.{cell}``)
    when two models were compared; returns the document.  With fewer than two models the file says why."""
    path = Path(path)
    reason = None if len(compared) >= 2 else (
        f"the run measures {len(model_ids)} model(s), {len(compared)} with scored pairs: a paired comparison needs "
        "two (add one with compare_with=[...])")
    document = paired_document(study=study, models=model_ids, comparisons=comparisons, family=family, reason=reason,
                               not_compared=not_compared)
    write_json(path, document)
    write_csv(path.with_suffix(".csv"), pd.DataFrame(comparisons, columns=columns))
    pairs = [f"{a}__{b}" for i, a in enumerate(compared) for b in compared[i + 1:]]
    if not pairs or not cells:
        return document
    found = {f"{c['model_a']}__{c['model_b']}.{c['cell']}": c["difference"] for c in comparisons}
    with stage_run(tracking, schema, params=params, axes={"pair": pairs, "cell": list(cells)}) as run:
        run.log_metrics({"comparisons": len(comparisons)})
        run.log_metrics({f"difference.{pair}.{cell}": found.get(f"{pair}.{cell}") for pair in pairs for cell in cells})
        run.log_artifact(path)
        run.log_artifact(path.with_suffix(".csv"))
    return document


def paired_line(stage: str, document: Mapping[str, Any], *, overall) -> str:
    """The line a paired stage prints: each overall comparison (``overall(comparison)`` true) with its interval,
    McNemar's p and the verdict, or why there is none."""
    from stereolens.report.markdown import format_cell

    if not document["comparisons"]:
        return f"{stage}: no comparison ({document.get('reason')})"
    return f"{stage}: " + "; ".join(
        f"{c['cell']} {c['model_a']} - {c['model_b']}: {format_cell(c['difference'])} [{format_cell(c['ci_low'])}, "
        f"{format_cell(c['ci_high'])}], McNemar p {format_cell(c['p_value'])}, {c['verdict']}"
        for c in document["comparisons"] if overall(c))
