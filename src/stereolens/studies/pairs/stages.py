"""DVC stages of the pairs study (seed 002, AmchiBias): construction, scoring, report.

attributes -> validate -> sentences -> pairs -> translate -> evaluate -> report.
Each stage reads only its declared params and passes typed arguments to the modules.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.io import read_csv_checked, write_csv, write_json, write_text
from stereolens.stages.common import load_params, model_cache_dir
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

STUDY = "pairs"
EVALUATION_SETS = ("starter", "constructed", "crows")
ATTRIBUTES_RUN = declare_run(STUDY, "attributes", params=("attributes", "groups"),
                             metrics=("groups", "tuples", "groups_without_attributes"))
VALIDATE_RUN = declare_run(STUDY, "validate", params=("validation",), metrics=("fleiss_kappa", "tuples", "tuples_kept"))
SENTENCES_RUN = declare_run(STUDY, "sentences", params=("sentences",), metrics=("generated", "kept", "removed"))
PAIRS_RUN = declare_run(STUDY, "pairs", params=("contrast",), metrics=("pairs", "refused"))
TRANSLATE_RUN = declare_run(STUDY, "translate", params=("translation",), metrics=("rows", "flagged_not_minimal"))
EVALUATE_RUN = declare_run(STUDY, "evaluate", params=("metric", "evaluation"),
                           metrics=("{set}.pairs", "{set}.cache_hits", "{set}.cache_misses", "seconds"))
# one run per evaluation set (the variant); its cells are the set's languages x dimensions, NaN where empty
REPORT_RUN = declare_run(STUDY, "report", params=("evaluation",),
                         metrics=("bias_score.{language}.{dimension}", "n.{language}.{dimension}",
                                  "lms.{language}.{dimension}"))
SEED = Path("data/seed/pairs")
INTERIM = Path("data/interim/pairs")
PROCESSED = Path("data/processed/pairs")
REPORTS = Path("reports/pairs")
MASKED_KINDS = ("masked",)
# seed 002 Table 2: pairs per dimension in the released benchmark
PAPER_TABLE2 = {"caste": 101, "language": 66, "occupation": 55, "nativity": 43, "age": 16, "religion": 12,
                "gender": 12, "region": 8}


def _generator(p: dict[str, Any]):
    """The generator: ``study.pairs.generator`` (a model config) or, when null, the default model."""
    from stereolens.models import ResponseCache, load_model, spec_from_config

    cfg = p.get("study.pairs.generator") or p["model"]
    if cfg.get("kind") == "masked":
        raise ConfigError(f"study.pairs.generator: {cfg.get('id')!r} is a masked LM and cannot generate; "
                          "set study.pairs.generator to a causal, chat or completion model config")
    return cfg, load_model(spec_from_config(cfg), cache=ResponseCache(model_cache_dir()))


def _all_groups(p: dict[str, Any]):
    """The configured groups with their surface forms from the seed table."""
    from stereolens.studies.pairs.minimal_pairs import groups_from_config, read_group_forms

    return groups_from_config(p["study.pairs.groups"], read_group_forms(SEED / "group_forms.csv"))


def _groups(p: dict[str, Any]):
    groups = _all_groups(p)
    subset = p.get("study.pairs.construct_groups")
    if subset:
        unknown = sorted(set(subset) - {g.name for g in groups})
        if unknown:
            raise ConfigError(f"study.pairs.construct_groups names unknown group(s) {unknown}")
    return groups, (set(subset) if subset else None)


def _request(gen_cfg: dict, prompt: str, **kwargs):
    """A completion prompt, or the same text as one user message for a chat generator."""
    from stereolens.models.base import ChatMessage, GenerationRequest

    if gen_cfg.get("kind") == "chat":
        return GenerationRequest(messages=(ChatMessage("user", prompt),), **kwargs)
    return GenerationRequest(prompt=prompt, **kwargs)


def _generate(lm, requests: list, what: str) -> list:
    """Generations in chunks so that a long run shows progress (quiet when not a TTY)."""
    from tqdm import tqdm

    out: list = []
    step = 8
    with tqdm(total=len(requests), desc=what, unit="prompt", disable=not sys.stderr.isatty()) as bar:
        for i in range(0, len(requests), step):
            out += lm.generate(requests[i:i + step])
            bar.update(len(requests[i:i + step]))
    return out


# ---------------------------------------------------------------- 1. attributes


@stage("pairs-attributes")
def attributes(args: argparse.Namespace) -> None:
    """Stereotypical attributes per group from the generator (seed 002 appendix B), parsed robustly."""
    from stereolens.studies.pairs.generation import (ATTRIBUTE_PROMPT, COMPLETION_LIST_OPENING,
                                                     attribute_rejection, parse_json_list)
    from stereolens.tracking import stage_run

    p = load_params("model", "study.pairs.generator", "study.pairs.groups", "study.pairs.construct_groups",
                    "study.pairs.region", "study.pairs.attributes", "tracking", path=args.params)
    cfg = p["study.pairs.attributes"]
    n, max_tokens = int(cfg["n"]), int(cfg.get("max_tokens", 96))
    region = p["study.pairs.region"]
    groups, subset = _groups(p)
    chosen = [g for g in groups if subset is None or g.name in subset]
    gen_cfg, lm = _generator(p)
    start = time.perf_counter()
    chat = gen_cfg.get("kind") == "chat"
    opening = "" if chat else COMPLETION_LIST_OPENING
    prompts = [ATTRIBUTE_PROMPT.format(region=region["name"], context=region["adjective"], group=g.name,
                                       dimension=g.dimension.capitalize(), n=n) + opening for g in chosen]
    answers = _generate(lm, [_request(gen_cfg, q, max_tokens=max_tokens, stop=("]",)) for q in prompts],
                        "attributes")
    rows, raw = [], []
    for g, answer in zip(chosen, answers):
        # a completion model continues the opened list: parse it with the opening and the stop's closing bracket
        parsed = parse_json_list(answer.text) if chat else parse_json_list(answer.text + "]", prefix='["')
        names = [*g.surface(), *g.surface("kok"), region["name"], region["adjective"]]
        rejected = {a: attribute_rejection(a, names) for a in parsed}
        parsed = [a for a in parsed if not rejected[a]][:n]
        raw.append({"group": g.name, "dimension": g.dimension, "output": answer.text, "parsed": len(parsed),
                    "rejected": {a: why for a, why in rejected.items() if why}})
        rows += [{"tuple_id": f"{g.name}::{a}", "dimension": g.dimension, "group": g.name, "attribute": a,
                  "source": f"generator:{gen_cfg['id']}"} for a in parsed]
    table = pd.DataFrame(rows, columns=["tuple_id", "dimension", "group", "attribute", "source"])
    table = table.drop_duplicates("tuple_id")
    write_csv(INTERIM / "attributes.csv", table)
    write_json(INTERIM / "attributes_raw.json", {"generator": gen_cfg["id"], "n_requested": n, "outputs": raw})
    empty = [r["group"] for r in raw if not r["parsed"]]
    with stage_run(p["tracking"], ATTRIBUTES_RUN, model=gen_cfg["id"],
                   params={"attributes": cfg, "groups": [g.name for g in chosen]},
                   tags={"generator": gen_cfg["id"], "source": "generator"}) as run:
        run.log_metrics({"groups": len(chosen), "tuples": len(table), "groups_without_attributes": len(empty)})
    print(f"pairs-attributes: {len(table)} (group, attribute) tuples from {len(chosen)} groups "
          f"({len(empty)} without a parsable list) in {time.perf_counter() - start:.1f}s")


# ---------------------------------------------------------------- 2. validation


@stage("pairs-validate")
def validate(args: argparse.Namespace) -> None:
    """Three annotators judge each tuple yes/no; keep >= 2 yes; Fleiss' kappa, Landis-Koch label, kappa gate."""
    from stereolens.annotation.agreement import landis_koch
    from stereolens.annotation.round import collect_judgements, gate_round, review_round
    from stereolens.annotation.tasks import export_tasks
    from stereolens.studies.pairs.validation import INSTRUCTIONS, annotation_config, keep_tuples, simulated_truth
    from stereolens.tracking import stage_run

    p = load_params("annotation", "study.pairs.validation", "study.pairs.region", "tracking", "seed", path=args.params)
    vcfg = p["study.pairs.validation"]
    acfg = annotation_config(p["annotation"], vcfg)
    tuples = read_csv_checked(INTERIM / "attributes.csv", ["tuple_id", "group", "attribute"], what="pairs attributes",
                              dtype=str, keep_default_na=False)
    items = tuples.assign(item_id=tuples["tuple_id"], text=tuples["group"] + ": " + tuples["attribute"])
    instructions = INSTRUCTIONS.format(region=p["study.pairs.region"]["name"])
    export_tasks(items[["item_id", "text"]], acfg.scale, instructions, REPORTS / "validation" / "tasks",
                 name="tuple_tasks")
    if items.empty:
        raise ConfigError("pairs-validate: the generator gave no tuples to validate (see attributes_raw.json)")
    if acfg.source == "human":
        path = vcfg.get("judgements")
        if not path or not Path(path).exists():
            raise ConfigError(f"annotation.source=human: study.pairs.validation.judgements ({path!r}) is not a "
                              f"judgements CSV; the tasks are in {REPORTS / 'validation' / 'tasks'}")
        judgements = collect_judgements(acfg, items[["item_id"]], judgements_path=path)
    else:
        truth = simulated_truth(items[["item_id"]], valid_share=float(vcfg.get("simulated_valid_share", 0.85)),
                                seed=int(p["seed"]))
        judgements = collect_judgements(acfg, truth, instructions=instructions)
    write_csv(INTERIM / "tuple_judgements.csv", judgements)
    review = review_round(judgements, acfg, study=STUDY, artefact=str(INTERIM / "tuple_judgements.csv"),
                          items=items[["item_id"]], gate=False, seed=int(p["seed"]))
    enforce = bool(vcfg.get("enforce_gate", True))
    review.gate = gate_round(review, acfg, study=STUDY, artefact=str(INTERIM / "tuple_judgements.csv"),
                             report_dir=REPORTS / "validation" / "quality", raise_on_failure=enforce)
    review.write(REPORTS / "validation")
    kept = keep_tuples(judgements, tuples.assign(item_id=tuples["tuple_id"]), min_yes=int(vcfg.get("min_yes", 2)))
    kept = kept.drop(columns=["item_id"]).assign(annotation_source=acfg.source)
    write_csv(INTERIM / "tuples.csv", kept)
    kappa = review.agreement["fleiss_kappa"]
    summary = {"source": acfg.source, "tuples": int(len(kept)), "kept": int(kept["keep"].sum()),
               "fleiss_kappa": kappa.value, "ci_low": kappa.ci_low, "ci_high": kappa.ci_high,
               "landis_koch": landis_koch(kappa.value), "kappa_gate": acfg.thresholds.min_fleiss_kappa,
               "gate_passed": bool(review.gate.success), "gate_enforced": enforce,
               "paper": {"tuples": 370, "kept": 316, "agreement": "moderate"}}
    write_json(REPORTS / "validation" / "summary.json", summary)
    with stage_run(p["tracking"], VALIDATE_RUN, annotation_source=acfg.source,
                   params={"validation": vcfg}, tags={"annotations_simulated": acfg.source == "simulated",
                                                      "gate_passed": bool(review.gate.success)}) as run:
        run.log_metrics({"fleiss_kappa": kappa.value, "tuples": len(kept), "tuples_kept": int(kept["keep"].sum())})
    print(f"pairs-validate ({acfg.source}): kept {summary['kept']} of {summary['tuples']} tuples, Fleiss' kappa "
          f"{kappa.value:.3f} ({summary['landis_koch']}), gate {summary['kappa_gate']} "
          f"{'passed' if summary['gate_passed'] else 'FAILED (reported, not enforced)'}")


# ---------------------------------------------------------------- 3. sentences


@stage("pairs-sentences")
def sentences(args: argparse.Namespace) -> None:
    """Sentences per kept tuple (seed 002 appendix A), automatic filters with reasons, the review file."""
    from stereolens.studies.pairs.filters import filter_sentences
    from stereolens.studies.pairs.generation import SENTENCE_PROMPT, parse_numbered
    from stereolens.studies.pairs.review import apply_review, export_review
    from stereolens.tracking import stage_run

    p = load_params("model", "study.pairs.generator", "study.pairs.groups", "study.pairs.region",
                    "study.pairs.sentences", "tracking", path=args.params)
    cfg = p["study.pairs.sentences"]
    k, max_words = int(cfg["per_tuple"]), int(cfg.get("max_words", 15))
    tuples = read_csv_checked(INTERIM / "tuples.csv", ["tuple_id", "dimension", "group", "attribute", "keep"],
                              what="validated tuples")
    tuples = tuples[tuples["keep"].astype(str).str.lower() == "true"]
    gen_cfg, lm = _generator(p)
    context = p["study.pairs.region"]["adjective"]
    region_words = [p["study.pairs.region"]["name"], context]
    group_terms = {g.name: [*g.surface(), *region_words] for g in _all_groups(p)}
    prompts = [SENTENCE_PROMPT.format(context=context, k=k, max_words=max_words, dimension=t.dimension.capitalize(),
                                      group=t.group, attribute=t.attribute) for t in tuples.itertuples()]
    answers = _generate(lm, [_request(gen_cfg, q, max_tokens=int(cfg.get("max_tokens", 24 * k)))
                             for q in prompts], "sentences")
    rows = []
    for t, answer in zip(tuples.itertuples(), answers):
        for j, s in enumerate(parse_numbered(answer.text, limit=k)):
            rows.append({"sentence_id": f"{t.tuple_id}::{j + 1}", "tuple_id": t.tuple_id, "dimension": t.dimension,
                         "group": t.group, "attribute": t.attribute, "sentence": s,
                         "source": f"generator:{gen_cfg['id']}"})
    generated = pd.DataFrame(rows, columns=["sentence_id", "tuple_id", "dimension", "group", "attribute", "sentence",
                                            "source"])
    kept, removed = filter_sentences(generated, max_words=max_words, min_words=int(cfg.get("min_words", 3)),
                                     near_duplicate_ratio=float(cfg.get("near_duplicate_ratio", 0.9)),
                                     synonyms=cfg.get("synonyms") or {}, group_terms=group_terms)
    write_csv(INTERIM / "sentences_generated.csv", generated)
    write_csv(INTERIM / "sentences_removed.csv", removed)
    export_review(kept, REPORTS / "sentences" / "review")
    kept = kept.assign(review_status="unreviewed", review_reason="")
    review_path = cfg.get("review")
    if review_path:
        kept, dropped = apply_review(kept, review_path)
        removed = pd.concat([removed, dropped], ignore_index=True)
        write_csv(INTERIM / "sentences_removed.csv", removed)
    write_csv(INTERIM / "sentences.csv", kept)
    reasons = removed["reason"].str.split(r" \(| of | into | '", regex=True).str[0].value_counts().to_dict() \
        if len(removed) else {}
    write_json(REPORTS / "sentences" / "filter_summary.json",
               {"generated": len(generated), "kept": len(kept), "removed": len(removed), "reasons": reasons,
                "reviewed": bool(review_path)})
    with stage_run(p["tracking"], SENTENCES_RUN, model=gen_cfg["id"], params={"sentences": cfg},
                   tags={"generator": gen_cfg["id"], "sentences_reviewed": bool(review_path)}) as run:
        run.log_metrics({"generated": len(generated), "kept": len(kept), "removed": len(removed)})
    print(f"pairs-sentences: {len(generated)} generated, {len(removed)} removed by filters/review, {len(kept)} kept "
          f"({'reviewed' if review_path else 'unreviewed'})")


# ---------------------------------------------------------------- 4. minimal pairs


@stage("pairs-pairs")
def pairs(args: argparse.Namespace) -> None:
    """Minimal pairs from the contrast map with the occupation-coupling lists and the token-diff check."""
    from stereolens.studies.pairs.minimal_pairs import REFUSAL_REASONS, Coupling, build_pairs, check_contrast_map
    from stereolens.tracking import stage_run

    p = load_params("study.pairs.groups", "study.pairs.construct_groups", "study.pairs.contrast",
                    "study.pairs.coupling", "tracking", path=args.params)
    groups, _ = _groups(p)
    contrast = p["study.pairs.contrast"]
    check_contrast_map(contrast, groups)
    sents = read_csv_checked(INTERIM / "sentences.csv", ["sentence_id", "dimension", "group", "attribute", "sentence",
                                                         "review_status"], what="pairs sentences")
    built, refused = build_pairs(sents, groups, contrast, Coupling.from_config(p["study.pairs.coupling"]))
    classes = read_csv_checked(SEED / "group_classes.csv", ["group", "class"], what="group classes")
    built = built.assign(pair_id="c" + pd.Series(range(1, len(built) + 1), dtype=str).str.zfill(4).to_numpy(),
                         language="en", group_class=built["group_stereo"].map(classes.set_index("group")["class"]),
                         source="generator", translation_status="source",
                         review_status=built["sentence_id"].map(sents.set_index("sentence_id")["review_status"]))
    write_csv(PROCESSED / "constructed_en.csv", built)
    write_csv(INTERIM / "pairs_refused.csv", refused)
    refusals = {str(k): int(v) for k, v in refused["reason_code"].value_counts().items()}
    write_json(REPORTS / "construction" / "pairs_summary.json",
               {"sentences": len(sents), "pairs": len(built), "refused": len(refused), "refusals_by_reason": refusals,
                "refusal_reasons": REFUSAL_REASONS})
    counts = built["dimension"].value_counts()
    table = pd.DataFrame([{"dimension": d, "n": int(counts.get(d, 0)), "paper_n": n} for d, n in PAPER_TABLE2.items()])
    table.loc[len(table)] = {"dimension": "total", "n": int(counts.sum()), "paper_n": sum(PAPER_TABLE2.values())}
    write_csv(REPORTS / "construction" / "table2_pairs_per_dimension.csv", table)
    with stage_run(p["tracking"], PAIRS_RUN, params={"contrast": contrast}) as run:
        run.log_metrics({"pairs": len(built), "refused": len(refused)})
    by_reason = ", ".join(f"{k} {v}" for k, v in refusals.items()) or "none"
    print(f"pairs-pairs: {len(built)} minimal pairs, {len(refused)} refused ({by_reason}; reasons in "
          f"{INTERIM / 'pairs_refused.csv'})")


# ---------------------------------------------------------------- 5. translation


@stage("pairs-translate")
def translate(args: argparse.Namespace) -> None:
    """Machine translation through the model layer (marked machine); reviewed translations imported."""
    from stereolens.studies.pairs.translation import (error_category_counts, flag_translations, import_reviewed,
                                                      machine_translate, merge_reviewed)
    from stereolens.tracking import stage_run

    p = load_params("model", "study.pairs.generator", "study.pairs.groups", "study.pairs.translation", "tracking",
                    path=args.params)
    cfg = p["study.pairs.translation"]
    groups = _all_groups(p)
    en = read_csv_checked(PROCESSED / "constructed_en.csv", ["pair_id", "sent_stereo", "sent_anti"],
                          what="constructed pairs")
    gen_cfg, lm = _generator(p)
    frames = [en]
    for target in cfg["targets"]:
        machine = machine_translate(lm, en, language=target["language"], language_name=target["name"],
                                    script=target["script"], max_tokens=int(cfg.get("max_tokens", 48)),
                                    chat=gen_cfg.get("kind") == "chat")
        machine = machine.assign(source=f"machine translation:{gen_cfg['id']}")
        frames.append(flag_translations(machine, groups, language=target["language"]))
    out = pd.concat(frames, ignore_index=True)
    reviewed = import_reviewed(cfg["reviewed"], known_pairs=en["pair_id"]) if cfg.get("reviewed") else None
    out, usage = merge_reviewed(out, reviewed, groups, scripts={t["language"]: t["script"] for t in cfg["targets"]})
    write_csv(PROCESSED / "constructed.csv", out)
    flagged = int((out.get("minimal_ok", pd.Series(dtype=bool)).astype(str).str.lower() == "false").sum())
    is_reviewed = out["translation_status"] == "reviewed"
    write_json(REPORTS / "construction" / "translation.json",
               {"generator": gen_cfg["id"], "machine": int((out["translation_status"] == "machine").sum()),
                "reviewed": int(is_reviewed.sum()), "flagged_not_minimal": flagged,
                "reviewed_flagged_not_minimal": int((is_reviewed & (out.get("minimal_ok", pd.Series(dtype=bool))
                                                                    .astype(str).str.lower() == "false")).sum()),
                "review_rows": len(usage), "review_rows_used": int(usage["used"].sum()) if len(usage) else 0,
                "review_rows_not_used": usage.loc[~usage["used"].astype(bool)].to_dict("records") if len(usage) else [],
                "error_categories": error_category_counts(reviewed, usage)})
    with stage_run(p["tracking"], TRANSLATE_RUN, model=gen_cfg["id"], params={"translation": cfg},
                   tags={"translation_status": "machine" if reviewed is None else "machine+reviewed"}) as run:
        run.log_metrics({"rows": len(out), "flagged_not_minimal": flagged})
    print(f"pairs-translate: {len(en)} pairs into {', '.join(t['language'] for t in cfg['targets'])} "
          f"(machine, {flagged} flagged as not minimal; reviewed rows used: "
          f"{int(usage['used'].sum()) if len(usage) else 0} of {len(usage)})")


# ---------------------------------------------------------------- 6. evaluation


def pairs_metric(model_cfg: dict) -> str:
    """Seed 002 Eq. 1 for masked LMs (PLL-word-l2r, all words, no normalisation); causal log-likelihood otherwise."""
    kind = model_cfg.get("kind")
    if kind == "masked":
        return "pll_word_l2r"
    if kind == "causal":
        return "causal"
    raise ConfigError(f"model {model_cfg.get('id')!r} ({kind}) gives no sentence log-likelihoods through the "
                      "scoring engine; the pairs evaluation needs a masked or causal LM")


def evaluation_sets(p: dict[str, Any]) -> pd.DataFrame:
    """The starter set, the constructed pairs and the CrowS-Pairs rows the crows study scored, as one
    table with ``set, id, language, dimension, group_class, sent_stereo, sent_anti, sent_control``."""
    from stereolens.datasets.crows_pairs import crows_pairs_table
    from stereolens.studies.pairs.minimal_pairs import assign_controls

    controls = read_csv_checked(SEED / "controls.csv", ["control_id", "language", "sentence"], what="control sentences")
    classes = read_csv_checked(SEED / "group_classes.csv", ["group", "class"], what="group classes")
    frames = []
    starter = read_csv_checked(SEED / "starter_pairs.csv", ["pair_id", "language", "dimension", "group_stereo",
                                                            "sent_stereo", "sent_anti"], what="starter pairs")
    per_dimension = p["study.pairs.evaluation"].get("starter_per_dimension")
    if per_dimension:
        # the first N pairs of every dimension, the same pair ids in every language
        ids = starter.drop_duplicates("pair_id").groupby("dimension", sort=False).head(int(per_dimension))["pair_id"]
        starter = starter[starter["pair_id"].isin(set(ids))]
    starter = starter.assign(set="starter", group_class=starter["group_stereo"].map(classes.set_index("group")["class"]))
    frames.append(assign_controls(starter, controls))
    constructed = PROCESSED / "constructed.csv"
    if constructed.exists():
        built = read_csv_checked(constructed, ["pair_id", "language", "dimension", "sent_stereo", "sent_anti"],
                                 what="constructed pairs")
        built = built[built["sent_stereo"].fillna("").str.strip().astype(bool)
                      & built["sent_anti"].fillna("").str.strip().astype(bool)]
        if "minimal_ok" in built.columns:
            # a translation that changes more than the identity term is no minimal pair: it is left out
            # of the evaluation (it stays in constructed.csv with minimal_issue for the reviewer)
            built = built[built["minimal_ok"].astype(str).str.lower() != "false"]
        frames.append(assign_controls(built.assign(set="constructed"), controls))
    crows_scores = Path("data/processed/crows/scores.csv")
    if p["study.pairs.evaluation"].get("crows", True) and crows_scores.exists():
        raw = Path("data/raw") / p["study.pairs.evaluation"].get("crows_dataset", "crows_pairs") / \
            "crows_pairs_anonymized.csv"
        scored_ids = set(read_csv_checked(crows_scores, ["id"], what="CrowS scores")["id"])
        crows = crows_pairs_table(raw)
        crows = crows[crows["id"].isin(scored_ids)]
        frames.append(crows.rename(columns={"id": "pair_id", "bias_type": "dimension"}).assign(
            set="crows", language="en", group_class=None, control_id=None, sent_control=None,
            source="CrowS-Pairs", translation_status="source"))
    table = pd.concat(frames, ignore_index=True)
    table["id"] = table["set"] + ":" + table["pair_id"].astype(str) + ":" + table["language"]
    return table


@stage("pairs-evaluate")
def evaluate(args: argparse.Namespace) -> None:
    """Score every pair and control with the configured model; identity-term fragmentation per language."""
    from stereolens.models import ResponseCache, load_model, spec_from_config
    from stereolens.scoring import score_pairs, score_sentences
    from stereolens.studies.pairs.analysis import fragmentation, identity_forms
    from stereolens.tracking import stage_run

    p = load_params("model", "metric", "study.pairs.evaluation", "study.pairs.groups", "tracking", path=args.params)
    model_cfg = p["model"]
    metric = pairs_metric(model_cfg)
    table = evaluation_sets(p)
    cache = ResponseCache(model_cache_dir())
    lm = load_model(spec_from_config(model_cfg), cache=cache)
    batch_tokens = int(p["metric"].get("batch_tokens", 8192))
    truncate = bool(p["metric"].get("truncate", False))
    start = time.perf_counter()
    stats: dict[str, Any] = {}
    frames = []
    for name, part in table.groupby("set", sort=False):
        before = (cache.hits, cache.misses)
        scored = score_pairs(lm.model, lm.tokenizer, part, metric, batch_tokens=batch_tokens, truncate=truncate,
                             cache=cache, identity=lm.identity, progress=True)
        has_control = scored["sent_control"].notna()
        scored["score_control"] = float("nan")
        if has_control.any():
            ctl = score_sentences(lm.model, lm.tokenizer, list(scored.loc[has_control, "sent_control"]), metric,
                                  batch_tokens=batch_tokens, truncate=truncate, cache=cache, identity=lm.identity)
            scored.loc[has_control, "score_control"] = [s.logprob for s in ctl]
        if metric == "causal":
            # the per-token mean the paper mentions for decoders; the bias score uses the sum (Eq. 1 has no normalisation)
            scored["score_stereo_mean"] = scored["score_stereo"] / scored["n_tokens_stereo"]
            scored["score_anti_mean"] = scored["score_anti"] / scored["n_tokens_anti"]
        stats[name] = {"pairs": int(len(part)), "cache_hits": cache.hits - before[0],
                       "cache_misses": cache.misses - before[1]}
        frames.append(scored)
    scores = pd.concat(frames, ignore_index=True).assign(model=model_cfg["id"], metric=metric)
    write_csv(PROCESSED / "scores.csv", scores)

    frag_rows = []
    # the identity words the evaluated sentences use (what each minimal pair changes), not the canonical names
    for language, terms in identity_forms(table[table["set"] != "crows"]).items():
        frag_rows.append({"model": model_cfg["id"], "language": language, **fragmentation(lm.tokenizer, terms)})
    frag = pd.DataFrame(frag_rows)
    write_csv(PROCESSED / "fragmentation.csv", frag)
    elapsed = time.perf_counter() - start
    write_json(PROCESSED / "scoring.json", {"model": model_cfg["id"], "identity": lm.identity, "metric": metric,
                                           "seconds": elapsed, "sets": stats,
                                           "bias_score_uses": "summed log-likelihood" if metric == "causal"
                                           else "PLL-word-l2r summed over all words (seed 002 Eq. 1)"})
    with stage_run(p["tracking"], EVALUATE_RUN, model=model_cfg["id"], axes={"set": EVALUATION_SETS},
                   params={"metric": metric, "evaluation": p["study.pairs.evaluation"]}) as run:
        # a set with nothing to score (crows not run, no constructed pairs) is NaN, not absent
        run.log_metrics({f"{k}.{m}": stats.get(k, {}).get(m) for k in EVALUATION_SETS
                         for m in ("pairs", "cache_hits", "cache_misses")})
        run.log_metrics({"seconds": elapsed})
    crows_note = f", CrowS-Pairs cache hits {stats['crows']['cache_hits']} misses {stats['crows']['cache_misses']}" \
        if "crows" in stats else ""
    print(f"pairs-evaluate: {len(scores)} pairs scored with {model_cfg['id']} ({metric}) in {elapsed:.1f}s{crows_note}")


# ---------------------------------------------------------------- 7. report


@stage("pairs-report")
def report(args: argparse.Namespace) -> None:
    """Bias scores, BCa, binomial, LMS, hyperlocal gap, fragmentation; tables 3-6, figures, reports/pairs/."""
    from stereolens.studies.pairs.analysis import ALL, analyze_scores, fragmentation_correlations, pairs_headline
    from stereolens.studies.pairs.report import write_outputs
    from stereolens.tracking import stage_run

    p = load_params("model.id", "annotation.source", "study.pairs.evaluation", "tracking", "seed", path=args.params)
    ev = p["study.pairs.evaluation"]
    scores = read_csv_checked(PROCESSED / "scores.csv", ["set", "id", "dimension", "score_stereo", "score_anti"],
                              what="pairs scores")
    frag = read_csv_checked(PROCESSED / "fragmentation.csv", [], what="fragmentation") \
        if (PROCESSED / "fragmentation.csv").stat().st_size > 1 else pd.DataFrame()
    scoring = json.loads((PROCESSED / "scoring.json").read_text(encoding="utf-8"))
    overall: dict[str, Any] = {"model": p["model.id"], "metric": scoring["metric"],
                               "bias_score_uses": scoring["bias_score_uses"], "sets": {}}
    provenance_by_set = {
        "starter": "authored, not native-reviewed (English and Devanagari Konkani, data/seed/pairs)",
        "constructed": f"generator output, tuple validation by {p['annotation.source']} annotators, sentences "
                       "unreviewed unless a review file was imported, Konkani by machine translation",
        "crows": "CrowS-Pairs (Nangia et al. 2020), English",
    }
    for name, part in scores.groupby("set", sort=False):
        analysis = analyze_scores(part, n_resamples=int(ev.get("bootstrap_resamples", 1000)), seed=int(p["seed"]),
                                  alpha=float(ev.get("alpha", 0.05)), what=f"pairs scores ({name})")
        status = sorted(set(part.get("translation_status", pd.Series(dtype=str)).dropna().astype(str)))
        provenance = {"set": name, "model": p["model.id"], "metric": scoring["metric"],
                      "source": provenance_by_set.get(name, name), "translation_status": ", ".join(status)}
        frag_set = frag if name == "starter" else None
        frag_stats = fragmentation_correlations(frag, analysis.cells) if frag_set is not None and not frag.empty else None
        write_outputs(analysis, REPORTS / name, title=f"pairs / {name}", provenance=provenance,
                      fragmentation=frag_set, fragmentation_stats=frag_stats)
        overall["sets"][name] = {**analysis.summary, "provenance": provenance}
        languages = sorted(set(part["language"].astype(str)))
        dimensions = [ALL, *sorted(set(part["dimension"].astype(str)) - {ALL})]  # ALL: the cell over every dimension
        with stage_run(p["tracking"], REPORT_RUN, model=p["model.id"], variant=name, params={"evaluation": ev},
                       axes={"language": languages, "dimension": dimensions},
                       annotation_source=p["annotation.source"] if name == "constructed" else None,
                       tags={"set": name, "source": provenance["source"],
                             "translation_status": provenance["translation_status"]}) as run:
            cells = {f"{r['language']}.{r['dimension']}": r for r in analysis.cells.to_dict("records")}
            for language in languages:
                for dimension in dimensions:
                    key = f"{language}.{dimension}"
                    r = cells.get(key, {})
                    run.log_metrics({f"bias_score.{key}": r.get("bias_score"), f"n.{key}": r.get("n"),
                                     f"lms.{key}": r.get("lms") if r.get("lms_n") else None})
            run.log_artifact(REPORTS / name)
    for name in ("starter", "constructed", "crows"):
        if name not in overall["sets"]:
            # a set with nothing to evaluate (no pairs survived construction, or crows not scored) says so
            empty = {"n": 0, "note": f"no {name} pairs were scored", "provenance": {"source": provenance_by_set[name]}}
            write_json(REPORTS / name / "summary.json", empty)
            overall["sets"][name] = empty
    headline = pairs_headline({name: overall["sets"][name] for name in ("starter", "constructed", "crows")})
    statuses = scores["translation_status"].dropna().astype(str).value_counts() if "translation_status" in scores else []
    overall["headline"] = headline
    overall["provenance"] = {
        "annotation_source": p["annotation.source"], "machine_generated": "constructed" in set(scores["set"]),
        "translation_status": {str(k): int(v) for k, v in dict(statuses).items()},
        "notes": [provenance_by_set[n] for n in ("starter", "constructed") if n in set(scores["set"])],
    }
    write_json(REPORTS / "summary.json", overall)
    index = ["# pairs (seed 002, AmchiBias)", ""]
    for name, s in overall["sets"].items():
        index.append(f"- [{name}]({name}/report.md): {s['provenance']['source']}")
    write_text(REPORTS / "README.md", "\n".join(index) + "\n")
    lines = []
    for name, s in overall["sets"].items():
        if not s.get("n") and "runs" not in s:
            lines.append(f"{name}: no pairs")
            continue
        runs = s.get("runs") or [s]
        lines.append(f"{name}: " + ", ".join(f"{r['language']} {r['bias_score']:.3f} (n={r['n']})" for r in runs))
    print("pairs-report: " + "; ".join(lines))
