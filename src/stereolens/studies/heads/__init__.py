"""Attention-head probing and pruning (seed 003 section 6 and appendix F, after Ma et al. 2023)."""
