"""The one table renderer: how a person sees numbers and missing values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stereolens.report.markdown import MISSING, format_cell, markdown_table


def test_missing_values_read_the_same_whatever_their_type():
    assert {format_cell(v) for v in (None, float("nan"), np.float64("nan"), pd.NA)} == {MISSING}


def test_numbers_are_formatted_for_a_person():
    assert format_cell(np.float64(0.57624)) == "0.576"
    assert format_cell(np.int64(1508)) == "1508"
    assert format_cell(1234.5678, digits=4) == "1235"
    assert format_cell(float("-inf")) == "-inf"
    assert format_cell(True) == "True"


def test_table_rows_and_escaped_pipes():
    df = pd.DataFrame({"group": ["a|b", "c"], "ss": [52.2, np.nan]})
    assert markdown_table(df) == "| group | ss |\n|---|---|\n| a\\|b | 52.2 |\n| c | n/a |\n"
    assert markdown_table(df.iloc[0:0]) == "_(empty)_\n"
