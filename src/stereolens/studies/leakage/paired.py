"""Is one model's leakage larger than another's?  The difference of two models' coefficients, edge by edge.

For every pair of models of the run that score with the same method and are of the same kind (the coefficient
alpha_l is in units of the model's score per unit of human rating, so only scores of one definition compare: an
ILPS log-probability sum of a causal model, the per-token mean of a seq2seq model and a SeT score are different
units), in every target language, for every non-target human term H_<SRC> (one *cell*, "ilps RU->EN"):

* ``difference`` = estimate_a - estimate_b, each model's own MixedLM coefficient of its configured fit;
* its standard error from the paired cluster bootstrap (:mod:`stereolens.studies.leakage.inference`): one draw
  of the groups refits both models, so the correlation of the two estimates (same human matrices, same
  groups, model scores with shared structure) is kept.  ``se_independent`` = sqrt(se_a^2 + se_b^2) is shown
  beside it: right only for independent estimates, too wide when they are positively correlated (ours: the
  paired bootstrap, since the fits' GLS form makes 1,000 paired resamples cost under a second);
* the Wald test of difference 0: z = difference / se, two-sided normal p, interval difference +- z x se;
* Holm and Benjamini-Hochberg over the family of one model pair's cells (every target language, method and
  source compared for that pair), as the other studies correct a pair's cells;
* the verdict from the uncorrected p (as :mod:`stereolens.stats.paired` decides): "model_a more" / "model_b
  more" (a larger coefficient: more of language SRC's human stereotypes in the model's TGT scores), "no
  difference detected", or "cannot be decided at this n" where there is no standard error (a fit that did
  not converge, a term one fit left out, fewer than two groups in common);
* ``mde``: the smallest difference the test finds with 80% power, (z_{1-alpha/2} + z_0.8) x se.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from scipy import stats

from stereolens.errors import DataError

A_MORE = "model_a more"
B_MORE = "model_b more"
NO_DIFFERENCE = "no difference detected"
UNDECIDABLE = "cannot be decided at this n"
TEST = ("difference of the two models' coefficients of one human term (estimate_a - estimate_b); standard error "
        "(ours) from a paired cluster bootstrap over groups (one draw of the groups refits both models: GLS at each fit's "
        "REML variance components, {resamples} resamples, seed {seed}); two-sided Wald z-test of difference 0, "
        "interval difference +- z x se; verdict from the uncorrected p at alpha {alpha:g}")
FAMILY = ("every cell (target language x method x non-target source language) compared for one model pair; "
          "Holm and Benjamini-Hochberg run over each pair's cells separately; two models are compared only where "
          "they score with the same method and are of the same kind, so that their coefficients share a unit (ours)")
COLUMNS = ["model_a", "model_b", "cell", "method", "source", "target", "n", "n_clusters", "estimate_a", "estimate_b",
           "difference", "se_difference", "se_independent", "correlation", "ci_low", "ci_high", "p_value", "p_holm",
           "p_bh", "significant_holm", "significant_bh", "verdict", "mde", "reason"]


@dataclass(frozen=True)
class Panel:
    """One model's configured fit of one target language and method, as the fit stage wrote it."""

    model: str
    method: str
    kind: str | None
    target: str  # upper-case language
    fit_dir: Path

    def read(self) -> tuple[Any, dict[str, float], bool]:
        """(its FittedDesign, its coefficients by term, whether its MixedLM converged)."""
        from stereolens.io import read_csv_checked
        from stereolens.studies.leakage.inference import FittedDesign

        fit = json.loads((self.fit_dir / "fit.json").read_text(encoding="utf-8"))
        coef = read_csv_checked(self.fit_dir / "coefficients.csv", ["term", "estimate"], what="leakage coefficients")
        design = read_csv_checked(self.fit_dir / "design.csv", ["trait", "group", "y", *fit["terms"]],
                                  what="leakage design (rerun leakage-fit)", dtype={"trait": str, "group": str})
        residual = fit.get("residual_variance")
        if residual is None:
            raise DataError(f"{self.fit_dir / 'fit.json'} has no residual_variance: rerun the leakage-fit stage")
        fitted = FittedDesign(design, tuple(fit["terms"]), float(residual),
                              float(fit.get("trait_random_intercept_variance") or 0.0))
        return fitted, dict(zip(coef["term"].astype(str), coef["estimate"].astype(float))), bool(fit.get("converged"))


def cell_name(method: str, source: str, target: str) -> str:
    return f"{method} {source.upper()}->{target.upper()}"


def metric_cell(method: str, source: str, target: str) -> str:
    """The cell as an MLflow metric name part (no '>' there): ilps.RU_to_EN."""
    return f"{method}.{source.upper()}_to_{target.upper()}"


def find_panels(processed: Path, trees: Sequence[str], languages: Sequence[str]) -> list[Panel]:
    """Every (model, method, target) configured fit under ``processed/<tree>/fit/<lang>/`` of the run's model trees
    (a tree also holds the study's extra models), with each model's kind from the scores manifest."""
    panels: list[Panel] = []
    for tree in trees:
        for lang in languages:
            summary = processed / tree / "fit" / lang.lower() / "summary.json"
            if not summary.is_file():
                continue
            manifest_path = processed / tree / "scores" / lang.lower() / "manifest.json"
            manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
            for f in json.loads(summary.read_text(encoding="utf-8")).get("fits", []):
                kind = ((manifest.get("models") or {}).get(f["model"]) or {}).get("kind")
                panels.append(Panel(f["model"], f["method"], kind, lang.upper(), Path(f["dir"])))
    return panels


def compare_panels(
    panels: Sequence[Panel], languages: Sequence[str], *, order: Sequence[str] | None = None, alpha: float = 0.05,
    power: float = 0.8, resamples: int = 1000, seed: int = 0,
) -> pd.DataFrame:
    """One row per (model pair, cell) (:data:`COLUMNS`), models paired in ``order`` (default: first met)."""
    from stereolens.stats.multiple import add_corrections
    from stereolens.stats.power import minimum_detectable_coefficient
    from stereolens.studies.leakage.fit import human_term
    from stereolens.studies.leakage.inference import paired_differences

    models = list(dict.fromkeys([*(order or []), *(p.model for p in panels)]))
    by_key = {(p.model, p.method, p.target): p for p in panels}
    rank = {m: k for k, m in enumerate(models)}
    methods = list(dict.fromkeys(p.method for p in panels))
    langs = [lang.upper() for lang in languages]
    z = stats.norm.isf(alpha / 2)
    frames = []
    for model_a, model_b in itertools.combinations(sorted(models, key=rank.get), 2):
        rows = []
        for method in methods:
            for target in langs:
                a, b = by_key.get((model_a, method, target)), by_key.get((model_b, method, target))
                if a is None or b is None or a.kind != b.kind:
                    continue
                fit_a, est_a, conv_a = a.read()
                fit_b, est_b, conv_b = b.read()
                sources = [s for s in langs if s != target]
                diffs = paired_differences(fit_a, fit_b, est_a, est_b, [human_term(s) for s in sources],
                                           resamples=resamples, seed=seed)
                for source, d in zip(sources, diffs):
                    rows.append(_row(model_a, model_b, method, source, target, d, conv_a and conv_b, z=z,
                                     alpha=alpha, mde=minimum_detectable_coefficient(d.se_difference, alpha=alpha,
                                                                                      power=power)))
        if rows:
            table = pd.DataFrame(rows)
            corrected = add_corrections(table, p_col="p_value", alpha=alpha)
            frames.append(corrected)
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    untested = out["p_value"].isna()
    out.loc[untested, ["significant_holm", "significant_bh"]] = False
    return out[COLUMNS]


def _row(model_a: str, model_b: str, method: str, source: str, target: str, d: Any, converged: bool, *, z: float,
         alpha: float, mde: float) -> dict[str, Any]:
    se = d.se_difference
    reason = ""
    if not converged:
        reason = "a fit did not converge: its coefficients are not read"
    elif not math.isfinite(d.difference):
        reason = "a fit left this term out (constant in that fit)"
    elif not (math.isfinite(se) and se > 0):
        reason = f"no standard error ({d.n_clusters} group(s) in common, {d.valid_resamples} usable resamples)"
    decidable = not reason
    p_value = float(2 * stats.norm.sf(abs(d.difference / se))) if decidable else math.nan
    if not decidable:
        verdict = UNDECIDABLE
    elif p_value < alpha:
        verdict = A_MORE if d.difference > 0 else B_MORE
    else:
        verdict = NO_DIFFERENCE
    return {"model_a": model_a, "model_b": model_b, "cell": cell_name(method, source, target), "method": method,
            "source": source, "target": target, "n": d.n_rows_shared, "n_clusters": d.n_clusters,
            "estimate_a": d.estimate_a, "estimate_b": d.estimate_b, "difference": d.difference,
            "se_difference": se if decidable else math.nan, "se_independent": d.se_independent,
            "correlation": d.correlation,
            "ci_low": d.difference - z * se if decidable else math.nan,
            "ci_high": d.difference + z * se if decidable else math.nan,
            "p_value": p_value, "verdict": verdict, "mde": mde if decidable else math.nan, "reason": reason}


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _json_value(value.item())
    return value


def paired_document(table: pd.DataFrame, models: Sequence[str], *, alpha: float, resamples: int, seed: int,
                    reason: str = "") -> dict[str, Any]:
    """``paired.json``: the study, its models, the test and family in words and one entry per comparison."""
    doc: dict[str, Any] = {"study": "leakage", "models": list(models),
                           "test": TEST.format(resamples=resamples, seed=seed, alpha=alpha), "family": FAMILY,
                           "cluster_unit": "group", "alpha": alpha,
                           "comparisons": [{k: _json_value(v) for k, v in row.items()}
                                           for row in table.to_dict(orient="records")]}
    if not doc["comparisons"]:
        doc["reason"] = reason or "no two models of the run share a method, kind and target language"
    return doc


def comparisons_for(doc: Mapping[str, Any], model: str) -> list[dict[str, Any]]:
    """The comparisons of ``paired.json`` that involve ``model``."""
    return [c for c in doc.get("comparisons", []) if model in (c["model_a"], c["model_b"])]


def paired_block(doc: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The ``paired`` block of a model's summary.json: what was compared, how, and the comparisons with it."""
    mine = comparisons_for(doc, model)
    block: dict[str, Any] = {"file": "../paired.json", "test": doc.get("test", ""), "family": doc.get("family", ""),
                             "comparisons": mine}
    if not mine:
        block["reason"] = doc.get("reason") or f"no other model of the run was compared with {model}"
    return block


def difference_metrics(doc: Mapping[str, Any], model: str, others: Sequence[str], cells: Sequence[str]) -> dict[str, Any]:
    """``paired_difference.<other>.<cell>``: this model's coefficient minus the other's (NaN where not compared),
    for every other model and cell the configuration names (so every report run logs the same keys)."""
    out: dict[str, Any] = {f"paired_difference.{o}.{c}": None for o in others for c in cells}
    for comp in comparisons_for(doc, model):
        other = comp["model_b"] if comp["model_a"] == model else comp["model_a"]
        sign = 1.0 if comp["model_a"] == model else -1.0
        name = f"paired_difference.{other}.{metric_cell(comp['method'], comp['source'], comp['target'])}"
        if name in out and comp["difference"] is not None:
            out[name] = sign * comp["difference"]
    return out


def configured_cells(study: Mapping[str, Any], kinds: Sequence[str]) -> list[str]:
    """Every metric cell the configuration can produce: the methods of the models' kinds x target x source."""
    from stereolens.studies.leakage.methods import methods_for_kind

    methods = list(dict.fromkeys(m for kind in kinds
                                 for m in ((study.get("methods") or {}).get(kind) or methods_for_kind(kind))))
    langs = [lang.upper() for lang in study["languages"]]
    return [metric_cell(m, s, t) for m in methods for t in langs for s in langs if s != t]


def run_models(models: Mapping[str, Mapping[str, Any]], study: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(id, kind) of every model the run measures: the run's models, then the study's extra models."""
    out = [(str(mid), str(cfg.get("kind"))) for mid, cfg in models.items()]
    out += [(str(m["id"]), str(m.get("kind"))) for m in (study.get("extra_models") or [])]
    return list(dict.fromkeys(out))
