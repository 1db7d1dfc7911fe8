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
  SIGTERM when DVC, its parent, dies.  A SIGINT sent to DVC's process alone is ignored by DVC before it can
  reach anyone: signal the process group (``kill -INT -- -PGID``, what Ctrl-C does) or send SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class StageInterrupted(KeyboardInterrupt):
    """Raised in a stage's main thread by SIGINT or SIGTERM; a ``KeyboardInterrupt``, so that everything that
    cleans up after Ctrl-C (the guard, the scoring threads, MLflow's run) does so for SIGTERM too."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _interrupt(signum: int, frame) -> None:
    raise StageInterrupted(signum)


def _term_when_parent_dies() -> None:
    """Ask Linux for a SIGTERM when the parent process (DVC) dies; nothing elsewhere."""
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


@contextlib.contextmanager
def stop_on_signals(*, with_parent: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`StageInterrupted` in the block (whatever the process inherited);
    ``with_parent``: and the parent's death sends SIGTERM (a stage run by DVC)."""
    previous = {s: signal.signal(s, _interrupt) for s in STOP_SIGNALS}
    try:
        if with_parent:
            _term_when_parent_dies()
        yield
    finally:
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
