"""A panel of language models as annotators.

Each panel member reads the same instructions and item text as a human would.
Where the backend scores continuations (``supports_loglikelihood``), the answer
is the scale option with the highest log-probability as a continuation of the
prompt (the option's sub-token log-probabilities summed), and the normalised
option probabilities are kept; otherwise the model generates an answer that is
parsed against the scale.  All requests go through the model layer, hence
through its response cache.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import DataError
from stereolens.models.base import (
    ChatMessage,
    GenerationRequest,
    LanguageModel,
    LoglikelihoodRequest,
)

SOURCE = "llm_panel"
DEFAULT_TEMPLATE = "{instructions}\n\n{text}\n\nAnswer with one of: {options}.\nAnswer:"

Method = Literal["auto", "loglikelihood", "generate"]


def render_prompt(template: str, instructions: str, text: str, scale: Scale) -> str:
    options = ", ".join(scale.texts()) if scale.is_closed else f"a number from {scale.minimum:g} to {scale.maximum:g}"
    return template.format(instructions=instructions, text=text, options=options)


def parse_answer(text: str, scale: Scale) -> Any:
    """The first scale option the answer names (None if none): option text for closed
    non-numeric scales, the first in-range number otherwise."""
    if scale.is_closed and not all(isinstance(o, (int, float)) for o in scale.options):
        lowered = text.lower()
        best = None
        for option, option_text in zip(scale.options, scale.texts()):
            m = re.search(rf"(?<!\w){re.escape(option_text.lower())}(?!\w)", lowered)
            if m and (best is None or m.start() < best[0]):
                best = (m.start(), option)
        return best[1] if best else None
    for m in re.finditer(r"-?\d+(?:\.\d+)?", text):
        try:
            return scale.coerce(m.group())
        except ValueError:
            continue
    return None


def _use_loglikelihood(model: LanguageModel, scale: Scale, method: Method) -> bool:
    if method == "generate":
        return False
    if not scale.is_closed:
        if method == "loglikelihood":
            raise DataError(f"scale {scale.name!r} has no options to score; use method='generate'")
        return False
    supported = bool(getattr(model, "supports_loglikelihood", False))
    if method == "loglikelihood" and not supported:
        raise DataError(f"model {model.identity} does not return log-probabilities; use method='generate'")
    return supported


def annotate_with_model(
    model: LanguageModel,
    items: pd.DataFrame,
    scale: Scale,
    instructions: str,
    *,
    annotator_id: str,
    template: str = DEFAULT_TEMPLATE,
    method: Method = "auto",
    text_col: str = "text",
    max_tokens: int = 8,
    seed: int = 0,
) -> pd.DataFrame:
    """One panel member's judgements on every item (long format, ``source=llm_panel``)."""
    for col in ("item_id", text_col):
        if col not in items.columns:
            raise DataError(f"items for the LLM panel lack column {col!r}")
    prompts = [render_prompt(template, instructions, str(t), scale) for t in items[text_col]]
    chat = getattr(getattr(model, "spec", None), "kind", None) == "chat"
    rows: list[dict[str, Any]] = []
    if _use_loglikelihood(model, scale, method):
        texts = scale.texts()
        requests = [
            LoglikelihoodRequest(
                context=p if not chat else "",
                continuation=" " + t,
                messages=(ChatMessage("user", p),) if chat else None,
            )
            for p in prompts
            for t in texts
        ]
        scores = model.loglikelihood(requests)
        k = len(texts)
        for i, item in enumerate(items["item_id"]):
            lp = np.array([scores[i * k + j].logprob for j in range(k)], dtype=float)
            probs = np.exp(lp - lp.max())
            probs /= probs.sum()
            choice = int(np.argmax(lp))
            row = {
                "item_id": item,
                "annotator_id": annotator_id,
                "label": scale.options[choice],
                "method": "loglikelihood",
                "option_probs": json.dumps({str(o): round(float(p), 6) for o, p in zip(scale.options, probs)}),
                "raw_answer": None,
            }
            if all(isinstance(o, (int, float)) for o in scale.options):
                row["expected_label"] = float(np.dot(probs, [float(o) for o in scale.options]))
            rows.append(row)
    else:
        requests = [
            GenerationRequest(messages=(ChatMessage("user", p),), max_tokens=max_tokens, temperature=0.0, seed=seed)
            if chat
            else GenerationRequest(prompt=p, max_tokens=max_tokens, temperature=0.0, seed=seed, stop=("\n",))
            for p in prompts
        ]
        for item, gen in zip(items["item_id"], model.generate(requests)):
            label = parse_answer(gen.text, scale)
            rows.append({
                "item_id": item,
                "annotator_id": annotator_id,
                "label": label if label is not None else math.nan,
                "method": "generate",
                "option_probs": None,
                "raw_answer": gen.text,
            })
    df = pd.DataFrame(rows)
    df["model_identity"] = model.identity
    df["source"] = SOURCE
    return df


def llm_panel_annotations(
    models: Mapping[str, LanguageModel] | Sequence[LanguageModel],
    items: pd.DataFrame,
    scale: Scale,
    instructions: str,
    *,
    template: str = DEFAULT_TEMPLATE,
    method: Method = "auto",
    text_col: str = "text",
    seed: int = 0,
) -> pd.DataFrame:
    """Judgements of every panel member (annotator_id = the member's name)."""
    if not isinstance(models, Mapping):
        models = {m.spec.name if getattr(m, "spec", None) else f"model{i}": m for i, m in enumerate(models)}
    if not models:
        raise DataError("the LLM panel has no models")
    frames = [
        annotate_with_model(
            model, items, scale, instructions, annotator_id=name, template=template,
            method=method, text_col=text_col, seed=seed,
        )
        for name, model in models.items()
    ]
    return pd.concat(frames, ignore_index=True)
