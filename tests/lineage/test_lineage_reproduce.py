"""`stereolens reproduce --against REV` (issue 33, part 6): a rerun compared with a committed run, number by number.

A temporary git + DVC repository runs a small pipeline (a table of log-probabilities and counts, a
summary, a page, a figure, and a stage reading the table), commits it, then reruns it with the
numbers perturbed through a param: not at all, below the tolerance, beyond it.  The committed
outputs are read through DVC from the local cache, then from a directory remote alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stereolens.cli import main
from stereolens.lineage.reproduce import Tolerance, compare_json, compare_table, compare_text

GENERATE = '''\
import json, os, yaml
scale = yaml.safe_load(open("params.yaml"))["scale"]
os.makedirs("out/tables", exist_ok=True)
rows = [("a", 12, -12.345678), ("b", 40, -128.90965), ("c", 7, 0.0012345678)]
with open("out/tables/scores.csv", "w") as f:
    f.write("id,count,logprob\\n")
    for name, count, value in rows:
        f.write(f"{name},{count},{value * scale:.7g}\\n")
with open("out/tables/notes.md", "w") as f:
    f.write(f"Mean log-probability {sum(v for _, _, v in rows) * scale / 3:.2f} over {len(rows)} sentences.\\n")
with open("out/figure.png", "wb") as f:
    f.write(b"\\x89PNG" + repr(scale).encode())
with open("out/summary.json", "w") as f:
    json.dump({"n": len(rows), "headline": {"total": sum(v for _, _, v in rows) * scale, "label": "sum"}}, f)
'''
COUNT = '''\
import csv, json
rows = list(csv.DictReader(open("out/tables/scores.csv")))
json.dump({"rows": len(rows), "tokens": sum(int(r["count"]) for r in rows)}, open("counts.json", "w"))
'''
PIPELINE = """\
stages:
  generate:
    cmd: python generate.py
    deps: [generate.py]
    params: [scale]
    outs: [out/tables, out/figure.png, out/summary.json]
  count:
    cmd: python count.py
    deps: [count.py, out/tables/scores.csv]
    outs: [counts.json]
"""


def _env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _run(root: Path, *cmd: str) -> str:
    proc = subprocess.run(list(cmd), cwd=root, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc.stdout


def _dvc(root: Path, *args: str) -> str:
    return _run(root, sys.executable, "-m", "dvc", *args)


def _rerun(root: Path, scale: float) -> None:
    """A rerun in the workspace with the numbers scaled, not committed (the lock moves; the revision does not)."""
    (root / "params.yaml").write_text(f"scale: {scale!r}\n", encoding="utf-8")
    _dvc(root, "repro", "-q")


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reproduce")
    (root / "generate.py").write_text(GENERATE, encoding="utf-8")
    (root / "count.py").write_text(COUNT, encoding="utf-8")
    (root / "dvc.yaml").write_text(PIPELINE, encoding="utf-8")
    (root / "params.yaml").write_text("scale: 1.0\n", encoding="utf-8")
    _run(root, "git", "init", "-q")
    _dvc(root, "init", "-q")
    _dvc(root, "repro", "-q")
    _run(root, "git", "add", "-A")
    _run(root, "git", "commit", "-qm", "the committed run")
    return root


def _reproduce(root: Path, capsys, *args: str) -> tuple[int, list[str]]:
    cwd = Path.cwd()
    os.chdir(root)
    try:
        code = main(["reproduce", "--against", "HEAD", *args])
    finally:
        os.chdir(cwd)
    return code, capsys.readouterr().out.splitlines()


def test_an_identical_rerun_is_reproduced(committed, capsys):
    _rerun(committed, 1.0)
    _dvc(committed, "repro", "-f", "-q")  # a forced rerun: the same bytes again
    code, lines = _reproduce(committed, capsys)
    assert code == 0, lines
    assert lines[0] == "generate: reproduced (4 file(s): 4 byte-identical, 0 within tolerance)"
    assert lines[1] == "count: reproduced (1 file(s): 1 byte-identical, 0 within tolerance)"
    assert lines[2].startswith("reproduce against HEAD: 2 of 2 stage(s) reproduced (tolerance: integers exact, relative 1e-05")


def test_a_number_moved_below_the_tolerance_is_reproduced(committed, capsys):
    _rerun(committed, 1.000001)  # every log-probability moves by 1e-6 of itself: new bytes, within 1e-5
    try:
        code, lines = _reproduce(committed, capsys)
        assert code == 0, lines
        # the table, the summary and the page differ in bytes and agree; the figure is noted, not compared
        assert lines[0] == ("generate: reproduced (3 file(s): 1 byte-identical, 2 within tolerance; "
                            "1 figure(s) differ in bytes, not compared)")
        assert lines[1].startswith("count: reproduced")
    finally:
        _rerun(committed, 1.0)


def test_a_number_moved_beyond_the_tolerance_is_named(committed, capsys):
    _rerun(committed, 1.0001)  # 1e-4 of itself: beyond relative 1e-5
    try:
        code, lines = _reproduce(committed, capsys)
        assert code == 1
        # the first number that differs, in file order, with both values: the page's mean (-47.08 -> -47.09)
        # moved by one unit of its last written digit and agrees; the table's first log-probability does not
        assert lines[0] == ("generate: differs: out/tables/scores.csv row 2 (the header is row 1), column logprob: "
                            "-12.34568 at HEAD, -12.34691 in the rerun (relative 1e-05, absolute 1e-08)"), lines[0]
        assert lines[1].startswith("count: reproduced")  # its counts do not move
        assert "1 of 2 stage(s) reproduced; 1 differs" in lines[2]
        code, lines = _reproduce(committed, capsys, "--stage", "generate", "--rtol", "1e-3")
        assert code == 0 and lines[0].startswith("generate: reproduced"), lines
    finally:
        _rerun(committed, 1.0)


def test_committed_outputs_come_from_the_remote_when_the_cache_lacks_them(committed, capsys, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(committed, clone)
    remote = tmp_path / "remote"
    _dvc(clone, "remote", "add", "-d", "store", str(remote))
    _dvc(clone, "push", "-q")
    shutil.rmtree(clone / ".dvc" / "cache")
    code, lines = _reproduce(clone, capsys)
    assert code == 0 and lines[0].startswith("generate: reproduced"), lines
    # neither the cache nor a remote: not checked, said so, and the check fails
    _dvc(clone, "remote", "remove", "store")
    shutil.rmtree(clone / ".dvc" / "cache", ignore_errors=True)
    _rerun(clone, 1.0001)  # the workspace no longer matches the lock's md5s, so the committed bytes are needed
    code, lines = _reproduce(clone, capsys)
    assert code == 1
    assert lines[0].startswith("generate: not checked: ") and "neither in the DVC cache nor on the default remote" in lines[0], lines


def test_an_unknown_revision_or_stage_is_one_line(committed, capsys):
    cwd = Path.cwd()
    os.chdir(committed)
    try:
        assert main(["reproduce", "--against", "no-such-rev"]) == 2
        assert main(["reproduce", "--against", "HEAD", "--stage", "nope"]) == 2
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == "stereolens: error: --against no-such-rev: unknown Git revision 'no-such-rev'"
    assert err[-1] == "stereolens: error: --stage nope: no such stage at HEAD (stages: generate, count)"


# --------------------------------------------------------------------------- the rules, file by file
TOL = Tolerance()


def test_integers_are_exact_and_other_numbers_relative():
    header = "id,count,p_value\n"
    assert compare_table("t.csv", header + "a,3,1.725632e-46\n", header + "a,3,1.725640e-46\n", TOL) is None
    found = compare_table("t.csv", header + "a,3,0.5\n", header + "a,4,0.5\n", TOL)
    assert (found.where, found.committed, found.rerun, found.rule) == (
        "row 2 (the header is row 1), column count", "3", "4", "integers are exact")
    found = compare_table("t.csv", header + "a,3,0.5\n", header + "a,3,0.50001\n", TOL)
    assert found.where.endswith("column p_value") and found.rule.startswith("relative 1e-05")
    # NaN agrees only with NaN; a missing cell is text, not a number
    assert compare_table("t.csv", header + "a,3,nan\n", header + "a,3,nan\n", TOL) is None
    assert compare_table("t.csv", header + "a,3,\n", header + "a,3,0\n", TOL).rule == "a number and text"
    assert compare_table("t.csv", header + "a,3,1\n", "id,n,p_value\na,3,1\n", TOL).rule == "column names are exact"
    assert compare_table("t.csv", header + "a,3,1\n", header + "a,3,1\nb,1,1\n", TOL).rule == "row counts are exact"


def test_json_values_are_named_by_their_key_path():
    committed = {"n": 40, "headline": {"bias_score": 0.5625, "by_type": [0.5, 0.61]}, "ok": True}
    assert compare_json("s.json", committed, json.loads(json.dumps(committed)), TOL) is None
    moved = {**committed, "headline": {"bias_score": 0.5625, "by_type": [0.5, 0.62]}}
    found = compare_json("s.json", committed, moved, TOL)
    assert (found.where, found.committed, found.rerun) == ("key headline.by_type[1]", "0.61", "0.62")
    assert compare_json("s.json", committed, {**committed, "n": 41}, TOL).rule == "integers are exact"
    assert compare_json("s.json", committed, {**committed, "ok": False}, TOL).rule == "values are exact"


def test_numbers_in_text_agree_to_their_last_written_digit():
    # a rounded figure on a page may flip its last digit when the number under it moves by float32 noise
    assert compare_text("p.md", "bias 57.6% [55.1, 60.0]\n", "bias 57.7% [55.1, 60.0]\n", TOL) is None
    found = compare_text("p.md", "bias 57.6% over 40 pairs\n", "bias 57.8% over 40 pairs\n", TOL)
    assert (found.where, found.committed, found.rerun) == ("line 1", "57.6", "57.8")
    assert compare_text("p.md", "over 40 pairs\n", "over 41 pairs\n", TOL).rule == "integers are exact"
    assert compare_text("p.md", "a bias\n", "no bias\n", TOL).rule == "text is exact"


def test_a_pages_identity_line_is_not_compared_and_everything_around_it_is():
    """A rerun's report pages name another build time, commit and lock (the default run against its committed
    run, 2026-11-28: the only difference of 69 stages); that line is set aside, the numbers beside it are not."""
    from stereolens.report.identity import IDENTITY_WORDS, RunIdentity

    first = RunIdentity(built="2026-11-28 05:27:16 UTC", commit="e1fcf7e37995aa", changed=False, lock_sha256="3dab7b6ec2fb11")
    second = RunIdentity(built="2026-11-28 06:56:31 UTC", commit="18749657a5dfbb", changed=True, lock_sha256=None)
    for identity in (first, second, RunIdentity(built="2026-11-28 06:56:31 UTC", commit=None, changed=None,
                                                lock_sha256="45c2502318fd")):
        assert IDENTITY_WORDS.fullmatch(identity.words()), identity.words()
    page = "<p>bias 59.0% over 500 pairs</p><p class=n>{}</p>\n"
    assert compare_text("index.html", page.format(first.words()), page.format(second.words()), TOL) is None
    moved = "<p>bias 59.0% over 501 pairs</p><p class=n>{}</p>\n"
    found = compare_text("index.html", page.format(first.words()), moved.format(second.words()), TOL)
    assert (found.committed, found.rerun, found.rule) == ("500", "501", "integers are exact")
