"""Tables, figures and the report page of the heads study."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from stereolens.figures import save_figure
from stereolens.io import write_csv, write_json, write_text


def country_correlations(shap: pd.DataFrame) -> pd.DataFrame:
    """Spearman correlation of head contributions between every two countries (seed 003 Figure 2)."""
    wide = shap.pivot_table(index=["layer", "head"], columns="country", values="shapley")
    countries = list(wide.columns)
    matrix = np.eye(len(countries))
    for i, a in enumerate(countries):
        for j, b in enumerate(countries):
            if i < j:
                rho = stats.spearmanr(wide[a], wide[b]).statistic if len(wide) > 1 else np.nan
                matrix[i, j] = matrix[j, i] = rho
    return pd.DataFrame(matrix, index=countries, columns=countries)


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


def correlation_figure(corr: pd.DataFrame, stem: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.0 * len(corr) + 2.5, 1.0 * len(corr) + 1.8))
    im = ax.imshow(corr.to_numpy(), cmap="Greens", vmin=-1, vmax=1)
    ax.set_xticks(range(len(corr)), corr.columns, rotation=45)
    ax.set_yticks(range(len(corr)), corr.index)
    for i in range(len(corr)):
        for j in range(len(corr)):
            ax.text(j, i, f"{corr.iat[i, j]:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="Spearman rho")
    ax.set_title(title)
    save_figure(fig, stem)


def pruning_figure(sweeps: pd.DataFrame, stem: Path, title: str, ylabel: str) -> None:
    import matplotlib.pyplot as plt

    countries = sorted(sweeps["country"].unique())
    rows, cols = _grid(len(countries))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows + 0.6), squeeze=False)
    for ax, country in zip(axes.flat, countries):
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


def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)


def write_report(shap: pd.DataFrame, sweeps: pd.DataFrame, probe: dict, cfg: dict, out: Path, *, model_id: str) -> dict:
    out = Path(out)
    value = cfg["shapley"]["value"]
    ylabel = "probe accuracy" if value == "accuracy" else "minus probe cross-entropy"
    corr = country_correlations(shap)
    write_csv(out / "shapley.csv", shap)
    write_csv(out / "sweeps.csv", sweeps)
    write_csv(out / "country_correlation.csv", corr, index=True)
    heatmap_figure(shap, out / "head_contributions", f"Head contributions (Shapley), {model_id} (Figures F1/F4)")
    correlation_figure(corr, out / "country_correlation", f"Spearman rho of head contributions, {model_id} (Figure 2)")
    pruning_figure(sweeps, out / "pruning_probe", f"Head pruning, {model_id} (Figures F2/F5)", ylabel)
    if "ss" in sweeps:
        stereoset_figure(sweeps, out / "pruning_stereoset", f"SS, LMS, iCAT during top-down pruning, {model_id} (Figures F3/F6)")

    per_country = []
    for s in probe["countries"]:
        c = s["country"]
        part = shap[shap["country"] == c].sort_values("rank")
        top = sweeps[(sweeps["country"] == c) & (sweeps["direction"] == "top_down")].sort_values("n_removed")
        first, last = top.iloc[0], top.iloc[-1]
        row = {"country": c, "test_instances": s["n_test_instances"], "probe_train_acc": s["train_accuracy"],
               f"probe_test_{value}": s["test_value_all_heads"],
               "top_heads": ", ".join(f"L{int(r.layer)}H{int(r.head)} ({r.shapley:+.3f}±{r.se:.3f})" for r in part.head(3).itertuples()),
               "truncated_perms": s["n_truncated_permutations"], "exact_stops": s.get("n_exact_stops", 0),
               "coalitions_saved": s.get("n_coalitions_saved_by_exact_stop", 0)}
        if "ss" in top:
            row.update({"ss_before": first["ss"], "ss_all_pruned": last["ss"], "lms_before": first["lms"],
                        "lms_all_pruned": last["lms"], "icat_before": first["icat"], "icat_all_pruned": last["icat"]})
        per_country.append(row)
    table = pd.DataFrame(per_country)
    write_csv(out / "countries.csv", table)

    sources = probe.get("instance_sources", [])
    metrics = {f"{r['country']}.{k}": v for r in per_country for k, v in r.items() if isinstance(v, (int, float))}
    headline = {}
    for r in per_country:
        headline[f"{r['country']}: probe held-out {value}"] = round(float(r[f"probe_test_{value}"]), 3)
        headline[f"{r['country']}: top head"] = r["top_heads"].split(" (")[0]
    # the report contract's provenance block: the probe rests on the stereo study's instances
    provenance = {"machine_generated": "machine" in sources,
                  "notes": [f"probe instances from the stereo study, sources: {', '.join(sources) or 'none'}"]}
    if "authored" in sources:
        provenance["translation_status"] = "authored"
    summary = {"model": model_id, "value": value, "countries": per_country, "metrics": metrics,
               "instance_sources": sources, "config": cfg, "headline": headline, "provenance": provenance,
               "correlation": corr.round(4).to_dict(), "seconds": probe.get("seconds")}
    write_json(out / "summary.json", summary)

    probe_cfg, shap_cfg = cfg["probe"], cfg["shapley"]
    held_out = ", ".join(f"{s['country']} {s['n_test_instances']} instances ({2 * s['n_test_instances']} examples)"
                         for s in probe["countries"])
    exact_notes = sorted({s.get("exact_stop_note", "") for s in probe["countries"]} - {""})
    early_stop = []
    if shap_cfg.get("exact_stop"):
        early_stop.append("exact: a permutation stops once interval bounds on the probe's logits prove that no on/off "
                          "setting of its remaining heads flips any held-out prediction (remaining marginals exactly 0; "
                          f"{shap_cfg.get('exact_stop_enumerate')} largest remaining heads enumerated, the rest as intervals; "
                          f"{'; '.join(exact_notes)})")
    if shap_cfg.get("truncated_mc_tolerance") is not None:
        early_stop.append(f"truncated Monte Carlo (approximate): a permutation stops when its coalition is within "
                          f"{shap_cfg['truncated_mc_tolerance']} of the all-heads value; the rest get 0")
    choices = [
        ("value function", f"probe {value} on the held-out split"),
        ("encoder", "fine-tuned with the probe" if probe_cfg["finetune"] else "frozen; only the probe is trained"),
        ("probe", f"standardised pooled vector -> one linear layer; pooling {probe_cfg['pooling']} "
                  f"(used: {', '.join(sorted({s.get('pooling', '?') for s in probe['countries']}))})"),
        ("optimiser", f"AdamW, lr {probe_cfg['learning_rate']}, {probe_cfg['epochs']} epochs, batch {probe_cfg['batch_size']}, "
                      f"weight decay {probe_cfg['weight_decay']}"),
        ("split", f"{probe_cfg['test_fraction']:.0%} of instances held out, seed {probe_cfg['split_seed']}; both sentences of an instance in one split"),
        ("probe set", f"held out per country: {held_out}; at most {cfg.get('max_instances_per_country') or 'all'} "
                      f"instances per country; countries {cfg.get('countries') or 'all'}"),
        ("epochs", f"{probe_cfg['epochs']}"),
        ("players", f"heads of layers {shap_cfg['layers'] if shap_cfg['layers'] is not None else 'all'}; every other head always on"),
        ("permutations", f"{shap_cfg['permutations']} (antithetic: {shap_cfg['antithetic']}), seed {shap_cfg['seed']}"),
        ("early stop", " + ".join(early_stop) or "none: every permutation walked to the end"),
        ("pruning step", f"{cfg['pruning']['step']} head(s) per step"),
        ("StereoSet items", f"first {cfg['pruning']['stereoset_items_per_country']} per country" if cfg['pruning']['stereoset_items_per_country'] else "all"),
        ("head removal", "the head's slice of the attention output is multiplied by 0 before the output projection"),
    ]
    lines = [
        f"# Attention-head probing and pruning: {model_id}",
        "",
        f"Instances: `{probe.get('instances')}` (source: {', '.join(sources) or 'unknown'}). "
        + ("**Some instances are machine-generated or simulated; see their `source` column.**"
           if any(s not in ("human", "validated") for s in sources) else ""),
        "",
        "## Configuration (choices seed 003 leaves to Ma et al. 2023, and this run's restrictions)",
        "",
        *[f"- **{k}**: {v}" for k, v in choices],
        "",
        "```yaml",
        yaml.safe_dump(cfg, sort_keys=False).strip(),
        "```",
        "",
        "## Per country",
        "",
        _md_table(table),
        "",
        "Values are Shapley values of the probe's " + value + " (± standard error over permutations"
        + (", antithetic pairs as one sample" if shap_cfg["antithetic"] else "") + ").",
        "",
        "## Spearman correlation of head contributions between countries (Figure 2)",
        "",
        _md_table(corr.reset_index().rename(columns={"index": "country"})),
        "",
        "Figures: `head_contributions` (F1/F4), `country_correlation` (Figure 2), `pruning_probe` (F2/F5), "
        "`pruning_stereoset` (F3/F6), each PNG + SVG. StereoSet scores are on the 0-100 scale "
        "(ss 50 = no preference); heads are pruned by zeroing, weights are untouched.",
    ]
    write_text(out / "report.md", "\n".join(lines) + "\n")
    return summary
