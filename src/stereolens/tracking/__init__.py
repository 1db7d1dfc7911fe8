"""MLflow tracking: one run per execution of a measuring stage, held to the stage's declared run schema."""

from stereolens.tracking.mlflow_run import RUN_SCHEMAS, RunSchema, RunSchemaError, StageRun, declare_run, stage_run

__all__ = ["RUN_SCHEMAS", "RunSchema", "RunSchemaError", "StageRun", "declare_run", "stage_run"]
