"""Manual validation (EspanStereo section 3.2, appendices D-E): questionnaire, panels, median rule, tables.

One questionnaire item per retrieved stereotype: the statement, up to three
example posts and the five options of Figure D1.  Options are *shown* from
"almost everyone believes it" to "it does not exist" and *scored* 5 down to 1
(1 = never observed, 5 = pervasive): :data:`DISPLAY_SCORES` is that mapping.
A panel is one country x category; each gets its own annotators (five in the
paper) with demographic columns.  A stereotype whose median score is <= 2 is
discarded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import ConfigError, DataError
from stereolens.io import refuse_unjudged

# display position (0 = first shown) -> score; Figure D1 shows the pervasive option first
DISPLAY_SCORES: tuple[int, ...] = (5, 4, 3, 2, 1)
DISCARD_AT_OR_BELOW = 2
DEMOGRAPHIC_COLUMNS = ("ethnicity", "gender", "religion", "sexual_orientation", "age_band", "education", "area")
# the categories of Tables D1-D10; simulated annotators draw from these
DEMOGRAPHIC_VALUES: dict[str, tuple[str, ...]] = {
    "ethnicity": ("white", "mestizo", "indigenous", "afro-descendant", "asian"),
    "gender": ("male", "female"),
    "religion": ("catholic", "evangelical", "christian_other", "jehovahs_witness", "jewish", "muslim", "atheist", "buddhist"),
    "sexual_orientation": ("heterosexual", "homosexual", "bisexual"),
    "age_band": ("0-21", "22-40", "41-60", "61-80", "80+"),
    "education": ("none", "primary", "secondary", "college", "postgraduate"),
    "area": ("urban", "rural"),
}


def annotators_schema(group_column: str, *, what: str):
    """Annotator demographics (Tables D1-D10): one row per annotator, its group (panel or country) and every
    demographic column filled in (a value outside :data:`DEMOGRAPHIC_VALUES` is kept and reported as given)."""
    import pandera.pandas as pa

    from stereolens.tables import text_column

    columns = {"annotator_id": text_column(unique=True, what="annotator_id"), group_column: text_column(what=group_column)}
    columns.update({col: text_column(what=f"{col} (every {what} needs all demographic columns)") for col in DEMOGRAPHIC_COLUMNS})
    return pa.DataFrameSchema(columns, name=f"{what} demographics")


def likert_scale(display_texts: Sequence[str]) -> Scale:
    """The Figure D1 scale: options listed in display order, each labelled with its score."""
    if len(display_texts) != len(DISPLAY_SCORES):
        raise DataError(f"the Figure D1 scale has five options, got {len(display_texts)}")
    return Scale("figure_d1", "ordinal", options=DISPLAY_SCORES, option_texts=tuple(display_texts))


def figure_d1_scale(prompts_path: str | Path = "data/seed/stereo/prompts.yaml", language: str = "es") -> Scale:
    """The Figure D1 scale for ``stereolens annotation import --scale figure_d1``: the project's option texts
    with ``<country>`` as a placeholder (a Label Studio export of the project's tasks carries each task's own
    texts, which map back by position), or the bare scores where the templates are not at hand."""
    from stereolens.studies.stereo.prompts import load_prompts

    if not Path(prompts_path).exists():
        return likert_scale([str(score) for score in DISPLAY_SCORES])
    return likert_scale([t.format(country="<country>") for t in load_prompts(prompts_path, language).likert_display])


def score_of_display_position(position: int) -> int:
    """Score of the option shown at ``position`` (0-based): 0 -> 5 (pervasive) ... 4 -> 1 (never observed)."""
    return DISPLAY_SCORES[position]


def questionnaire(stereotypes: pd.DataFrame, prompts, *, n_examples: int = 3) -> pd.DataFrame:
    """Items ``item_id, country, category, panel, text, examples, options`` (options in display order)."""
    rows = []
    for r in stereotypes.itertuples(index=False):
        examples = json.loads(r.examples)[:n_examples] if isinstance(r.examples, str) else []
        texts = [t.format(country=prompts.country(r.country)["name"]) for t in prompts.likert_display]
        body = f"Estereotipo: {r.stereotype}\nEjemplos:\n" + "\n".join(f"- {e}" for e in examples)
        rows.append({
            "item_id": r.stereotype_id, "country": r.country, "category": r.category, "panel": f"{r.country}/{r.category}",
            "text": body, "n_examples": len(examples), "examples": json.dumps(examples, ensure_ascii=False),
            "options": " | ".join(f"{t} [{s}]" for t, s in zip(texts, DISPLAY_SCORES)), "source": r.source,
        })
    return pd.DataFrame(rows)


def option_texts(items: pd.DataFrame, prompts) -> dict[str, list[str]]:
    """item_id -> the Figure D1 option texts in display order, with the item's country filled in."""
    return {r.item_id: [t.format(country=prompts.country(r.country)["name"]) for t in prompts.likert_display]
            for r in items.itertuples(index=False)}


def _panel_seed(seed: int, panel: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{panel}".encode()).digest()[:4], "little")


def simulate_panels(items: pd.DataFrame, scale: Scale, *, n_annotators: int, reliability: float, bias: float,
                    seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seeded simulated judgements and annotator demographics, one panel per country x category."""
    from stereolens.annotation.simulate import simulate_annotations

    judgements, annotators = [], []
    for panel, part in items.groupby("panel", sort=True):
        pseed = _panel_seed(seed, panel)
        sim = simulate_annotations(part[["item_id"]], n_annotators, scale, reliability, bias, pseed)
        sim["annotator_id"] = panel.replace("/", "-") + "-" + sim["annotator_id"]
        sim["panel"] = panel
        judgements.append(sim)
        rng = np.random.default_rng(pseed + 1)
        for aid in sorted(sim["annotator_id"].unique()):
            row = {"annotator_id": aid, "panel": panel, "country": part["country"].iloc[0], "category": part["category"].iloc[0]}
            row.update({col: str(rng.choice(vals)) for col, vals in DEMOGRAPHIC_VALUES.items()})
            row["source"] = "simulated"
            annotators.append(row)
    return pd.concat(judgements, ignore_index=True), pd.DataFrame(annotators)


def import_panels(judgements_path: str | Path, annotators_path: str | Path, scale: Scale, items: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Completed judgements (``item_id, annotator_id, label`` with label = score 1..5, or a Label Studio export)
    and annotator demographics.  Where the demographics have a ``label_studio_user`` column (the user's number
    in Label Studio or its email), judgements by those users are credited to the row's ``annotator_id``."""
    from stereolens.annotation.label_studio import one_to_one_map
    from stereolens.annotation.tasks import import_judgements
    from stereolens.tables import read_table

    annotators = read_table(annotators_path, annotators_schema("panel", what="validation annotator"), what="annotator demographics")
    users = None
    if "label_studio_user" in annotators.columns:
        # each user credited to one annotator and no annotator to two users; a row without a user maps nobody
        users = one_to_one_map(((f"line {i + 2}, column label_studio_user", user, annotator) for i, (user, annotator)
                                in enumerate(zip(annotators["label_studio_user"], annotators["annotator_id"]))
                                if user.strip()), where=f"annotator demographics {annotators_path}")
    judgements = import_judgements(judgements_path, scale, known_items=items["item_id"], source="human", annotator_map=users)
    known = set(annotators["annotator_id"])
    unknown = ~judgements["annotator_id"].isin(known)
    if unknown.any():
        pos = int(unknown.idxmax())
        raise DataError(f"{judgements_path} line {pos + 2}, column annotator_id: {judgements.at[pos, 'annotator_id']!r} "
                        f"is not in {annotators_path}")
    panel_of = items.set_index("item_id")["panel"]
    judgements["panel"] = judgements["item_id"].map(panel_of)
    who = annotators.set_index("annotator_id")["panel"]
    wrong = judgements["panel"] != judgements["annotator_id"].map(who)
    if wrong.any():
        pos = int(wrong.idxmax())
        raise DataError(f"{judgements_path} line {pos + 2}, column annotator_id: annotator {judgements.at[pos, 'annotator_id']!r} belongs to panel "
                        f"{who[judgements.at[pos, 'annotator_id']]!r}, item {judgements.at[pos, 'item_id']!r} to {judgements.at[pos, 'panel']!r}")
    # an item nobody judged would have no median and drop out of the validated set, counted as rejected
    refuse_unjudged(items["item_id"], judgements["item_id"], where=str(judgements_path))
    annotators["source"] = "human"
    return judgements, annotators


def panel_scale() -> Scale:
    """The Figure D1 scores as a model answers them: the option sentences are in the item text, numbered by score,
    and the answer is the score (so a log-likelihood panel scores the five short continuations " 5" .. " 1")."""
    return Scale("figure_d1_scores", "ordinal", options=DISPLAY_SCORES, option_texts=tuple(map(str, DISPLAY_SCORES)))


def llm_panel_panels(models, items: pd.DataFrame, prompts, *, template: str, method: str = "auto",
                     seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Figure D1 judgements by a panel of language models (``source=llm_panel``) and the panel's members per panel.

    Every model answers every item, reading the instructions of ``prompts.validation_panel`` for the item's country
    and the item with its options numbered by score.  Unanswerable replies keep a NaN label (counted by the stage,
    left out of the median).  Members have no demographics: they are models, named with their identity.
    """
    from stereolens.annotation.llm_panel import llm_panel_annotations

    if not prompts.validation_panel:
        raise DataError("annotation=llm_panel: the prompt templates lack `validation_panel`")
    scale = panel_scale()
    frames = []
    for country, part in items.groupby("country", sort=True):
        name = prompts.country(country)["name"]
        texts = [t.format(country=name) for t in prompts.likert_display]
        options = "\n".join(f"{score}. {t}" for score, t in zip(DISPLAY_SCORES, texts))
        shown = part.assign(text=part["text"] + "\nOpciones:\n" + options)
        frames.append(llm_panel_annotations(models, shown, scale, prompts.validation_panel.format(country=name),
                                            template=template, method=method, seed=seed))
    judgements = pd.concat(frames, ignore_index=True)
    judgements["panel"] = judgements["item_id"].map(items.set_index("item_id")["panel"])
    members = judgements[["annotator_id", "panel", "model_identity"]].drop_duplicates()
    members = members.assign(country=members["panel"].str.split("/").str[0], category=members["panel"].str.split("/").str[1],
                             source="llm_panel")
    return judgements, members.reset_index(drop=True)


def decide(judgements: pd.DataFrame) -> pd.DataFrame:
    """Per item: median score, valid votes (score >= 3), invalid votes (<= 2), and ``validated`` = median > 2."""
    g = judgements.assign(label=pd.to_numeric(judgements["label"])).groupby("item_id")["label"]
    out = pd.DataFrame({
        # an unanswered label (a panel model that gave no parseable score) is not an annotator's judgement
        "median": g.median(), "n_annotators": g.count(),
        "valid_votes": g.apply(lambda s: int((s >= 3).sum())), "invalid_votes": g.apply(lambda s: int((s <= DISCARD_AT_OR_BELOW).sum())),
    }).reset_index()
    out["validated"] = out["median"] > DISCARD_AT_OR_BELOW
    out["vote_ratio"] = out["valid_votes"].astype(str) + ":" + out["invalid_votes"].astype(str)
    return out


def validation_rates(stereotypes: pd.DataFrame, decisions: pd.DataFrame, countries: Sequence[str], categories: Sequence[str]) -> pd.DataFrame:
    """Table 7: validated / retrieved per country x category and overall (long format, empty cells kept)."""
    merged = stereotypes.merge(decisions[["item_id", "validated"]], left_on="stereotype_id", right_on="item_id", how="left")
    merged["validated"] = merged["validated"].fillna(False).astype(bool)
    rows = []
    for c in countries:
        for k in [*categories, "overall"]:
            part = merged[(merged["country"] == c) & ((merged["category"] == k) | (k == "overall"))]
            n, v = len(part), int(part["validated"].sum())
            rows.append({"country": c, "category": k, "retrieved": n, "validated": v, "rate": v / n if n else float("nan")})
    return pd.DataFrame(rows)


def vote_ratio_table(stereotypes: pd.DataFrame, decisions: pd.DataFrame, country: str, categories: Sequence[str]) -> pd.DataFrame:
    """Tables E1-E5 for one country: validated stereotypes per category by valid:invalid vote ratio."""
    merged = stereotypes.merge(decisions, left_on="stereotype_id", right_on="item_id")
    merged = merged[(merged["country"] == country) & merged["validated"]]
    ratios = sorted(merged["vote_ratio"].unique(), key=lambda r: -int(r.split(":")[0]))
    rows = []
    for k in categories:
        part = merged[merged["category"] == k]
        row = {"category": k, **{r: int((part["vote_ratio"] == r).sum()) for r in ratios}}
        row["total"] = len(part)
        rows.append(row)
    total = {"category": "total", **{r: int((merged["vote_ratio"] == r).sum()) for r in ratios}, "total": len(merged)}
    return pd.DataFrame([*rows, total])


def demographics_table(annotators: pd.DataFrame, country: str, categories: Sequence[str]) -> pd.DataFrame:
    """Tables D1-D10 shape for one country: rows ``field=value``, one column per panel (category), counts."""
    part = annotators[annotators["country"] == country] if "country" in annotators.columns else \
        annotators[annotators["panel"].str.startswith(country + "/")]
    rows = []
    for col in DEMOGRAPHIC_COLUMNS:
        values = list(DEMOGRAPHIC_VALUES[col]) + sorted(set(part[col].dropna()) - set(DEMOGRAPHIC_VALUES[col]))
        for v in values:
            row = {"field": col, "value": v}
            for k in categories:
                row[k] = int(((part["panel"] == f"{country}/{k}") & (part[col] == v)).sum())
            rows.append(row)
    return pd.DataFrame(rows)


JUDGEMENT_COLUMNS = ("item_id", "annotator_id", "label", "source", "panel")
DECISION_COLUMNS = ("item_id", "median", "n_annotators", "valid_votes", "invalid_votes", "validated", "vote_ratio")


def collect_judgements(source: str, items: pd.DataFrame, scale: Scale, prompts, *, annotation: Mapping[str, Any],
                       validation: Mapping[str, Any], default_model: Mapping[str, Any],
                       load_member: Callable[[dict[str, Any]], Any], tasks_dir: Path, seed: int
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The judgements on ``items`` and the validators who gave them, from ``annotation.source``:
    seeded simulated panels, a human import, or a panel of language models (``load_member`` loads each)."""
    if source == "simulated":
        sim = annotation.get("simulator", {})
        if items.empty:
            return (pd.DataFrame(columns=["item_id", "annotator_id", "label", "truth", "source", "panel"]),
                    pd.DataFrame(columns=["annotator_id", "panel", "country", "category", *DEMOGRAPHIC_COLUMNS, "source"]))
        return simulate_panels(items, scale, n_annotators=int(sim.get("n_annotators", 5)),
                               reliability=float(sim.get("reliability", 0.8)), bias=float(sim.get("bias", 0.0)), seed=seed)
    if source == "human":
        if not validation.get("judgements") or not validation.get("annotators"):
            raise ConfigError("annotation=human: set study.stereo.validation.judgements and .annotators to the completed judgements (CSV or Label Studio export) and demographics CSV "
                              f"(tasks are in {tasks_dir})")
        return import_panels(validation["judgements"], validation["annotators"], scale, items)
    if source == "llm_panel":
        from stereolens.annotation.llm_panel import DEFAULT_TEMPLATE
        from stereolens.stages.kit import model_label

        panel = annotation.get("panel") or {}
        specs = panel.get("models") or [default_model]  # empty = the study's own (top-level) model
        members = {model_label(m): load_member(dict(m)) for m in specs}
        if items.empty:
            return (pd.DataFrame(columns=list(JUDGEMENT_COLUMNS)),
                    pd.DataFrame(columns=["annotator_id", "panel", "model_identity", "country", "category", "source"]))
        return llm_panel_panels(members, items, prompts, template=panel.get("template", DEFAULT_TEMPLATE),
                                method=panel.get("method", "auto"), seed=int(panel.get("seed", 0)))
    raise ConfigError(f"study stereo validates with annotation=simulated, human or llm_panel, not {source!r}")


def decide_answered(judgements: pd.DataFrame, source: str) -> tuple[pd.DataFrame, int]:
    """The median decision per item over the answered labels, and how many labels no one could read
    (an LLM panel's unparseable replies: out of the median)."""
    labels = pd.to_numeric(judgements["label"], errors="coerce") if len(judgements) else pd.Series(dtype=float)
    answered = judgements[labels.notna()] if len(judgements) else judgements
    decisions = decide(answered) if len(answered) else pd.DataFrame(columns=list(DECISION_COLUMNS))
    decisions["source"] = source
    return decisions, int(labels.isna().sum())


def keep_validated(stereotypes: pd.DataFrame, decisions: pd.DataFrame, source: str) -> pd.DataFrame:
    """The stereotypes whose median kept them, with their median, vote ratio and who validated them.

    A stereotype without a decision is left out: an imported file that leaves an item unjudged is refused by
    :func:`import_panels` before this, so here that is only an item every member of an LLM panel answered
    unreadably (its unreadable labels are counted in the summary's ``n_unanswered``)."""
    validated = stereotypes.merge(decisions[["item_id", "median", "vote_ratio", "validated"]], left_on="stereotype_id",
                                  right_on="item_id", how="inner")
    validated = validated[validated["validated"].astype(bool)].drop(columns=["item_id", "validated"])
    validated["validation_source"] = source
    return validated


def validation_summary(source: str, items: pd.DataFrame, judgements: pd.DataFrame, annotators: pd.DataFrame,
                       validated: pd.DataFrame, n_unanswered: int) -> dict[str, Any]:
    """reports/stereo/validation/summary.json."""
    summary = {"annotation_source": source, "n_items": len(items), "n_judgements": len(judgements),
               "n_unanswered": n_unanswered,  # labels no one could read (an LLM panel's unparseable replies): out of the median
               "n_validated": len(validated), "validation_rate": len(validated) / len(items) if len(items) else None,
               # the paper has five validators per panel; an import with another count is reported, not refused
               "annotators_per_panel": {str(k): int(n) for k, n in annotators.groupby("panel").size().items()} if len(annotators) else {}}
    if source == "llm_panel":
        summary["panel_models"] = sorted(annotators["annotator_id"].unique().tolist()) if len(annotators) else []
    return summary
