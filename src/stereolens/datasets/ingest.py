"""Obtain a public dataset byte-for-byte as pinned, or refuse it.

Files come from ``$STEREOLENS_DATA_MIRROR/<dataset>/<file>`` when the mirror is
set (offline machines), otherwise from the pinned upstream URL.  Either way the
sha256 must match the registry, and the dataset directory is replaced only
once every file has been verified.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from stereolens.errors import DataError
from stereolens.io import sha256_file, write_json

MIRROR_ENV = "STEREOLENS_DATA_MIRROR"


@dataclass(frozen=True)
class FileSpec:
    name: str
    upstream: str
    sha256: str


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    license: str
    base_url: str
    commit: str
    files: tuple[FileSpec, ...]
    description: str = ""
    # the citation the licence asks for (CC BY: "appropriate credit"), carried with the licence
    attribution: str = ""


def load_registry(path: str | os.PathLike) -> dict[str, DatasetSpec]:
    path = Path(path)
    if not path.exists():
        raise DataError(f"dataset registry not found: {path}")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    registry = {}
    for name, entry in raw.items():
        try:
            files = tuple(FileSpec(fname, f["upstream"], f["sha256"]) for fname, f in entry["files"].items())
            registry[name] = DatasetSpec(
                name=name,
                license=entry["license"],
                base_url=entry["base_url"].rstrip("/"),
                commit=entry["commit"],
                files=files,
                description=entry.get("description", ""),
                attribution=entry.get("attribution", ""),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"dataset registry {path}: entry {name!r} is malformed (missing {exc})") from exc
    return registry


def upstream_url(spec: DatasetSpec, fspec: FileSpec) -> str:
    """The pinned download address of one file: its upstream path percent-encoded (SeeGULL's file names hold
    spaces and parentheses, ``dataset/stereotypes/Spanish (es) in Mexico.csv``), the folders kept."""
    return f"{spec.base_url}/{urllib.parse.quote(fspec.upstream, safe='/')}"


def _fetch(spec: DatasetSpec, fspec: FileSpec, dest: Path, mirror: Path | None) -> str:
    if mirror is not None:
        src = mirror / spec.name / fspec.name
        if not src.exists():
            raise DataError(f"{spec.name}: {fspec.name} not found in mirror {mirror / spec.name}")
        shutil.copyfile(src, dest)
        # relative, so the provenance record (and its DVC hash) does not depend on where the mirror lives
        return f"mirror:{spec.name}/{fspec.name}"
    url = upstream_url(spec, fspec)
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(dest, "wb") as out:
            shutil.copyfileobj(resp, out)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DataError(
            f"{spec.name}: cannot download {url} ({exc}); set {MIRROR_ENV} to a directory holding {spec.name}/"
        ) from exc
    return url


def ingest_dataset(spec: DatasetSpec, output_dir: str | os.PathLike, *, mirror: str | os.PathLike | None = None) -> Path:
    """Verify every file of ``spec`` into ``output_dir`` (replaced atomically) with a provenance record."""
    output_dir = Path(output_dir)
    mirror_path = Path(mirror) if mirror else None
    if mirror_path is not None and not mirror_path.is_dir():
        raise DataError(f"{MIRROR_ENV}={mirror_path} is not a directory")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        provenance = []
        for fspec in spec.files:
            dest = staging / fspec.name
            origin = _fetch(spec, fspec, dest, mirror_path)
            digest = sha256_file(dest)
            if digest != fspec.sha256:
                raise DataError(
                    f"{spec.name}: checksum mismatch for {fspec.name} from {origin}: "
                    f"sha256 {digest}, expected {fspec.sha256}; file refused"
                )
            provenance.append({"file": fspec.name, "origin": origin, "sha256": digest})
        write_json(
            staging / "PROVENANCE.json",
            {
                "dataset": spec.name,
                "license": spec.license,
                "attribution": spec.attribution,
                "upstream_commit": spec.commit,
                "source": "mirror" if mirror_path else "upstream",
                "files": provenance,
            },
        )
        if output_dir.exists():
            shutil.rmtree(output_dir)
        os.replace(staging, output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return output_dir


PROVENANCE = "PROVENANCE.json"


def verify_ingested(path: str | os.PathLike) -> Path:
    """Re-check a file under ``data/raw/<dataset>/`` against the sha256 its ingest recorded.

    A stage reading raw data calls this first, so a file edited or replaced after
    ingest is refused instead of silently feeding every number downstream.  A
    folder without ``PROVENANCE.json`` (a hand-placed test fixture) is not checked.
    """
    path = Path(path)
    record = path.parent / PROVENANCE
    if not record.is_file():
        return path
    try:
        files = {f["file"]: f["sha256"] for f in json.loads(record.read_text(encoding="utf-8"))["files"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{record} is malformed ({exc}); re-run the ingest stage") from None
    expected = files.get(path.name)
    if expected is None:
        raise DataError(f"{path} is not listed in {record}: it was not ingested; re-run the ingest stage")
    if not path.is_file():
        raise DataError(f"{path} not found (listed in {record}); run `dvc checkout {path.parent}`")
    digest = sha256_file(path)
    if digest != expected:
        raise DataError(
            f"{path} changed after ingest: sha256 {digest[:16]}..., recorded {expected[:16]}... in {record}; "
            f"run `dvc checkout {path.parent}` (or re-run the ingest stage) to restore it"
        )
    return path
