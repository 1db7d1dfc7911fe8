"""A study rerun alone leaves the site stale, and says so (issue 33, part 1).

`dvc repro crows_report` reruns a study's report stage but not the `report` stage that builds
reports/index.html.  The index records which summary.json each page shows; the study's stage,
writing its summary through `write_study_summary`, compares, prints one line and marks the pages
stale; `stereolens profile` says the same; the next `report` build clears it.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from stereolens.cli import main
from stereolens.io import write_json
from stereolens.report.contract import rendered, stale_pages
from stereolens.report.site import build_site
from stereolens.stages.kit import write_study_summary

PARAMS = {"model": {"id": "m1"}, "models": {"m1": {"id": "m1"}, "m2": {"id": "m2"}, "m3": {"id": "m3"}},
          "study": {"crows": {}, "flat": {}}}
LINE = "site stale: {reports}/index.html was built before crows/m1 changed; `dvc repro report` rebuilds it"


def _summary(bias: float) -> dict:
    return {"model": "m1", "bias_score": bias, "ci_low": bias - 0.02, "ci_high": bias + 0.02, "n": 500,
            "headline": {"bias_score": bias, "n_pairs": 500}, "provenance": {"annotation_source": "human"}}


@pytest.fixture
def site(tmp_path) -> Path:
    reports = tmp_path / "reports"
    for model, bias in (("m1", 0.59), ("m2", 0.55)):
        write_json(reports / "crows" / model / "summary.json", _summary(bias))  # as the stages write them
    write_json(reports / "flat" / "summary.json", {"headline": {"share": 0.5}})
    build_site(sorted(PARAMS["study"]), PARAMS, reports)
    return reports


def _pages(reports: Path) -> dict[str, str]:
    return {p.relative_to(reports).as_posix(): p.read_text(encoding="utf-8")
            for p in [reports / "index.html", *sorted((reports / "site").glob("*.html"))]}


def test_the_index_records_the_summary_each_page_shows(site):
    record = rendered(site)
    assert record["studies"] == ["crows", "flat"] and record["models"] == ["m1", "m2", "m3"]
    assert set(record["summaries"]) == {"crows/m1", "crows/m2", "flat"}
    assert stale_pages(site) == []


def test_a_study_rerun_alone_says_the_site_is_stale_on_the_page_and_in_the_terminal(site, capsys):
    built = _pages(site)
    write_study_summary(site / "crows" / "m1" / "summary.json", _summary(0.62))  # crows_report@m1 alone
    line = LINE.format(reports=site)
    assert capsys.readouterr().out.splitlines() == [line]
    assert stale_pages(site) == ["crows/m1"]
    pages = _pages(site)
    banner = f'<main><p class="banner stale">{html.escape(line)}</p>'
    # the index, the model's page and the study's page of models say it; the other model's page does not
    for page in ("index.html", "site/crows@m1.html", "site/crows.html"):
        assert banner in pages[page], page
        assert pages[page].replace(banner, "<main>") == built[page]  # one line added, nothing else changed
    assert pages["site/crows@m2.html"] == built["site/crows@m2.html"] and pages["site/flat.html"] == built["site/flat.html"]

    # stereolens profile, which reads the summaries themselves, says the site is behind them
    # a params file that names no model (a missing --params is refused, issue 35)
    (site / "none.yaml").write_text("{}\n", encoding="utf-8")
    assert main(["profile", "--reports", str(site), "--params", str(site / "none.yaml")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == line

    # the summary the site shows written again: no line, and every page is the built one again
    write_study_summary(site / "crows" / "m1" / "summary.json", _summary(0.59))
    assert capsys.readouterr().out == ""
    assert _pages(site) == built


def test_a_new_model_is_stale_and_the_report_stage_clears_it(site, capsys):
    (site / "crows" / "m3").mkdir()
    write_study_summary(site / "crows" / "m3" / "summary.json", {**_summary(0.7), "model": "m3"})
    assert "before crows/m3 changed" in capsys.readouterr().out
    assert stale_pages(site) == ["crows/m3"]
    build_site(sorted(PARAMS["study"]), PARAMS, site)  # what `dvc repro report` runs
    assert stale_pages(site) == []
    assert "banner stale" not in "".join(_pages(site).values())


def test_no_built_site_no_word(tmp_path, capsys):
    # the first run of a fresh clone: the study stages run before any index exists
    (tmp_path / "reports" / "crows" / "m1").mkdir(parents=True)
    write_study_summary(tmp_path / "reports" / "crows" / "m1" / "summary.json", _summary(0.6))
    assert capsys.readouterr().out == ""
    assert not (tmp_path / "reports" / "index.html").exists()
