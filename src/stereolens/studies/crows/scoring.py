"""How the CrowS-Pairs slice scores a model: the route a model's kind allows, and the scores."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.scoring.verified import verified_pairs, verifying_models
from stereolens.scoring.types import MASKED_METRICS, alternative_columns



def crows_scoring_route(metric: str, model_cfg: Mapping[str, Any]) -> tuple[str, str | None]:
    """How the slice scores this model: ``("engine", None)``, ``("loglikelihood", None)``
    through the model layer (OpenAI-compatible completions with echoed log-probabilities),
    or ``("skip", reason)`` for a model that cannot give sentence log-likelihoods at all.
    A metric that contradicts the model's kind is a configuration error."""
    kind = model_cfg.get("kind")
    if kind == "masked" and metric in MASKED_METRICS or kind == "causal" and metric == "causal":
        return "engine", None
    if kind in ("masked", "causal"):
        fits = "causal" if kind == "causal" else "one of " + ", ".join(MASKED_METRICS)
        raise ConfigError(
            f"metric {metric!r} does not fit model {model_cfg.get('id')!r} ({kind} LM); use metric={fits}"
        )
    if kind == "completion" and metric == "causal":
        if (model_cfg.get("extra") or {}).get("supports_loglikelihood", True):
            return "loglikelihood", None
        return "skip", f"{kind} endpoint {model_cfg.get('id')!r} gives no echoed log-probabilities"
    # chat endpoints score only what they generate, and CrowS has no seq2seq form
    return "skip", f"CrowS-Pairs needs sentence log-likelihoods, which a {kind} model does not give"


def score_crows(lm, pairs: pd.DataFrame, route: str, metric: str, *, batch_tokens: int,
                truncate: bool, alternatives: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """``pairs`` with ``score_stereo, score_anti`` and their token counts, by the engine (a local
    or executor-backed model) or by the model layer's log-likelihoods (``route="loglikelihood"``).
    Each of ``alternatives`` (masked-LM metrics, engine route only) is a second pass whose scores are
    kept beside the headline's (:func:`alternative_columns`) for the robustness table.  Under ``model.verify``
    each pair carries a ``precision`` column (``fp32`` where rescored) and ``attrs["precision"]`` says how many
    pairs were rescored (:func:`stereolens.scoring.verified.verified_pairs`)."""
    if route == "engine":
        from stereolens.scoring import score_pairs

        # the backend itself (not its network): an executor-backed model shards the pairs
        options = dict(batch_tokens=batch_tokens, truncate=truncate, cache=lm.cache, identity=lm.identity,
                       progress=True)
        if verifying_models(lm) is not None:
            # model.verify: half-precision scores, float32 wherever a pair's decision could flip (scoring/verified.py)
            scored, verified = verified_pairs(lm, pairs, metric, **options)
            scored.attrs["precision"] = verified.summary()
        else:
            scored = score_pairs(lm, None, pairs, metric, **options)
        for other in alternatives:
            if "precision" in scored.attrs:
                again, verified = verified_pairs(lm, pairs, other, **options)
                scored[f"precision_{other}"] = again["precision"].to_numpy()
                scored.attrs["precision_" + other] = verified.summary()
            else:
                again = score_pairs(lm, None, pairs, other, **options)
            stereo_col, anti_col = alternative_columns(other)
            scored[stereo_col], scored[anti_col] = again["score_stereo"].to_numpy(), again["score_anti"].to_numpy()
        return scored
    if alternatives:
        raise ConfigError(f"a second scoring pass ({', '.join(alternatives)}) needs a masked LM scored by the engine")
    from stereolens.models.base import LoglikelihoodRequest

    sentences = list(pairs["sent_stereo"]) + list(pairs["sent_anti"])
    results = lm.loglikelihood([LoglikelihoodRequest(context="", continuation=s) for s in sentences])
    n = len(pairs)
    return pairs.assign(
        score_stereo=[r.logprob for r in results[:n]], score_anti=[r.logprob for r in results[n:]],
        n_tokens_stereo=[r.n_tokens for r in results[:n]], n_tokens_anti=[r.n_tokens for r in results[n:]],
    )
