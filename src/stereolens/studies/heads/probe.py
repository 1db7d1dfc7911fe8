"""The stereotype-detection probe: examples, split, pooled features under a head gate, training.

Each instance gives two examples: its context followed by the stereotypical
sentence (label 1) and the same context followed by the anti-stereotypical
sentence (label 0), EspanStereo's "comparative pairs".  Instances are split three
ways (probe training, Shapley valuation, pruning evaluation) and both examples
of an instance land in the same set, so the probe never sees the other half of
a held-out pair.  The probe is a linear classifier on one pooled vector per example
(first token for encoders, last real token for causal models, or the mean over
real tokens), trained on the frozen model by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from stereolens.errors import ConfigError, DataError
from stereolens.studies.heads.config import POOLINGS, VALUE_METRICS
from stereolens.studies.heads.gates import FrozenPrefix, HeadGate


def probe_examples(instances: pd.DataFrame, *, separator: str = " ") -> pd.DataFrame:
    """Two labelled texts per instance: context + stereotypical (1), context + anti-stereotypical (0)."""
    rows = []
    for r in instances.itertuples(index=False):
        for label, sentence in ((1, r.sent_stereo), (0, r.sent_anti)):
            rows.append({"id": r.id, "country": r.country, "label": label,
                         "text": f"{str(r.context).strip()}{separator}{str(sentence).strip()}"})
    return pd.DataFrame(rows, columns=["id", "country", "label", "text"])


@dataclass(frozen=True)
class InstanceSplit:
    """Disjoint sets of instance ids, one job each: ``train`` trains the probe, ``shapley`` is where the
    Shapley value function measures the probe, ``pruning`` is where the pruning sweeps measure the probe
    and StereoSet, so neither the ranking nor the probe has seen the rows a sweep is judged on."""

    train: tuple
    shapley: tuple
    pruning: tuple
    seed: int

    def record(self) -> dict:
        """The split as written to ``probe.json``: the seed and the ids of each set."""
        return {"seed": self.seed, "probe_train": list(self.train), "shapley": list(self.shapley),
                "pruning": list(self.pruning)}


def split_instances(ids: Sequence, *, shapley_fraction: float, pruning_fraction: float, seed: int) -> InstanceSplit:
    """A seeded shuffle of the distinct instance ids: the first ``round(shapley_fraction * n)`` (at least 1)
    for Shapley valuation, the next ``round(pruning_fraction * n)`` (at least 1 unless the fraction is 0)
    for pruning evaluation, the rest (at least 1) for probe training.  Deterministic: the same ids and seed
    give the same split, whatever order the ids come in."""
    if not (0 < shapley_fraction < 1 and 0 <= pruning_fraction < 1):
        raise ValueError(f"split fractions must lie in (0, 1) for Shapley and [0, 1) for pruning, "
                         f"got {shapley_fraction} and {pruning_fraction}")
    unique = sorted(set(ids), key=str)
    n = len(unique)
    n_shapley = max(1, int(round(shapley_fraction * n)))
    n_pruning = max(1, int(round(pruning_fraction * n))) if pruning_fraction > 0 else 0
    if n_shapley + n_pruning >= n:
        raise DataError(f"{n} instances cannot be split into {n_shapley} for Shapley valuation, {n_pruning} for "
                        "pruning evaluation and at least 1 for probe training: give more instances or smaller "
                        "study.heads.split fractions")
    order = [unique[i] for i in np.random.default_rng(seed).permutation(n)]
    return InstanceSplit(train=tuple(sorted(order[n_shapley + n_pruning:], key=str)),
                         shapley=tuple(sorted(order[:n_shapley], key=str)),
                         pruning=tuple(sorted(order[n_shapley:n_shapley + n_pruning], key=str)), seed=int(seed))


@dataclass
class Encoded:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]


class GatedEncoder:
    """A Hugging Face model's pooled representation with per-example head gates.

    ``model`` is the base model (no LM head).  ``gated_layers`` are the layers
    whose heads can be switched off; when ``reuse_prefix`` is on, the blocks
    below the first of them are computed once per example and replayed.
    """

    def __init__(self, model, tokenizer, *, pooling: str, gated_layers: Sequence[int], reuse_prefix: bool = True,
                 max_length: int = 256) -> None:
        if pooling not in POOLINGS:
            raise ConfigError(f"probe pooling must be one of {POOLINGS}, got {pooling!r}")
        self.model, self.tokenizer, self.pooling, self.max_length = model, tokenizer, pooling, max_length
        self.gate = HeadGate(model)
        bad = [layer for layer in gated_layers if not 0 <= layer < self.gate.n_layers]
        if bad:
            raise ConfigError(f"gated layers {bad} out of range: the model has {self.gate.n_layers} layers")
        self.prefix = FrozenPrefix(self.gate, min(gated_layers) if (reuse_prefix and gated_layers) else 0)
        self.encoded: Encoded | None = None

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Tokenise once, right-padded to the longest text; batches are row selections of this."""
        self.tokenizer.padding_side = "right"
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        self.encoded = Encoded(enc["input_ids"], enc["attention_mask"])
        if self.prefix.first_gated:
            with torch.no_grad():
                self.prefix.capture(lambda: self.model(input_ids=self.encoded.input_ids,
                                                       attention_mask=self.encoded.attention_mask),
                                    len(self.encoded))
        return self.encoded

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "first":
            return hidden[:, 0]
        if self.pooling == "last":
            last = mask.sum(dim=1) - 1
            return hidden[torch.arange(hidden.shape[0]), last]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1)

    def features(self, rows: Sequence[int] | torch.Tensor, gates: torch.Tensor | None = None) -> torch.Tensor:
        """Pooled vectors of the encoded examples ``rows`` (repeats allowed), under per-row gates
        (rows x layers x heads) or one shared (layers x heads) gate, or none."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        ids, mask = self.encoded.input_ids[rows], self.encoded.attention_mask[rows]
        with self.gate.applied(gates), self.prefix.replayed(rows):
            out = self.model(input_ids=ids, attention_mask=mask)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return self._pool(hidden, mask)


class LinearProbe(torch.nn.Module):
    """Standardisation (fitted on the training features) and one linear layer to two classes."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))
        self.linear = torch.nn.Linear(dim, 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear((features - self.mean) / self.scale)


@dataclass
class ProbeSettings:
    learning_rate: float = 1e-4
    epochs: int = 100
    batch_size: int = 32
    weight_decay: float = 0.0
    finetune: bool = False
    seed: int = 0


def train_probe(encoder: GatedEncoder, train_rows: Sequence[int], labels: torch.Tensor,
                settings: ProbeSettings) -> tuple[LinearProbe, list[float]]:
    """Train the probe with Adam; the model's weights change only when ``settings.finetune``.

    Returns the probe and the mean training loss per epoch.
    """
    torch.manual_seed(settings.seed)
    train_rows = torch.as_tensor(train_rows, dtype=torch.long)
    with torch.no_grad():
        frozen = encoder.features(train_rows)
    probe = LinearProbe(frozen.shape[1])
    probe.mean.copy_(frozen.mean(0))
    probe.scale.copy_(frozen.std(0).clamp_min(1e-6))
    params = list(probe.linear.parameters())
    if settings.finetune:
        if encoder.prefix.first_gated:
            raise ConfigError("fine-tuning changes the layers below the gated ones: set reuse_prefix false")
        encoder.model.train()
        params += [p for p in encoder.model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    generator = torch.Generator().manual_seed(settings.seed)
    losses = []
    for _ in range(settings.epochs):
        order = torch.randperm(len(train_rows), generator=generator)
        total = 0.0
        for start in range(0, len(order), settings.batch_size):
            positions = order[start:start + settings.batch_size]
            batch = train_rows[positions]
            feats = encoder.features(batch) if settings.finetune else frozen[positions]
            loss = torch.nn.functional.cross_entropy(probe(feats), labels[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += float(loss.detach()) * len(batch)
        losses.append(total / len(order))
    encoder.model.eval()
    probe.eval()
    return probe, losses


class ProbeValue:
    """The value of a coalition of heads: the probe's accuracy (or minus its mean cross-entropy)
    on the evaluation rows with only those heads of ``players`` active, every other head on.

    Called with a (coalitions x players) boolean array, it builds one gate per
    (coalition, example) row and runs up to ``max_rows`` rows per forward pass.
    """

    def __init__(self, encoder: GatedEncoder, probe: LinearProbe, eval_rows: Sequence[int], labels: torch.Tensor,
                 players: Sequence[tuple[int, int]], *, metric: str = "accuracy", max_rows: int = 256) -> None:
        if metric not in VALUE_METRICS:
            raise ConfigError(f"value metric must be one of {VALUE_METRICS}, got {metric!r}")
        self.encoder, self.probe, self.metric, self.max_rows = encoder, probe, metric, max_rows
        self.eval_rows = torch.as_tensor(eval_rows, dtype=torch.long)
        self.labels = labels[self.eval_rows]
        self.players = list(players)
        self.forward_passes = 0

    def gates_for(self, coalitions: np.ndarray) -> torch.Tensor:
        base = self.encoder.gate.ones()
        gates = base.repeat(len(coalitions), 1, 1)
        for j, (layer, head) in enumerate(self.players):
            gates[:, layer, head] = torch.as_tensor(coalitions[:, j], dtype=gates.dtype)
        return gates

    def __call__(self, coalitions: np.ndarray) -> np.ndarray:
        coalitions = np.asarray(coalitions, dtype=bool)
        gates = self.gates_for(coalitions)
        n_eval = len(self.eval_rows)
        per_pass = max(1, self.max_rows // n_eval)
        values = []
        with torch.no_grad():
            for start in range(0, len(coalitions), per_pass):
                g = gates[start:start + per_pass]
                k = g.shape[0]
                rows = self.eval_rows.repeat(k)
                logits = self.probe(self.encoder.features(rows, g.repeat_interleave(n_eval, dim=0)))
                self.forward_passes += 1
                labels = self.labels.repeat(k)
                if self.metric == "accuracy":
                    hits = (logits.argmax(-1) == labels).float().view(k, n_eval)
                    values.append(hits.mean(1))
                else:
                    loss = torch.nn.functional.cross_entropy(logits, labels, reduction="none").view(k, n_eval)
                    values.append(-loss.mean(1))
        return torch.cat(values).double().numpy()
