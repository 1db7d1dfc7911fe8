"""A real git + DVC repository with a two-stage pipeline, for the experiment, remote and release tests.

The pipeline mirrors the project's shape in miniature: ``toy_score@<model>`` (a ``foreach`` over
two model ids, a param ``toy.limit``) writes ``data/interim/toy/<model>/scores.csv``, and
``toy_report`` reads them and writes ``reports/toy/summary.json`` (a DVC metric) and
``reports/toy/report.md``.  ``TOY_MACHINE`` stands for what differs between two machines that
run the same code (float32 kernels chosen per CPU): it changes the last digits the scores are
written with but is no dependency, exactly like the CPU under the real pipeline, so a lock
committed from one machine names outputs that another machine's cache never held.

Every command is the real ``git`` or ``dvc`` (DVC through the interpreter running the tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

MODELS = ("tiny-a", "tiny-b")
OUTPUT_ROOTS = ("data/interim/toy", "reports/toy")

SCORE = textwrap.dedent("""\
    import os, sys, pathlib, yaml
    model = sys.argv[1]
    limit = yaml.safe_load(open("params.yaml"))["toy"]["limit"]
    machine = int(os.environ.get("TOY_MACHINE", "0"))
    out = pathlib.Path("data/interim/toy") / model
    out.mkdir(parents=True, exist_ok=True)
    rows = ["item_id,score,source"]
    for i in range(limit):
        # the 12th significant digit moves with the machine, as float32 kernels do across CPUs
        score = (i + 1) / (len(model) + 3) + machine * 1e-12
        rows.append(f"q{i},{score:.15g},human")
    (out / "scores.csv").write_text("\\n".join(rows) + "\\n")
""")

REPORT = textwrap.dedent("""\
    import csv, json, pathlib, yaml
    models = yaml.safe_load(open("params.yaml"))["model_ids"]
    summary = {}
    for model in models:
        with open(f"data/interim/toy/{model}/scores.csv") as handle:
            scores = [float(row["score"]) for row in csv.DictReader(handle)]
        summary[model] = {"n": len(scores), "mean_score": round(sum(scores) / len(scores), 6)}
    out = pathlib.Path("reports/toy"); out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\\n")
    (out / "report.md").write_text("".join(f"- {m}: {v['n']} items, mean {v['mean_score']}\\n"
                                           for m, v in summary.items()))
""")

DVC_YAML = {
    "stages": {
        "toy_score": {
            "foreach": "${model_ids}",
            "do": {"cmd": "python score.py ${item}", "deps": ["score.py"], "params": ["toy.limit"],
                   "outs": ["data/interim/toy/${item}/scores.csv"]},
        },
        "toy_report": {
            "cmd": "python report.py",
            "deps": ["report.py", *[f"data/interim/toy/{m}/scores.csv" for m in MODELS]],
            "params": ["model_ids"],
            "outs": ["reports/toy/report.md"],
            "metrics": ["reports/toy/summary.json"],
        },
    }
}


def env(machine: int, **extra: str) -> dict[str, str]:
    """The environment of one "machine": no git identity or DVC setting leaks in from the caller's."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "DVC_"))}
    out.update({"TOY_MACHINE": str(machine), "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t",
                "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1"})
    out.update(extra)
    return out


def run(cwd: Path, *args: str, machine: int = 0, check: bool = True,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``git ...`` or ``dvc ...`` in ``cwd``; on failure the assertion shows both streams."""
    argv = [sys.executable, "-m", "dvc", *args[1:]] if args[0] == "dvc" else list(args)
    done = subprocess.run(argv, cwd=cwd, env=env(machine, **(extra_env or {})), capture_output=True,
                          text=True, timeout=240)
    if check:
        assert done.returncode == 0, f"`{' '.join(args)}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def shell(cwd: Path, command: str, machine: int = 0, extra_env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess:
    """A documented command line as a user types it (``dvc`` resolved to the tests' interpreter)."""
    bindir = str(Path(sys.executable).parent)
    environment = env(machine, **(extra_env or {}))
    environment["PATH"] = bindir + os.pathsep + environment.get("PATH", "")
    return subprocess.run(["bash", "-c", "set -e\n" + command], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=240)


def make_repo(root: Path, *, limit: int = 4) -> Path:
    """A git + DVC repository holding the pipeline (not yet run), committed."""
    root.mkdir(parents=True, exist_ok=True)
    run(root, "git", "init", "-q", "-b", "main")
    run(root, "dvc", "init", "-q")
    (root / "score.py").write_text(SCORE)
    (root / "report.py").write_text(REPORT)
    (root / "params.yaml").write_text(json.dumps({"model_ids": list(MODELS), "toy": {"limit": limit}}) + "\n")
    import yaml

    (root / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    run(root, "git", "add", "-A")
    run(root, "git", "commit", "-q", "-m", "pipeline")
    return root


def outputs(root: Path) -> dict[str, bytes]:
    """Every file under the pipeline's output folders, by path relative to ``root``."""
    found = {}
    for top in OUTPUT_ROOTS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and path.name != ".gitignore":
                found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found
