"""Head Shapley values: this study's estimator against Captum's ShapleyValueSampling.

All three methods estimate the same game (probe accuracy on the held-out split with only a
set of heads active, heads gated off at the attention output) from the same permutations:
Captum draws them with ``torch.randperm`` after a seed, and we replay that seed.

- ``captum_full``: Captum, one coalition per call, a full forward pass per call (as public
  head-probing code calls it);
- ``captum_replay``: Captum, one coalition per call, through the same forward ours uses,
  which replays the frozen layers below the first player layer;
- ``ours``: ``permutation_shapley``, coalitions batched and each distinct one evaluated once,
  with the same frozen-prefix replay.

The methods take turns in one process (``_common.take_turns``: a warm-up call each, then
``--rounds`` rounds with the order rotated and reversed), so they share whatever load the
machine has; the figure is the median of the per-round ratios, with their range and the
load average of every round, and the values of all three are checked equal.  The probe
trains on 70% of the instances and the game is valued on the other 30%.  Writes to
``benchmarks/out/heads.json`` (``--record``: the tracked ``benchmarks/results/heads.json``).

Instances: ``data/processed/stereo/instances.csv`` when it exists, else a small
template set generated here (``source=benchmark-template``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, add_output_arguments, machine, output_path, take_turns  # noqa: E402

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


def main() -> int:
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
    p.add_argument("--rounds", type=int, default=5, help="timed rounds after the warm-up")
    add_output_arguments(p, "heads.json")
    p.add_argument("--write-instances", type=Path, help="only write the template instances to this path")
    args = p.parse_args()
    args.output = output_path(args, "heads.json")
    if args.write_instances:
        args.write_instances.parent.mkdir(parents=True, exist_ok=True)
        template_instances().to_csv(args.write_instances, index=False)
        return 0

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
    plain.gate.remove()
    texts = examples["text"].tolist()
    n = len(players)
    torch.manual_seed(args.seed)
    perms = np.array([torch.randperm(n).tolist() for _ in range(args.permutations)])
    passes: dict[str, int] = {}
    coalitions: dict[str, int] = {}

    def with_encoder(reuse_prefix: bool, score) -> np.ndarray:
        # each call builds (and, with replay, captures the frozen prefix of) its own encoder: that cost is timed too
        gated = layers if reuse_prefix else [0]
        encoder = GatedEncoder(model.base_model, tok, pooling=pooling, gated_layers=gated, reuse_prefix=reuse_prefix)
        try:
            encoder.encode(texts)
            return score(encoder)
        finally:
            encoder.gate.remove()

    def captum(encoder) -> np.ndarray:
        # one coalition per call, as public head-probing code calls it
        value = ProbeValue(encoder, probe, test_rows, labels, players, max_rows=len(test_rows))

        def forward(mask: torch.Tensor) -> torch.Tensor:
            return torch.as_tensor(value(mask.detach().numpy() > 0.5))

        torch.manual_seed(args.seed)  # Captum draws its permutations with torch.randperm: the same ones as `perms`
        out = ShapleyValueSampling(forward).attribute(
            torch.ones(1, n), baselines=torch.zeros(1, n), n_samples=args.permutations,
            perturbations_per_eval=1)[0].double().numpy()
        passes["captum_replay" if encoder.prefix.first_gated else "captum_full"] = value.forward_passes
        return out

    def study(encoder) -> np.ndarray:
        value = ProbeValue(encoder, probe, test_rows, labels, players, max_rows=256)
        estimate = permutation_shapley(value, perms)
        passes["ours"], coalitions["ours"] = value.forward_passes, estimate.n_evaluations
        study.estimate = estimate
        return estimate.values

    timed = take_turns({
        "ours": lambda: with_encoder(True, study),
        "captum_full": lambda: with_encoder(False, captum),
        "captum_replay": lambda: with_encoder(True, captum),
    }, args.rounds, baseline="ours")
    values = timed.pop("values")
    ours = study.estimate
    diffs = {name: float(np.abs(values[name] - values["ours"]).max()) for name in ("captum_full", "captum_replay")}
    result = {
        "model": Path(args.model).name, "kind": args.kind, "country": country,
        "instances": str(path) if path.exists() else "template (benchmark-template)",
        "n_test_examples": len(test_rows), "players": [f"L{l}H{h}" for l, h in players], "layers": layers,
        "n_layers": n_layers, "permutations": args.permutations, "seed": args.seed,
        "probe_test_accuracy_all_heads": ours.full_value,
        "captum_version": __import__("captum").__version__,
        "methods": {
            "ours": "permutation_shapley: batched, deduplicated coalitions, frozen prefix replayed",
            "captum_full": "ShapleyValueSampling, one coalition per call, full forward per call",
            "captum_replay": "ShapleyValueSampling, one coalition per call, the same frozen-prefix replay as ours",
        },
        "forward_passes": passes, "distinct_coalitions": coalitions["ours"],
        "values": {name: v.tolist() for name, v in values.items()},
        "standard_errors": ours.standard_errors.tolist(),
        "max_abs_difference_to_ours": diffs,
        "values_equal": timed["values_equal"],  # exact: every round of every method against ours
        "timing": timed,
        "machine": machine(),
        "load_average_at_end": list(os.getloadavg()),
        "date": time.strftime("%Y-%m-%d"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    ratio, spread = timed["median_ratio_to_ours"], timed["ratio_range"]
    print(f"median of {args.rounds} rounds (load {timed['load_average_1min_range']}): "
          f"captum full {ratio['captum_full']:.2f}x {spread['captum_full']}, "
          f"captum replay {ratio['captum_replay']:.2f}x {spread['captum_replay']} the time of ours "
          f"({timed['median_seconds']}); max |difference| {diffs}")
    return 0 if timed["values_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
