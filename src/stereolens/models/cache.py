"""Content-addressed on-disk cache for model requests.

The key is the SHA-256 of a canonical JSON document holding the backend, the
model identity (name plus revision or file hash), the full request with its
decoding parameters, and the seed.  Each entry is its own small JSON file,
written atomically, so a run killed halfway keeps every answer it already got
and the rerun resumes from there; a complete rerun makes no model calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from stereolens.io import atomic_path, project_path

DEFAULT_CACHE_DIR = "cache/models"
CACHE_ENV = "STEREOLENS_CACHE_DIR"


def cache_key(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    """Maps request payloads to JSON-serialisable responses, one file per entry."""

    def __init__(self, root: str | os.PathLike | None = None, *, enabled: bool = True) -> None:
        # shared by every experiment of a `dvc queue`, not left in one experiment's temporary copy
        self.root = project_path(root or os.environ.get(CACHE_ENV, DEFAULT_CACHE_DIR))
        self.enabled = enabled
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, payload: dict[str, Any]) -> Any | None:
        if not self.enabled:
            return None
        path = self._path(cache_key(payload))
        try:
            with open(path, encoding="utf-8") as fh:
                value = json.load(fh)["response"]
        except FileNotFoundError:
            with self._lock:
                self.misses += 1
            return None
        except (json.JSONDecodeError, KeyError):
            # a torn entry cannot exist (writes are atomic) unless edited by hand: recompute it
            with self._lock:
                self.misses += 1
            return None
        with self._lock:
            self.hits += 1
        return value

    def put(self, payload: dict[str, Any], response: Any) -> None:
        if not self.enabled:
            return
        path = self._path(cache_key(payload))
        with atomic_path(path) as tmp:
            tmp.write_text(
                json.dumps({"request": payload, "response": response}, ensure_ascii=False, default=str),
                encoding="utf-8",
            )

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}
