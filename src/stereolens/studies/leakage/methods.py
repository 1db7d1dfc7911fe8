"""The association methods of Cao et al. 2024 and the model kinds that run them."""

from __future__ import annotations

# every association method: a model kind runs some of them, the others are NaN in its runs
ALL_METHODS = ("set", "ilps", "choice")


def methods_for_kind(kind: str) -> list[str]:
    """The association methods Cao et al. 2024 applies to a model kind."""
    return {"masked": ["set"], "causal": ["ilps", "choice"], "seq2seq": ["ilps"], "chat": ["choice"],
            "completion": ["choice"]}.get(kind, [])

