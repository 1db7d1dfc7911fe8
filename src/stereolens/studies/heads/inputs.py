"""What the heads stages read: the stereo study's instances, the model's layer count (from its config
alone, so a bad ``shapley.layers`` is refused before any weights load), and the probe stage's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from stereolens.errors import DataError
from stereolens.io import read_csv_checked

INSTANCE_COLUMNS = ("id", "country", "category", "target", "stereotype_id", "context", "sent_stereo", "sent_anti",
                    "sent_unrelated", "source")
SHAPLEY_COLUMNS = ("country", "layer", "head", "shapley", "se", "rank")
SWEEP_COLUMNS = ("country", "direction", "n_removed", "probe_value")
# the robustness estimates of each country's ranking (issue 32): "seed" (another permutation seed) or "exact"
STABILITY_COLUMNS = ("country", "estimate", "seed_offset", "permutation_seed", "layer", "head", "shapley", "se", "rank")


def read_instances(path: Path, countries: list[str] | None, max_per_country: int | None) -> pd.DataFrame:
    """The stereo study's instances, restricted to ``countries`` and the first ``max_per_country`` of each."""
    table = read_csv_checked(path, INSTANCE_COLUMNS, what="stereo instances", dtype={"id": str, "country": str})
    for column in ("context", "sent_stereo", "sent_anti", "sent_unrelated"):
        blank = table[column].isna() | (table[column].astype(str).str.strip() == "")
        if blank.any():
            row = int(blank.to_numpy().nonzero()[0][0])
            raise DataError(f"{path} line {row + 2}, column {column}: empty sentence")
    if countries:
        missing = sorted(set(countries) - set(table["country"]))
        if missing:
            raise DataError(f"{path}: column country has no rows for {missing} (has {sorted(set(table['country']))})")
        table = table[table["country"].isin(countries)]
    if max_per_country:
        table = table.groupby("country", sort=True, group_keys=False).head(int(max_per_country))
    return table.reset_index(drop=True)


def model_layer_count(name: str) -> int | None:
    """The model's number of layers from its config.json (no weights), or None when the config cannot be
    read here (loading the model then reports the problem)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError):
        return None
    config = getattr(config, "text_config", None) or config
    layers = getattr(config, "num_hidden_layers", None)
    return int(layers) if layers else None


def read_probe_outputs(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict, pd.DataFrame]:
    """(Shapley table, sweeps table, probe record, robustness estimates) that the probe stage wrote to ``folder``."""
    shap = read_csv_checked(folder / "shapley.csv", SHAPLEY_COLUMNS, what="heads Shapley table")
    sweeps = read_csv_checked(folder / "sweeps.csv", SWEEP_COLUMNS, what="heads sweeps table")
    probe = json.loads((folder / "probe.json").read_text(encoding="utf-8"))
    stability = read_csv_checked(folder / "shapley_stability.csv", STABILITY_COLUMNS,
                                 what="heads Shapley robustness estimates")
    return shap, sweeps, probe, stability
