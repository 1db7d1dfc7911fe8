"""The static report site: ``reports/index.html`` and one page per study, built from what the studies wrote."""
