"""Inter-annotator agreement with bootstrap confidence intervals.

Every metric takes judgements in long format (``item_id, annotator_id, label``;
column names can be changed) and returns an :class:`AgreementResult`: the value,
a confidence interval from resampling *items* with replacement, and the number
of items that entered the computation.

Intervals: ``ci_method="percentile"`` (default) is a seeded percentile bootstrap
(``numpy.random.default_rng(seed)``, ``n_boot`` resamples of the items);
``ci_method="BCa"`` hands the same item resampling to
``scipy.stats.bootstrap(method="BCa")``.  Resamples on which a metric is undefined
(e.g. every resampled item got the same label) are dropped before the quantiles.

Definitions follow the reference implementations the tests compare against:
Fleiss' kappa as ``statsmodels.stats.inter_rater.fleiss_kappa`` (and, for items
with unequal numbers of ratings, the usual generalisation that averages each
item's pairwise agreement), Krippendorff's alpha as the ``krippendorff`` package
(coincidence matrix; nominal, ordinal and interval distances; missing allowed),
Cohen's kappa as ``statsmodels.stats.inter_rater.cohens_kappa``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import scipy.stats

from stereolens.errors import DataError

Level = Literal["nominal", "ordinal", "interval"]
CIMethod = Literal["percentile", "BCa"]

LONG_COLUMNS = ("item_id", "annotator_id", "label")


@dataclass(frozen=True)
class AgreementResult:
    metric: str
    level: str | None
    value: float
    ci_low: float
    ci_high: float
    n: int  # items that entered the computation
    n_annotators: int
    confidence: float
    ci_method: str
    n_boot: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def landis_koch(kappa: float) -> str:
    """Landis & Koch (1977) label for a kappa value."""
    if kappa != kappa:
        return "undefined"
    if kappa < 0:
        return "poor"
    for bound, label in ((0.2, "slight"), (0.4, "fair"), (0.6, "moderate"), (0.8, "substantial")):
        if kappa < bound:
            return label
    return "almost perfect"


# --------------------------------------------------------------------------- input


@dataclass(frozen=True)
class _Ratings:
    """Items x annotators matrix of value codes (-1 = missing) and the value domain."""

    codes: np.ndarray
    values: np.ndarray  # code -> value (numeric for ordinal/interval, labels for nominal)
    items: np.ndarray
    annotators: np.ndarray

    def counts(self) -> np.ndarray:
        """Items x values table: how many annotators gave each value to each item."""
        out = np.zeros((self.codes.shape[0], len(self.values)), dtype=float)
        rows, cols = np.nonzero(self.codes >= 0)
        np.add.at(out, (rows, self.codes[rows, cols]), 1.0)
        return out


def _ratings(
    data: pd.DataFrame,
    level: Level,
    item_col: str,
    annotator_col: str,
    label_col: str,
) -> _Ratings:
    missing = [c for c in (item_col, annotator_col, label_col) if c not in data.columns]
    if missing:
        raise DataError(f"judgements lack column(s) {', '.join(missing)} (have: {', '.join(map(str, data.columns))})")
    df = data[[item_col, annotator_col, label_col]].dropna(subset=[label_col])
    dup = df.duplicated([item_col, annotator_col], keep=False)
    if dup.any():
        first = df[dup].iloc[0]
        raise DataError(
            f"judgements line {df[dup].index[1] + 2}: more than one label for item {first[item_col]!r} by annotator "
            f"{first[annotator_col]!r} (first at line {df[dup].index[0] + 2})"
        )
    labels = df[label_col]
    if level in ("ordinal", "interval"):
        numeric = pd.to_numeric(labels, errors="coerce")
        if numeric.isna().any():
            bad = labels[numeric.isna()].index[0]
            raise DataError(f"judgements line {bad + 2}, column {label_col}: {level} agreement needs numeric labels, "
                            f"got {labels[bad]!r}")
        labels = numeric.astype(float)
        values = np.unique(labels.to_numpy())
    else:
        labels = labels.astype(str)
        values = np.array(sorted(labels.unique()), dtype=object)
    code_of = {v: i for i, v in enumerate(values.tolist())}
    items, item_idx = np.unique(df[item_col].astype(str).to_numpy(), return_inverse=True)
    annotators, ann_idx = np.unique(df[annotator_col].astype(str).to_numpy(), return_inverse=True)
    codes = np.full((len(items), len(annotators)), -1, dtype=int)
    codes[item_idx, ann_idx] = [code_of[v] for v in labels.tolist()]
    return _Ratings(codes=codes, values=values, items=items, annotators=annotators)


# --------------------------------------------------------------------------- bootstrap


def _interval(
    stat: Callable[[np.ndarray], float],
    n_items: int,
    *,
    n_boot: int,
    confidence: float,
    seed: int,
    method: CIMethod,
) -> tuple[float, float]:
    if n_boot <= 0 or n_items < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    if method == "BCa":
        res = scipy.stats.bootstrap(
            (np.arange(n_items),),
            lambda idx: stat(np.asarray(idx, dtype=int)),
            vectorized=False,
            n_resamples=n_boot,
            confidence_level=confidence,
            method="BCa",
            rng=rng,
        )
        return float(res.confidence_interval.low), float(res.confidence_interval.high)
    if method != "percentile":
        raise DataError(f"unknown ci_method {method!r}; use 'percentile' or 'BCa'")
    draws = np.array([stat(rng.integers(0, n_items, n_items)) for _ in range(n_boot)], dtype=float)
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return float("nan"), float("nan")
    alpha = (1.0 - confidence) / 2.0
    return float(np.quantile(draws, alpha)), float(np.quantile(draws, 1.0 - alpha))


def _result(
    metric: str,
    level: str | None,
    stat: Callable[[np.ndarray], float],
    n_items: int,
    n_annotators: int,
    n_boot: int,
    confidence: float,
    seed: int,
    ci_method: CIMethod,
) -> AgreementResult:
    value = float(stat(np.arange(n_items)))
    low, high = _interval(stat, n_items, n_boot=n_boot, confidence=confidence, seed=seed, method=ci_method)
    return AgreementResult(metric, level, value, low, high, n_items, n_annotators, confidence, ci_method, n_boot)


# --------------------------------------------------------------------------- metrics


def _agreeing_pair_share(counts: np.ndarray) -> np.ndarray:
    """Per item of an items x categories count table (every item rated at least twice), the share of its
    ordered pairs of ratings that agree: Fleiss' P_i, and the item's raw agreement."""
    n_i = counts.sum(axis=1)
    return ((counts**2).sum(axis=1) - n_i) / (n_i * (n_i - 1))


def fleiss_kappa_from_counts(counts: np.ndarray) -> float:
    """Fleiss' kappa of an items x categories count table (items with < 2 ratings ignored)."""
    counts = np.asarray(counts, dtype=float)
    n_i = counts.sum(axis=1)
    counts, n_i = counts[n_i >= 2], n_i[n_i >= 2]
    if counts.shape[0] == 0:
        return float("nan")
    p_i = _agreeing_pair_share(counts)
    p_j = counts.sum(axis=0) / n_i.sum()
    p_e = float((p_j**2).sum())
    if p_e >= 1.0:
        return float("nan")
    return float((p_i.mean() - p_e) / (1.0 - p_e))


def fleiss_kappa(
    data: pd.DataFrame,
    *,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    ci_method: CIMethod = "percentile",
) -> AgreementResult:
    """Fleiss' kappa over nominal labels; items need at least two ratings."""
    r = _ratings(data, "nominal", item_col, annotator_col, label_col)
    counts = r.counts()
    counts = counts[counts.sum(axis=1) >= 2]
    return _result(
        "fleiss", "nominal", lambda idx: fleiss_kappa_from_counts(counts[idx]), len(counts),
        len(r.annotators), n_boot, confidence, seed, ci_method,
    )


def _alpha_distance(values: np.ndarray, marginals: np.ndarray, level: Level) -> np.ndarray:
    if level == "nominal":
        return 1.0 - np.eye(len(values))
    if level == "interval":
        v = values.astype(float)
        return (v[:, None] - v[None, :]) ** 2
    if level == "ordinal":
        # Krippendorff's ordinal metric on the marginal frequencies n_g of the ranked values
        cum = np.concatenate([[0.0], np.cumsum(marginals)])
        lo = np.minimum.outer(np.arange(len(values)), np.arange(len(values)))
        hi = np.maximum.outer(np.arange(len(values)), np.arange(len(values)))
        between = cum[hi + 1] - cum[lo]
        return (between - (marginals[lo] + marginals[hi]) / 2.0) ** 2
    raise DataError(f"unknown level {level!r}; use nominal, ordinal or interval")


def krippendorff_alpha_from_counts(counts: np.ndarray, values: np.ndarray, level: Level) -> float:
    """Krippendorff's alpha from an items x values count table."""
    counts = np.asarray(counts, dtype=float)
    m_u = counts.sum(axis=1)
    pairable = m_u >= 2
    counts, m_u = counts[pairable], m_u[pairable]
    if counts.shape[0] == 0:
        return float("nan")
    weighted = counts / (m_u - 1.0)[:, None]
    coincidence = counts.T @ weighted - np.diag(weighted.sum(axis=0))
    n_c = coincidence.sum(axis=1)
    n = n_c.sum()
    delta = _alpha_distance(values, n_c, level)
    d_o = (coincidence * delta).sum()
    d_e = (np.outer(n_c, n_c) * delta).sum() / (n - 1.0)
    if d_e <= 0:
        return float("nan")
    return float(1.0 - d_o / d_e)


def krippendorff_alpha(
    data: pd.DataFrame,
    level: Level = "nominal",
    *,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    ci_method: CIMethod = "percentile",
) -> AgreementResult:
    """Krippendorff's alpha; annotators may skip items (items with one rating are not pairable)."""
    if level not in ("nominal", "ordinal", "interval"):
        raise DataError(f"unknown level {level!r}; use nominal, ordinal or interval")
    r = _ratings(data, level, item_col, annotator_col, label_col)
    counts = r.counts()
    counts = counts[counts.sum(axis=1) >= 2]
    return _result(
        "krippendorff", level,
        lambda idx: krippendorff_alpha_from_counts(counts[idx], r.values, level),
        len(counts), len(r.annotators), n_boot, confidence, seed, ci_method,
    )


def _domain_positions(values: np.ndarray, domain: Sequence[Any]) -> np.ndarray:
    """Rank of each observed value within the full scale (unused categories still count as steps)."""
    try:
        ordered = [float(v) for v in domain]
    except (TypeError, ValueError) as exc:
        raise DataError(f"ordinal weights need a numeric scale domain; got {list(domain)}") from exc
    position = {v: i for i, v in enumerate(ordered)}
    off = [v for v in values.tolist() if float(v) not in position]
    if off:
        raise DataError(f"label {off[0]!r} is not on the scale domain {list(domain)}")
    return np.array([position[float(v)] for v in values.tolist()], dtype=float)


def _weights(values: np.ndarray, level: Level, domain: Sequence[Any] | None = None) -> np.ndarray:
    """Disagreement weights between the observed values (0 on the diagonal).

    nominal: 0/1.  interval: squared difference of the values themselves (as
    ``statsmodels`` ``cohens_kappa(weights=values, wt="quadratic")``), so unequal
    spacing counts.  ordinal: absolute difference of the values' ranks on the full
    ``domain`` when given (a category nobody used is still a step between its
    neighbours), else of their ranks among the observed values.  Weights are scaled
    to a maximum of 1, which leaves kappa unchanged.
    """
    k = len(values)
    if level == "nominal" or k < 2:
        return 1.0 - np.eye(k)
    if level == "interval":
        v = values.astype(float)
        dist = np.subtract.outer(v, v) ** 2
    else:
        pos = _domain_positions(values, domain) if domain is not None else np.arange(k, dtype=float)
        dist = np.abs(np.subtract.outer(pos, pos))
    top = dist.max()
    return dist / top if top > 0 else dist


def _kappa_from_table(table: np.ndarray, weights: np.ndarray) -> float:
    total = table.sum()
    if total <= 0:
        return float("nan")
    table = table / total
    expected = np.outer(table.sum(axis=1), table.sum(axis=0))
    denom = (weights * expected).sum()
    if denom <= 0:
        return float("nan")
    return float(1.0 - (weights * table).sum() / denom)


def cohen_kappa(
    data: pd.DataFrame,
    level: Level = "nominal",
    *,
    annotators: Sequence[str] | None = None,
    min_overlap: int = 10,
    scale: Any = None,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    ci_method: CIMethod = "percentile",
) -> AgreementResult:
    """Cohen's kappa between two annotators on the items both labelled.

    ``level="ordinal"`` uses linear weights on category ranks and ``"interval"``
    quadratic weights on the numeric values (see :func:`_weights`).  ``scale`` (a
    :class:`~stereolens.annotation.scales.Scale` with options, or the sequence of
    all values in order) gives the full ordinal domain, so that a category nobody
    used still separates its neighbours; the result then equals ``statsmodels``
    ``cohens_kappa(table, wt="linear")`` on the table over the whole domain.
    With more than two annotators and no ``annotators`` given, the value is the
    mean over the annotator pairs that share at least ``min_overlap`` items
    (Light's kappa); ``n_annotators`` then counts the annotators in those pairs.
    """
    r = _ratings(data, level, item_col, annotator_col, label_col)
    names = [str(a) for a in r.annotators]
    if annotators is not None:
        unknown = [a for a in annotators if str(a) not in names]
        if len(annotators) != 2 or unknown:
            raise DataError(f"cohen_kappa needs two known annotators; got {list(annotators)} (unknown: {unknown})")
        candidate_pairs = [(names.index(str(annotators[0])), names.index(str(annotators[1])))]
        needed = 1
    else:
        if len(names) < 2:
            raise DataError("cohen_kappa needs at least two annotators")
        present = (r.codes >= 0).astype(np.int32)
        overlap = present.T @ present
        i_idx, j_idx = np.nonzero(np.triu(overlap >= max(min_overlap, 1), k=1))
        candidate_pairs = list(zip(i_idx.tolist(), j_idx.tolist()))
        needed = max(min_overlap, 1)
        if not candidate_pairs:
            raise DataError(
                f"no annotator pair shares {needed} or more items; use fleiss or krippendorff for sparse designs"
            )
    k = len(r.values)
    domain = getattr(scale, "options", scale) if scale is not None else None
    if domain is not None and len(domain) == 0:  # an open (numeric range) scale has no categories
        domain = None
    weights = _weights(r.values, level, domain)
    # per pair: the shared items and the cell index (a * k + b) of each, so that a
    # bootstrap resample only reweights items (np.bincount) instead of rebuilding tables
    pairs = []
    for i, j in candidate_pairs:
        shared = np.nonzero((r.codes[:, i] >= 0) & (r.codes[:, j] >= 0))[0]
        if len(shared) >= needed:
            pairs.append((shared, r.codes[shared, i] * k + r.codes[shared, j]))
    used_items = np.unique(np.concatenate([p[0] for p in pairs]))
    position = {int(item): n for n, item in enumerate(used_items)}
    pairs = [(np.array([position[int(x)] for x in shared]), cells) for shared, cells in pairs]
    used_annotators = {a for pair in candidate_pairs for a in pair} if annotators is None else set(candidate_pairs[0])

    def stat(idx: np.ndarray) -> float:
        multiplicity = np.bincount(idx, minlength=len(used_items)).astype(float)
        vals = []
        for shared, cells in pairs:
            table = np.bincount(cells, weights=multiplicity[shared], minlength=k * k).reshape(k, k)
            value = _kappa_from_table(table, weights)
            if value == value:
                vals.append(value)
        return float(np.mean(vals)) if vals else float("nan")

    metric = "cohen" if len(pairs) == 1 else "cohen_light"
    return _result(metric, level, stat, len(used_items), len(used_annotators), n_boot, confidence, seed, ci_method)


def raw_agreement(
    data: pd.DataFrame,
    *,
    item_col: str = "item_id",
    annotator_col: str = "annotator_id",
    label_col: str = "label",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    ci_method: CIMethod = "percentile",
) -> AgreementResult:
    """Observed pairwise agreement: per item, the share of annotator pairs giving the same label; mean over items."""
    r = _ratings(data, "nominal", item_col, annotator_col, label_col)
    counts = r.counts()
    counts = counts[counts.sum(axis=1) >= 2]
    per_item = _agreeing_pair_share(counts)
    return _result(
        "raw", "nominal", lambda idx: float(per_item[idx].mean()), len(counts),
        len(r.annotators), n_boot, confidence, seed, ci_method,
    )


# --------------------------------------------------------------------------- vote ratios


@dataclass(frozen=True)
class VoteRatioResult:
    """Counts of items per vote split (rows: categories + Total) and overall shares with CIs."""

    table: pd.DataFrame
    shares: pd.DataFrame  # ratio, share, ci_low, ci_high, n
    per_item: pd.DataFrame  # item_id, n_positive, n_negative, ratio, validated


def vote_ratio_table(
    data: pd.DataFrame,
    *,
    positive: Callable[[pd.Series], pd.Series] | float = 3,
    by: str | None = None,
    validated_only: bool = True,
    item_col: str = "item_id",
    label_col: str = "label",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> VoteRatioResult:
    """EspanStereo tables E1-E5: how many items were carried by 5:0, 4:1, 3:2 ... votes.

    ``positive`` is a threshold (label >= threshold counts as a "valid" vote; 3 on
    the 5-point scale) or a function from labels to booleans. The ratio is
    positive:negative; with ``validated_only`` only items whose positives are a
    strict majority are tabulated, as in the seed.  ``by`` names a column (e.g. the
    stereotype category) constant within an item.
    """
    missing = [c for c in (item_col, label_col, *( [by] if by else [])) if c not in data.columns]
    if missing:
        raise DataError(f"judgements lack column(s) {', '.join(missing)}")
    df = data.dropna(subset=[label_col])
    if callable(positive):
        is_pos = positive(df[label_col]).astype(bool)
    else:
        is_pos = pd.to_numeric(df[label_col], errors="coerce") >= float(positive)
    work = pd.DataFrame({"item_id": df[item_col].to_numpy(), "pos": is_pos.to_numpy()})
    if by:
        work["by"] = df[by].to_numpy()
    agg = work.groupby("item_id", sort=False).agg(n_positive=("pos", "sum"), n=("pos", "size"))
    agg["n_negative"] = agg["n"] - agg["n_positive"]
    agg["ratio"] = agg["n_positive"].astype(int).astype(str) + ":" + agg["n_negative"].astype(int).astype(str)
    agg["validated"] = agg["n_positive"] > agg["n_negative"]
    if by:
        agg["category"] = work.groupby("item_id", sort=False)["by"].first()
    per_item = agg.reset_index()
    rows = per_item[per_item["validated"]] if validated_only else per_item
    # most lopsided first: 5:0, 4:1, 3:2
    order = sorted(rows["ratio"].unique(), key=lambda s: (-int(s.split(":")[0]) + int(s.split(":")[1]), s))
    if by:
        table = pd.crosstab(rows["category"], rows["ratio"]).reindex(columns=order, fill_value=0)
    else:
        table = pd.DataFrame([rows["ratio"].value_counts().reindex(order, fill_value=0)], index=["all"])
    table["Total"] = table.sum(axis=1)
    table.loc["Total"] = table.sum(axis=0)
    table.columns.name = None

    ratios = rows["ratio"].to_numpy()
    shares = []
    rng_seed = seed
    for ratio in order:
        hit = (ratios == ratio).astype(float)
        low, high = _interval(
            lambda idx, h=hit: float(h[idx].mean()), len(hit),
            n_boot=n_boot, confidence=confidence, seed=rng_seed, method="percentile",
        )
        shares.append({"ratio": ratio, "share": float(hit.mean()) if len(hit) else float("nan"),
                       "ci_low": low, "ci_high": high, "n": int(len(hit))})
    return VoteRatioResult(table=table, shares=pd.DataFrame(shares), per_item=per_item)


METRICS: dict[str, Callable[..., AgreementResult]] = {
    "fleiss": fleiss_kappa,
    "krippendorff": krippendorff_alpha,
    "cohen": cohen_kappa,
    "raw": raw_agreement,
}


def compute(data: pd.DataFrame, metric: str, level: Level = "nominal", **kwargs: Any) -> AgreementResult:
    """One metric by name (the CLI's entry point)."""
    if metric not in METRICS:
        raise DataError(f"unknown agreement metric {metric!r}; use one of {', '.join(METRICS)}")
    if metric in ("krippendorff", "cohen"):
        return METRICS[metric](data, level, **kwargs)
    if level != "nominal":
        raise DataError(f"{metric} is defined for nominal labels only; got level {level!r}")
    return METRICS[metric](data, **kwargs)
