"""The answer scales this study's annotation tasks use, by name for `stereolens annotation import --scale`
(loaded on use, so the command line starts without the study's modules)."""

from stereolens.annotation.scales import register_study_scale

register_study_scale("sentence_review", "stereolens.studies.pairs.review:REVIEW_SCALE")
