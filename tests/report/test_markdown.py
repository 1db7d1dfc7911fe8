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


def test_values_in_prose_are_words_not_yaml_or_json():
    from stereolens.report.markdown import format_mapping, format_value, settings

    assert format_mapping({"Mexico": 2, "Spain": 3}) == "Mexico 2, Spain 3"
    assert format_mapping({"ru": {"authored": 416, "original": 92}, "zh": {"authored": 410}}) == (
        "ru: authored 416, original 92; zh: authored 410")
    assert format_value([0.57624, None, True]) == "0.576, n/a, yes" and format_value({}) == "none"
    assert settings({"crows": {"sample": 500, "limit": None}, "panel": [{"id": "a"}, {"id": "b"}],
                     "languages": ["en", "hi"]}) == [
        ("crows.sample", "500"), ("crows.limit", "n/a"), ("panel.1.id", "a"), ("panel.2.id", "b"),
        ("languages", "en, hi")]


def test_large_numbers_keep_their_integer_part():
    assert format_cell(1234.5678) == "1235" and format_cell(-98765.4) == "-98765" and format_cell(999.94) == "1000"


def test_significance_marks():
    from stereolens.report.markdown import significance_mark

    assert [significance_mark(*args) for args in ((True, False), (False, True), (False, False), (True, True))] == \
        ["*", "~", "", "*"]
