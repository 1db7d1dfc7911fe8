"""Exact early stop of a Shapley permutation: sound bounds on the probe's logits over
every on/off setting of the heads the permutation has not reached yet.

Where it applies.  When every head a permutation has still to add lies in the
model's top layer, the inputs of that layer do not depend on those heads: they
only change the sum the attention output projection forms.  At the pooled
position that sum is a fixed part plus any subset of r per-head vectors
``c_h = W_o[:, slice_h] x_h``.  Everything after it at that position (residual,
norms, MLP, final norm, the linear probe) acts on that one position, so it can
be evaluated on boxes with interval arithmetic in float64.  The settings of the
``enumerate_heads`` largest remaining heads are enumerated (exact points), the
others enter as per-dimension intervals ``[min(0, c_h), max(0, c_h)]`` (exact for
the sum, then propagated soundly through norms and MLP).  If, for every probe
example, the probe's logit difference keeps one sign with a margin over every
box, no setting of the remaining heads changes any prediction, so every
remaining marginal contribution to accuracy is exactly 0 and the walk can stop
without changing the estimate.

Where it does not.  Remaining heads below the top layer would need bounds
through a later layer's attention (its softmax over every position), which we
do not propagate: the stop is only tried once a permutation's remaining heads
are all in the top layer.  Mean pooling, architectures other than BERT-like
(post-norm), Llama-like and Gemma-like (pre/post-norm) blocks, and the loss
value (any head moves a loss) are refused with a reason, and the walk is then
simply not stopped.  Every decision is checked against the real model: the
replica's logit difference at the coalition itself must agree with the forward
pass within ``AGREEMENT``, or the stop is switched off for the run.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

Box = tuple[torch.Tensor, torch.Tensor]  # (lower, upper), float64, same shape

# The replica (float64) and the model (float32, batches of any composition) differ by rounding,
# which the probe's standardisation can amplify: the scale of that rounding for the logit
# difference d = sum_j a_j (x_j - mean_j) / scale_j is sum_j |a_j| (|x_j| + |mean_j|) / scale_j,
# the size of what d cancels.  The replica must agree with the model within AGREEMENT times that
# scale (about 8 float32 epsilons; the largest disagreement seen on the tiny BERT, the tiny Llama
# and Gemma 3 270M was 2e-8), and a prediction counts as fixed only when the bound clears zero by
# MARGIN_FACTOR times as much, so float32 rounding in any batch cannot flip it.
AGREEMENT = 1e-6
MARGIN_FACTOR = 5.0


# ----------------------------------------------------------------------------- interval arithmetic

def point(x: torch.Tensor) -> Box:
    x = x.double()
    return x, x.clone()


def box_add(a: Box, b: Box) -> Box:
    return a[0] + b[0], a[1] + b[1]


def box_scale(a: Box, w: torch.Tensor) -> Box:
    """Elementwise product with a constant vector (any sign)."""
    w = w.double()
    p, q = a[0] * w, a[1] * w
    return torch.minimum(p, q), torch.maximum(p, q)


def box_mul(a: Box, b: Box) -> Box:
    products = torch.stack([a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]])
    return products.min(0).values, products.max(0).values


def box_linear(a: Box, weight: torch.Tensor, bias: torch.Tensor | None) -> Box:
    """x W^T + b on a box, by centre and radius: exact per output dimension for an input box."""
    weight = weight.double()
    centre, radius = (a[0] + a[1]) / 2, (a[1] - a[0]) / 2
    mid = centre @ weight.T
    if bias is not None:
        mid = mid + bias.double()
    spread = radius @ weight.abs().T
    return mid - spread, mid + spread


def _square_range(a: Box) -> Box:
    lo2, hi2 = a[0] ** 2, a[1] ** 2
    upper = torch.maximum(lo2, hi2)
    lower = torch.where((a[0] <= 0) & (a[1] >= 0), torch.zeros_like(lo2), torch.minimum(lo2, hi2))
    return lower, upper


def _divide_by_rms(a: Box, mean_square: Box, eps: float) -> Box:
    """a / sqrt(mean_square + eps), the denominator positive and bounded."""
    inv_hi = torch.rsqrt(mean_square[0] + eps)  # smallest mean square, largest factor
    inv_lo = torch.rsqrt(mean_square[1] + eps)
    return box_mul(a, (inv_lo.expand_as(a[0]), inv_hi.expand_as(a[0])))


def box_rms_norm(a: Box, weight: torch.Tensor, eps: float, *, offset: float) -> Box:
    """x / sqrt(mean(x^2) + eps) * (offset + weight): Llama (offset 0), Gemma (offset 1)."""
    sq = _square_range(a)
    ms = (sq[0].mean(-1, keepdim=True), sq[1].mean(-1, keepdim=True))
    return box_scale(_divide_by_rms(a, ms, eps), offset + weight.double())


def box_layer_norm(a: Box, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> Box:
    """(x - mean x) / sqrt(var x + eps) * w + b.  x_i - mean is bounded as (1 - 1/d) x_i minus the
    mean of the others, which keeps x_i's dependence on the mean."""
    d = a[0].shape[-1]
    total_lo, total_hi = a[0].sum(-1, keepdim=True), a[1].sum(-1, keepdim=True)
    centred = ((1 - 1 / d) * a[0] - (total_hi - a[1]) / d, (1 - 1 / d) * a[1] - (total_lo - a[0]) / d)
    sq = _square_range(centred)
    var = (sq[0].mean(-1, keepdim=True), sq[1].mean(-1, keepdim=True))
    normed = _divide_by_rms(centred, var, eps)
    scaled = box_scale(normed, weight)
    return scaled[0] + bias.double(), scaled[1] + bias.double()


class UnimodalActivation:
    """An activation that falls to one minimum and then rises (GELU, SiLU; ReLU too), on boxes.

    The minimum is located on a fine grid of the activation itself; the shape is
    checked on that grid, and an activation of another shape is refused."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.fn = fn
        grid = torch.linspace(-20.0, 20.0, 400_001, dtype=torch.float64)
        values = fn(grid)
        k = int(torch.argmin(values))
        steps = torch.diff(values)
        if (steps[:k] > 1e-12).any() or (steps[k:] < -1e-12).any():
            raise ValueError(f"activation {fn} is not decreasing-then-increasing on [-20, 20]")
        self.argmin = float(grid[k])
        # the grid's minimum can miss the true one by the curvature over one grid step (1e-4)
        self.minimum = float(values[k]) - 1e-9

    def __call__(self, a: Box) -> Box:
        f_lo, f_hi = self.fn(a[0]), self.fn(a[1])
        upper = torch.maximum(f_lo, f_hi)
        lower = torch.where((a[0] <= self.argmin) & (a[1] >= self.argmin),
                            torch.full_like(f_lo, self.minimum), torch.minimum(f_lo, f_hi))
        return lower, upper


# ----------------------------------------------------------------------------- the top layer's tail

def _rms(module: Any) -> Callable[[Box], Box]:
    eps = float(getattr(module, "eps", None) or getattr(module, "variance_epsilon"))
    offset = 1.0 if type(module).__name__.startswith("Gemma") else 0.0  # Gemma scales by (1 + weight)
    weight = module.weight.detach()
    return lambda a: box_rms_norm(a, weight, eps, offset=offset)


def _linear(module: Any) -> Callable[[Box], Box]:
    weight = module.weight.detach()
    bias = module.bias.detach() if module.bias is not None else None
    return lambda a: box_linear(a, weight, bias)


def _gated_mlp(mlp: Any) -> Callable[[Box], Box]:
    gate, up, down = _linear(mlp.gate_proj), _linear(mlp.up_proj), _linear(mlp.down_proj)
    act = UnimodalActivation(mlp.act_fn)
    return lambda a: down(box_mul(act(gate(a)), up(a)))


def top_layer_tail(block: Any, final_norm: Any | None) -> Callable[[Box, Box], Box]:
    """A function (attention output after the projection, layer input) -> pooled vector box, for the
    block's family; ValueError for a block we do not replicate."""
    has = lambda obj, *names: all(hasattr(obj, n) for n in names)  # noqa: E731
    final = _rms(final_norm) if final_norm is not None else (lambda a: a)
    if has(block, "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm", "mlp"):
        # Gemma 2/3: sandwich norms around attention and MLP
        post_attn, pre_ff = _rms(block.post_attention_layernorm), _rms(block.pre_feedforward_layernorm)
        post_ff, mlp = _rms(block.post_feedforward_layernorm), _gated_mlp(block.mlp)

        def gemma(attn: Box, residual: Box) -> Box:
            h = box_add(residual, post_attn(attn))
            return final(box_add(h, post_ff(mlp(pre_ff(h)))))

        return gemma
    if has(block, "post_attention_layernorm", "mlp") and has(block.mlp, "gate_proj", "up_proj", "down_proj"):
        norm, mlp = _rms(block.post_attention_layernorm), _gated_mlp(block.mlp)

        def llama(attn: Box, residual: Box) -> Box:
            h = box_add(residual, attn)
            return final(box_add(h, mlp(norm(h))))

        return llama
    if has(block, "attention", "intermediate", "output") and has(block.attention.output, "LayerNorm"):
        ln1, ln2 = block.attention.output.LayerNorm, block.output.LayerNorm
        up, down = _linear(block.intermediate.dense), _linear(block.output.dense)
        act = UnimodalActivation(block.intermediate.intermediate_act_fn)

        def bert(attn: Box, residual: Box) -> Box:
            h = box_layer_norm(box_add(attn, residual), ln1.weight.detach(), ln1.bias.detach(), ln1.eps)
            return box_layer_norm(box_add(down(act(up(h))), h), ln2.weight.detach(), ln2.bias.detach(), ln2.eps)

        return bert
    raise ValueError(f"no interval replica of {type(block).__name__} (BERT-, Llama- and Gemma-style blocks only)")


# ----------------------------------------------------------------------------- the stop rule

class ExactStop:
    """Decides, for each evaluated coalition S of ``players``, whether no setting of the players
    outside S can change any probe prediction (``settled``), from what the forward pass of S itself
    recorded at the top layer; used by ``permutation_shapley`` to stop a walk without changing it.

    ``encoder`` is the ``GatedEncoder``, ``probe`` the trained ``LinearProbe``.  Construction never
    fails: an unsupported configuration leaves ``reason`` set and ``settled`` always False.
    """

    def __init__(self, encoder: Any, probe: Any, players: Sequence[tuple[int, int]], *,
                 enumerate_heads: int = 4) -> None:
        self.encoder, self.probe = encoder, probe
        self.players = list(players)
        self.enumerate_heads = max(0, int(enumerate_heads))
        gate = encoder.gate
        self.top = gate.n_layers - 1
        self.top_player = np.array([layer == self.top for layer, _ in self.players], dtype=bool)
        self._settled: dict[bytes, bool] = {}
        self.n_checks = 0
        self.n_settled = 0
        self.max_disagreement = 0.0
        self.reason: str | None = None
        self.tail = None
        if encoder.pooling not in ("first", "last"):
            self.reason = f"pooling {encoder.pooling!r}: the bound is built for one pooled position"
        elif not self.top_player.any():
            self.reason = f"no player in the top layer ({self.top}): the bound needs the remaining heads there"
        else:
            try:
                self.tail = top_layer_tail(gate.layers[self.top], getattr(gate.model, "norm", None))
            except (ValueError, AttributeError) as err:
                self.reason = str(err)
        self.projection = gate.projections[self.top]
        if self.tail is not None and not isinstance(self.projection, torch.nn.Linear):
            self.tail, self.reason = None, f"output projection {type(self.projection).__name__} is not nn.Linear"

    @property
    def active(self) -> bool:
        return self.tail is not None and self.reason is None

    def possible_from(self, permutation: Sequence[int]) -> int:
        """The first position at which the remaining players are all top-layer heads, at least two
        of them (with one left the only coalition skipped is the full one, always evaluated); the
        permutation's length if there is none."""
        n = len(permutation)
        if not self.active:
            return n
        k = n
        while k > 0 and self.top_player[permutation[k - 1]]:
            k -= 1
        return k if n - k >= 2 else n

    def eligible(self, coalition: np.ndarray) -> bool:
        """Whether a stop could be tried at this coalition: two or more players missing (see
        ``possible_from``), all of them top-layer heads."""
        missing = ~np.asarray(coalition, dtype=bool)
        return self.active and int(missing.sum()) >= 2 and bool(self.top_player[missing].all())

    def settled(self, coalition: np.ndarray) -> bool:
        return self._settled.get(np.asarray(coalition, dtype=bool).tobytes(), False)

    @contextlib.contextmanager
    def recording(self, coalitions: np.ndarray) -> Iterator[dict]:
        """Keep the top layer's input and its heads' outputs (before the gate) during one forward pass."""
        captured: dict = {}
        if not self.active or not any(self.eligible(c) for c in coalitions):
            yield captured
            return

        def keep_input(module, args, kwargs):
            captured["residual"] = args[0] if args else kwargs["hidden_states"]

        def keep_heads(module, args):
            captured["heads"] = args[0]

        handles = [self.encoder.gate.layers[self.top].register_forward_pre_hook(keep_input, with_kwargs=True),
                   self.projection.register_forward_pre_hook(keep_heads, prepend=True)]  # before the gate scales
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()

    def observe(self, coalitions: np.ndarray, captured: dict, positions: torch.Tensor, logits: torch.Tensor) -> None:
        """Decide ``settled`` for the eligible coalitions of one forward pass: ``coalitions`` (k x players),
        rows k x examples in that order, ``positions`` the pooled position of each row, ``logits`` the probe's."""
        if not captured or not self.active:
            return
        n_rows = logits.shape[0]
        n_eval = n_rows // len(coalitions)
        rows = torch.arange(n_rows)
        residual_all = captured["residual"][rows, positions].double()
        heads_all = captured["heads"][rows, positions].double()
        real_all = (logits[:, 1] - logits[:, 0]).double()
        for i, coalition in enumerate(coalitions):
            if not self.eligible(coalition):
                continue
            part = slice(i * n_eval, (i + 1) * n_eval)
            self._decide(np.asarray(coalition, dtype=bool), residual_all[part], heads_all[part], real_all[part])
            if not self.active:
                return

    def logit_bounds(self, coalition: np.ndarray, residual: torch.Tensor, heads: torch.Tensor) -> tuple[Box, torch.Tensor]:
        """((lower, upper), at_coalition): bounds on each example's probe logit difference over every
        on/off setting of the players outside ``coalition`` (all top-layer heads), and the replica's
        value at the coalition itself, from the top layer's input ``residual`` (examples x d) and its
        heads' outputs before the gate ``heads`` (examples x heads*head_dim) at the pooled position."""
        residual, heads = residual.double(), heads.double()
        n_heads = self.encoder.gate.n_heads
        head_dim = heads.shape[-1] // n_heads
        weight = self.projection.weight.detach().double()                      # (d, heads * head_dim)
        bias = self.projection.bias.detach().double() if self.projection.bias is not None else None
        per_head = torch.stack([heads[:, h * head_dim:(h + 1) * head_dim] @ weight[:, h * head_dim:(h + 1) * head_dim].T
                                for h in range(n_heads)], dim=1)                # (examples, heads, d)
        free = [head for (layer, head), on in zip(self.players, coalition) if layer == self.top and not on]
        fixed = per_head[:, [h for h in range(n_heads) if h not in free]].sum(1)
        if bias is not None:
            fixed = fixed + bias
        at_coalition, _, rounding_scale = self._logit_difference(point(fixed), point(residual), with_scale=True)
        # enumerate the largest remaining heads, bound the others by per-dimension intervals
        size = per_head[:, free].norm(dim=-1).mean(0)
        order = [free[j] for j in torch.argsort(size, descending=True).tolist()]
        enumerated, bounded = order[:self.enumerate_heads], order[self.enumerate_heads:]
        zero = torch.zeros_like(fixed)
        slack_lo = sum((per_head[:, h].clamp(max=0) for h in bounded), zero)
        slack_hi = sum((per_head[:, h].clamp(min=0) for h in bounded), zero)
        lowers, uppers = [], []
        for setting in itertools.product((0.0, 1.0), repeat=len(enumerated)):
            on = sum((per_head[:, h] * s for h, s in zip(enumerated, setting)), zero)
            lo, hi = self._logit_difference((fixed + on + slack_lo, fixed + on + slack_hi), point(residual))
            lowers.append(lo)
            uppers.append(hi)
        self.last_rounding_scale = rounding_scale
        return (torch.stack(lowers).min(0).values, torch.stack(uppers).max(0).values), at_coalition

    def _decide(self, coalition: np.ndarray, residual: torch.Tensor, heads: torch.Tensor, real: torch.Tensor) -> None:
        (lower, upper), at_coalition = self.logit_bounds(coalition, residual, heads)
        # the replica at the coalition itself must reproduce the model's logit difference
        scale = self.last_rounding_scale
        disagreement = float(((at_coalition - real).abs() / scale).max())
        self.max_disagreement = max(self.max_disagreement, disagreement)
        if disagreement > AGREEMENT:
            self.reason = (f"the interval replica of the top layer disagrees with the model by {disagreement:.2g} "
                           "of the rounding scale at a coalition: exact stop switched off for this run")
            return
        margin = MARGIN_FACTOR * AGREEMENT * scale
        self.n_checks += 1
        verdict = bool(((lower > margin) | (upper < -margin)).all())
        self.n_settled += verdict
        self._settled[coalition.tobytes()] = verdict

    def _logit_difference(self, attn: Box, residual: Box, *, with_scale: bool = False):
        """The probe's logit difference (class 1 minus class 0) on boxes of the top layer's attention
        output; ``with_scale`` adds the rounding scale (see AGREEMENT) at the box's upper corner."""
        pooled = self.tail(attn, residual)
        linear = self.probe.linear
        direction = (linear.weight[1] - linear.weight[0]).detach().double() / self.probe.scale.double()
        bias = linear.bias.detach().double()
        offset = float(bias[1] - bias[0]) - float((direction * self.probe.mean.double()).sum())
        lo, hi = box_linear(pooled, direction[None, :], torch.tensor([offset], dtype=torch.float64))
        if not with_scale:
            return lo[:, 0], hi[:, 0]
        magnitude = pooled[1].abs() + self.probe.mean.double().abs()
        return lo[:, 0], hi[:, 0], (magnitude * direction.abs()).sum(-1) + abs(offset) + 1e-12
