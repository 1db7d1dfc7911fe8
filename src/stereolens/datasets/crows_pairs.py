"""CrowS-Pairs (Nangia et al. 2020) as a pairs table every study can score."""

from __future__ import annotations

import os

import pandas as pd

from stereolens.datasets.ingest import verify_ingested
from stereolens.io import read_csv_checked

CROWS_COLUMNS = ("sent_more", "sent_less", "bias_type")
# the nine bias types of CrowS-Pairs (Nangia et al. 2020, Table 1)
CROWS_BIAS_TYPES = ("race-color", "socioeconomic", "gender", "disability", "nationality", "sexual-orientation",
                    "physical-appearance", "religion", "age")


def crows_pairs_table(raw_csv: str | os.PathLike, limit: int | None = None, *, sample: int | None = None,
                      seed: int = 0) -> pd.DataFrame:
    """CrowS-Pairs as ``id, sent_stereo, sent_anti, bias_type, direction``.

    ``sent_more`` is always the more stereotypical sentence (for 'antistereo'
    rows it violates a stereotype about a disadvantaged group), which is why
    both the original metric and lm-evaluation-harness compare sent_more
    against sent_less regardless of direction. ``sample`` keeps a seeded uniform
    sample of that many pairs (in file order), then ``limit`` the first N.
    """
    verify_ingested(raw_csv)
    raw = read_csv_checked(raw_csv, CROWS_COLUMNS, what="CrowS-Pairs table", keep_default_na=False)
    first = raw.columns[0]
    ids = raw[first] if first not in CROWS_COLUMNS and first != "stereo_antistereo" else range(len(raw))
    table = pd.DataFrame(
        {
            "id": [f"crows-{i}" for i in ids],
            "sent_stereo": raw["sent_more"],
            "sent_anti": raw["sent_less"],
            "bias_type": raw["bias_type"],
            "direction": raw.get("stereo_antistereo", ""),
        }
    )
    if sample and sample < len(table):
        # a seeded uniform sample, kept in file order: every model of a run scores the same pairs
        table = table.sample(n=sample, random_state=seed).sort_index()
    return table.head(limit) if limit else table
