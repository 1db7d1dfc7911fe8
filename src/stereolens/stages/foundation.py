"""Stages every study builds on: ingest the public datasets, prepare the configured model."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from stereolens.errors import DataError
from stereolens.io import write_json
from stereolens.stages.common import load_params
from stereolens.stages.registry import stage


# --------------------------------------------------------------------------- ingest
def _ingest_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, help="name in the dataset registry")
    parser.add_argument("--registry", default="data/seed/datasets.yaml")
    parser.add_argument("--output", default=None, help="default: data/raw/<dataset>")


@stage("ingest", configure=_ingest_args)
def ingest(args: argparse.Namespace) -> None:
    """Copy a pinned public dataset into data/raw/ (mirror or upstream URL, sha256-checked)."""
    from stereolens.datasets import ingest_dataset, load_registry
    from stereolens.datasets.ingest import MIRROR_ENV

    registry = load_registry(args.registry)
    if args.dataset not in registry:
        raise DataError(f"dataset {args.dataset!r} is not in {args.registry} (known: {', '.join(registry)})")
    output = ingest_dataset(
        registry[args.dataset], args.output or f"data/raw/{args.dataset}", mirror=os.environ.get(MIRROR_ENV) or None
    )
    print(f"ingested {args.dataset} -> {output}")


# --------------------------------------------------------------------------- prepare-model
@stage("prepare-model")
def prepare_model(args: argparse.Namespace) -> None:
    """Materialise the configured model under models/<id>/ (GGUF converted once; hub models recorded)."""
    model_cfg = load_params("model", path=args.params)["model"]
    out = Path("models") / model_cfg["id"]
    if model_cfg.get("source"):
        from stereolens.models.prepare import prepare_default_model

        prepare_default_model(out, expected_version=model_cfg["source"].get("version"))
    else:
        # hub and remote models are loaded by name at use; record exactly which one this run meant
        reference = {k: model_cfg.get(k) for k in ("id", "name", "kind", "backend", "revision", "base_url")}
        write_json(out / "MODEL_REFERENCE.json", reference)
    print(f"model ready: {out}")
