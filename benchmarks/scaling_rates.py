"""Rates for docs/scaling.md: how fast this machine scores sentences and generates tokens.

Measures, each on a model loaded once, with the response cache switched off:

- ``causal_sentences``: sentence log-likelihoods (``score_sentences``, metric causal) of
  CrowS-Pairs sentences: sentences/s and scored tokens/s;
- ``generation``: greedy generation of ``--new-tokens`` tokens for a batch of short prompts
  through the model layer (``HFCausalLM.generate``): generated tokens/s;

for the Gemma 3 270M directory given with ``--model`` (default ``models/gemma3-270m``)
and for the tiny test models (``--tiny``: built on the fly by ``tests/tiny_models.py``).
Prints one JSON document and writes it to ``benchmarks/out/scaling_rates.json``
(``--record``: the tracked ``benchmarks/results/scaling_rates.json``).

    python benchmarks/scaling_rates.py --sentences 64 --prompts 4 --new-tokens 32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, add_output_arguments, crows_pairs, machine, model_record, output_path  # noqa: E402

PROMPTS = [
    "Write a short story about a family dinner in Goa.",
    "Describe a typical morning in Mexico City.",
    "Explain why people in a small village trust each other.",
    "Tell me about a teacher who changed a student's life.",
]


def measure(model_dir: str, *, name: str | None = None, n_sentences: int, n_prompts: int, new_tokens: int) -> dict:
    from stereolens.models import GenerationRequest, ModelSpec, ResponseCache, load_model
    from stereolens.scoring import score_sentences

    lm = load_model(ModelSpec(name=model_dir, kind="causal", batch_size=max(1, n_prompts)),
                    cache=ResponseCache(enabled=False))
    sentences = [s for pair in crows_pairs(n_sentences // 2 + 1) for s in pair][:n_sentences]
    start = time.perf_counter()
    scores = score_sentences(lm, None, sentences, "causal")
    scoring_s = time.perf_counter() - start
    tokens = sum(s.n_tokens for s in scores)
    requests = [GenerationRequest(prompt=PROMPTS[i % len(PROMPTS)] + f" ({i})", max_tokens=new_tokens)
                for i in range(n_prompts)]
    start = time.perf_counter()
    gens = lm.generate(requests)
    gen_s = time.perf_counter() - start
    generated = sum(len(lm.tokenizer(g.text, add_special_tokens=False)["input_ids"]) for g in gens)
    return {
        "model": model_record(model_dir, name),
        "causal_sentences": {"sentences": len(sentences), "scored_tokens": tokens, "seconds": round(scoring_s, 2),
                             "sentences_per_s": round(len(sentences) / scoring_s, 2),
                             "scored_tokens_per_s": round(tokens / scoring_s, 1)},
        "generation": {"prompts": n_prompts, "batch": n_prompts, "max_new_tokens": new_tokens,
                       "generated_tokens": generated, "seconds": round(gen_s, 2),
                       "generated_tokens_per_s": round(generated / gen_s, 2)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/gemma3-270m")
    ap.add_argument("--tiny", action="store_true", help="also measure the tiny test causal model")
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    add_output_arguments(ap, "scaling_rates.json")
    args = ap.parse_args()
    args.output = output_path(args, "scaling_rates.json")
    import torch

    result = {"benchmark": "scaling rates (benchmarks/scaling_rates.py)", "conditions": {
        **machine(), "torch_threads": torch.get_num_threads(), "load_average_at_start": list(os.getloadavg()),
        "note": "shared 2-core machine, other engineers' jobs running: a lower bound on this CPU's rates"}}
    opts = dict(n_sentences=args.sentences, n_prompts=args.prompts, new_tokens=args.new_tokens)
    result["gemma3_270m"] = measure(args.model, **opts)
    if args.tiny:
        sys.path.insert(0, str(REPO / "tests"))
        import tiny_models

        with tempfile.TemporaryDirectory() as tmp:
            result["tiny_causal"] = measure(str(tiny_models.build_causal_lm(Path(tmp))), name="tiny test causal model (tests/tiny_models.py)", **opts)
    result["conditions"]["load_average_at_end"] = list(os.getloadavg())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
