"""Text normalisation, content words and the lexical similarity the study matches stereotypes with.

Normalisation folds case and accents and drops URLs, mentions, hashtags'
``#``, digits and punctuation, so that two spellings of one statement compare
equal.  Similarity is the cosine of character-trigram count vectors of the
normalised texts (a lexical model: it does not cross languages, see the
study README).
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_URL = re.compile(r"https?://\S+|www\.\S+")
_MENTION = re.compile(r"@\w+")
_NON_WORD = re.compile(r"[^a-z\s]")
_SPACE = re.compile(r"\s+")


def fold(text: str) -> str:
    """Lower case without accents (ñ becomes n, ü becomes u)."""
    decomposed = unicodedata.normalize("NFKD", str(text).lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def normalise(text: str) -> str:
    text = _MENTION.sub(" ", _URL.sub(" ", str(text)))
    text = _NON_WORD.sub(" ", fold(text))
    return _SPACE.sub(" ", text).strip()


def load_stopwords(path: str | Path) -> frozenset[str]:
    words: set[str] = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#"):
            continue
        words.update(normalise(line).split())
    return frozenset(words)


def content_words(text: str, stopwords: Iterable[str]) -> set[str]:
    """Normalised words of at least three letters that are not function words."""
    stop = set(stopwords)
    return {w for w in normalise(text).split() if len(w) >= 3 and w not in stop}


@functools.lru_cache(maxsize=200_000)
def _trigrams(text: str) -> Counter:
    normalised = normalise(text)
    if not normalised:
        # nothing left (a non-Latin script, punctuation only): no trigrams, so no similarity, rather than
        # the padding's one blank trigram that made any two such texts identical (cosine 1)
        return Counter()
    padded = f"  {normalised} "
    return Counter(padded[i : i + 3] for i in range(len(padded) - 2))


def similarity(a: str, b: str) -> float:
    """Cosine similarity of character-trigram counts of the normalised texts, in [0, 1] (0 when either normalises to nothing)."""
    ta, tb = _trigrams(a), _trigrams(b)
    dot = sum(v * tb.get(k, 0) for k, v in ta.items())
    na = math.sqrt(sum(v * v for v in ta.values()))
    nb = math.sqrt(sum(v * v for v in tb.values()))
    return dot / (na * nb) if na and nb else 0.0


def is_near_duplicate(a: str, b: str, threshold: float) -> bool:
    """Equal after normalisation, or trigram similarity at or above ``threshold``."""
    na, nb = normalise(a), normalise(b)
    return na == nb or similarity(na, nb) >= threshold
