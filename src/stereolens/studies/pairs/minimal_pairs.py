"""Minimal pairs (seed 002 section 3.5): contrast groups, the occupation-coupling rewrite, the
token-diff check that only identity-marking tokens change, and the control pairing rule."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from stereolens.errors import ConfigError

from stereolens.studies.pairs.filters import WORD_CHAR

_TOKEN = re.compile(rf"{WORD_CHAR}+(?:[-'’]{WORD_CHAR}+)*|[^\w\s]", re.U)


def tokens(text: str) -> list[str]:
    """Words (combining marks included, so Devanagari words stay whole) and punctuation marks."""
    return _TOKEN.findall(text or "")


@dataclass(frozen=True)
class Group:
    dimension: str
    name: str
    aliases: tuple[str, ...] = ()
    kok: tuple[str, ...] = ()  # Devanagari surface forms

    def surface(self, language: str = "en") -> tuple[str, ...]:
        forms = (self.name, *self.aliases) if language == "en" else self.kok
        return tuple(sorted(set(forms), key=len, reverse=True))  # longest first: "Goan youth" before "youth"


def groups_from_config(cfg: Mapping[str, Sequence[Mapping]]) -> list[Group]:
    """``{dimension: [{name, aliases, kok}, ...]}`` -> groups; names must be unique."""
    out, seen = [], set()
    for dimension, members in cfg.items():
        for m in members:
            if "name" not in m:
                raise ConfigError(f"study.pairs.groups.{dimension}: an entry has no name ({dict(m)})")
            if m["name"] in seen:
                raise ConfigError(f"study.pairs.groups: group {m['name']!r} appears twice")
            seen.add(m["name"])
            kok = m.get("kok") or ()
            out.append(Group(str(dimension), str(m["name"]), tuple(m.get("aliases") or ()),
                             tuple([kok] if isinstance(kok, str) else kok)))
    return out


def check_contrast_map(contrast: Mapping[str, Mapping[str, str]], groups: Sequence[Group]) -> None:
    by_name = {g.name: g for g in groups}
    for dimension, mapping in contrast.items():
        for a, b in mapping.items():
            for name in (a, b):
                if name not in by_name:
                    raise ConfigError(f"study.pairs.contrast.{dimension}: unknown group {name!r}")
            if by_name[a].dimension != dimension:
                raise ConfigError(f"study.pairs.contrast.{dimension}: {a!r} belongs to {by_name[a].dimension}")


def find_mention(sentence: str, forms: Sequence[str]) -> tuple[int, int, str] | None:
    """(start, end, form) of the first whole-word mention of any surface form, case-insensitive."""
    best = None
    for form in forms:
        m = re.search(rf"(?<!\w){re.escape(form)}(?!\w)", sentence, flags=re.I)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), m.end(), form)
    return best


def substitute(sentence: str, stereo: Group, anti: Group, language: str = "en") -> str | None:
    """The anti-stereotypical sentence: the first mention of ``stereo`` replaced by ``anti``'s
    first surface form (None when the sentence names no form of ``stereo``)."""
    hit = find_mention(sentence, stereo.surface(language))
    target = (anti.name if language == "en" else (anti.kok[0] if anti.kok else None))
    if hit is None or target is None:
        return None
    start, end, _ = hit
    return sentence[:start] + target + sentence[end:]


def non_identity_changes(sent_a: str, sent_b: str, identity_a: Sequence[str], identity_b: Sequence[str]) -> list[str]:
    """Token differences between the two sentences that are not identity-marking tokens.

    Tokens are words and punctuation; a changed span is allowed when every token on
    each side belongs to that side's identity terms (case-insensitive).  Returns the
    offending spans as ``'a' -> 'b'`` strings; empty means a valid minimal pair.
    """
    ta, tb = tokens(sent_a), tokens(sent_b)
    ida = {t.casefold() for term in identity_a for t in tokens(term)}
    idb = {t.casefold() for term in identity_b for t in tokens(term)}
    bad = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, [t.casefold() for t in ta],
                                                      [t.casefold() for t in tb], autojunk=False).get_opcodes():
        if op == "equal":
            continue
        left, right = ta[i1:i2], tb[j1:j2]
        if all(t.casefold() in ida for t in left) and all(t.casefold() in idb for t in right) and (left or right):
            continue
        bad.append(f"{' '.join(left)!r} -> {' '.join(right)!r}")
    if not bad and [t.casefold() for t in ta] == [t.casefold() for t in tb]:
        bad.append("the two sentences are identical")
    return bad


@dataclass(frozen=True)
class Coupling:
    """Occupation-identity coupling (3.5): exclusive markers -> generic equivalents; shared
    cultural markers kept; inseparable items make the sentence drop."""

    replace: Mapping[str, str]
    keep: tuple[str, ...]
    drop: tuple[str, ...]

    @classmethod
    def from_config(cls, cfg: Mapping) -> "Coupling":
        return cls(dict(cfg.get("replace") or {}), tuple(cfg.get("keep") or ()), tuple(cfg.get("drop") or ()))

    def apply(self, sentence: str) -> tuple[str | None, list[str], list[str]]:
        """(rewritten sentence or None when dropped, rewrites done, shared markers kept)."""
        for item in self.drop:
            if re.search(rf"(?<!\w){re.escape(item)}(?!\w)", sentence, flags=re.I):
                return None, [f"inseparable: {item}"], []
        done = []
        for marker, generic in sorted(self.replace.items(), key=lambda kv: -len(kv[0])):
            new = re.sub(rf"(?<!\w){re.escape(marker)}(?!\w)", generic, sentence, flags=re.I)
            if new != sentence:
                done.append(f"{marker} -> {generic}")
                sentence = new
        kept = [k for k in self.keep if re.search(rf"(?<!\w){re.escape(k)}(?!\w)", sentence, flags=re.I)]
        return sentence, done, kept


def build_pairs(
    sentences: pd.DataFrame,
    groups: Sequence[Group],
    contrast: Mapping[str, Mapping[str, str]],
    coupling: Coupling,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pairs and refusals from kept sentences (``sentence_id, dimension, group, attribute, sentence``)."""
    by_name = {g.name: g for g in groups}
    pairs, refused = [], []
    for row in sentences.to_dict("records"):
        stereo = by_name.get(row["group"])
        anti_name = (contrast.get(row["dimension"]) or {}).get(row["group"])
        base = {"sentence_id": row["sentence_id"], "dimension": row["dimension"], "group_stereo": row["group"],
                "attribute": row["attribute"], "sentence": row["sentence"]}
        if stereo is None or anti_name is None:
            refused.append({**base, "reason": f"no contrast group for {row['group']!r} in {row['dimension']}"})
            continue
        anti = by_name[anti_name]
        rewritten, rewrites, kept = coupling.apply(row["sentence"])
        if rewritten is None:
            refused.append({**base, "reason": f"dropped, occupation coupling ({rewrites[0]})"})
            continue
        sent_anti = substitute(rewritten, stereo, anti)
        if sent_anti is None:
            refused.append({**base, "reason": f"the sentence names no form of {stereo.name!r}"})
            continue
        bad = non_identity_changes(rewritten, sent_anti, stereo.surface(), anti.surface())
        if bad:
            refused.append({**base, "reason": "changes non-identity tokens: " + "; ".join(bad)})
            continue
        pairs.append({**base, "group_anti": anti.name, "sent_stereo": rewritten, "sent_anti": sent_anti,
                      "coupling_rewrites": "; ".join(rewrites), "shared_markers": "; ".join(kept)})
    cols = ["sentence_id", "dimension", "group_stereo", "group_anti", "attribute", "sentence", "sent_stereo",
            "sent_anti", "coupling_rewrites", "shared_markers"]
    return pd.DataFrame(pairs, columns=cols), pd.DataFrame(refused, columns=[*cols[:1], "dimension", "group_stereo",
                                                                            "attribute", "sentence", "reason"])


def assign_controls(pairs: pd.DataFrame, controls: pd.DataFrame) -> pd.DataFrame:
    """Our pairing rule (the paper does not state one): within each language, the k-th pair in
    file order gets control k mod C of that language's controls in their file order.  Parallel
    files (same pair order per language) thus pair translations with translated controls."""
    out = []
    for language, part in pairs.groupby("language", sort=False):
        ctl = controls[controls["language"] == language].reset_index(drop=True)
        part = part.copy()
        if ctl.empty:
            part["control_id"], part["sent_control"] = None, None
        else:
            idx = [k % len(ctl) for k in range(len(part))]
            part["control_id"] = ctl.loc[idx, "control_id"].to_numpy()
            part["sent_control"] = ctl.loc[idx, "sentence"].to_numpy()
        out.append(part)
    return pd.concat(out) if out else pairs.assign(control_id=None, sent_control=None)
