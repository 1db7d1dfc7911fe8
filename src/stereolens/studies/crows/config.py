"""Types of this study's config keys whose default is null (checked by ``stereolens config compose``)."""

# keys relative to study.crows; a non-null default already fixes its key's type
PARAM_TYPES = {"limit": int}
