"""Seeds derived from a base seed and a name, the same in every process.

A study that draws random numbers per country, panel or item derives that unit's
seed from the configured seed and the unit's name, so units draw independently
while a rerun draws the same.  Python's ``hash`` of a string changes with
``PYTHONHASHSEED`` from one interpreter to the next, so the name goes through SHA-1.
"""

from __future__ import annotations

import hashlib


def derived_seed(seed: int, key: str) -> int:
    """A 32-bit seed from ``seed`` and ``key``: the first 8 hex digits of SHA-1 of ``"{seed}|{key}"``."""
    return int(hashlib.sha1(f"{seed}|{key}".encode("utf-8")).hexdigest()[:8], 16)
