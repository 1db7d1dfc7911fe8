"""A config with one value changed, as a hand edit of params.yaml would change it (shared by the tests)."""

from __future__ import annotations

import copy
from typing import Any


def with_value(config: dict, dotted: str, value: Any) -> dict:
    """A deep copy of ``config`` with the dotted key ``dotted`` set to ``value``."""
    out = copy.deepcopy(config)
    *path, last = dotted.split(".")
    node = out
    for part in path:
        node = node[int(part)] if isinstance(node, list) else node[part]  # panel.0.mode: a list's item by index
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out
