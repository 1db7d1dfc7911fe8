"""Benchmark: causal sentence log-likelihoods, engine vs lm-evaluation-harness.

Scores both sentences of CrowS-Pairs pairs with the default Gemma 3 270M
(``models/gemma3-270m``, converted by the models stage) two ways, each in its
own process on the same sentences:

- ``engine``: :func:`stereolens.scoring.score_sentences` with metric ``causal``;
- ``lm_eval``: ``lm_eval.models.huggingface.HFLM(pretrained=..., batch_size=16)
  .loglikelihood`` with empty contexts (BOS-conditioned), as its crows_pairs task does.

Prints and writes sentences per second, peak memory, the ratio and the largest
score difference as JSON.

    .venv/bin/python benchmarks/causal.py --limit 100     # first 100 pairs (200 sentences)
    .venv/bin/python benchmarks/causal.py                 # all 1,508 pairs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, PeakRSS, add_output_arguments, crows_pairs, machine, output_path, run_worker  # noqa: E402

WORK = Path("/tmp/stereolens-bench-causal")


def run_one(args) -> None:
    import torch

    sents = json.loads(Path(args.sentences).read_text(encoding="utf-8"))
    if args.worker == "engine":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from stereolens.scoring import score_sentences

        model = AutoModelForCausalLM.from_pretrained(args.model).eval()
        tok = AutoTokenizer.from_pretrained(args.model)
        score_sentences(model, tok, sents[:2], "causal")  # first-call setup (head split check) outside the timing

        def fn():
            return [s.logprob for s in score_sentences(model, tok, sents, "causal", batch_tokens=args.batch_tokens)]
    else:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM

        lm = HFLM(pretrained=args.model, device="cpu", batch_size=args.lm_eval_batch)
        reqs = [Instance(request_type="loglikelihood", doc={}, arguments=("", s), idx=i) for i, s in enumerate(sents)]

        def fn():
            return [ll for ll, _ in lm.loglikelihood(reqs, disable_tqdm=True)]

    with PeakRSS() as mem:
        t0 = time.perf_counter()
        scores = fn()
        seconds = time.perf_counter() - t0
    print(json.dumps({
        "method": args.worker, "sentences": len(sents), "seconds": seconds, "sentences_per_s": len(sents) / seconds,
        "peak_rss_mb": mem.peak / 2**20, "peak_extra_mb": mem.extra / 2**20, "threads": torch.get_num_threads(),
        "scores": scores,
    }))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(REPO / "models" / "gemma3-270m"))
    p.add_argument("--limit", type=int, default=None, help="first N pairs (default: all 1,508)")
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--lm-eval-batch", type=int, default=16)
    p.add_argument("--workdir", type=Path, default=WORK)
    add_output_arguments(p, "causal.json")
    p.add_argument("--worker", choices=["engine", "lm_eval"], help=argparse.SUPPRESS)
    p.add_argument("--sentences", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.output = output_path(args, "causal.json")
    if args.worker:
        run_one(args)
        return
    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"no model at {args.model}: run the models stage (stereolens stage prepare-model) first")
    args.workdir.mkdir(parents=True, exist_ok=True)
    sents = [s for pair in crows_pairs(args.limit) for s in pair]
    f = args.workdir / "sentences.json"
    f.write_text(json.dumps(sents, ensure_ascii=False), encoding="utf-8")
    common = ["--model", args.model, "--sentences", str(f), "--batch-tokens", str(args.batch_tokens),
              "--lm-eval-batch", str(args.lm_eval_batch)]
    results = {}
    for method in ("engine", "lm_eval"):
        print(f"{method}: {len(sents)} sentences ...", flush=True)
        results[method] = r = run_worker(Path(__file__), ["--worker", method, *common])
        print(f"  {r['sentences_per_s']:.2f} sentences/s, peak +{r['peak_extra_mb']:.0f} MiB ({r['seconds']:.1f} s)", flush=True)
    diffs = [abs(a - b) for a, b in zip(results["engine"]["scores"], results["lm_eval"]["scores"])]
    summary = {
        "benchmark": "causal sentence log-likelihood (benchmarks/causal.py)",
        "model": args.model,
        "data": f"CrowS-Pairs, first {len(sents) // 2} pairs, both sentences, empty context (BOS)",
        "conditions": {**machine(), "batch_tokens": args.batch_tokens, "lm_eval_batch_size": args.lm_eval_batch,
                       "note": "shared 2-core machine: other processes may have been running; compare ratios, not absolute speeds"},
        "methods": {k: {kk: vv for kk, vv in v.items() if kk != "scores"} for k, v in results.items()},
        "speedup_vs_lm_eval": results["engine"]["sentences_per_s"] / results["lm_eval"]["sentences_per_s"],
        "max_abs_diff_vs_lm_eval": max(diffs),
        "same_pct_stereotype": sum(
            (results["engine"]["scores"][2 * i] > results["engine"]["scores"][2 * i + 1])
            == (results["lm_eval"]["scores"][2 * i] > results["lm_eval"]["scores"][2 * i + 1])
            for i in range(len(sents) // 2)
        ) / max(1, len(sents) // 2),
        "goal": {"speedup_vs_lm_eval": 1.5},
    }
    sys.path.insert(0, str(REPO / "src"))
    from stereolens.io import write_json

    write_json(args.output, summary)
    print(json.dumps({k: summary[k] for k in ("speedup_vs_lm_eval", "max_abs_diff_vs_lm_eval", "same_pct_stereotype")}, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
