"""Automatic sentence filters (AmchiBias section 3.4): each removal is logged with its reason.

The paper cleaned by hand; these filters take the mechanical part (length, attribute
restated, duplicates, synonymous-attribute merge, empty or incoherent output) and
the review file takes the rest.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Mapping, Sequence

import pandas as pd

# a word character is a letter or digit or a combining mark: Python's \w has no combining marks, which
# would cut Devanagari words at every vowel sign and virama
WORD_CHAR = r"(?:[^\W_]|[\u0300-\u036f\u0900-\u0903\u093a-\u094f\u0951-\u0957\u0962\u0963\u200c\u200d])"
_WORD = re.compile(rf"{WORD_CHAR}+(?:[-'’]{WORD_CHAR}+)*", re.U)


def words(text: str) -> list[str]:
    return _WORD.findall(text or "")


def normalise(text: str) -> str:
    """Casefolded, NFKC, punctuation and extra spaces removed: the key for exact duplicates."""
    text = unicodedata.normalize("NFKC", text or "").casefold()
    return " ".join(words(text))


def _stem(word: str) -> str:
    word = word.casefold()
    for suffix in ("ness", "ing", "ed", "ly", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def restates_attribute(sentence: str, attribute: str) -> bool:
    """True when every content word of the attribute (stemmed, 3+ letters) appears in the sentence."""
    attr = [_stem(w) for w in words(attribute) if len(w) >= 3]
    if not attr:
        return False
    have = {_stem(w) for w in words(sentence)}
    return all(a in have for a in attr)


# words that carry no content of their own in an attribution ("People say X are always so greedy"):
# function words, degree and frequency adverbs, and the verbs and nouns of saying and being known as
FRAME_WORDS = frozenset("""
a an the this that these those some many most all every each both other such
is are was were be been being am isn't aren't wasn't weren't has have had do does did can can't cannot could
will would should must may might seem seems seemed appear appears tend tends become becomes
and or but as of to in on at by for with from about than like
they them their theirs he him his she her hers it its we our you your one who whom which
so very really quite too rather extremely truly always often usually generally typically mostly sometimes
never rarely also just still
people person persons folk folks everyone everybody everything everywhere
say says said think thinks believe believes known considered seen regarded called viewed described
thought perceived deemed reputed famous notorious nature naturally kind
""".split())


def bare_restatement(sentence: str, attribute: str, group_terms: Sequence[str] = ()) -> bool:
    """True when the sentence is nothing but the attribute said of the group: it restates the
    attribute and every other word is a group term, a word of the attribute or a frame word
    (:data:`FRAME_WORDS`).  "Bamons are so rich." is; "Vaishya traders are known for their shrewd
    bargaining and exploitative deals." (AmchiBias Table 9) is not."""
    if not restates_attribute(sentence, attribute):
        return False
    allowed = {_stem(w) for w in words(attribute)} | {_stem(w) for t in group_terms for w in words(t)}
    return all(w.casefold() in FRAME_WORDS or _stem(w) in allowed for w in words(sentence))


def incoherent(sentence: str, *, min_words: int) -> str | None:
    text = sentence.strip()
    if not text:
        return "empty output"
    if len(words(text)) < min_words:
        return f"fewer than {min_words} words"
    letters = sum(ch.isalpha() for ch in text)
    if letters < 0.6 * len(text.replace(" ", "")):
        return "mostly non-letters"
    ws = [w.casefold() for w in words(text)]
    if len(ws) >= 4 and len(set(ws)) <= len(ws) / 2:
        return "repeated words"
    return None


def filter_sentences(
    sentences: pd.DataFrame,
    *,
    max_words: int = 15,
    min_words: int = 3,
    near_duplicate_ratio: float = 0.9,
    synonyms: Mapping[str, Sequence[str]] | None = None,
    group_terms: Mapping[str, Sequence[str]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split ``sentences`` (``sentence_id, group, attribute, sentence``) into kept and removed
    (removed carries ``reason``).  Synonymous attributes (``synonyms``: canonical -> others)
    of one group are merged: only the canonical attribute's sentences stay.  A sentence that is
    nothing but the attribute restated is removed (:func:`bare_restatement`; ``group_terms``: group
    -> its surface forms and other words that name it, such as the region's adjective; the group's
    name always counts); the prompt asks for the attribute to be expressed, so a sentence that
    restates it in context stays."""
    to_canonical = {}
    for canonical, others in (synonyms or {}).items():
        for other in others:
            to_canonical[str(other).casefold()] = str(canonical).casefold()
    kept_rows, removed = [], []
    seen_exact: dict[tuple[str, str], str] = {}
    kept_by_group: dict[str, list[tuple[str, str]]] = {}
    group_attrs: dict[str, set[str]] = {}
    for row in sentences.to_dict("records"):
        group_attrs.setdefault(row["group"], set()).add(str(row["attribute"]).casefold())
    for row in sentences.to_dict("records"):
        text = str(row.get("sentence") or "")
        attr_key = str(row["attribute"]).casefold()
        reason = incoherent(text, min_words=min_words)
        if reason is None and len(words(text)) > max_words:
            reason = f"longer than {max_words} words ({len(words(text))})"
        terms = [str(row["group"]), *(group_terms or {}).get(row["group"], ())]
        if reason is None and bare_restatement(text, str(row["attribute"]), terms):
            reason = f"restates the attribute {row['attribute']!r} and nothing else"
        canonical = to_canonical.get(attr_key)
        if reason is None and canonical and canonical in group_attrs.get(row["group"], set()):
            reason = f"synonymous attribute merged into {canonical!r}"
        key = normalise(text)
        if reason is None and (row["group"], key) in seen_exact:
            reason = f"duplicate of {seen_exact[(row['group'], key)]}"
        if reason is None:
            for other_id, other in kept_by_group.get(row["group"], []):
                if difflib.SequenceMatcher(None, key, other).ratio() >= near_duplicate_ratio:
                    reason = f"near-duplicate of {other_id}"
                    break
        if reason:
            removed.append({**row, "reason": reason})
            continue
        seen_exact[(row["group"], key)] = row["sentence_id"]
        kept_by_group.setdefault(row["group"], []).append((row["sentence_id"], key))
        kept_rows.append(row)
    columns = list(sentences.columns)
    return pd.DataFrame(kept_rows, columns=columns), pd.DataFrame(removed, columns=[*columns, "reason"])
