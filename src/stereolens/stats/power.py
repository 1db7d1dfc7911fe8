"""Power and minimum detectable effects of the tests the studies star.

A cell of a bias table is tested with the two-sided exact binomial (sign) test of "the share
of untied pairs whose stereotypical sentence wins is 0.5" (``stats/bias.py``).  Whether a
cell *could* have found a bias depends on its number of untied pairs n, so every planning
and reading question here is answered for that test:

* **exact power**: the probability, under a true rate r, that the exact test rejects at
  ``alpha``, summed over the exact Binomial(n, r) distribution.  At the null 0.5 the test's
  two-sided p (scipy's ``binomtest``) is twice the smaller tail, so it rejects k <= c and
  k >= n - c for the largest c with 2 P(X <= c) < alpha; the power is
  P(X <= c) + P(X >= n - c) under r.
* **normal approximation** beside it: Cohen's h = 2 asin(sqrt(r)) - 2 asin(sqrt(0.5)) with
  power Phi(|h| sqrt(n) - z) + Phi(-|h| sqrt(n) - z), z = Phi^-1(1 - alpha / 2) (both tails,
  as statsmodels' ``NormalIndPower`` with ``ratio=0`` computes it for one sample).
* **minimum detectable effect (MDE)**: the smallest true rate above 0.5 that the exact test
  finds with the target power at n untied pairs; by symmetry its mirror 1 - MDE below 0.5 is
  found equally often.  The exact power rises with r on (0.5, 1], so the MDE is a root.  A
  cell too small for any split to reach ``alpha`` (2 * 0.5^n >= alpha) has no MDE (NaN).
* **family correction**: Bonferroni's alpha / m.  Holm's first step compares the smallest p
  with the same alpha / m, so this is also the level a cell must reach to be the first one
  Holm rejects; Holm's later steps are less strict (alpha / (m - 1), ..., alpha).
* **pairs needed per cell** for a true rate: the normal approximation's n (rounded up) and
  the smallest n whose exact power reaches the target.  The exact power is a sawtooth in n
  (a larger n can need a larger critical count and lose a little power), so the smallest n
  from which *every* larger n reaches the target is given too.  A share of ties inflates the
  raw count: raw = untied / (1 - ties).
* **paired continuous scores**: the standardised paired effect d_z = mean / sd of the
  per-item differences, with the power of the one-sample t-test (statsmodels ``TTestPower``).
* **two models on the same items** (McNemar): with discordance psi (the share of items on
  which exactly one model is stereotypical) and difference delta (the difference of the two
  bias scores, p10 - p01), Connor's (1987) normal approximation
  n = (z sqrt(psi) + z_power sqrt(psi - delta^2))^2 / delta^2, and the exact power of
  McNemar's exact test: the number of discordant items D ~ Binomial(n, psi), and given D the
  test is the exact binomial test above with true rate (psi + delta) / (2 psi).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

from stereolens.errors import ConfigError

NULL_RATE = 0.5
DEFAULT_ALPHA = 0.05
DEFAULT_POWER = 0.8
# Beyond this many untied pairs the exact search is skipped: the sawtooth of the exact power
# is then far below a percentage point and the normal approximation stands.
EXACT_SEARCH_LIMIT = 100_000
# McNemar's exact power sums over every count of discordant items, so its scan stops sooner
MCNEMAR_EXACT_LIMIT = 10_000


# --- checks: one line naming what is wrong ---------------------------------------------------


def check_probability(value: float, name: str, *, low_open: bool = True, high_open: bool = True) -> float:
    """Refuse ``value`` outside (0, 1) (or a closed end where asked), naming ``name``."""
    value = float(value)
    low_ok = value > 0 if low_open else value >= 0
    high_ok = value < 1 if high_open else value <= 1
    if not (math.isfinite(value) and low_ok and high_ok):
        lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
        raise ConfigError(f"{name} must be in {lo}0, 1{hi}, got {value:g}")
    return value


def check_rate(rate: float, name: str = "rate") -> float:
    """A true rate of stereotypical wins: in [0, 1] and not the null 0.5 (no effect to detect)."""
    rate = check_probability(rate, name, low_open=False, high_open=False)
    if rate == NULL_RATE:
        raise ConfigError(f"{name} 0.5 is no preference: nothing to detect (give a rate other than 0.5)")
    return rate


def family_alpha(alpha: float, cells: int) -> float:
    """Bonferroni's per-cell level alpha / m, which is also Holm's first step."""
    if int(cells) != cells or cells < 1:
        raise ConfigError(f"cells must be a whole number >= 1, got {cells}")
    return check_probability(alpha, "alpha") / int(cells)


# --- one cell: exact binomial power and its normal approximation ------------------------------


def critical_count(n, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """The largest c with 2 P(X <= c) < alpha under Binomial(n, 0.5) (-1 when no split rejects):
    the exact two-sided test rejects k <= c and k >= n - c."""
    n = np.asarray(n, dtype=np.int64)
    half = alpha / 2
    # ppf gives the smallest k with cdf(k) >= alpha / 2; one below it is the last rejected count
    c = stats.binom.ppf(half, n, NULL_RATE).astype(np.int64) - 1
    # guard against ppf rounding: step until cdf(c) < alpha / 2 <= cdf(c + 1) holds exactly
    while True:
        down = (c >= 0) & (stats.binom.cdf(c, n, NULL_RATE) >= half)
        up = stats.binom.cdf(c + 1, n, NULL_RATE) < half
        if not (down.any() or up.any()):
            return c
        c = c - down + up


def exact_power(n, rate: float, alpha: float = DEFAULT_ALPHA):
    """Power of the two-sided exact binomial test of 0.5 at ``alpha`` when the true rate is
    ``rate``, for one n or an array of n (summed over the exact Binomial(n, rate))."""
    n_arr = np.asarray(n, dtype=np.int64)
    c = critical_count(n_arr, alpha)
    power = stats.binom.cdf(c, n_arr, rate) + stats.binom.sf(n_arr - c - 1, n_arr, rate)
    power = np.where(c >= 0, power, 0.0)
    return float(power) if np.ndim(n) == 0 else power


def cohens_h(rate: float) -> float:
    """Cohen's h of ``rate`` against 0.5: 2 asin(sqrt(rate)) - 2 asin(sqrt(0.5))."""
    return 2 * math.asin(math.sqrt(rate)) - 2 * math.asin(math.sqrt(NULL_RATE))


def normal_power(n: float, rate: float, alpha: float = DEFAULT_ALPHA) -> float:
    """The normal approximation of the power (Cohen's h, both tails)."""
    z = stats.norm.isf(alpha / 2)
    shift = abs(cohens_h(rate)) * math.sqrt(n)
    return float(stats.norm.cdf(shift - z) + stats.norm.cdf(-shift - z))


@dataclass(frozen=True)
class MinimumDetectable:
    """The smallest true rate above 0.5 (and its mirror below) found with ``power`` at ``n``."""

    n: int
    alpha: float
    power: float
    above: float  # exact binomial; NaN when no split of n pairs can reach alpha
    below: float  # 1 - above
    normal_above: float  # normal approximation (Cohen's h)
    normal_below: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def minimum_detectable_rate(n: int, *, alpha: float = DEFAULT_ALPHA,
                            power: float = DEFAULT_POWER) -> MinimumDetectable:
    """The MDE of a cell of ``n`` untied pairs (see the module docstring)."""
    if int(n) != n or n < 0:
        raise ConfigError(f"n must be a whole number of pairs >= 0, got {n}")
    check_probability(alpha, "alpha")
    check_probability(power, "power")
    return _minimum_detectable(int(n), float(alpha), float(power))


@lru_cache(maxsize=4096)
def _minimum_detectable(n: int, alpha: float, power: float) -> MinimumDetectable:
    def root(power_at) -> float:
        # power_at rises on (0.5, 1]; no rate reaches the target when even rate 1 falls short
        if n == 0 or power_at(1.0) < power:
            return math.nan
        return float(optimize.brentq(lambda r: power_at(r) - power, NULL_RATE, 1.0, xtol=1e-10))

    above = root(lambda r: exact_power(n, r, alpha))
    normal = root(lambda r: normal_power(n, r, alpha))
    return MinimumDetectable(n=n, alpha=alpha, power=power, above=above, below=1 - above,
                             normal_above=normal, normal_below=1 - normal)


def mde_table(cells, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER,
              family_size: int | None = None):
    """One row per cell: ``cell, n, mde, mde_below, mde_normal`` unadjusted and, at Bonferroni's
    alpha / m (= Holm's first step), ``alpha_adjusted, mde_adjusted, mde_adjusted_below,
    mde_adjusted_normal``.  ``cells`` maps a cell name to its untied pairs (a dict or a pandas
    Series); the family is the cells given unless ``family_size`` says otherwise."""
    import pandas as pd

    counts = pd.Series(cells)
    m = len(counts) if family_size is None else family_size
    adjusted_alpha = family_alpha(alpha, m) if m else alpha
    rows = []
    for cell, n in counts.items():
        plain = minimum_detectable_rate(int(n), alpha=alpha, power=power)
        adjusted = minimum_detectable_rate(int(n), alpha=adjusted_alpha, power=power)
        rows.append({"cell": str(cell), "n": int(n), "mde": plain.above, "mde_below": plain.below,
                     "mde_normal": plain.normal_above, "alpha_adjusted": adjusted_alpha,
                     "mde_adjusted": adjusted.above, "mde_adjusted_below": adjusted.below,
                     "mde_adjusted_normal": adjusted.normal_above})
    return pd.DataFrame(rows, columns=["cell", "n", "mde", "mde_below", "mde_normal", "alpha_adjusted",
                                       "mde_adjusted", "mde_adjusted_below", "mde_adjusted_normal"])


def mde_columns(untied, in_family, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER):
    """A bias table's MDE columns, aligned with its rows: ``mde`` at ``alpha`` for every row from its
    untied pairs, and ``mde_adjusted`` at Bonferroni's alpha / m (Holm's first step) for the rows of the
    table's family (``in_family``), m = the family rows with an untied pair (the rows Holm's correction
    counts: a row without one has no p); NaN outside the family.  Returns the two columns and alpha / m."""
    import pandas as pd

    untied = pd.Series(untied).astype(int)
    in_family = pd.Series(in_family, index=untied.index).astype(bool)
    m = int((in_family & (untied > 0)).sum())
    adjusted_alpha = family_alpha(alpha, m) if m else alpha
    plain = [minimum_detectable_rate(int(n), alpha=alpha, power=power).above for n in untied]
    adjusted = [minimum_detectable_rate(int(n), alpha=adjusted_alpha, power=power).above if member else math.nan
                for n, member in zip(untied, in_family)]
    columns = pd.DataFrame({"mde": plain, "mde_adjusted": adjusted}, index=untied.index)
    return columns, adjusted_alpha


def undetected_preference(n: int, mde: float, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> str:
    """How a non-significant cell reads: what its test could not have found.

    ``mde`` is the cell's exact MDE above 0.5 at ``alpha`` (NaN when no split could reach it)."""
    from stereolens.report.markdown import format_cell

    level = f"at alpha {format_cell(alpha)}"
    if math.isnan(mde):
        return f"could not detect any preference: no split of {n} untied pairs reaches significance {level}"
    return (f"could not detect a preference below {format_cell(mde)} (or above {format_cell(1 - mde)}) "
            f"with {n} untied pairs ({format_cell(power * 100)}% power {level})")


def mde_legend(alpha: float, family_level: float, m: int, *, family: str) -> str:
    """The legend line of a table's ``mde`` / ``mde_adjusted`` columns (:func:`mde_columns`); ``family`` names
    the rows the adjusted level is over, in words."""
    from stereolens.report.markdown import format_cell

    return (f"`mde`: the minimum detectable effect, the smallest true share of stereotypical wins among a row's "
            f"untied pairs (above 50%; its mirror 1 - mde below) that the exact binomial test finds with 80% power "
            f"at alpha {format_cell(alpha)}; `mde_adjusted`: the same at Bonferroni's alpha / {m} = "
            f"{format_cell(family_level)} over {family} (the level of Holm's first step; Benjamini-Hochberg has no "
            f"single per-row level), n/a for a row outside the family. `mde` n/a: no split of so few untied pairs "
            f"reaches significance.")


def undetected_lines(table, labels, *, in_family=None, alpha: float = DEFAULT_ALPHA,
                     power: float = DEFAULT_POWER) -> list[str]:
    """Markdown lines under a starred table: for each row without a star (``significant`` false), what its test
    could not have found (:func:`undetected_preference` at the star's level, then, for a row of the table's
    family (``in_family``, aligned; default every row), at the family's Bonferroni level ``mde_adjusted``);
    ``labels`` (aligned with ``table``) name the rows.  Needs ``n``, ``ties``, ``mde``, ``mde_adjusted``."""
    import pandas as pd

    from stereolens.report.markdown import format_cell

    unstarred = ~table["significant"].astype(bool)
    family = pd.Series(True, index=table.index) if in_family is None else pd.Series(in_family, index=table.index)
    if not unstarred.any():
        return []
    lines = ["Rows without a star, and what their test could not have found (80% power):", ""]
    for label, member, row in zip(labels[unstarred], family[unstarred], table[unstarred].to_dict("records")):
        untied = int(row["n"]) - int(row["ties"])
        text = f"- {label}: {undetected_preference(untied, row['mde'], alpha=alpha, power=power)}"
        if member and not pd.isna(row["mde"]):
            text += ("; at the family's Bonferroni level, no split of them reaches significance"
                     if pd.isna(row["mde_adjusted"]) else
                     f"; at the family's Bonferroni level, below {format_cell(row['mde_adjusted'])}")
        lines.append(text)
    return [*lines, ""]


# --- planning: pairs needed for a true rate ----------------------------------------------------


@dataclass(frozen=True)
class PairsNeeded:
    rate: float
    alpha: float
    power: float
    ties: float
    normal: int  # untied pairs, normal approximation (rounded up)
    exact: int | None  # smallest n whose exact power reaches the target (None: beyond EXACT_SEARCH_LIMIT)
    exact_power: float | None  # the exact power at ``exact``
    exact_stable: int | None  # smallest n from which every larger n reaches the target
    normal_raw: int  # pairs to collect, ties included: ceil(normal / (1 - ties))
    exact_raw: int | None
    exact_stable_raw: int | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def inflate_for_ties(untied: int | None, ties: float) -> int | None:
    """Raw pairs to collect so that ``untied`` remain once a share ``ties`` of them tie."""
    return None if untied is None else math.ceil(untied / (1 - ties) - 1e-9)


def pairs_needed(rate: float, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER,
                 ties: float = 0.0) -> PairsNeeded:
    """Untied and raw pairs per cell for the exact binomial test to find ``rate`` with ``power``."""
    rate = check_rate(rate)
    alpha = check_probability(alpha, "alpha")
    power = check_probability(power, "power")
    ties = check_probability(ties, "ties", low_open=False)
    normal = _normal_n(lambda n: normal_power(n, rate, alpha), alpha, power, abs(cohens_h(rate)))
    exact, stable = _exact_n(rate, alpha, power, normal)
    return PairsNeeded(
        rate=rate, alpha=alpha, power=power, ties=ties, normal=normal, exact=exact,
        exact_power=None if exact is None else exact_power(exact, rate, alpha), exact_stable=stable,
        normal_raw=inflate_for_ties(normal, ties), exact_raw=inflate_for_ties(exact, ties),
        exact_stable_raw=inflate_for_ties(stable, ties))


def _normal_n(power_at, alpha: float, power: float, effect: float) -> int:
    """The smallest (real) n with ``power_at(n) >= power``, rounded up; ``effect`` is the
    standardised effect whose one-tail formula ((z + z_power) / effect)^2 brackets it."""
    one_tail = ((stats.norm.isf(alpha / 2) + stats.norm.ppf(power)) / effect) ** 2
    if power_at(one_tail / 4) >= power:  # pragma: no cover - the far tail never carries this much
        return math.ceil(one_tail / 4)
    return math.ceil(optimize.brentq(lambda n: power_at(n) - power, one_tail / 4, one_tail, xtol=1e-9) - 1e-9)


def _exact_n(rate: float, alpha: float, power: float, normal: int) -> tuple[int | None, int | None]:
    """(first, stable): the smallest n whose exact power reaches ``power`` and the smallest n
    from which every larger n does, searched in a window around the normal approximation
    that is widened until it holds a failing n below and a long run of passing n above."""
    if normal > EXACT_SEARCH_LIMIT:
        return None, None
    low, high = max(1, int(0.8 * normal) - 20), int(1.3 * normal) + 60
    while True:
        n = np.arange(low, high + 1)
        reaches = exact_power(n, rate, alpha) >= power
        if reaches[0] and low > 1:
            low = max(1, low // 2)
            continue
        failing = n[~reaches]
        # stable only when the passing run above the last failure is long and ends the window
        if not reaches.any() or (failing.size and failing[-1] > low + 0.75 * (high - low)):
            high = 2 * high
            continue
        first = int(n[reaches][0])
        stable = int(failing[-1]) + 1 if failing.size else first
        return first, stable


# --- paired continuous scores: d_z -----------------------------------------------------------


def check_effect(d_z: float, name: str = "effect") -> float:
    d_z = float(d_z)
    if not math.isfinite(d_z) or d_z == 0:
        raise ConfigError(f"{name} must be a nonzero standardised paired effect d_z, got {d_z:g}")
    return d_z


def paired_effect_needed(d_z: float, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> dict[str, float]:
    """Items needed for a paired t-test to find a standardised paired effect ``d_z`` (statsmodels
    ``TTestPower``, two-sided), with the power at that whole number of items."""
    from statsmodels.stats.power import TTestPower

    d_z = check_effect(d_z)
    alpha = check_probability(alpha, "alpha")
    power = check_probability(power, "power")
    solver = TTestPower()
    n = math.ceil(float(solver.solve_power(effect_size=abs(d_z), nobs=None, alpha=alpha, power=power)) - 1e-9)
    n = max(n, 2)
    return {"effect": d_z, "alpha": alpha, "power": power, "items": n,
            "power_at_items": float(solver.power(effect_size=abs(d_z), nobs=n, alpha=alpha))}


def minimum_detectable_d_z(n: int, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """The smallest |d_z| a paired t-test on ``n`` items finds with ``power`` (statsmodels ``TTestPower``)."""
    from statsmodels.stats.power import TTestPower

    if n < 2:
        return math.nan
    return float(TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power))


# --- two models on the same items: McNemar -----------------------------------------------------


def check_discordance(discordance: float, difference: float, *,
                      names: tuple[str, str] = ("discordance", "difference")) -> tuple[float, float]:
    """A discordance in (0, 1] and a nonzero difference no larger than it (``names`` name them in the error)."""
    discordance = check_probability(discordance, names[0], high_open=False)
    difference = float(difference)
    if not math.isfinite(difference) or difference == 0 or abs(difference) > discordance:
        raise ConfigError(f"{names[1]} must be nonzero and at most the {names[0]} {discordance:g} in size "
                          f"(the share of items only one model gets stereotypical bounds it), got {difference:g}")
    return discordance, difference


def mcnemar_exact_power(n: int, discordance: float, difference: float, alpha: float = DEFAULT_ALPHA) -> float:
    """Power of McNemar's exact test on ``n`` items: D ~ Binomial(n, discordance) discordant items,
    and given D the exact binomial test with true rate (discordance + difference) / (2 discordance)."""
    discordance, difference = check_discordance(discordance, difference)
    split = (discordance + abs(difference)) / (2 * discordance)
    d = np.arange(n + 1)
    return float(np.sum(stats.binom.pmf(d, n, discordance) * exact_power(d, split, alpha)))


def mcnemar_normal_power(n: float, discordance: float, difference: float, alpha: float = DEFAULT_ALPHA) -> float:
    """Connor's (1987) normal approximation of McNemar's power (one tail, as his sample size formula)."""
    z = stats.norm.isf(alpha / 2)
    spread = math.sqrt(discordance - difference**2)
    return float(stats.norm.cdf((abs(difference) * math.sqrt(n) - z * math.sqrt(discordance)) / spread))


def mcnemar_items_needed(discordance: float, difference: float, *, alpha: float = DEFAULT_ALPHA,
                         power: float = DEFAULT_POWER) -> dict[str, object]:
    """Items both models must score for McNemar's test to tell them apart: Connor's normal
    approximation and the smallest n whose exact power reaches ``power``."""
    discordance, difference = check_discordance(discordance, difference)
    alpha = check_probability(alpha, "alpha")
    power = check_probability(power, "power")
    z, z_power = stats.norm.isf(alpha / 2), stats.norm.ppf(power)
    normal = math.ceil((z * math.sqrt(discordance) + z_power * math.sqrt(discordance - difference**2)) ** 2
                       / difference**2 - 1e-9)
    exact = None
    if normal <= MCNEMAR_EXACT_LIMIT:  # beyond this the scan costs seconds and the normal figure stands
        split = (discordance + abs(difference)) / (2 * discordance)
        # the exact test's power at every count of discordant items, computed once for the scan
        given_discordant = exact_power(np.arange(2 * normal + 1), split, alpha)

        def power_at(n: int) -> float:
            return float(np.dot(stats.binom.pmf(np.arange(n + 1), n, discordance), given_discordant[: n + 1]))

        n = max(1, int(0.7 * normal))
        while n > 1 and power_at(n) >= power:
            n = max(1, n // 2)
        while n <= 2 * normal and power_at(n) < power:
            n += 1
        exact = n if n <= 2 * normal else None
    return {"discordance": discordance, "difference": difference, "alpha": alpha, "power": power,
            "normal": normal, "exact": exact,
            "exact_power": None if exact is None else mcnemar_exact_power(exact, discordance, difference, alpha),
            "expected_discordant": None if exact is None else exact * discordance}
