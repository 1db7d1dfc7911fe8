"""Statistics over scores: bias scores, regressions, agreement-free analyses."""
