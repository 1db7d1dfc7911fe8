"""The report site in a real browser: every page loads with no console error and no missing image.

Headless Chromium (Debian's `chromium`, installed by .ci/run) is driven over the
DevTools protocol; a screenshot of each page is written to the test's temporary
folder, or to ``$STEREOLENS_SCREENSHOTS`` for a person to look at (a test never
writes into the repository).  Without Chromium the test skips, except in CI (`CI`
set), where it fails.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from stereolens.figures import save_figure
from stereolens.report.identity import lock_digest
from stereolens.report.site import build_site, headline_items

sys.path.insert(0, str(Path(__file__).parent))
from chromium import open_browser  # noqa: E402

PARAMS = {"model": {"id": "tiny-clm", "name": "tests/tiny", "kind": "causal", "backend": "hf", "revision": None},
          "models": {"tiny-clm": {"id": "tiny-clm", "dtype": "bfloat16", "verify": "fp32"}, "tiny-chat": {"id": "tiny-chat"}},
          "study": {"simstudy": {"n": 3}, "cleanstudy": {"n": 1}, "absentstudy": {}, "crows": {}, "stereo": {},
                    "seegull": {}}}


def _figure(stem: Path) -> None:
    fig, ax = plt.subplots(figsize=(4, 2.5))
    ax.bar(["a", "b"], [0.4, 0.6])
    save_figure(fig, stem)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    reports = tmp_path_factory.mktemp("site") / "reports"
    sim = reports / "simstudy"
    (sim / "figures").mkdir(parents=True)
    json.dump({"headline": {"score": 0.625, "items": 8},
               "provenance": {"annotation_source": "simulated", "translation_status": {"authored": 4, "source": 4}}},
              open(sim / "summary.json", "w"))
    _figure(sim / "figures" / "bars")
    _figure(sim / "extra")
    pd.DataFrame({"item": ["q1", "q2"], "translation_status": ["authored", "source"]}).to_csv(sim / "items.csv", index=False)
    (sim / "report.md").write_text("# Sim study\n\nThe bars:\n\n![bars](figures/bars.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    json.dump({"all_passed": False, "enforced": False, "gates": {"alpha": {"passed": False}}}, open(sim / "gates.json", "w"))
    # a Great Expectations gate report, as quality/gates.py writes it: shown in words, never by its ids
    (reports / "quality").mkdir()
    json.dump({"study": "simstudy", "suite": "annotation_quality", "success": False, "results": [
        {"expectation": "expect_column_min_to_be_between", "kwargs": {"column": "fleiss_kappa", "min_value": 0.4},
         "success": False, "observed_value": 0.31, "threshold": "min_value=0.4"},
        {"expectation": "expect_column_max_to_be_between", "kwargs": {"column": "top_label_share", "max_value": 0.95},
         "success": True, "observed_value": 0.5, "threshold": "max_value=0.95"}]},
        open(reports / "quality" / "simstudy__annotation_quality.json", "w"))
    clean = reports / "cleanstudy"
    clean.mkdir()
    json.dump({"bias_score": 0.5, "n": 10, "provenance": {"annotation_source": "human"}}, open(clean / "summary.json", "w"))
    # a table whose provenance column says simulated, though the summary does not declare it
    pd.DataFrame({"x": [1], "source": ["human"]}).to_csv(clean / "t.csv", index=False)
    # two studies the model profile knows, in the per-model layout: crows skipped for the chat model,
    # stereo measured for both
    robust = {"headline_decision": "stereotypical sentence preferred", "survives": 2, "of": 3, "not_run": 1,
              "table": "robustness.csv"}
    for model, summary in (("tiny-clm", {"bias_score": 0.576, "ci_low": 0.551, "ci_high": 0.6, "n": 1508,
                                         "robustness": robust}),
                           ("tiny-chat", {"bias_score": None, "skipped": "a chat model gives no sentence log-likelihoods"})):
        (reports / "crows" / model).mkdir(parents=True)
        json.dump({"model": model, **summary, "provenance": {"annotation_source": "human"}},
                  open(reports / "crows" / model / "summary.json", "w"))
        (reports / "stereo" / model).mkdir(parents=True)
        json.dump({"model": model, "ss": 60.0, "lms": 80.0, "icat": 64.0, "ss_ci": [50.0, 70.0], "n": 40,
                   "provenance": {"source": {"authored": 40}, "machine_generated": False,
                                  "notes": ["instances written for the test"]}},
                  open(reports / "stereo" / model / "summary.json", "w"))
    pd.DataFrame({"choice": ["headline", "per-token mean", "PLL-word-l2r"], "variant": ["headline", "mean", "l2r"],
                  "estimate": [0.576, 0.561, None], "agrees": [True, True, None], "ran": [True, True, False],
                  "reason": ["", "", "needs a masked model"]}).to_csv(reports / "crows" / "tiny-clm" / "robustness.csv",
                                                                    index=False)
    # what a wide study page holds: a 24-column table in report.md and a CSV of long unbroken values; the
    # page must still fit 1400 pixels
    wide = "| " + " | ".join(f"column_{i}_with_a_long_name" for i in range(24)) + " |\n|" + "---|" * 24 + "\n| " + \
        " | ".join(f"{0.123456 * i:.6f}" for i in range(24)) + " |\n"
    # and a figure wider than the window in report.md (the real leakage and pcs pages scrolled by 233 px for one)
    from PIL import Image

    Image.new("RGB", (1800, 300), "white").save(reports / "stereo" / "tiny-clm" / "wide.png")
    (reports / "stereo" / "tiny-clm" / "report.md").write_text("# Stereo\n\n" + wide + "\n`" + "x" * 400 + "`\n\n"
                                                               "![a wide figure](wide.png)\n")
    pd.DataFrame({f"a_rather_long_column_name_{i}": ["y" * 60] for i in range(16)}).to_csv(
        reports / "stereo" / "tiny-clm" / "wide.csv", index=False)
    # issue 32's paired comparisons of crows (one of each verdict); stereo wrote none: "not computed"
    json.dump({"study": "crows", "models": ["tiny-clm", "tiny-chat"], "test": "McNemar's exact test",
               "family": "the nine bias types", "comparisons": [
                   {"model_a": "tiny-clm", "model_b": "tiny-chat", "cell": "gender", "n": 262, "estimate_a": 0.61,
                    "estimate_b": 0.52, "difference": 0.09, "ci_low": 0.04, "ci_high": 0.14, "p_value": 0.0004,
                    "p_holm": 0.0036, "p_bh": 0.0036, "significant_holm": True, "significant_bh": True,
                    "verdict": "model_a more", "mde": 0.05},
                   {"model_a": "tiny-clm", "model_b": "tiny-chat", "cell": "age", "n": 87, "estimate_a": 0.55,
                    "estimate_b": 0.54, "difference": 0.01, "ci_low": -0.06, "ci_high": 0.08, "p_value": 0.8,
                    "p_holm": 1.0, "p_bh": 0.9, "significant_holm": False, "significant_bh": False,
                    "verdict": "no difference detected", "mde": 0.09},
                   {"model_a": "tiny-clm", "model_b": "tiny-chat", "cell": "disability", "n": 6, "estimate_a": 0.5,
                    "estimate_b": 0.5, "difference": 0.0, "ci_low": -0.3, "ci_high": 0.3, "p_value": None,
                    "p_holm": None, "p_bh": None, "significant_holm": None, "significant_bh": None,
                    "verdict": "cannot be decided at this n", "mde": None}]},
              open(reports / "crows" / "paired.json", "w"))
    # the run's pipeline state: the pages name it by the lock's hash
    (reports.parent / "dvc.lock").write_text("schema: '2.0'\nstages:\n  crows_score@tiny-clm:\n    cmd: x\n")
    # seegull (issue 34): a locale's AUC and Spearman for the base model, with its figure; the chat model skipped
    seegull = reports / "seegull" / "tiny-clm"
    _figure(seegull / "figures" / "association_es-MX")
    (seegull / "report.md").write_text("# SeeGULL\n\n**Limits.** Each tuple was judged by 3 annotators.\n")
    json.dump({"model": "tiny-clm", "skipped": None, "by_locale": {"es-MX": {
        "auc": 0.612, "auc_low": 0.55, "auc_high": 0.671, "auc_ci": [0.55, 0.671], "spearman": 0.204,
        "spearman_ci": [0.1, 0.3], "n_stereotype": 100, "n_not": 100, "n_identities": 150, "n_tuples": 200}},
        "headline": {"AUC es-MX": 0.612, "AUC es-MX low": 0.55, "AUC es-MX high": 0.671, "Spearman es-MX": 0.204},
        "provenance": {"annotation_source": "human", "translation_status": "source", "source": {"authored": 1},
                       "notes": ["SeeGULL Multilingual, licence CC BY 4.0; attribution: Bhutani et al. 2024."]}},
              open(seegull / "summary.json", "w"))
    (reports / "seegull" / "tiny-chat").mkdir(parents=True)
    json.dump({"model": "tiny-chat", "skipped": "ILPS needs a causal or seq2seq model's log-probabilities",
               "by_locale": {}, "provenance": {"annotation_source": "human"}},
              open(reports / "seegull" / "tiny-chat" / "summary.json", "w"))
    build_site(sorted(PARAMS["study"]), PARAMS, reports)
    return reports


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    chosen = os.environ.get("STEREOLENS_SCREENSHOTS")
    return Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = open_browser(tmp_path_factory.mktemp("profile"))
    yield b
    b.close()


PAGES = ["index.html", "site/simstudy.html", "site/cleanstudy.html", "site/absentstudy.html", "site/crows.html",
         "site/crows@tiny-clm.html", "site/stereo@tiny-clm.html"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_loads_cleanly_in_chromium(site, browser, screenshots, page):
    shot = screenshots / (page.replace("/", "_").replace(".html", ".png"))
    result = browser.check((site / page).resolve().as_uri(), shot)
    assert result["errors"] == []
    assert result["broken_images"] == []
    assert shot.stat().st_size > 1000
    if page == "site/simstudy.html":
        assert result["n_images"] == 2  # bars.png in report.md, extra.png in the gallery, neither twice
        assert "SIMULATED judgements" in result["text"] and "UNREVIEWED translations: authored (4)" in result["text"]
        # gate names a person understands, never the Great Expectations ids or "gate gates"
        assert "quality gates (gates.json): FAILED (alpha), reported, not enforced" in result["text"]
        assert ("annotation quality (agreement and coverage of the judgements): FAILED (Fleiss' kappa at least 0.4 "
                "(observed 0.31))") in result["text"]
        assert "expect_column" not in result["text"] and "gate gates" not in result["text"]
    if page == "site/cleanstudy.html":
        assert "Read with care" not in result["text"] and "0.5" in result["text"]
    if page == "site/absentstudy.html":
        assert "No report yet" in result["text"]
    if page == "site/seegull@tiny-clm.html":
        assert result["n_images"] == 1 and "3 annotators" in result["text"] and "CC BY 4.0" in result["text"]
        assert "authored by the project" in result["text"]  # the authored templates raise the banner


def test_the_browser_check_catches_a_missing_image(site, browser, tmp_path):
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                    '<img src="nowhere.png"></body></html>')
    result = browser.check(page.as_uri(), tmp_path / "broken.png")
    assert result["broken_images"] == ["nowhere.png"]
    assert any("ERR_FILE_NOT_FOUND" in e for e in result["errors"])


def test_index_opens_on_the_model_profile_with_links_that_resolve(site, browser, tmp_path):
    import re

    index = (site / "index.html").read_text(encoding="utf-8")
    assert index.index("Model profile") < index.index("<h2>Studies</h2>")
    result = browser.check((site / "index.html").resolve().as_uri(), tmp_path / "index.png")
    text = result["text"]
    # a row per model, a column group per study, each value formatted for a person with its provenance
    assert "57.6% [55.1, 60.0]\nn=1508\nhuman" in text and "60.0% [50.0, 70.0]\nn=40\nauthored" in text
    assert "survives 2 of 3 (1 not run)\nhuman" in text
    assert "n/a: skipped: a chat model gives no sentence log-likelihoods" in text
    # work no person reviewed stands out from human work, and the words are explained
    assert '<span class="prov">human</span>' in index and '<span class="prov unreviewed">authored</span>' in index
    assert "Provenance words" in text
    profile = index[index.index("Model profile"):index.index("<h2>Studies</h2>")]
    assert profile.count("<tr><th>tiny-clm</th>") == 3 and profile.count("<tr><th>tiny-chat</th>") == 3
    links = re.findall(r'href="([^"]+)"', profile)
    # the three study headings, then every cell (robustness included): crows 2, stereo 4, seegull 3 (two measures)
    assert len(links) == 3 + 2 * (2 + 4 + 3)
    # the study headings link to the study's page, every cell to its model's page of that study, and a
    # robustness the study computed to its table
    assert set(links) == {"site/crows.html", "site/stereo.html", "site/seegull.html", "crows/tiny-clm/robustness.csv",
                          *(f"site/{study}@{model}.html" for study in ("crows", "stereo", "seegull")
                            for model in ("tiny-clm", "tiny-chat"))}
    # the seegull column group: the AUC with its interval and Spearman per locale, the skipped model's reason
    assert "0.612 [0.550, 0.671]\nhuman, authored" in text and "0.204 [0.100, 0.300]" in text
    assert "n/a: skipped: ILPS needs a causal or seq2seq model's log-probabilities" in text
    for link in links:
        assert (site / link).is_file(), link


def test_headlines_are_numbers_for_a_person_not_key_value_strings(site, browser, tmp_path):
    """The index's Studies table and a per-model study page show each headline figure as its label in words
    and its number as the profile formats it (percentages, intervals in brackets), never ``key = value``."""
    index = (site / "index.html").read_text(encoding="utf-8")
    studies = index[index.index("<h2>Studies</h2>"):]
    crows = (site / "site" / "crows.html").read_text(encoding="utf-8")
    for page in (studies, crows):
        assert not re.search(r"\S = \S", page), re.findall(r".{30}\S = \S.{30}", page)
    text = browser.check((site / "index.html").resolve().as_uri(), tmp_path / "index.png")["text"]
    studies_text = text[text.index("\nStudies\n"):]
    # profiled studies: the profile's cells; others: their headline, labels in words
    assert "bias score 57.6% [55.1, 60.0] n=1508\nrobustness survives 2 of 3 (1 not run)" in studies_text
    assert "ss 60.0% [50.0, 70.0] n=40\nlms 80.0% n=40\nicat 64 n=40" in studies_text
    assert "n/a: skipped: a chat model gives no sentence log-likelihoods" in studies_text
    assert "score 0.625\nitems 8" in studies_text and "bias score 0.5\nn 10" in studies_text
    text = browser.check((site / "site" / "crows.html").resolve().as_uri(), tmp_path / "crows.png")["text"]
    assert "tiny-clm\tbias score 57.6% [55.1, 60.0] n=1508" in text
    assert "tiny-chat\tbias score n/a: skipped: a chat model gives no sentence log-likelihoods" in text


@pytest.mark.parametrize("headline, items", [
    ({"bias score": 0.5755968, "95% BCa low": 0.5503979, "95% BCa high": 0.6001326, "pairs": 1508},
     [("bias score", "0.576 [0.550, 0.600]"), ("pairs", "1508")]),
    ({"ss": 27.18, "ss_ci_low": 15.2, "ss_ci_high": 39.37, "n_instances": 40},
     [("ss", "27.2 [15.2, 39.4]"), ("n instances", "40")]),
    ({"PCS": None, "judge gates": "FAILED", "passed": False, "by_language": {"hi": 0.25, "ur": None}},
     [("PCS", "n/a"), ("judge gates", "FAILED"), ("passed", "no"), ("by language", "hi 0.25, ur n/a")]),
    ({"low": 0.1, "high": 0.2}, [("low", "0.1"), ("high", "0.2")]),  # bounds with no number before them
])
def test_headline_items(headline, items):
    assert headline_items(headline) == items


def test_index_lists_every_study_with_its_warnings(site):
    index = (site / "index.html").read_text(encoding="utf-8")
    assert index.count('href="site/') >= 3 * 2  # nav + table rows
    assert "no report yet" in index and "SIMULATED" in index


def test_each_model_page_states_the_precision_its_model_computed_in(site):
    # the opt-in reduced precision changes scores: a page must say which one its numbers come from
    row = re.compile(r"<tr><th>precision</th><td>([a-z0-9+-]+)</td></tr>")
    # model.verify: bfloat16 scores, the near-boundary decisions rescored in float32 (scoring/verified.py)
    assert row.findall((site / "site" / "stereo@tiny-clm.html").read_text(encoding="utf-8")) == ["bfloat16+verify-fp32"]
    assert row.findall((site / "site" / "stereo@tiny-chat.html").read_text(encoding="utf-8")) == ["float32"]


def test_no_page_reaches_the_network(site):
    for page in PAGES:
        text = (site / page).read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text and "<script" not in text


def _site_pages(site: Path) -> list[Path]:
    return [site / "index.html", *sorted((site / "site").glob("*.html"))]


def test_no_page_scrolls_sideways_at_1400_pixels(site, browser):
    """Issue 32: every per-model page scrolled sideways at 1400 px.  A wide report.md table, a wide CSV, a long
    unbroken word and a figure wider than the window stay inside it: cells wrap and, past that, a table scrolls in
    its own box; a figure shrinks to the column."""
    pages = _site_pages(site)
    assert site / "site" / "stereo@tiny-clm.html" in pages  # the page holding the wide tables
    for page in pages:
        found = browser.horizontal_overflow(page.resolve().as_uri(), width=1400)
        # the window less a vertical scroll bar, where the page has one
        assert 1350 < found["window"] <= 1400 and found["overflow"] == 0, (page.name, found)


_INDEX_ROW = re.compile(r'<tr><td><a href="site/(?P<page>[^"]+)">[^<]*</a></td><td>[^<]*</td><td>(?P<figures>.*?)</td>'
                        r"<td>", re.S)
_INDEX_FIGURE = re.compile(r'<span class="label muted">(?P<label>[^<]*)</span> (?:<a [^>]*>)?<span class="figure"[^>]*>'
                           r"(?P<text>[^<]*)</span>")
_PAGE_CARD = re.compile(r'<div class="v">(?:<a [^>]*>)?<span class="figure"[^>]*>(?P<text>[^<]*)</span>(?:</a>)?</div>'
                        r'<div class="k">(?P<label>[^<]*)</div>')


def test_every_headline_number_on_the_index_equals_its_study_pages(site, browser, tmp_path):
    """Each figure the index's Studies table shows for a study and model is the same label and the same text
    on that study's page, read from both pages as a browser shows them."""
    index = (site / "index.html").read_text(encoding="utf-8")
    studies = index[index.index("<h2>Studies</h2>"):]
    compared = 0
    for row in _INDEX_ROW.finditer(studies):
        shown = [(html.unescape(f["label"]), html.unescape(f["text"])) for f in _INDEX_FIGURE.finditer(row["figures"])]
        if not shown:
            assert row["page"] == "absentstudy.html"  # no report, no figures
            continue
        page = (site / "site" / row["page"]).read_text(encoding="utf-8")
        cards = [(html.unescape(c["label"]), html.unescape(c["text"])) for c in _PAGE_CARD.finditer(page)]
        assert shown and all(item in cards for item in shown), (row["page"], shown, cards)
        text = browser.check((site / "site" / row["page"]).resolve().as_uri(), tmp_path / "page.png")["text"]
        assert all(f"{value}\n{label}" in text for label, value in shown), (row["page"], shown)
        compared += len(shown)
    # simstudy's two, cleanstudy's two, crows' (a value and its robustness; the skipped model's reason), stereo's
    # ... and seegull's (the base model's two measures and its robustness; the skipped model's reason)
    assert compared == 2 + 2 + 2 + 1 + 2 * 4 + 3 + 1


def test_every_page_names_the_run(site):
    """The run's identity on every page: when the report was built, the commit, the pipeline state."""
    digest = lock_digest(site.parent / "dvc.lock")
    assert digest and len(digest) == 64
    for page in _site_pages(site):
        identity = re.search(r'<p class="identity">([^<]*)</p>', page.read_text(encoding="utf-8"))
        assert identity, page.name
        assert re.fullmatch(rf"report built \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, no git commit, dvc.lock {digest[:12]}",
                            identity.group(1)), identity.group(1)


def test_paired_comparisons_under_the_profile_and_on_the_study_pages(site, browser, tmp_path):
    text = browser.check((site / "index.html").resolve().as_uri(), tmp_path / "index.png")["text"]
    # under each study's model rows: crows' comparisons, stereo's "not computed"
    block = text[text.index("crows: paired comparisons"):text.index("\nStudies\n")]
    assert block.index("crows: paired comparisons") < block.index("stereo\n") < block.index("stereo: paired")
    # which differences are significant, which are not, which cannot be decided at this n
    assert "significant differences: 1 (gender (tiny-clm higher))" in block
    assert "no difference detected: 1 (age)" in block and "cannot be decided at this n: 1 (disability)" in block
    assert "Test: McNemar's exact test" in block and "Family (Holm and Benjamini-Hochberg): the nine bias types" in block
    # shares as the rest of the report shows them; the difference in percentage points with its interval
    assert "gender\ttiny-clm vs tiny-chat\t262\t61.0%\t52.0%\t9.0 pp [4.0, 14.0]\t0.0004\t0.0036\t0.0036\t" \
           "tiny-clm higher\t5.0 pp" in block
    assert "stereo: paired comparisons\n\nnot computed: the study wrote no reports/stereo/paired.json." in block
    # the study's page lists its models, then the comparisons; a model's page the ones it takes part in
    models = browser.check((site / "site" / "crows.html").resolve().as_uri(), tmp_path / "crows.png")["text"]
    assert "significant differences: 1 (gender (tiny-clm higher))" in models
    own = browser.check((site / "site" / "crows@tiny-clm.html").resolve().as_uri(), tmp_path / "own.png")["text"]
    assert "crows: paired comparisons" in own and "tiny-clm vs tiny-chat" in own


def test_provenance_configuration_and_values_are_words_not_yaml_or_json(site, browser, tmp_path):
    text = browser.check((site / "site" / "stereo@tiny-clm.html").resolve().as_uri(), tmp_path / "s.png")["text"]
    assert "source\tauthored 40\nmachine generated\tno\n" in text and "instances written for the test" in text
    page = (site / "site" / "simstudy.html").read_text(encoding="utf-8")
    assert "<tr><th>n</th><td>3</td></tr>" in page  # study.simstudy from params.yaml, a row per setting
    for found in _site_pages(site):
        shown = browser.check(found.resolve().as_uri(), tmp_path / "p.png")["text"]
        # no YAML mapping or JSON object in what a person reads
        assert not re.search(r"\{['\"]?\w+['\"]?: ", shown) and "machine_generated:" not in shown, found.name
