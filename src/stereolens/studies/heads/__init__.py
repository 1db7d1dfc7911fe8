"""Attention-head probing and pruning (EspanStereo section 6 and appendix F, after Ma et al. 2023)."""
