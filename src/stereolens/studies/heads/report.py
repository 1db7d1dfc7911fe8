"""Tables, figures and the report page of the heads study."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from stereolens.figures import save_figure
from stereolens.io import write_csv, write_text
from stereolens.lineage.provenance import describe_unreviewed, unreviewed_kind
from stereolens.report.markdown import markdown_table, settings
from stereolens.stages.kit import write_study_summary
from stereolens.studies.heads.inputs import STABILITY_COLUMNS
from stereolens.studies.heads.pruning import DIRECTIONS
from stereolens.studies.heads.shapley import EXACT_PLAYER_LIMIT


UNDEFINED = "undefined"


def spearman_undefined_reason(values: dict[str, pd.Series]) -> str | None:
    """Why Spearman's rho between these countries' head values does not exist, or None when it does:
    it needs two heads, and every country's values must vary (a constant series has no ranking)."""
    first = next(iter(values.values()))
    if len(first) < 2:
        return f"only {len(first)} head: a rank correlation needs at least two"
    missing = [c for c, v in values.items() if v.isna().any()]
    if missing:
        return f"{' and '.join(missing)} lack(s) a Shapley value for some head"
    constant = [c for c, v in values.items() if v.nunique() == 1]
    if constant:
        parts = [f"{c}'s Shapley values are all {values[c].iloc[0]:+.4g}" for c in constant]
        return "; ".join(parts) + " (no ranking of heads to correlate)"
    return None


@dataclass
class CountryCorrelations:
    """Spearman's rho between every two countries' head values; ``rho`` is NaN exactly where the
    correlation is undefined, and ``undefined`` says why (never shown as NaN)."""

    rho: pd.DataFrame
    undefined: dict[tuple[str, str], str]

    def display(self) -> pd.DataFrame:
        """The matrix for tables and CSV: rho, or ``undefined`` where it does not exist."""
        shown = self.rho.astype(object)
        for a, b in self.undefined:
            shown.loc[a, b] = shown.loc[b, a] = UNDEFINED
        return shown

    def undefined_records(self) -> list[dict]:
        return [{"countries": [a, b], "reason": reason} for (a, b), reason in sorted(self.undefined.items())]

    def as_json(self) -> dict:
        """summary.json's ``correlation``: rho rounded to 4 places, or ``undefined``."""
        return {b: {a: (v if v == UNDEFINED else round(float(v), 4)) for a, v in column.items()}
                for b, column in self.display().items()}


def country_correlations(shap: pd.DataFrame) -> CountryCorrelations:
    """Spearman correlation of head contributions between every two countries (EspanStereo Figure 2),
    each country with itself included (1, or undefined when its values are constant)."""
    wide = shap.pivot_table(index=["layer", "head"], columns="country", values="shapley", dropna=False)
    countries = list(wide.columns)
    rho = pd.DataFrame(np.nan, index=countries, columns=countries)
    undefined = {}
    for i, a in enumerate(countries):
        for b in countries[i:]:
            reason = spearman_undefined_reason({c: wide[c] for c in dict.fromkeys((a, b))})
            if reason:
                undefined[(a, b)] = reason
            else:
                rho.loc[a, b] = rho.loc[b, a] = 1.0 if a == b else stats.spearmanr(wide[a], wide[b]).statistic
    return CountryCorrelations(rho, undefined)


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return int(np.ceil(n / cols)), cols


def heatmap_figure(shap: pd.DataFrame, stem: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    countries = sorted(shap["country"].unique())
    rows, cols = _grid(len(countries))
    limit = float(np.nanmax(np.abs(shap["shapley"]))) or 1.0
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 0.35 * shap["layer"].nunique() * rows + 1.6), squeeze=False)
    for ax, country in zip(axes.flat, countries):
        part = shap[shap["country"] == country].pivot(index="layer", columns="head", values="shapley")
        im = ax.imshow(part.to_numpy(), cmap="RdYlGn", vmin=-limit, vmax=limit, aspect="auto", origin="lower")
        ax.set_title(country)
        ax.set_yticks(range(len(part.index)), [str(i) for i in part.index])
        ax.set_xticks(range(len(part.columns)), [str(h) for h in part.columns])
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    for ax in list(axes.flat)[len(countries):]:
        ax.axis("off")
    fig.colorbar(im, ax=axes.ravel().tolist(), label="Shapley value")
    fig.suptitle(title)
    save_figure(fig, stem)


def correlation_figure(corr: CountryCorrelations, stem: Path, title: str) -> None:
    """Figure 2's matrix; an undefined cell is grey, marked ``undef.``, and its reason is printed below."""
    import matplotlib.pyplot as plt

    rho = corr.rho
    n = len(rho)
    fig, ax = plt.subplots(figsize=(1.0 * n + 2.5, 1.0 * n + 1.8))
    cmap = plt.get_cmap("Greens").with_extremes(bad="#d9d9d9")
    im = ax.imshow(np.ma.masked_invalid(rho.to_numpy(dtype=float)), cmap=cmap, vmin=-1, vmax=1)
    ax.set_xticks(range(n), rho.columns, rotation=45)
    ax.set_yticks(range(n), rho.index)
    for i in range(n):
        for j in range(n):
            value = rho.iat[i, j]
            ax.text(j, i, "undef." if np.isnan(value) else f"{value:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="Spearman rho")
    ax.set_title(title)
    if corr.undefined:
        notes = [f"undef. {a}-{b}: {reason}" if a != b else f"undef. {a}: {reason}"
                 for (a, b), reason in sorted(corr.undefined.items())]
        fig.text(0.01, -0.02, "\n".join(notes), ha="left", va="top", fontsize=7, wrap=True)
    save_figure(fig, stem)


def same_pruning_order(shap: pd.DataFrame, sweeps: pd.DataFrame) -> dict[str, str]:
    """Countries whose top-down and bottom-up sweeps take the same heads off at every step, each with the
    reason (all Shapley values equal, as when no coalition moves the probe).  Their two pruning curves are
    one curve measured twice, so the directions agreeing says nothing about the heads."""
    same = {}
    for country in sorted(sweeps["country"].astype(str).unique()):
        removed = {}
        for direction in DIRECTIONS:
            part = sweeps[(sweeps["country"].astype(str) == country) & (sweeps["direction"] == direction)]
            # read back from CSV, the first step's empty list is NaN
            steps = part.sort_values("step")["removed_this_step"].fillna("").astype(str)
            removed[direction] = [frozenset(h for h in step.split(";") if h) for step in steps]
        if removed["top_down"] != removed["bottom_up"]:
            continue
        values = shap.loc[shap["country"].astype(str) == country, "shapley"]
        if len(values) > 1 and values.nunique() == 1:
            same[country] = f"all {len(values)} Shapley values are {values.iloc[0]:+.4g}"
        else:
            same[country] = "every pruning step removes the same heads in both directions"
    return same


def pruning_figure(sweeps: pd.DataFrame, stem: Path, title: str, ylabel: str,
                   same_order: dict[str, str] | None = None) -> None:
    """Figures F2/F5: probe value against heads pruned, top-down and bottom-up; a country in ``same_order``
    gets one curve labelled as both directions, not two identical curves drawn as a contrast."""
    import matplotlib.pyplot as plt

    same_order = same_order or {}
    countries = sorted(sweeps["country"].unique())
    rows, cols = _grid(len(countries))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows + 0.6), squeeze=False)
    for ax, country in zip(axes.flat, countries):
        if str(country) in same_order:
            part = sweeps[(sweeps["country"] == country) & (sweeps["direction"] == "top_down")]
            ax.plot(part["n_removed"], part["probe_value"], "-o", markersize=3,
                    label="top-down = bottom-up (same order)")
            ax.text(0.02, 0.02, same_order[str(country)], transform=ax.transAxes, fontsize=6, va="bottom")
        else:
            for direction, style in (("top_down", "-o"), ("bottom_up", "--s")):
                part = sweeps[(sweeps["country"] == country) & (sweeps["direction"] == direction)]
                ax.plot(part["n_removed"], part["probe_value"], style, markersize=3, label=direction.replace("_", "-"))
        ax.set_title(country)
        ax.set_xlabel("heads pruned")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(countries):]:
        ax.axis("off")
    fig.suptitle(title)
    save_figure(fig, stem)


def stereoset_figure(sweeps: pd.DataFrame, stem: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    top = sweeps[sweeps["direction"] == "top_down"]
    countries = sorted(top["country"].unique())
    rows, cols = _grid(len(countries))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows + 0.6), squeeze=False)
    for ax, country in zip(axes.flat, countries):
        part = top[top["country"] == country]
        for metric in ("ss", "lms", "icat"):
            if metric in part:
                ax.plot(part["n_removed"], part[metric], "-o", markersize=3, label=metric.upper() if metric != "icat" else "iCAT")
        ax.axhline(50, color="#999999", linestyle=":", linewidth=1)
        ax.set_title(country)
        ax.set_xlabel("heads pruned (top-down)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(countries):]:
        ax.axis("off")
    fig.suptitle(title)
    save_figure(fig, stem)


# --- robustness: is the Shapley ranking a property of the game or of the permutations drawn? (issue 32) --------

TOP_K = 3  # the top heads whose overlap between two estimates the robustness table reports
RANKING_CHOICES = ("permutation seed", "Shapley estimator")


def head_name(layer: int, head: int) -> str:
    return f"L{int(layer)}H{int(head)}"


def top_decision(part: pd.DataFrame) -> str:
    """The decision a ranking leads to: its top head, the heads tied for the top, or no ranking at all."""
    values = part["shapley"]
    if values.isna().any():
        return "no ranking: a head has no Shapley value"
    if len(values) > 1 and values.nunique() == 1:
        return f"no ranking: all {len(values)} Shapley values are {values.iloc[0]:+.4g}"
    top = part[values == values.max()].sort_values(["layer", "head"])
    names = [head_name(r.layer, r.head) for r in top.itertuples()]
    return f"top head {names[0]}" if len(names) == 1 else f"tied top heads {', '.join(names)}"


def _top_heads(part: pd.DataFrame, k: int) -> set[str]:
    return {head_name(r.layer, r.head) for r in part.sort_values("rank").head(k).itertuples()}


def _compared(headline: pd.DataFrame, other: pd.DataFrame, *, choice: str, variant: str, country: str,
              what: str) -> dict:
    """One robustness row: Spearman's rho between ``other``'s values and the headline's over every head (the
    estimate), ``other``'s top head (the decision), and how many of the headline's top heads it shares."""
    from stereolens.stats.robustness import ran_row

    keyed = headline.set_index(["layer", "head"])["shapley"]
    theirs = other.set_index(["layer", "head"])["shapley"].reindex(keyed.index)
    undefined = spearman_undefined_reason({"the headline": keyed.reset_index(drop=True),
                                           what: theirs.reset_index(drop=True)})
    rho = math.nan if undefined else float(stats.spearmanr(keyed, theirs).statistic)
    k = min(TOP_K, len(keyed))
    shared = len(_top_heads(headline, k) & _top_heads(other, k))
    reason = (f"{what}; Spearman's rho with the headline's values over the {len(keyed)} heads"
              + (f" undefined: {undefined}" if undefined else "")
              + f"; top {k} heads shared with the headline: {shared} of {k}")
    return ran_row(choice, variant, estimate=rho, ci_low=math.nan, ci_high=math.nan, n=len(keyed),
                   decision=top_decision(other), reason=reason, cell=country)


def ranking_robustness(shap: pd.DataFrame, stability: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """The robustness table of each country's ranking (``stats.robustness``, one cell per country): the headline
    (its top head), the same game's values from each other permutation seed and, where computed, exactly.
    ``estimate`` is Spearman's rho with the headline's values (1 for the headline, whose rho with itself is
    undefined only when it has no ranking); ``n`` the heads ranked; no interval."""
    from stereolens.stats.robustness import HEADLINE, not_run_row, ran_row, robustness_table

    shapley_cfg = cfg["shapley"]
    seeds = int(shapley_cfg.get("stability_seeds") or 0)
    rows = []
    for country in sorted(shap["country"].astype(str).unique()):
        headline = shap[shap["country"].astype(str) == country]
        own = spearman_undefined_reason({"the headline": headline["shapley"].reset_index(drop=True)})
        rows.append(ran_row(f"headline: {shapley_cfg['permutations']} permutations from seed {shapley_cfg['seed']}",
                            HEADLINE, estimate=math.nan if own else 1.0, ci_low=math.nan, ci_high=math.nan,
                            n=len(headline), decision=top_decision(headline),
                            reason=f"no rank correlation: {own}" if own else "", cell=country))
        mine = stability[stability["country"].astype(str) == country]
        by_seed = mine[mine["estimate"] == "seed"]
        if by_seed.empty:
            rows.append(not_run_row(RANKING_CHOICES[0], "other seeds",
                                    "study.heads.shapley.stability_seeds is 0" if not seeds
                                    else "the probe stage wrote no estimate from another seed", cell=country))
        for offset, part in by_seed.groupby("seed_offset", sort=True):
            seed = int(shapley_cfg["seed"]) + int(offset)
            rows.append(_compared(headline, part, choice=RANKING_CHOICES[0], variant=f"seed {seed}", country=country,
                                  what=f"{shapley_cfg['permutations']} permutations drawn as a run with "
                                       f"shapley.seed {seed} draws them (permutation seed "
                                       f"{int(part['permutation_seed'].iloc[0])})"))
        exact = mine[mine["estimate"] == "exact"]
        if len(exact):
            rows.append(_compared(headline, exact, choice=RANKING_CHOICES[1], variant="exact", country=country,
                                  what=f"the exact values over all 2^{len(exact)} coalitions"))
        elif len(headline) > EXACT_PLAYER_LIMIT:
            rows.append(not_run_row(RANKING_CHOICES[1], "exact",
                                    f"{len(headline)} players: 2^{len(headline)} coalitions (exact values are computed "
                                    f"up to {EXACT_PLAYER_LIMIT} players)", cell=country))
        else:
            rows.append(not_run_row(RANKING_CHOICES[1], "exact",
                                    "computed with the other seeds' estimates; study.heads.shapley.stability_seeds is 0"
                                    if not seeds else "the probe stage wrote no exact values", cell=country))
    return robustness_table(rows)


def robustness_lines(table: pd.DataFrame, block: dict) -> list[str]:
    """The report page's robustness section."""
    if table.empty:
        return []
    shown = table.drop(columns=["ci_low", "ci_high"])
    return ["", "## Robustness: is the ranking the game's or the permutations'?", "",
            f"Each country's top head by the headline's permutations, against the same game's values from other "
            f"permutation seeds (a seed k draws what a run with `shapley.seed` = k draws) and, with at most "
            f"{EXACT_PLAYER_LIMIT} players, the exact values (every coalition). `estimate`: Spearman's rho with the headline's values over "
            f"every head; `decision`: the top head; `agrees`: the same top head as the headline. The robustness "
            f"estimates reuse every coalition the headline evaluated (ours: a coalition's value is the same whichever "
            f"permutation meets it), so on the default's 8 heads they cost a few batched passes. Overall "
            f"{block.get('survives')} of {block.get('of')} estimates agree with their country's headline; "
            f"{block.get('not_run')} not run.", "", markdown_table(shown).rstrip("\n")]


NOT_APPLICABLE = {
    "paired": ("heads measures the primary model only (dvc.yaml runs heads_probe and heads_report on model.id): "
               "no second model to compare on the same instances, so the paired stage does not apply"),
    "power": ("no test applies: the heads tables star no cell (the Shapley values carry standard errors over "
              "permutations, the correlations between countries and the pruning curves are descriptive, and ss / "
              "lms / icat during pruning are measured on the pruning set's few instances without a test), so no "
              "minimum detectable effect is computed"),
}


def country_rows(shap: pd.DataFrame, sweeps: pd.DataFrame, probe: dict, value: str) -> list[dict]:
    """One row per country: set sizes, probe accuracy, top heads, StereoSet before and after top-down pruning."""
    rows = []
    for s in probe["countries"]:
        c = s["country"]
        part = shap[shap["country"] == c].sort_values("rank")
        top = sweeps[(sweeps["country"] == c) & (sweeps["direction"] == "top_down")].sort_values("n_removed")
        first, last = top.iloc[0], top.iloc[-1]
        row = {"country": c, "train_instances": s["n_train_instances"], "shapley_instances": s["n_shapley_instances"],
               "pruning_instances": s["n_pruning_instances"], "probe_train_acc": s["train_accuracy"],
               f"probe_test_{value}": s["test_value_all_heads"],
               "top_heads": ", ".join(f"L{int(r.layer)}H{int(r.head)} ({r.shapley:+.3f}±{r.se:.3f})"
                                      for r in part.head(3).itertuples())}
        if "ss" in top:
            row.update({"ss_before": first["ss"], "ss_all_pruned": last["ss"], "lms_before": first["lms"],
                        "lms_all_pruned": last["lms"], "icat_before": first["icat"], "icat_all_pruned": last["icat"]})
        rows.append(row)
    return rows


def configuration_choices(cfg: dict, probe: dict) -> list[tuple[str, str]]:
    """The choices EspanStereo leaves to Ma et al. (or that are ours), as printed on the report page."""
    probe_cfg, shap_cfg, split_cfg = cfg["probe"], cfg["shapley"], cfg["split"]
    value = shap_cfg["value"]
    sizes = ", ".join(f"{s['country']} {s['n_train_instances']}/{s['n_shapley_instances']}/{s['n_pruning_instances']}"
                      for s in probe["countries"])
    items = cfg["pruning"]["stereoset_items_per_country"]
    return [
        ("value function", f"probe {value} on the Shapley set"),
        ("encoder", "fine-tuned with the probe" if probe_cfg["finetune"] else "frozen; only the probe is trained"),
        ("probe", f"standardised pooled vector -> one linear layer; pooling {probe_cfg['pooling']} "
                  f"(used: {', '.join(sorted({s.get('pooling', '?') for s in probe['countries']}))})"),
        ("optimiser", f"AdamW, lr {probe_cfg['learning_rate']}, {probe_cfg['epochs']} epochs, batch {probe_cfg['batch_size']}, "
                      f"weight decay {probe_cfg['weight_decay']}"),
        ("split", f"per country, instances split three ways with seed {split_cfg['seed']}: "
                  f"{split_cfg['shapley_fraction']:.0%} for the Shapley values, {split_cfg['pruning_fraction']:.0%} for "
                  "pruning evaluation, the rest to train the probe; both sentences of an instance in one set, "
                  "the ids of each set in probe.json (ours: keeps the pruning curves off the rows that trained "
                  "the probe and ranked the heads)"),
        ("probe set", f"instances per country, train/Shapley/pruning: {sizes}; at most "
                      f"{cfg.get('max_instances_per_country') or 'all'} instances per country; "
                      f"countries {cfg.get('countries') or 'all'}"),
        ("epochs", f"{probe_cfg['epochs']}"),
        ("players", f"heads of layers {shap_cfg['layers'] if shap_cfg['layers'] is not None else 'all'}; every other head always on"),
        ("permutations", f"{shap_cfg['permutations']} (antithetic: {shap_cfg['antithetic']}), seed {shap_cfg['seed']}; "
                         "each country draws its own permutations from a seed derived from that seed and its name "
                         "(ours: one shared draw would share its sampling error across countries and push their "
                         "correlations up; the seeds are in probe.json as shapley_seed); "
                         "every permutation walked to the end"),
        ("pruning step", f"{cfg['pruning']['step']} head(s) per step; probe {value} on the pruning set"),
        ("StereoSet items", f"the pruning set's instances, first {items} per country" if items
         else "the pruning set's instances, all"),
        ("StereoSet candidates", f"scored by the stereo study's scorer under the head gate (stereolens.scoring."
                                 f"candidates: PLL-word-l2r given the context for masked LMs, log P(candidate | "
                                 f"context) for causal LMs; every token scored, [UNK] included, as StereoSet's "
                                 f"reference code), {cfg['pruning']['candidate_score']} over the candidate's tokens; "
                                 "with every head on, the scores are `stereolens stereo score`'s"),
        ("head removal", "the head's slice of the attention output is multiplied by 0 before the output projection"),
    ]


def correlation_notes(corr: CountryCorrelations) -> list[str]:
    """The report page's lines for correlations that do not exist, with the reason."""
    if not corr.undefined:
        return []
    return ["", "Undefined correlations (Spearman's rho needs two varying rankings):", "",
            *[f"- {a} / {b}: {reason}" if a != b else f"- {a} (with itself): {reason}"
              for (a, b), reason in sorted(corr.undefined.items())]]


def write_tables(out: Path, shap: pd.DataFrame, sweeps: pd.DataFrame, corr: CountryCorrelations,
                 per_country: pd.DataFrame) -> None:
    """The report's CSV tables: the probe stage's two, the correlation matrix and the per-country table."""
    write_csv(out / "shapley.csv", shap)
    write_csv(out / "sweeps.csv", sweeps)
    write_csv(out / "country_correlation.csv", corr.display(), index=True)
    write_csv(out / "countries.csv", per_country)


def write_figures(out: Path, shap: pd.DataFrame, sweeps: pd.DataFrame, corr: CountryCorrelations, *,
                  model_id: str, value: str, same_order: dict[str, str] | None = None) -> None:
    """Figures F1/F4, 2, F2/F5 and, when the sweeps scored StereoSet, F3/F6."""
    ylabel = "probe accuracy" if value == "accuracy" else "minus probe cross-entropy"
    heatmap_figure(shap, out / "head_contributions", f"Head contributions (Shapley), {model_id} (Figures F1/F4)")
    correlation_figure(corr, out / "country_correlation", f"Spearman rho of head contributions, {model_id} (Figure 2)")
    pruning_figure(sweeps, out / "pruning_probe", f"Head pruning, {model_id} (Figures F2/F5)", ylabel, same_order)
    if "ss" in sweeps:
        stereoset_figure(sweeps, out / "pruning_stereoset", f"SS, LMS, iCAT during top-down pruning, {model_id} (Figures F3/F6)")


def instance_provenance(sources: list[str]) -> dict:
    """The report contract's provenance block: the probe rests on the stereo study's instances."""
    provenance = {"machine_generated": "machine" in sources,
                  "notes": [f"probe instances from the stereo study, sources: {', '.join(sources) or 'none'}"]}
    if "authored" in sources:
        provenance["source"] = "authored"  # written by the project, not reviewed by native speakers
    return provenance


def same_order_notes(same_order: dict[str, str]) -> list[str]:
    """The report page's lines for countries whose two pruning orders are one."""
    if not same_order:
        return []
    return ["", "Pruning orders that are one (Figures F2/F5 draw a single curve for these countries):", "",
            *[f"- {country}: top-down and bottom-up pruning remove the same heads at every step ({reason}), so "
              "the two directions agreeing is not a finding about the heads" for country, reason in same_order.items()]]


def study_summary(per_country: list[dict], corr: CountryCorrelations, probe: dict, cfg: dict, *,
                  model_id: str, same_order: dict[str, str] | None = None,
                  robustness: pd.DataFrame | None = None) -> dict:
    """``summary.json``: per-country rows, their numbers as metrics, the headline, provenance, correlations,
    and the countries whose top-down and bottom-up pruning orders are one (``same_pruning_order``)."""
    value = cfg["shapley"]["value"]
    sources = probe.get("instance_sources", [])
    metrics = {f"{r['country']}.{k}": v for r in per_country for k, v in r.items() if isinstance(v, (int, float))}
    headline = {}
    for r in per_country:
        headline[f"{r['country']}: probe held-out {value}"] = round(float(r[f"probe_test_{value}"]), 3)
        headline[f"{r['country']}: top head"] = r["top_heads"].split(" (")[0]
    return {"model": model_id, "value": value, "countries": per_country, "metrics": metrics,
            "instance_sources": sources, "config": cfg, "headline": headline,
            "provenance": instance_provenance(sources), "correlation": corr.as_json(),
            "correlation_undefined": corr.undefined_records(),
            "same_pruning_order": [{"country": c, "reason": r} for c, r in (same_order or {}).items()],
            **robustness_summary(robustness, model_id)}


def robustness_summary(robustness: pd.DataFrame | None, model_id: str) -> dict:
    """summary.json's ``robustness`` block and the blocks that do not apply to heads (``paired``, ``power``)."""
    from stereolens.stats.robustness import robustness_block

    out = {"paired": {"applicable": False, "models": [model_id], "comparisons": [], "reason": NOT_APPLICABLE["paired"]},
           "power": {"applicable": False, "reason": NOT_APPLICABLE["power"]}}
    if robustness is not None:
        out["robustness"] = robustness_block(robustness)
    return out


def instance_source_note(sources: list[str]) -> str:
    """What the instances' sources are, each in its own words (an authored instance is not machine-generated:
    the page said both of the same instances); empty when every source is reviewed human work."""
    kinds = list(dict.fromkeys(k for s in sources if (k := unreviewed_kind("source", s))))
    if not kinds:
        return ""
    return ("**The instance set " + "; and it ".join(describe_unreviewed(k) for k in kinds)
            + "; see their `source` column.**")


def report_page(per_country: pd.DataFrame, corr: CountryCorrelations, probe: dict, cfg: dict, *, model_id: str,
                same_order: dict[str, str] | None = None, robustness: pd.DataFrame | None = None,
                summary: dict | None = None) -> str:
    """``report.md``: the configuration choices, the per-country table and the correlation matrix."""
    value = cfg["shapley"]["value"]
    sources = probe.get("instance_sources", [])
    lines = [
        f"# Attention-head probing and pruning: {model_id}",
        "",
        f"Instances: `{probe.get('instances')}` (source: {', '.join(sources) or 'unknown'}). "
        + instance_source_note(sources),
        "",
        "## Configuration (choices EspanStereo leaves to Ma et al. 2023, and this run's restrictions)",
        "",
        *[f"- **{k}**: {v}" for k, v in configuration_choices(cfg, probe)],
        "",
        "Every setting of `study.heads`:",
        "",
        markdown_table(pd.DataFrame(settings(cfg), columns=["setting", "value"])).rstrip("\n"),
        "",
        "## Per country",
        "",
        markdown_table(per_country).rstrip("\n"),
        "",
        "Values are Shapley values of the probe's " + value + " on the Shapley set (± standard error over permutations"
        + (", an antithetic pair's mean as one sample" if cfg["shapley"]["antithetic"] else "") + "). "
        "Probe accuracy and StereoSet during pruning are measured on the pruning set.",
        *same_order_notes(same_order or {}),
        "",
        "## Spearman correlation of head contributions between countries (Figure 2)",
        "",
        markdown_table(corr.display().reset_index().rename(columns={"index": "country"})).rstrip("\n"),
        *correlation_notes(corr),
        "",
        "Figures: `head_contributions` (F1/F4), `country_correlation` (Figure 2), `pruning_probe` (F2/F5), "
        "`pruning_stereoset` (F3/F6), each PNG + SVG. StereoSet scores are on the 0-100 scale "
        "(ss 50 = no preference); heads are pruned by zeroing, weights are untouched.",
        *robustness_lines(robustness if robustness is not None else pd.DataFrame(),
                          (summary or {}).get("robustness") or {}),
        "",
        "## Power and paired comparisons",
        "",
        f"- Paired comparison between models: not applicable; {NOT_APPLICABLE['paired']}.",
        f"- Minimum detectable effects: {NOT_APPLICABLE['power']}.",
    ]
    return "\n".join(lines) + "\n"


def write_report(shap: pd.DataFrame, sweeps: pd.DataFrame, probe: dict, cfg: dict, out: Path, *, model_id: str,
                 stability: pd.DataFrame | None = None) -> dict:
    """Tables, figures, ``summary.json``, ``robustness.csv`` (from ``stability``, the probe stage's other
    estimates of the same games; none given: every robustness estimate is listed as not run) and ``report.md``;
    returns the summary."""
    from stereolens.stats.robustness import TABLE_FILE

    out = Path(out)
    corr = country_correlations(shap)
    per_country = country_rows(shap, sweeps, probe, cfg["shapley"]["value"])
    same_order = same_pruning_order(shap, sweeps)
    table = pd.DataFrame(per_country)
    write_tables(out, shap, sweeps, corr, table)
    write_figures(out, shap, sweeps, corr, model_id=model_id, value=cfg["shapley"]["value"], same_order=same_order)
    if stability is None:
        stability = pd.DataFrame(columns=list(STABILITY_COLUMNS))
    robustness = ranking_robustness(shap, stability, cfg)
    write_csv(out / TABLE_FILE, robustness)
    summary = study_summary(per_country, corr, probe, cfg, model_id=model_id, same_order=same_order,
                            robustness=robustness)
    write_study_summary(out / "summary.json", summary)
    write_text(out / "report.md", report_page(table, corr, probe, cfg, model_id=model_id, same_order=same_order,
                                              robustness=robustness, summary=summary))
    return summary
