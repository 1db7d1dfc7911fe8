"""Run a Great Expectations suite on a DataFrame and fail the stage if it does not pass.

Great Expectations is imported lazily: it is slow to import and only gate
stages need it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, GateFailed
from stereolens.io import write_json

_THRESHOLD_KEYS = ("min_value", "max_value", "value", "value_set", "mostly", "regex", "type_")
# expectations on one statistic of a column: a column that is all NaN has no such statistic
_STATISTIC = re.compile(r"expect_column_(min|max|mean|median|sum|stdev)_to_be_between")
UNDEFINED = "undefined"


@dataclass(frozen=True)
class Expectation:
    """One expectation by its snake_case GX name, e.g. ``expect_column_min_to_be_between``."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, **kwargs: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "kwargs", kwargs)

    @property
    def class_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    def threshold(self) -> str:
        shown = {k: v for k, v in self.kwargs.items() if k in _THRESHOLD_KEYS and v is not None}
        return ", ".join(f"{k}={v}" for k, v in shown.items()) or "n/a"


@dataclass
class GateResult:
    suite: str
    success: bool
    results: list[dict[str, Any]]
    report_path: Path | None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def run_gate(
    df: pd.DataFrame,
    expectations: list[Expectation],
    *,
    study: str,
    artefact: str,
    suite: str,
    report_dir: str | os.PathLike = "reports/quality",
    raise_on_failure: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> GateResult:
    """Validate ``df``; write the result as JSON; raise :class:`GateFailed` naming what failed.

    ``metadata`` (e.g. ``{"source": "simulated"}``) is written into the JSON report
    beside the result; it cannot replace the report's own keys.  A statistic
    expectation (``expect_column_min_to_be_between`` ...) on a column whose values
    are all NaN fails with observed value ``"undefined"``: an agreement that cannot
    be computed (every label identical, no pairable items) is not evidence that
    the data are good.
    """
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    _quiet(context)
    source = context.data_sources.add_pandas(name=f"{_slug(study)}_source")
    asset = source.add_dataframe_asset(name=_slug(artefact) or "artefact")
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(batch_parameters={"dataframe": df})
    gx_suite = gx.ExpectationSuite(name=suite)
    for expectation in expectations:
        cls = getattr(gx.expectations, expectation.class_name, None)
        if cls is None:
            raise ConfigError(f"{study}/{artefact}: unknown Great Expectations expectation {expectation.name!r}")
        gx_suite.add_expectation(cls(**expectation.kwargs))
    validation = batch.validate(gx_suite)

    rows = []
    failures = []
    for expectation, res in zip(expectations, _ordered_results(validation, expectations)):
        observed = _observed(res)
        success = bool(res.success)
        if _undefined(df, expectation):
            observed, success = UNDEFINED, False
        row = {
            "expectation": expectation.name,
            "kwargs": expectation.kwargs,
            "success": success,
            "observed_value": observed,
            "threshold": expectation.threshold(),
        }
        rows.append(row)
        if not success:
            failures.append(row)

    report_path = Path(report_dir) / f"{_slug(study)}__{_slug(suite)}.json"
    core = {"study": study, "artefact": artefact, "suite": suite, "success": not failures, "results": rows}
    clash = sorted(set(metadata or {}) & set(core))
    if clash:
        raise ValueError(f"gate metadata cannot replace report key(s) {clash}")
    write_json(report_path, {**core, **dict(metadata or {})})
    result = GateResult(suite=suite, success=not failures, results=rows, report_path=report_path)
    if failures and raise_on_failure:
        first = failures[0]
        column = first["kwargs"].get("column")
        where = f" on column {column!r}" if column else ""
        more = f" (+{len(failures) - 1} more failing expectation(s); see {report_path})" if len(failures) > 1 else ""
        observed = first["observed_value"]
        shown = "undefined (NaN: the statistic could not be computed)" if observed == UNDEFINED else repr(observed)
        raise GateFailed(
            f"[{study}] gate {suite!r} failed for {artefact}: {first['expectation']}{where} "
            f"observed {shown}, threshold {first['threshold']}{more}"
        )
    return result


def _undefined(df: pd.DataFrame, expectation: Expectation) -> bool:
    column = expectation.kwargs.get("column")
    if not _STATISTIC.fullmatch(expectation.name) or column not in df.columns or df.empty:
        return False
    return bool(df[column].isna().all())


def _quiet(context) -> None:
    # per-metric progress bars would drown the stage's own progress output
    try:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    except (ImportError, AttributeError, TypeError):
        pass


def _ordered_results(validation, expectations: list[Expectation]):
    # GX returns results in suite order; a different count means that assumption broke
    results = list(validation.results)
    if len(results) == len(expectations):
        return results
    raise RuntimeError("Great Expectations returned a different number of results than expectations")


def _observed(res) -> Any:
    result = res.result or {}
    if "observed_value" in result:
        value = result["observed_value"]
    elif "unexpected_count" in result:
        value = {"unexpected_count": result.get("unexpected_count"), "unexpected_percent": result.get("unexpected_percent"),
                 "partial_unexpected_list": result.get("partial_unexpected_list", [])[:5]}
    else:
        value = None
    if hasattr(value, "item"):
        value = value.item()
    return value
