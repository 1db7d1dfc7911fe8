"""Which scoring metrics a model can take, decided from its config before any weights load.

A metric that contradicts the model (``pll`` on a decoder, ``causal`` on an
encoder) would otherwise fail deep inside the transformers loader or the
tokenizer with a message about something else; reading ``config.json`` costs
milliseconds and names the real problem.
"""

from __future__ import annotations

from stereolens.errors import ConfigError, ModelLoadError
from stereolens.scoring.types import MASKED_METRICS

_MASKED_SUFFIXES = ("ForMaskedLM",)
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def model_kind(name: str) -> str:
    """``masked``, ``causal`` or ``seq2seq`` from the model's config (local folder or HF cache)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"model {name!r} not found: give a local folder with config.json or a name already in the "
            f"Hugging Face cache ({str(exc).splitlines()[0][:160]})"
        ) from None
    if getattr(config, "is_encoder_decoder", False):
        return "seq2seq"
    architectures = list(getattr(config, "architectures", None) or [])
    if any(a.endswith(_MASKED_SUFFIXES) for a in architectures):
        return "masked"
    if any(a.endswith(_CAUSAL_SUFFIXES) for a in architectures) or getattr(config, "is_decoder", False):
        return "causal"
    # no architecture recorded: BERT-family configs are encoders, everything else we score is a decoder
    return "masked" if getattr(config, "model_type", "") in {"bert", "roberta", "xlm-roberta", "distilbert",
                                                            "albert", "electra", "camembert"} else "causal"


def check_metric_for_kind(metric: str, kind: str, name: str) -> None:
    """Refuse a metric the model kind cannot compute, saying which metric fits."""
    if metric in MASKED_METRICS and kind != "masked":
        raise ConfigError(f"--metric {metric} needs a masked LM; model {name!r} is {kind} (use --metric causal)")
    if metric == "causal" and kind == "masked":
        raise ConfigError(
            f"--metric causal needs a causal or seq2seq model; model {name!r} is masked "
            f"(use --metric {', '.join(MASKED_METRICS)})"
        )
