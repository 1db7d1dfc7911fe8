"""MLflow tracking: one run per execution of a measuring stage."""

from stereolens.tracking.mlflow_run import StageRun, flatten_params, stage_run

__all__ = ["StageRun", "flatten_params", "stage_run"]
