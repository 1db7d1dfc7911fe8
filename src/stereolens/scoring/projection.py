"""Log-probabilities of target tokens through a model's vocabulary projection.

log P(target) = logit[target] - logsumexp(logits) needs the whole normaliser,
so every scored row costs a full projection onto the vocabulary (262k words
for Gemma 3, 119k for mBERT), usually more than the network before it.  Three
things make that projection cheaper without changing what it computes:

- The vocabulary is walked in blocks of a few thousand words and the
  normaliser accumulated block by block.  A block of logits stays in the CPU's
  cache while logsumexp reads it; projecting the whole vocabulary at once
  writes and rereads hundreds of MiB.  Many rows go through each block
  together, so each block of weights is read from memory once per many rows.
  On a 2-core CPU this ran the projection at about twice the multiply-add rate
  of whole-vocabulary chunks of 128 rows (72 vs 36 GMAC/s at 1,024 rows by
  4,096 words alone; about 60 within the causal benchmark).
- Rows wait (:class:`DeferredLogprobs`) until about a thousand can share one
  pass over the vocabulary matrix: a forward pass of short sentences yields a
  few dozen scored rows, and projecting those alone reads the whole matrix from
  memory for little work (34 GMAC/s for the masked rows of the PLL benchmark).
- The target logit is one dot product per row, taken apart from the normaliser,
  so rows with the same hidden state share one normaliser (causal prefixes
  shared by several sentences).

A :class:`VocabProjection` describes the head as ``post(pre(rows) @ W.T + b)``
with ``post`` either nothing or Gemma-2-style soft-capping.  It is checked
against the model's own head once (:meth:`BodyHead.verify
<stereolens.scoring.access.BodyHead.verify>`); a head it cannot describe keeps
the plain path.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

PreFn = Callable[[torch.Tensor], torch.Tensor]

# On a CPU: rows projected together and vocabulary words per block (a 16 MiB block of logits).
CPU_ROWS = 1024
CPU_VOCAB_BLOCK = 4096
# On an accelerator bigger kernels win: whole vocabulary, rows bounded by a 128 MiB logit tensor.
ACCELERATOR_LOGIT_ELEMENTS = 1 << 25


@dataclass(frozen=True)
class VocabProjection:
    """``logits(rows) = post(pre(rows) @ weight.T + bias)``; ``cap`` is the soft-capping constant, if any."""

    weight: torch.Tensor  # [vocabulary, hidden]
    bias: torch.Tensor | None  # [vocabulary]
    pre: PreFn | None = None
    cap: float | None = None
    # compute the normaliser in float32 from a half-precision model's weights (see :func:`float32_normaliser`)
    widen: bool = False

    def prepare(self, rows: torch.Tensor) -> torch.Tensor:
        """What the vocabulary matrix multiplies: ``pre(rows)`` (the MLM transform of BERT-like heads)."""
        return rows if self.pre is None else self.pre(rows)

    def _post(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        return logits if self.cap is None else torch.tanh(logits / self.cap) * self.cap

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Full logits of prepared rows (for checks and small inputs)."""
        return self._post(torch.nn.functional.linear(x, self.weight, self.bias))

    def target_logits(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The logit of each row's target: one dot product per row."""
        # float32 even for a half-precision model: one product per row costs nothing
        raw = (x.float() * self.weight[targets].float()).sum(-1)
        if self.bias is not None:
            raw = raw + self.bias[targets].float()
        return self._post(raw)

    def logsumexp(self, x: torch.Tensor, *, rows: int | None = None, block: int | None = None) -> torch.Tensor:
        """logsumexp of each prepared row's logits over the whole vocabulary, in float32.

        A running maximum and a running sum of exp(logit - maximum) per row,
        updated block by block in one reused buffer: fewer passes over each
        block than logsumexp per block, and no fresh 16 MiB allocation (each
        of which the allocator would fault in page by page).  ``rows`` and
        ``block`` (rows per group, vocabulary words per block) default to
        what suits the device.
        """
        n_rows, n_vocab = x.shape[0], self.weight.shape[0]
        if n_rows == 0:
            return x.new_zeros(0, dtype=torch.float32)
        widen = self.widen and x.dtype != torch.float32
        if widen:
            x = x.float()
        if x.device.type == "cpu":
            rows, block = rows or CPU_ROWS, min(block or CPU_VOCAB_BLOCK, n_vocab)
        else:
            rows, block = rows or max(1, ACCELERATOR_LOGIT_ELEMENTS // n_vocab), min(block or n_vocab, n_vocab)
        rows = -(-n_rows // -(-n_rows // rows))  # equal chunks: no small remainder chunk
        buffer = torch.empty(min(rows, n_rows) * block, dtype=x.dtype, device=x.device)
        out = []
        for r0 in range(0, n_rows, rows):
            xr = x[r0 : r0 + rows]
            top = torch.full((xr.shape[0],), float("-inf"), device=x.device)
            total = torch.zeros(xr.shape[0], device=x.device)
            for v0 in range(0, n_vocab, block):
                weight = self.weight[v0 : v0 + block]
                # widened a block at a time: a few MiB that stay in cache, no float32 copy of the matrix
                weight = weight.float() if widen else weight
                logits = buffer[: xr.shape[0] * weight.shape[0]].view(xr.shape[0], weight.shape[0])
                torch.mm(xr, weight.T, out=logits)
                if self.bias is not None:
                    logits.add_(self.bias[v0 : v0 + block].float() if widen else self.bias[v0 : v0 + block])
                logits = logits.float()  # no copy in float32
                if self.cap is not None:
                    logits.div_(self.cap).tanh_().mul_(self.cap)
                new_top = torch.maximum(top, logits.amax(dim=-1))
                total = total * torch.exp(top - new_top) + logits.sub_(new_top[:, None]).exp_().sum(dim=-1)
                top = new_top
            out.append(top + total.log())
        return torch.cat(out)

    def target_logprobs(self, rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log softmax(logits(rows))[targets] per row."""
        x = self.prepare(rows)
        return self.target_logits(x, targets) - self.logsumexp(x)


def float32_normaliser(projection: VocabProjection) -> VocabProjection:
    """The projection with its normaliser computed in float32 from the same (rounded) weights.

    A half-precision model's logits come out of its matrix multiply rounded to 8 (bfloat16)
    or 11 (float16) significant bits; summed over a 262k-word vocabulary those roundings
    move logsumexp.  Here the rows and each block of the vocabulary matrix are widened to
    float32 before they are multiplied (the weights' values are the model's, only the
    arithmetic is wider), so the normaliser costs float32 multiply-adds but no float32 copy
    of the matrix.  A float32 model's projection is returned as it is.
    """
    if projection.weight.dtype == torch.float32:
        return projection
    return replace(projection, widen=True)


class DeferredLogprobs:
    """Target log-probabilities of rows gathered over many forward passes, normalised in groups.

    A forward pass of short sentences yields a few dozen scored rows, and a
    projection of a few dozen rows reads the whole vocabulary matrix from
    memory for little work; so prepared rows wait here until ``group_rows`` of
    them can share one pass over the vocabulary.  Rows added with the same
    ``key`` have the same hidden state by the caller's word (a causal prefix
    shared by several sentences) and share one normaliser.  ``on_ready(tag,
    logprobs)`` receives each :meth:`add`'s results, in pass order, once they are
    known; it is called with this object's lock held, so calls never overlap.

    Passes that run side by side on worker threads finish in an order that
    depends on timing.  A row's normaliser can move in its last bits with the
    other rows it is projected beside (a matrix multiply of other height may
    take other kernels), so the groups are cut in the order of the passes'
    ``index`` (their place in the plan), never in the order they finish: the
    same plan gives the same bits however the threads ran.  Once cut, a group's
    projection runs outside the lock, beside the other workers' passes.
    """

    def __init__(
        self,
        projection: VocabProjection,
        on_ready: Callable[[object, list[float]], None],
        *,
        n_keys: int = 0,
        group_rows: int = CPU_ROWS,
    ) -> None:
        self.projection = projection
        self.group_rows = group_rows
        self.on_ready = on_ready
        self.lock = threading.Lock()
        self.values = torch.empty(0)
        self.known = torch.zeros(0, dtype=torch.bool)
        self.requested = bytearray(n_keys)
        # passes finished ahead of an earlier one, by index, and the next index to take
        self.early: dict[int, tuple[object, torch.Tensor, torch.Tensor, list[int] | None]] = {}
        self.next_index = 0
        # the group being filled: its rows and their keys
        self.rows: list[torch.Tensor] = []
        self.keys: list[int] = []
        # taken passes whose results are not yet delivered, in pass order
        self.waiting: deque[tuple[object, torch.Tensor, torch.Tensor]] = deque()

    def add(
        self, tag: object, rows: torch.Tensor, targets: torch.Tensor, keys: list[int] | None = None, *, index: int | None = None
    ) -> None:
        """Rows as :meth:`BodyHead.rows` gives them, their targets, optionally their shared-state keys, and the
        pass's place in the plan (default: the number of passes added before it, for a single caller)."""
        x = self.projection.prepare(rows)
        target_logits = self.projection.target_logits(x, targets)
        with self.lock:
            if index is None:  # a single caller: the pass after every one added so far
                index = self.next_index + len(self.early)
            self.early[index] = (tag, x, target_logits, keys)
            groups = self._take_in_order()
        for group in groups:
            self._normalise(group)

    def flush(self) -> None:
        """Normalise the rows still waiting; every pass of the plan must have been added."""
        with self.lock:
            if self.early:
                raise RuntimeError(f"passes {sorted(self.early)} were added but pass {self.next_index} never was")
            group = self._cut()
        self._normalise(group)

    def _take_in_order(self) -> list[tuple[torch.Tensor, list[int]]]:
        """Take the passes that are next in order; return the groups they fill (lock held)."""
        groups = []
        while self.next_index in self.early:
            tag, x, target_logits, keys = self.early.pop(self.next_index)
            self.next_index += 1
            if keys is None:
                first = len(self.requested)
                keys = list(range(first, first + x.shape[0]))
                self.requested.extend(b"\x00" * x.shape[0])
            new = []
            for r, key in enumerate(keys):
                if not self.requested[key]:
                    self.requested[key] = 1
                    new.append(r)
                    self.keys.append(key)
            if new:
                self.rows.append(x if len(new) == x.shape[0] else x[torch.tensor(new, device=x.device)])
            self.waiting.append((tag, torch.tensor(keys, dtype=torch.long, device=x.device), target_logits))
            if len(self.keys) >= self.group_rows:
                groups.append(self._cut())
        return groups

    def _cut(self) -> tuple[torch.Tensor, list[int]]:
        group = (torch.cat(self.rows) if self.rows else torch.empty(0), self.keys)
        self.rows, self.keys = [], []
        return group

    def _normalise(self, group: tuple[torch.Tensor, list[int]]) -> None:
        """Project one group (no lock held), then deliver every waiting pass whose normalisers are all known."""
        x, keys = group
        lse = self.projection.logsumexp(x) if keys else None
        with self.lock:
            if lse is not None:
                if self.values.shape[0] < len(self.requested):
                    grown = torch.full((len(self.requested),), float("nan"), device=lse.device)
                    grown[: self.values.shape[0]] = self.values.to(lse.device)
                    known = torch.zeros(len(self.requested), dtype=torch.bool, device=lse.device)
                    known[: self.known.shape[0]] = self.known.to(lse.device)
                    self.values, self.known = grown, known
                at = torch.tensor(keys, device=lse.device)
                self.values[at] = lse
                self.known[at] = True
            # a pass can wait on a key of an earlier group another thread is still projecting
            while self.waiting and self._all_known(self.waiting[0][1]):
                tag, keys_of, target_logits = self.waiting.popleft()
                self.on_ready(tag, (target_logits - self.values[keys_of]).tolist())

    def _all_known(self, keys: torch.Tensor) -> bool:
        if keys.numel() == 0:
            return True
        return bool(int(keys.max()) < self.known.shape[0] and self.known[keys].all())
