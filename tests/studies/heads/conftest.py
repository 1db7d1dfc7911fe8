"""Fixtures of the heads study: a small instances table and a tiny encoder with one planted head."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from heads_data import PLANTED, make_instances


@pytest.fixture(scope="module")
def instances() -> pd.DataFrame:
    return make_instances()


@pytest.fixture(scope="module")
def planted_model(tiny_masked_lm_dir):
    """The tiny BERT with every head's value projection zeroed except the planted one's.

    Layer 0 then moves no token information between positions, so the first
    token learns which sentence follows only through head ``PLANTED`` in layer 1.
    The zeroed heads keep their value biases: switching one off shifts the
    first token's vector by a constant, which can move the probe a little.
    """
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    n_heads = model.config.num_attention_heads
    head_dim = model.config.hidden_size // n_heads
    with torch.no_grad():
        for layer_index, layer in enumerate(model.bert.encoder.layer):
            value = layer.attention.self.value.weight
            for head in range(n_heads):
                if (layer_index, head) != PLANTED:
                    value[head * head_dim:(head + 1) * head_dim] = 0.0
                else:
                    value[head * head_dim:(head + 1) * head_dim] *= 4.0
    return model, tok
