"""``stereolens lineage PATH``: the chain of stages and inputs that produced an artefact."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from stereolens.errors import ConfigError, DataError
from stereolens.io import md5_file
from stereolens.lineage.graph import StageRecord, contains, load_stages, producer, producers_within
from stereolens.lineage.provenance import ingest_records, model_identities, provenance_of

# seed files whose text is put in front of a model: named so by the studies' seed layouts
_TEMPLATE_NAME = re.compile(r"prompt|template|rubric|scenario|instruction", re.I)
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"


def _relative(path: str | os.PathLike, root: Path) -> str:
    path = Path(path)
    absolute = path if path.is_absolute() else (root / path)  # relative paths are the repository's, as in dvc.yaml
    try:
        return os.path.relpath(absolute.resolve(), root).replace(os.sep, "/")
    except ValueError:
        return str(path)


def _calls_a_model(record: StageRecord) -> bool:
    return ("model" in record.params or any(k.startswith("models.") for k in record.params)
            or any(d.path.startswith("models/") for d in record.deps))


def _stage_model_params(record: StageRecord) -> tuple[Any, Any]:
    """(model config, model id) a stage declares: ``model`` / ``model.id``, or for a per-model stage
    ``models.<id>`` / ``models.<id>.id`` (its own entry of the ``models`` mapping)."""
    own = {k: v for k, v in record.params.items() if k.startswith("models.")}
    model = next((v for v in own.values() if isinstance(v, dict)), record.params.get("model"))
    model_id = next((v for k, v in own.items() if k.endswith(".id") and not isinstance(v, dict)),
                    record.params.get("model.id"))
    return model, model_id


def _models(record: StageRecord, root: Path) -> list[dict[str, Any]]:
    """The model a stage's params name, with the weights' DVC md5 and the identities its outputs recorded."""
    found = []
    model, model_id = _stage_model_params(record)
    if isinstance(model, dict):
        weights = next((d for d in record.deps if d.path == f"models/{model.get('id')}"), None)
        found.append({"stage": record.name, "id": model.get("id"), "name": model.get("name"),
                      "kind": model.get("kind"), "backend": model.get("backend"), "revision": model.get("revision"),
                      "weights_md5": weights.md5 if weights else None})
    elif model_id:
        found.append({"stage": record.name, "id": model_id})
    identities = [i for out in record.outs for i in model_identities(root / out.path)]
    for entry in found:
        entry["identities"] = identities
    if identities and not found:
        found.append({"stage": record.name, "identities": identities})
    return found


def _run_is_member(tags: dict[str, str], item: str) -> bool:
    """Whether a run belongs to the foreach/matrix member ``item`` of a stage: its language (``leakage_fit@hi``),
    its model (``crows_score@gemma3-270m``) or both (``leakage_fit@gemma3-270m-hi``); a run tagged with
    neither belongs to every member."""
    model, language = tags.get("model") or "", tags.get("language") or ""
    names = {n for n in (model, language, f"{model}-{language}" if model and language else "") if n}
    return not names or item in names


def mlflow_runs(stages: list[StageRecord], tracking_uri: str, root: Path) -> list[dict[str, Any]]:
    """The newest MLflow run per run name of every stage (matched by the ``study`` and ``stage`` tags)."""
    from stereolens.tracking.store import check_readable_store

    db = tracking_uri[len("sqlite:///"):] if tracking_uri.startswith("sqlite:///") else None
    if not check_readable_store(tracking_uri, root):
        if tracking_uri != DEFAULT_TRACKING_URI:  # a store named on purpose that is not there is a typo
            raise ConfigError(f"no MLflow store at {tracking_uri} (check --tracking-uri)")
        return []
    from mlflow.tracking import MlflowClient

    if db is not None and not Path(db).is_absolute():
        tracking_uri = f"sqlite:///{root / db}"
    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    found: list[dict[str, Any]] = []
    for record in stages:
        study = record.study
        if not study:
            continue
        base, _, item = record.name.partition("@")
        stage_tag = base[len(study) + 1:]
        query = f"tags.study = '{study}' and tags.stage = '{stage_tag}'"
        runs = client.search_runs(experiments, filter_string=query, order_by=["attributes.start_time DESC"],
                                  max_results=200)
        seen = set()
        for run in runs:
            tags = run.data.tags
            if item and not _run_is_member(tags, item):
                continue
            if run.info.run_name in seen:
                continue
            seen.add(run.info.run_name)
            found.append({
                "stage": record.name, "run_id": run.info.run_id, "run_name": run.info.run_name,
                "model": tags.get("model"), "annotation_source": tags.get("annotation_source"),
                "translation_status": tags.get("translation_status"), "git_commit": tags.get("git_commit"),
                "inputs": [{"name": d.dataset.name, "digest": d.dataset.digest} for d in run.inputs.dataset_inputs],
            })
    return found


def check_answerable(stages: list[StageRecord], target: str, given: str | os.PathLike, root: Path) -> None:
    """Refuse, in one line, a path lineage has nothing true to say about: outside the repository, neither an
    output of a stage (nor a folder of outputs) nor an input a stage reads or DVC tracks, or a file missing
    from a stage's output folder."""
    if target == ".." or target.startswith("../") or Path(target).is_absolute():
        raise DataError(f"{given}: outside the repository {root}; lineage answers for paths DVC tracks or a "
                        f"stage reads")
    made = producer(stages, target)
    if made is not None:
        record, out = made
        if out.path != target and not (root / target).exists():
            raise DataError(f"{given}: no such file in {out.path}, the output of stage {record.name}")
        return
    read = any(contains(dep.path, target) for record in stages for dep in record.deps)
    parts = Path(target).parts
    tracked = any((root / Path(*parts[:i])).with_name(parts[i - 1] + ".dvc").exists() for i in range(1, len(parts) + 1))
    if not (read or tracked or producers_within(stages, target)):
        raise DataError(f"{given}: not an output of any stage nor an input a stage reads or DVC tracks "
                        f"(dvc.yaml); lineage answers only for those")
    if not (root / target).exists():
        raise DataError(f"{given}: no such file or folder")


def _walk_back(stages: list[StageRecord], target: str) -> tuple[list[StageRecord], dict[str, str | None]]:
    """The stages that made ``target``, from it back to the sources (each once, in the order reached), and
    every dep no stage produces (data and code) with its recorded md5."""
    chain: list[StageRecord] = []
    sources: dict[str, str | None] = {}
    pending, visited = [target], set()
    while pending:
        wanted = pending.pop(0)
        if wanted in visited:
            continue
        visited.add(wanted)
        made = producer(stages, wanted)
        # a folder no single stage writes is made by every stage writing inside it
        for record, _ in ([made] if made else producers_within(stages, wanted)):
            if record in chain:
                continue
            chain.append(record)
            for dep in record.deps:
                if producer(stages, dep.path) or producers_within(stages, dep.path):
                    pending.append(dep.path)
                else:
                    sources[dep.path] = dep.md5
    return chain, sources


def _written_by(chain: list[StageRecord], path: str) -> str | None:
    """The stage of ``chain`` that wrote ``path``, or for a folder gathering several stages' outputs, all of them."""
    made_by = {out.path: r.name for r in chain for out in r.outs}
    exact = next((name for out, name in made_by.items() if contains(out, path)), None)
    return exact or ", ".join(sorted({name for out, name in made_by.items() if contains(path, out)})) or None


def _prompt_templates(chain: list[StageRecord], root: Path) -> list[dict[str, Any]]:
    """The seed files a model-calling stage of the chain reads whose names say they are put before a model."""
    templates: list[dict[str, Any]] = []
    for record in chain:
        if not _calls_a_model(record):
            continue
        for dep in record.deps:
            if dep.path.startswith("src/") or _written_by(chain, dep.path):
                continue
            dep_path = root / dep.path
            files = [dep_path] if dep_path.is_file() else sorted(p for p in dep_path.rglob("*") if p.is_file())
            for f in files:
                rel = _relative(f, root)
                if _TEMPLATE_NAME.search(rel) and rel not in [t["path"] for t in templates]:
                    templates.append({"path": rel, "md5": md5_file(f), "stage": record.name})
    return templates


def trace(path: str | os.PathLike, *, root: str | os.PathLike = ".", tracking_uri: str | None = None,
          stages: list[StageRecord] | None = None) -> dict[str, Any]:
    """Everything recorded about how ``path`` came to be (see the module docstring of the CLI)."""
    root = Path(root).resolve()
    target = _relative(path, root)
    stages = load_stages(root) if stages is None else stages
    check_answerable(stages, target, path, root)
    chain, sources = _walk_back(stages, target)
    produced = producer(stages, target)
    recorded_md5 = produced[1].md5 if produced and produced[1].path == target else None
    absolute = root / target
    current_md5 = md5_file(absolute) if absolute.is_file() else None
    data_sources = {p: m for p, m in sources.items() if not p.startswith("src/")}
    outputs = [o.path for r in chain for o in r.outs]
    ingested = [rec for p in [*sources, *outputs] if p.startswith("data/raw") for rec in ingest_records(root / p)]
    tables = {}
    for candidate in [target, *outputs, *data_sources]:
        for table, counts in provenance_of(root / candidate).items():
            tables.setdefault(_relative(table, root), counts)
    return {
        "artefact": target,
        "exists": absolute.exists(),
        "produced_by": produced[0].name if produced else None,
        "md5_recorded": recorded_md5,
        "md5_now": current_md5,
        "up_to_date": (recorded_md5 == current_md5) if recorded_md5 and current_md5 else None,
        "stages": [{"name": r.name, "cmd": r.cmd,
                    "deps": [{"path": d.path, "md5": d.md5, "produced_by": _written_by(chain, d.path)} for d in r.deps],
                    "outs": [{"path": o.path, "md5": o.md5} for o in r.outs],
                    "params": r.params} for r in chain],
        "inputs": [{"path": p, "md5": m} for p, m in sorted(data_sources.items())],
        "code": [{"path": p, "md5": m} for p, m in sorted(sources.items()) if p.startswith("src/")],
        "ingested": list({rec["record"]: rec for rec in ingested}.values()),  # each ingest record once
        "models": [m for r in chain for m in _models(r, root)],
        "prompt_templates": _prompt_templates(chain, root),
        "provenance": {"artefact": provenance_of(absolute) and {_relative(k, root): v for k, v in provenance_of(absolute).items()},
                       "chain": tables},
        "mlflow_runs": mlflow_runs(chain, tracking_uri or DEFAULT_TRACKING_URI, root),
    }


def _counts(counts: dict[str, dict[str, int]]) -> str:
    return "; ".join(f"{col}: " + ", ".join(f"{k or '(blank)'} {v}" for k, v in vals.items()) for col, vals in counts.items())


def format_lineage(info: dict[str, Any]) -> str:
    """A person's reading of :func:`trace`'s record."""
    lines = [f"artefact  {info['artefact']}" + ("" if info["exists"] else "  (not on disk)")]
    if info["produced_by"]:
        state = {True: "matches dvc.lock", False: "DIFFERS from dvc.lock (stale: rerun `dvc repro`)",
                 None: ""}[info["up_to_date"]]
        lines.append(f"produced by stage {info['produced_by']}; md5 {info['md5_recorded'] or '(inside a tracked directory)'}"
                     + (f"; now {info['md5_now']} {state}" if info["md5_now"] else ""))
    else:
        lines.append("not produced by any stage: a source input" + (f" (md5 {info['md5_now']})" if info["md5_now"] else ""))
    if info["provenance"]["artefact"]:
        lines.append("items of the artefact:")
        for table, counts in info["provenance"]["artefact"].items():
            lines.append(f"  {table}: {_counts(counts)}")
    lines.append("")
    lines.append(f"chain ({len(info['stages'])} stage(s), from the artefact back to the sources):")
    for s in info["stages"]:
        lines.append(f"  {s['name']}: {s['cmd']}")
        for d in s["deps"]:
            origin = f"  <- {d['produced_by']}" if d["produced_by"] else ""
            lines.append(f"    dep  {d['path']}  {d['md5'] or '-'}{origin}")
        for o in s["outs"]:
            lines.append(f"    out  {o['path']}  {o['md5'] or '-'}")
        for key, value in s["params"].items():
            lines.append(f"    param {key} = {value!r}"[:300])
    lines.append("")
    lines.append("source inputs:")
    lines += [f"  {i['path']}  {i['md5'] or '-'}" for i in info["inputs"]] or ["  (none)"]
    if info["ingested"]:
        lines.append("ingested datasets:")
        for rec in info["ingested"]:
            lines.append(f"  {rec.get('dataset')}: licence {rec.get('license')}, upstream commit "
                         f"{rec.get('upstream_commit')}, {len(rec.get('files', []))} file(s) by sha256 ({rec['record']})")
            if rec.get("attribution"):  # the credit the licence asks for (records written before it have none)
                lines.append(f"    attribution: {rec['attribution']}")
            if rec.get("files"):
                lines.append("    files: " + ", ".join(str(f.get("file")) for f in rec["files"]))
    lines.append("models:")
    for m in info["models"]:
        lines.append(f"  {m['stage']}: {m.get('id')} name={m.get('name')} revision={m.get('revision')} "
                     f"weights_md5={m.get('weights_md5')}")
        lines += [f"    identity {i}" for i in m.get("identities", [])]
    if not info["models"]:
        lines.append("  (no model stage in the chain)")
    lines.append("prompt templates:")
    lines += [f"  {t['path']}  {t['md5']}  (read by {t['stage']})" for t in info["prompt_templates"]] or ["  (none)"]
    lines.append("provenance columns in the chain's tables:")
    lines += [f"  {t}: {_counts(c)}" for t, c in info["provenance"]["chain"].items()] or ["  (none)"]
    lines.append("MLflow runs:")
    lines += [f"  {r['run_name']}  {r['run_id']}  annotation_source={r['annotation_source']}"
              + (f" translation_status={r['translation_status']}" if r["translation_status"] else "")
              for r in info["mlflow_runs"]] or ["  (none recorded)"]
    return "\n".join(lines)
