"""Benchmark: masked-LM pseudo-log-likelihood scoring, engine vs naive loop vs minicons.

A BERT-base-sized masked LM (12 layers, hidden 768, 12 heads) with mBERT's
vocabulary size (119,547) and random weights (the compute is what is
measured), with a WordPiece tokenizer trained here on CrowS-Pairs, scores the
first N CrowS-Pairs pairs (both sentences) with PLL-word-l2r three ways:

- ``engine``: :func:`stereolens.scoring.score_sentences`;
- ``naive``: one masked copy per forward pass through the whole model, as the
  CrowS-Pairs reference script does;
- ``minicons``: ``MaskedLMScorer.sequence_score(..., PLL_metric="within_word_l2r")``,
  at each of several sentences-per-call settings (default 1 and 4); the
  ratio is taken against the fastest, since minicons pads the copies of the
  sentences in one call to the longest of them.

The model is loaded once and the methods take turns in one process
(``_common.take_turns``: a warm-up call each, then ``--rounds`` rounds, order
rotated and reversed), so they share whatever load the machine has: engine and
minicons on ``--pairs`` pairs, engine and the naive loop (slow) on the first
``--naive-pairs``.  The figure is the median of the per-round ratios, with their
range and every round's load average; the scores must agree within ``--tolerance``.
``--long`` measures the engine's peak memory on long sentences, each length in a
fresh process.

    .venv/bin/python benchmarks/pll.py --pairs 50 --naive-pairs 10 --rounds 3
    .venv/bin/python benchmarks/pll.py --minicons-batch 1 4 16   # more minicons settings
    .venv/bin/python benchmarks/pll.py --long 60 120 240          # engine memory by sentence length
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    REPO, PeakRSS, add_output_arguments, crows_pairs, describe, machine, output_path, run_worker, take_turns,
)

VOCAB_SIZE = 119_547
WORK = Path("/tmp/stereolens-bench-pll")


def build_model(model_dir: Path, tokenizer_vocab: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    if (model_dir / "config.json").exists():
        return
    texts = [s for pair in crows_pairs(None) for s in pair]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # a small vocabulary splits words into pieces about as often as mBERT does on English
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=tokenizer_vocab, special_tokens=specials))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=512,
    )
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB_SIZE, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512, pad_token_id=fast.pad_token_id)
    BertForMaskedLM(config).eval().save_pretrained(model_dir)
    fast.save_pretrained(model_dir)


def flop_model(model_dir: Path, sents: list[str], metric: str, batch_tokens: int, minicons_batch: int) -> dict:
    """Multiply-adds per scored token for each method, from the model's dimensions and the
    positions each method actually computes, padding included.

    Every scored token costs one encoder pass over its masked copy.  The engine
    runs its own batch plan (on a CPU one sentence length per pass, so no
    padding; ``batch_tokens`` is one worker's share), the first layer's
    queries, keys and values once per distinct (position, token) of a pass,
    the last layer at the scored position only (no keys or values formed: two
    vector-matrix products per row and two weighted sums over positions per
    head), and the MLM head at that position only.  The naive loop runs one
    unpadded copy per pass and projects every position; minicons pads the
    copies of ``minicons_batch`` sentences to the longest of them and projects
    every position.
    """
    from transformers import AutoConfig, AutoTokenizer

    from stereolens.scoring import masked
    from stereolens.scoring.batching import plan_batches
    from stereolens.scoring.encoding import encode_masked

    c = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    h, f, n_layers, v, heads = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size, c.num_attention_heads
    head = h * h + h * v
    layer_tok = 4 * h * h + 2 * h * f

    def encoder(n_rows: int, width: int) -> int:
        return n_rows * n_layers * (width * layer_tok + 2 * width * width * h)

    make = masked.pll_item if metric == "pll" else masked.pll_word_l2r_item
    items = [make(encode_masked(tok, s, i, limit=None, truncate=False, word_ids=True)) for i, s in enumerate(sents)]
    lengths = [len(it.enc.ids) for it in items]
    rows = [len(it.targets) for it in items]
    copies = sum(rows)
    engine = 0
    for batch in plan_batches(lengths, rows, batch_tokens, pad=False):
        width, n = max(lengths[s.item] for s in batch), sum(s.stop - s.start for s in batch)
        distinct: set[tuple[int, int]] = set()
        for s in batch:
            it = items[s.item]
            for j in range(s.start, s.stop):
                hidden = set(it.mask_sets[j])
                distinct.update((p, tok.mask_token_id if p in hidden else t) for p, t in enumerate(it.enc.ids))
        attention = 2 * width * width * h
        first = 3 * h * h * len(distinct) + n * (width * (h * h + 2 * h * f) + attention)
        middle = (n_layers - 2) * n * (width * layer_tok + attention)
        last = n * (4 * h * h + 2 * h * f + 2 * heads * width * h)
        engine += first + middle + last + n * head
    naive = sum(encoder(r, n) + r * n * head for r, n in zip(rows, lengths))
    minicons = 0
    for i in range(0, len(sents), minicons_batch):
        width, n = max(lengths[i : i + minicons_batch]), sum(rows[i : i + minicons_batch])
        minicons += encoder(n, width) + n * width * head
    return {
        "engine_per_token": engine / copies, "naive_per_token": naive / copies, "minicons_per_token": minicons / copies,
        "ratio_naive": naive / engine, "ratio_minicons": minicons / engine,
        "note": "work saved alone: the speedup an exact engine reaches at equal multiply-add throughput; "
                "more comes only from running its multiply-adds faster (bigger, unpadded passes side by side)",
    }


# ---------------------------------------------------------------- workers (one process each)


def _load(model_dir: str):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    torch.manual_seed(0)
    return AutoModelForMaskedLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)


def worker_engine(model, tok, sents, args):
    from stereolens.scoring import score_sentences

    return [s.logprob for s in score_sentences(model, tok, sents, args.metric, batch_tokens=args.batch_tokens)]


def worker_naive(model, tok, sents, args):
    import torch

    out = []
    with torch.inference_mode():
        for s in sents:
            enc = tok(s, return_special_tokens_mask=True)
            ids, special, wids = enc["input_ids"], enc["special_tokens_mask"], enc.word_ids()
            total = 0.0
            for p in range(len(ids)):
                if special[p]:
                    continue
                x = torch.tensor([ids])
                x[0, p] = tok.mask_token_id
                if args.metric == "pll_word_l2r":
                    for j in range(p + 1, len(ids)):
                        if not special[j] and wids[j] == wids[p]:
                            x[0, j] = tok.mask_token_id
                logits = model(input_ids=x).logits[0, p]
                total += torch.log_softmax(logits, -1)[ids[p]].item()
            out.append(total)
    return out


def minicons_scorer(model, tok, metric: str, per_call: int):
    """minicons' PLL scorer on the loaded model: a function of the sentences."""
    from minicons.scorer import MaskedLMScorer

    if not hasattr(tok, "batch_encode_plus"):
        tok.batch_encode_plus = tok.__call__  # minicons 0.3.39 calls what transformers 5 removed
    scorer = MaskedLMScorer(model, "cpu", tokenizer=tok)
    name = "within_word_l2r" if metric == "pll_word_l2r" else "original"

    def score(sents: list[str]) -> list[float]:
        out: list[float] = []
        for i in range(0, len(sents), per_call):
            out += scorer.sequence_score(sents[i : i + per_call], PLL_metric=name, reduction=lambda x: x.sum(0).item())
        return out
    return score


def run_one(args) -> None:
    """One engine run in this process, for the --long memory check (peak memory is then its own)."""
    import torch

    sents = json.loads(Path(args.sentences).read_text(encoding="utf-8"))
    model, tok = _load(args.model_dir)
    worker_engine(model, tok, ["The cat sat on the mat."], args)  # first-call setup (scoring-path check) outside the timing
    n_tokens = sum(sum(1 for m in tok(s, return_special_tokens_mask=True)["special_tokens_mask"] if not m) for s in sents)
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        worker_engine(model, tok, sents, args)
        seconds = time.perf_counter() - t0
    print(json.dumps({"method": "engine", "sentences": len(sents), "scored_tokens": n_tokens, "seconds": seconds,
                      "peak_extra_mb": mem.extra / 2**20, "threads": torch.get_num_threads()}))


# ---------------------------------------------------------------- driver


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=50, help="CrowS-Pairs pairs for engine and minicons (default 50)")
    p.add_argument("--naive-pairs", type=int, default=10, help="first pairs for engine and the naive loop (default 10)")
    p.add_argument("--metric", choices=["pll", "pll_word_l2r"], default="pll_word_l2r")
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--minicons-batch", type=int, nargs="+", default=[1, 4],
                   help="sentences per minicons call; each is measured and the fastest is the reference (default: 1 4)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up")
    p.add_argument("--tolerance", type=float, default=1e-3, help="largest score difference counted as equal (nats)")
    p.add_argument("--tokenizer-vocab", type=int, default=3000)
    p.add_argument("--long", type=int, nargs="*", default=None, metavar="TOKENS",
                   help="also measure engine peak memory on one sentence of each of these lengths (e.g. --long 60 120 240)")
    p.add_argument("--long-budget", type=int, default=2048, help="--batch-tokens for the --long memory check")
    p.add_argument("--workdir", type=Path, default=WORK)
    add_output_arguments(p, "pll.json")
    p.add_argument("--worker", choices=["engine"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--sentences", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.output = output_path(args, "pll.json")
    if args.worker:
        run_one(args)
        return 0

    model_dir = args.workdir / "bert-base-random-119547"
    args.workdir.mkdir(parents=True, exist_ok=True)
    build_model(model_dir, args.tokenizer_vocab)
    sys.path.insert(0, str(REPO / "src"))
    import torch

    from stereolens.scoring.batching import cpu_workers

    model, tok = _load(str(model_dir))
    sents = [s for pair in crows_pairs(args.pairs) for s in pair]
    naive_sents = sents[: 2 * args.naive_pairs]

    def n_scored(texts: list[str]) -> int:
        return sum(sum(1 for m in tok(s, return_special_tokens_mask=True)["special_tokens_mask"] if not m) for s in texts)

    minicons = {f"minicons_{k}": minicons_scorer(model, tok, args.metric, k) for k in args.minicons_batch}
    methods = {"engine": lambda: worker_engine(model, tok, sents, args),
               **{name: (lambda f=f: f(sents)) for name, f in minicons.items()}}
    print(f"engine and minicons, {len(sents)} sentences, {args.rounds} rounds ...", flush=True)
    vs_minicons = take_turns(methods, args.rounds, baseline="engine", tolerance=args.tolerance)
    vs_minicons.pop("values")
    print(describe(vs_minicons, "engine"), flush=True)
    print(f"engine and the naive loop, {len(naive_sents)} sentences, {args.rounds} rounds ...", flush=True)
    vs_naive = take_turns({"engine": lambda: worker_engine(model, tok, naive_sents, args),
                           "naive": lambda: worker_naive(model, tok, naive_sents, args)},
                          args.rounds, baseline="engine", tolerance=args.tolerance)
    vs_naive.pop("values")
    print(describe(vs_naive, "engine"), flush=True)
    ratios = vs_minicons["median_ratio_to_engine"]
    fastest = min(args.minicons_batch, key=lambda k: ratios[f"minicons_{k}"])

    long_memory = None
    if args.long:
        # memory is bounded by the token budget, not by sentence length: each length gets
        # enough sentences to fill at least two forward passes of --long-budget tokens
        stream = tok(" ".join(s for pair in crows_pairs(None)[:400] for s in pair), add_special_tokens=False)["input_ids"]
        long_memory = {"batch_tokens": args.long_budget}
        common = ["--metric", args.metric, "--batch-tokens", str(args.long_budget), "--model-dir", str(model_dir)]
        for target in args.long:
            n_sent = -(-2 * args.long_budget // (target * (target + 2)))
            texts = [tok.decode(stream[i * target : (i + 1) * target]) for i in range(n_sent)]
            f = args.workdir / f"sentences-long{target}.json"
            f.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
            r = run_worker(Path(__file__), ["--worker", "engine", "--sentences", str(f), *common])
            long_memory[str(target)] = {"sentences": n_sent, "scored_tokens": r["scored_tokens"],
                                        "peak_extra_mb": r["peak_extra_mb"], "seconds": r["seconds"]}
            print(f"engine, {n_sent} sentences of ~{target} tokens: peak +{r['peak_extra_mb']:.0f} MiB", flush=True)

    workers = cpu_workers(torch.device("cpu"))
    # the engine's passes side by side share its token budget
    summary_flops = flop_model(model_dir, sents, args.metric, args.batch_tokens // workers, fastest)
    seconds = vs_minicons["median_seconds"]
    summary = {
        "benchmark": "masked-LM PLL scoring (benchmarks/pll.py)",
        "metric": args.metric,
        "model": "BertForMaskedLM, 12 layers, hidden 768, 12 heads, vocab 119,547, random weights (seed 0)",
        "tokenizer": f"WordPiece trained on CrowS-Pairs, {args.tokenizer_vocab} pieces",
        "data": f"CrowS-Pairs, first {args.pairs} pairs (naive loop: first {args.naive_pairs}), both sentences",
        "conditions": {**machine(), "batch_tokens": args.batch_tokens, "engine_workers": workers,
                       "rounds": args.rounds, "minicons_sentences_per_call": fastest,
                       "load_average_1min_range": [min(vs_minicons["load_average_1min_range"][0], vs_naive["load_average_1min_range"][0]),
                                                   max(vs_minicons["load_average_1min_range"][1], vs_naive["load_average_1min_range"][1])],
                       "note": "methods take turns in one process; each ratio is the median of the rounds'"},
        "scored_tokens": n_scored(sents),
        "median_seconds": seconds,
        "scored_tokens_per_s": {name: n_scored(sents) / t for name, t in seconds.items()},
        # "N x" = the other method's time over the engine's on the same sentences
        "speedup_vs_minicons_by_sentences_per_call": {str(k): ratios[f"minicons_{k}"] for k in args.minicons_batch},
        "speedup_vs_minicons": ratios[f"minicons_{fastest}"],
        "speedup_vs_minicons_range": vs_minicons["ratio_range"][f"minicons_{fastest}"],
        "speedup_vs_naive": vs_naive["median_ratio_to_engine"]["naive"],
        "speedup_vs_naive_range": vs_naive["ratio_range"]["naive"],
        "max_abs_diff_vs_minicons": vs_minicons["agreement"]["difference_to_engine"][f"minicons_{fastest}"],
        "max_abs_diff_vs_naive": vs_naive["agreement"]["difference_to_engine"]["naive"],
        "values_equal": vs_minicons["values_equal"] and vs_naive["values_equal"],
        "timing_vs_minicons": vs_minicons,
        "timing_vs_naive": vs_naive,
        "engine_peak_extra_mb_by_sentence_tokens": long_memory,
        "multiply_adds": summary_flops,
        "goals": {"speedup_vs_naive": 5.0, "speedup_vs_minicons": 3.0},
        "date": time.strftime("%Y-%m-%d"),
    }
    from stereolens.io import write_json

    write_json(args.output, summary)
    print(json.dumps({k: summary[k] for k in ("speedup_vs_naive", "speedup_vs_minicons", "speedup_vs_minicons_range",
                                               "max_abs_diff_vs_naive", "max_abs_diff_vs_minicons", "values_equal")}, indent=2))
    print(f"multiply-add ratios: naive / engine {summary_flops['ratio_naive']:.2f}, minicons / engine {summary_flops['ratio_minicons']:.2f}")
    print(f"wrote {args.output}")
    return 0 if summary["values_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
