"""A stage run by DVC stops when DVC dies, whether DVC's `$SHELL -c` replaced itself with the stage (bash) or
stays between them (dash, Debian's /bin/sh: CI, 2026-11-28)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# a stage's stand-in: stop_on_signals as the stage CLI uses it under DVC, then waits to be stopped
STAGE = """
import os, sys, time
from stereolens.stages.signals import StageInterrupted, stop_on_signals
out = sys.argv[1]
try:
    with stop_on_signals(with_parent=True):
        open(out + ".ready", "w").write(open(f"/proc/{os.getppid()}/comm").read().strip())
        time.sleep(120)
    open(out, "w").write("not stopped")
except StageInterrupted as stop:
    open(out, "w").write(str(stop))
"""

# DVC's stand-in: runs the stage as DVC does (`[$SHELL, -c, cmd]`, or the command itself) and waits
PARENT = """
import subprocess, sys
subprocess.Popen(sys.argv[1:]).wait()
"""


def _quoted(args: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in args)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
@pytest.mark.parametrize("shell", [None, "/bin/sh", "/bin/bash"], ids=["no shell", "sh", "bash"])
def test_a_stage_stops_when_the_process_that_ran_it_dies_through_any_shell(shell, tmp_path):
    if shell and not Path(shell).exists():
        pytest.skip(f"no {shell}")
    out = tmp_path / "stopped"
    stage = [sys.executable, "-c", STAGE, str(out)]
    # `; true` keeps even bash from replacing itself with the stage, as dash never does
    command = stage if shell is None else [shell, "-c", _quoted(stage) + "; true"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    dvc = subprocess.Popen([sys.executable, "-c", PARENT, *command], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        ready = Path(f"{out}.ready")
        while not (ready.exists() and ready.read_text()):
            assert dvc.poll() is None and time.monotonic() < deadline, "the stage did not start"
            time.sleep(0.05)
        # the case that failed: a shell between them, which outlives DVC
        assert (ready.read_text() == Path(shell).name) if shell else ready.read_text().startswith("python")
        dvc.kill()
        dvc.wait()
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists(), f"the stage ran on 10 s after its DVC died ({shell or 'no shell'})"
        assert out.read_text() == "SIGTERM"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(dvc.pid, signal.SIGKILL)
