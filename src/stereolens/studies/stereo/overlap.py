"""Overlap analyses (EspanStereo sections 4.2, 5.2): between countries (Tables 1-5), with CrowS-Pairs and StereoSet (11-12).

The paper does not define "present".  Ours: two stereotypes are the same when
they are of the same category, their target groups are of the same class
(equal after normalisation, or trigram similarity >= ``target_threshold``)
and their statements mean the same.  "Same meaning" is decided in three
steps: statements equal after normalisation are the same; the others go to
the configured similarity model (:mod:`stereolens.studies.stereo.similarity`:
``lexical`` trigrams, ``embedding`` cosine, or the model layer as ``judge``)
and are the same when its score is >= ``threshold``; finally an adjudication
file (``left_id, right_id, decision`` with decision ``present`` / ``absent``)
overrides any decision (adjudicated pairs are not sent to the model).

Between countries the matched pairs form a one-to-one matching (greedy by
score, ties broken by the ids, the same whichever country is first), so the
shared count of A and B is the same number in A's table and in B's; the
shares divide it by each country's own validated count.  Against an external
dataset, a stereotype is present when it matches any external item.

SeeGULL Multilingual (Bhutani et al. 2024) is the external reference made by people of the same
locale: each country with a SeeGULL locale (Mexico: es-MX, Spain: es-ES) is compared with the tuples
that locale's annotators called stereotypes (two or three of three votes), by the same decision.  A
tuple carries its target group (the identity), so the target-class check applies as between
countries; it carries no category (every identity is a nationality or a region), so the category is
not matched.  Both directions are reported: the share of the country's validated stereotypes that
SeeGULL's annotators also recorded, and the share of SeeGULL's stereotypes the retrieval found (the
recall of retrieval-to-saturation against an independent human collection).  That comparison is
:mod:`stereolens.studies.stereo.seegull_reference`, kept apart so that the calibration set, which reads
this module's CrowS-Pairs categories, does not depend on the SeeGULL reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import DataError
from stereolens.io import read_csv_checked
from stereolens.studies.stereo.similarity import LexicalSimilarity, SimilarityModel
from stereolens.studies.stereo.text import normalise, similarity

# the external datasets' item ids (in tables and adjudication files): crows-<row>, stereoset-<sentence id>,
# seegull-<locale>-<line of its file>
CROWS_PREFIX, STEREOSET_PREFIX, SEEGULL_PREFIX = "crows-", "stereoset-", "seegull-"
EXTERNAL_PREFIXES = (CROWS_PREFIX, STEREOSET_PREFIX, SEEGULL_PREFIX)
CROWS_CATEGORIES = {"race-color": "race", "religion": "religion", "gender": "gender",
                    "sexual-orientation": "sexual_orientation", "age": "age"}
STEREOSET_CATEGORIES = {"race": "race", "religion": "religion", "gender": "gender"}


@dataclass(frozen=True)
class Matcher:
    """Thresholds and the similarity model of the "present" decision."""

    threshold: float = 0.6
    target_threshold: float = 0.8
    model: SimilarityModel = field(default_factory=LexicalSimilarity)

    def same_target_class(self, a: str, b: str, *, required: bool = True) -> bool:
        if not required:
            return True
        na, nb = normalise(a or ""), normalise(b or "")
        return bool(na) and bool(nb) and (na == nb or similarity(na, nb) >= self.target_threshold)

    def describe(self) -> dict[str, Any]:
        return {**self.model.describe(), "threshold": self.threshold if self.model.method != "judge" else None,
                "target_threshold": self.target_threshold}


class Adjudication(dict):
    """Decisions by unordered pair of stereotype ids (``True`` = present), with the file and line each came from."""

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__()
        self.path = path
        self.rows: list[tuple[int, str, str]] = []  # (line, left_id, right_id)

    def refuse_unknown(self, known: set[str], *, checked: Callable[[str], bool], known_as: str) -> None:
        """Refuse an id among those ``checked`` selects that is not in ``known``: a decision about a stereotype that
        exists nowhere would count as adjudicated (``n_adjudicated``) while it decides nothing."""
        for line, *ids in self.rows:
            for column, stereotype_id in zip(("left_id", "right_id"), ids):
                if checked(stereotype_id) and stereotype_id not in known:
                    raise DataError(f"{self.path} line {line}, column {column}: {stereotype_id!r} is not {known_as}, "
                                    f"so the decision would count as adjudicated and decide nothing")


def load_adjudication(path: str | Path | None) -> Adjudication:
    """The adjudication file (``left_id, right_id, decision``; none without ``path``): ids filled in, a decision of
    ``present`` or ``absent``, one decision per pair; whether its ids exist is checked where they are known."""
    adjudication = Adjudication(path)
    if not path:
        return adjudication
    df = read_csv_checked(path, ["left_id", "right_id", "decision"], what="overlap adjudication", dtype=str,
                          keep_default_na=False)
    first_line: dict[frozenset, int] = {}
    for pos, r in df.iterrows():
        line = pos + 2
        for column in ("left_id", "right_id"):
            if not r[column].strip():
                raise DataError(f"{path} line {line}, column {column}: empty id")
        decision = str(r["decision"]).strip().lower()
        if decision not in ("present", "absent"):
            raise DataError(f"{path} line {line}, column decision: {r['decision']!r} is not 'present' or 'absent'")
        left, right = r["left_id"].strip(), r["right_id"].strip()
        key = frozenset((left, right))
        if key in first_line:
            # a second decision on the same pair would silently overrule the first
            raise DataError(f"{path} line {line}: the pair {left!r}, {right!r} again (first at line {first_line[key]})")
        first_line[key] = line
        adjudication[key] = decision == "present"
        adjudication.rows.append((line, left, right))
    return adjudication


def decide_pairs(matcher: Matcher, pairs: Sequence[tuple[Any, Any]], adjudication: dict, *,
                 target_required: bool, category_required: bool = True) -> list[tuple[bool, float, str]]:
    """(present, score, decided_by) per pair: class check, normalised match, the similarity model (batched), adjudication."""
    out: list[tuple[bool, float, str] | None] = [None] * len(pairs)
    pending = []
    for i, (a, b) in enumerate(pairs):
        key = frozenset((a.stereotype_id, b.stereotype_id))
        if key in adjudication:
            present = adjudication[key]
            out[i] = (present, 1.0 if present else 0.0, "adjudicated")
        elif ((category_required and a.category != b.category)
              or not matcher.same_target_class(a.target, b.target, required=target_required)):
            out[i] = (False, 0.0, "other class")
        elif normalise(a.stereotype) == normalise(b.stereotype):
            out[i] = (True, 1.0, "normalised")
        else:
            pending.append(i)
    scores = matcher.model.scores([pairs[i] for i in pending])
    for i, score in zip(pending, scores):
        out[i] = (score >= matcher.threshold, float(score), matcher.model.method)
    return out  # type: ignore[return-value]


def matched_pairs(left: pd.DataFrame, right: pd.DataFrame, matcher: Matcher, adjudication: dict | None = None) -> pd.DataFrame:
    """One-to-one matching of ``present`` pairs between two countries' stereotypes (symmetric in the two)."""
    adjudication = adjudication or {}
    pairs = [(a, b) for a in left.itertuples(index=False) for b in right.itertuples(index=False)]
    cands = []
    for (a, b), (ok, score, how) in zip(pairs, decide_pairs(matcher, pairs, adjudication, target_required=True)):
        if ok:
            lo, hi = sorted((a.stereotype_id, b.stereotype_id))
            cands.append((-score, lo, hi, a.stereotype_id, b.stereotype_id, score, how))
    cands.sort()
    used, rows = set(), []
    for _, _, _, ia, ib, score, how in cands:
        if ia in used or ib in used:
            continue
        used.update((ia, ib))
        rows.append({"left_id": ia, "right_id": ib, "similarity": score, "decided_by": how})
    return pd.DataFrame(rows, columns=["left_id", "right_id", "similarity", "decided_by"])


def country_overlap(validated: pd.DataFrame, countries: Sequence[str], categories: Sequence[str], matcher: Matcher,
                    adjudication: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables 1-5 in long form (``country, other, category, shared, n_country, share``) and the matched pairs.

    An adjudicated id that is not a validated stereotype and not shaped as an external dataset's item is refused
    here, before anything is written (the external items are checked by :func:`external_overlaps`)."""
    if isinstance(adjudication, Adjudication):
        adjudication.refuse_unknown(set(validated["stereotype_id"].astype(str)),
                                    checked=lambda i: not i.startswith(EXTERNAL_PREFIXES),
                                    known_as="a validated stereotype nor a CrowS-Pairs, StereoSet or SeeGULL item ("
                                             + " or ".join(f"{prefix}..." for prefix in EXTERNAL_PREFIXES) + ")")
    pairs, rows = [], []
    shared: dict[tuple, int] = {}
    for i, a in enumerate(countries):
        for b in countries[i + 1 :]:
            for k in categories:
                la = validated[(validated["country"] == a) & (validated["category"] == k)]
                lb = validated[(validated["country"] == b) & (validated["category"] == k)]
                m = matched_pairs(la, lb, matcher, adjudication)
                shared[(a, b, k)] = shared[(b, a, k)] = len(m)
                pairs.append(m.assign(country=a, other=b, category=k))
    for a in countries:
        for b in countries:
            if a == b:
                continue
            for k in [*categories, "overall"]:
                ks = categories if k == "overall" else [k]
                n = int(((validated["country"] == a) & validated["category"].isin(ks)).sum())
                s = sum(shared[(a, b, kk)] for kk in ks)
                rows.append({"country": a, "other": b, "category": k, "shared": s, "n_country": n,
                             "share": s / n if n else float("nan")})
    pair_cols = ["left_id", "right_id", "similarity", "decided_by", "country", "other", "category"]
    matched = pd.concat(pairs, ignore_index=True)[pair_cols] if pairs else pd.DataFrame(columns=pair_cols)
    return pd.DataFrame(rows, columns=["country", "other", "category", "shared", "n_country", "share"]), matched


def external_overlap(validated: pd.DataFrame, external: pd.DataFrame, countries: Sequence[str], categories: Sequence[str],
                     matcher: Matcher, adjudication: dict | None = None) -> pd.DataFrame:
    """Tables 11-12: share of each country's validated stereotypes present in an external dataset.

    External items carry no target group we can compare, so only category and
    meaning are matched there (``target_required`` off).
    """
    adjudication = adjudication or {}
    by_category = {k: list(part.itertuples(index=False)) for k, part in external.groupby("category", sort=False)}
    pairs = [(a, b) for a in validated.itertuples(index=False) for b in by_category.get(a.category, [])]
    present = dict.fromkeys(validated["stereotype_id"], False)
    for (a, _), (ok, _, _) in zip(pairs, decide_pairs(matcher, pairs, adjudication, target_required=False)):
        present[a.stereotype_id] = present[a.stereotype_id] or ok
    v = validated.assign(present=validated["stereotype_id"].map(present).astype(bool))
    rows = []
    for c in [*countries, "overall"]:
        for k in [*categories, "overall"]:
            part = v[((v["country"] == c) | (c == "overall")) & ((v["category"] == k) | (k == "overall"))]
            n, s = len(part), int(part["present"].sum())
            covered = k == "overall" or k in set(external["category"])
            rows.append({"country": c, "category": k, "present": s, "n": n,
                         "share": s / n if n and covered else float("nan"), "covered_by_dataset": covered})
    return pd.DataFrame(rows)


def load_crows(path: str | Path) -> pd.DataFrame:
    df = read_csv_checked(path, ["sent_more", "bias_type"], what="CrowS-Pairs")
    df = df[df["bias_type"].isin(CROWS_CATEGORIES)]
    return pd.DataFrame({"stereotype_id": [f"{CROWS_PREFIX}{i}" for i in df.index], "category": df["bias_type"].map(CROWS_CATEGORIES),
                         "target": "", "stereotype": df["sent_more"].astype(str)})


def load_stereoset(path: str | Path) -> pd.DataFrame:
    """StereoSet's ``dev.json`` (inter- and intra-sentence): its stereotypical sentences by bias type."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))["data"]
    except (KeyError, json.JSONDecodeError) as exc:
        raise DataError(f"StereoSet file {path} is not StereoSet's dev.json format: {exc}") from None
    rows = []
    for part in ("intersentence", "intrasentence"):
        for ex in data.get(part, []):
            if ex.get("bias_type") not in STEREOSET_CATEGORIES:
                continue
            for sent in ex.get("sentences", []):
                if sent.get("gold_label") == "stereotype":
                    rows.append({"stereotype_id": f"{STEREOSET_PREFIX}{sent.get('id')}", "category": STEREOSET_CATEGORIES[ex["bias_type"]],
                                 "target": ex.get("target", ""), "stereotype": sent["sentence"]})
    return pd.DataFrame(rows, columns=["stereotype_id", "category", "target", "stereotype"])


# name, config key (study.stereo.overlap.<key>), loader, the prefix of its item ids
EXTERNAL_DATASETS = (("crows_pairs", "crows", load_crows, CROWS_PREFIX),
                     ("stereoset", "stereoset", load_stereoset, STEREOSET_PREFIX))


def external_overlaps(validated: pd.DataFrame, paths: dict[str, str | None], countries: Sequence[str],
                      categories: Sequence[str], matcher: Matcher, adjudication: dict
                      ) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, Any]]]:
    """Tables 11-12: the validated stereotypes present in CrowS-Pairs and StereoSet (``paths`` by config key),
    and per dataset its status (``not available`` when its file is absent) and overall count."""
    tables, external = {}, {}
    for name, key, loader, prefix in EXTERNAL_DATASETS:
        path = paths.get(key)
        available = bool(path) and Path(path).exists()
        items = loader(path) if available else None
        if isinstance(adjudication, Adjudication):
            adjudication.refuse_unknown(set(items["stereotype_id"]) if available else set(),
                                        checked=lambda i: i.startswith(prefix),
                                        known_as=f"an item of {path}" if available else
                                        f"an item of any file ({name} is not available: study.stereo.overlap.{key} is {path})")
        if not available:
            external[name] = {"status": "not available", "path": path}
            continue
        table = external_overlap(validated, items, countries, categories, matcher, adjudication)
        tables[name] = table
        overall = table[(table["country"] == "overall") & (table["category"] == "overall")].iloc[0]
        external[name] = {"status": "computed", "path": path, "present": int(overall["present"]), "n": int(overall["n"])}
    return tables, external


def method_description(matcher: Matcher, method: str, *, adjudication_path: str | None, n_adjudicated: int) -> dict[str, Any]:
    """What "present" means in this run, for the summary and the report."""
    rule = ("judge answers sí" if method == "judge" else f"{method} score >= {matcher.threshold}")
    return {
        "present": "same category, same target-group class (normalised match or target trigram cosine >= "
                   f"{matcher.target_threshold}) and same meaning (normalised match, else {rule}); adjudication overrides; "
                   "external datasets: category and meaning only",
        "similarity": matcher.describe(), "adjudication": adjudication_path, "n_adjudicated": n_adjudicated}
