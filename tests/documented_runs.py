"""Run the commands README.md and docs/ show, as shown, in a checkout that has run (issue #33 part 5).

Each documented ``stereolens`` and ``dvc`` command (extracted by ``test_examples.documented_commands``) is either
run in the checkout, where it must exit as documented, or set aside for one stated reason:

* a synopsis: placeholders (``DIR``, ``<name>``, ``[--json]``, ``{a,b}``) stand for what the reader fills in;
* it needs a file that is neither in the repository nor written by the run (a study the run left out);
* it needs a DVC remote or a git server (tests/test_dvc_remote.py runs those against a loopback S3);
* it runs an experiment (tests/test_experiment_roundtrip.py and tests/tracking/test_dvc_queue.py run those on a
  sandbox repository), or `dvc repro` of stages the run left out;
* it writes over an output of the run it checks (``models prepare --output models/...``).

A synopsis with only optional parts and alternatives (``power --dataset crows [--json]``) runs as its fullest
variant.

``tests/test_documented_commands_run.py`` does it after a small pipeline run (the crows slice, tiny models); after
``make run``, ``make docs-check`` does it on the default run and prints every command's outcome.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_examples import documented_commands, variants  # noqa: E402

# a placeholder the reader replaces: `<name>`, or a metavariable in capitals (DIR, FILE, PATH_OR_NAME)
PLACEHOLDER = re.compile(r"<[^>]+>|(?<![\w.-])(?!HEAD\b)[A-Z][A-Z_]{1,}[A-Z](?![\w.-])")
# a synopsis's optional parts and alternatives: `[--json]`, `{a,b}`, `keep|drop`
OPTIONAL = re.compile(r"[\[\]{}]|\S\|\S")
REMOTE = ("dvc push", "dvc pull", "dvc fetch", "dvc exp push", "dvc exp pull", "dvc remote", "dvc get",
          "dvc import")
EXPERIMENTS = ("dvc exp run", "dvc exp apply", "dvc queue")
# options whose value is not a path the command reads: what it writes, and `dvc exp show`'s column patterns
NOT_READ = ("--output", "--csv", "-o", "--drop", "--keep")
# documented commands that rewrite params.yaml: run last, and the file is put back afterwards
WRITES_PARAMS = "stereolens config compose"
# what a command may exit with, where the docs say it refuses (docs/lineage-and-release.md)
EXPECTED_EXIT = {"stereolens release pcs --output release/pcs": (2,)}

REASONS = ("a synopsis with placeholders", "needs", "needs a DVC remote or a git server",
           "runs an experiment", "runs stages this run left out", "writes over an output of the run")
# where the pipeline's outputs live: a documented command that writes there would change the run it checks
PIPELINE_ROOTS = ("data/", "reports/", "models/")


@dataclass
class Outcome:
    doc: str
    command: str
    ran: bool
    reason: str = ""  # why it was not run
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""  # the last lines, for a failure

    @property
    def failed(self) -> bool:
        return self.ran and self.returncode not in EXPECTED_EXIT.get(self.command, ()) + (0,)


def _inputs(words: list[str]) -> list[str]:
    """The paths a command reads: words with a path's shape that are not an output option's value or an override."""
    found = []
    for before, word in zip([""] + words, words):
        if before in NOT_READ or word.startswith("-") or "=" in word or "://" in word:
            continue
        word = word.lstrip("@")
        if "/" in word or re.search(r"\.(csv|json|txt|yaml|md)$", word):
            found.append(word)
    return found


def classify(command: str, root: Path, studies: set[str] | None) -> tuple[list[str] | None, str]:
    """(the words to run, "") when the command can run in ``root``, else (None, the reason it is set aside).
    A synopsis with optional parts or alternatives runs as its fullest variant (every ``[...]`` present, the first
    of each ``{a,b}``).  ``studies``: the studies whose stages ran (None: all of them, the default run)."""
    if command.startswith(REMOTE):
        return None, REASONS[2]
    if command.startswith(EXPERIMENTS):
        return None, REASONS[3]
    words = shlex.split(command)
    # a Hydra override's brackets and braces are literal (`'compare_with=[]'`)
    literal = [word for word in words if "=" not in word]
    if any(PLACEHOLDER.search(word) for word in literal):
        return None, REASONS[0]
    if any(OPTIONAL.search(word) for word in literal):
        words = [words[0], *variants(command)[0]]
    if command.startswith("dvc repro"):
        targets = [w for w in words[2:] if not w.startswith("-")]
        if studies is not None and (not targets or any(t.split("_")[0] not in studies for t in targets)):
            return None, REASONS[4]
        return words, ""
    if any(before in NOT_READ and word.startswith(PIPELINE_ROOTS) for before, word in zip(words, words[1:])):
        return None, REASONS[5]
    missing = [path for path in _inputs(words[1:]) if not (root / path).exists()]
    if missing:
        return None, f"{REASONS[1]} {missing[0]}"
    if "--model" in words:
        # a run of a model that is not a converted package records only a reference under models/<id>
        model = words[words.index("--model") + 1]
        if model.startswith("models/") and not (root / model / "config.json").is_file():
            return None, f"{REASONS[1]} a model in {model}"
    study = _study_of(words)
    if study and studies is not None and study not in studies:
        return None, f"{REASONS[1]} the {study} study's runs"
    if words[:2] == ["stereolens", "reproduce"] and "--stage" not in words and studies is not None:
        return None, f"{REASONS[1]} every stage's run (it checks them all)"
    return words, ""


def _study_of(words: list[str]) -> str | None:
    """The study a reading command is about (`compare --study X`, `release X`), None for the others."""
    if words[:2] == ["stereolens", "release"] and len(words) > 2:
        return words[2]
    if words[:2] == ["stereolens", "compare"] and "--study" in words:
        return words[words.index("--study") + 1]
    return None


def run_documented(root: Path, env: dict[str, str], studies: set[str] | None = None,
                   timeout_s: float = 600) -> list[Outcome]:
    """Every documented command, run in ``root`` or set aside (:func:`classify`), compose commands last."""
    commands = documented_commands("stereolens") + documented_commands("dvc")
    commands.sort(key=lambda item: item[1].startswith(WRITES_PARAMS))
    params = (root / "params.yaml").read_bytes()
    outcomes = []
    try:
        for doc, command in commands:
            words, reason = classify(command, root, studies)
            if words is None:
                outcomes.append(Outcome(doc, command, ran=False, reason=reason))
                continue
            started = time.monotonic()
            argv = [sys.executable, "-m", "stereolens", *words[1:]] if words[0] == "stereolens" else \
                [sys.executable, "-m", "dvc", *words[1:]]
            res = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
            tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-8:])
            outcomes.append(Outcome(doc, command, ran=True, returncode=res.returncode,
                                    seconds=time.monotonic() - started, output=tail))
    finally:
        (root / "params.yaml").write_bytes(params)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    lines = []
    for o in outcomes:
        status = (f"FAILED (exit {o.returncode})" if o.failed else f"ran, exit {o.returncode}, {o.seconds:.1f} s") \
            if o.ran else f"not run: {o.reason}"
        lines.append(f"{o.doc}: {o.command}\n    {status}")
        if o.failed:
            lines.append("    " + o.output.replace("\n", "\n    "))
    ran = [o for o in outcomes if o.ran]
    lines.append(f"{len(outcomes)} documented commands: {len(ran)} ran, {sum(o.failed for o in ran)} failed, "
                 f"{len(outcomes) - len(ran)} not run")
    return "\n".join(lines)


def main() -> int:
    """`make docs-check`: every documented command on this checkout's default run."""
    root = Path.cwd()
    if not (root / "dvc.lock").is_file() or not (root / "reports").is_dir():
        print("docs-check: no run here (dvc.lock and reports/): make run first", file=sys.stderr)
        return 2
    outcomes = run_documented(root, dict(os.environ))
    print(table(outcomes))
    return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
