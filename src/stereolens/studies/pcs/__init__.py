"""The pcs study (Fifteen Percent Fluency)."""

# The one default for the CLI and the stage (conf/study/pcs/default.yaml and paper.yaml state the same value); here,
# not in analysis.py, so that building the command-line parser does not import the analysis and scipy.
# Our choice, not the paper's: a scenario-feature counts as showing an explicit-prompt gain (and enters PCS and
# capability utilisation) only when B - A exceeds this many steps of the judges' score scale (one step = one point
# on the 1-7 scale), i.e. a quarter of the smallest difference one judge can record.
DEFAULT_MIN_GAIN_STEPS = 0.25
# the gaps of the report's sensitivity table (in scale steps); 0 keeps every positive gain
SENSITIVITY_GAIN_STEPS = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
