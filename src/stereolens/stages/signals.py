"""A stage stops within seconds on SIGINT or SIGTERM, and leaves its outputs as :mod:`stereolens.stages.guard`
promises (under ``dvc repro``: the earlier run's, checked out of the DVC cache again).

Three gaps close here:

* Python turns SIGINT into ``KeyboardInterrupt`` only when the process did not inherit it ignored, and a shell
  starts a script's background jobs with SIGINT ignored: ``dvc repro &`` in a script, then ``kill -INT`` of its
  process group, reached a stage that went on to the end and exited 0.  A stage installs its own handler.
* SIGTERM, Python's default, ends the process on the spot: no ``finally`` runs, so under ``dvc repro`` the
  guard never put back the outputs DVC had removed.  A stage turns it into an exception like SIGINT's.
* DVC ignores SIGINT while a stage runs (it counts on the terminal's Ctrl-C reaching the stage, which shares its
  process group) and dies at once on SIGTERM, which would leave the stage running unseen, writing outputs
  ``dvc.lock`` will never record.  Under DVC the stage asks the kernel (Linux ``PR_SET_PDEATHSIG``) for a
  SIGTERM when its parent dies.  DVC runs a command through ``$SHELL -c`` (``/bin/sh`` when unset); bash
  replaces itself with the command, but dash (Debian's ``/bin/sh``) stays between them and outlives DVC, so
  the stage also watches each shell between it and DVC and stops when one of them loses its parent (CI,
  2026-11-28: with no ``$SHELL``, a stage scored to the end after DVC was gone).  A SIGINT sent to DVC's
  process alone is ignored by DVC before it can reach anyone: signal the process group (``kill -INT --
  -PGID``, what Ctrl-C does) or send SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# what DVC may run a stage's command through: `$SHELL -c CMD`
SHELLS = frozenset({"sh", "dash", "bash", "zsh", "fish", "ksh", "mksh", "busybox"})
WATCH_INTERVAL_S = 0.2


class StageInterrupted(KeyboardInterrupt):
    """Raised in a stage's main thread by SIGINT or SIGTERM; a ``KeyboardInterrupt``, so that everything that
    cleans up after Ctrl-C (the guard, the scoring threads, MLflow's run) does so for SIGTERM too."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _interrupt(signum: int, frame) -> None:
    raise StageInterrupted(signum)


def _parent_of(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc`` (None: the process is gone)."""
    try:
        stat = open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ")"
    return int(stat.rsplit(")", 1)[1].split()[1])


def _name_of(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace").read().strip()
    except OSError:
        return ""


def _shells_above() -> list[tuple[int, int]]:
    """(shell, its parent) for each shell between this process and the first ancestor that is not one (DVC)."""
    links = []
    pid = os.getppid()
    while pid > 1 and _name_of(pid) in SHELLS:
        parent = _parent_of(pid)
        if parent is None:
            break
        links.append((pid, parent))
        pid = parent
    return links


def _watch(links: list[tuple[int, int]], done: threading.Event) -> None:
    """SIGTERM to this process once a shell between it and DVC has lost its parent (DVC died; Linux
    re-parents a dead process's children at once, before anyone reaps it)."""
    while not done.wait(WATCH_INTERVAL_S):
        if any(_parent_of(shell) != parent for shell, parent in links):
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _term_when_parent_dies(done: threading.Event) -> None:
    """Ask Linux for a SIGTERM when the parent process dies, and watch the shells above (if any) for DVC's
    death; nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request took effect
        raise StageInterrupted(signal.SIGTERM)
    links = _shells_above()
    if links and links[-1][1] == 1:  # the shell's parent is init: DVC was gone before the stage looked
        raise StageInterrupted(signal.SIGTERM)
    if links:
        threading.Thread(target=_watch, args=(links, done), name="stereolens-parent-watch", daemon=True).start()


@contextlib.contextmanager
def stop_on_signals(*, with_parent: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`StageInterrupted` in the block (whatever the process inherited);
    ``with_parent``: and the parent's death sends SIGTERM (a stage run by DVC)."""
    previous = {s: signal.signal(s, _interrupt) for s in STOP_SIGNALS}
    done = threading.Event()
    try:
        if with_parent:
            _term_when_parent_dies(done)
        yield
    finally:
        done.set()
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM do nothing in the block: the stage is already stopping, and a second Ctrl-C must not
    stop the guard halfway through putting the earlier outputs back.  (Handlers, not a signal mask: a mask holds
    for one thread, and a signal another thread receives still runs its Python handler in the main thread.)"""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
