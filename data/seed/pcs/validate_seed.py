"""Stand-alone check of the pcs seed bank (run: .venv/bin/python data/seed/pcs/validate_seed.py).

Not the pipeline's schema check (that lives in the pcs study code); this is the authoring check that
the files in this directory were validated with. Exits 1 and lists every problem found.
"""
from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
LANGS = ["en", "de", "hi", "ne", "ur"]
DIMS = ["PDI", "IDV", "UAI"]
DOMAINS = ["workplace", "family", "social", "institutional"]
SCENARIO_COLUMNS = ["scenario_id", "dimension", "domain", "language", "prompt_a", "prompt_b",
                    "prompt_c", "translation_status", "notes"]
REVIEW_CRITERIA = ["register_naturalness", "address_forms", "dilemma_preservation", "no_calques"]
REVIEW_COLUMNS = ["scenario_id", "language", "condition", *REVIEW_CRITERIA, "decision", "reviewer"]
SCRIPT = {"en": "LATIN", "de": "LATIN", "hi": "DEVANAGARI", "ne": "DEVANAGARI", "ur": "ARABIC"}
# Function words that tell Hindi from Nepali (both Devanagari) and must appear in every prompt.
LANG_WORD = {"hi": "आप", "ne": "तपाईं", "ur": "آپ", "de": "Sie", "en": "you"}
# Hindi and Nepali share a script: each must not contain the other's second-person / copula forms.
FOREIGN_WORDS = {"hi": ("तपाईं", "हुनुहुन्छ", " छ।"), "ne": (" है।", " हैं।", "आपको", "आपके")}
QUESTION_END = ("?", "؟")

problems: list[str] = []


def problem(msg: str) -> None:
    problems.append(msg)


def letter_scripts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ch in text:
        if unicodedata.category(ch).startswith(("L", "M")):
            script = unicodedata.name(ch, "UNKNOWN").split()[0]
            counts[script] = counts.get(script, 0) + 1
    return counts


def sentences(text: str) -> int:
    return len([s for s in re.split(r"(?<=[.?!।؟۔])\s+", text.strip()) if s])


def main() -> int:
    sc = pd.read_csv(HERE / "scenarios.csv", dtype=str, keep_default_na=False)
    if list(sc.columns) != SCENARIO_COLUMNS:
        problem(f"scenarios.csv columns {list(sc.columns)} != {SCENARIO_COLUMNS}")
    if len(sc) != 300:
        problem(f"scenarios.csv has {len(sc)} rows, expected 300")
    dup = sc[sc.duplicated(["scenario_id", "language"], keep=False)]
    for _, r in dup.iterrows():
        problem(f"duplicate row {r.scenario_id}/{r.language}")

    ids = sorted(sc.scenario_id.unique())
    if len(ids) != 60:
        problem(f"{len(ids)} distinct scenario_id, expected 60")
    for sid in ids:
        m = re.fullmatch(r"(PDI|IDV|UAI)-(workplace|family|social|institutional)-0[1-5]", sid)
        if not m:
            problem(f"{sid}: id does not match DIM-domain-0N")
        langs = set(sc.loc[sc.scenario_id == sid, "language"])
        if langs != set(LANGS):
            problem(f"{sid}: languages {sorted(langs)} != {LANGS}")
    cells = sc[sc.language == "en"].groupby(["dimension", "domain"]).size()
    for dim in DIMS:
        for dom in DOMAINS:
            if cells.get((dim, dom), 0) != 5:
                problem(f"{dim} x {dom}: {cells.get((dim, dom), 0)} scenarios, expected 5")

    markers = yaml.safe_load((HERE / "indexical_markers.yaml").read_text(encoding="utf-8"))
    if set(markers) != set(LANGS):
        problem(f"indexical_markers.yaml languages {sorted(markers)} != {LANGS}")

    instructions: dict[tuple[str, str], set[str]] = {}
    for _, r in sc.iterrows():
        where = f"{r.scenario_id}/{r.language}"
        if not r.scenario_id.startswith(f"{r.dimension}-{r.domain}-"):
            problem(f"{where}: dimension/domain columns disagree with the id")
        allowed_status = {"source"} if r.language == "en" else {"authored", "reviewed"}
        if r.translation_status not in allowed_status:
            problem(f"{where}: translation_status {r.translation_status!r} not in {sorted(allowed_status)}")
        for col in ("prompt_a", "prompt_b", "prompt_c"):
            text = r[col]
            if not text.strip():
                problem(f"{where}: empty {col}")
                continue
            if not text.rstrip().endswith(QUESTION_END):
                problem(f"{where}: {col} does not end with a question")
            scripts = letter_scripts(text)
            total = sum(scripts.values())
            share = scripts.get(SCRIPT[r.language], 0) / max(total, 1)
            if share < 0.98:
                problem(f"{where}: {col} only {share:.0%} {SCRIPT[r.language]} letters ({scripts})")
            if LANG_WORD[r.language] not in text:
                problem(f"{where}: {col} lacks {LANG_WORD[r.language]!r} (language check)")
            for foreign in FOREIGN_WORDS.get(r.language, ()):
                if foreign in text:
                    problem(f"{where}: {col} contains {foreign!r}, a word of the sister language")
        # A = scenario + question; B and C insert text between them (Fifteen Percent Fluency appendix F).
        a = r.prompt_a
        q_start = max(a.rfind(". "), a.rfind("। "), a.rfind("۔ ")) + 2
        scenario, question = a[:q_start].strip(), a[q_start:].strip()
        for col in ("prompt_b", "prompt_c"):
            if not (r[col].startswith(scenario) and r[col].endswith(question)) or r[col] == a:
                problem(f"{where}: {col} is not prompt A's scenario + added text + A's question")
        instructions.setdefault((r.dimension, r.language), set()).add(
            r.prompt_b[len(scenario):-len(question)].strip())
        # Prompt A: 2-4 sentences incl. the question; B adds one instruction sentence, C adds 1-2 cue
        # sentences (Fifteen Percent Fluency appendix F's own Prompt C has 4 + 2).
        if not 2 <= sentences(a) <= 4:
            problem(f"{where}: prompt_a has {sentences(a)} sentences, want 2-4")
        cue = r.prompt_c[len(scenario):-len(question)].strip()
        if not 1 <= sentences(cue) <= 2:
            problem(f"{where}: implicit cue has {sentences(cue)} sentences")
        # Own-language markers, plus those of every language written in the same script.
        latin = SCRIPT[r.language] == "LATIN"
        text_c = r.prompt_c.casefold() if latin else r.prompt_c
        for lang in [l for l in LANGS if SCRIPT[l] == SCRIPT[r.language]]:
            for mk in markers.get(lang, []):
                if (mk.casefold() if latin else mk) in text_c:
                    problem(f"{where}: prompt_c contains indexical marker {mk!r} (list {lang})")
    for key, found in instructions.items():
        if len(found) != 1:
            problem(f"{key}: Prompt B instruction not identical across scenarios ({len(found)} variants)")

    rv = pd.read_csv(HERE / "translation_reviews.csv", dtype=str, keep_default_na=False)
    if list(rv.columns) != REVIEW_COLUMNS:
        problem(f"translation_reviews.csv columns {list(rv.columns)} != {REVIEW_COLUMNS}")
    expected = {(s, l, c) for s in ids for l in LANGS[1:] for c in "ABC"}
    got = set(zip(rv.scenario_id, rv.language, rv.condition))
    if len(rv) != len(expected) or got != expected:
        problem(f"translation_reviews.csv: {len(rv)} rows; missing {len(expected - got)}, extra {len(got - expected)}")
    # row completeness (criteria present, 1-5 scores, `authored` rows blank) is the library's check,
    # the one pcs-collect runs: stereolens.studies.pcs.scenarios.load_reviews
    from stereolens.studies.pcs.scenarios import load_reviews
    from stereolens.errors import DataError

    try:
        load_reviews(HERE / "translation_reviews.csv")
    except DataError as exc:
        problem(str(exc))

    reviewed = sc[sc.translation_status == "reviewed"]
    for _, r in reviewed.iterrows():
        rows = rv[(rv.scenario_id == r.scenario_id) & (rv.language == r.language)]
        if (rows.reviewer == "authored").any() or (rows.decision == "major_revision").any():
            problem(f"{r.scenario_id}/{r.language}: status 'reviewed' but a condition is unreviewed "
                    "or needs major revision")

    rub = yaml.safe_load((HERE / "rubrics.yaml").read_text(encoding="utf-8"))
    for dim in DIMS:
        feats = rub["dimensions"][dim]["features"]
        if len(feats) != 4:
            problem(f"rubrics {dim}: {len(feats)} features, expected 4")
        for f in feats:
            if sorted(f["anchors"]) != [1, 4, 7] or not all(str(v).strip() for v in f["anchors"].values()):
                problem(f"rubrics {dim}/{f.get('id')}: anchors must be non-empty 1/4/7")

    by_lang = sc.groupby("language")
    print(f"scenarios.csv: {len(sc)} rows, {len(ids)} scenarios, "
          f"rows per language { {k: int(v) for k, v in by_lang.size().items()} }")
    print(f"translation_reviews.csv: {len(rv)} rows, reviewed {int((rv.reviewer != 'authored').sum())}")
    words = sc.assign(n=sc.prompt_c.str.split().str.len()).groupby("language").n.max()
    print(f"longest prompt_c in words per language: { {k: int(v) for k, v in words.items()} }")
    print(f"markers per language: { {k: len(v) for k, v in markers.items()} }")
    if problems:
        print(f"{len(problems)} problem(s):")
        for p in problems:
            print("  -", p)
        return 1
    print("OK: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
