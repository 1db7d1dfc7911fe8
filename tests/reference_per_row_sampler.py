"""The per-row sampler as it was before its batched rewrite (stereolens.models.hf, commit 881996d).

Kept verbatim as the known answer: the rewrite must draw every token this one draws, for
every seed, batch size and setting, because cached answers and seeded reruns depend on
it.  ``tests/models/test_models_hf_sampler.py`` compares the two step by step and through
``generate``; ``benchmarks/sampled_generation.py`` times them.
"""

from __future__ import annotations

from collections.abc import Sequence


class ReferencePerRowSampler:
    """Warp and draw one row at a time, each row with its own generator (the old ``PerRowSampler``)."""

    def __init__(self, rows: Sequence[tuple[float, float, int]], device) -> None:
        import torch
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        self._warpers = []
        self._generators = []
        for temperature, top_p, seed in rows:
            warpers = [TemperatureLogitsWarper(temperature)]
            if top_p is not None and top_p < 1.0:
                warpers.append(TopPLogitsWarper(top_p))
            self._warpers.append(warpers)
            generator = torch.Generator(device=device)
            generator.manual_seed(int(seed))
            self._generators.append(generator)

    def __call__(self, input_ids, scores):
        import torch

        chosen = torch.full_like(scores, float("-inf"))
        for row, (warpers, generator) in enumerate(zip(self._warpers, self._generators)):
            row_ids, row_scores = input_ids[row : row + 1], scores[row : row + 1]
            for warper in warpers:
                row_scores = warper(row_ids, row_scores)
            probs = torch.nn.functional.softmax(row_scores, dim=-1)
            token = torch.multinomial(probs, num_samples=1, generator=generator)
            chosen[row, token[0, 0]] = 0.0
        return chosen
