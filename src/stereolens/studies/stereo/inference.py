"""How firmly the stereo study's evaluation claims what it claims (issue 32).

* **The test of a country** (the star of ``by_country.csv``).  ss is StereoSet's score: a macro
  average over target terms of the share of instances whose stereotypical sentence scores higher,
  a tie counted as anti-stereotypical, with an item-bootstrap percentile interval
  (``stats/stereoset.py``).  The test beside it is the one every starred table of the project runs
  (``stats/bias.py``): among the country's *untied* instances (score_stereo != score_anti), the
  stereotypical sentence wins as often as it loses (``share_untied`` = 0.5), by its exact 95% BCa
  interval (the star) and the exact binomial (sign) p; Holm and Benjamini-Hochberg over the
  countries, the overall row outside the family.  When every target term has one instance and
  nothing ties, ``share_untied`` x 100 is ss.
* **Minimum detectable effect** of each country from its untied instances
  (``stats/power.py``), unadjusted and at Bonferroni's alpha / m over the countries.
* **Clustered interval** (``stats/cluster.py``): instances instantiated from one validated
  stereotype share their source (the generator's or an annotator's triples of one
  ``stereotype_id``), so beside the item-level interval the same share is resampled by stereotype.
  Each starter triple is its own stereotype, so on the starter set the two intervals differ only
  by Monte-Carlo noise.  The star uses the item-level interval.
* **Robustness** (``stats/robustness.py``): the overall verdict recomputed per-token mean against
  summed candidate scores (re-aggregated from the stored scores and token counts: no second model
  pass), against StereoSet's generative score (another model pass: run where
  ``study.stereo.evaluation.generative_pass`` made it, causal LMs only), and with and without each
  source kind of instance (authored, machine, human).
* **Paired comparisons** between the run's models on the instances both scored, per country:
  McNemar's exact test on the per-instance stereotype-preferred indicator (``stats/paired.py``),
  and the per-instance lms indicator compared by a sign-flip test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from stereolens.report.markdown import format_cell
from stereolens.stats.bias import BiasScore, bias_score, bias_table
from stereolens.stats.cluster import MIN_CLUSTERS, cluster_ratio_interval
from stereolens.stats.multiple import add_corrections, family_description
from stereolens.stats.paired import MCNEMAR_TEST, comparison_records, paired_document, paired_mean_difference, paired_table
from stereolens.stats.power import mde_columns, mde_legend, undetected_lines
from stereolens.stats.robustness import HEADLINE, not_run_row, robustness_table, second_pass_row, share_row

# instances of one validated stereotype share a source: the unit the clustered interval resamples
CLUSTER_UNIT = "stereotype_id"
CLUSTER_UNIT_WORDS = ("stereotype (`stereotype_id`: the triples instantiated from one validated stereotype share "
                      "it; each starter triple is its own stereotype)")
# the test columns by_country.csv carries beside ss / lms / icat, in this order
TEST_COLUMNS = ("n_untied", "share_untied", "ci_low", "ci_high", "ci_low_cluster", "ci_high_cluster", "n_clusters",
                "p_value", "p_holm", "p_bh", "favours", "significant", "borderline", "degenerate", "significant_holm",
                "significant_bh", "mde", "alpha_adjusted", "mde_adjusted")
# the kinds of instance (instantiation.SOURCES), in the order the robustness table lists them
SOURCE_KINDS = ("authored", "machine", "human")
GENERATIVE = "stereoset_generative"
GENERATIVE_PASS_KEY = "study.stereo.evaluation.generative_pass"
CANDIDATES = ("stereo", "anti", "unrelated")


def alternative_score_columns(score: str) -> dict[str, str]:
    """Where the scores of a second pass with ``score`` are stored beside the headline's (scores.csv)."""
    return {f"score_{c}": f"score_{c}_{score}" for c in CANDIDATES}


# --- the test of each country ----------------------------------------------------------------------------------


def country_tests(scores: pd.DataFrame, *, confidence: float = 0.95, n_resamples: int = 2000,
                  seed: int = 0) -> tuple[pd.DataFrame, float]:
    """One row overall (``country == "all"``) and one per country: :data:`TEST_COLUMNS`; and Bonferroni's
    alpha / m over the countries (the level of ``mde_adjusted``).  ``n_resamples`` 0 gives no clustered
    interval (as the item bootstrap of ss is skipped then)."""
    alpha = 1 - confidence
    table = bias_table(scores, "country", confidence=confidence).rename(columns={"group": "country"})
    table["n_untied"] = table["n"] - table["ties"]
    per_country = table["country"] != "all"
    corrected = add_corrections(table.loc[per_country], p_col="p_value", alpha=alpha)
    for col in ("p_holm", "p_bh", "significant_holm", "significant_bh"):
        # the overall row is outside the family: no adjusted value (empty, not False)
        table[col] = pd.Series([None] * len(table), index=table.index, dtype=object)
        table.loc[per_country, col] = corrected[col].astype(object)
    mde, level = mde_columns(table["n_untied"], per_country, alpha=alpha)
    table["mde"], table["mde_adjusted"] = mde["mde"], mde["mde_adjusted"]
    table["alpha_adjusted"] = np.where(per_country, level, np.nan)
    low, high, clusters = [], [], []
    for country in table["country"]:
        part = scores if country == "all" else scores[scores["country"].astype(str) == country]
        interval = _cluster_interval(part, confidence=confidence, n_resamples=n_resamples, seed=seed)
        low.append(interval[0])
        high.append(interval[1])
        clusters.append(interval[2])
    table["ci_low_cluster"], table["ci_high_cluster"], table["n_clusters"] = low, high, clusters
    return table[["country", "n", "ties", *TEST_COLUMNS]], level


def _cluster_interval(part: pd.DataFrame, *, confidence: float, n_resamples: int, seed: int) -> tuple[float, float, Any]:
    """The share of stereotypical wins among untied instances, resampled by stereotype: (low, high, clusters)."""
    if CLUSTER_UNIT not in part.columns or not n_resamples:
        return math.nan, math.nan, None
    stereo, anti = part["score_stereo"].to_numpy(float), part["score_anti"].to_numpy(float)
    interval = cluster_ratio_interval(stereo > anti, stereo != anti, part[CLUSTER_UNIT], confidence=confidence,
                                      n_resamples=n_resamples, seed=seed)
    return interval.low, interval.high, interval.n_clusters


def with_country_tests(by_country: pd.DataFrame, tests: pd.DataFrame) -> pd.DataFrame:
    """``by_country`` (StereoSet's scores, one row per country and ``all``) with the test columns after it."""
    return by_country.merge(tests.drop(columns=["n"]), on="country", how="left", validate="one_to_one")


def country_legend(n_countries: int, *, confidence: float, adjusted_alpha: float, n_resamples: int) -> str:
    """What ``by_country.csv``'s columns are, for the report page."""
    alpha = 1 - confidence
    level = format_cell(confidence * 100)
    cluster = (f"`ci_low_cluster`/`ci_high_cluster`: the same share with its {level}% BCa interval resampled by "
               f"{CLUSTER_UNIT_WORDS}, {n_resamples} resamples; none with fewer than {MIN_CLUSTERS} stereotypes "
               "(`n_clusters`)." if n_resamples else "No clustered interval (bootstrap 0).")
    return (
        "`ss`, `lms`, `icat`: StereoSet's scores (0-100; macro averages over target terms, a tie counted as "
        "anti-stereotypical) with item-bootstrap percentile intervals. The test of each row (ours: StereoSet and "
        "EspanStereo report ss without a test; this is the one test of a share the CrowS and pairs tables run; the "
        "star, `significant`): among the row's untied instances (`n_untied`, score_stereo != score_anti; an instance "
        "compares a pair of sentences) the stereotypical sentence wins as often as it loses (`share_untied` = 0.5), "
        f"by the exact {level}% BCa interval of `share_untied` (`ci_low`/`ci_high`, item level: **the star uses "
        "this interval**) and the exact binomial (sign) test (`p_value`); a `borderline` row is never significant. "
        + cluster + " "
        + family_description(n_countries, alpha) + " Family: the countries; the overall row is outside it. "
        + mde_legend(alpha, adjusted_alpha, n_countries, family="the countries"))


def undetected_country_lines(tests: pd.DataFrame, *, confidence: float) -> list[str]:
    """Under the table: what each country without a star could not have found (``stats.power.undetected_lines``;
    the overall row is left out, as it is out of the family)."""
    rows = tests[tests["country"] != "all"].reset_index(drop=True)
    return undetected_lines(rows, rows["country"], alpha=1 - confidence)


def test_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    """A country's test as summary.json carries it (``by_country.<country>.test``)."""
    def number(value):
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)

    def flag(value):
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else bool(value)

    return {"n_untied": int(row["n_untied"]), "share_untied": number(row["share_untied"]),
            "ci": [number(row["ci_low"]), number(row["ci_high"])],
            "ci_cluster": [number(row["ci_low_cluster"]), number(row["ci_high_cluster"])],
            "cluster_unit": CLUSTER_UNIT, "p_value": number(row["p_value"]), "p_holm": number(row["p_holm"]),
            "p_bh": number(row["p_bh"]), "favours": str(row["favours"]), "significant": bool(row["significant"]),
            "significant_holm": flag(row["significant_holm"]), "mde": number(row["mde"]),
            "mde_adjusted": number(row["mde_adjusted"])}


# --- robustness of the overall verdict -------------------------------------------------------------------------


def _verdict(stereo, anti, confidence: float) -> BiasScore:
    return bias_score(np.asarray(stereo, dtype=float), np.asarray(anti, dtype=float), confidence=confidence)


def robustness_rows(scores: pd.DataFrame, *, score: str, kind: str, confidence: float = 0.95) -> pd.DataFrame:
    """The robustness table of one model's overall verdict (``stats.robustness``): the headline (the configured
    candidate score, every instance), then the other candidate scores and each source kind in and out.  Each
    estimate is the share of stereotypical wins among the variant's untied instances with its exact BCa interval;
    ``n`` counts those instances."""
    stereo, anti = scores["score_stereo"].to_numpy(float), scores["score_anti"].to_numpy(float)
    rows = [share_row(f"headline: {score} candidate scores, every instance", HEADLINE, _verdict(stereo, anti, confidence))]
    rows += _score_rows(scores, score=score, kind=kind, confidence=confidence)
    rows += _source_rows(scores, confidence=confidence)
    return robustness_table(rows)


def _score_rows(scores: pd.DataFrame, *, score: str, kind: str, confidence: float) -> list[dict[str, Any]]:
    choice = "candidate score"
    rows = []
    counts = ("n_tokens_stereo", "n_tokens_anti")
    for other in ("mean", "sum"):
        if other == score:
            continue
        if score == GENERATIVE:
            rows.append(not_run_row(choice, other, "needs another model pass: StereoSet's generative score is not a "
                                                   "function of the candidate's log-likelihood given the context"))
        elif not set(counts) <= set(scores.columns):
            rows.append(not_run_row(choice, other, "the scores carry no token counts (n_tokens_stereo / n_tokens_anti)"))
        else:
            n_stereo, n_anti = (scores[c].to_numpy(float) for c in counts)
            s, a = scores["score_stereo"].to_numpy(float), scores["score_anti"].to_numpy(float)
            # mean = sum / tokens (stats/stereoset.py aggregate_logprob), so either one gives the other exactly
            if other == "sum":
                s, a, how = s * n_stereo, a * n_anti, "per-token means times token counts"
            else:
                s, a, how = s / n_stereo, a / n_anti, "sums divided by token counts"
            rows.append(share_row(choice, other, _verdict(s, a, confidence),
                             f"re-aggregated from the stored scores ({how}): no second model pass"))
    if score != GENERATIVE:
        columns = alternative_score_columns(GENERATIVE)
        if kind != "causal":
            rows.append(not_run_row(choice, GENERATIVE, f"StereoSet's generative score is defined for causal LMs; "
                                                        f"this model is {kind}"))
        else:
            rows.append(second_pass_row(
                scores, choice, GENERATIVE, (columns["score_stereo"], columns["score_anti"]), alpha=1 - confidence,
                ran_reason="a second model pass: the candidate scored alone over the context sentence's mean "
                           "(moinnadeem/StereoSet eval_generative_models.py)",
                missing_reason=f"needs another model pass, not made in this run (set {GENERATIVE_PASS_KEY}: true)"))
    return rows


def _source_rows(scores: pd.DataFrame, *, confidence: float) -> list[dict[str, Any]]:
    choice = "instance source"
    rows = []
    for kind in SOURCE_KINDS:
        only, without = f"{kind} only", f"without {kind}"
        if "source" not in scores.columns:
            rows += [not_run_row(choice, v, "the scores carry no source column") for v in (only, without)]
            continue
        mask = (scores["source"].astype(str) == kind).to_numpy()
        if not mask.any():
            rows += [not_run_row(choice, v, f"no {kind} instance in this run") for v in (only, without)]
            continue
        if mask.all():
            # the same instances as the headline: agreeing with itself is no evidence
            rows += [not_run_row(choice, only, f"every instance is {kind}: the headline's instances"),
                     not_run_row(choice, without, f"every instance is {kind}: no instance left")]
            continue
        stereo, anti = scores["score_stereo"].to_numpy(float), scores["score_anti"].to_numpy(float)
        rows.append(share_row(choice, only, _verdict(stereo[mask], anti[mask], confidence),
                         f"the {int(mask.sum())} {kind} instances"))
        rows.append(share_row(choice, without, _verdict(stereo[~mask], anti[~mask], confidence),
                         f"the {int((~mask).sum())} instances of the other sources"))
    return rows


# --- paired comparisons between the run's models -----------------------------------------------------------------

SS_TEST = (MCNEMAR_TEST + ". Per instance: stereotype preferred = score_stereo > score_anti (a tie is not "
           "preferred, as StereoSet's ss counts it); the estimates are the shares of all instances both models "
           "scored (a micro average: StereoSet's ss averages over target terms)")
LMS_TEST = ("per instance, the lms indicator ((score_stereo > score_unrelated) + (score_anti > score_unrelated)) / 2; "
            "difference = mean over the instances both models scored of model A's indicator minus model B's, with a "
            "seeded Monte-Carlo BCa interval and a two-sided sign-flip permutation test; Holm and Benjamini-Hochberg "
            "over one model pair's countries, the overall row outside the family")
ICAT_NOTE = ("not compared: icat = lms x min(ss, 100 - ss) / 50 is a product of two aggregates, not a mean of "
             "per-instance values, so it has no per-instance test; its difference follows from the ss and lms "
             "comparisons")
FAMILY = "the countries of one model pair (Holm and Benjamini-Hochberg over them); the overall row is outside the family"


def lms_indicator(scores: pd.DataFrame) -> np.ndarray:
    """Per instance, StereoSet's language-model score as a share: how many of its two meaningful candidates
    beat the unrelated one, over two (its mean over instances is lms / 100 when every target has one)."""
    s, a, u = (scores[f"score_{c}"].to_numpy(float) for c in CANDIDATES)
    return ((s > u).astype(float) + (a > u).astype(float)) / 2


def paired_lms(long: pd.DataFrame, models: Sequence[str], *, confidence: float = 0.95, n_resamples: int = 2000,
               permutations: int = 9999, seed: int = 0) -> pd.DataFrame:
    """Every pair of ``models``, on the instances both scored: the lms indicator compared overall and per country."""
    rows = []
    keep = ["id", "country", *(f"score_{c}" for c in CANDIDATES)]
    for model_a, model_b in itertools.combinations(models, 2):
        part_a = long.loc[long["model"] == model_a, keep]
        part_b = long.loc[long["model"] == model_b, keep].drop(columns="country")
        merged = part_a.merge(part_b, on="id", suffixes=("_a", "_b"))
        pair = []
        for cell, part in [("all", merged), *((str(k), p) for k, p in merged.groupby("country", sort=True))]:
            a = lms_indicator(part.rename(columns=lambda c: c.removesuffix("_a")))
            b = lms_indicator(part.rename(columns=lambda c: c.removesuffix("_b")))
            result = paired_mean_difference(a, b, confidence=confidence, n_resamples=n_resamples,
                                            permutations=permutations, seed=seed)
            pair.append({"model_a": model_a, "model_b": model_b, "cell": cell, "n": result.n,
                         "estimate_a": float(a.mean()) if len(a) else math.nan,
                         "estimate_b": float(b.mean()) if len(b) else math.nan,
                         "difference": result.mean_difference, "ci_low": result.ci_low, "ci_high": result.ci_high,
                         "p_value": result.p_value})
        table = pd.DataFrame(pair)
        cells = table["cell"] != "all"
        corrected = add_corrections(table.loc[cells], p_col="p_value", alpha=1 - confidence)
        for col in ("p_holm", "p_bh", "significant_holm", "significant_bh"):
            table[col] = pd.Series([None] * len(table), index=table.index, dtype=object)
            table.loc[cells, col] = corrected[col].astype(object)
        rows.append(table)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def paired_comparisons(long: pd.DataFrame, models: Sequence[str], *, confidence: float = 0.95, seed: int = 0,
                       n_resamples: int = 2000, permutations: int = 9999,
                       note: str | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(paired.csv, paired.json) of the stereo study: ss per country by McNemar's exact test on the instances
    both models scored, lms by a sign-flip test; ``long`` has one row per model and instance (``model``,
    ``id``, ``country``, the three scores)."""
    models = list(models)
    if len(models) < 2:
        reason = (f"one model in this run ({', '.join(models) or 'none scored an instance'}): nothing to compare"
                  + (f"; {note}" if note else ""))
        return pd.DataFrame(), paired_document(study="stereo", models=models, comparisons=[], family=FAMILY,
                                               test=SS_TEST, reason=reason, lms_comparisons=[], icat=ICAT_NOTE)
    table = paired_table(long, by="country", models=models, alpha=1 - confidence, n_resamples=n_resamples,
                         permutations=permutations, seed=seed)
    comparisons = comparison_records(table, cell_col="group", extra=("n_a_only", "n_b_only"))
    lms = paired_lms(long, models, confidence=confidence, n_resamples=n_resamples, permutations=permutations, seed=seed)
    lms_records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
                   for row in lms.to_dict("records")]
    document = paired_document(study="stereo", models=models, comparisons=comparisons, family=FAMILY, test=SS_TEST,
                               reason=note, lms_test=LMS_TEST, lms_comparisons=lms_records, icat=ICAT_NOTE)
    return table.rename(columns={"group": "cell"}), document
