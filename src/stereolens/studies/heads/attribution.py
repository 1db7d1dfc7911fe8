"""One country's analysis: split its instances three ways, train the probe, estimate each head's
Shapley value, run the pruning sweeps."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from stereolens.stats.seeds import derived_seed
from stereolens.stats.stereoset import stereoset_scores
from stereolens.studies.heads.candidates import candidate_scores
from stereolens.studies.heads.config import check_layers
from stereolens.studies.heads.probe import (
    GatedEncoder, InstanceSplit, LinearProbe, ProbeSettings, ProbeValue, probe_examples, split_instances, train_probe,
)
from stereolens.studies.heads.pruning import run_sweep
from stereolens.studies.heads.inputs import STABILITY_COLUMNS
from stereolens.studies.heads.shapley import (
    EXACT_PLAYER_LIMIT, CoalitionValues, ShapleyEstimate, exact_from, permutation_shapley, sample_permutations,
)


@dataclass
class ShapleySettings:
    permutations: int = 256
    antithetic: bool = False
    step: int | None = None          # permutation positions per batched call (None: whole permutation)
    max_rows: int = 256              # examples x coalitions per forward pass
    value: str = "accuracy"
    seed: int = 0
    # robustness (issue 32): the ranking estimated again from this many other permutation seeds (seed + 1, ...)
    stability_seeds: int = 0



@dataclass
class SplitSettings:
    shapley_fraction: float = 0.3    # instances whose rows the Shapley value function measures
    pruning_fraction: float = 0.2    # instances whose rows the pruning sweeps measure; the rest train the probe
    seed: int = 0


def shapley_seed(seed: int, country: str) -> int:
    """The seed of one country's Shapley permutations: derived from ``shapley.seed`` and the country's name
    (SHA-1, not Python's ``hash``, so every interpreter derives the same), so countries draw independently
    and a rerun draws the same."""
    return derived_seed(seed, f"heads.shapley|{country}")


def heads_of_layers(layers: Sequence[int], n_heads: int) -> list[tuple[int, int]]:
    return [(layer, head) for layer in layers for head in range(n_heads)]


@dataclass
class StabilityEstimate:
    """The same game's Shapley values estimated another way: from the permutations another seed draws
    (``kind`` "seed", ``seed_offset`` k: the draw of a run with ``shapley.seed`` + k) or exactly (``kind``
    "exact", every coalition; no standard error)."""

    kind: str
    seed_offset: int | None
    seed: int | None
    values: np.ndarray
    standard_errors: np.ndarray


@dataclass
class CountryResult:
    country: str
    players: list[tuple[int, int]]
    estimate: ShapleyEstimate
    probe_summary: dict
    seconds: float
    probe: LinearProbe
    split: InstanceSplit
    rows: dict[str, list[int]] = field(default_factory=dict)  # encoded example rows of each set of the split
    labels: torch.Tensor | None = None                          # label of every encoded example
    stability: list[StabilityEstimate] = field(default_factory=list)  # the ranking's robustness estimates


def rows_of_split(examples: pd.DataFrame, split: InstanceSplit) -> dict[str, list[int]]:
    """The example rows (both sentences of an instance) of each set of the split."""
    return {name: np.flatnonzero(examples["id"].isin(ids)).tolist()
            for name, ids in (("train", split.train), ("shapley", split.shapley), ("pruning", split.pruning))}


def probe_and_attribute(encoder: GatedEncoder, instances: pd.DataFrame, players: Sequence[tuple[int, int]], *,
                        country: str, split: SplitSettings, probe_settings: ProbeSettings,
                        shapley: ShapleySettings) -> tuple[CountryResult, ProbeValue]:
    """Train the probe on the training set and estimate the Shapley values on the Shapley set.
    Returns the result and the Shapley value function; the pruning set is left untouched."""
    start = time.perf_counter()
    examples = probe_examples(instances)
    instance_split = split_instances(examples["id"], shapley_fraction=split.shapley_fraction,
                                     pruning_fraction=split.pruning_fraction, seed=split.seed)
    rows = rows_of_split(examples, instance_split)
    encoder.encode(examples["text"].tolist())
    labels = torch.tensor(examples["label"].to_numpy(), dtype=torch.long)
    probe, losses = train_probe(encoder, rows["train"], labels, probe_settings)
    value_fn = ProbeValue(encoder, probe, rows["shapley"], labels, players, metric=shapley.value,
                          max_rows=shapley.max_rows)
    train_value = ProbeValue(encoder, probe, rows["train"], labels, players, metric="accuracy", max_rows=shapley.max_rows)
    # one seed per country: with one shared seed every country would walk the same permutations, and their
    # shared sampling error would push the cross-country correlations of Figure 2 up
    country_seed = shapley_seed(shapley.seed, country)
    perms = sample_permutations(len(players), shapley.permutations, seed=country_seed, antithetic=shapley.antithetic)
    coalitions = CoalitionValues(value_fn)
    estimate = permutation_shapley(value_fn, perms, step=shapley.step, antithetic=shapley.antithetic, values=coalitions)
    headline_evaluations, headline_passes = len(coalitions), value_fn.forward_passes
    started = time.perf_counter()
    stability = stability_estimates(coalitions, len(players), country=country, shapley=shapley)
    stability_seconds = time.perf_counter() - started
    full = np.ones((1, len(players)), dtype=bool)
    summary = {
        "country": country, "n_instances": int(instances["id"].nunique()),
        "n_train_instances": len(instance_split.train), "n_shapley_instances": len(instance_split.shapley),
        "n_pruning_instances": len(instance_split.pruning), "split": instance_split.record(),
        "train_accuracy": float(train_value(full)[0]),
        "test_value_all_heads": estimate.full_value, "test_value_no_probed_heads": estimate.empty_value,
        "final_train_loss": losses[-1] if losses else None, "n_permutations": int(len(perms)),
        "shapley_seed": country_seed,
        "n_coalitions_evaluated": headline_evaluations, "n_value_calls": estimate.n_value_calls,
        "n_forward_passes": headline_passes,
        # the robustness estimates reuse the headline's coalitions and add only the ones it did not meet
        "stability_seeds": [e.seed for e in stability if e.kind == "seed"],
        "stability_exact": any(e.kind == "exact" for e in stability),
        "n_coalitions_evaluated_stability": len(coalitions) - headline_evaluations,
        "n_forward_passes_stability": value_fn.forward_passes - headline_passes,
        "stability_seconds": stability_seconds,
    }
    # the headline's time (probe and Shapley values), the robustness estimates' apart
    result = CountryResult(country, list(players), estimate, summary, time.perf_counter() - start - stability_seconds,
                           probe, instance_split, rows, labels, stability)
    return result, value_fn


def stability_estimates(coalitions: CoalitionValues, n_players: int, *, country: str,
                        shapley: ShapleySettings) -> list[StabilityEstimate]:
    """The ranking's robustness estimates (issue 32) from the game ``coalitions`` holds: the permutations of
    ``shapley.stability_seeds`` other seeds (offset k draws what a run with ``shapley.seed`` + k draws for this
    country), and with at most :data:`EXACT_PLAYER_LIMIT` players the exact values.  Every coalition the headline
    met is looked up, not evaluated again, so on the CPU default's 8 heads (256 coalitions in all) they cost a few
    batched passes; the headline estimate is computed first and is unchanged by them."""
    out = []
    for offset in range(1, shapley.stability_seeds + 1):
        seed = shapley_seed(shapley.seed + offset, country)
        perms = sample_permutations(n_players, shapley.permutations, seed=seed, antithetic=shapley.antithetic)
        again = permutation_shapley(coalitions.value_fn, perms, step=shapley.step, antithetic=shapley.antithetic,
                                    values=coalitions)
        out.append(StabilityEstimate("seed", offset, seed, again.values, again.standard_errors))
    if shapley.stability_seeds and n_players <= EXACT_PLAYER_LIMIT:
        out.append(StabilityEstimate("exact", None, None, exact_from(coalitions, n_players),
                                     np.full(n_players, np.nan)))
    return out


def stability_table(result: CountryResult) -> pd.DataFrame:
    """One row per robustness estimate and head: ``country, estimate, seed_offset, permutation_seed, layer, head,
    shapley, se, rank`` (rank 1 = the largest value, ties by head order as in :func:`shapley_table`)."""
    frames = []
    for e in result.stability:
        table = pd.DataFrame({"country": result.country, "estimate": e.kind, "seed_offset": e.seed_offset,
                              "permutation_seed": e.seed, "layer": [l for l, _ in result.players],
                              "head": [h for _, h in result.players], "shapley": e.values, "se": e.standard_errors})
        table["rank"] = table["shapley"].rank(ascending=False, method="first").astype(int)
        frames.append(table)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(STABILITY_COLUMNS))


def pruning_inputs(encoder: GatedEncoder, result: CountryResult, instances: pd.DataFrame, *, metric: str,
                   max_rows: int, stereoset_items: int | None) -> tuple[ProbeValue, pd.DataFrame]:
    """What the pruning sweeps are judged on, from the pruning set only (rows neither the probe was trained
    on nor the Shapley ranking measured): the probe's value function there, and the StereoSet items
    (the first ``stereoset_items`` of the set's instances; None: all)."""
    value_fn = ProbeValue(encoder, result.probe, result.rows["pruning"], result.labels, result.players,
                          metric=metric, max_rows=max_rows)
    items = instances[instances["id"].isin(result.split.pruning)]
    return value_fn, (items if stereoset_items is None else items.head(stereoset_items))


def shapley_table(result: CountryResult) -> pd.DataFrame:
    est = result.estimate
    table = pd.DataFrame({
        "country": result.country, "layer": [l for l, _ in result.players], "head": [h for _, h in result.players],
        "shapley": est.values, "se": est.standard_errors,
    })
    table["rank"] = table["shapley"].rank(ascending=False, method="first").astype(int)
    return table


def sweeps(value_fn: ProbeValue, result: CountryResult, *, step: int, lm=None, tokenizer=None, kind: str | None = None,
           stereoset_items: pd.DataFrame | None = None, candidate_score: str = "mean") -> pd.DataFrame:
    """Top-down and bottom-up sweeps; StereoSet ss/lms/icat after each top-down step when items are given."""
    encoder = value_fn.encoder

    def stereoset_after(mask: np.ndarray) -> dict:
        gate = value_fn.gates_for(mask[None, :])[0]
        items = stereoset_items
        scores = {col: candidate_scores(lm, tokenizer, kind, items["context"].tolist(), items[col].tolist(),
                                        encoder.gate, gate, score=candidate_score, ids=items["id"].tolist())
                  for col in ("sent_stereo", "sent_anti", "sent_unrelated")}
        s = stereoset_scores(items["target"], scores["sent_stereo"], scores["sent_anti"], scores["sent_unrelated"])
        return {"ss": s["ss"], "lms": s["lms"], "icat": s["icat"], "n_stereoset_items": s["n"]}

    use_ss = stereoset_items is not None and len(stereoset_items) and lm is not None
    frames = [run_sweep(value_fn, result.estimate.values, "top_down", step, result.players,
                        stereoset_after if use_ss else None),
              run_sweep(value_fn, result.estimate.values, "bottom_up", step, result.players)]
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "country", result.country)
    return out


@dataclass
class StudySettings:
    layers: list[int] | None            # layers whose heads are players (negative counts from the top); None: all
    pooling: str = "auto"
    reuse_prefix: bool = True
    max_length: int = 128
    split: SplitSettings = field(default_factory=SplitSettings)
    prune_step: int = 1
    stereoset_items: int | None = None  # StereoSet items per country scored after each top-down step; None: all
    candidate_score: str = "mean"       # per-token mean or sum of a candidate's log-probabilities, as the stereo study


def study_settings(cfg: dict, *, seed: int) -> tuple[StudySettings, ProbeSettings, ShapleySettings]:
    """(study, probe, Shapley) settings from a checked ``study.heads`` section; ``seed`` seeds the probe."""
    probe_cfg, shap_cfg, prune_cfg, split_cfg = cfg["probe"], cfg["shapley"], cfg["pruning"], cfg["split"]
    split = SplitSettings(shapley_fraction=float(split_cfg["shapley_fraction"]),
                          pruning_fraction=float(split_cfg["pruning_fraction"]), seed=int(split_cfg["seed"]))
    study = StudySettings(layers=shap_cfg.get("layers"), pooling=probe_cfg["pooling"],
                          reuse_prefix=bool(shap_cfg["reuse_prefix"]), max_length=int(probe_cfg["max_length"]),
                          split=split, prune_step=int(prune_cfg["step"]),
                          stereoset_items=prune_cfg.get("stereoset_items_per_country"),
                          candidate_score=str(prune_cfg["candidate_score"]))
    probe = ProbeSettings(learning_rate=float(probe_cfg["learning_rate"]), epochs=int(probe_cfg["epochs"]),
                          batch_size=int(probe_cfg["batch_size"]), weight_decay=float(probe_cfg["weight_decay"]),
                          finetune=bool(probe_cfg["finetune"]), seed=seed)
    shapley = ShapleySettings(permutations=int(shap_cfg["permutations"]), antithetic=bool(shap_cfg["antithetic"]),
                              step=shap_cfg.get("step"), max_rows=int(shap_cfg["max_rows"]), value=shap_cfg["value"],
                              seed=int(shap_cfg["seed"]), stability_seeds=int(shap_cfg.get("stability_seeds") or 0))
    return study, probe, shapley


def resolve_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """The player layers as indices from the bottom (null: every layer)."""
    if layers is None:
        return list(range(n_layers))
    check_layers(layers, n_layers)
    return sorted({layer % n_layers for layer in layers})


def analyse_countries(model, tokenizer, kind: str, instances: pd.DataFrame, study: StudySettings,
                      probe_settings: ProbeSettings, shapley: ShapleySettings, *, progress: bool = True
                      ) -> tuple[pd.DataFrame, pd.DataFrame, list[dict], pd.DataFrame]:
    """(Shapley table, sweeps table, probe summaries, stability table) for every country of ``instances``."""
    from tqdm import tqdm

    pooling = study.pooling if study.pooling != "auto" else ("last" if kind == "causal" else "first")
    base = model.base_model
    probe_encoder = GatedEncoder(base, tokenizer, pooling=pooling, gated_layers=[0], reuse_prefix=False,
                                 max_length=study.max_length)
    layers = resolve_layers(study.layers, probe_encoder.gate.n_layers)
    probe_encoder.gate.remove()
    players = heads_of_layers(layers, probe_encoder.gate.n_heads)
    reuse = study.reuse_prefix and not probe_settings.finetune
    tables, sweep_tables, summaries, stability = [], [], [], []
    countries = sorted(instances["country"].astype(str).unique())
    bar = tqdm(countries, desc="heads", unit="country", disable=None if progress else True)  # None: quiet off a TTY
    # fine-tuning changes the weights: every country starts from the same pretrained model
    pretrained = {k: v.detach().clone() for k, v in model.state_dict().items()} if probe_settings.finetune else None
    for country in bar:
        if pretrained is not None:
            model.load_state_dict(pretrained)
        part = instances[instances["country"].astype(str) == country]
        encoder = GatedEncoder(base, tokenizer, pooling=pooling, gated_layers=layers, reuse_prefix=reuse,
                               max_length=study.max_length)
        try:
            result, _ = probe_and_attribute(encoder, part, players, country=country, split=study.split,
                                            probe_settings=probe_settings, shapley=shapley)
            pruning_value, items = pruning_inputs(encoder, result, part, metric=shapley.value,
                                                  max_rows=shapley.max_rows, stereoset_items=study.stereoset_items)
            t0 = time.perf_counter()
            sweep = sweeps(pruning_value, result, step=study.prune_step, lm=model, tokenizer=tokenizer, kind=kind,
                           stereoset_items=items, candidate_score=study.candidate_score)
            result.probe_summary.update({"pooling": pooling, "shapley_seconds": result.seconds,
                                         "sweep_seconds": time.perf_counter() - t0,
                                         "n_stereoset_items": int(len(items))})
        finally:
            encoder.gate.remove()
        tables.append(shapley_table(result))
        stability.append(stability_table(result))
        sweep_tables.append(sweep)
        summaries.append(result.probe_summary)
        bar.set_postfix(country=country, acc=f"{result.probe_summary['test_value_all_heads']:.2f}")
    return (pd.concat(tables, ignore_index=True), pd.concat(sweep_tables, ignore_index=True), summaries,
            pd.concat(stability, ignore_index=True))
