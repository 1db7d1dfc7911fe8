"""Control pairing (issue 31 item 6): a pair's control is keyed on its pair id, so a translation gets
its English counterpart's control and a pair left out of the evaluation moves no other pair's control."""

from __future__ import annotations

import shutil

import pandas as pd

from stereolens.io import write_csv
from stereolens.studies.pairs.minimal_pairs import assign_controls


def test_controls_are_keyed_on_the_pair_id_in_every_language():
    pairs = pd.DataFrame({"pair_id": ["p1", "p2", "p3", "p1"], "language": ["en", "en", "en", "kok"]})
    controls = pd.DataFrame({"control_id": ["c1", "c2", "c1"], "language": ["en", "en", "kok"],
                             "sentence": ["A", "B", "क"]})
    out = assign_controls(pairs, controls)
    # pair ids in order of first appearance, control ids in file order: p1 c1, p2 c2, p3 c1 (3 mod 2)
    assert list(out["control_id"]) == ["c1", "c2", "c1", "c1"]
    assert list(out["sent_control"]) == ["A", "B", "A", "क"]
    # a translation of p2: its control is c2, which has no Konkani sentence, so it has none
    # (not the next Konkani control, which would pair it with another sentence than its English row's)
    out = assign_controls(pd.concat([pairs, pd.DataFrame({"pair_id": ["p2"], "language": ["kok"]})]), controls)
    assert out["pair_id"].tolist()[-1] == "p2" and out[["control_id", "sent_control"]].iloc[-1].isna().all()


def _constructed(n: int, dropped: set[str]) -> pd.DataFrame:
    """``n`` English pairs and their Konkani translations, the translations of ``dropped`` not minimal."""
    rows = []
    for language in ("en", "kok"):
        for k in range(1, n + 1):
            pid = f"c{k:04d}"
            rows.append({"pair_id": pid, "language": language, "dimension": "caste", "group_stereo": "Bamon",
                         "group_anti": "Shudras", "group_class": "hyperlocal", "sent_stereo": f"s {pid} {language}",
                         "sent_anti": f"a {pid} {language}", "minimal_ok": not (language == "kok" and pid in dropped)})
    return pd.DataFrame(rows)


def _controls(tmp_path, monkeypatch, repo_root, constructed: pd.DataFrame) -> pd.DataFrame:
    """The constructed set as the evaluation stage builds it: pair_id, language, control_id, sent_control."""
    from stereolens.studies.pairs.evaluation import evaluation_sets

    monkeypatch.chdir(tmp_path)
    if not (tmp_path / "data" / "seed" / "pairs").exists():
        shutil.copytree(repo_root / "data" / "seed" / "pairs", tmp_path / "data" / "seed" / "pairs")
    write_csv(tmp_path / "data" / "processed" / "pairs" / "constructed.csv", constructed)
    sets = evaluation_sets({"crows": False}, "tiny")
    return sets.loc[sets["set"] == "constructed", ["pair_id", "language", "control_id", "sent_control"]]


def test_a_dropped_pair_leaves_its_neighbours_controls_unchanged(tmp_path, monkeypatch, repo_root):
    n = 14   # more pairs than the 10 controls, so the cycle wraps
    full = _controls(tmp_path, monkeypatch, repo_root, _constructed(n, set()))
    dropped = _controls(tmp_path, monkeypatch, repo_root, _constructed(n, {"c0003", "c0007"}))
    kok = dropped[dropped["language"] == "kok"].set_index("pair_id")
    assert sorted(set(full["pair_id"]) - set(kok.index)) == ["c0003", "c0007"]
    # every Konkani pair left keeps the control it had with nothing dropped ...
    before = full[full["language"] == "kok"].set_index("pair_id").loc[kok.index]
    assert kok["control_id"].tolist() == before["control_id"].tolist()
    # ... which is its English counterpart's control, in Konkani
    en = dropped[dropped["language"] == "en"].set_index("pair_id").loc[kok.index]
    assert kok["control_id"].tolist() == en["control_id"].tolist()
    seed = pd.read_csv(repo_root / "data/seed/pairs/controls.csv").set_index(["control_id", "language"])
    assert kok["sent_control"].tolist() == [seed.loc[(c, "kok"), "sentence"] for c in kok["control_id"]]
    # pair k (1-based) gets control k mod 10 in file order, wrapping after ctl10
    assert en.loc["c0004", "control_id"] == "ctl04" and en.loc["c0012", "control_id"] == "ctl02"
