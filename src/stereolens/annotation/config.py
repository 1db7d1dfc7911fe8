"""The ``annotation`` config section (conf/annotation/<source>.yaml) as typed objects.

Stages read params and pass the plain dict here; the library never reads
params.yaml itself.  Unknown keys are refused so a typo cannot silently fall back
to a default threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stereolens.annotation import SOURCES
from stereolens.annotation.qc import QCConfig
from stereolens.annotation.scales import Scale, scale_from_config
from stereolens.errors import ConfigError
from stereolens.quality.suites import AnnotationThresholds

_KNOWN = {"source", "scale", "quorum", "discard_median_at_or_below", "qc", "thresholds", "bootstrap", "simulator", "panel",
          "annotator_map"}


@dataclass(frozen=True)
class BootstrapConfig:
    n_boot: int = 1000
    confidence: float = 0.95
    ci_method: str = "percentile"


@dataclass(frozen=True)
class AnnotationConfig:
    source: str
    scale: Scale
    quorum: int | float = 2
    discard_median_at_or_below: float = 2
    qc: QCConfig = field(default_factory=QCConfig)
    thresholds: AnnotationThresholds = field(default_factory=AnnotationThresholds)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    simulator: dict[str, Any] = field(default_factory=dict)
    panel: dict[str, Any] = field(default_factory=dict)
    # CSV label_studio_user -> annotator_id: Label Studio users credited to the team's annotator ids
    annotator_map: str | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "AnnotationConfig":
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - _KNOWN)
        if unknown:
            raise ConfigError(f"unknown key(s) annotation.{', annotation.'.join(unknown)} (known: {sorted(_KNOWN)})")
        source = cfg.get("source")
        if source not in SOURCES:
            raise ConfigError(f"annotation.source={source!r} is not one of {', '.join(SOURCES)}")
        boot = dict(cfg.get("bootstrap") or {})
        bad = sorted(set(boot) - {"n_boot", "confidence", "ci_method"})
        if bad:
            raise ConfigError(f"unknown key(s) {bad} in annotation.bootstrap")
        if boot.get("ci_method", "percentile") not in ("percentile", "BCa"):
            raise ConfigError(f"annotation.bootstrap.ci_method={boot['ci_method']!r} is not percentile or BCa")
        return cls(
            source=source,
            scale=scale_from_config(cfg.get("scale", "likert5")),
            quorum=cfg.get("quorum", 2),
            discard_median_at_or_below=cfg.get("discard_median_at_or_below", 2),
            qc=QCConfig.from_config(cfg.get("qc")),
            thresholds=AnnotationThresholds.from_config(cfg.get("thresholds")),
            bootstrap=BootstrapConfig(**boot),
            simulator=dict(cfg.get("simulator") or {}),
            panel=dict(cfg.get("panel") or {}),
            annotator_map=cfg.get("annotator_map"),
        )
