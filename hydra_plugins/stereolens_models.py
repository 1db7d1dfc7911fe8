# Imported by Hydra's plugin scan when DVC composes conf/ (`dvc exp run -S`; DVC's hydra.plugins_path defaults
# to the repository root): registers the resolver conf/config.yaml's `models` key needs.
from stereolens.config.models import register_models_resolver

register_models_resolver()
