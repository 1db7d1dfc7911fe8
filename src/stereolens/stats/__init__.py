"""Statistical estimators shared by the studies: pairwise bias scores with BCa intervals and exact tests."""
