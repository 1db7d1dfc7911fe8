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
  sentences in one call to the longest of them (4 per call ran 5-11%
  slower than 1 per call here).

Each runs in its own process (peak memory is its own), on the same
sentences; the results must agree.  Prints and writes sentences per second,
peak memory above the loaded model and the ratios as JSON.

    .venv/bin/python benchmarks/pll.py --pairs 300
    .venv/bin/python benchmarks/pll.py --pairs 300 --naive-pairs 20 --minicons-pairs 60   # subsets for the slow ones
    .venv/bin/python benchmarks/pll.py --minicons-batch 1 4 16   # more minicons settings
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, PeakRSS, add_output_arguments, crows_pairs, machine, output_path, run_worker  # noqa: E402

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


def worker_minicons(model, tok, sents, args):
    from minicons.scorer import MaskedLMScorer

    if not hasattr(tok, "batch_encode_plus"):
        tok.batch_encode_plus = tok.__call__  # minicons 0.3.39 calls what transformers 5 removed
    scorer = MaskedLMScorer(model, "cpu", tokenizer=tok)
    metric = "within_word_l2r" if args.metric == "pll_word_l2r" else "original"
    out = []
    per_call = args.minicons_batch[0]
    for i in range(0, len(sents), per_call):
        out += scorer.sequence_score(sents[i : i + per_call], PLL_metric=metric, reduction=lambda x: x.sum(0).item())
    return out


def run_one(args) -> None:
    import torch

    from stereolens.scoring.batching import cpu_workers

    sents = json.loads(Path(args.sentences).read_text(encoding="utf-8"))
    model, tok = _load(args.model_dir)
    fn = {"engine": worker_engine, "naive": worker_naive, "minicons": worker_minicons}[args.worker]
    if args.worker == "engine":
        fn(model, tok, ["The cat sat on the mat."], args)  # first-call setup (scoring-path check) outside the timing
    n_tokens = sum(sum(1 for m in tok(s, return_special_tokens_mask=True)["special_tokens_mask"] if not m) for s in sents)
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        scores = fn(model, tok, sents, args)
        seconds = time.perf_counter() - t0
    print(json.dumps({
        "method": args.worker, "sentences": len(sents), "scored_tokens": n_tokens, "seconds": seconds,
        "sentences_per_s": len(sents) / seconds, "scored_tokens_per_s": n_tokens / seconds, "peak_rss_mb": mem.peak / 2**20, "peak_extra_mb": mem.extra / 2**20,
        "threads": torch.get_num_threads(), "scores": scores,
        **({"workers": cpu_workers(torch.device("cpu"))} if args.worker == "engine" else {}),
    }))


# ---------------------------------------------------------------- driver


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=300, help="CrowS-Pairs pairs for the engine (default 300)")
    p.add_argument("--naive-pairs", type=int, default=None, help="first pairs for the naive loop (default: --pairs)")
    p.add_argument("--minicons-pairs", type=int, default=None, help="first pairs for minicons (default: --pairs)")
    p.add_argument("--metric", choices=["pll", "pll_word_l2r"], default="pll_word_l2r")
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--minicons-batch", type=int, nargs="+", default=[1, 4],
                   help="sentences per minicons call; each is measured and the fastest is the reference (default: 1 4)")
    p.add_argument("--tokenizer-vocab", type=int, default=3000)
    p.add_argument("--long", type=int, nargs="*", default=None, metavar="TOKENS",
                   help="also measure engine peak memory on one sentence of each of these lengths (e.g. --long 60 120 240)")
    p.add_argument("--long-budget", type=int, default=2048, help="--batch-tokens for the --long memory check")
    p.add_argument("--workdir", type=Path, default=WORK)
    add_output_arguments(p, "pll.json")
    p.add_argument("--worker", choices=["engine", "naive", "minicons"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--sentences", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.output = output_path(args, "pll.json")
    if args.worker:
        run_one(args)
        return

    model_dir = args.workdir / "bert-base-random-119547"
    args.workdir.mkdir(parents=True, exist_ok=True)
    build_model(model_dir, args.tokenizer_vocab)
    pairs = crows_pairs(args.pairs)
    sents = [s for pair in pairs for s in pair]
    counts = {"engine": len(pairs), "naive": args.naive_pairs or len(pairs), "minicons": args.minicons_pairs or len(pairs)}
    results = {}
    common = ["--metric", args.metric, "--batch-tokens", str(args.batch_tokens), "--model-dir", str(model_dir)]
    minicons_runs = {}
    for method, n in counts.items():
        f = args.workdir / f"sentences-{method}.json"
        f.write_text(json.dumps(sents[: 2 * n], ensure_ascii=False), encoding="utf-8")
        for per_call in args.minicons_batch if method == "minicons" else [args.minicons_batch[0]]:
            label = f"{method} ({per_call} sentences per call)" if method == "minicons" else method
            print(f"{label}: {2 * n} sentences ...", flush=True)
            r = run_worker(Path(__file__), ["--worker", method, "--sentences", str(f), "--minicons-batch", str(per_call), *common])
            print(f"  {r['sentences_per_s']:.2f} sentences/s, peak +{r['peak_extra_mb']:.0f} MiB ({r['seconds']:.1f} s)", flush=True)
            if method == "minicons":
                minicons_runs[per_call] = r
            else:
                results[method] = r
    fastest = max(minicons_runs, key=lambda k: minicons_runs[k]["scored_tokens_per_s"])
    results["minicons"] = minicons_runs[fastest]

    def speedup(other: str) -> float:
        unit = "sentences_per_s" if len(set(counts.values())) == 1 else "scored_tokens_per_s"
        return results["engine"][unit] / results[other][unit]

    def agree(other: str) -> float:
        n = min(len(results[other]["scores"]), len(results["engine"]["scores"]))
        return max(abs(a - b) for a, b in zip(results["engine"]["scores"][:n], results[other]["scores"][:n]))

    long_memory = None
    if args.long:
        # memory is bounded by the token budget, not by sentence length: each length gets
        # enough sentences to fill at least two forward passes of --long-budget tokens
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        stream = tok(" ".join(s for pair in crows_pairs(None)[:400] for s in pair), add_special_tokens=False)["input_ids"]
        long_memory = {"batch_tokens": args.long_budget}
        for target in args.long:
            n_sent = -(-2 * args.long_budget // (target * (target + 2)))
            texts = [tok.decode(stream[i * target : (i + 1) * target]) for i in range(n_sent)]
            f = args.workdir / f"sentences-long{target}.json"
            f.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
            long_args = list(common)
            long_args[long_args.index("--batch-tokens") + 1] = str(args.long_budget)
            r = run_worker(Path(__file__), ["--worker", "engine", "--sentences", str(f), *long_args])
            long_memory[str(target)] = {"sentences": n_sent, "scored_tokens": r["scored_tokens"],
                                        "peak_extra_mb": r["peak_extra_mb"], "seconds": r["seconds"]}
            print(f"engine, {n_sent} sentences of ~{target} tokens: peak +{r['peak_extra_mb']:.0f} MiB", flush=True)

    sys.path.insert(0, str(REPO / "src"))
    # the engine's passes side by side share its token budget
    summary_flops = flop_model(model_dir, sents, args.metric, args.batch_tokens // (results["engine"].get("workers") or 1), fastest)
    summary = {
        "benchmark": "masked-LM PLL scoring (benchmarks/pll.py)",
        "metric": args.metric,
        "model": "BertForMaskedLM, 12 layers, hidden 768, 12 heads, vocab 119,547, random weights (seed 0)",
        "tokenizer": f"WordPiece trained on CrowS-Pairs, {args.tokenizer_vocab} pieces",
        "data": "CrowS-Pairs (first pairs, both sentences)",
        "conditions": {**machine(), "batch_tokens": args.batch_tokens, "engine_workers": results["engine"].get("workers"),
                       "minicons_sentences_per_call": fastest,
                       "note": "shared 2-core machine: other processes may have been running; compare ratios, not absolute speeds"},
        "methods": {k: {kk: vv for kk, vv in v.items() if kk != "scores"} for k, v in results.items()},
        # every minicons setting measured; "minicons" above is the fastest of them
        "minicons_by_sentences_per_call": {
            str(k): {kk: vv for kk, vv in v.items() if kk != "scores"} for k, v in sorted(minicons_runs.items())
        },
        "speedup_vs_minicons_by_sentences_per_call": {
            str(k): results["engine"]["scored_tokens_per_s"] / v["scored_tokens_per_s"] for k, v in sorted(minicons_runs.items())
        },
        # sentences/s when every method scored the same sentences; scored tokens/s otherwise
        "speedup_vs_naive": speedup("naive"),
        "speedup_vs_minicons": speedup("minicons"),
        "speedup_unit": "sentences_per_s" if len(set(counts.values())) == 1 else "scored_tokens_per_s (subsets differ)",
        "max_abs_diff_vs_naive": agree("naive"),
        "max_abs_diff_vs_minicons": agree("minicons"),
        "engine_peak_extra_mb_by_sentence_tokens": long_memory,
        "multiply_adds": summary_flops,
        "goals": {"speedup_vs_naive": 5.0, "speedup_vs_minicons": 3.0},
    }
    from stereolens.io import write_json

    write_json(args.output, summary)
    print(json.dumps({k: summary[k] for k in ("speedup_vs_naive", "speedup_vs_minicons", "max_abs_diff_vs_naive", "max_abs_diff_vs_minicons")}, indent=2))
    print(f"multiply-add ratios: naive / engine {summary_flops['ratio_naive']:.2f}, minicons / engine {summary_flops['ratio_minicons']:.2f}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
