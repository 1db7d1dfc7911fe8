"""The stereotype-detection probe: examples, split, pooled features under a head gate, training.

Each instance gives two examples: its context followed by the stereotypical
sentence (label 1) and the same context followed by the anti-stereotypical
sentence (label 0), seed 003's "comparative pairs".  Both examples of an
instance land in the same split, so the probe never sees the other half of a
test pair.  The probe is a linear classifier on one pooled vector per example
(first token for encoders, last real token for causal models, or the mean over
real tokens), trained on the frozen model by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from stereolens.errors import ConfigError, DataError
from stereolens.studies.heads.gates import FrozenPrefix, HeadGate

POOLINGS = ("first", "last", "mean")


def probe_examples(instances: pd.DataFrame, *, separator: str = " ") -> pd.DataFrame:
    """Two labelled texts per instance: context + stereotypical (1), context + anti-stereotypical (0)."""
    rows = []
    for r in instances.itertuples(index=False):
        for label, sentence in ((1, r.sent_stereo), (0, r.sent_anti)):
            rows.append({"id": r.id, "country": r.country, "label": label,
                         "text": f"{str(r.context).strip()}{separator}{str(sentence).strip()}"})
    return pd.DataFrame(rows, columns=["id", "country", "label", "text"])


def split_instances(ids: Sequence, *, test_fraction: float, seed: int) -> tuple[list, list]:
    """(train ids, test ids): a seeded shuffle of the distinct instance ids."""
    unique = sorted(set(ids), key=str)
    if len(unique) < 2:
        raise DataError(f"the probe needs at least 2 instances to split, got {len(unique)}")
    order = np.random.default_rng(seed).permutation(len(unique))
    n_test = min(max(1, int(round(test_fraction * len(unique)))), len(unique) - 1)
    test = {unique[i] for i in order[:n_test]}
    return [i for i in unique if i not in test], sorted(test, key=str)


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

    def pooled_positions(self, rows: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """The token position each row's pooled vector is read at (first or last pooling)."""
        mask = self.encoded.attention_mask[torch.as_tensor(rows, dtype=torch.long)]
        return torch.zeros(mask.shape[0], dtype=torch.long) if self.pooling == "first" else mask.sum(dim=1) - 1

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
    With ``exact_stop`` (a ``bounds.ExactStop``) set, each pass also lets it record
    the top layer's inputs and decide which coalitions are settled.
    """

    def __init__(self, encoder: GatedEncoder, probe: LinearProbe, eval_rows: Sequence[int], labels: torch.Tensor,
                 players: Sequence[tuple[int, int]], *, metric: str = "accuracy", max_rows: int = 256) -> None:
        if metric not in ("accuracy", "loss"):
            raise ConfigError(f"value metric must be 'accuracy' or 'loss', got {metric!r}")
        self.encoder, self.probe, self.metric, self.max_rows = encoder, probe, metric, max_rows
        self.eval_rows = torch.as_tensor(eval_rows, dtype=torch.long)
        self.labels = labels[self.eval_rows]
        self.players = list(players)
        self.forward_passes = 0
        self.exact_stop = None

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
                chunk = coalitions[start:start + k]
                recording = self.exact_stop.recording(chunk) if self.exact_stop is not None else nullcontext({})
                with recording as captured:
                    logits = self.probe(self.encoder.features(rows, g.repeat_interleave(n_eval, dim=0)))
                if captured:
                    self.exact_stop.observe(chunk, captured, self.encoder.pooled_positions(rows), logits)
                self.forward_passes += 1
                labels = self.labels.repeat(k)
                if self.metric == "accuracy":
                    hits = (logits.argmax(-1) == labels).float().view(k, n_eval)
                    values.append(hits.mean(1))
                else:
                    loss = torch.nn.functional.cross_entropy(logits, labels, reduction="none").view(k, n_eval)
                    values.append(-loss.mean(1))
        return torch.cat(values).double().numpy()
