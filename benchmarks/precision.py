"""Reduced precision: the scoring engine in bfloat16 against float32, speed and agreement.

Scores both sentences of the first ``--pairs`` CrowS-Pairs pairs with one model loaded
twice, in float32 (the default) and in bfloat16, three ways:

- ``float32``: the default engine;
- ``bf16``: the model in bfloat16, the vocabulary normaliser (logsumexp) too;
- ``bf16_fp32_normaliser``: the model in bfloat16, the normaliser widened to float32
  (:func:`stereolens.scoring.projection.float32_normaliser`), what ``dtype: bfloat16``
  runs;
- ``bf16_fp32_prefix``: ``bf16``, but the targets predicted from at most
  ``VERIFY_FLOAT32_PREFIX`` tokens scored by the float32 model (causal only): the fast pass
  of the verify mode;
- ``bf16_verify_fp32``: what ``dtype: bfloat16`` with ``verify: fp32`` runs
  (:func:`stereolens.scoring.verified.verify_decisions`): that fast pass, then a
  calibration sample and every pair within the error bound of a tie rescored with the
  float32 model (loaded once beside it, as the mode keeps it).  Its decisions must all be
  float32's; the share rescored and the error model (the sample's per-token rate against the
  whole set's, the margin the safety factor leaves) are reported.

The methods take turns (``_common.take_turns``: a warm-up call each, then ``--rounds``
rounds, order rotated and reversed); the figure is the median of the per-round ratios.
The values compared are the pair decisions (which sentence of a pair scores higher), so
``values_equal`` means no decision flipped; the largest score difference and the share
of flipped decisions are reported beside it.  Causal (default Gemma 3 270M) and, with
``--masked-model``, masked PLL-word-l2r.  Writes ``benchmarks/out/precision.json``
(``--record``: the tracked ``benchmarks/results/precision.json``).

    python benchmarks/precision.py --pairs 200 --rounds 2
    python benchmarks/precision.py --pairs 1508 --rounds 2 --methods float32,bf16_verify_fp32 --record
    python benchmarks/precision.py --pairs 30 --masked-model /tmp/stereolens-bench-pll/bert-base-random-119547
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (REPO, add_output_arguments, crows_pairs, describe, machine, model_record, output_path,  # noqa: E402
                     take_turns)


METHODS = ("float32", "bf16", "bf16_fp32_normaliser", "bf16_fp32_prefix", "bf16_verify_fp32")


def compare(model_dir: str, kind: str, metric: str, pairs: list[tuple[str, str]], rounds: int,
            batch_tokens: int, methods: tuple[str, ...] = METHODS) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from stereolens.models.base import FLOAT32_PREFIX_ATTR, VERIFY_FLOAT32_PREFIX
    from stereolens.scoring import score_sentences
    from stereolens.scoring.access import split_head
    from stereolens.scoring.projection import float32_normaliser
    from stereolens.scoring.types import SentenceScore
    from stereolens.scoring.verified import calibration_sample, error_rate, margin_error_rate, verify_decisions

    auto = AutoModelForCausalLM if kind == "causal" else AutoModelForMaskedLM
    tok = AutoTokenizer.from_pretrained(model_dir)
    full = auto.from_pretrained(model_dir, dtype=torch.float32).eval()
    half = auto.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    sents = [s for pair in pairs for s in pair]
    probe = tok(sents[0])["input_ids"]
    bh = split_head(half, kind, probe)
    # split_head gives a half-precision model the float32 normaliser; "bf16" turns the widening off
    projections = {"bf16": replace(bh.projection, widen=False), "bf16_fp32_normaliser": float32_normaliser(bh.projection),
                   "bf16_fp32_prefix": replace(bh.projection, widen=False),
                   "bf16_verify_fp32": replace(bh.projection, widen=False)}
    # the verify mode's fast pass (models/hf.py sets this on a model loaded with model.verify)
    float32_prefix = (VERIFY_FLOAT32_PREFIX, lambda: full)
    scores: dict[str, list[float]] = {}
    n_tokens: dict[str, list[int]] = {}
    verified: dict[str, object] = {}

    def score_groups(model, groups: list[int]) -> list[list[SentenceScore]]:
        got = score_sentences(model, tok, [s for g in groups for s in pairs[g]], metric, batch_tokens=batch_tokens)
        return [got[2 * k: 2 * k + 2] for k in range(len(groups))]

    def method(name: str):
        model = full if name == "float32" else half

        def run() -> list[bool]:
            if name != "float32":
                bh.projection = projections[name]
            if name in ("bf16_fp32_prefix", "bf16_verify_fp32"):
                setattr(half, FLOAT32_PREFIX_ATTR, float32_prefix)
            try:
                if name == "bf16_verify_fp32":
                    result = verify_decisions(score_groups, half, full, len(pairs))
                    verified[name] = result
                    got = [s for g in result.scores for s in g]
                else:
                    got = score_sentences(model, tok, sents, metric, batch_tokens=batch_tokens)
            finally:
                if hasattr(half, FLOAT32_PREFIX_ATTR):
                    delattr(half, FLOAT32_PREFIX_ATTR)
            scores[name], n_tokens[name] = [s.logprob for s in got], [s.n_tokens for s in got]
            return [scores[name][2 * i] > scores[name][2 * i + 1] for i in range(len(pairs))]
        return run

    timed = take_turns({name: method(name) for name in methods}, rounds, baseline="float32")
    decisions = timed.pop("values")
    per_variant = {}
    for name in [m for m in methods if m != "float32"]:
        diffs = [abs(a - b) for a, b in zip(scores[name], scores["float32"])]
        margins = [abs(scores["float32"][2 * i] - scores["float32"][2 * i + 1]) for i in range(len(pairs))]
        flipped = [i for i, (a, b) in enumerate(zip(decisions[name], decisions["float32"])) if a != b]
        per_variant[name] = {
            "speedup_over_float32": 1 / timed["median_ratio_to_float32"][name],
            "speedup_range": sorted(1 / r for r in timed["ratio_range"][name]),
            "max_abs_score_difference": max(diffs),
            "mean_abs_score_difference": sum(diffs) / len(diffs),
            "flipped_decisions": len(flipped),
            "flipped_share": len(flipped) / len(pairs),
            "flipped_pairs_float32_margin": [margins[i] for i in flipped],
            "smallest_float32_margin": min(margins),
        }
        if name in verified:
            v = verified[name]
            per_variant[name].update({
                "share_rescored": sum(p == "fp32" for p in v.precision) / len(pairs),
                "rescored_near_boundary": len(v.rescored), "calibration_pairs": len(v.calibration),
                "error_rate_per_token": v.error_model.rate, "safety_factor": v.error_model.safety,
                "last_call_seconds": dict(zip(("bf16_pass", "fp32_calibration", "fp32_rescoring"), v.seconds))})
    for fast in ("bf16", "bf16_fp32_prefix"):
        if fast not in scores:
            continue
        # the error model checked on the whole set: the calibration sample's largest per-token error against the
        # set's; the safety factor must exceed their ratio for no score to leave its bound
        full_set = [SentenceScore(a, n, False) for a, n in zip(scores[fast], n_tokens["float32"])]
        exact = [SentenceScore(a, n, False) for a, n in zip(scores["float32"], n_tokens["float32"])]
        sample = [i for g in calibration_sample(len(pairs)) for i in (2 * g, 2 * g + 1)]
        set_rate, sample_rate = error_rate(full_set, exact), error_rate([full_set[i] for i in sample], [exact[i] for i in sample])
        # what the mode calibrates: the margin error per token of the pair, on the sample and on the whole set
        half_groups = [full_set[2 * g: 2 * g + 2] for g in range(len(pairs))]
        exact_groups = [exact[2 * g: 2 * g + 2] for g in range(len(pairs))]
        drawn = calibration_sample(len(pairs))
        set_margin = margin_error_rate(half_groups, exact_groups)
        sample_margin = margin_error_rate([half_groups[g] for g in drawn], [exact_groups[g] for g in drawn])
        # "error_model": of bf16 throughout (the key recorded before the float32 prefix existed)
        per_variant["error_model" if fast == "bf16" else f"error_model_{fast}"] = {
            "set_margin_rate_per_token": set_margin, "sample_margin_rate_per_token": sample_margin,
            "set_over_sample_margin": set_margin / sample_margin if sample_margin else None,
            "set_rate_per_token": set_rate, "sample_rate_per_token": sample_rate,
            "set_over_sample": set_rate / sample_rate if sample_rate else None,
            # the smallest factor on the sample's margin rate under which every flipped pair would have been rescored
            "factor_needed_for_flips": max(
                [abs(scores[fast][2 * i] - scores[fast][2 * i + 1]) / (sample_margin * (
                    n_tokens["float32"][2 * i] + n_tokens["float32"][2 * i + 1])) for i in range(len(pairs))
                 if decisions[fast][i] != decisions["float32"][i]] or [0.0]) if sample_margin else None}
    print(f"{kind} ({metric}): {describe(timed, 'float32')}")
    for name, v in per_variant.items():
        if name.startswith("error_model"):
            print(f"  {name.removeprefix('error_model').removeprefix('_') or 'bf16'} margin error per token: sample {v['sample_margin_rate_per_token']:.3g}, whole set "
                  f"{v['set_margin_rate_per_token']:.3g} (ratio {v['set_over_sample_margin'] or float('nan'):.2f}: "
                  f"the safety factor must exceed it)")
            print(f"  error model: sample rate {v['sample_rate_per_token']:.3g}, whole set {v['set_rate_per_token']:.3g} "
                  f"nats/token (ratio {v['set_over_sample'] or float('nan'):.2f}); factor needed for its flips "
                  f"{v['factor_needed_for_flips'] or 0:.2f}")
            continue
        if "share_rescored" in v:
            print(f"  {name}: {v['share_rescored']:.1%} of pairs in float32 (rate {v['error_rate_per_token']:.3g} x "
                  f"{v['safety_factor']:g}); last call's passes: {v['last_call_seconds']}")
        print(f"  {name}: {v['speedup_over_float32']:.2f}x float32's speed, largest score difference "
              f"{v['max_abs_score_difference']:.3g} nats, {v['flipped_decisions']} of {len(pairs)} decisions flipped")
    return {"model": model_record(model_dir), "metric": metric, "pairs": len(pairs), "sentences": len(sents),
            "variants": per_variant, "timing": timed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(REPO / "models" / "gemma3-270m"), help="causal model directory")
    p.add_argument("--masked-model", default=None, help="also compare a masked LM (PLL-word-l2r)")
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--masked-pairs", type=int, default=None, help="pairs for the masked LM (default: --pairs)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, float32 first (of {', '.join(METHODS)})")
    add_output_arguments(p, "precision.json")
    args = p.parse_args()
    args.output = output_path(args, "precision.json")
    methods = tuple(args.methods.split(","))
    if methods[0] != "float32" or not set(methods) <= set(METHODS):
        sys.exit(f"--methods must start with float32 and name only {', '.join(METHODS)}")
    sys.path.insert(0, str(REPO / "src"))
    from stereolens.io import write_json

    result = {"benchmark": "bfloat16 against float32 (benchmarks/precision.py)", "data": "CrowS-Pairs, first pairs",
              "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    from stereolens.models.hardware import native_support

    native, why = native_support("bfloat16", "cpu")
    if not native:
        # emulated bfloat16 runs hundreds of times slower than float32: timing it measures the emulation
        result["skipped"] = f"bfloat16 variants not run: {why}"
        write_json(args.output, result)
        print(f"{result['skipped']}; wrote {args.output}")
        return 0
    equal = True
    if args.model != "none":
        if not (Path(args.model) / "config.json").exists():
            sys.exit(f"no model at {args.model}: run the models stage first, or pass --model none")
        result["causal"] = compare(args.model, "causal", "causal", crows_pairs(args.pairs), args.rounds, args.batch_tokens,
                                  methods)
        equal &= result["causal"]["timing"]["values_equal"]
    if args.masked_model:
        result["masked"] = compare(args.masked_model, "masked", "pll_word_l2r", crows_pairs(args.masked_pairs or args.pairs),
                                   args.rounds, args.batch_tokens, methods)
        equal &= result["masked"]["timing"]["values_equal"]
    write_json(args.output, result)
    print(f"wrote {args.output}")
    # values_equal: no pair decision flipped in any variant
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
