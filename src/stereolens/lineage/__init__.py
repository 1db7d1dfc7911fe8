"""Lineage and release audit, read from what DVC, the ingest step, the tables and MLflow already record."""
