"""stereolens: measure stereotypes and cultural pragmatics in multilingual language models."""

__version__ = "0.1.0"
