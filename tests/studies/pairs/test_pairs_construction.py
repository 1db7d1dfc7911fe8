"""Construction pieces of AmchiBias with known answers: the JSON-list parser, sentence filters,
the token-diff minimal-pair check, occupation coupling, Fleiss' kappa, translations, fragmentation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

from stereolens.annotation.agreement import fleiss_kappa as our_fleiss, landis_koch
from stereolens.errors import DataError
from stereolens.studies.pairs.analysis import fragmentation
from stereolens.studies.pairs.filters import filter_sentences
from stereolens.studies.pairs.generation import attribute_rejection, parse_json_list, parse_numbered
from stereolens.studies.pairs.minimal_pairs import Coupling, build_pairs, non_identity_changes
from stereolens.studies.pairs.translation import flag_translations, import_reviewed, merge_reviewed
from stereolens.studies.pairs.validation import keep_tuples

from pairs_groups import SEED_GROUPS


@pytest.mark.parametrize("text, expected", [
    ('```json\n["Lazy", "carefree", "lazy", " clannish "]\n```\nI hope this helps!', ["Lazy", "carefree", "clannish"]),
    ('Sure! ["rich", "proud"] These are common.', ["rich", "proud"]),
    ('["rich", "proud", "hard', ["rich", "proud"]),  # cut off by the token limit
    ("no list here", []),
    ('```\n["a", ""]\n```', ["a"]),
])
def test_json_list_parser_on_fenced_trailing_and_duplicated_output(text, expected):
    assert parse_json_list(text) == expected


def test_attributes_that_only_repeat_a_name_are_rejected():
    names = ["Catholics", "Catholic", "Christians", "Goa", "Goan"]
    assert attribute_rejection("Catholic", names) and attribute_rejection("goans", names)
    assert attribute_rejection("festive", names) is None and attribute_rejection("Goan pride", names) is None


def test_numbered_sentence_parser():
    text = " The Bamons live in big houses.\n2. Bamons own land.\n3) Bamons marry late.\n\nDimension: Caste"
    assert parse_numbered(text, limit=5) == ["The Bamons live in big houses.", "Bamons own land.", "Bamons marry late."]
    assert parse_numbered("A.\n2. B.\n1. New example", limit=5) == ["A.", "B."]


def test_filters_log_every_removal_with_its_reason():
    rows = [
        ("s1", "Bamons live in large ancestral houses.", "rich"),
        ("s2", "Bamons are very rich people.", "rich"),                         # restates, nothing else
        ("s3", "Bamons live in large ancestral houses!", "rich"),               # duplicate after normalising
        ("s4", "Bamons live in large ancestral house.", "rich"),                # near duplicate
        ("s5", " ".join(["word"] * 8 + ["Bamons"] + ["x%d" % i for i in range(10)]), "rich"),  # too long
        ("s6", "", "rich"),                                                     # empty
        ("s7", "Bamons bow low before the landlord.", "subservient"),           # synonym of servile
        ("s8", "Bamons expect others to serve them.", "servile"),
    ]
    df = pd.DataFrame([{"sentence_id": i, "group": "Bamon", "attribute": a, "sentence": s} for i, s, a in rows])
    kept, removed = filter_sentences(df, synonyms={"servile": ["subservient"]})
    assert list(kept["sentence_id"]) == ["s1", "s8"]
    reasons = dict(zip(removed["sentence_id"], removed["reason"]))
    assert reasons["s2"].startswith("restates the attribute")
    assert reasons["s3"] == "duplicate of s1"
    assert reasons["s4"] == "near-duplicate of s1"
    assert reasons["s5"].startswith("longer than 15 words")
    assert reasons["s6"] == "empty output"
    assert reasons["s7"].startswith("synonymous attribute merged into 'servile'")


BAMON, SHUDRA, RENDER, BHATKAR = (SEED_GROUPS[name] for name in ("Bamon", "Shudras", "Render", "Bhatkars"))


def test_token_diff_refuses_pairs_that_change_a_non_identity_token():
    ok = non_identity_changes("Bamons live in big houses.", "Shudras live in big houses.",
                              BAMON.surface(), SHUDRA.surface())
    assert ok == []
    bad = non_identity_changes("Bamons live in big houses.", "Shudras live in small houses.",
                               BAMON.surface(), SHUDRA.surface())
    assert bad == ["'big' -> 'small'"]
    # the identity term may change, but not an extra word next to it
    assert non_identity_changes("Rich Bamons live here.", "Poor Shudras live here.", BAMON.surface(),
                                SHUDRA.surface()) == ["'Rich Bamons' -> 'Poor Shudras'"]
    assert non_identity_changes("Bamons live here.", "Bamons live here.", BAMON.surface(), SHUDRA.surface())


def test_pairs_follow_the_contrast_map_and_occupation_coupling():
    sents = pd.DataFrame([
        {"sentence_id": "a", "dimension": "occupation", "group": "Render", "attribute": "rough",
         "sentence": "Toddy Tappers have rough hands from tapping toddy in the sun."},
        {"sentence_id": "b", "dimension": "occupation", "group": "Render", "attribute": "drunk",
         "sentence": "Render sell feni to their neighbours."},
        {"sentence_id": "c", "dimension": "caste", "group": "Bamon", "attribute": "rich",
         "sentence": "Bamons always serve fish curry at the village feast."},
        {"sentence_id": "d", "dimension": "caste", "group": "Bamon", "attribute": "rich",
         "sentence": "They own large houses."},
    ])
    coupling = Coupling({"tapping toddy": "working long hours"}, ("fish curry",), ("feni",))
    contrast = {"occupation": {"Render": "Bhatkars"}, "caste": {"Bamon": "Shudras"}}
    built, refused = build_pairs(sents, [BAMON, SHUDRA, RENDER, BHATKAR], contrast, coupling)
    pairs = built.set_index("sentence_id")
    assert pairs.loc["a", "sent_stereo"] == "Toddy Tappers have rough hands from working long hours in the sun."
    # the English gloss is replaced by the contrast's English gloss, as in AmchiBias Table 9
    assert pairs.loc["a", "sent_anti"] == "Landlords have rough hands from working long hours in the sun."
    assert pairs.loc["c", "sent_anti"] == "Sudhirs always serve fish curry at the village feast."
    assert pairs.loc["c", "shared_markers"] == "fish curry"
    reasons = dict(zip(refused["sentence_id"], refused["reason"]))
    assert reasons["b"] == "dropped, occupation coupling (inseparable: feni)"
    assert reasons["d"].startswith("the sentence names no form of 'Bamon'")


def test_fleiss_kappa_equals_statsmodels_and_tuples_keep_two_of_three():
    rng = np.random.default_rng(1)
    truth = rng.random(40) < 0.8
    labels = np.where(rng.random((40, 3)) < 0.85, truth[:, None], ~truth[:, None])
    long = pd.DataFrame([{"item_id": f"t{i}", "annotator_id": f"a{j}", "label": "yes" if labels[i, j] else "no"}
                         for i in range(40) for j in range(3)])
    table, _ = aggregate_raters(labels.astype(int))
    expected = fleiss_kappa(table, method="fleiss")
    assert our_fleiss(long, n_boot=10).value == pytest.approx(expected)
    assert landis_koch(0.5) == "moderate" and landis_koch(0.41) == "moderate"
    kept = keep_tuples(long, pd.DataFrame({"item_id": [f"t{i}" for i in range(40)]}), min_yes=2)
    assert list(kept["keep"]) == list(labels.sum(axis=1) >= 2)


def test_reviewed_translations_import_and_flags(tmp_path):
    machine = pd.DataFrame([{"pair_id": "c0001", "language": "kok", "group_stereo": "Bamon", "group_anti": "Shudras",
                             "sent_stereo": "बामण व्हड घरांनी रावतात.", "sent_anti": "सुदीर ल्हान घरांनी रावतात.",
                             "translation_status": "machine"}])
    flagged = flag_translations(machine, [BAMON, SHUDRA], language="kok")
    assert not flagged["minimal_ok"].iloc[0] and "व्हड" in flagged["minimal_issue"].iloc[0]
    review = tmp_path / "reviewed.csv"
    review.write_text("pair_id,language,sent_stereo,sent_anti,reviewer,status,error_categories\n"
                      "c0001,kok,बामण व्हड घरांनी रावतात.,सुदीर व्हड घरांनी रावतात.,r1,corrected,"
                      "literal_translation;gender_agreement\n", encoding="utf-8")
    merged, usage = merge_reviewed(flagged, import_reviewed(review, ["c0001"]), [BAMON, SHUDRA])
    assert list(usage["used"]) == [True]
    assert merged["translation_status"].iloc[0] == "reviewed"
    assert merged["sent_anti"].iloc[0] == "सुदीर व्हड घरांनी रावतात."
    bad = tmp_path / "bad.csv"
    bad.write_text("pair_id,language,sent_stereo,sent_anti,reviewer,status,error_categories\n"
                   "c0001,kok,a,b,r1,corrected,typo\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2, column error_categories: 'typo'"):
        import_reviewed(bad)


class DropsVowelSigns:
    """A tokeniser that loses Devanagari vowel signs, as IndicBERT v1 does (AmchiBias section 5.5)."""

    unk_token_id = None

    def __call__(self, text, add_special_tokens=False):
        kept = "".join(ch for ch in text if not ("\u093e" <= ch <= "\u094c"))
        return {"input_ids": [ord(ch) for ch in kept if not ch.isspace()]}

    def decode(self, ids, **kwargs):
        return "".join(chr(i) for i in ids)


class Lossless(DropsVowelSigns):
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text if not ch.isspace()]}


def test_fragmentation_flags_a_tokenizer_that_drops_characters():
    terms = ["नुस्तेकार", "भाटकार"]
    lossy = fragmentation(DropsVowelSigns(), terms)
    assert lossy["lossy"] and lossy["lossy_terms"] == 2
    # vowel signs go, the virama stays: न स ् त क र (6) and भ ट क र (4)
    assert lossy["mean_tokens_per_term"] == pytest.approx((6 + 4) / 2)
    fine = fragmentation(Lossless(), terms)
    assert not fine["lossy"] and fine["mean_tokens_per_term"] == pytest.approx((9 + 6) / 2)


def test_sentence_review_is_imported_through_the_annotation_layer(tmp_path):
    from stereolens.studies.pairs.review import apply_review, export_review

    sents = pd.DataFrame({"sentence_id": ["a", "b", "c", "d"], "group": "Bamon", "attribute": "rich",
                          "sentence": ["Bamons own land.", "Bamons are rich.", "Bamons live in houses.", "Bamons eat."],
                          "review_status": "unreviewed", "review_reason": ""})
    files = export_review(sents, tmp_path / "tasks")
    assert files["csv"].exists() and files["label_studio"].exists()
    path = tmp_path / "review.csv"
    path.write_text("item_id,annotator_id,label,rewrite,reason\n"
                    "a,r1,keep,,\n"
                    "b,r1,remove,,restates the attribute\n"
                    "c,r1,rewrite,Bamons live in large ancestral houses.,too vague\n", encoding="utf-8")
    kept, removed = apply_review(sents, path)
    assert list(kept["sentence_id"]) == ["a", "c", "d"] and list(removed["sentence_id"]) == ["b"]
    statuses = dict(zip(kept["sentence_id"], kept["review_status"]))
    assert statuses == {"a": "reviewed:keep", "c": "reviewed:rewrite", "d": "unreviewed"}
    assert kept.set_index("sentence_id").loc["c", "sentence"] == "Bamons live in large ancestral houses."
    path.write_text("item_id,annotator_id,label,rewrite,reason\nc,r1,rewrite,,\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2, column rewrite"):
        apply_review(sents, path)
    path.write_text("item_id,annotator_id,label\nc,r1,maybe\n", encoding="utf-8")
    with pytest.raises(DataError):
        apply_review(sents, path)
