"""Shared fixtures: offline environment and tiny locally built models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Tests never reach a hub or a telemetry endpoint.
for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DVC_NO_ANALYTICS": "1",
    "GX_ANALYTICS_ENABLED": "False",
}.items():
    os.environ.setdefault(_key, _value)

sys.path.insert(0, str(Path(__file__).parent))

import tiny_models  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def data_mirror() -> Path:
    """The public-data mirror (../shared/data here); tests that need it skip without it."""
    mirror = os.environ.get("STEREOLENS_DATA_MIRROR") or str(REPO_ROOT.parent / "shared" / "data")
    path = Path(mirror)
    if not path.is_dir():
        pytest.skip(f"public data mirror not available at {path} (set STEREOLENS_DATA_MIRROR)")
    return path


@pytest.fixture(scope="session")
def tiny_masked_lm_dir(tmp_path_factory) -> Path:
    return tiny_models.build_masked_lm(tmp_path_factory.mktemp("tiny-masked-lm"))


@pytest.fixture(scope="session")
def tiny_causal_lm_dir(tmp_path_factory) -> Path:
    return tiny_models.build_causal_lm(tmp_path_factory.mktemp("tiny-causal-lm"))


@pytest.fixture(scope="session")
def tiny_seq2seq_lm_dir(tmp_path_factory) -> Path:
    return tiny_models.build_seq2seq_lm(tmp_path_factory.mktemp("tiny-seq2seq-lm"))


# Module scope: a test module gets its own loaded copies, since scoring memoises
# its body/head split on the model and some tests change that split.
@pytest.fixture(scope="module")
def mlm(tiny_masked_lm_dir):
    """(tiny masked LM, its tokenizer)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    return AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval(), AutoTokenizer.from_pretrained(tiny_masked_lm_dir)


@pytest.fixture(scope="module")
def clm(tiny_causal_lm_dir):
    """(tiny causal LM, its tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_causal_lm_dir).eval(), AutoTokenizer.from_pretrained(tiny_causal_lm_dir)
