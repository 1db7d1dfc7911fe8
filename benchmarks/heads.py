"""Head Shapley values: this study's estimator against Captum's ShapleyValueSampling.

Both estimate the same game (probe accuracy on the held-out split with only a
set of heads active, heads gated off at the attention output) from the same
permutations: Captum draws them with ``torch.randperm`` after a seed, and we
replay that seed.  Captum evaluates one coalition per call with a full forward
pass; the study's estimator batches coalitions, evaluates each distinct
coalition once and replays the frozen layers below the first player layer.
The probe trains on 70% of the instances and the game is valued on the other
30% (the study's three-way split with no pruning set, since nothing is pruned
here: the same rows as the measurements before the split was introduced).
Writes values, standard errors, timings and the speed ratio to
``benchmarks/out/heads.json`` (``--record``: the tracked ``benchmarks/results/heads.json``).

Instances: ``data/processed/stereo/instances.csv`` when it exists, else a small
template set generated here (``source=benchmark-template``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, add_output_arguments, output_path  # noqa: E402

GROUPS = ["las mujeres", "los hombres", "los ancianos", "los jóvenes", "los indígenas", "los migrantes",
          "los católicos", "los ricos", "los pobres", "las enfermeras"]
PAIRS = [("son débiles", "son fuertes"), ("son perezosos", "son trabajadores"), ("son emotivos", "son racionales"),
         ("son ignorantes", "son cultos"), ("son violentos", "son pacíficos"), ("son tacaños", "son generosos")]


def template_instances(per_country: int = 30, countries=("MX", "ES")) -> pd.DataFrame:
    rows = []
    combos = itertools.cycle(itertools.product(GROUPS, PAIRS))
    for country in countries:
        for i in range(per_country):
            group, (stereo, anti) = next(combos)
            rows.append({"id": f"{country}-{i:03d}", "country": country, "category": "template", "target": group,
                         "stereotype_id": f"{country}-{i}", "context": f"En mi barrio viven {group}.",
                         "sent_stereo": f"Todos dicen que {stereo}.", "sent_anti": f"Todos dicen que {anti}.",
                         "sent_unrelated": "La mesa tiene cuatro patas.", "source": "benchmark-template"})
    return pd.DataFrame(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(REPO / "models" / "gemma3-270m"))
    p.add_argument("--kind", default="causal", choices=["causal", "masked"])
    p.add_argument("--instances", default=str(REPO / "data" / "processed" / "stereo" / "instances.csv"))
    p.add_argument("--country", default=None, help="one country of the instances (default: the first)")
    p.add_argument("--max-instances", type=int, default=40)
    p.add_argument("--layers", default="-2,-1", help="player layers, comma-separated; 'all' for every head")
    p.add_argument("--permutations", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=100)
    add_output_arguments(p, "heads.json")
    p.add_argument("--write-instances", type=Path, help="only write the template instances to this path")
    args = p.parse_args()
    args.output = output_path(args, "heads.json")
    load_at_start = list(os.getloadavg())  # the CPU is shared: timings depend on what else runs
    if args.write_instances:
        args.write_instances.parent.mkdir(parents=True, exist_ok=True)
        template_instances().to_csv(args.write_instances, index=False)
        return

    from captum.attr import ShapleyValueSampling
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from stereolens.studies.heads.attribution import heads_of_layers, resolve_layers
    from stereolens.studies.heads.probe import (
        GatedEncoder, ProbeSettings, ProbeValue, probe_examples, split_instances, train_probe,
    )
    from stereolens.studies.heads.shapley import permutation_shapley

    path = Path(args.instances)
    instances = pd.read_csv(path, dtype=str) if path.exists() else template_instances()
    country = args.country or sorted(instances["country"].unique())[0]
    instances = instances[instances["country"] == country].head(args.max_instances)
    auto = AutoModelForCausalLM if args.kind == "causal" else AutoModelForMaskedLM
    model = auto.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    pooling = "last" if args.kind == "causal" else "first"

    examples = probe_examples(instances)
    split = split_instances(examples["id"], shapley_fraction=0.3, pruning_fraction=0.0, seed=0)
    labels = torch.tensor(examples["label"].to_numpy(), dtype=torch.long)
    train_rows = np.flatnonzero(examples["id"].isin(split.train)).tolist()
    test_rows = np.flatnonzero(examples["id"].isin(split.shapley)).tolist()

    plain = GatedEncoder(model.base_model, tok, pooling=pooling, gated_layers=[0], reuse_prefix=False)
    n_layers = plain.gate.n_layers
    layers = resolve_layers(None if args.layers == "all" else [int(x) for x in args.layers.split(",")], n_layers)
    players = heads_of_layers(layers, plain.gate.n_heads)
    plain.encode(examples["text"].tolist())
    probe, _ = train_probe(plain, train_rows, labels, ProbeSettings(epochs=args.epochs, seed=args.seed))

    # Captum: one coalition per call, full forward passes
    captum_value = ProbeValue(plain, probe, test_rows, labels, players, max_rows=len(test_rows))

    def forward(mask: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(captum_value(mask.detach().numpy() > 0.5))

    n = len(players)
    start = time.perf_counter()
    torch.manual_seed(args.seed)
    captum_values = ShapleyValueSampling(forward).attribute(
        torch.ones(1, n), baselines=torch.zeros(1, n), n_samples=args.permutations,
        perturbations_per_eval=1)[0].double().numpy()
    captum_seconds = time.perf_counter() - start
    plain.gate.remove()

    # this study: same permutations, same probe, batched, deduplicated, frozen prefix replayed
    torch.manual_seed(args.seed)
    perms = np.array([torch.randperm(n).tolist() for _ in range(args.permutations)])
    start = time.perf_counter()
    fast = GatedEncoder(model.base_model, tok, pooling=pooling, gated_layers=layers, reuse_prefix=True)
    try:
        fast.encode(examples["text"].tolist())
        ours_value = ProbeValue(fast, probe, test_rows, labels, players, max_rows=256)
        ours = permutation_shapley(ours_value, perms)
    finally:
        fast.gate.remove()
    ours_seconds = time.perf_counter() - start

    diff = np.abs(ours.values - captum_values)
    se = ours.standard_errors
    result = {
        "model": Path(args.model).name, "kind": args.kind, "country": country,
        "instances": str(path) if path.exists() else "template (benchmark-template)",
        "n_test_examples": len(test_rows), "players": [f"L{l}H{h}" for l, h in players], "layers": layers,
        "n_layers": n_layers, "permutations": args.permutations, "seed": args.seed,
        "probe_test_accuracy_all_heads": ours.full_value,
        "captum": {"version": __import__("captum").__version__, "seconds": captum_seconds,
                   "forward_passes": captum_value.forward_passes, "values": captum_values.tolist()},
        "ours": {"seconds": ours_seconds, "forward_passes": ours_value.forward_passes,
                 "distinct_coalitions": ours.n_evaluations, "values": ours.values.tolist(),
                 "standard_errors": se.tolist()},
        "max_abs_difference": float(diff.max()),
        "within_sampling_error": bool(np.all(diff <= 2 * np.maximum(se, 1e-12))),
        "speed_ratio": captum_seconds / ours_seconds,
        "machine": {"cpu_threads": torch.get_num_threads(), "platform": platform.platform(),
                    "load_average_at_start": load_at_start, "load_average_at_end": list(os.getloadavg())},
        "date": time.strftime("%Y-%m-%d"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"captum {captum_seconds:.1f}s, ours {ours_seconds:.1f}s: {result['speed_ratio']:.1f}x; "
          f"max |difference| {result['max_abs_difference']:.2g} (within 2 SE: {result['within_sampling_error']})")


if __name__ == "__main__":
    main()
