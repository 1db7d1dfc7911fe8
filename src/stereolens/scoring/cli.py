"""``stereolens score pairs|sentences``: score a table of minimal pairs or sentences with one model."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from stereolens.cli_support import get_or_create_subparser
from stereolens.errors import DataError
from stereolens.scoring.types import METRICS


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = get_or_create_subparser(subparsers, "score", help="score sentences or minimal pairs with a language model")

    pairs = sub.add_parser(
        "pairs",
        help="score minimal pairs (columns id,sent_stereo,sent_anti); writes the table and a JSON summary with bias_score",
    )
    _common(pairs)
    pairs.add_argument("--input", required=True, help="CSV with columns id, sent_stereo, sent_anti")
    pairs.add_argument("--output", required=True, help="CSV: the input plus score_stereo, score_anti, ...")
    pairs.add_argument("--summary", help="JSON summary path (default: <output without .csv>.summary.json)")
    pairs.add_argument("--id-column", default="id")
    pairs.add_argument("--stereo-column", default="sent_stereo")
    pairs.add_argument("--anti-column", default="sent_anti")
    pairs.set_defaults(func=_score_pairs)

    sents = sub.add_parser("sentences", help="score single sentences (pll, pll_word_l2r, causal)")
    _common(sents)
    src = sents.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help="CSV with a sentence column (and an id column if present)")
    src.add_argument("--text", action="append", help="a sentence to score (repeatable)")
    sents.add_argument("--column", default="sentence", help="sentence column of --input (default: sentence)")
    sents.add_argument("--id-column", default="id")
    sents.add_argument("--output", help="CSV to write (default: print to stdout)")
    sents.set_defaults(func=_score_sentences)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="Hugging Face model name or local directory")
    p.add_argument("--metric", required=True, choices=METRICS)
    p.add_argument("--truncate", action="store_true", help="cut sentences longer than the model's maximum (reported in the output)")
    p.add_argument("--batch-tokens", type=int, default=None, help="padded tokens per forward pass (default 8192)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None, help="model dtype (default: float32)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    p.add_argument("--per-token", action="store_true", help="also write the scored tokens and their log-probabilities")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the response cache")
    p.add_argument("--cache-dir", default=None, help="response cache directory (default: $STEREOLENS_CACHE_DIR or cache/models)")
    p.add_argument("--progress", action="store_true", help="show a progress bar")


def _model_kind(args: argparse.Namespace) -> str:
    """The model's kind from its config, checked against ``--metric`` before any weights load."""
    from stereolens.scoring.model_kind import check_metric_for_kind, model_kind

    kind = model_kind(args.model)
    check_metric_for_kind(args.metric, kind, args.model)
    return kind


def _load(args: argparse.Namespace, kind: str) -> tuple[Any, Any]:
    from stereolens.models import ModelSpec, ResponseCache, load_model

    cache = ResponseCache(args.cache_dir, enabled=not args.no_cache)
    model = load_model(ModelSpec(name=args.model, kind=kind, dtype=args.dtype, device=args.device), cache=cache)
    return model, cache


def _check_options(args: argparse.Namespace) -> None:
    if args.batch_tokens is not None and args.batch_tokens < 1:
        from stereolens.errors import ConfigError

        raise ConfigError(f"--batch-tokens must be positive, got {args.batch_tokens}")


def _options(args: argparse.Namespace, cache: Any) -> dict[str, Any]:
    from stereolens.scoring.engine import DEFAULT_BATCH_TOKENS

    _check_options(args)
    return dict(
        batch_tokens=args.batch_tokens or DEFAULT_BATCH_TOKENS, truncate=args.truncate, per_token=args.per_token,
        progress=args.progress, cache=cache if not args.no_cache else None,
    )


def _read(path: str, schema: Any, what: str):
    from stereolens.tables import read_table

    # text stays text: "NA", "null" or "None" are sentences, not missing values
    return read_table(path, schema, what=what)


@contextlib.contextmanager
def _located(df, id_column: str, path: str | None):
    """Name the file line of an item the scorers refuse (they know its id, not where it was read)."""
    try:
        yield
    except DataError as exc:
        item_id = getattr(exc, "item_id", None)
        ids = df[id_column].astype(str).tolist()
        if path is None or item_id is None or str(item_id) not in ids:
            raise
        raise DataError(f"{path} line {ids.index(str(item_id)) + 2} (id {item_id!r}): {exc.detail}") from None


def _check_rows(df, id_column: str, columns: list[str]) -> None:
    """Empty text fails before the model is loaded (the scorers check again, with the same message)."""
    from stereolens.scoring.encoding import check_text

    for column in columns:
        for rid, text in zip(df[id_column], df[column]):
            check_text(text, rid, f"sentence in column {column}")


def summary_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(f"{output.stem}.summary.json")


def _score_pairs(args: argparse.Namespace) -> int:
    from stereolens.io import check_writable, write_csv, write_json
    from stereolens.scoring.engine import score_pairs
    from stereolens.stats.bias import pair_summary
    from stereolens.tables import pairs_schema

    dest = Path(args.summary) if args.summary else summary_path(args.output)
    # every check that can fail runs before the model loads and before anything is written
    _check_options(args)
    check_writable(args.output, dest)
    df = _read(args.input, pairs_schema(args.id_column, args.stereo_column, args.anti_column), "pairs table")
    with _located(df, args.id_column, args.input):
        _check_rows(df, args.id_column, [args.stereo_column, args.anti_column])
    model, cache = _load(args, _model_kind(args))
    with _located(df, args.id_column, args.input):
        scored = score_pairs(
            model, None, df, args.metric, columns=(args.stereo_column, args.anti_column), id_column=args.id_column,
            **_options(args, cache),
        )
    write_csv(args.output, scored)
    summary = pair_summary(scored, metric=args.metric, model=args.model, truncate=args.truncate)
    summary.update({"input": str(args.input), "output": str(args.output), "model_identity": getattr(model, "identity", None)})
    write_json(dest, summary)
    print(
        f"scored {summary['n']} pairs with {args.metric}: bias_score={summary['bias_score']:.4f} "
        f"-> {args.output}, {dest}"
        + (f" ({summary['n_truncated_sentences']} sentences truncated)" if args.truncate else "")
    )
    return 0


def _score_sentences(args: argparse.Namespace) -> int:
    import pandas as pd

    from stereolens.io import check_writable, write_csv
    from stereolens.scoring.engine import score_sentences
    from stereolens.tables import sentences_schema

    _check_options(args)
    check_writable(args.output)
    if args.input:
        df = _read(args.input, sentences_schema(args.column, args.id_column), "sentences table")
        if args.id_column not in df.columns:
            df.insert(0, args.id_column, [str(i) for i in range(len(df))])
    else:
        df = pd.DataFrame({args.id_column: [str(i) for i in range(len(args.text))], args.column: args.text})
    with _located(df, args.id_column, args.input):
        _check_rows(df, args.id_column, [args.column])
    model, cache = _load(args, _model_kind(args))
    with _located(df, args.id_column, args.input):
        scores = score_sentences(model, None, list(df[args.column]), args.metric, ids=list(df[args.id_column]),
                                 **_options(args, cache))
    out = df.copy()
    out["score"] = [s.logprob for s in scores]
    out["n_tokens"] = [s.n_tokens for s in scores]
    out["mean"] = [s.mean for s in scores]
    out["truncated"] = [s.truncated for s in scores]
    if args.per_token:
        out["tokens"] = [" ".join(s.tokens or ()) for s in scores]
        out["token_logprobs"] = [" ".join(f"{x:.6f}" for x in s.token_logprobs or ()) for s in scores]
    if args.output:
        write_csv(args.output, out)
        print(f"scored {len(out)} sentences with {args.metric} -> {args.output}")
    else:
        out.to_csv(sys.stdout, index=False)
    return 0
