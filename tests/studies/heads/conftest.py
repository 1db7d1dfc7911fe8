"""Fixtures of the heads study: a small instances table and a tiny encoder with one planted head."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
import torch

SUBJECTS = ["people", "women", "men", "doctors", "teachers", "farmers", "engineers", "nurses", "students", "artists"]
TRAITS = ["kind", "rich", "poor", "honest", "strong", "warm", "cold", "friendly", "boring", "brave"]
PLANTED = (1, 0)  # (layer, head) that alone carries the label to the first token


def make_instances(n_per_country: int = 24, countries=("MX", "ES")) -> pd.DataFrame:
    rows = []
    pairs = itertools.cycle(itertools.product(SUBJECTS, zip(TRAITS, TRAITS[1:] + TRAITS[:1])))
    for country in countries:
        for i in range(n_per_country):
            subject, (t1, t2) = next(pairs)
            rows.append({
                "id": f"{country}-{i:03d}", "country": country, "category": "profession", "target": subject,
                "stereotype_id": f"{country}-s{i % 4}", "context": f"The {subject} were {t1} and {t2}.",
                "sent_stereo": f"{subject.capitalize()} are lazy.", "sent_anti": f"{subject.capitalize()} are smart.",
                "sent_unrelated": f"{subject.capitalize()} are cold.", "source": "test",
            })
    return pd.DataFrame(rows)


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
