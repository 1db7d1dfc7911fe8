"""DVC stages of the pairs study (seed 002, AmchiBias)."""
