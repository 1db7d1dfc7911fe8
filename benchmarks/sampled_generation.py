"""Batched against one-at-a-time sampled generation on one loaded model, in one process.

The stereo retrieval stage sends one batch of sampled chat requests per round and turn
(one request per active country x category x point of view, temperature 0.8, each with
its seed; up to 150 in a round).  This script times ``HFCausalLM.generate`` on such a
batch with the response cache off:

- ``batched``: ``generate(requests)`` with ``--batch-size`` (8) rows a batch, the model
  config's default ``batch_size``, which generation used before it batched at least
  ``hf.GENERATION_BATCH_ROWS`` (32) rows;
- ``one_at_a_time``: ``generate([request])`` per request, which is what the backend did
  for every sampled request before they were batched;
- ``batched_reference_sampler``: as ``batched``, with the one-row-at-a-time sampler the
  batched ``PerRowSampler`` replaced (``tests/reference_per_row_sampler.py``): what the
  sampler rewrite saves;
- ``batched_<N>`` for each ``--larger-batch N``: as ``batched``, ``N`` requests per pass
  (``--larger-batch 32``: what generation now does by default).

The methods take turns (``_common.take_turns``: a warm-up call each, then ``--rounds``
rounds, order rotated and reversed), the figure is the median of the per-round ratios
with the load average of every round, and every method must give the same texts.
Writes ``benchmarks/out/sampled_generation.json`` (``--record``: the tracked file in
``benchmarks/results/``).

    python benchmarks/sampled_generation.py --requests 8 --new-tokens 32 --rounds 3
    python benchmarks/sampled_generation.py --requests 32 --larger-batch 32 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, add_output_arguments, describe, machine, model_record, output_path, take_turns  # noqa: E402

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
    ap.add_argument("--larger-batch", type=int, nargs="*", default=[], metavar="N",
                    help="also time batches of N requests per pass")
    ap.add_argument("--no-one-at-a-time", action="store_true", help="leave out the slow one-request-per-call method")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up")
    add_output_arguments(ap, "sampled_generation.json")
    args = ap.parse_args(argv)
    args.output = output_path(args, "sampled_generation.json")

    sys.path.insert(0, str(REPO / "tests"))
    from reference_per_row_sampler import ReferencePerRowSampler

    from stereolens.io import write_json
    from stereolens.models import ModelSpec, ResponseCache, hf, load_model
    from stereolens.models.hf import PerRowSampler

    # the backend batches at least hf.GENERATION_BATCH_ROWS sampled requests (32); here each
    # method names its batch size, so 8 rows a batch (the size before that floor) stays measurable
    hf.GENERATION_BATCH_ROWS = 1

    model = load_model(ModelSpec(name=args.model, kind="causal", batch_size=args.batch_size),
                       cache=ResponseCache(enabled=False))
    reqs = requests(args.requests, args.new_tokens, args.temperature)

    def generate(batch_size: int, sampler=PerRowSampler):
        def run() -> list[str]:
            model.spec.batch_size, model.sampler = batch_size, sampler
            return [g.text for g in model.generate(reqs)]
        return run

    def one_at_a_time() -> list[str]:
        model.spec.batch_size, model.sampler = args.batch_size, PerRowSampler
        return [model.generate([r])[0].text for r in reqs]

    methods = {"batched": generate(args.batch_size),
               "batched_reference_sampler": generate(args.batch_size, ReferencePerRowSampler)}
    if not args.no_one_at_a_time:
        methods["one_at_a_time"] = one_at_a_time
    for n in args.larger_batch:
        methods[f"batched_{n}"] = generate(n)
    timed = take_turns(methods, args.rounds, baseline="batched")
    texts = timed.pop("values")
    ratio = timed["median_ratio_to_batched"]
    result = {
        "model": model_record(args.model),
        "requests": args.requests,
        "max_new_tokens": args.new_tokens,
        "temperature": args.temperature,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "median_seconds": timed["median_seconds"],
        # "N x" = the other method's time over batched's: how much faster batched is
        "speedup_batched_over_one_at_a_time": ratio.get("one_at_a_time"),
        "speedup_batched_sampler_over_reference_sampler": ratio["batched_reference_sampler"],
        "speedup_larger_batches_over_batch_size": {n: 1 / ratio[f"batched_{n}"] for n in args.larger_batch},
        "same_texts": timed["values_equal"],
        "n_differing_texts": timed["agreement"]["difference_to_batched"],
        "example_text": texts["batched"][0],
        "timing": timed,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    write_json(args.output, result)
    print(json.dumps({k: result[k] for k in ("median_seconds", "speedup_batched_over_one_at_a_time",
                                             "speedup_batched_sampler_over_reference_sampler",
                                             "speedup_larger_batches_over_batch_size", "same_texts")}, indent=2))
    print(describe(timed, "batched"))
    return 0 if timed["values_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
