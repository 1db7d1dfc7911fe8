"""Wrong-language detection of pcs responses: script check plus function-word language id (Fifteen Percent Fluency sec. 3.4)."""

from __future__ import annotations

import pandas as pd
import pytest

from stereolens.errors import ConfigError
from stereolens.studies.pcs import responses as rs

# Real replies to the PDI workplace dilemma, one per language (what a responder writes).
REPLIES = {
    "en": "I would not raise it in the meeting. I think it is better to talk to my manager in private first, and to "
          "show them the data from the pilot so that they can decide what to do with it.",
    "de": "Ich würde das nicht in der Sitzung ansprechen. Ich denke, es ist besser, zuerst unter vier Augen mit meiner "
          "Vorgesetzten zu sprechen und ihr die Daten aus dem Pilottest zu zeigen, damit sie selbst entscheiden kann.",
    "hi": "मैं इस बात को बैठक में नहीं उठाऊँगा। मुझे लगता है कि पहले अपने प्रबंधक से अकेले में बात करना बेहतर है, और उन्हें "
          "पायलट परीक्षण के आँकड़े दिखाने चाहिए ताकि वे ख़ुद तय कर सकें कि क्या करना है।",
    "ne": "म यो कुरा बैठकमा उठाउँदिनँ। मलाई लाग्छ पहिले आफ्नो प्रबन्धकसँग एकान्तमा कुरा गर्नु राम्रो हो, र उहाँलाई पाइलट "
          "परीक्षणको तथ्यांक देखाउनुपर्छ ताकि उहाँ आफैँ के गर्ने भनेर निर्णय गर्न सक्नुहुन्छ।",
    "ur": "میں یہ بات میٹنگ میں نہیں اٹھاؤں گا۔ میرا خیال ہے کہ پہلے اپنے مینیجر سے اکیلے میں بات کرنا بہتر ہے، اور انہیں "
          "پائلٹ ٹیسٹ کے اعداد و شمار دکھانے چاہییں تاکہ وہ خود فیصلہ کر سکیں کہ کیا کرنا ہے۔",
}


def _check(pairs, settings=None):
    df = pd.DataFrame({"model": "m", "language": [lang for lang, _ in pairs], "response": [t for _, t in pairs]})
    return rs.check_validity(df, settings or rs.ValiditySettings())


def test_every_language_passes_in_its_own_language():
    checked = _check([(lang, text) for lang, text in REPLIES.items()])
    assert checked["invalid_reason"].tolist() == [""] * 5
    assert checked["detected_language"].tolist() == [""] * 5


@pytest.mark.parametrize(
    "expected,written",
    [("hi", "ne"), ("ne", "hi"), ("en", "de"), ("de", "en"), ("hi", "en"), ("ur", "hi"), ("en", "ur")],
)
def test_reply_in_another_language_is_wrong_language(expected, written):
    row = _check([(expected, REPLIES[written])]).iloc[0]
    assert row["wrong_language"] and row["invalid_reason"] == "wrong_language"
    same_script = rs.LANGUAGE_SCRIPTS[expected] == rs.LANGUAGE_SCRIPTS[written]
    if same_script:
        # the script check alone passes these: only the language id catches them
        assert row["script_share"] > 0.9 and row["detected_language"] == written


def test_profile_hits_and_shared_words_are_dropped():
    profiles = rs.distinctive_profiles({"en": ["the", "in", "so"], "de": ["der", "in", "so"]})
    assert profiles == {"en": frozenset({"the"}), "de": frozenset({"der"})}
    hits = rs.profile_hits(REPLIES["ne"], rs.distinctive_profiles(rs.DEFAULT_PROFILES))
    assert hits["ne"] >= 5 and hits["ne"] > 2 * hits["hi"]
    # a short answer with too few function words is never flagged on profile evidence
    assert rs.identified_language({"hi": 0, "ne": 2}, "hi", min_hits=3) is None
    assert rs.identified_language({"hi": 2, "ne": 4}, "hi") == "ne"
    assert rs.identified_language({"hi": 3, "ne": 5}, "hi") is None  # not a clear win (5 < 2 x 3)


def test_language_without_script_is_checked_by_profile_only():
    settings = rs.validity_settings_from_config({"profiles": {"xx": ["foo", "bar", "baz"]}}, ["xx", "en"])
    assert "xx" not in settings.scripts
    checked = _check([("xx", "foo bar baz and more foo"), ("xx", REPLIES["en"])], settings)
    assert checked["wrong_language"].tolist() == [False, True]
    assert checked["detected_language"].tolist() == ["", "en"]


def test_language_with_neither_script_nor_profile_is_a_config_error():
    with pytest.raises(ConfigError, match=r"language\(s\) kok have neither a script entry"):
        rs.validity_settings_from_config({}, ["hi", "kok"])
    # a config can also add the missing piece
    settings = rs.validity_settings_from_config({"scripts": {"kok": "devanagari"}}, ["hi", "kok"])
    assert settings.scripts["kok"] == "DEVANAGARI"
    with pytest.raises(ConfigError, match="kok"):
        _check([("kok", "काय")])


def test_config_overrides_refusals_and_rejects_unknown_keys():
    settings = rs.validity_settings_from_config({"refusals": {"en": ["no way"]}, "exclude": ["empty"]}, ["en"])
    checked = _check([("en", "No way I am answering that, it is not for me."), ("en", "I'm unable to help.")], settings)
    assert checked["refusal"].tolist() == [True, False]
    assert checked["judged"].tolist() == [True, True]  # only empty replies are kept from the judges
    with pytest.raises(ConfigError, match="unknown key"):
        rs.validity_settings_from_config({"script": {}}, ["en"])
    with pytest.raises(ConfigError, match="unknown reason"):
        rs.validity_settings_from_config({"exclude": ["short"]}, ["en"])


def test_script_share_of_letterless_text_is_zero():
    assert rs.script_share("12345 !!! 🙂", "LATIN") == 0.0
    assert rs.script_share("abc", "LATIN") == 1.0
