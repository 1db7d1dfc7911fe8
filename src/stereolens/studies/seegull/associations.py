"""The tuples a run measures and a model's association for each.

The association of a tuple is the leakage study's ILPS (one implementation, :mod:`stereolens.scoring.ilps`):
for each template of the locale's language, the attribute's log-probability after the template naming the
identity minus after the template naming the generic group, then the median (or mean) over templates.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from stereolens.datasets.seegull import NOT_STEREOTYPE, STEREOTYPE
from stereolens.scoring.ilps import word_logprobs
from stereolens.studies.seegull.templates import Template, templates_for

# the columns of associations.csv: the tuple and its votes as SeeGULL gives them, then the model's association
ASSOCIATION_COLUMNS = ("locale", "language", "identity", "attribute", "identity_en", "attribute_en", "stereotype_votes",
                       "non_stereotype_votes", "unsure_votes", "n_annotators", "stereotype_share", "verdict",
                       "mean_offensive_score", "association", "target_logprob", "generic_logprob", "n_templates",
                       "source_file", "source_line")
TEMPLATE_SCORE_COLUMNS = ("locale", "identity", "attribute", "template_id", "target_logprob", "generic_logprob", "ilps")


def select_tuples(tuples: pd.DataFrame, *, per_verdict: int | None, seed: int) -> pd.DataFrame:
    """Every tuple (``per_verdict`` None), or per locale ``per_verdict`` tuples drawn from each of the two
    majority verdicts (all of a verdict that has fewer), seeded per locale so that a locale's draw does not
    depend on which other locales run; kept in file order.  A sample leaves out the no-majority tuples: they
    enter no AUC, and a fixed count per verdict keeps the two classes of the AUC the same size."""
    if per_verdict is None:
        return tuples.reset_index(drop=True)
    parts = []
    for locale, rows in tuples.groupby("locale", sort=False):
        rng = np.random.RandomState((seed + zlib.crc32(str(locale).encode("utf-8"))) % 2**32)
        for verdict in (STEREOTYPE, NOT_STEREOTYPE):
            stratum = rows[rows["verdict"] == verdict]
            parts.append(stratum if len(stratum) <= per_verdict else stratum.sample(n=per_verdict, random_state=rng))
    chosen = pd.concat(parts) if parts else tuples.head(0)
    return tuples.loc[sorted(chosen.index)].reset_index(drop=True)


def study_tuples(study: Mapping[str, Any], *, key: str = "study.seegull.locales") -> pd.DataFrame:
    """The tuples a run measures: every configured locale read from ``study.data`` (a bad file refused in one
    line), then the seeded sample of ``study.sample``."""
    from stereolens.datasets.seegull import read_seegull

    tuples = read_seegull(study["data"], study["locales"], key=key)
    sample = study.get("sample") or {}
    return select_tuples(tuples, per_verdict=sample.get("per_verdict"), seed=int(sample.get("seed") or 0))


def association_items(tuples: pd.DataFrame, templates: Sequence[Template],
                      chosen: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """One row per (tuple, template of its language): the row of the tuple, the template, the sentence up to the
    attribute with the identity and with the generic group, and the text after it."""
    rows = []
    for language, part in tuples.groupby("language", sort=False):
        for template in templates_for(templates, str(language), (chosen or {}).get(str(language))):
            for i, identity, attribute in zip(part.index, part["identity"], part["attribute"]):
                rows.append({"row": i, "template_id": template.template_id, "prefix": template.prefix(identity),
                             "generic_prefix": template.generic_prefix, "attribute": attribute,
                             "suffix": template.suffix()})
    return pd.DataFrame(rows, columns=["row", "template_id", "prefix", "generic_prefix", "attribute", "suffix"])


def score_associations(model: Any, kind: str, tuples: pd.DataFrame, templates: Sequence[Template], *,
                       chosen: Mapping[str, Sequence[str]] | None = None, reduction: str | None = None,
                       aggregation: str = "median", cache: Any | None = None, batch_tokens: int | None = None
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(associations, per-template scores) of ``tuples``: every identity sentence and every distinct generic
    sentence (one per template and attribute, shared by the identities) scored once."""
    items = association_items(tuples, templates, chosen)
    generic = items[["template_id", "generic_prefix", "attribute", "suffix"]].drop_duplicates(
        ["template_id", "attribute"]).reset_index(drop=True)
    prefixes = [*items["prefix"], *generic["generic_prefix"]]
    words = [*items["attribute"], *generic["attribute"]]
    suffixes = [*items["suffix"], *generic["suffix"]]
    scored = word_logprobs(model, kind, prefixes, words, suffixes, reduction=reduction, cache=cache,
                           batch_tokens=batch_tokens)
    items["target_logprob"] = scored[:len(items)]
    prior = dict(zip(zip(generic["template_id"], generic["attribute"]), scored[len(items):]))
    items["generic_logprob"] = [prior[(t, a)] for t, a in zip(items["template_id"], items["attribute"])]
    items["ilps"] = items["target_logprob"] - items["generic_logprob"]
    per_tuple = items.groupby("row").agg(association=("ilps", aggregation), target_logprob=("target_logprob", aggregation),
                                         generic_logprob=("generic_logprob", aggregation),
                                         n_templates=("ilps", "count"))
    associations = tuples.join(per_tuple)
    template_scores = items.join(tuples[["locale", "identity"]], on="row")
    return (associations[list(ASSOCIATION_COLUMNS)].reset_index(drop=True),
            template_scores[list(TEMPLATE_SCORE_COLUMNS)].reset_index(drop=True))


def request_counts(tuples: pd.DataFrame, templates: Sequence[Template],
                   chosen: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """Per locale: the continuation scores :func:`score_associations` requests (identity sentences, and the
    generic sentences it adds) and the distinct contexts among them (``stereolens plan``)."""
    items = association_items(tuples, templates, chosen).join(tuples[["locale"]], on="row")
    rows = []
    for locale, part in items.groupby("locale", sort=False):
        generic = part.drop_duplicates(["template_id", "attribute"])
        rows.append({"locale": locale, "tuples": part["row"].nunique(), "identity_scores": len(part),
                     "generic_scores": len(generic),
                     "contexts": part["prefix"].nunique() + generic["generic_prefix"].nunique()})
    return pd.DataFrame(rows, columns=["locale", "tuples", "identity_scores", "generic_scores", "contexts"])
