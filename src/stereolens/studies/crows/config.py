"""The crows study's config: the types of keys whose default is null (for ``stereolens config compose``) and
the typed schema of ``study.crows`` (checked at compose time and when a stage loads it)."""

from stereolens.config.schema import boolean, integer, section, text

# keys relative to study.crows; a non-null default already fixes its key's type
PARAM_TYPES = {"limit": int, "sample": int}

SCHEMA = section(dataset=text(), sample=integer(1, null=True), seed=integer(0), limit=integer(1, null=True),
                 bootstrap_resamples=integer(1), alternative_metric_pass=boolean())
