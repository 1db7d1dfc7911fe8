"""Trying an experiment and going back to the baseline, as docs/running.md and the README say, end to end.

Issue #33: after `dvc exp run` and `dvc exp apply`, the documented way back (`git checkout params.yaml
dvc.lock && dvc checkout`) failed on any machine but the one that committed the lock and deleted
outputs: the committed lock names the other machine's bytes, which this machine's cache never held.
Here a repository (tests/dvc_sandbox.py) is committed from "machine 1", cloned and run on "machine 2"
with no remote, and the commands the docs show are run as shown: the way back must restore machine 2's
baseline outputs byte for byte, delete nothing and leave `dvc status` clean.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dvc_sandbox as sandbox

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
RUNNING = REPO / "docs" / "running.md"


def documented_way_back() -> list[str]:
    """The commands of the first fenced block after docs/running.md's "Back to the baseline", comments dropped."""
    text = RUNNING.read_text(encoding="utf-8")
    start = text.index("**Back to the baseline.**")
    block = re.search(r"```bash\n(.*?)```", text[start:], flags=re.S)
    assert block, "docs/running.md: no command block after 'Back to the baseline'"
    commands = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [c for c in commands if c and not c.startswith("#")]


def test_the_readme_gives_the_same_way_back_as_docs_running():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"`{' && '.join(documented_way_back())}`" in readme


@pytest.fixture()
def second_machine(tmp_path) -> Path:
    """A clone, run on machine 2, of a repository whose dvc.lock machine 1 committed."""
    origin = sandbox.make_repo(tmp_path / "origin")
    sandbox.run(origin, "dvc", "repro", "-q", machine=1)
    sandbox.run(origin, "git", "add", "dvc.lock")
    sandbox.run(origin, "git", "commit", "-q", "-m", "the committed run (machine 1)")
    clone = tmp_path / "clone"
    sandbox.run(tmp_path, "git", "clone", "-q", str(origin), str(clone))
    sandbox.run(clone, "dvc", "repro", "-q", machine=2)  # `make run` here
    return clone


def test_an_experiment_and_the_documented_way_back_restore_the_exact_baseline(second_machine):
    clone = second_machine
    baseline = sandbox.outputs(clone)
    committed = sandbox.run(clone, "git", "show", "HEAD:dvc.lock").stdout
    assert len(baseline) == 4
    assert sandbox.run(clone, "git", "diff", "--stat", "dvc.lock").stdout.strip(), \
        "machine 2's scores should differ from machine 1's in their last digits (the case of the issue)"

    # trying without touching the workspace: --temp runs in a copy under .dvc/tmp/exps
    sandbox.run(clone, "dvc", "exp", "run", "--temp", "-S", "toy.limit=2", "-n", "aside", machine=2)
    assert sandbox.outputs(clone) == baseline

    # trying in the workspace, then applying an experiment
    sandbox.run(clone, "dvc", "exp", "run", "-S", "toy.limit=6", "-n", "trial", "toy_report", machine=2)
    sandbox.run(clone, "dvc", "exp", "apply", "aside", machine=2)
    assert sandbox.outputs(clone) != baseline

    # machine 3: a stage the way back ran again instead of restoring would write other bytes
    done = sandbox.shell(clone, "\n".join(documented_way_back()), machine=3)
    assert done.returncode == 0, f"the documented way back failed:\n{done.stdout}\n{done.stderr}"
    after = sandbox.outputs(clone)
    assert sorted(after) == sorted(baseline), "the way back deleted or added outputs"
    for path, content in baseline.items():
        assert after[path] == content, f"{path} is not the baseline's bytes after the way back"
    status = sandbox.run(clone, "dvc", "status", machine=2).stdout
    assert "up to date" in status, status
    assert sandbox.run(clone, "git", "diff", "--quiet", "params.yaml", check=False).returncode == 0
    # the committed lock is not what this machine ran: it stays as the rerun wrote it, not machine 1's
    assert (clone / "dvc.lock").read_text() != committed
