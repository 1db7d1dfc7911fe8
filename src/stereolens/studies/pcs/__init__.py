"""The pcs study (seed 004)."""

# the one default for the CLI and the stage (conf/study/pcs/default.yaml states the same value); here, not in
# analysis.py, so that building the command-line parser does not import the analysis and scipy
DEFAULT_MIN_GAP = 0.05
