"""``stereolens release STUDY``: a dataset release a reviewer can audit, or a refusal naming why not.

What a study releases is declared, not coded: ``conf/study/<STUDY>/release/default.yaml``
(composed to the top-level ``release.<STUDY>`` of params.yaml, outside ``study.<STUDY>``, so that
editing a declaration makes no measuring stage stale)::

      title: Human stereotype matrices (Cao et al. 2024 survey)
      dataset: [data/processed/leakage/human]        # files or folders released as they are (globs:
                                                     # data/interim/pcs/*/scores.csv, one per model)
      items:                                         # the id columns that name an item of a table (path: a glob too)
        - {path: data/seed/pcs/scenarios.csv, id: [scenario_id, language]}
      gates: [reports/leakage/quality/leakage__*.json]  # gate reports (globs) that DVC stages declare as outputs;
                                                     # a failed or missing one blocks it, an undeclared file is ignored
      agreement: [reports/pcs/human_validation/summary.json]  # agreement figures shipped beside the data
      datasheet: {motivation: ..., uses: ...}        # the answers no recorded metadata can give

Every CSV in the dataset is audited through its provenance columns (``source``,
``annotation_source``, ``translation_status``), and every JSON through the same keys;
the licence and upstream commit come from the ingest stage's ``PROVENANCE.json``,
the lineage from DVC and MLflow (:mod:`stereolens.lineage.trace`).

Every pattern of ``dataset`` and ``items`` must match at least one path: a declaration naming a
layout the pipeline no longer writes is refused in one line, not released half.  ``FETCH.json``
records where an auditor elsewhere gets the same bytes: the git revision and repository URL, the
default DVC remote, each released path with the md5 that revision's ``dvc.lock`` records for it,
and the ``dvc get`` / ``dvc import`` commands; a path whose released bytes that revision does not
record (a rerun's uncommitted ``dvc.lock``, an edited seed file) is marked, with a warning.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import glob
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, StereolensError
from stereolens.io import sha256_file, write_json, write_text
from stereolens.lineage.graph import contains, load_stages, producer
from stereolens.lineage.provenance import files_under, is_unreviewed, unreviewed_rows
from stereolens.lineage.trace import trace
from stereolens.report.identity import git_commit

DATASHEET_SECTIONS = (
    ("motivation", "Motivation"),
    ("composition", "Composition"),
    ("collection", "Collection process"),
    ("preprocessing", "Preprocessing, cleaning and labelling"),
    ("uses", "Uses"),
    ("distribution", "Distribution"),
    ("maintenance", "Maintenance"),
)
_SHOWN_PROBLEMS = 40


class ReleaseRefused(StereolensError):
    """Items that are simulated, unreviewed machine output, or failed a gate."""


@dataclass(frozen=True)
class ReleaseSpec:
    study: str
    title: str
    dataset: list[str]
    items: dict[str, list[str]]
    gates: list[str]
    agreement: list[str]
    datasheet: dict[str, str]

    @classmethod
    def from_config(cls, study: str, block: Any) -> "ReleaseSpec":
        where = f"release.{study}"
        if not isinstance(block, dict) or not block.get("dataset"):
            raise ConfigError(f"{where}: a release needs a `dataset` list of files or folders "
                              "(see docs/lineage-and-release.md)")
        unknown = set(block) - {"title", "dataset", "items", "gates", "agreement", "datasheet"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
        return cls(study=study, title=str(block.get("title") or f"{study} dataset"),
                   dataset=[str(p) for p in block["dataset"]],
                   items={str(i["path"]): [str(c) for c in i.get("id") or []] for i in block.get("items") or []},
                   gates=[str(g) for g in block.get("gates") or []],
                   agreement=[str(a) for a in block.get("agreement") or []],
                   datasheet={str(k): str(v) for k, v in (block.get("datasheet") or {}).items()})


def _expand(patterns: list[str], root: Path) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(Path(p) for p in glob.glob(str(root / pattern)))
        found += [m for m in matches if m not in found]
    return found


def _relative(path: Path, root: Path) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def resolve(spec: ReleaseSpec, root: Path) -> ReleaseSpec:
    """``spec`` with every ``dataset`` and ``items`` pattern expanded to the paths it matches under ``root``.

    Globs let one declaration cover every model of a per-model layout (``data/interim/pcs/*/scores.csv``);
    a pattern that matches nothing is refused, naming it: the study has not run, or the declaration
    names a layout the pipeline no longer writes."""
    dataset: list[str] = []
    for pattern in spec.dataset:
        matches = [_relative(m, root) for m in _expand([pattern], root)]
        if not matches:
            raise ConfigError(f"release.{spec.study}.dataset: {pattern} not found: run the study first "
                              "(`dvc repro`), then release it, or correct the pattern (it matches no path; "
                              "dvc.yaml's outs say where the study writes)")
        dataset += [m for m in matches if m not in dataset]
    items: dict[str, list[str]] = {}
    for pattern, columns in spec.items.items():
        matches = [_relative(m, root) for m in _expand([pattern], root)]
        if not matches:
            raise ConfigError(f"release.{spec.study}.items: {pattern} not found: run the study first "
                              "(`dvc repro`), or correct the pattern (it matches no path; dvc.yaml's outs say "
                              "where the study writes)")
        for match in matches:
            items.setdefault(match, columns)
    return replace(spec, dataset=dataset, items=items)


def _git_lines(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _default_remote(root: Path) -> dict[str, str] | None:
    """The default DVC remote (name and URL) as this workspace's config has it, ``config.local`` included."""
    from dvc.repo import Repo

    repo = Repo(str(root))
    try:
        name = repo.config["core"].get("remote")
        section = repo.config.get("remote", {}).get(name) if name else None
        return {"name": name, "url": str(section["url"])} if section else None
    finally:
        repo.close()


def _locked_outs(lock_text: str | None) -> dict[str, str]:
    """out path -> md5 of every stage output a ``dvc.lock`` text records."""
    import yaml

    try:
        content = yaml.safe_load(lock_text or "") or {}
    except yaml.YAMLError:
        return {}
    return {str(out["path"]): str(out.get("md5")) for stage in (content.get("stages") or {}).values()
            for out in (stage.get("outs") or []) if isinstance(out, dict) and "path" in out}


def fetch_record(paths: list[str], root: Path) -> dict[str, Any]:
    """Where an auditor elsewhere gets the exact bytes of ``paths``: revision, repository, DVC remote, commands.

    A path is ``at_revision`` when the revision checked out records the bytes released: a git-tracked file
    unchanged since that commit, or a stage output whose md5 in the workspace's ``dvc.lock`` equals the one in
    the revision's ``dvc.lock`` and whose stage DVC reports unchanged.  Otherwise ``dvc get`` at that revision
    gives other bytes (say, a rerun's outputs whose ``dvc.lock`` is not committed)."""
    from dvc.repo import Repo

    revision, _ = git_commit(root)
    repository = _git_lines(root, "remote", "get-url", "origin") if revision else None
    remote = _default_remote(root)
    committed = _locked_outs(_git_lines(root, "show", f"{revision}:dvc.lock") if revision else None)
    stages = load_stages(root)
    repo = Repo(str(root))
    entries = []
    try:
        for path in paths:
            produced = producer(stages, path)
            entry: dict[str, Any] = {"path": path}
            if produced is None:
                entry["tracked_by"] = "git"
                entry["at_revision"] = bool(revision) and _git_lines(
                    root, "status", "--porcelain", "--untracked-files=all", "--", path) == "" and \
                    bool(_git_lines(root, "ls-files", "--", path))
            else:
                stage, out = produced
                entry.update({"tracked_by": "dvc", "stage": stage.name, "output": out.path, "md5": out.md5})
                # only the outputs count: a stage stale because its code changed still holds the recorded bytes
                changed = repo.status(targets=[f"{root / 'dvc.yaml'}:{stage.name}"])
                outs_changed = any(isinstance(item, dict) and "changed outs" in item
                                   for items in changed.values() for item in items)
                entry["at_revision"] = bool(revision) and committed.get(out.path) == out.md5 and not outs_changed
            entries.append(entry)
    finally:
        repo.close()
    source = repository or str(root)
    rev = f" --rev {revision}" if revision else ""
    return {"revision": revision, "repository": repository, "dvc_remote": remote, "paths": entries,
            "get": [f"dvc get {source} {e['path']}{rev} -o {e['path']}" for e in entries],
            "import": [f"dvc import {source} {e['path']}{rev} -o {e['path']}" for e in entries]}


def _fetch_warnings(study: str, record: dict[str, Any]) -> list[str]:
    warnings = []
    if not record["revision"]:
        warnings.append(f"release {study}: not a git work tree: FETCH.json names no revision to fetch from")
    stale = [e["path"] for e in record["paths"] if not e["at_revision"]]
    if record["revision"] and stale:
        warnings.append(f"release {study}: {', '.join(stale)}: the released bytes are not what revision "
                        f"{record['revision'][:12]} records (commit dvc.lock and the data, then `dvc push`, and "
                        "release again, or an auditor's `dvc get` gives other bytes)")
    if any(e["tracked_by"] == "dvc" for e in record["paths"]) and not record["dvc_remote"]:
        warnings.append(f"release {study}: no default DVC remote: FETCH.json names none, so `dvc get` elsewhere "
                        "finds no DVC-tracked bytes (`dvc remote add -d ...`, docs/running.md)")
    return warnings


def _gate_passed(report: dict[str, Any]) -> bool | None:
    for key in ("success", "all_passed", "passed"):
        if isinstance(report.get(key), bool):
            return report[key]
    return None


def _json_flags(document: Path, root: Path) -> list[dict[str, str]]:
    """Keys ``source``/``annotation_source``/``translation_status`` in a JSON file that mark unreviewed work."""
    flags = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and is_unreviewed(key, value):
                    flags.append({"file": os.path.relpath(document, root), "row": "", "item": f"{where}{key}",
                                  "reason": f"{key}={value}"})
                else:
                    walk(value, f"{where}{key}.")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}{i}.")

    try:
        walk(json.loads(document.read_text(encoding="utf-8")), "")
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return flags


def staged_gate_reports(patterns: list[str], root: Path) -> list[Path]:
    """The files matching ``patterns`` that a DVC stage declares as an output.

    Any command can write a JSON file that looks like a gate report (a review tried on
    trial data, a hand edit); only one a pipeline stage produced says the study's data
    passed, so the rest are left out, each with a one-line warning."""
    found = _expand(patterns, root)
    if not found:
        return []
    stages = load_stages(root)
    staged = []
    for report in found:
        rel = os.path.relpath(report, root).replace(os.sep, "/")
        if producer(stages, rel) is None:
            print(f"warning: release ignores gate report {rel}: no DVC stage declares it as an output "
                  "(a command run by hand wrote it)", file=sys.stderr)
        else:
            staged.append(report)
    return staged


def _check_item_ids(spec: ReleaseSpec, root: Path) -> None:
    """Refuse an ``items`` entry whose id columns its table lacks: the audit would name that table's flagged rows by
    the columns it has (or by row number) without a word, and a reviewer could not find the items."""
    for path, columns in spec.items.items():
        table = root / path
        if not table.is_file() or table.suffix != ".csv":
            continue
        try:
            header = list(pd.read_csv(table, dtype=str, nrows=0).columns)
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
            continue  # the audit reads the file whole and says what is wrong with it
        missing = [c for c in columns if c not in header]
        if missing:
            raise ConfigError(f"release.{spec.study}.items: id column(s) {', '.join(missing)} of {path} not in that "
                              f"file (has: {', '.join(header)})")


def audit(spec: ReleaseSpec, root: Path) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Every flagged item (file, row, item id, reason) and every gate with its result."""
    spec = resolve(spec, root)
    problems = []
    for path in spec.dataset:
        for table in files_under(root / path, ".csv"):
            rel = os.path.relpath(table, root).replace(os.sep, "/")
            flagged = unreviewed_rows(table, spec.items.get(rel))
            if len(flagged):
                flagged["file"] = rel
                problems.append(flagged)
        for document in files_under(root / path, ".json"):
            if document.name != "PROVENANCE.json":
                problems.append(pd.DataFrame(_json_flags(document, root), columns=["file", "row", "item", "reason"]))
    gates = []
    reports = staged_gate_reports(spec.gates, root)
    for pattern in spec.gates:
        if not any(report in _expand([pattern], root) for report in reports):
            # a declared gate that left no report did not run: the release cannot claim it passed
            problems.append(pd.DataFrame([{"file": pattern, "row": "", "item": "gate report",
                                           "reason": "gate report missing"}]))
    for report_path in reports:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        passed = _gate_passed(report)
        rel = os.path.relpath(report_path, root)
        gates.append({"file": rel, "suite": report.get("suite") or report_path.stem, "passed": passed})
        if passed is False:
            problems.append(pd.DataFrame([{"file": rel, "row": "", "item": f"gate {report.get('suite') or report_path.stem}",
                                           "reason": "gate failed"}]))
    table = pd.concat([p for p in problems if len(p)], ignore_index=True) if any(len(p) for p in problems) else \
        pd.DataFrame(columns=["file", "row", "item", "reason"])
    return table, gates


def _describe_problems(problems: pd.DataFrame) -> str:
    """Every file with flagged items, each with its first items: a long first file must not hide the others."""
    lines = []
    files = list(dict.fromkeys(problems["file"]))
    per_file = max(3, _SHOWN_PROBLEMS // max(len(files), 1))
    for name in files:
        part = problems[problems["file"] == name]
        if len(files) > 1:
            lines.append(f"  {name}: {len(part)} item(s) ({_summary_counts(part)})")
        for row in part.head(per_file).itertuples():
            where = f"{row.file}" + (f" line {row.row}" if str(row.row) else "")
            lines.append(f"    {where}: {row.item or '(row)'}: {row.reason}")
        if len(part) > per_file:
            lines.append(f"    ... and {len(part) - per_file} more in {name} (all listed in AUDIT.csv with "
                         "--allow-unreviewed)")
    return "\n".join(lines)


def _summary_counts(problems: pd.DataFrame) -> str:
    if problems.empty:
        return "none"
    return ", ".join(f"{reason}: {n}" for reason, n in problems["reason"].value_counts().items())


def build_datasheet(spec: ReleaseSpec, *, problems: pd.DataFrame, gates: list[dict[str, Any]],
                    lineages: dict[str, dict[str, Any]], files: list[dict[str, Any]], unreviewed: bool,
                    fetch: dict[str, Any] | None = None) -> str:
    """Gebru et al.'s "Datasheets for Datasets" sections, filled from what the pipeline recorded."""
    lines = []
    if unreviewed:
        lines.append(f"**UNREVIEWED RELEASE: {len(problems)} item(s) are simulated, unreviewed machine output or "
                     f"failed a gate ({_summary_counts(problems)}); released with --allow-unreviewed. See AUDIT.csv.**")
        lines.append("")
    lines += [f"# Datasheet: {spec.title}", "",
              f"Study `{spec.study}`; released {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} "
              "by `stereolens release`. Structure after Gebru et al., *Datasheets for Datasets* (2021). Answers in "
              "italics were written by the study's authors (`release.datasheet`); the rest is read from the pipeline's "
              "records (dvc.lock, PROVENANCE.json, provenance columns, gate reports, MLflow).", ""]
    ingested = {rec["record"]: rec for info in lineages.values() for rec in info["ingested"]}
    models = {(m.get("id"), m.get("weights_md5")): m for info in lineages.values() for m in info["models"]}
    runs = {r["run_id"]: r for info in lineages.values() for r in info["mlflow_runs"]}
    recorded: dict[str, list[str]] = {key: [] for key, _ in DATASHEET_SECTIONS}
    recorded["composition"] += [f"- `{f['path']}`: {f['bytes']} bytes" + (f", {f['rows']} rows" if f.get("rows") is not None else "")
                                + (f"; provenance {f['provenance']}" if f.get("provenance") else "") for f in files]
    recorded["collection"] += [f"- ingested `{r.get('dataset')}` ({r.get('source')}): upstream commit "
                               f"`{r.get('upstream_commit')}`, licence {r.get('license')}"
                               + (f"; attribution: {r['attribution']}" if r.get("attribution") else "")
                               for r in ingested.values()]
    recorded["collection"] += [f"- model `{m.get('id')}` ({m.get('kind')}, {m.get('backend')}), revision "
                               f"{m.get('revision')}, weights md5 {m.get('weights_md5')}" for m in models.values()
                               if m.get("kind")]
    recorded["collection"] += [f"- MLflow run `{r['run_name']}` ({r['run_id']}): annotation_source "
                               f"{r['annotation_source'] or 'n/a'}" for r in runs.values()]
    for path, info in lineages.items():
        recorded["preprocessing"].append(f"- `{path}` was produced by " + (", ".join(
            f"`{s['name']}`" for s in info["stages"]) or "no stage (a hand-authored input)") + "; full chain in LINEAGE.json")
    recorded["preprocessing"] += [f"- gate `{g['suite']}` ({g['file']}): "
                                  + {True: "passed", False: "FAILED", None: "no verdict"}[g["passed"]] for g in gates]
    recorded["preprocessing"].append(f"- items flagged by the audit: {_summary_counts(problems)}")
    licences = sorted({str(r.get("license")) for r in ingested.values()})
    recorded["distribution"].append("- licences of ingested sources: " + (", ".join(licences) or "none ingested"))
    recorded["distribution"].append("- every file's sha256 is in SHA256SUMS")
    if fetch:
        remote = fetch["dvc_remote"]
        recorded["distribution"].append(
            f"- fetch the same bytes elsewhere: git revision `{fetch['revision'] or 'none (not a git work tree)'}` of "
            f"`{fetch['repository'] or 'this repository (no origin URL)'}`, DVC remote "
            + (f"`{remote['name']}` at `{remote['url']}`" if remote else "none configured")
            + "; `dvc get` and `dvc import` commands per path in FETCH.json")
        recorded["distribution"] += [f"- `{e['path']}`: " + ("recorded by that revision" if e["at_revision"] else
                                     "NOT what that revision records (an uncommitted rerun or edit)")
                                     for e in fetch["paths"]]
    for key, heading in DATASHEET_SECTIONS:
        lines += [f"## {heading}", ""]
        if spec.datasheet.get(key):
            lines += [f"*{spec.datasheet[key].strip()}*", ""]
        lines += recorded[key] or ["- nothing recorded"]
        lines.append("")
    return "\n".join(lines)


def _check_output_folder(output: Path) -> None:
    """The release folder must be new or empty, and not a file or under one: checked before any other work."""
    if output.exists() and not output.is_dir():
        raise ConfigError(f"release output {output} is a file: choose a new folder")
    parent = output
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"release output {output}: {parent} is a file, not a folder: choose a new folder")
    if output.exists() and any(output.iterdir()):
        raise ConfigError(f"release output {output} exists and is not empty: choose a new folder")


def release(study: str, block: Any, output: str | os.PathLike, *, allow_unreviewed: bool = False,
            root: str | os.PathLike = ".", tracking_uri: str | None = None) -> dict[str, Any]:
    """Assemble the release of ``study`` in ``output`` or raise :class:`ReleaseRefused` naming the items."""
    root = Path(root).resolve()
    spec = ReleaseSpec.from_config(study, block)
    output = Path(output)
    _check_output_folder(output)
    spec = resolve(spec, root)
    _check_item_ids(spec, root)
    absent = [pattern for pattern in spec.agreement if not _expand([pattern], root)]
    if absent:
        raise ConfigError(f"release.{study}.agreement: {absent} match(es) no file (a path the study no longer writes?)")
    problems, gates = audit(spec, root)
    if len(problems) and not allow_unreviewed:
        raise ReleaseRefused(
            f"release {study} refused: {len(problems)} item(s) are simulated, unreviewed machine output or failed a "
            f"gate ({_summary_counts(problems)}):\n{_describe_problems(problems)}\n"
            "Review them (or rerun with human judgements), or pass --allow-unreviewed to release them labelled so."
        )
    lineages = {path: trace(path, root=root, tracking_uri=tracking_uri) for path in spec.dataset}
    files = []
    for path in spec.dataset:
        source = root / path
        for f in ([source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())):
            rel = os.path.relpath(f, root).replace(os.sep, "/")
            dest = output / "data" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
            entry: dict[str, Any] = {"path": rel, "bytes": f.stat().st_size}
            if f.suffix == ".csv":
                entry["rows"] = int(len(pd.read_csv(f, dtype=str, keep_default_na=False)))
                entry["provenance"] = (lineages[path]["provenance"]["artefact"] or {}).get(rel)
            files.append(entry)
    for folder, patterns in (("gates", [g["file"] for g in gates]), ("agreement", spec.agreement)):
        for f in _expand(patterns, root):
            dest = output / folder / os.path.relpath(f, root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
    ingested = list({rec["record"]: rec for info in lineages.values() for rec in info["ingested"]}.values())
    fetch = fetch_record(spec.dataset, root)
    for warning in _fetch_warnings(study, fetch):
        print(f"warning: {warning}", file=sys.stderr)
    write_json(output / "FETCH.json", fetch)
    write_json(output / "SOURCES.json", ingested)
    write_json(output / "LINEAGE.json", lineages)
    write_json(output / "GATES.json", gates)
    if len(problems):
        problems.to_csv(output / "AUDIT.csv", index=False)
    write_text(output / "DATASHEET.md", build_datasheet(spec, problems=problems, gates=gates, lineages=lineages,
                                                        files=files, unreviewed=bool(len(problems)), fetch=fetch))
    sums = [f"{sha256_file(f)}  {f.relative_to(output).as_posix()}" for f in sorted(output.rglob("*")) if f.is_file()]
    write_text(output / "SHA256SUMS", "\n".join(sums) + "\n")
    return {"study": study, "output": str(output), "files": len(files), "flagged": int(len(problems)),
            "gates": gates, "fetch": fetch}
