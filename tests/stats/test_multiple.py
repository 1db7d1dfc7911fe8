"""Holm and Benjamini-Hochberg corrections against values computed by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stereolens.stats.multiple import add_corrections, adjusted_p_values

P = [0.01, 0.04, 0.03, 0.005]


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert adjusted_p_values(P, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_benjamini_hochberg_by_hand():
    # sorted p * m / rank: 0.02, 0.02, 0.04, 0.04; running min from the top keeps them
    assert adjusted_p_values(P, "fdr_bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])


def test_untested_cells_stay_missing_and_do_not_enlarge_the_family():
    adjusted = adjusted_p_values([0.01, np.nan, 0.04], "holm")
    assert np.isnan(adjusted[1])
    assert adjusted[[0, 2]] == pytest.approx([0.02, 0.04])


def test_families_are_corrected_separately():
    table = pd.DataFrame({"p_value": P + P, "lang": ["en"] * 4 + ["kok"] * 4})
    out = add_corrections(table, family=table["lang"])
    assert out["p_holm"].tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02] * 2)
    assert out["significant_holm"].tolist() == [True, False, False, True] * 2
    assert out["significant_bh"].tolist() == [True, True, True, True] * 2


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown correction"):
        adjusted_p_values(P, "bonferonni")
