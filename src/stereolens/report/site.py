"""Static HTML pages (no scripts, no network): ``reports/index.html`` and ``reports/site/<study>.html``.

Every number goes through the report's one formatter (report/markdown.py), so the index, a study's
page and the model profile write it the same way; a study page's headline figures are the index's
(:func:`headline_figures`).  Every page carries the run's identity (report/identity.py) and fits a
1400-pixel window without scrolling sideways: wide tables wrap their cells and, past that, scroll in
their own box.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from stereolens.io import write_text
from stereolens.models.hardware import precision_mode
from stereolens.report.contract import StudyReport, model_folders, read_study_report, rendered_meta
from stereolens.report.identity import RunIdentity, run_identity
from stereolens.report.markdown import MISSING, format_estimate, format_value, settings

if TYPE_CHECKING:
    from stereolens.report.profile import Profile

_ROWS_SHOWN = 25
_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 28px;display:flex;flex-wrap:wrap;gap:4px 14px}header a{color:#cfe0ff}
main{max-width:1300px;margin:0 auto;padding:12px 28px 40px;overflow-wrap:anywhere}
.identity{color:#5b6474;font-size:.8em;margin:6px 0 0}
h1{font-size:1.6em}h2{border-bottom:1px solid #d5d9e0;padding-bottom:4px;margin-top:1.6em}
.banner{background:#fff3cd;border:2px solid #c98a00;padding:10px 16px;margin:14px 0;border-radius:6px}
.banner.gate{background:#fde2e1;border-color:#b3261e}.banner.stale{background:#e8eefc;border-color:#3056b3}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{background:#fff;border:1px solid #d5d9e0;border-radius:6px;padding:10px 14px;min-width:140px}
.card .v{font-size:1.4em;font-weight:600}.card .k{color:#5b6474;font-size:.85em}
table{border-collapse:collapse;background:#fff;font-size:.85em;margin:6px 0;max-width:100%}
td,th{border:1px solid #d5d9e0;padding:3px 7px;text-align:left;overflow-wrap:break-word}
.scroll{overflow-x:auto;max-width:100%}figure{background:#fff;border:1px solid #d5d9e0;padding:8px;margin:10px 0}figure img,main img{max-width:100%;height:auto}
pre{background:#fff;border:1px solid #d5d9e0;padding:8px;white-space:pre-wrap;font-size:.8em}
.prov,.n{color:#5b6474;font-size:.8em}tr.differ td{background:#fff6e5}.prov.unreviewed{color:#8a5a00}.ok{color:#176f2c;font-weight:600}.bad{color:#b3261e;font-weight:600}.muted{color:#5b6474}
"""


def _fmt(value: Any) -> str:
    """A summary value in a page: through the report's formatter (never a YAML or JSON repr), escaped."""
    return html.escape(format_value(value))


def _page(title: str, body: str, nav: str, identity: RunIdentity | None = None, head: str = "") -> str:
    shown = (f'<p class="identity">{html.escape(identity.words())}</p>') if identity else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">{head}'
            f"<style>{_STYLE}</style></head><body><header>{nav}</header><main>{shown}{body}</main></body></html>\n")


def _nav(studies: list[str], prefix: str) -> str:
    links = [f'<a href="{prefix}index.html">stereolens report</a>']
    links += [f'<a href="{prefix}site/{s}.html">{html.escape(s)}</a>' for s in studies]
    return " ".join(links)


def _banners(report: StudyReport) -> str:
    parts = []
    if report.banner:
        items = "".join(f"<li>{html.escape(r)}</li>" for r in report.banner)
        parts.append(f'<div class="banner" role="alert"><strong>Read with care: this page</strong><ul>{items}</ul></div>')
    if report.gate_warnings:
        items = "".join(f"<li>{html.escape(r)}</li>" for r in report.gate_warnings)
        parts.append(f'<div class="banner gate" role="alert"><strong>Quality gates</strong><ul>{items}</ul></div>')
    return "".join(parts)


def _table_html(path: Path, href: str) -> str:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    shown = frame.head(_ROWS_SHOWN)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in shown.itertuples(index=False))
    more = f' <span class="muted">(first {_ROWS_SHOWN} of {len(frame)} rows)</span>' if len(frame) > _ROWS_SHOWN else ""
    return (f'<details><summary><a href="{href}">{html.escape(path.name)}</a>{more}</summary>'
            f'<div class="scroll"><table><tr>{head}</tr>{rows}</table></div></details>')


def _markdown(report: StudyReport, rel: str) -> tuple[str, set[str]]:
    """report.md as HTML with its relative links pointing into the study's folder (its tables in a box of
    their own, so a wide one never widens the page); the images it shows."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(report.report_md.read_text(encoding="utf-8"))
    shown: set[str] = set()
    for token in tokens:
        for child in token.children or []:
            attr = "src" if child.type == "image" else "href" if child.type == "link_open" else None
            target = child.attrGet(attr) if attr else None
            if target and "://" not in target and not target.startswith(("#", "/", "data:")):
                shown.add(os.path.normpath(target))
                child.attrSet(attr, f"{rel}/{target}")
    rendered = md.renderer.render(tokens, md.options, {})
    return rendered.replace("<table>", '<div class="scroll"><table>').replace("</table>", "</table></div>"), shown


def _boxed(rows: str) -> str:
    """A table in a box of its own: where its cells cannot wrap enough, it scrolls, not the page."""
    return f'<div class="scroll"><table>{rows}</table></div>'


def _words_table(rows: list[tuple[str, str]]) -> str:
    return _boxed("".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows))


def _provenance_html(prov: Mapping[str, Any]) -> str:
    """The summary's provenance block in words: a row per entry (counts as ``authored 40``, yes / no), its notes
    as a list; never the block's YAML or JSON."""
    rows = [(str(k).replace("_", " "), format_value(v)) for k, v in prov.items() if k != "notes"]
    notes = prov.get("notes") or []
    listed = "".join(f"<li>{html.escape(str(n))}</li>" for n in notes) if isinstance(notes, list) else ""
    return _words_table(rows) + (f"<ul>{listed}</ul>" if listed else "")


def _gates_html(report: StudyReport) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(g['name']))}</td><td class=\"{'ok' if g['passed'] else 'bad'}\">"
        f"{ {True: 'passed', False: 'FAILED', None: 'no verdict'}[g['passed']]}"
        f"{'' if g.get('enforced') in (None, True) else ' (reported, not enforced)'}</td>"
        f"<td>{html.escape('; '.join(map(str, g['failing'])))}</td>"
        f"<td><a href=\"../{html.escape(Path(os.path.relpath(g['file'], _reports_root(report))).as_posix())}\">"
        f"{html.escape(g['file'].name)}</a></td></tr>" for g in report.gates)
    return f"<h2>Gates</h2>{_boxed(f'<tr><th>gate</th><th>result</th><th>what failed</th><th>report</th></tr>{rows}')}"


def _own_comparisons(report: StudyReport) -> str:
    """The paired comparisons (reports/<study>/paired.json) in which this page's model takes part."""
    from dataclasses import replace

    from stereolens.report.comparisons import paired_html, read_paired

    if not report.model:
        return ""
    paired = read_paired(_reports_root(report), report.name)
    if paired is not None and paired.comparisons:
        paired = replace(paired, comparisons=[c for c in paired.comparisons if report.model in (c.model_a, c.model_b)])
        if not paired.comparisons:
            paired = replace(paired, reason=f"no comparison involves {report.model}")
    return paired_html(paired, report.name, heading="h2")


def study_page(report: StudyReport, studies: list[str], params: dict[str, Any], profile: Profile | None = None,
               identity: RunIdentity | None = None) -> str:
    nav = _nav(studies, "../")
    rel = f"../{report.where}"
    title = f"{report.name}: {report.model}" if report.model else report.name
    body = [f"<h1>{html.escape(title)}</h1>"]
    if not report.present:
        body.append(f'<p class="bad">No report yet: <code>{html.escape(str(report.folder / "summary.json"))}</code> '
                    f"is absent. Run the study's stages (<code>dvc repro</code>) and rebuild the report.</p>")
        return _page(f"{report.name}: no report", "".join(body), nav, identity)
    body.append(_banners(report))
    summary = report.summary or {}
    if summary.get("skipped"):
        body.append(f'<p class="bad">Skipped: {_fmt(summary["skipped"])}</p>')
    primary = (params.get("model") or {}).get("id")
    cards = "".join(
        f'<div class="card"><div class="v">{_figure_value(f, "../")}</div>'
        f'<div class="k">{html.escape(f.label)}</div></div>' for f in headline_figures(report, profile, primary))
    body.append(f"<h2>Headline</h2><div class=\"cards\">{cards or '<p>none reported</p>'}</div>")
    body.append(_own_comparisons(report))
    model = _model_config(params, report.model)
    model_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{_fmt(model.get(k))}</td></tr>"
                         for k in ("id", "name", "kind", "backend", "revision") if k in model)
    if model:
        # the numeric precision the model computed in: float32 unless the opt-in reduced precision was set
        # with model.verify: the half-precision dtype, its near-boundary decisions rescored in float32
        model_rows += f"<tr><th>precision</th><td>{_fmt(precision_mode(model.get('dtype'), model.get('verify')))}</td></tr>"
    if summary.get("model") is not None:
        model_rows += f"<tr><th>model in summary</th><td>{_fmt(summary['model'])}</td></tr>"
    config = (params.get("study") or {}).get(report.name)
    config_rows = settings(config) if isinstance(config, Mapping) else [("value", format_value(config))]
    body.append(f"<h2>Model and configuration</h2>{_boxed(model_rows)}"
                f"<details><summary>study.{html.escape(report.name)} (params.yaml)</summary>"
                f"{_words_table(config_rows)}</details>")
    prov = summary.get("provenance")
    if isinstance(prov, Mapping) and prov:
        body.append(f"<h2>Provenance</h2>{_provenance_html(prov)}")
    if report.gates:
        body.append(_gates_html(report))
    shown: set[str] = set()
    if report.report_md:
        rendered, shown = _markdown(report, rel)
        body.append(f"<h2>Report</h2>{rendered}")
    figures = [f for f in report.figures if os.path.normpath(f.relative_to(report.folder).as_posix()) not in shown]
    if figures:
        body.append("<h2>Figures</h2>")
        for f in figures:
            href = f"{rel}/{f.relative_to(report.folder).as_posix()}"
            svg = f.with_suffix(".svg")
            link = f' (<a href="{href[:-4]}.svg">SVG</a>)' if svg.exists() else ""
            body.append(f'<figure><img src="{href}" alt="{html.escape(f.stem)}"><figcaption>'
                        f"{html.escape(f.relative_to(report.folder).as_posix())}{link}</figcaption></figure>")
    if report.tables:
        body.append("<h2>Tables</h2>")
        body += [_table_html(t, f"{rel}/{t.relative_to(report.folder).as_posix()}") for t in report.tables]
    body.append(f'<p class="muted">Trace any file above with <code>stereolens lineage reports/{html.escape(report.where)}/FILE</code>.</p>')
    return _page(f"{title}: stereolens report", "".join(body), nav, identity)


def _reports_root(report: StudyReport) -> Path:
    return report.folder.parent.parent if report.model else report.folder.parent


def _model_config(params: dict[str, Any], model_id: str | None) -> dict[str, Any]:
    """The config of ``model_id`` (``models`` in params.yaml), else the primary ``model``."""
    if model_id and model_id in (params.get("models") or {}):
        return params["models"][model_id]
    return params.get("model") or {}


_BOUND = re.compile(r"(^|[\s_])(ci[\s_])?(?P<end>low|high)(er)?$", re.IGNORECASE)
_FIGURES_SHOWN = 4


def headline_items(headline: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A study's ``headline`` (the report contract's ``{label: number or text}``) as a person reads it:
    labels in words (``bias_score`` -> ``bias score``), numbers as :func:`format_estimate` prints them,
    and a ``... low`` / ``... high`` pair right after a number as that number's interval in brackets."""
    keys, items, i = list(headline), [], 0
    while i < len(keys):
        value = headline[keys[i]]
        bounds = keys[i + 1:i + 3]
        ends = [found.group("end").lower() if (found := _BOUND.search(str(k))) else "" for k in bounds]
        if ends == ["low", "high"] and isinstance(value, (int, float)) and not isinstance(value, bool):
            text, step = format_estimate(value, headline[bounds[0]], headline[bounds[1]]), 3
        elif isinstance(value, Mapping):
            text, step = ", ".join(f"{str(k).replace('_', ' ')} {format_estimate(v)}" for k, v in value.items()), 1
        elif isinstance(value, (list, tuple)):
            text, step = ", ".join(format_estimate(v) for v in value), 1
        elif isinstance(value, bool):
            text, step = "yes" if value else "no", 1
        else:
            text, step = format_estimate(value), 1
        items.append((str(keys[i]).replace("_", " "), text or MISSING))
        i += step
    return items


@dataclass(frozen=True)
class Figure:
    """One headline figure as the index and the study page both show it."""

    label: str
    text: str
    detail: str = ""
    href: str = ""  # where it links, relative to reports/ (a robustness table)
    always: bool = False  # shown on the index even past its first few figures


def headline_figures(report: StudyReport, profile: Profile | None, primary: str | None) -> list[Figure]:
    """The headline figures of ``report``: for a study the model profile covers, its model's profile cells
    (the cells with a value first, the n behind each value after it, then the robustness of its headline);
    for any other study its ``headline`` (:func:`headline_items`).  The index's Studies table shows the
    first few and a study's page all of them, from this one list, so the two cannot disagree."""
    from stereolens.report.profile import ROBUSTNESS

    if profile is not None and report.name in profile.studies:
        model = report.model or (report.summary or {}).get("model") or primary
        cells = [c for c in profile.cells.get(str(model), []) if c.study == report.name]
        measured = [c for c in cells if c.measure != ROBUSTNESS]
        if measured:
            valued = [c for c in measured if c.value is not None]
            figures = [Figure(c.measure, c.text_with_n, "; ".join(x for x in (c.detail, c.provenance) if x))
                       for c in valued or measured[:1]]
            # the robustness of a headline there is (a skipped model has neither: its reason is said once)
            figures += [Figure("robustness", c.text, c.detail or c.reason, c.link if c.value is not None else "",
                               always=True) for c in cells if c.measure == ROBUSTNESS and valued]
            return figures
    return [Figure(label, text) for label, text in headline_items(report.headline())]


def _figure_value(figure: Figure, prefix: str = "") -> str:
    text = f'<span class="figure" title="{html.escape(figure.detail)}">{html.escape(figure.text)}</span>'
    return f'<a href="{html.escape(prefix + figure.href)}">{text}</a>' if figure.href else text


def _figures_html(report: StudyReport, profile: Profile | None, primary: str | None, prefix: str = "") -> str:
    """A report's first few headline figures and its robustness, a line each: its label in words, then the
    number as the profile formats it (``bias score 57.6% [55.1, 60.0] n=1508``), never ``key = value``."""
    figures = headline_figures(report, profile, primary)
    first = [f for f in figures if not f.always]
    shown = [*first[:_FIGURES_SHOWN], *(f for f in figures if f.always)]
    lines = "<br>".join(f'<span class="label muted">{html.escape(f.label)}</span> {_figure_value(f, prefix)}'
                        for f in shown)
    more = len(first) - _FIGURES_SHOWN
    return lines + (f'<br><span class="muted">and {more} more on the study page</span>' if more > 0 else "")


def models_page(study: str, reports: list[StudyReport], studies: list[str], params: dict[str, Any],
                profile: Profile | None = None, identity: RunIdentity | None = None) -> str:
    """A study measured per model: one line per model, linking to its page, then the study's paired
    comparisons between the models."""
    from stereolens.report.comparisons import paired_html, read_paired

    run_models = list(params.get("models") or {}) or [str((params.get("model") or {}).get("id"))]
    primary = (params.get("model") or {}).get("id")
    rows = []
    for r in reports:
        rows.append(f'<tr><td><a href="{html.escape(r.page)}">{html.escape(str(r.model))}</a></td>'
                    f"<td>{_figures_html(r, profile, primary, '../')}</td></tr>")
    missing = [m for m in run_models if m not in {r.model for r in reports}]
    note = (f'<p class="muted">Not run for {", ".join(html.escape(m) for m in missing)} (no '
            f"<code>reports/{html.escape(study)}/&lt;model&gt;/summary.json</code>).</p>") if missing else ""
    paired = paired_html(read_paired(_reports_root(reports[0]), study), study, heading="h2") if reports else ""
    body = (f"<h1>{html.escape(study)}</h1><p>One page per model measured.</p>"
            f"{_boxed('<tr><th>model</th><th>headline</th></tr>' + ''.join(rows))}{note}{paired}")
    return _page(f"{study}: stereolens report", body, _nav(studies, "../"), identity)


def model_profile(reports: list[StudyReport], params: dict[str, Any], pages: Collection[str] | None = None) -> Profile | None:
    """The cross-study model profile (report/profile.py) of the studies it knows, read from the same folder;
    ``pages``: the site's page names, when the site is being written."""
    from stereolens.report.profile import PROFILE_STUDIES, build_profile

    profiled = list(dict.fromkeys(r.name for r in reports if r.name in PROFILE_STUDIES))
    if not profiled:
        return None
    primary = (params.get("model") or {}).get("id")
    models = [*([primary] if primary else []), *(params.get("models") or {})]
    return build_profile(_reports_root(reports[0]), studies=profiled, models=list(dict.fromkeys(models)),
                         default_model=primary, pages=pages)


def _profile_section(profile: Profile | None, reports: Path | None = None) -> str:
    from stereolens.report.comparisons import COMPARISONS_LEGEND, comparison_blocks
    from stereolens.report.profile import profile_html

    if profile is None:
        return ""
    blocks = comparison_blocks(reports, profile.studies) if reports is not None else {}
    return ("<h2>Model profile</h2><p>Every model across every study: hover a cell for its detail or the reason it "
            "is empty, click it for the study page; under each value, the n behind it and its provenance; "
            "<em>robustness</em>: of the analysis choices the study recomputes its headline under, how many reach "
            f"the same decision (click it for the table). {COMPARISONS_LEGEND}</p>"
            + profile_html(profile, after=blocks))


def index_page(reports: list[StudyReport], params: dict[str, Any], profile: Profile | None = None,
               identity: RunIdentity | None = None) -> str:
    studies = list(dict.fromkeys(r.name for r in reports))
    profile = profile if profile is not None else model_profile(reports, params)
    primary = (params.get("model") or {}).get("id")
    rows = []
    for r in reports:
        if not r.present:
            state, figures = '<span class="bad">no report yet</span>', ""
        else:
            notes = r.banner + r.gate_warnings
            state = ('<span class="bad">' + html.escape("; ".join(notes)) + "</span>") if notes else '<span class="ok">no warnings</span>'
            figures = _figures_html(r, profile, primary)
        rows.append(f'<tr><td><a href="site/{html.escape(r.page)}">{html.escape(r.name)}</a></td>'
                    f'<td>{html.escape(r.model) if r.model else ""}</td><td>{figures}</td><td>{state}</td></tr>')
    models = list(params.get("models") or {}) or [str((params.get("model") or {}).get("id", "?"))]
    listed = ", ".join(f"<code>{html.escape(m)}</code>" for m in models)
    root = _reports_root(reports[0]) if reports else None
    body = (f"<h1>stereolens report</h1><p>Models {listed} (the first is the primary). One page per study and model; "
            "every number comes from the files under <code>reports/</code> that the pipeline wrote.</p>"
            + _profile_section(profile, root) + "<h2>Studies</h2>"
            + _boxed("<tr><th>study</th><th>model</th><th>headline</th><th>warnings</th></tr>" + "".join(rows)))
    # which summary every page shows, so that a study rerun alone can tell the site is stale (contract.flag_stale_site)
    return _page("stereolens report", body, _nav(studies, ""), identity, head=rendered_meta(reports, studies, models))


def build_site(studies: list[str], params: dict[str, Any], reports: str | Path = "reports",
               identity: RunIdentity | None = None) -> list[Path]:
    """Write the index and every study's page; return the pages written.  ``identity``: the run's
    (report/identity.py), by default read from the project folder holding ``reports``."""
    reports = Path(reports)
    identity = identity or run_identity(reports.resolve().parent)
    found: list[StudyReport] = []
    per_model: dict[str, list[StudyReport]] = {}
    model_ids = list(params.get("models") or {}) or [str((params.get("model") or {}).get("id"))]
    for study in studies:
        measured = model_folders(study, model_ids, reports)
        if measured:  # reports/<study>/<model_id>/: a page per model, and the study's page lists them
            per_model[study] = [read_study_report(study, reports, model=m, model_ids=model_ids) for m in measured]
            found += per_model[study]
        else:
            found.append(read_study_report(study, reports))
    # the profile links each cell to its model's page: the pages this site will have
    profile = model_profile(found, params, pages={r.page for r in found})
    written = [write_text(reports / "site" / r.page, study_page(r, studies, params, profile, identity)) for r in found]
    for study, model_reports in per_model.items():
        written.append(write_text(reports / "site" / f"{study}.html",
                                  models_page(study, model_reports, studies, params, profile, identity)))
    return [write_text(reports / "index.html", index_page(found, params, profile, identity)), *written]
