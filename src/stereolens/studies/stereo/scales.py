"""The answer scales this study's annotation tasks use, by name for `stereolens annotation import --scale`
(loaded on use, so the command line starts without the study's modules)."""

from stereolens.annotation.scales import register_study_scale

register_study_scale("figure_d1", "stereolens.studies.stereo.validation:figure_d1_scale")
