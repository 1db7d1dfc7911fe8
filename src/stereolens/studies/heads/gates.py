"""Per-head gates on the attention output, and replay of the frozen layers below them.

A head is switched off by multiplying its slice of the concatenated head outputs
by zero just before the attention output projection (``o_proj`` / BERT's
``attention.output.dense``), through a forward pre-hook.  This works whatever
attention implementation the model uses and does not depend on the
``head_mask`` argument, which recent transformers versions dropped.  The gate is
either one (layers x heads) array for the whole batch or one per example, so
many coalitions run side by side in one batched pass.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from stereolens.errors import ConfigError

# Attention output projections of the encoder and decoder families we support: BERT,
# RoBERTa, XLM-R, ELECTRA (attention.output.dense); Llama, Gemma, Qwen, Mistral (self_attn.o_proj);
# GPT-2 (attn.c_proj); OPT (self_attn.out_proj).
_PROJECTION = re.compile(r"^(?P<stack>.*?)\.(?P<layer>\d+)\.(attention\.output\.dense|self_attn\.o_proj|attn\.c_proj|self_attn\.out_proj)$")


def _num_heads(model: Any) -> int:
    config = model.config
    config = getattr(config, "text_config", None) or config
    for key in ("num_attention_heads", "n_head", "num_heads"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    raise ConfigError(f"cannot read the number of attention heads from {type(model.config).__name__}")


class HeadGate:
    """Forward pre-hooks that scale each head's output; ``gate`` None means ungated.

    ``gate`` is a float tensor of shape (layers, heads) for the whole batch or
    (batch, layers, heads) for one gate per example.
    """

    def __init__(self, model: Any) -> None:
        found = []
        for name, module in model.named_modules():
            match = _PROJECTION.match(name)
            if match:
                found.append((match.group("stack"), int(match.group("layer")), module))
        if not found:
            raise ConfigError(f"no attention output projection found in {type(model).__name__}: "
                              "heads can be gated in BERT-, RoBERTa-, Llama-, Gemma-, GPT-2- and OPT-style models")
        stacks = {stack for stack, _, _ in found}
        if len(stacks) != 1:
            raise ConfigError(f"{type(model).__name__} has several attention stacks ({sorted(stacks)}); only one is gated")
        self.stack_name = stacks.pop()
        found.sort(key=lambda item: item[1])
        self.projections = [module for _, _, module in found]
        self.n_layers = len(self.projections)
        self.n_heads = _num_heads(model)
        self.model = model
        self.gate: torch.Tensor | None = None
        self._handles = [proj.register_forward_pre_hook(self._hook(i)) for i, proj in enumerate(self.projections)]

    @property
    def layers(self) -> torch.nn.ModuleList:
        """The module list of transformer blocks the gated projections live in."""
        return self.model.get_submodule(self.stack_name)

    def _hook(self, layer: int):
        def scale_heads(module, args):
            if self.gate is None:
                return None
            x = args[0]
            head_dim = x.shape[-1] // self.n_heads
            g = self.gate.to(dtype=x.dtype, device=x.device)
            if g.dim() == 2:
                g = g[layer].view(*([1] * (x.dim() - 1)), self.n_heads, 1)
            else:
                if g.shape[0] != x.shape[0]:
                    raise ValueError(f"per-example gate has {g.shape[0]} rows for a batch of {x.shape[0]}")
                g = g[:, layer].view(x.shape[0], *([1] * (x.dim() - 2)), self.n_heads, 1)
            scaled = x.reshape(*x.shape[:-1], self.n_heads, head_dim) * g
            return (scaled.reshape(x.shape), *args[1:])

        return scale_heads

    @contextlib.contextmanager
    def applied(self, gate: torch.Tensor | None) -> Iterator[None]:
        previous, self.gate = self.gate, gate
        try:
            yield
        finally:
            self.gate = previous

    def ones(self) -> torch.Tensor:
        return torch.ones(self.n_layers, self.n_heads)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _take_rows(obj: Any, rows: torch.Tensor, n_total: int) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, rows) if obj.dim() and obj.shape[0] == n_total else obj
    if isinstance(obj, tuple):
        return tuple(_take_rows(item, rows, n_total) for item in obj)
    if isinstance(obj, list):
        return [_take_rows(item, rows, n_total) for item in obj]
    return obj


class FrozenPrefix:
    """Reuse of the frozen model's work below the first gated layer.

    ``record`` runs the model once on every example and keeps what block
    ``first_gated - 1`` returned; inside ``replayed(rows)`` the blocks below
    ``first_gated`` return that record for the given rows instead of computing,
    so a batch of coalitions only pays for the gated layers and above (and the
    embeddings, which are cheap).  Correct only while the weights below do not
    change, which is why fine-tuning turns it off.
    """

    def __init__(self, gate: HeadGate, first_gated: int) -> None:
        self.gate = gate
        self.first_gated = first_gated
        self.record: Any = None
        self.n_total = 0

    def capture(self, run_all: Any, n_total: int) -> None:
        """``run_all()`` runs the model on all ``n_total`` examples (in one batch)."""
        if self.first_gated == 0:
            return
        block = self.gate.layers[self.first_gated - 1]
        captured = {}

        def keep(module, args, output):
            captured["out"] = output

        handle = block.register_forward_hook(keep)
        try:
            run_all()
        finally:
            handle.remove()
        self.record, self.n_total = captured["out"], n_total

    @contextlib.contextmanager
    def replayed(self, rows: Sequence[int] | torch.Tensor) -> Iterator[None]:
        if self.first_gated == 0 or self.record is None:
            yield
            return
        rows = torch.as_tensor(rows, dtype=torch.long)
        output = _take_rows(self.record, rows, self.n_total)
        blocks = [self.gate.layers[i] for i in range(self.first_gated)]

        def replay(*args, **kwargs):
            return output

        for block in blocks:
            block.forward = replay  # instance attribute: the block keeps its other attributes
        try:
            yield
        finally:
            for block in blocks:
                del block.forward
