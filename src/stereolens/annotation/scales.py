"""Answer scales: what labels a judgement may take and how far apart they are.

A scale fixes the label set for validation on import, the option strings an
LLM panel is scored over, and the measurement level agreement uses
(nominal yes/no, ordinal Likert, interval slider).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from stereolens.errors import ConfigError

Level = Literal["nominal", "ordinal", "interval"]


@dataclass(frozen=True)
class Scale:
    """A closed label set (``options``) or a numeric range (``minimum``..``maximum``)."""

    name: str
    level: Level
    options: tuple[Any, ...] = ()
    # what an annotator (or a model) reads for each option, in the same order
    option_texts: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.options and (self.minimum is None or self.maximum is None):
            raise ConfigError(f"scale {self.name!r} needs options or a numeric minimum and maximum")
        if self.option_texts and len(self.option_texts) != len(self.options):
            raise ConfigError(f"scale {self.name!r}: option_texts and options differ in length")

    @property
    def is_closed(self) -> bool:
        return bool(self.options)

    def texts(self) -> tuple[str, ...]:
        return self.option_texts or tuple(str(o) for o in self.options)

    def coerce(self, value: Any) -> Any:
        """The label as the scale stores it, or raise ValueError if it is not on the scale."""
        if self.is_closed:
            for option in self.options:
                if _same_label(value, option):
                    return option
            # Label Studio (and a person filling in a sheet) gives the text shown, not the option
            for option, text in zip(self.options, self.option_texts):
                if _same_label(value, text):
                    return option
            raise ValueError(f"label {value!r} is not one of {list(self.options)}")
        number = float(value)
        if number != number or number < self.minimum or number > self.maximum:  # NaN fails too
            raise ValueError(f"label {value!r} is outside [{self.minimum}, {self.maximum}]")
        return number


def _same_label(value: Any, option: Any) -> bool:
    if isinstance(option, (int, float)) and not isinstance(option, bool):
        try:
            return float(value) == float(option)
        except (TypeError, ValueError):
            return False
    return str(value).strip().lower() == str(option).strip().lower()


YES_NO = Scale("yes_no", "nominal", options=("yes", "no"), option_texts=("Yes", "No"))
LIKERT5 = Scale(
    "likert5",
    "ordinal",
    options=(1, 2, 3, 4, 5),
    option_texts=("1", "2", "3", "4", "5"),
)
SLIDER_50 = Scale("slider_-50_50", "interval", minimum=-50.0, maximum=50.0)

BUILTIN_SCALES: dict[str, Scale] = {s.name: s for s in (YES_NO, LIKERT5, SLIDER_50)}


def scale_from_config(cfg: Mapping[str, Any] | str) -> Scale:
    """A scale by builtin name, or from a mapping (``name, level, options | minimum/maximum``)."""
    if isinstance(cfg, str):
        if cfg not in BUILTIN_SCALES:
            raise ConfigError(f"unknown scale {cfg!r}; builtin: {', '.join(BUILTIN_SCALES)}")
        return BUILTIN_SCALES[cfg]
    cfg = dict(cfg)
    if set(cfg) <= {"name"} and cfg.get("name") in BUILTIN_SCALES:
        return BUILTIN_SCALES[cfg["name"]]
    try:
        return Scale(
            name=str(cfg["name"]),
            level=cfg.get("level", "nominal"),
            options=tuple(cfg.get("options") or ()),
            option_texts=tuple(cfg.get("option_texts") or ()),
            minimum=cfg.get("minimum"),
            maximum=cfg.get("maximum"),
        )
    except KeyError as exc:
        raise ConfigError(f"scale config lacks {exc.args[0]!r}") from exc


# Scales a study declares for `stereolens annotation import --scale NAME` (name -> "module:attribute", the
# attribute a Scale or a function returning one); filled by each study's ``scales.py`` (discovered by the CLI).
STUDY_SCALES: dict[str, str] = {}


def register_study_scale(name: str, target: str) -> None:
    if name in BUILTIN_SCALES or STUDY_SCALES.get(name, target) != target:
        raise ConfigError(f"scale name {name!r} is taken")
    STUDY_SCALES[name] = target


def scale_by_name(name: str) -> Scale:
    """A builtin scale or one a study registered (loaded on use)."""
    import importlib

    if name not in STUDY_SCALES:
        return scale_from_config(name)
    module, attribute = STUDY_SCALES[name].split(":")
    found = getattr(importlib.import_module(module), attribute)
    return found() if callable(found) else found
