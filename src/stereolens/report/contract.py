"""What a study contributes to the report, read generically (no study is imported).

Under ``reports/<study>/``:

- ``summary.json`` (required for a page): a JSON object.  Recognised keys:
  ``headline`` ({label: number or text}, shown as the page's headline figures;
  without it the top-level numbers are shown), ``provenance`` (``annotation_source``:
  human / llm_panel / simulated / none; ``translation_status``: a status or
  {status: count}; ``source``: a source or {source: count}, e.g. ``{"authored": 40}`` for
  items the project wrote itself; ``machine_generated``: true when items were written by a model;
  ``notes``: list of sentences), ``model`` and ``skipped``.
- figures ``**/*.png`` (their ``.svg`` twins are linked), tables ``**/*.csv``,
  optional ``report.md`` (rendered, its relative links resolved), optional
  ``gates.json``; gate reports ``reports/quality/<study>__*.json`` and
  ``reports/<study>/**/quality/*.json`` are shown too.

The banner of a page is raised from the provenance block and, independently, from
the provenance columns of the study's tables, so a study that forgets to declare
simulated judgements still gets its banner.

Whether the built site is current: ``reports/index.html`` records which summary each page
was built from (:func:`rendered_meta`, a digest per ``summary.json``); a study's report stage
that writes a different summary says so in one line and marks the index and the pages that
show it stale, until the ``report`` stage rebuilds them (:func:`flag_stale_site`,
docs/report.md "When the site is stale").

What the cross-study profile (``stereolens profile``, the index page) reads of a study's
summary, and of the ``edges.json`` / ``gates.json`` beside it, is typed here
(:data:`MEASURES`, JSON Schema): the keys that must be there and what each may hold, a
``null`` being a number the run could not define (the study says why in a note).  The profile
checks every summary it reads against it, so a hand-edited or truncated summary is refused
with its file and key instead of being shown as a measure or as "not measured".
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stereolens.config.schema import boolean, first_violation, fraction, integer, list_of, mapping_of, number, section, text
from stereolens.lineage.provenance import UNREVIEWED_KINDS, describe_unreviewed, provenance_of, status_word, unreviewed_kind
from stereolens.report.words import expectation_words, gate_name, panel_gate_words


@dataclass
class StudyReport:
    name: str
    folder: Path
    summary: dict[str, Any] | None
    figures: list[Path] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)
    report_md: Path | None = None
    gates: list[dict[str, Any]] = field(default_factory=list)
    banner: list[str] = field(default_factory=list)
    gate_warnings: list[str] = field(default_factory=list)
    # the model this report measured (reports/<study>/<model_id>/), None for a study-level folder
    model: str | None = None

    @property
    def where(self) -> str:
        """The folder under reports/: ``<study>`` or ``<study>/<model_id>``."""
        return f"{self.name}/{self.model}" if self.model else self.name

    @property
    def page(self) -> str:
        """The page's file name under reports/site/."""
        return page_file(self.where)

    @property
    def present(self) -> bool:
        return self.summary is not None

    def headline(self) -> dict[str, Any]:
        if not self.summary:
            return {}
        if isinstance(self.summary.get("headline"), dict):
            return self.summary["headline"]
        return {k: v for k, v in self.summary.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}


def page_file(where: str) -> str:
    """The file name under reports/site/ of the page of ``<study>`` or ``<study>/<model_id>``."""
    study, _, model = where.partition("/")
    return f"{study}@{model}.html" if model else f"{study}.html"


def _gate_reports(study: str, folder: Path, quality: Path) -> list[dict[str, Any]]:
    found = []
    candidates = [folder / "gates.json", *(sorted(quality.glob(f"{study}__*.json")) if quality.is_dir() else [])]
    # gate reports a study keeps in its own declared outputs (reports/<study>/**/quality/)
    candidates += sorted(folder.glob("**/quality/*.json"))
    for path in candidates:
        if not path.is_file():
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        passed = next((report[k] for k in ("success", "all_passed", "passed") if isinstance(report.get(k), bool)), None)
        # what failed, in words a person reads (report/words.py), never the Great Expectations id
        failing = [expectation_words(r) for r in report.get("results", []) if isinstance(r, dict) and not r.get("success", True)]
        if not failing and isinstance(report.get("gates"), dict):
            failing = [panel_gate_words(name, g) for name, g in report["gates"].items()
                       if isinstance(g, dict) and g.get("passed") is False]
        suite = report.get("suite") or path.stem
        found.append({"file": path, "suite": suite, "name": gate_name(suite), "passed": passed, "failing": failing,
                      "enforced": report.get("enforced")})
    return found


def _counts(declared: Any) -> dict[str, int]:
    """A provenance entry as {value: count}: a dict of counts, or one value (count 0 = not given)."""
    if isinstance(declared, dict):
        return {str(k): int(v) if isinstance(v, (int, float)) else 0 for k, v in declared.items()}
    return {str(declared): 0} if declared else {}


def _banner(summary: dict[str, Any], tables: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    prov = summary.get("provenance") or {}
    annotation = str(prov.get("annotation_source") or "")
    sources = {s.strip() for s in annotation.split(",") if s.strip()}
    statuses = _counts(prov.get("translation_status"))
    declared_sources = _counts(prov.get("source"))
    authored = {k: v for k, v in declared_sources.items() if unreviewed_kind("source", k) == "authored"}
    # the summary's own counts win; tables only add values it did not declare
    declared = {"translation_status": {status_word(s) for s in statuses}, "source": {status_word(s) for s in authored}}
    generated = bool(prov.get("machine_generated")) or any(unreviewed_kind("source", k) == "machine" for k in declared_sources)
    for table, counts in tables.items():
        for column, values in counts.items():
            for value, n in values.items():
                v, kind = status_word(value), unreviewed_kind(column, value)
                if kind in ("simulated", "llm_panel"):
                    sources.add(kind)
                elif kind == "machine":
                    generated = True
                elif kind == "authored" and v not in declared["source"]:
                    authored[v] = authored.get(v, 0) + n
                elif kind == "translation" and v not in declared["translation_status"]:
                    statuses[v] = statuses.get(v, 0) + n
    unreviewed = {k: v for k, v in statuses.items() if unreviewed_kind("translation_status", k)}
    found = {"simulated": "simulated" in sources, "llm_panel": "llm_panel" in sources, "translation": bool(unreviewed),
             "authored": bool(authored), "machine": generated}
    detail = {"translation": unreviewed, "authored": authored}
    return [describe_unreviewed(kind, detail.get(kind)) for kind in UNREVIEWED_KINDS if found[kind]]


def _in_model_folder(path: Path, study_folder: Path, model_ids: list[str]) -> bool:
    """Whether ``path`` lies in the folder of one of the run's models under the study's folder."""
    return any(study_folder / m in path.parents for m in model_ids)


def model_folders(study: str, model_ids: list[str], reports: str | Path = "reports") -> list[str]:
    """The models of the run (``model_ids``, in that order) with a report of ``study``: reports/<study>/<model_id>/
    holding a summary.json (other sub-folders with a summary, such as stereo's retrieval, are stages, not models)."""
    return [m for m in model_ids if (Path(reports) / study / m / "summary.json").is_file()]


def read_study_report(study: str, reports: str | Path = "reports", model: str | None = None,
                      model_ids: list[str] | None = None) -> StudyReport:
    """The report of ``study`` in ``reports/<study>/``, or of one model in ``reports/<study>/<model>/``
    (whose page also shows the study's model-independent gate reports, those outside every folder of
    ``model_ids``, the run's models)."""
    reports = Path(reports)
    folder = reports / study / model if model else reports / study
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else None
    result = StudyReport(name=study, folder=folder, summary=summary, model=model)
    if summary is None:
        return result
    result.figures = sorted(folder.rglob("*.png"))
    result.tables = sorted(folder.rglob("*.csv"))
    result.report_md = folder / "report.md" if (folder / "report.md").is_file() else None
    result.gates = _gate_reports(study, folder, reports / "quality")
    if model:
        shared = reports / study
        result.gates += [g for g in _gate_reports(study, shared, reports / "quality")
                         if g["file"] not in {h["file"] for h in result.gates} and not _in_model_folder(g["file"], shared, model_ids or [model])]
    table_counts = {str(t): c for t in result.tables for t, c in provenance_of(t).items()}
    result.banner = _banner(summary, table_counts)
    result.gate_warnings = [f"{g['name']}: FAILED" + (f" ({'; '.join(map(str, g['failing']))})" if g["failing"] else "")
                            + ("" if g.get("enforced") in (None, True) else ", reported, not enforced")
                            for g in result.gates if g["passed"] is False]
    return result


def check_summary(summary: Any, *, where: str = "summary.json") -> None:
    """Refuse a study summary the report would misread, in one line naming the key.

    The report shows ``headline`` values as figures and raises the provenance banner
    from ``provenance``; a wrong type there would hide a number or a banner silently.
    """
    from stereolens.errors import DataError

    if not isinstance(summary, dict):
        raise DataError(f"{where}: a study summary must be a JSON object, got {type(summary).__name__}")
    headline = summary.get("headline")
    if headline is not None:
        if not isinstance(headline, dict):
            raise DataError(f"{where}: 'headline' must map labels to numbers or text, got {type(headline).__name__}")
        for label, value in headline.items():
            if not isinstance(value, (int, float, str)) and value is not None:
                raise DataError(f"{where}: headline {label!r} must be a number or text, got {type(value).__name__}")
    provenance = summary.get("provenance")
    if provenance is not None:
        if not isinstance(provenance, dict):
            raise DataError(f"{where}: 'provenance' must be an object, got {type(provenance).__name__}")
        if "machine_generated" in provenance and not isinstance(provenance["machine_generated"], bool):
            raise DataError(f"{where}: provenance.machine_generated must be true or false")
        notes = provenance.get("notes")
        if notes is not None and not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
            raise DataError(f"{where}: provenance.notes must be a list of sentences")


# --------------------------------------------------------------------------- is the built site current?
RENDERED_META = "stereolens-rendered"
_RENDERED = re.compile(rf'<meta name="{RENDERED_META}" content="([^"]*)">')
_STALE_BANNER = re.compile(r'<p class="banner stale">.*?</p>')


def summary_digest(folder: str | Path) -> str:
    """What a page was built from: the sha256 (16 hex digits) of ``folder``'s summary.json."""
    return hashlib.sha256((Path(folder) / "summary.json").read_bytes()).hexdigest()[:16]


def rendered_meta(reports: list[StudyReport], studies: list[str], model_ids: list[str]) -> str:
    """The ``<meta>`` the index carries: the run's studies and models and, per page shown, the digest of the
    summary it shows, so that a later summary can tell it is not the one on the site."""
    record = {"studies": list(studies), "models": list(model_ids),
              "summaries": {r.where: summary_digest(r.folder) for r in reports if r.present}}
    return f'<meta name="{RENDERED_META}" content="{html.escape(json.dumps(record, sort_keys=True))}">'


def rendered(reports: str | Path = "reports") -> dict[str, Any] | None:
    """What ``reports/index.html`` was built from (:func:`rendered_meta`), None without a built index."""
    index = Path(reports) / "index.html"
    found = _RENDERED.search(index.read_text(encoding="utf-8")) if index.is_file() else None
    return json.loads(html.unescape(found.group(1))) if found else None


def stale_pages(reports: str | Path = "reports", record: dict[str, Any] | None = None) -> list[str]:
    """The ``<study>`` or ``<study>/<model_id>`` whose summary.json is not the one the built site shows: changed,
    gone, or new for a study and model of the built run.  Empty when the site is current or not built."""
    reports = Path(reports)
    record = record if record is not None else rendered(reports)
    if record is None:
        return []
    shown = record.get("summaries", {})
    stale = [w for w, digest in shown.items()
             if not (reports / w / "summary.json").is_file() or summary_digest(reports / w) != digest]
    for study in record.get("studies", []):
        of_study = [w for w in shown if w == study or w.startswith(study + "/")]
        candidates = [f"{study}/{m}" for m in record.get("models", [])] + ([] if of_study else [study])
        stale += [w for w in candidates if w not in shown and (reports / w / "summary.json").is_file()]
    return sorted(set(stale))


def stale_line(reports: str | Path, stale: list[str]) -> str:
    """The one line that says the site is stale, in the terminal and on its pages."""
    shown = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
    return (f"site stale: {Path(reports) / 'index.html'} was built before {shown} changed; "
            "`dvc repro report` rebuilds it")


def _with_study_pages(wheres: Iterable[str]) -> set[str]:
    """``wheres`` and, for a study measured per model, its page of models (``site/<study>.html``)."""
    wheres = set(wheres)
    return wheres | {w.split("/")[0] for w in wheres}


def mark_stale(reports: str | Path, stale: list[str], record: dict[str, Any]) -> None:
    """Put the stale line at the top of the index and of each page showing a stale summary (the study's
    page of models too), and take it off the others; a page whose text would not change is not rewritten."""
    from stereolens.io import write_text

    reports = Path(reports)
    banner = f'<p class="banner stale">{html.escape(stale_line(reports, stale))}</p>' if stale else ""
    marked = {page_file(w) for w in _with_study_pages(stale)}
    pages = [reports / "index.html"] + [reports / "site" / page_file(w)
                                        for w in sorted(_with_study_pages(record.get("summaries", {})))]
    for page in pages:
        if not page.is_file():
            continue
        text = page.read_text(encoding="utf-8")
        new = _STALE_BANNER.sub("", text)
        if banner and (page.name == "index.html" and page.parent == reports or page.name in marked):
            new = new.replace("<main>", "<main>" + banner, 1)
        if new != text:
            write_text(page, new)


def flag_stale_site(summary_path: str | Path) -> str | None:
    """After a study's report stage wrote ``summary_path``: when a built site (an index.html up to three
    folders above) shows another summary there, mark its pages stale and return the line to print."""
    summary_path = Path(summary_path)
    for reports in list(summary_path.parents)[1:4]:
        record = rendered(reports)
        if record is not None:
            break
    else:
        return None
    stale = stale_pages(reports, record)
    mark_stale(reports, stale, record)
    where = summary_path.parent.relative_to(reports).as_posix()
    return stale_line(reports, stale) if where in stale else None

# ---------------------------------------------------------------- what the profile reads of each study


def _requiring(schema: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {**schema, "required": list(keys)}


NOTE = {"type": ["string", "null"]}  # free text a study may leave empty
PERCENT = number(0, 100, null=True)  # StereoSet's ss, lms and icat: 0-100


def _pair(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": ["array", "null"], "items": item, "minItems": 2, "maxItems": 2}


STEREO_ENTRY = section(ss=PERCENT, lms=PERCENT, icat=PERCENT, n=integer(0), ss_ci=_pair(PERCENT), lms_ci=_pair(PERCENT),
                       icat_ci=_pair(PERCENT), ci_low=PERCENT, ci_high=PERCENT)
STEREO_MEASURES = ("ss", "lms", "icat", "n")
PAIRS_RUN = _requiring(section(
    language=text(), n=integer(0), bias_score=fraction(null=True), ci_low=fraction(null=True), ci_high=fraction(null=True),
    hyperlocal_vs_pan_regional=section(null=True, hyperlocal=fraction(null=True), pan_regional=fraction(null=True),
                                       difference=number(-1, 1, null=True), n_hyperlocal=integer(0),
                                       n_pan_regional=integer(0))), "language", "bias_score")

# study -> the schema of its summary.json, as far as the profile reads it (other keys are the study's own)
MEASURES: dict[str, dict[str, Any]] = {
    # a skipped model (a chat model has no sentence likelihoods) has no bias score to give
    "crows": {**section(bias_score=fraction(null=True), ci_low=fraction(null=True), ci_high=fraction(null=True),
                        n=integer(0, null=True), p_value=fraction(null=True), skipped=text(null=True)),
              "if": {"required": ["skipped"], "properties": {"skipped": {"type": "string", "minLength": 1}}},
              "else": {"required": ["bias_score", "n"]}},
    "leakage": _requiring(section(edges_are=text(), coverage=mapping_of(section(null=True)), human=section(null=True)),
                          "edges_are", "coverage"),
    # a set with nothing scored says so in its note; any other has its runs
    "pairs": _requiring(section(sets=mapping_of({**section(runs=list_of(PAIRS_RUN), note=NOTE),
                                                 "if": {"required": ["note"]}, "else": {"required": ["runs"]}})),
                        "sets"),
    "stereo": _requiring(section(**STEREO_ENTRY["properties"], models=mapping_of(_requiring(STEREO_ENTRY, *STEREO_MEASURES))),
                         *STEREO_MEASURES),
    "pcs": _requiring(section(pcs=number(null=True), cap_util=number(null=True), cap_util_note=NOTE,
                              n_excluded=integer(0, null=True), ldi=mapping_of(mapping_of(number(null=True))),
                              hud=mapping_of(number(0, null=True))), "pcs", "cap_util", "n_excluded", "ldi", "hud"),
    "heads": _requiring(section(value=text(), countries=list_of(_requiring(section(
        country=text(), top_heads=NOTE, probe_test_accuracy=fraction(null=True), probe_test_loss=number(0, null=True),
        pruning_instances=integer(0, null=True)), "country", "top_heads"))), "countries"),
}
# the files a study writes beside its summary that the profile reads too
EDGES = list_of(_requiring(section(panel=NOTE, source=text(), target=text(), estimate=number(null=True),
                                   ci_low=number(null=True), ci_high=number(null=True), configured=boolean(),
                                   converged=boolean(null=True)), "source", "target", "estimate"))
GATES = _requiring(section(enforced=boolean(null=True), gates=mapping_of(_requiring(section(
    observed=number(null=True), threshold=number(null=True), ci_low=number(null=True), ci_high=number(null=True),
    passed=boolean(null=True), note=NOTE), "observed", "passed"))), "gates")


def check_against(schema: dict[str, Any], document: Any, *, where: str) -> None:
    """Refuse ``document`` (read from ``where``) where ``schema`` does not allow it, in one line naming the key:
    ``where: models.m.ss must be a number in [0, 100] (or null), got '27.1abc'`` or ``where: ss: missing``."""
    from stereolens.errors import DataError

    found = first_violation(schema, document)
    if found is None:
        return
    path, problem = found
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "the top level"
    raise DataError(f"{where}: {key}: {problem}" if problem == "missing" else f"{where}: {key} {problem}")


def check_study_summary(summary: Any, study: str, *, where: str = "summary.json") -> None:
    """:func:`check_summary`, then the keys of ``study``'s summary the profile reads (:data:`MEASURES`)."""
    check_summary(summary, where=where)
    if study in MEASURES:
        check_against(MEASURES[study], summary, where=where)
