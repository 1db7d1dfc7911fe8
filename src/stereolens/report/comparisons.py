"""Whether a conclusion stands, as the report shows it: the paired comparisons between the run's models
(``reports/<study>/paired.json``) and each model's robustness table (the ``robustness`` block of
``reports/<study>/<model_id>/summary.json`` and the ``robustness.csv`` beside it).

Read generically, as the report contract reads a summary (issue 32's contract; no study is imported):

- ``paired.json``: ``{"study", "models", "test", "family", "comparisons": [...]}``, each comparison
  ``model_a, model_b, cell, n, estimate_a, estimate_b, difference, ci_low, ci_high, p_value, p_holm, p_bh,
  significant_holm, significant_bh, verdict, mde``; with one model in the run, an empty list and a
  ``reason``.  Optional ``unit`` (top level or per comparison: ``share`` for shares 0-1, ``percent``,
  ``ratio`` or empty for a plain number): how the estimates are shown.  Without it, the estimates of
  crows, pairs and stereo that all lie in 0-1 are shares (their bias scores), anything else a plain number.
- ``summary.json``'s ``robustness``: ``{"headline_decision", "survives", "of", "not_run", "table"}``.

A study that wrote neither is shown as ``not computed``; a file the report would misread is refused in one
line naming the file and the key.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import DataError
from stereolens.report.markdown import UNITS, format_cell, format_estimate

PAIRED_FILE = "paired.json"
ROBUSTNESS_FILE = "robustness.csv"
NOT_COMPUTED = "not computed"

# the verdicts the contract names, and the words stats/paired.py writes for the same outcomes
A_MORE, B_MORE = "model_a more", "model_b more"
NO_DIFFERENCE, UNDECIDABLE = "no difference detected", "cannot be decided at this n"
_VERDICT_ALIASES = {"first model more stereotypical": A_MORE, "second model more stereotypical": B_MORE}
VERDICTS = (A_MORE, B_MORE, NO_DIFFERENCE, UNDECIDABLE)
# the three groups a reader is shown, in this order
GROUPS = {"differ": "significant differences", "no difference": "no difference detected",
          "undecidable": "cannot be decided at this n"}
# studies whose paired estimates are bias scores: shares when they lie in 0-1
_SHARE_STUDIES = ("crows", "pairs", "stereo")
_NUMBER_KEYS = ("n", "estimate_a", "estimate_b", "difference", "ci_low", "ci_high", "p_value", "p_holm", "p_bh", "mde")


@dataclass(frozen=True)
class Comparison:
    """One cell compared between two models on the items both scored."""

    model_a: str
    model_b: str
    cell: str
    verdict: str
    n: int | None = None
    estimate_a: float | None = None
    estimate_b: float | None = None
    difference: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    p_holm: float | None = None
    p_bh: float | None = None
    significant_holm: bool | None = None
    significant_bh: bool | None = None
    mde: float | None = None
    unit: str = ""

    @property
    def group(self) -> str:
        """``differ``, ``no difference`` or ``undecidable`` (:data:`GROUPS`)."""
        if self.verdict in (A_MORE, B_MORE):
            return "differ"
        return "no difference" if self.verdict == NO_DIFFERENCE else "undecidable"

    def verdict_words(self) -> str:
        """The verdict with the models named: ``gemma3-270m higher``, ``no difference detected``, ..."""
        if self.verdict == A_MORE:
            return f"{self.model_a} higher"
        if self.verdict == B_MORE:
            return f"{self.model_b} higher"
        return self.verdict

    def _difference_unit(self) -> str:
        return {"share": "share_points", "percent": "percent_points"}.get(self.unit, self.unit)

    def estimates(self) -> tuple[str, str]:
        return (format_estimate(self.estimate_a, unit=self.unit), format_estimate(self.estimate_b, unit=self.unit))

    def difference_text(self) -> str:
        return format_estimate(self.difference, self.ci_low, self.ci_high, unit=self._difference_unit())

    def mde_text(self) -> str:
        return format_estimate(self.mde, unit=self._difference_unit())


@dataclass
class PairedStudy:
    """One study's ``paired.json``."""

    study: str
    path: Path
    models: list[str] = field(default_factory=list)
    test: str = ""
    family: str = ""
    reason: str = ""
    comparisons: list[Comparison] = field(default_factory=list)

    def grouped(self) -> dict[str, list[Comparison]]:
        return {g: [c for c in self.comparisons if c.group == g] for g in GROUPS}

    def counts_text(self) -> str:
        """``significant differences: 2; no difference detected: 5; cannot be decided at this n: 1``."""
        return "; ".join(f"{GROUPS[g]}: {len(found)}" for g, found in self.grouped().items())


# ---------------------------------------------------------------- reading


def _number(value: Any, where: str, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{where}: {key!r} must be a number or null, got {value!r}")
    return None if isinstance(value, float) and math.isnan(value) else value


def _flag(value: Any, where: str, key: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise DataError(f"{where}: {key!r} must be true, false or null, got {value!r}")


def _unit(declared: Any, study: str, estimates: Sequence[Any], where: str) -> str:
    if declared is not None:
        if declared not in UNITS:
            raise DataError(f"{where}: 'unit' must be one of {', '.join(repr(u) for u in UNITS)}, got {declared!r}")
        return str(declared)
    numbers = [e for e in estimates if isinstance(e, (int, float)) and not isinstance(e, bool)]
    return "share" if study in _SHARE_STUDIES and numbers and all(0 <= e <= 1 for e in numbers) else ""


def read_paired(reports: str | Path, study: str) -> PairedStudy | None:
    """``reports/<study>/paired.json``, or None when the study did not write one (not computed)."""
    path = Path(reports) / study / PAIRED_FILE
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(document, Mapping):
        raise DataError(f"{path}: must be a JSON object with 'comparisons', got {type(document).__name__}")
    rows = document.get("comparisons")
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise DataError(f"{path}: 'comparisons' must be a list of objects (an empty list with a 'reason' when "
                        "there is nothing to compare)")
    models = document.get("models") or []
    if not isinstance(models, list):
        raise DataError(f"{path}: 'models' must be a list of model ids")
    top_unit = document.get("unit")
    comparisons = []
    for i, row in enumerate(rows):
        where = f"{path}: comparison {i}"
        for key in ("model_a", "model_b", "cell", "verdict"):
            if not isinstance(row.get(key), str) or not row.get(key):
                raise DataError(f"{where}: {key!r} must be a non-empty string")
        verdict = _VERDICT_ALIASES.get(row["verdict"], row["verdict"])
        if verdict not in VERDICTS:
            raise DataError(f"{where}: verdict {row['verdict']!r} is not one of {', '.join(map(repr, VERDICTS))}")
        numbers = {k: _number(row.get(k), where, k) for k in _NUMBER_KEYS}
        unit = _unit(row.get("unit", top_unit), study, [numbers["estimate_a"], numbers["estimate_b"]], where)
        comparisons.append(Comparison(
            model_a=row["model_a"], model_b=row["model_b"], cell=row["cell"], verdict=verdict,
            **{**numbers, "n": None if numbers["n"] is None else int(numbers["n"])},
            significant_holm=_flag(row.get("significant_holm"), where, "significant_holm"),
            significant_bh=_flag(row.get("significant_bh"), where, "significant_bh"), unit=unit))
    return PairedStudy(study=str(document.get("study") or study), path=path, models=[str(m) for m in models],
                       test=str(document.get("test") or ""), family=str(document.get("family") or ""),
                       reason=str(document.get("reason") or ""), comparisons=comparisons)


@dataclass(frozen=True)
class Robustness:
    """A model's robustness block: the headline's decision survives ``survives`` of the ``of`` choices run."""

    survives: int
    of: int
    not_run: int = 0
    decision: str = ""
    table: str = ""  # the robustness table, relative to the reports folder

    def words(self) -> str:
        return f"survives {self.survives} of {self.of}" + (f" ({self.not_run} not run)" if self.not_run else "")

    def detail(self) -> str:
        return "; ".join(x for x in (
            f"headline decision: {self.decision}" if self.decision else "",
            f"the headline's decision holds under {self.survives} of the {self.of} analysis choices run",
            f"{self.not_run} choice(s) need another model pass and were not run" if self.not_run else "") if x)


def read_robustness(summary: Mapping[str, Any], folder: Path, reports: Path) -> Robustness | None:
    """The ``robustness`` block of a model's summary (None when the study wrote none: not computed)."""
    block = summary.get("robustness")
    if block is None:
        return None
    where = f"{folder / 'summary.json'}: robustness"
    if not isinstance(block, Mapping):
        raise DataError(f"{where} must be an object (headline_decision, survives, of, not_run, table)")
    counts = {}
    for key in ("survives", "of", "not_run"):
        value = block.get(key, 0 if key == "not_run" else None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DataError(f"{where}.{key} must be a count (a whole number, 0 or more), got {value!r}")
        counts[key] = value
    if counts["survives"] > counts["of"]:
        raise DataError(f"{where}: survives ({counts['survives']}) exceeds of ({counts['of']})")
    table = folder / str(block.get("table") or ROBUSTNESS_FILE)
    try:
        relative = table.relative_to(reports).as_posix()
    except ValueError:
        relative = table.as_posix()
    return Robustness(**counts, decision=str(block.get("headline_decision") or ""), table=relative)


# ---------------------------------------------------------------- showing them

_HEADER = ("cell", "models", "n", "first", "second", "difference [95% CI]", "p", "p Holm", "p BH", "verdict",
           "smallest detectable")


def _row(c: Comparison) -> list[str]:
    first, second = c.estimates()
    return [c.cell, f"{c.model_a} vs {c.model_b}", format_cell(c.n), first, second, c.difference_text(),
            format_cell(c.p_value), format_cell(c.p_holm), format_cell(c.p_bh), c.verdict_words(), c.mde_text()]


def paired_frame(paired: PairedStudy) -> pd.DataFrame:
    """The comparisons as a table (``compare --paired --csv``): numbers as numbers, a row per comparison in
    the order the terminal shows them, with the group a reader sees them under."""
    rows = [{**{k: v for k, v in asdict(c).items()}, "group": GROUPS[c.group]} for c in _ordered(paired)]
    return pd.DataFrame(rows, columns=[f.name for f in fields(Comparison)] + ["group"])


def _ordered(paired: PairedStudy) -> list[Comparison]:
    return [c for found in paired.grouped().values() for c in found]


def _explain(paired: PairedStudy) -> list[str]:
    return [x for x in (f"Test: {paired.test}" if paired.test else "",
                        f"Family (Holm and Benjamini-Hochberg): {paired.family}" if paired.family else "") if x]


def paired_text(paired: PairedStudy | None, study: str) -> str:
    """A study's comparisons for a terminal: what was tested, the counts per verdict, then one row per
    comparison (differences found first), numbers through the report's formatter."""
    if paired is None:
        return f"{study}: paired comparisons {NOT_COMPUTED} (no reports/{study}/{PAIRED_FILE})"
    models = ", ".join(paired.models) or "the run's models"
    lines = [f"{study}: paired comparisons between {models}"]
    if not paired.comparisons:
        return "\n".join([*lines, f"  no comparison: {paired.reason or 'none written'}"])
    lines += [f"  {x}" for x in _explain(paired)]
    lines.append(f"  {paired.counts_text()}")
    grid = [list(_HEADER), *(_row(c) for c in _ordered(paired))]
    widths = [max(len(row[k]) for row in grid) for k in range(len(_HEADER))]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in grid]
    return "\n".join(lines)


def paired_html(paired: PairedStudy | None, study: str, heading: str = "h4") -> str:
    """A study's comparison block for the report site: the counts per verdict in a sentence (which
    differences are significant, which are not, which cannot be decided at this n), then the table."""
    title = f"<{heading}>{html.escape(study)}: paired comparisons</{heading}>"
    if paired is None:
        return (f'{title}<p class="muted">{NOT_COMPUTED}: the study wrote no '
                f"<code>reports/{html.escape(study)}/{PAIRED_FILE}</code>.</p>")
    if not paired.comparisons:
        return f'{title}<p class="muted">No comparison: {html.escape(paired.reason or "none written")}.</p>'
    grouped = paired.grouped()
    summary = []
    for group, found in grouped.items():
        cells = ", ".join(f"{c.cell} ({c.verdict_words()})" if group == "differ" else c.cell for c in found)
        summary.append(f"<li><strong>{html.escape(GROUPS[group])}: {len(found)}</strong>"
                       + (f" ({html.escape(cells)})" if found else "") + "</li>")
    explain = "".join(f"<p class=\"muted\">{html.escape(x)}</p>" for x in _explain(paired))
    head = "".join(f"<th>{html.escape(h)}</th>" for h in _HEADER)
    rows = "".join(f'<tr class="{c.group.replace(" ", "-")}">' + "".join(f"<td>{html.escape(v)}</td>" for v in _row(c))
                   + "</tr>" for c in _ordered(paired))
    return (f"{title}<ul>{''.join(summary)}</ul>{explain}"
            f'<div class="scroll"><table><tr>{head}</tr>{rows}</table></div>')


COMPARISONS_LEGEND = (
    "<em>Paired comparisons</em> (under each study's models): on the items both models scored, the difference "
    "of the two models' estimates with its paired interval and test, adjusted over the study's family of cells "
    "(Holm and Benjamini-Hochberg). <em>Cannot be decided at this n</em>: even the most lopsided outcome these "
    "items allow could not reach significance, so no verdict either way is possible.")


def comparison_blocks(reports: str | Path, studies: Sequence[str]) -> dict[str, str]:
    """Each profiled study's comparison block, to show under its models' rows."""
    return {s: paired_html(read_paired(reports, s), s) for s in studies}

