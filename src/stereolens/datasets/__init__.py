"""Public datasets: pinned sources, checksums, and ingest from a mirror or the web."""

from stereolens.datasets.ingest import DatasetSpec, ingest_dataset, load_registry

__all__ = ["DatasetSpec", "ingest_dataset", "load_registry"]
