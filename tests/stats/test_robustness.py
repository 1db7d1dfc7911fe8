"""Robustness tables (stats/robustness.py): each variant's agreement with its cell's headline decision, and the
summary block's counts over the variants that ran."""

from __future__ import annotations

import pandas as pd
import pytest

from stereolens.stats.robustness import (
    ANTI_STEREOTYPICAL,
    COLUMNS,
    HEADLINE,
    NO_PREFERENCE,
    STEREOTYPICAL,
    interval_decision,
    not_run_row,
    ran_row,
    robustness_block,
    robustness_table,
    share_decision,
)


def _ran(variant, decision, cell=None):
    return ran_row("choice", variant, estimate=0.6, ci_low=0.5, ci_high=0.7, n=10, decision=decision, cell=cell)


def test_agreement_is_with_the_headline_decision_and_not_run_rows_are_counted_apart():
    table = robustness_table([_ran(HEADLINE, STEREOTYPICAL), _ran("a", STEREOTYPICAL), _ran("b", NO_PREFERENCE),
                              not_run_row("c", "d", "needs another pass")])
    assert list(table.columns) == list(COLUMNS)
    assert table["agrees"].tolist() == [True, True, False, None]
    assert robustness_block(table) == {"headline_decision": STEREOTYPICAL, "survives": 1, "of": 2, "not_run": 1,
                                       "table": "robustness.csv"}


def test_cells_are_judged_against_their_own_headline():
    rows = [_ran(HEADLINE, NO_PREFERENCE, "en"), _ran("a", NO_PREFERENCE, "en"), _ran(HEADLINE, STEREOTYPICAL, "kok"),
            _ran("a", NO_PREFERENCE, "kok"), not_run_row("c", "d", "masked LMs only", cell="kok")]
    table = robustness_table(rows)
    assert list(table.columns) == ["cell", *COLUMNS]
    assert table["agrees"].tolist() == [True, True, True, False, None]
    block = robustness_block(table)
    assert block["headline_decision"] == f"en: {NO_PREFERENCE}; kok: {STEREOTYPICAL}"
    assert (block["survives"], block["of"], block["not_run"]) == (1, 2, 1)
    assert block["by_cell"]["kok"] == {"headline_decision": STEREOTYPICAL, "survives": 0, "of": 1, "not_run": 1}


def test_a_variant_before_its_headline_is_refused():
    with pytest.raises(ValueError, match="headline row"):
        robustness_table([_ran("a", STEREOTYPICAL), _ran(HEADLINE, STEREOTYPICAL)])


@pytest.mark.parametrize("significant, favours, expected", [(True, STEREOTYPICAL, STEREOTYPICAL),
                                                            (True, ANTI_STEREOTYPICAL, ANTI_STEREOTYPICAL),
                                                            (False, STEREOTYPICAL, NO_PREFERENCE),
                                                            (True, "neither", NO_PREFERENCE)])
def test_share_decision(significant, favours, expected):
    assert share_decision(significant, favours) == expected


def test_interval_decision():
    assert interval_decision(0.51, 0.7) == STEREOTYPICAL and interval_decision(0.2, 0.49) == ANTI_STEREOTYPICAL
    assert interval_decision(0.5, 0.7) == NO_PREFERENCE and interval_decision(float("nan"), 0.7) == NO_PREFERENCE
    assert robustness_block(pd.DataFrame())["of"] == 0
