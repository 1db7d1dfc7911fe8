# Imported by Hydra's plugin scan when DVC composes conf/ (`dvc exp run -S`; DVC's hydra.plugins_path defaults
# to the repository root): registers the resolver conf/config.yaml's `models` key needs.
import sys

from stereolens.config.compose import dvc_exp_run_note
from stereolens.config.models import register_models_resolver

register_models_resolver()

# DVC imports this module once per command, while composing: the one place that sees `dvc exp run -S model=X`
# before it reruns every study, so the note `stereolens config compose` gives is given here too
_note = dvc_exp_run_note(sys.argv[1:])
if _note:
    print(_note, file=sys.stderr)
