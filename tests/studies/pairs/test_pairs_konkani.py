"""Konkani minimality (issue 31 item 5): a listed form followed by a Konkani case suffix is the group's
word, the paper's own spellings are listed, and the paper's five native-reviewed Table 9 pairs pass the
check that decides which translated pairs are evaluated.  Groups, forms and suffixes are the shipped seed
tables; the pairs are AmchiBias appendix D Table 9, copied verbatim into fixtures/amchibias_table9.csv
(the group each English name belongs to is ours: Toddy Tappers = Render, Landlords = Bhatkars,
Goans = Locals, Punjabis = Bhaile)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pairs_groups import REPO, SEED_GROUPS

from stereolens.errors import DataError
from stereolens.studies.pairs.minimal_pairs import minimality_problems, read_case_suffixes
from stereolens.studies.pairs.translation import flag_translations, import_reviewed, merge_reviewed

G = SEED_GROUPS
SUFFIXES = read_case_suffixes(REPO / "data/seed/pairs/case_suffixes.csv")
TABLE9 = pd.read_csv(Path(__file__).parent / "fixtures" / "amchibias_table9.csv", dtype=str, keep_default_na=False)


def _kok(**sentences: str) -> dict:
    """The Konkani row of one Table 9 pair, with its sentences replaced."""
    row = TABLE9[(TABLE9["language"] == "kok") & (TABLE9["pair_id"] == sentences.pop("pair_id"))].iloc[0]
    return {**row.to_dict(), **sentences}


@pytest.mark.parametrize("pair_id", sorted(TABLE9["pair_id"].unique()))
def test_the_papers_table9_pairs_are_minimal_in_both_languages(pair_id):
    rows = TABLE9[TABLE9["pair_id"] == pair_id].set_index("language")
    stereo, anti = G[rows.loc["en", "group_stereo"]], G[rows.loc["en", "group_anti"]]
    assert minimality_problems(rows.loc["en", "sent_stereo"], rows.loc["en", "sent_anti"], stereo, anti) == []
    assert minimality_problems(rows.loc["kok", "sent_stereo"], rows.loc["kok", "sent_anti"], stereo, anti,
                               languages=("kok", "en"), suffixes=SUFFIXES) == []


def test_the_papers_native_reviewed_pairs_enter_the_evaluation(tmp_path):
    """All five as machine output (flag_translations) and as reviewed rows (merge_reviewed): minimal_ok."""
    kok = TABLE9[TABLE9["language"] == "kok"].assign(translation_status="machine")
    flagged = flag_translations(kok, list(G.values()), language="kok", suffixes=SUFFIXES)
    assert flagged["minimal_issue"].tolist() == [""] * 5 and flagged["minimal_ok"].all()
    # the machine text was something else; the native reviewer's text (the paper's) replaces it
    machine = pd.concat([TABLE9[TABLE9["language"] == "en"].assign(translation_status="source"),
                         flag_translations(kok.assign(sent_anti=kok["sent_stereo"]), list(G.values()),
                                           language="kok", suffixes=SUFFIXES)], ignore_index=True)
    assert not machine.loc[machine["language"] == "kok", "minimal_ok"].any()   # identical sentences
    path = tmp_path / "reviewed.csv"
    kok.assign(reviewer="AmchiBias native reviewer", status="approved", error_categories="")[
        ["pair_id", "language", "sent_stereo", "sent_anti", "reviewer", "status", "error_categories"]].to_csv(
        path, index=False)
    merged, usage = merge_reviewed(machine, import_reviewed(path, TABLE9["pair_id"].unique()), list(G.values()),
                                   scripts={"kok": "Devanagari"}, suffixes=SUFFIXES)
    assert usage["used"].all()
    reviewed = merged[merged["language"] == "kok"]
    assert reviewed["minimal_issue"].tolist() == [""] * 5 and reviewed["minimal_ok"].astype(bool).all()


@pytest.mark.parametrize("pair_id, sent_anti, expected", [
    # a changed case: dative on the stereotyped side, ergative on the contrast's
    ("t9_4", "पंजाबी लोकांनी सदांच जेवणा वेळार शीत-कडी आवडटा.", "case suffixes differ"),
    # the group's word with its case suffix, and a changed word beside it ("rough" -> "soft")
    ("t9_2", "वर्सां वर्सां सुर्याक चड वरां काम केल्ल्यान भाटकारांचे हात मोव आसतात.", "'खरखरीत' -> 'मोव'"),
    # an ending that is no case suffix ("-पण", -ness) is not the group's word
    ("t9_2", "वर्सां वर्सां सुर्याक चड वरां काम केल्ल्यान भाटकारपण हात खरखरीत आसतात.", "'रेंदेराचे' -> 'भाटकारपण'"),
    # a variant spelling of one group is not a form of another
    ("t9_1", "गौडा वेपारी आपल्या चतुर वाटाघाटी आनी शोशणात्मक करारां खातीर वळखले जातात.", None),
])
def test_a_konkani_pair_that_changes_more_than_the_group_still_fails(pair_id, sent_anti, expected):
    row = _kok(pair_id=pair_id, sent_anti=sent_anti)
    bad = minimality_problems(row["sent_stereo"], row["sent_anti"], G[row["group_stereo"]], G[row["group_anti"]],
                              languages=("kok", "en"), suffixes=SUFFIXES)
    if expected is None:   # the Table 9 text itself: minimal
        assert bad == []
        wrong = minimality_problems(row["sent_stereo"], row["sent_anti"], G["Vaishyas"], G["Kharvis"],
                                    languages=("kok", "en"), suffixes=SUFFIXES)
        assert wrong == ["'वैश्य' -> 'गौडा'"]
    else:
        assert len(bad) == 1 and expected in bad[0]


def test_a_suffixed_form_of_the_stereotyped_group_left_in_the_counter_sentence_is_found():
    # the second mention ("गोंयकारांचें", the Goans' genitive) was not replaced
    bad = minimality_problems("गोंयकारांक गोंयकारांचें जेवण आवडटा.", "पंजाबी लोकांक गोंयकारांचें जेवण आवडटा.",
                              G["Locals"], G["Bhaile"], languages=("kok", "en"), suffixes=SUFFIXES)
    assert bad == ["'गोंयकारांचें' (a form of 'Locals') remains in the counter-sentence"]


@pytest.mark.parametrize("stereo, anti, sent_stereo, sent_anti", [
    # a form ending in -ो/-े changes its stem before a case suffix: the listed oblique stem takes it
    ("Women", "Men", "बायलांक सदांच शीत-कडी आवडटा.", "दादल्यांक सदांच शीत-कडी आवडटा."),
    ("Youth", "Elderly", "तरणाट्यांचे हात खरखरीत आसतात.", "जाण्ट्यांचे हात खरखरीत आसतात."),
    # a consonant-final form takes the oblique marker and the suffix itself; a postposition stays apart
    ("Bamon", "Shudras", "बामणां कडेन व्हड घरां आसात.", "सुदीरां कडेन व्हड घरां आसात."),
])
def test_oblique_stems_take_case_suffixes(stereo, anti, sent_stereo, sent_anti):
    assert minimality_problems(sent_stereo, sent_anti, G[stereo], G[anti], languages=("kok", "en"),
                               suffixes=SUFFIXES) == []


def test_without_the_suffix_table_only_bare_forms_count():
    row = _kok(pair_id="t9_2")
    assert minimality_problems(row["sent_stereo"], row["sent_anti"], G["Render"], G["Bhatkars"],
                               languages=("kok", "en")) == ["'रेंदेराचे' -> 'भाटकारांचे'"]


def test_the_suffix_table_names_its_source_and_refuses_bad_rows(tmp_path):
    seed = pd.read_csv(REPO / "data/seed/pairs/case_suffixes.csv", dtype=str, keep_default_na=False)
    assert seed["source"].str.strip().astype(bool).all() and set(seed["language"]) == {"kok"}
    assert {"क", "चे", "ा", "ां"} <= set(seed["suffix"])     # the endings Table 9 itself uses
    header = "language,kind,suffix,case,attested,source\n"
    for body, where in [("kok,prefix,क,dative,,x\n", "line 2, column kind"),
                        ("kok,case,,dative,,x\n", "line 2, column suffix"),
                        ("kok,case,क,dative,,x\nkok,case,क,dative,,x\n", "line 3"),
                        ("kok,case,क ा,dative,,x\n", "line 2, column suffix")]:
        (tmp_path / "s.csv").write_text(header + body, encoding="utf-8")
        with pytest.raises(DataError, match=where):
            read_case_suffixes(tmp_path / "s.csv")
