"""Batched against one-at-a-time sampled generation on one loaded model, in one process.

The stereo retrieval stage sends one batch of sampled chat requests per round and turn
(one request per active country x category x point of view, temperature 0.8, each with
its seed).  This script times ``HFCausalLM.generate`` on such a batch twice with the
response cache off:

- ``one_at_a_time``: ``generate([request])`` per request, which is what the backend did
  for every sampled request before they were batched;
- ``batched``: ``generate(requests)`` with the model config's ``batch_size``;

checks that both give the same texts, and writes the times and their ratio to
``benchmarks/out/sampled_generation.json`` (``--record``: the tracked file in ``benchmarks/results/``).  The order alternates (batched first on
odd repeats) so that a change in the machine's load hits both about equally.

    python benchmarks/sampled_generation.py --requests 8 --new-tokens 32 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, add_output_arguments, machine, output_path  # noqa: E402

TOPICS = ["Mexico", "Spain", "Peru", "Colombia", "Argentina", "Chile", "Cuba", "Bolivia"]
ASPECTS = ["food", "work", "family", "religion"]


def requests(n: int, new_tokens: int, temperature: float) -> list:
    from stereolens.models import ChatMessage, GenerationRequest

    out = []
    for k in range(n):
        topic, aspect = TOPICS[k % len(TOPICS)], ASPECTS[k % len(ASPECTS)]
        text = f"Write three short social-media posts by people from {topic} about {aspect}."
        out.append(GenerationRequest(messages=(ChatMessage("user", text),), max_tokens=new_tokens,
                                     temperature=temperature, seed=1 + k))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(REPO / "models" / "gemma3-270m"))
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    add_output_arguments(ap, "sampled_generation.json")
    args = ap.parse_args(argv)
    args.output = output_path(args, "sampled_generation.json")

    from stereolens.io import write_json
    from stereolens.models import ModelSpec, ResponseCache, load_model

    model = load_model(ModelSpec(name=args.model, kind="causal", batch_size=args.batch_size),
                       cache=ResponseCache(enabled=False))
    reqs = requests(args.requests, args.new_tokens, args.temperature)
    model.generate(reqs[:1])  # warm-up: first-call allocations and lazy imports
    times: dict[str, list[float]] = {"one_at_a_time": [], "batched": []}
    texts: dict[str, list[str]] = {}

    def one_at_a_time() -> list[str]:
        return [model.generate([r])[0].text for r in reqs]

    def batched() -> list[str]:
        return [g.text for g in model.generate(reqs)]

    for repeat in range(args.repeats):
        order = [("batched", batched), ("one_at_a_time", one_at_a_time)]
        for name, run in order if repeat % 2 else order[::-1]:
            start = time.perf_counter()
            texts[name] = run()
            times[name].append(time.perf_counter() - start)
    best = {name: min(values) for name, values in times.items()}
    result = {
        "model": args.model,
        "requests": args.requests,
        "max_new_tokens": args.new_tokens,
        "temperature": args.temperature,
        "batch_size": args.batch_size,
        "seconds": times,
        "best_seconds": best,
        "speedup_batched_over_one_at_a_time": best["one_at_a_time"] / best["batched"],
        "same_texts": texts["batched"] == texts["one_at_a_time"],
        "n_differing_texts": sum(a != b for a, b in zip(texts["batched"], texts["one_at_a_time"])),
        "machine": machine(),
    }
    write_json(args.output, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
