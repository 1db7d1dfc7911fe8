"""Does a model's association follow the locale's human verdicts?  Per locale, from an associations table.

- **AUC**: the probability that a tuple most annotators called a stereotype has a higher association than a
  tuple most called not a stereotype (ties one half; :func:`stereolens.stats.ranking.auc`), with a percentile
  interval from resampling identities (a cluster bootstrap: an identity's tuples share its template sentences).
- **Spearman**: rank correlation of the association with the stereotype vote share (stereotype votes over the
  annotators), over every tuple of the locale, with the same kind of interval.
- The same two **split by offensiveness**: tuples whose ``mean_offensive_score`` is above the cut, and those at
  or below it (tuples without a score, some Arabic ones, are in neither).
- **Cross-locale**: over locale A's tuples aligned with locale B's through the authors' English translations,
  association in A ~ A's stereotype vote share + B's (OLS, standard errors clustered by identity; statsmodels),
  the coefficients with intervals: does B's verdict predict the model's association in A beyond A's own?

Limits stated wherever the numbers are shown: three annotators per tuple (a vote share moves in thirds, and a
majority is two of three), and the English translations that align locales are the dataset authors'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pandera.pandas as pa

from stereolens.datasets.seegull import NO_MAJORITY, NOT_STEREOTYPE, STEREOTYPE, alignment_key, verdict_of
from stereolens.stats.ranking import auc, cluster_bootstrap_interval, spearman
from stereolens.tables import count_column, number_column, text_column, validate_table

REQUIRED_COLUMNS = ("locale", "identity", "attribute", "stereotype_votes", "non_stereotype_votes", "unsure_votes",
                    "association")
SUBSETS = ("all", "offensive", "not_offensive")
# the columns of by_locale.csv
LOCALE_COLUMNS = ("locale", "subset", "n_tuples", "n_stereotype", "n_not", "n_no_majority", "n_identities", "auc",
                  "auc_low", "auc_high", "auc_resamples_defined", "spearman", "spearman_p", "spearman_low",
                  "spearman_high", "mean_association_stereotype", "mean_association_not")
LIMITS = ("Each tuple was judged by 3 annotators of its locale: a vote share moves in thirds and a majority is 2 of 3.",
          "In the published files every tuple has at least one stereotype vote, so a not-stereotype majority is 1 of "
          "3 stereotype votes, never 0: the AUC compares 2-3 of 3 against 1 of 3.",
          "The English translations that align tuples across locales were written by the dataset's authors; a tuple "
          "without an exact translation match in the other locale is not aligned.")
AUC_DEFINITION = ("AUC: probability that a tuple most of its annotators called a stereotype has a higher association "
                  "than a tuple most called not a stereotype (ties count one half); interval: percentile of a "
                  "cluster bootstrap resampling identities")
SPEARMAN_DEFINITION = "Spearman: rank correlation of the association with the stereotype vote share, every tuple"
ASSOCIATION_DEFINITION = ("association: ILPS, the attribute's log-probability after a template naming the identity "
                          "minus after the template naming the generic group, aggregated over the language's templates")


def associations_schema(max_votes: int = 1000) -> pa.DataFrameSchema:
    """An associations table (``associations.csv``, or any file for ``seegull evaluate``): a locale, identity and
    attribute per row, whole-number votes, a finite association; offensiveness and translations optional."""
    votes = {c: count_column(minimum=0, maximum=max_votes, what=f"{c} count")
             for c in ("stereotype_votes", "non_stereotype_votes", "unsure_votes")}
    return pa.DataFrameSchema(
        {"locale": text_column(what="locale"), "identity": text_column(what="identity"),
         "attribute": text_column(what="attribute"), **votes, "association": number_column(what="association"),
         "mean_offensive_score": number_column(nullable=True, required=False, what="mean_offensive_score")},
        unique=["locale", "identity", "attribute"],
    )


def checked_associations(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    """``frame`` validated, the votes as integers and the verdict and vote share recomputed from them (never
    read from the file), so every number below traces to the annotators' votes."""
    if "mean_offensive_score" in frame:
        # a blank score is missing (some Arabic tuples have none), as the SeeGULL reader reads it
        frame = frame.assign(mean_offensive_score=frame["mean_offensive_score"].replace("", None))
    table = validate_table(frame, associations_schema(), where).copy()
    for column in ("stereotype_votes", "non_stereotype_votes", "unsure_votes"):
        table[column] = pd.to_numeric(table[column].astype(str).str.strip()).astype(int)
    table["n_annotators"] = table[["stereotype_votes", "non_stereotype_votes", "unsure_votes"]].sum(axis=1)
    table["stereotype_share"] = table["stereotype_votes"] / table["n_annotators"].where(table["n_annotators"] > 0)
    table["verdict"] = verdict_of(table["stereotype_votes"], table["non_stereotype_votes"], table["n_annotators"])
    table["association"] = table["association"].astype(float)
    if "mean_offensive_score" not in table:
        table["mean_offensive_score"] = np.nan
    table["mean_offensive_score"] = pd.to_numeric(table["mean_offensive_score"], errors="coerce")
    return table


def _subset(rows: pd.DataFrame, subset: str, cut: float) -> pd.DataFrame:
    if subset == "offensive":
        return rows[rows["mean_offensive_score"] > cut]
    if subset == "not_offensive":
        return rows[rows["mean_offensive_score"] <= cut]
    return rows


def agreement_row(rows: pd.DataFrame, *, resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    """AUC and Spearman of one set of tuples, each with its identity-cluster bootstrap interval, and the counts."""
    scores = rows["association"].to_numpy(dtype=float)
    positive = (rows["verdict"] == STEREOTYPE).to_numpy()
    negative = (rows["verdict"] == NOT_STEREOTYPE).to_numpy()
    share = rows["stereotype_share"].to_numpy(dtype=float)

    def auc_of(idx: np.ndarray) -> float | None:
        return auc(scores[idx][positive[idx]], scores[idx][negative[idx]])

    def rho_of(idx: np.ndarray) -> float | None:
        return spearman(scores[idx], share[idx])[0]

    everything = np.arange(len(rows))
    identities = rows["identity"].astype(str).to_numpy()
    auc_ci = cluster_bootstrap_interval(auc_of, identities, n_resamples=resamples, confidence=confidence, seed=seed)
    rho, p = spearman(scores, share)
    rho_ci = cluster_bootstrap_interval(rho_of, identities, n_resamples=resamples, confidence=confidence, seed=seed)
    return {"n_tuples": len(rows), "n_stereotype": int(positive.sum()), "n_not": int(negative.sum()),
            "n_no_majority": int((rows["verdict"] == NO_MAJORITY).sum()), "n_identities": len(set(identities)),
            "auc": auc_of(everything), "auc_low": auc_ci.low, "auc_high": auc_ci.high,
            "auc_resamples_defined": auc_ci.n_defined, "spearman": rho, "spearman_p": p,
            "spearman_low": rho_ci.low, "spearman_high": rho_ci.high,
            "mean_association_stereotype": float(scores[positive].mean()) if positive.any() else None,
            "mean_association_not": float(scores[negative].mean()) if negative.any() else None}


def locale_table(associations: pd.DataFrame, *, resamples: int = 1000, confidence: float = 0.95, seed: int = 0,
                 offensive_cut: float = 0.0) -> pd.DataFrame:
    """One row per locale and subset (all tuples, offensive, not offensive): the counts, AUC and Spearman with
    their intervals."""
    rows = []
    for locale, part in associations.groupby("locale", sort=False):
        for subset in SUBSETS:
            chosen = _subset(part, subset, offensive_cut)
            rows.append({"locale": locale, "subset": subset,
                         **agreement_row(chosen, resamples=resamples, confidence=confidence, seed=seed)})
    return pd.DataFrame(rows, columns=list(LOCALE_COLUMNS))


# ---------------------------------------------------------------- cross-locale


def aligned_verdicts(associations: pd.DataFrame, verdicts: pd.DataFrame, pairs: Sequence[Sequence[str]]) -> pd.DataFrame:
    """For each ordered pair (A, B): A's tuples (with their association) whose English identity and attribute
    match tuples of B, with B's stereotype vote share over those matching tuples (their stereotype votes over
    their annotators, pooled when B lists the translation more than once)."""
    need = {"identity_en", "attribute_en"}
    frames = []
    for locale, other in pairs:
        mine = associations[associations["locale"] == locale]
        theirs = verdicts[verdicts["locale"] == other]
        if mine.empty or theirs.empty or not need <= set(mine.columns) or not need <= set(theirs.columns):
            continue
        theirs = theirs.assign(key=alignment_key(theirs["identity_en"], theirs["attribute_en"]))
        pooled = theirs.groupby("key").agg(other_stereotype_votes=("stereotype_votes", "sum"),
                                           other_annotators=("n_annotators", "sum"), other_tuples=("key", "size"))
        pooled["other_share"] = pooled["other_stereotype_votes"] / pooled["other_annotators"]
        joined = mine.assign(key=alignment_key(mine["identity_en"], mine["attribute_en"])).join(pooled, on="key",
                                                                                                 how="inner")
        frames.append(joined.assign(other_locale=other).rename(columns={"stereotype_share": "own_share"}))
    columns = ["locale", "other_locale", "identity", "attribute", "identity_en", "attribute_en", "association",
               "own_share", "other_share", "other_stereotype_votes", "other_annotators", "other_tuples"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


TERMS = {"Intercept": "intercept", "own_share": "own verdict", "other_share": "other locale's verdict"}


def cross_locale_fit(aligned: pd.DataFrame, *, confidence: float = 0.95, min_aligned: int = 10) -> list[dict[str, Any]]:
    """association ~ own_share + other_share over one pair's aligned tuples, OLS with standard errors clustered
    by identity (statsmodels); one row per term, or one row saying why there is no fit."""
    import statsmodels.formula.api as smf

    base = {"n_aligned": len(aligned), "n_identities": int(aligned["identity"].nunique())}
    why = None
    if len(aligned) < min_aligned:
        why = f"{len(aligned)} aligned tuples, fewer than min_aligned {min_aligned}"
    elif aligned["own_share"].nunique() < 2 or aligned["other_share"].nunique() < 2:
        why = "a verdict is constant over the aligned tuples"
    elif base["n_identities"] < 2:
        why = "fewer than two identities to cluster by"
    if why:
        return [{**base, "term": None, "estimate": None, "std_error": None, "ci_low": None, "ci_high": None,
                 "p": None, "note": why}]
    data = aligned.astype({"association": float, "own_share": float, "other_share": float})
    groups = pd.factorize(data["identity"])[0]
    fit = smf.ols("association ~ own_share + other_share", data=data).fit(cov_type="cluster",
                                                                           cov_kwds={"groups": groups})
    bounds = fit.conf_int(alpha=1 - confidence)
    return [{**base, "term": TERMS[name], "estimate": float(fit.params[name]), "std_error": float(fit.bse[name]),
             "ci_low": float(bounds.loc[name, 0]), "ci_high": float(bounds.loc[name, 1]), "p": float(fit.pvalues[name]),
             "note": ""} for name in TERMS]


def cross_locale_table(aligned: pd.DataFrame, pairs: Sequence[Sequence[str]], *, confidence: float = 0.95,
                       min_aligned: int = 10) -> pd.DataFrame:
    rows = []
    for locale, other in pairs:
        part = aligned[(aligned["locale"] == locale) & (aligned["other_locale"] == other)]
        rows += [{"locale": locale, "other_locale": other, **r}
                 for r in cross_locale_fit(part, confidence=confidence, min_aligned=min_aligned)]
    return pd.DataFrame(rows, columns=["locale", "other_locale", "term", "estimate", "std_error", "ci_low", "ci_high",
                                       "p", "n_aligned", "n_identities", "note"])


def locale_pairs(locales: Sequence[str], configured: Sequence[Sequence[str]] | None) -> list[tuple[str, str]]:
    """The configured ordered pairs, or every ordered pair of ``locales``."""
    if configured is not None:
        return [(str(a), str(b)) for a, b in configured]
    return [(a, b) for a in locales for b in locales if a != b]
