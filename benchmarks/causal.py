"""Benchmark: causal sentence log-likelihoods, engine vs lm-evaluation-harness.

Scores both sentences of CrowS-Pairs pairs with the default Gemma 3 270M
(``models/gemma3-270m``, converted by the models stage) two ways, on the same sentences:

- ``engine``: :func:`stereolens.scoring.score_sentences` with metric ``causal``;
- ``lm_eval``: ``lm_eval.models.huggingface.HFLM(pretrained=..., batch_size=16)
  .loglikelihood`` with empty contexts (BOS-conditioned), as its crows_pairs task does.

Both are loaded once and take turns in one process (``_common.take_turns``: a warm-up
call each, then ``--rounds`` rounds, order rotated and reversed), so they share whatever
load the machine has; the figure is the median of the per-round ratios, with their range
and every round's load average.  The scores must agree within ``--tolerance`` nats
(float32 summation order differs) and the pair decisions must be the same.  Peak memory
is sampled per call in the one process (the allocator keeps what an earlier call freed,
so it can read low).  Writes ``benchmarks/out/causal.json`` (``--record``: the tracked
``benchmarks/results/causal.json``).

    .venv/bin/python benchmarks/causal.py --limit 100 --rounds 3   # first 100 pairs (200 sentences)
    .venv/bin/python benchmarks/causal.py                          # all 1,508 pairs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (REPO, add_output_arguments, crows_pairs, describe, machine, model_record, output_path,  # noqa: E402
                     take_turns)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(REPO / "models" / "gemma3-270m"))
    p.add_argument("--limit", type=int, default=None, help="first N pairs (default: all 1,508)")
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--lm-eval-batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up")
    p.add_argument("--tolerance", type=float, default=5e-3, help="largest score difference counted as equal (nats)")
    add_output_arguments(p, "causal.json")
    args = p.parse_args()
    args.output = output_path(args, "causal.json")
    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"no model at {args.model}: run the models stage (stereolens stage prepare-model) first")
    sents = [s for pair in crows_pairs(args.limit) for s in pair]

    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stereolens.io import write_json
    from stereolens.scoring import score_sentences

    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    lm = HFLM(pretrained=args.model, device="cpu", batch_size=args.lm_eval_batch)
    reqs = [Instance(request_type="loglikelihood", doc={}, arguments=("", s), idx=i) for i, s in enumerate(sents)]

    def engine() -> list[float]:
        return [s.logprob for s in score_sentences(model, tok, sents, "causal", batch_tokens=args.batch_tokens)]

    def lm_eval() -> list[float]:
        return [ll for ll, _ in lm.loglikelihood(reqs, disable_tqdm=True)]

    timed = take_turns({"engine": engine, "lm_eval": lm_eval}, args.rounds, baseline="engine",
                       tolerance=args.tolerance, memory=True)
    scores = timed.pop("values")
    n = len(sents) // 2
    same_decisions = sum((scores["engine"][2 * i] > scores["engine"][2 * i + 1])
                         == (scores["lm_eval"][2 * i] > scores["lm_eval"][2 * i + 1]) for i in range(n)) / max(1, n)
    seconds = timed["median_seconds"]
    summary = {
        "benchmark": "causal sentence log-likelihood (benchmarks/causal.py)",
        "model": model_record(args.model),
        "data": f"CrowS-Pairs, first {n} pairs, both sentences, empty context (BOS)",
        "conditions": {**machine(), "batch_tokens": args.batch_tokens, "lm_eval_batch_size": args.lm_eval_batch,
                       "rounds": args.rounds, "load_average_1min_range": timed["load_average_1min_range"],
                       "note": "both methods take turns in one process; the ratio is the median of the rounds'"},
        "methods": {name: {"median_seconds": seconds[name], "sentences_per_s": len(sents) / seconds[name],
                           "peak_extra_mb_in_one_process": timed["peak_extra_mb"][name]} for name in seconds},
        "speedup_vs_lm_eval": timed["median_ratio_to_engine"]["lm_eval"],
        "speedup_range": timed["ratio_range"]["lm_eval"],
        "max_abs_diff_vs_lm_eval": timed["agreement"]["difference_to_engine"]["lm_eval"],
        "values_equal": timed["values_equal"],
        "same_pct_stereotype": same_decisions,
        "timing": timed,
        "goal": {"speedup_vs_lm_eval": 1.5},
        "date": time.strftime("%Y-%m-%d"),
    }
    write_json(args.output, summary)
    print(json.dumps({k: summary[k] for k in ("speedup_vs_lm_eval", "speedup_range", "max_abs_diff_vs_lm_eval",
                                               "same_pct_stereotype")}, indent=2))
    print(describe(timed, "engine"))
    print(f"wrote {args.output}")
    return 0 if timed["values_equal"] and same_decisions == 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
