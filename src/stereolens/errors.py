"""User-facing errors.

Anything raised as a :class:`StereolensError` is printed by the CLI as one line
(``stereolens: error: ...``) and exits with status 2; everything else is a bug
and keeps its traceback.
"""

from __future__ import annotations


class StereolensError(Exception):
    """An error the user can fix: bad input, bad config, a model that will not load."""


class ConfigError(StereolensError):
    """A config key, group option or override that does not exist or is malformed."""


class DataError(StereolensError):
    """An input table or file that is missing, malformed, or fails a checksum."""


class ModelLoadError(StereolensError):
    """A model name or path that cannot be loaded."""


class RemoteCallError(StereolensError):
    """A remote model call that still failed after the last retry."""


class GateFailed(StereolensError):
    """A quality gate (Great Expectations suite) that did not pass."""
