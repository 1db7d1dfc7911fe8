"""The stereo study's overlap with SeeGULL Multilingual (Bhutani et al. 2024): each country against the tuples its
own locale's annotators called stereotypes, in both directions, by the overlap's "present" decision
(:mod:`stereolens.studies.stereo.overlap`, whose docstring says how it is applied here)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.studies.stereo.overlap import SEEGULL_PREFIX, Adjudication, Matcher, decide_pairs

SEEGULL_DIRECTIONS = {"study_in_seegull": "share of the country's validated stereotypes that the locale's SeeGULL "
                                           "annotators also called stereotypes",
                      "seegull_in_study": "share of the locale's SeeGULL stereotypes the retrieval found (recall of "
                                          "retrieval-to-saturation against an independent human collection)"}
SEEGULL_COLUMNS = ["direction", "country", "locale", "category", "present", "n", "share", "status"]


def load_seegull(folder: str | Path, locale: str, statement: str) -> pd.DataFrame:
    """The tuples most of ``locale``'s annotators called stereotypes (``stereotype_id`` seegull-<locale>-<line>,
    ``target`` = the identity, ``stereotype`` = the tuple read as a sentence with ``statement``)."""
    from stereolens.datasets.seegull import STEREOTYPE, read_seegull

    tuples = read_seegull(folder, [locale], key="study.stereo.overlap.seegull.locales")
    kept = tuples[tuples["verdict"] == STEREOTYPE]
    return pd.DataFrame({
        "stereotype_id": [f"{SEEGULL_PREFIX}{locale}-{line}" for line in kept["source_line"]], "category": "",
        "target": kept["identity"].to_numpy(),
        "stereotype": [statement.format(identity=i, attribute=a) for i, a in zip(kept["identity"], kept["attribute"])],
        "identity": kept["identity"].to_numpy(), "attribute": kept["attribute"].to_numpy(),
        "stereotype_votes": kept["stereotype_votes"].to_numpy(), "n_annotators": kept["n_annotators"].to_numpy()})


def seegull_overlap(validated: pd.DataFrame, items: dict[str, pd.DataFrame], locales: dict[str, str],
                    countries: Sequence[str], categories: Sequence[str], matcher: Matcher, adjudication: dict
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both directions per country (``items``: a locale's SeeGULL stereotypes by locale code; ``locales``: country
    -> locale), and the matched (validated stereotype, SeeGULL tuple) pairs.  A country without a locale gets a
    row saying so.  A pair is present by :func:`decide_pairs` with the target class required and no category."""
    rows, matches = [], []
    for country in countries:
        locale = locales.get(country)
        if not locale:
            for direction in SEEGULL_DIRECTIONS:
                rows.append({"direction": direction, "country": country, "locale": None, "category": "overall",
                             "present": None, "n": None, "share": None,
                             "status": "no SeeGULL locale for this country"})
            continue
        mine, theirs = validated[validated["country"] == country], items[locale]
        pairs = [(a, b) for a in mine.itertuples(index=False) for b in theirs.itertuples(index=False)]
        decided = decide_pairs(matcher, pairs, adjudication, target_required=True, category_required=False)
        found = [(a, b, score, how) for (a, b), (ok, score, how) in zip(pairs, decided) if ok]
        matches += [{"country": country, "locale": locale, "stereotype_id": a.stereotype_id,
                     "seegull_id": b.stereotype_id, "identity": b.identity, "attribute": b.attribute,
                     "similarity": score, "decided_by": how} for a, b, score, how in found]
        recorded = {a.stereotype_id for a, _, _, _ in found}
        for k in [*categories, "overall"]:
            part = mine if k == "overall" else mine[mine["category"] == k]
            n, present = len(part), int(part["stereotype_id"].isin(recorded).sum())
            rows.append({"direction": "study_in_seegull", "country": country, "locale": locale, "category": k,
                         "present": present, "n": n, "share": present / n if n else None, "status": "computed"})
        retrieved = {b.stereotype_id for _, b, _, _ in found}
        rows.append({"direction": "seegull_in_study", "country": country, "locale": locale, "category": "overall",
                     "present": len(retrieved), "n": len(theirs), "share": len(retrieved) / len(theirs) if len(theirs)
                     else None, "status": "computed"})
    match_columns = ["country", "locale", "stereotype_id", "seegull_id", "identity", "attribute", "similarity",
                     "decided_by"]
    return pd.DataFrame(rows, columns=SEEGULL_COLUMNS), pd.DataFrame(matches, columns=match_columns)


def seegull_overlaps(validated: pd.DataFrame, cfg: dict[str, Any] | None, countries: Sequence[str],
                     categories: Sequence[str], matcher: Matcher, adjudication: dict
                     ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, dict[str, Any]]:
    """The SeeGULL overlap of ``study.stereo.overlap.seegull`` (``data``, ``locales`` country -> code, ``statement``),
    or ``not available`` when its folder is absent; its status for the summary (the dataset's licence and
    attribution from its ingest record)."""
    from stereolens.datasets.ingest import PROVENANCE

    cfg = dict(cfg or {})
    folder = cfg.get("data")
    locales = {str(k): str(v) for k, v in (cfg.get("locales") or {}).items()}
    available = bool(folder) and Path(folder).is_dir()
    wanted = sorted({locales[c] for c in countries if c in locales})
    items = {locale: load_seegull(folder, locale, cfg.get("statement") or "{identity}: {attribute}")
             for locale in wanted} if available else {}
    if isinstance(adjudication, Adjudication):
        known = {i for table in items.values() for i in table["stereotype_id"]}
        adjudication.refuse_unknown(known, checked=lambda i: i.startswith(SEEGULL_PREFIX),
                                    known_as=f"a SeeGULL stereotype of {', '.join(wanted) or 'no locale'} in {folder}"
                                    if available else f"an item of any file (SeeGULL is not available: "
                                                      f"study.stereo.overlap.seegull.data is {folder})")
    if not available:
        return None, None, {"status": "not available", "path": folder}
    table, matches = seegull_overlap(validated, items, locales, countries, categories, matcher, adjudication)
    record = Path(folder) / PROVENANCE
    provenance = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    by_country: dict[str, dict[str, Any]] = {}
    for r in table[(table["category"] == "overall") & (table["status"] == "computed")].itertuples():
        by_country.setdefault(r.country, {"locale": r.locale})[r.direction] = {"present": r.present, "n": r.n,
                                                                                "share": r.share}
    return table, matches, {
        "status": "computed", "path": folder, "locales": {c: locales.get(c) for c in countries},
        "statement": cfg.get("statement"), "license": provenance.get("license"),
        "attribution": provenance.get("attribution"), "upstream_commit": provenance.get("upstream_commit"),
        "directions": SEEGULL_DIRECTIONS, "by_country": by_country,
        "without_locale": [c for c in countries if c not in locales]}
