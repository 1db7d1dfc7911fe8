"""The shipped pairs groups: names and dimensions from conf/study/pairs/default.yaml, surface forms
from data/seed/pairs/group_forms.csv (the files the stages read)."""

from __future__ import annotations

from pathlib import Path

import yaml

from stereolens.studies.pairs.minimal_pairs import groups_from_config, read_group_forms

REPO = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((REPO / "conf" / "study" / "pairs" / "default.yaml").read_text(encoding="utf-8"))
SEED_GROUPS = {g.name: g for g in groups_from_config(CONFIG["groups"],
                                                       read_group_forms(REPO / "data/seed/pairs/group_forms.csv"))}
