"""Where the scoring engine's time goes: one cProfile'd run of the causal or PLL engine, broken down.

Scores the first ``--pairs`` CrowS-Pairs pairs (both sentences) once untimed (warm-up) and once under
cProfile, and prints the breakdown by stage of the engine: encoding (tokenisation), scheduling
(batching plan and input tensors), the network body (the transformer's forward up to the last hidden
states), the vocabulary projection (target logits and the blockwise logsumexp), and what is left
(Python overhead of the engine, result handling), then the main thread's 15 most expensive functions; writes ``benchmarks/out/profile.json``
(``--record``: the tracked ``benchmarks/results/profile.json``).  It compares nothing: one method, timed.

    python benchmarks/profile_scoring.py --model models/gemma3-270m --metric causal --pairs 100
    python benchmarks/profile_scoring.py --model /tmp/stereolens-bench-pll/bert-base-random-119547 \
        --kind masked --metric pll_word_l2r --pairs 30
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, add_output_arguments, crows_pairs, machine, model_record, output_path  # noqa: E402

def instrument() -> dict[str, float]:
    """Wrap the engine's own functions, by stage, with timers; returns the seconds per stage as they add up.

    The engine runs its passes on worker threads (``batching.run_in_workers``), which cProfile does not
    follow, so each stage is timed where it is called, on whatever thread, outermost call only: with two
    masked workers side by side the stages add up to thread-seconds, more than the wall time.
    """
    import threading

    from stereolens.scoring import access, causal, engine, masked, projection

    seconds: dict[str, float] = {}
    lock, depth = threading.Lock(), threading.local()
    stages = {
        "encoding (tokenisation)": [(engine, "encode_causal"), (engine, "encode_masked"), (masked, "pll_word_l2r_item"),
                                    (masked, "pll_item")],
        "scheduling and input tensors": [(causal, "plan_batches"), (causal, "longest_first"), (causal, "_inputs"),
                                         (masked, "plan_batches"), (masked, "longest_first"), (masked, "_copies")],
        "network body (forward)": [(access.BodyHead, "rows"), (access.BodyHead, "body")],
        "vocabulary projection": [(projection.VocabProjection, "logsumexp"), (projection.VocabProjection, "target_logits"),
                                  (projection.VocabProjection, "prepare")],
    }
    for stage, targets in stages.items():
        seconds[stage] = 0.0
        for owner, name in targets:
            if not hasattr(owner, name):
                continue
            original = getattr(owner, name)

            def timed(*a, __original=original, __stage=stage, **k):
                level = getattr(depth, __stage, 0)
                setattr(depth, __stage, level + 1)
                t0 = time.perf_counter()
                try:
                    return __original(*a, **k)
                finally:
                    setattr(depth, __stage, level)
                    if level == 0:
                        with lock:
                            seconds[__stage] += time.perf_counter() - t0
            setattr(owner, name, timed)
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--kind", choices=("causal", "masked"), default="causal")
    p.add_argument("--metric", default="causal")
    p.add_argument("--pairs", type=int, default=100)
    p.add_argument("--batch-tokens", type=int, default=8192)
    add_output_arguments(p, "profile.json")
    args = p.parse_args()
    args.output = output_path(args, "profile.json")
    sys.path.insert(0, str(REPO / "src"))
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from stereolens.scoring import score_sentences

    auto = AutoModelForCausalLM if args.kind == "causal" else AutoModelForMaskedLM
    tok = AutoTokenizer.from_pretrained(args.model)
    model = auto.from_pretrained(args.model, dtype=torch.float32).eval()
    sents = [s for pair in crows_pairs(args.pairs) for s in pair]
    score_sentences(model, tok, sents, args.metric, batch_tokens=args.batch_tokens)  # warm-up
    start = time.perf_counter()
    score_sentences(model, tok, sents, args.metric, batch_tokens=args.batch_tokens)
    bare = time.perf_counter() - start
    parts = instrument()
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    score_sentences(model, tok, sents, args.metric, batch_tokens=args.batch_tokens)
    profiler.disable()
    wall = time.perf_counter() - start
    print(f"{args.metric} on {len(sents)} sentences: {bare:.2f} s bare, {wall:.2f} s timed by stage under cProfile "
          f"(torch threads {torch.get_num_threads()})")
    for stage, secs in parts.items():
        print(f"  {stage:30s} {secs:7.2f} s  {secs / wall:6.1%} of the wall time")
    rest = wall - sum(parts.values())
    print(f"  {'the rest (engine, Python)':30s} {rest:7.2f} s  {rest / wall:6.1%} (negative: stages overlapped on workers)")
    # the main thread's own functions (the workers' are in the stages above)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    from stereolens.io import write_json

    write_json(args.output, {"benchmark": "the engine's time by stage (benchmarks/profile_scoring.py)",
                             "machine": machine(), "date": time.strftime("%Y-%m-%d"), "model": model_record(args.model),
                             "metric": args.metric, "sentences": len(sents), "seconds_bare": bare,
                             "seconds_instrumented": wall, "stages_seconds": parts, "rest_seconds": rest})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
