"""Two models scored on the same items: is one more biased than the other?

Two unpaired intervals that overlap say little when both models met the same items: most of
the variation between items is shared, and only the items on which the models disagree carry
the difference.  So, on the items both models scored:

* **difference of bias scores** (share of items whose stereotypical sentence scores strictly
  higher, ties not stereotypical, as ``stats/bias.py``): share_a - share_b = (n10 - n01) / n,
  with n10 the items only model A gets stereotypical and n01 those only B does.
* **its interval**: Newcombe's (1998) square-and-add (hybrid score) interval for paired
  proportions, method 10: each model's Wilson score interval, combined through the
  correlation phi of the paired table, with phi shrunk as Newcombe does (ad - bc above
  n / 2 loses n / 2, between 0 and n / 2 it is 0); Fagerland, Lydersen and Laake (2014)
  recommend it.  Deterministic: no seed moves it (our choice over a paired bootstrap, which
  would add Monte-Carlo noise at the decision boundary, the trouble ``stats/bias.py`` removed).
* **McNemar's exact test**: the two-sided exact binomial test of n10 against n01 (the
  discordant items) at 0.5, the same p as statsmodels ``mcnemar(exact=True)``.  With no
  discordant item there is no test (NaN).  When even the most lopsided split of the
  discordant items could not reach ``alpha`` (2 * 0.5^D >= alpha) the comparison *cannot be
  decided at this n*; otherwise ``mde_difference`` is the smallest difference the test finds
  with 80% power given the discordant items seen (the binomial MDE of D, ``stats/power.py``,
  as a difference (2 MDE - 1) D / n).
* **continuous scores** (the per-item margins score_stereo - score_anti): the mean of the
  per-item differences of margins, its seeded Monte-Carlo BCa interval (``bca_interval``) and
  a two-sided sign-flip permutation test (scipy ``permutation_test`` over the signs of the
  per-item differences; exact enumeration when 2^n <= the resamples).
* **families**: Holm and Benjamini-Hochberg over one model pair's cells (``stats/multiple.py``),
  the overall row outside the family, as the CrowS table corrects its bias types.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from stereolens.errors import DataError
from stereolens.stats.bias import bca_interval, stereotype_indicator
from stereolens.stats.multiple import add_corrections
from stereolens.stats.power import DEFAULT_POWER, minimum_detectable_rate

# the verdict of one comparison, in words a table can show
A_MORE = "first model more stereotypical"
B_MORE = "second model more stereotypical"
NO_DIFFERENCE = "no difference detected"
UNDECIDABLE = "cannot be decided at this n"


@dataclass(frozen=True)
class PairedShareDifference:
    n: int  # items both models scored
    share_a: float
    share_b: float
    difference: float  # share_a - share_b
    ci_low: float
    ci_high: float
    n_a_only: int  # items only model A gets stereotypical (n10)
    n_b_only: int  # items only model B gets stereotypical (n01)
    p_value: float  # McNemar's exact test; NaN without discordant items
    decidable: bool  # some split of the discordant items could reach alpha
    mde_difference: float  # smallest |difference| found with 80% power given the discordant items (NaN: none)
    verdict: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def mcnemar_exact_p(n_a_only: int, n_b_only: int) -> float:
    """Two-sided exact McNemar p: the binomial test of n10 among the n10 + n01 discordant items at 0.5."""
    discordant = n_a_only + n_b_only
    return float(stats.binomtest(n_a_only, discordant, 0.5).pvalue) if discordant else math.nan


def newcombe_paired_interval(both: int, a_only: int, b_only: int, neither: int, *,
                             confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe's (1998) square-and-add interval (method 10) for share_a - share_b of a paired 2x2
    table: ``both`` items stereotypical for both models, ``a_only`` for A only, ``b_only`` for B
    only, ``neither`` for neither."""
    n = both + a_only + b_only + neither
    if n == 0:
        return math.nan, math.nan
    count_a, count_b = both + a_only, both + b_only
    share_a, share_b = count_a / n, count_b / n
    alpha = 1 - confidence
    low_a, high_a = proportion_confint(count_a, n, alpha=alpha, method="wilson")
    low_b, high_b = proportion_confint(count_b, n, alpha=alpha, method="wilson")
    margins = count_a * (n - count_a) * count_b * (n - count_b)
    phi = 0.0
    if margins > 0:
        cross = both * neither - a_only * b_only
        # Newcombe's shrunken phi: a positive cross product loses n / 2 (and stops at 0)
        phi = (cross - n / 2 if cross > n / 2 else min(cross, 0)) / math.sqrt(margins)
    difference = share_a - share_b
    lower = difference - math.sqrt(max(0.0, (share_a - low_a) ** 2 + (high_b - share_b) ** 2
                                        - 2 * phi * (share_a - low_a) * (high_b - share_b)))
    upper = difference + math.sqrt(max(0.0, (share_b - low_b) ** 2 + (high_a - share_a) ** 2
                                        - 2 * phi * (share_b - low_b) * (high_a - share_a)))
    return float(lower), float(upper)


def paired_share_difference(stereo_a, stereo_b, *, alpha: float = 0.05,
                            power: float = DEFAULT_POWER) -> PairedShareDifference:
    """Compare two models' 0/1 stereotypical outcomes on the same items (aligned arrays)."""
    a = np.asarray(stereo_a, dtype=bool)
    b = np.asarray(stereo_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must align item by item: {a.shape} against {b.shape}")
    n = int(a.size)
    both, a_only = int(np.sum(a & b)), int(np.sum(a & ~b))
    b_only, neither = int(np.sum(~a & b)), int(np.sum(~a & ~b))
    low, high = newcombe_paired_interval(both, a_only, b_only, neither, confidence=1 - alpha)
    p_value = mcnemar_exact_p(a_only, b_only)
    discordant = a_only + b_only
    decidable = bool(discordant and 2 * 0.5**discordant < alpha)
    mde = minimum_detectable_rate(discordant, alpha=alpha, power=power).above if discordant else math.nan
    if not decidable:
        verdict = UNDECIDABLE
    elif p_value < alpha:
        verdict = A_MORE if a_only > b_only else B_MORE
    else:
        verdict = NO_DIFFERENCE
    return PairedShareDifference(
        n=n, share_a=float(a.mean()) if n else math.nan, share_b=float(b.mean()) if n else math.nan,
        difference=(a_only - b_only) / n if n else math.nan, ci_low=low, ci_high=high,
        n_a_only=a_only, n_b_only=b_only, p_value=p_value, decidable=decidable,
        mde_difference=(2 * mde - 1) * discordant / n if n and not math.isnan(mde) else math.nan,
        verdict=verdict)


@dataclass(frozen=True)
class PairedMeanDifference:
    n: int
    mean_difference: float  # mean over items of (value_a - value_b)
    ci_low: float  # seeded Monte-Carlo BCa interval of that mean
    ci_high: float
    p_value: float  # two-sided sign-flip permutation test of mean difference 0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def sign_flip_p(differences, *, n_resamples: int = 9999, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p of "the per-item differences are symmetric about 0",
    with their mean as the statistic (scipy ``permutation_test``; exact when 2^n <= n_resamples)."""
    d = np.asarray(differences, dtype=float)
    if d.size == 0 or np.all(d == 0):
        return math.nan if d.size == 0 else 1.0
    if d.size == 1:
        return 1.0  # the flips of one value, d and -d, are both as extreme as d (scipy refuses one observation)
    res = stats.permutation_test((d,), np.mean, permutation_type="samples", alternative="two-sided",
                                 n_resamples=n_resamples, random_state=np.random.default_rng(seed), vectorized=True,
                                 axis=-1)
    return float(res.pvalue)


def paired_mean_difference(values_a, values_b, *, confidence: float = 0.95, n_resamples: int = 2000,
                           permutations: int = 9999, seed: int = 0) -> PairedMeanDifference:
    """Compare two models' continuous per-item values (e.g. margins) on the same items."""
    a, b = np.asarray(values_a, dtype=float), np.asarray(values_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired values must align item by item: {a.shape} against {b.shape}")
    d = a - b
    if d.size == 0:
        return PairedMeanDifference(0, math.nan, math.nan, math.nan, math.nan)
    low, high = bca_interval(d, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return PairedMeanDifference(n=int(d.size), mean_difference=float(d.mean()), ci_low=low, ci_high=high,
                                p_value=sign_flip_p(d, n_resamples=permutations, seed=seed))


def paired_table(
    scores: pd.DataFrame,
    *,
    by: str | None = None,
    models: list[str] | None = None,
    model_col: str = "model",
    item_col: str = "id",
    stereo_col: str = "score_stereo",
    anti_col: str = "score_anti",
    alpha: float = 0.05,
    n_resamples: int = 2000,
    permutations: int = 9999,
    seed: int = 0,
) -> pd.DataFrame:
    """Every pair of models in a long table of scored pairs (one row per model and item), on the
    items both scored: one overall row (``group == "all"``) and one per value of ``by``.

    Columns: ``model_a, model_b, group, n`` and the :class:`PairedShareDifference` fields, then
    the continuous comparison of margins (``margin_difference, margin_ci_low, margin_ci_high,
    p_margin``), then ``p_holm, p_bh, significant_holm, significant_bh`` of McNemar's p over the
    pair's cells (the overall row outside the family; empty there)."""
    needed = [model_col, item_col, stereo_col, anti_col] + ([by] if by else [])
    missing = [c for c in needed if c not in scores.columns]
    if missing:
        raise DataError(f"paired comparison: the scores lack column(s) {', '.join(missing)}")
    names = models if models is not None else sorted(scores[model_col].astype(str).unique())
    duplicated = scores.duplicated([model_col, item_col])
    if duplicated.any():
        first = scores.loc[duplicated].iloc[0]
        raise DataError(f"paired comparison: model {first[model_col]!r} scored item {first[item_col]!r} twice")
    rows = []
    for model_a, model_b in itertools.combinations(names, 2):
        keep = [item_col, stereo_col, anti_col] + ([by] if by else [])
        part_a = scores.loc[scores[model_col].astype(str) == model_a, keep]
        part_b = scores.loc[scores[model_col].astype(str) == model_b, [item_col, stereo_col, anti_col]]
        merged = part_a.merge(part_b, on=item_col, suffixes=("_a", "_b"))  # the items both scored
        groups = [("all", merged)]
        if by:
            groups += [(str(key), part) for key, part in merged.groupby(by, sort=True)]
        pair_rows = []
        for group, part in groups:
            outcome_a = stereotype_indicator(part[f"{stereo_col}_a"], part[f"{anti_col}_a"])
            outcome_b = stereotype_indicator(part[f"{stereo_col}_b"], part[f"{anti_col}_b"])
            share = paired_share_difference(outcome_a, outcome_b, alpha=alpha)
            margins = paired_mean_difference(
                part[f"{stereo_col}_a"].to_numpy(float) - part[f"{anti_col}_a"].to_numpy(float),
                part[f"{stereo_col}_b"].to_numpy(float) - part[f"{anti_col}_b"].to_numpy(float),
                confidence=1 - alpha, n_resamples=n_resamples, permutations=permutations, seed=seed)
            pair_rows.append({"model_a": model_a, "model_b": model_b, "group": group, **share.as_dict(),
                              "margin_difference": margins.mean_difference, "margin_ci_low": margins.ci_low,
                              "margin_ci_high": margins.ci_high, "p_margin": margins.p_value})
        table = pd.DataFrame(pair_rows)
        cells = table["group"] != "all"
        corrected = add_corrections(table.loc[cells], p_col="p_value", alpha=alpha)
        for col in ("p_holm", "p_bh", "significant_holm", "significant_bh"):
            table[col] = pd.Series([None] * len(table), index=table.index, dtype=object)
            table.loc[cells, col] = corrected[col].astype(object)
        rows.append(table)
    if not rows:
        return pd.DataFrame()
    return pd.concat(rows, ignore_index=True)


# --- the paired-comparison file every study writes (reports/<study>/paired.json) ----------------------------------

# the verdicts as the file spells them (the profile and `stereolens compare --paired` read these words)
FILE_VERDICTS = {A_MORE: "model_a more", B_MORE: "model_b more", NO_DIFFERENCE: NO_DIFFERENCE,
                 UNDECIDABLE: UNDECIDABLE}
COMPARISON_FIELDS = ("model_a", "model_b", "cell", "n", "estimate_a", "estimate_b", "difference", "ci_low", "ci_high",
                     "p_value", "p_holm", "p_bh", "significant_holm", "significant_bh", "verdict", "mde")
MCNEMAR_TEST = ("McNemar's exact test on the items both models scored (the two-sided exact binomial test of the "
                "items only model A scores stereotypical among the discordant items); difference = bias score of "
                "model A minus model B (each the share of the items whose stereotypical sentence scores strictly "
                "higher, ties not stereotypical), with Newcombe's square-and-add paired interval (method 10); mde = "
                "the smallest difference the test finds with 80% power given the discordant items seen")


def comparison_records(table: pd.DataFrame, *, cell_col: str = "group", extra: tuple[str, ...] = ()) -> list[dict]:
    """The rows of :func:`paired_table` as the file's comparisons (:data:`COMPARISON_FIELDS`, then ``extra``
    columns of ``table``): the verdict in the file's words, the MDE of the difference, None for the
    adjusted columns of a row outside the family."""
    records = []
    for row in table.to_dict("records"):
        record = {"model_a": row["model_a"], "model_b": row["model_b"], "cell": str(row[cell_col]), "n": int(row["n"]),
                  "estimate_a": row["share_a"], "estimate_b": row["share_b"], "difference": row["difference"],
                  "ci_low": row["ci_low"], "ci_high": row["ci_high"], "p_value": row["p_value"],
                  "p_holm": _or_none(row.get("p_holm")), "p_bh": _or_none(row.get("p_bh")),
                  "significant_holm": _flag(row.get("significant_holm")),
                  "significant_bh": _flag(row.get("significant_bh")),
                  "verdict": FILE_VERDICTS[row["verdict"]], "mde": _or_none(row["mde_difference"])}
        records.append({**record, **{key: row[key] for key in extra}})
    return records


def _or_none(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _flag(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else bool(value)


def paired_document(*, study: str, models: list[str], comparisons: list[dict], family: str,
                    test: str = MCNEMAR_TEST, reason: str | None = None, **extra) -> dict:
    """``reports/<study>/paired.json``: what was compared, how, over which family, and every comparison; an
    empty list carries the ``reason`` (one model in the run, a model that scored nothing)."""
    document = {"study": study, "models": list(models), "test": test, "family": family, "comparisons": comparisons}
    if not comparisons:
        document["reason"] = reason or "no pair of models scored the same items"
    elif reason:
        document["note"] = reason
    return {**document, **extra}


def comparisons_of(document: dict, model: str) -> list[dict]:
    """The comparisons of a paired file that involve ``model`` (the ``paired`` block of its summary.json)."""
    return [c for c in document.get("comparisons", []) if model in (c["model_a"], c["model_b"])]


def difference_from(comparison: dict, model: str) -> float | None:
    """A comparison's difference as ``model`` minus the other model (the sign a model's own report reads)."""
    value = comparison.get("difference")
    if value is None:
        return None
    return float(value) if comparison["model_a"] == model else -float(value)


PAIRED_FILE = "paired.json"


def paired_block(path, model: str, *, stage: str, models: list[str] | None = None) -> dict:
    """The ``paired`` block of ``model``'s summary.json, read from the study's paired file at ``path``: the
    test, the family, the run's models and the comparisons that involve ``model``; without the file (a
    per-model stage run by hand, before ``stage``) an empty list says so, with ``models`` (the run's, from
    its config) as the models."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return {"file": str(path), "models": list(models or [model]), "comparisons": [],
                "reason": f"{path} not found: the {stage} stage has not run"}
    document = json.loads(path.read_text(encoding="utf-8"))
    block = {"file": str(path), "test": document.get("test"), "family": document.get("family"),
             "models": list(document.get("models") or [model]), "comparisons": comparisons_of(document, model)}
    if not block["comparisons"]:
        block["reason"] = document.get("reason") or f"{model} was not compared with another model"
    return block


def paired_metrics(block: dict, model: str, cells: list[str] | dict[str, str], *,
                   prefix: str = "paired.difference") -> dict:
    """``<prefix>.<other model>.<cell>``: ``model`` minus the other model, for every model of the run (the
    axis) and every cell (a dict maps a comparison's cell to the name the metric gives it); None (logged as
    NaN) for ``model`` itself and for a pair or cell not compared."""
    names = cells if isinstance(cells, dict) else {cell: cell for cell in cells}
    found = {}
    for comparison in block.get("comparisons", []):
        other = comparison["model_b"] if comparison["model_a"] == model else comparison["model_a"]
        found[(other, comparison["cell"])] = difference_from(comparison, model)
    return {f"{prefix}.{other}.{name}": found.get((other, cell)) for other in block.get("models") or [model]
            for cell, name in names.items()}
