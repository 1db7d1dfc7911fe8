"""One country's analysis: train the probe, estimate each head's Shapley value, run the sweeps."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from stereolens.stats.stereoset import stereoset_scores
from stereolens.studies.heads.bounds import ExactStop
from stereolens.studies.heads.candidates import candidate_scores
from stereolens.studies.heads.probe import (
    GatedEncoder, LinearProbe, ProbeSettings, ProbeValue, probe_examples, split_instances, train_probe,
)
from stereolens.studies.heads.pruning import run_sweep
from stereolens.studies.heads.shapley import ShapleyEstimate, permutation_shapley, sample_permutations


@dataclass
class ShapleySettings:
    permutations: int = 256
    antithetic: bool = False
    truncation_tolerance: float | None = None  # truncated Monte Carlo: approximate, off by default
    exact_stop: bool = True          # stop a permutation once the remaining heads provably cannot change accuracy
    exact_stop_enumerate: int = 4    # remaining heads whose on/off settings the bound enumerates; the rest are intervals
    step: int | None = None          # permutation positions per batched call (None: whole permutation)
    max_rows: int = 256              # examples x coalitions per forward pass
    value: str = "accuracy"
    seed: int = 0


def heads_of_layers(layers: Sequence[int], n_heads: int) -> list[tuple[int, int]]:
    return [(layer, head) for layer in layers for head in range(n_heads)]


@dataclass
class CountryResult:
    country: str
    players: list[tuple[int, int]]
    estimate: ShapleyEstimate
    probe_summary: dict
    seconds: float
    probe: LinearProbe
    test_rows: list[int] = field(default_factory=list)


def probe_and_attribute(encoder: GatedEncoder, instances: pd.DataFrame, players: Sequence[tuple[int, int]], *,
                        country: str, test_fraction: float, split_seed: int, probe_settings: ProbeSettings,
                        shapley: ShapleySettings) -> tuple[CountryResult, ProbeValue]:
    start = time.perf_counter()
    examples = probe_examples(instances)
    train_ids, test_ids = split_instances(examples["id"], test_fraction=test_fraction, seed=split_seed)
    encoder.encode(examples["text"].tolist())
    labels = torch.tensor(examples["label"].to_numpy(), dtype=torch.long)
    train_rows = np.flatnonzero(examples["id"].isin(train_ids)).tolist()
    test_rows = np.flatnonzero(examples["id"].isin(test_ids)).tolist()
    probe, losses = train_probe(encoder, train_rows, labels, probe_settings)
    value_fn = ProbeValue(encoder, probe, test_rows, labels, players, metric=shapley.value, max_rows=shapley.max_rows)
    train_value = ProbeValue(encoder, probe, train_rows, labels, players, metric="accuracy", max_rows=shapley.max_rows)
    perms = sample_permutations(len(players), shapley.permutations, seed=shapley.seed, antithetic=shapley.antithetic)
    stop, stop_note = exact_stop_for(encoder, probe, players, shapley)
    value_fn.exact_stop = stop
    try:
        estimate = permutation_shapley(value_fn, perms, step=shapley.step,
                                       truncation_tolerance=shapley.truncation_tolerance,
                                       antithetic=shapley.antithetic, exact_stop=stop)
    finally:
        value_fn.exact_stop = None  # the sweeps evaluate coalitions of their own
    if stop is not None and stop.reason:
        stop_note = stop.reason
    full = np.ones((1, len(players)), dtype=bool)
    summary = {
        "country": country, "n_instances": int(instances["id"].nunique()), "n_train_instances": len(train_ids),
        "n_test_instances": len(test_ids), "train_accuracy": float(train_value(full)[0]),
        "test_value_all_heads": estimate.full_value, "test_value_no_probed_heads": estimate.empty_value,
        "final_train_loss": losses[-1] if losses else None, "n_permutations": int(len(perms)),
        "n_truncated_permutations": int((estimate.truncated_at < len(players)).sum()),
        "mean_truncation_position": float(estimate.truncated_at.mean()),
        "early_stop": early_stop_kind(shapley), "exact_stop_note": stop_note,
        "n_exact_stops": int((estimate.exact_stop_at < len(players)).sum()),
        "exact_stop_positions": estimate.exact_stop_at.tolist(),
        "exact_stop_evaluations_saved": estimate.evaluations_saved.tolist(),
        "n_coalitions_saved_by_exact_stop": estimate.n_evaluations_saved,
        "exact_stop_checks": stop.n_checks if stop is not None else 0,
        "exact_stop_checks_settled": stop.n_settled if stop is not None else 0,
        "n_coalitions_evaluated": estimate.n_evaluations, "n_value_calls": estimate.n_value_calls,
        "n_forward_passes": value_fn.forward_passes,
    }
    result = CountryResult(country, list(players), estimate, summary, time.perf_counter() - start, probe, test_rows)
    return result, value_fn


def early_stop_kind(shapley: ShapleySettings) -> str:
    """How permutations may stop early, in words for the report."""
    kinds = []
    if shapley.exact_stop and shapley.value == "accuracy":
        kinds.append("exact (interval bound on the probe's logits over the remaining top-layer heads)")
    if shapley.truncation_tolerance is not None:
        kinds.append(f"truncated Monte Carlo, tolerance {shapley.truncation_tolerance} (approximate)")
    return "; ".join(kinds) or "none"


def exact_stop_for(encoder: GatedEncoder, probe: LinearProbe, players: Sequence[tuple[int, int]],
                   shapley: ShapleySettings) -> tuple[ExactStop | None, str]:
    """The exact stop rule for this run, or None, and a note saying why it is off or where it applies."""
    if not shapley.exact_stop:
        return None, "off (config)"
    if shapley.value != "accuracy":
        return None, f"off: the bound proves that predictions cannot flip, which fixes accuracy, not the {shapley.value}"
    stop = ExactStop(encoder, probe, players, enumerate_heads=shapley.exact_stop_enumerate)
    if stop.reason:
        return None, f"off: {stop.reason}"
    return stop, (f"tried once a permutation's remaining heads are all in the top layer ({stop.top}); "
                  f"{shapley.exact_stop_enumerate} largest enumerated, the rest bounded by intervals")


def shapley_table(result: CountryResult) -> pd.DataFrame:
    est = result.estimate
    table = pd.DataFrame({
        "country": result.country, "layer": [l for l, _ in result.players], "head": [h for _, h in result.players],
        "shapley": est.values, "se": est.standard_errors,
    })
    table["rank"] = table["shapley"].rank(ascending=False, method="first").astype(int)
    return table


def sweeps(value_fn: ProbeValue, result: CountryResult, *, step: int, lm=None, tokenizer=None, kind: str | None = None,
           stereoset_items: pd.DataFrame | None = None, batch_size: int = 16) -> pd.DataFrame:
    """Top-down and bottom-up sweeps; StereoSet ss/lms/icat after each top-down step when items are given."""
    encoder = value_fn.encoder

    def stereoset_after(mask: np.ndarray) -> dict:
        gate = value_fn.gates_for(mask[None, :])[0]
        items = stereoset_items
        scores = {col: candidate_scores(lm, tokenizer, kind, items["context"].tolist(), items[col].tolist(),
                                        encoder.gate, gate, batch_size=batch_size)
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
    test_fraction: float = 0.3
    split_seed: int = 0
    prune_step: int = 1
    stereoset_items: int | None = None  # StereoSet items per country scored after each top-down step; None: all
    batch_size: int = 16


def resolve_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    from stereolens.errors import ConfigError

    if layers is None:
        return list(range(n_layers))
    out = sorted({layer % n_layers if -n_layers <= layer < n_layers else -999 for layer in layers})
    if -999 in out:
        raise ConfigError(f"study.heads.shapley.layers {list(layers)} out of range for a model with {n_layers} layers")
    return out


def analyse_countries(model, tokenizer, kind: str, instances: pd.DataFrame, study: StudySettings,
                      probe_settings: ProbeSettings, shapley: ShapleySettings, *, progress: bool = True
                      ) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """(Shapley table, sweeps table, probe summaries) for every country of ``instances``."""
    from tqdm import tqdm

    pooling = study.pooling if study.pooling != "auto" else ("last" if kind == "causal" else "first")
    base = model.base_model
    probe_encoder = GatedEncoder(base, tokenizer, pooling=pooling, gated_layers=[0], reuse_prefix=False,
                                 max_length=study.max_length)
    layers = resolve_layers(study.layers, probe_encoder.gate.n_layers)
    probe_encoder.gate.remove()
    players = heads_of_layers(layers, probe_encoder.gate.n_heads)
    reuse = study.reuse_prefix and not probe_settings.finetune
    tables, sweep_tables, summaries = [], [], []
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
            result, value_fn = probe_and_attribute(encoder, part, players, country=country,
                                                   test_fraction=study.test_fraction, split_seed=study.split_seed,
                                                   probe_settings=probe_settings, shapley=shapley)
            items = part if study.stereoset_items is None else part.head(study.stereoset_items)
            t0 = time.perf_counter()
            sweep = sweeps(value_fn, result, step=study.prune_step, lm=model, tokenizer=tokenizer, kind=kind,
                           stereoset_items=items, batch_size=study.batch_size)
            result.probe_summary.update({"pooling": pooling, "shapley_seconds": result.seconds,
                                         "sweep_seconds": time.perf_counter() - t0,
                                         "n_stereoset_items": int(len(items))})
        finally:
            encoder.gate.remove()
        tables.append(shapley_table(result))
        sweep_tables.append(sweep)
        summaries.append(result.probe_summary)
        bar.set_postfix(country=country, acc=f"{result.probe_summary['test_value_all_heads']:.2f}")
    return pd.concat(tables, ignore_index=True), pd.concat(sweep_tables, ignore_index=True), summaries
