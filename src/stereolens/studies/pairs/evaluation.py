"""The pairs evaluation (AmchiBias section 4): which pairs are scored, with which metric, and the
identity terms' fragmentation under the evaluated model's tokenizer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.io import read_csv_checked
from stereolens.scoring.verified import (EXACT_LABEL, pair_members, verified_pairs, verify_decisions, verifying_models,
                                         with_pair_scores)
SEED = Path("data/seed/pairs")
CONSTRUCTED = Path("data/processed/pairs/constructed.csv")
CROWS = Path("data/processed/crows")  # per model: <model_id>/scores.csv, the CrowS-Pairs rows that model's crows run scored


def pairs_metric(model_cfg: Mapping[str, Any]) -> str:
    """AmchiBias Eq. 1 for masked LMs (PLL-word-l2r, all words, no normalisation); causal log-likelihood otherwise."""
    kind = model_cfg.get("kind")
    if kind == "masked":
        return "pll_word_l2r"
    if kind == "causal":
        return "causal"
    raise ConfigError(f"model {model_cfg.get('id')!r} ({kind}) gives no sentence log-likelihoods through the "
                      "scoring engine; the pairs evaluation needs a masked or causal LM")


def _starter(classes: pd.DataFrame, per_dimension: int | None) -> pd.DataFrame:
    starter = read_csv_checked(SEED / "starter_pairs.csv", ["pair_id", "language", "dimension", "group_stereo",
                                                            "sent_stereo", "sent_anti"], what="starter pairs")
    if per_dimension:
        # the first N pairs of every dimension, the same pair ids in every language
        ids = starter.drop_duplicates("pair_id").groupby("dimension", sort=False).head(int(per_dimension))["pair_id"]
        starter = starter[starter["pair_id"].isin(set(ids))]
    return starter.assign(set="starter", group_class=starter["group_stereo"].map(classes.set_index("group")["class"]))


def _constructed(controls: pd.DataFrame) -> pd.DataFrame:
    """The constructed pairs to evaluate, each with its control: controls are assigned on the whole file,
    before any pair is left out, so a pair left out moves no other pair's control."""
    from stereolens.studies.pairs.minimal_pairs import assign_controls

    built = read_csv_checked(CONSTRUCTED, ["pair_id", "language", "dimension", "sent_stereo", "sent_anti"],
                             what="constructed pairs")
    built = assign_controls(built, controls)
    built = built[built["sent_stereo"].fillna("").str.strip().astype(bool)
                  & built["sent_anti"].fillna("").str.strip().astype(bool)]
    if "minimal_ok" in built.columns:
        # a translation that changes more than the identity term is no minimal pair: it is left out
        # of the evaluation (it stays in constructed.csv with minimal_issue for the reviewer)
        built = built[built["minimal_ok"].astype(str).str.lower() != "false"]
    return built.assign(set="constructed")


def _crows(dataset: str, crows_scores: Path) -> pd.DataFrame:
    from stereolens.datasets.crows_pairs import crows_pairs_table

    scored_ids = set(read_csv_checked(crows_scores, ["id"], what="CrowS scores")["id"])
    crows = crows_pairs_table(Path("data/raw") / dataset / "crows_pairs_anonymized.csv")
    crows = crows[crows["id"].isin(scored_ids)]
    return crows.rename(columns={"id": "pair_id", "bias_type": "dimension"}).assign(
        set="crows", language="en", group_class=None, control_id=None, sent_control=None,
        source="CrowS-Pairs", translation_status="source")


def evaluation_sets(evaluation: Mapping[str, Any], model_id: str) -> pd.DataFrame:
    """The starter set, the constructed pairs and the CrowS-Pairs rows the crows study scored, as one
    table with ``set, id, language, dimension, group_class, sent_stereo, sent_anti, sent_control``.

    ``evaluation`` is ``study.pairs.evaluation`` (``starter_per_dimension``, ``crows``, ``crows_dataset``)."""
    from stereolens.studies.pairs.minimal_pairs import read_group_classes
    from stereolens.studies.pairs.minimal_pairs import assign_controls

    # header-only controls would drop every control (and LMS with them) without a word
    controls = read_csv_checked(SEED / "controls.csv", ["control_id", "language", "sentence"], what="control sentences",
                                allow_empty=False)
    classes = read_group_classes(SEED / "group_classes.csv")
    frames = [assign_controls(_starter(classes, evaluation.get("starter_per_dimension")), controls)]
    if CONSTRUCTED.exists():
        frames.append(_constructed(controls))
    crows_scores = CROWS / model_id / "scores.csv"
    if evaluation.get("crows", True) and crows_scores.exists():
        frames.append(_crows(evaluation.get("crows_dataset", "crows_pairs"), crows_scores))
    table = pd.concat(frames, ignore_index=True)
    table["id"] = table["set"] + ":" + table["pair_id"].astype(str) + ":" + table["language"]
    return table


def score_set(lm, part: pd.DataFrame, metric: str, *, batch_tokens: int, truncate: bool,
              alternatives: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """One set's pairs scored, with its controls (``score_control``, NaN without one) and, for a
    causal LM, the per-token means beside the sums.  Each of ``alternatives`` (masked-LM metrics) is a
    second pass whose scores are kept beside the headline's for the robustness table."""
    from stereolens.scoring import score_pairs, score_sentences
    from stereolens.scoring.types import alternative_columns

    # the backend itself (not its network): an executor-backed model shards the pairs
    options = dict(batch_tokens=batch_tokens, truncate=truncate, cache=lm.cache, identity=lm.identity)
    verifying = verifying_models(lm) is not None
    scored = _verified_set(lm, part, metric, options) if verifying else score_pairs(lm, None, part, metric, progress=True,
                                                                                  **options)
    for other in alternatives:
        if verifying:
            again, _ = verified_pairs(lm, part, other, progress=True, **options)
            scored[f"precision_{other}"] = again["precision"].to_numpy()
        else:
            again = score_pairs(lm, None, part, other, progress=True, **options)
        stereo_col, anti_col = alternative_columns(other)
        scored[stereo_col], scored[anti_col] = again["score_stereo"].to_numpy(), again["score_anti"].to_numpy()
    if not verifying:  # under model.verify the controls were scored with their pairs
        has_control = scored["sent_control"].notna()
        scored["score_control"] = float("nan")
        if has_control.any():
            controls = score_sentences(lm, None, list(scored.loc[has_control, "sent_control"]), metric, **options)
            scored.loc[has_control, "score_control"] = [s.logprob for s in controls]
    if metric == "causal":
        # the per-token mean the paper mentions for decoders; the bias score uses the sum (Eq. 1 has no normalisation)
        scored["score_stereo_mean"] = scored["score_stereo"] / scored["n_tokens_stereo"]
        scored["score_anti_mean"] = scored["score_anti"] / scored["n_tokens_anti"]
    return scored


def _verified_set(lm, part: pd.DataFrame, metric: str, options: dict) -> pd.DataFrame:
    """:func:`score_set`'s pairs and controls under ``model.verify``: a pair with its control is one group (the
    bias score compares stereo with anti, the LMS stereo with control), rescored in float32 as a whole where
    any two of its scores are within the error bound; ``precision`` says which pairs carry float32 scores."""
    from stereolens.scoring import score_pairs, score_sentences
    from stereolens.scoring.types import SentenceScore

    fast, exact, label = verifying_models(lm)
    has_control = part["sent_control"].notna().to_numpy()

    def score(model, groups: list[int]) -> list[list[SentenceScore]]:
        sub = part.iloc[groups]
        pairs = score_pairs(model, None, sub, metric, progress=True, **options)
        with_control = [k for k, g in enumerate(groups) if has_control[g]]
        controls = iter(score_sentences(model, None, list(sub["sent_control"].iloc[with_control]), metric, **options)
                        if with_control else [])
        controlled = set(with_control)
        return [group + [next(controls)] if k in controlled else group
                for k, group in enumerate(pair_members(pairs))]

    verified = verify_decisions(score, fast, exact, len(part), fast_label=label)
    scored = with_pair_scores(part, verified)
    scored["score_control"] = [g[2].logprob if len(g) > 2 else float("nan") for g in verified.scores]
    return scored


def score_sets(lm, table: pd.DataFrame, metric: str, *, model: str, batch_tokens: int, truncate: bool,
               alternatives: list[str] | tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict[str, dict[str, int]]]:
    """Every set of ``table`` scored by ``lm``: the scores and, per set, its pairs and cache hits and misses
    (``alternatives``: :func:`score_set`'s second passes)."""
    cache = lm.cache
    stats: dict[str, dict[str, int]] = {}
    frames = []
    for name, part in table.groupby("set", sort=False):
        before = (cache.hits, cache.misses)
        frames.append(score_set(lm, part, metric, batch_tokens=batch_tokens, truncate=truncate,
                                alternatives=alternatives))
        stats[name] = {"pairs": int(len(part)), "cache_hits": cache.hits - before[0],
                       "cache_misses": cache.misses - before[1]}
        if "precision" in frames[-1].columns:  # model.verify: the pairs whose scores are float32's
            stats[name]["pairs_fp32"] = int((frames[-1]["precision"] == EXACT_LABEL).sum())
    return pd.concat(frames, ignore_index=True).assign(model=model, metric=metric), stats


def fragmentation_table(tokenizer, table: pd.DataFrame, *, model: str) -> pd.DataFrame:
    """Per language, how the tokenizer splits the identity words the evaluated sentences use (what
    each minimal pair changes, not the canonical names); CrowS-Pairs rows are not ours and stay out."""
    from stereolens.studies.pairs.analysis import fragmentation, identity_forms

    rows = [{"model": model, "language": language, **fragmentation(tokenizer, terms)}
            for language, terms in identity_forms(table[table["set"] != "crows"]).items()]
    return pd.DataFrame(rows)
