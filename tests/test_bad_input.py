"""Bad input, one clear line, nothing lost (issues #17 item 4 and #18).

Each case feeds one kind of bad input to a real command and asserts:

* exit status 2 and exactly one line on stderr, ``stereolens: error: ...``, that
  names the place (file and line/column, or the key) and what is wrong;
* every output an earlier good run left behind is byte-identical afterwards.

The commands run in-process through :func:`stereolens.cli.main` (the console
script's body) with the tiny local models of ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import yaml
from config_edit import with_value

from stereolens.cli import main

REPO = Path(__file__).resolve().parents[1]
GOOD_PAIRS = "id,sent_stereo,sent_anti\na,Women are bad drivers.,Men are bad drivers.\nb,The poor are lazy.,The rich are lazy.\n"


@dataclass
class Case:
    name: str
    argv: list[str]  # {tmp}, {masked}, {causal} are filled in
    expect: str  # a substring of the error line
    files: dict[str, str | bytes] = field(default_factory=dict)  # inputs to write, relative to tmp
    env: dict[str, str | None] = field(default_factory=dict)  # None unsets the variable
    # a stage runs in its repository: run in {tmp}, where ``files`` hold its params, inputs and the
    # outputs of an earlier run; then nothing under {tmp} may change
    in_tmp: bool = False


def pairs(body: str) -> dict[str, str]:
    return {"in.csv": body}


def score_pairs(model: str = "{masked}", metric: str = "pll", extra: tuple[str, ...] = ()) -> list[str]:
    return ["score", "pairs", "--model", model, "--metric", metric, "--input", "{tmp}/in.csv",
            "--output", "{tmp}/earlier/scores.csv", "--no-cache", *extra]


def pcs_scores(edit=None) -> dict[str, str]:
    rows = [dict(model="m", language="hi", scenario_id="s1", dimension="PDI", feature="deference", condition=c,
                 judge="j", sample=0, score=v) for c, v in zip("ABC", (2.0, 6.0, 4.0))]
    rows += [dict(model="m", language="ur", scenario_id="s1", dimension="PDI", feature="deference", condition=c,
                  judge="j", sample=0, score=v) for c, v in zip("ABC", (3.0, 6.0, 5.0))]
    df = pd.DataFrame(rows)
    if edit:
        df = edit(df)
    return {"scores.csv": df.to_csv(index=False)}


def pcs(edit=None) -> tuple[list[str], dict[str, str]]:
    return ["pcs", "analyze", "--scores", "{tmp}/scores.csv", "--output", "{tmp}/earlier/pcs"], pcs_scores(edit)


def judgements(body: str) -> dict[str, str]:
    return {"j.csv": body}


AGREE = ["annotation", "agreement", "--input", "{tmp}/j.csv", "--metric", "krippendorff", "--resamples", "0"]


def h_matrix(traits=("powerless", "powerful"), groups=("woman", "immigrant")) -> str:
    rows = ["Traits," + ",".join(groups)]
    for i, t in enumerate(traits):
        rows.append(t + "," + ",".join(str(10 + i + j) for j in range(len(groups))))
    return "\n".join(rows) + "\n"


def leakage(files: dict[str, str], target: str = "HI") -> tuple[list[str], dict[str, str]]:
    base = {"human/H_EN.csv": h_matrix(), "human/H_HI.csv": h_matrix(), "model.csv": h_matrix()}
    base.update(files)
    argv = ["leakage", "fit", "--human", "{tmp}/human", "--model-scores", "{tmp}/model.csv", "--target", target,
            "--output", "{tmp}/earlier/leakage", "--lexicon", str(REPO / "data/seed/leakage")]
    return argv, base


def crows_stage(model: dict) -> dict[str, str]:
    """crows-score's repository: params.yaml with ``model``, the raw pairs, and an earlier run's outputs."""
    params = {"model": model, "metric": {"name": "causal", "batch_tokens": 512, "truncate": False},
              "language": {"include": None}, "tracking": {"enabled": False}, "seed": 0,
              "study": {"crows": {"dataset": "crows_pairs", "limit": None, "bootstrap_resamples": 10}}}
    raw = pd.DataFrame({"sent_more": ["Women are bad drivers."], "sent_less": ["Men are bad drivers."],
                        "stereo_antistereo": ["stereo"], "bias_type": ["gender"]})
    return {"params.yaml": yaml.safe_dump(params), "data/raw/crows_pairs/crows_pairs_anonymized.csv": raw.to_csv(),
            f"data/processed/crows/{model['id']}/scores.csv": "id,score_stereo,score_anti\n0,-3.5,-4.0\n",
            f"data/processed/crows/{model['id']}/scoring.json": '{"skipped": null}\n'}


def pcs_collect_stage(edit) -> dict[str, str]:
    """pcs-collect's repository: params.yaml, a two-scenario bank (``edit`` breaks it) and an earlier output."""
    bank = REPO / "data/seed/pcs"
    scenarios = pd.read_csv(bank / "scenarios.csv", dtype=str, keep_default_na=False)
    scenarios = scenarios.loc[scenarios["language"].isin(["hi", "ur"])].head(4).reset_index(drop=True)
    params = {"model": {"id": "m", "name": "no-such-model", "kind": "causal"}, "language": {"include": None},
              "tracking": {"enabled": False}, "seed": 0,
              "study": {"pcs": {"bank": "bank", "languages": ["hi", "ur"], "collection": {"samples": 1}}}}
    return {"params.yaml": yaml.safe_dump(params), "bank/scenarios.csv": edit(scenarios).to_csv(index=False),
            "bank/rubrics.yaml": (bank / "rubrics.yaml").read_text(encoding="utf-8"),
            "bank/indexical_markers.yaml": (bank / "indexical_markers.yaml").read_text(encoding="utf-8"),
            "data/interim/pcs/responses.csv": "response_id,response\nr1,an earlier answer\n"}


PAIRS_SCORES = "id,dimension,score_stereo,score_anti\na,caste,-1.5,-2.0\nb,gender,-3.0,-2.5\n"
STEREO_SCORES = ("id,country,category,target,score_stereo,score_anti,score_unrelated\n"
                 "1,Mexico,gender,mujeres,-1.0,-2.0,-3.0\n2,Spain,gender,mujeres,-2.0,-1.0,-4.0\n")


def pairs_analyze(scores: str, *extra: str) -> tuple[list[str], dict[str, str]]:
    return (["pairs", "analyze", "--scores", "{tmp}/s.csv", "--output", "{tmp}/earlier/pairs", "--resamples", "20",
             *extra], {"s.csv": scores})


def stereo_evaluate(scores: str) -> tuple[list[str], dict[str, str]]:
    return (["stereo", "evaluate", "--scores", "{tmp}/s.csv", "--output", "{tmp}/earlier/stereo", "--resamples", "0"],
            {"s.csv": scores})


def pairs_evaluate_stage(params: dict, **seed: str) -> dict[str, str]:
    """pairs-evaluate's repository: the seed files it reads before the model loads (``seed`` replaces one by
    its name) and an earlier run's scores."""
    files = {f"data/seed/pairs/{name}.csv": (REPO / f"data/seed/pairs/{name}.csv").read_text(encoding="utf-8")
             for name in ("controls", "group_classes", "starter_pairs")}
    files.update({f"data/seed/pairs/{name}.csv": text for name, text in seed.items()})
    return {"params.yaml": yaml.safe_dump(params, allow_unicode=True), **files,
            "data/processed/pairs/earlier-model/scores.csv": "id,score_stereo,score_anti\nstarter:p1:en,-3.5,-4.0\n"}


def stereo_stage(params: dict, files: dict[str, str]) -> dict[str, str]:
    """A stereo stage's repository: ``params`` (the committed ones, edited), one validated stereotype per
    country, ``files`` and an earlier run's outputs."""
    validated = ("stereotype_id,country,category,target,stereotype,examples\n"
                 "MX-1,Mexico,gender,mujeres,Las mujeres manejan mal.,[]\n"
                 "ES-1,Spain,gender,mujeres,Las mujeres conducen mal.,[]\n")
    return {"params.yaml": yaml.safe_dump(params, allow_unicode=True),
            "data/interim/stereo/validation/validated.csv": validated, **files,
            "data/processed/stereo/instances.csv": "id,source\nearlier,authored\n",
            "reports/stereo/overlap/summary.json": '{"n_validated": 2}\n'}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cases() -> list[Case]:
    long = " ".join(["the doctors were very smart and kind"] * 80)
    cases = [
        # --- score pairs: the file itself
        Case("empty file", score_pairs(), "is empty", pairs("")),
        Case("header only", score_pairs(), "has a header but no rows", pairs("id,sent_stereo,sent_anti\n")),
        Case("missing column", score_pairs(), "line 1: missing column(s) sent_anti", pairs("id,sent_stereo\na,x\n")),
        Case("misspelt column", score_pairs(), "did you mean 'sent_antii' for 'sent_anti'",
             pairs("id,sent_stereo,sent_antii\na,x,y\n")),
        Case("semicolon delimiter", score_pairs(), "semicolon-separated",
             pairs(GOOD_PAIRS.replace(",", ";"))),
        Case("not UTF-8", score_pairs(), "line 3: not UTF-8",
             {"in.csv": "id,sent_stereo,sent_anti\na,x y,z y\nb,caf\xe9 y,z y\n".encode("latin-1")}),
        Case("input missing", score_pairs(), "pairs table not found", {}),
        Case("input is a folder", ["score", "pairs", "--model", "{masked}", "--metric", "pll", "--input", "{tmp}/earlier",
                                   "--output", "{tmp}/o.csv"], "is a folder", {}),
        # --- score pairs: rows
        Case("empty sentence", score_pairs(), "line 3, column sent_stereo: empty sentence",
             pairs("id,sent_stereo,sent_anti\na,x y,z y\nb,,The rich are lazy.\n")),
        Case("missing field", score_pairs(), "line 3, column sent_anti: empty sentence",
             pairs("id,sent_stereo,sent_anti\na,x y,z y\nb,The doctors are smart.\n")),
        Case("identical sentences", score_pairs(), "line 3: the two sentences are identical",
             pairs("id,sent_stereo,sent_anti\na,x y,z y\nb,Same one.,Same one.\n")),
        Case("duplicate ids", score_pairs(), "line 3, column id: duplicate value 'a' (first at line 2",
             pairs("id,sent_stereo,sent_anti\na,x y,z y\na,p q,r q\n")),
        Case("empty id", score_pairs(), "line 2, column id: empty id", pairs("id,sent_stereo,sent_anti\n,x y,z y\n")),
        Case("longer than the window without --truncate", score_pairs(),
             "in.csv line 2 (id 'a'): sentence in column sent_stereo has 722 tokens, more than the model's maximum "
             "of 64; use --truncate",
             pairs(f"id,sent_stereo,sent_anti\na,{long},short one\n")),
        # --- score pairs: model, metric, outputs
        Case("unknown model", score_pairs(model="{tmp}/no-such-model"), "not found", pairs(GOOD_PAIRS)),
        Case("pll on a causal model", score_pairs(model="{causal}"), "pll needs a masked LM; model", pairs(GOOD_PAIRS)),
        Case("causal on a masked model", score_pairs(metric="causal"), "causal needs a causal or seq2seq model",
             pairs(GOOD_PAIRS)),
        Case("output under a file", ["score", "pairs", "--model", "{masked}", "--metric", "pll", "--input",
                                     "{tmp}/in.csv", "--output", "{tmp}/earlier/scores.csv/x.csv"],
             "cannot write", pairs(GOOD_PAIRS)),
        Case("output is a folder", ["score", "pairs", "--model", "{masked}", "--metric", "pll", "--input",
                                    "{tmp}/in.csv", "--output", "{tmp}/earlier"], "it is a folder", pairs(GOOD_PAIRS)),
        Case("sentences: empty sentence", ["score", "sentences", "--model", "{masked}", "--metric", "pll", "--input",
                                           "{tmp}/s.csv", "--output", "{tmp}/earlier/scores.csv"],
             "line 3, column sentence: empty sentence", {"s.csv": "sentence\nA fine one.\n\"  \"\n"}),
        Case("batch tokens not positive", score_pairs(extra=("--batch-tokens", "0")), "--batch-tokens must be positive",
             pairs(GOOD_PAIRS)),
        # --- annotation agreement
        Case("empty annotator id", AGREE, "line 3, column annotator_id: empty annotator_id",
             judgements("item_id,annotator_id,label\nt1,a1,1\nt1,,2\nt2,a2,3\n")),
        Case("duplicate (item, annotator)", AGREE, "line 4: duplicate row for item_id 't1', annotator_id 'a1' "
             "(first at line 2)", judgements("item_id,annotator_id,label\nt1,a1,1\nt1,a2,2\nt1,a1,3\n")),
        Case("label off the scale", [*AGREE, "--scale", "likert5"], "j.csv line 3, column label (item 't1', annotator 'a2'): label 9 is not one of",
             judgements("item_id,annotator_id,label\nt1,a1,1\nt1,a2,9\n")),
        Case("single annotator", AGREE, "at least two annotators",
             judgements("item_id,annotator_id,label\nt1,a1,1\nt2,a1,2\n")),
        Case("judgements missing column", AGREE, "missing column(s) annotator_id",
             judgements("item_id,annotatr_id,label\nt1,a1,1\n")),
    ]
    # --- pcs analyze
    for name, edit, expect in [
        ("pcs score 9", lambda d: d.assign(score=d["score"].where(d.index != 1, 9.0)),
         "line 3, column score: score outside 1..7, got 9.0"),
        ("pcs score -2", lambda d: d.assign(score=d["score"].where(d.index != 0, -2.0)),
         "line 2, column score: score outside 1..7"),
        ("pcs unknown dimension", lambda d: d.assign(dimension=d["dimension"].where(d.index != 2, "XYZ")),
         "line 4, column dimension: dimension is not one of PDI, IDV, UAI"),
        ("pcs unknown feature", lambda d: d.assign(feature=d["feature"].where(d.index != 4, "charisma")),
         "line 6: feature is not one of its dimension's rubric features"),
        ("pcs without condition C", lambda d: d.loc[d["condition"] != "C"],
         "has no condition C rows"),
        ("pcs condition D", lambda d: d.assign(condition=d["condition"].where(d.index != 5, "D")),
         "line 7, column condition: condition is not one of A, B, C"),
    ]:
        argv, files = pcs(edit)
        cases.append(Case(name, argv, expect, files))
    # --- leakage fit
    for name, files, target, expect in [
        ("leakage target without its H matrix", {}, "XX", "no H_XX.csv in"),
        ("leakage unknown trait", {"human/H_EN.csv": h_matrix(traits=("powerless", "mighty"))}, "HI",
         "H_EN.csv line 3, column Traits: unknown trait 'mighty'"),
        ("leakage unknown group", {"human/H_HI.csv": h_matrix(groups=("woman", "martians"))}, "HI",
         "column martians: unknown group 'martians'"),
        ("leakage model scores missing groups", {"model.csv": h_matrix(groups=("woman",))}, "HI",
         "no column for group(s) immigrant"),
    ]:
        argv, all_files = leakage(files, target)
        cases.append(Case(name, argv, expect, all_files))
    # --- stages: remote endpoints, the scenario bank
    completion = {"id": "toy", "name": "toy-model", "kind": "completion", "backend": "openai", "max_retries": 1,
                  "retry_base_s": 0.01, "timeout_s": 5}
    cases += [
        Case("OPENAI_API_KEY unset for a remote endpoint", ["stage", "crows-score"],
             "OPENAI_API_KEY is not set; model 'toy-model' at https://api.openai.com/v1 needs it",
             crows_stage({**completion, "base_url": "https://api.openai.com/v1"}),
             env={"OPENAI_API_KEY": None, "OPENAI_BASE_URL": None}, in_tmp=True),
        Case("endpoint refuses connections", ["stage", "crows-score"], "after 2 attempt(s): connection error",
             crows_stage({**completion, "base_url": f"http://127.0.0.1:{_closed_port()}/v1"}),
             env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": None}, in_tmp=True),
        Case("scenario bank row missing a language", ["stage", "pcs-collect"],
             "scenario bank bank/scenarios.csv line 3, column language: empty language",
             pcs_collect_stage(lambda d: d.assign(language=d["language"].where(d.index != 1, ""))), in_tmp=True),
        Case("scenario bank unknown dimension", ["stage", "pcs-collect"],
             "bank/scenarios.csv line 2, column dimension: dimension (from rubrics.yaml) is not one of IDV, PDI, UAI",
             pcs_collect_stage(lambda d: d.assign(dimension=d["dimension"].where(d.index != 0, "XYZ"))), in_tmp=True),
    ]
    # --- stages: params, ingest, survey
    registry = (REPO / "data/seed/datasets.yaml").read_text(encoding="utf-8")
    earlier_raw = {"data/raw/crows_pairs/crows_pairs_anonymized.csv": "an earlier ingest\n"}
    cases += [
        Case("params.yaml missing", ["stage", "crows-report"], "params file not found: params.yaml",
             {"reports/crows/summary.json": '{"bias_score": 0.6}\n'}, in_tmp=True),
        Case("data mirror missing", ["stage", "ingest", "--dataset", "crows_pairs"],
             "STEREOLENS_DATA_MIRROR={tmp}/no-mirror is not a directory",
             {"data/seed/datasets.yaml": registry, **earlier_raw}, env={"STEREOLENS_DATA_MIRROR": "{tmp}/no-mirror"},
             in_tmp=True),
        Case("ingest checksum mismatch", ["stage", "ingest", "--dataset", "crows_pairs"],
             "checksum mismatch for crows_pairs_anonymized.csv",
             {"data/seed/datasets.yaml": registry, **earlier_raw,
              "mirror/crows_pairs/crows_pairs_anonymized.csv": "sent_more,sent_less\ntampered,file\n"},
             env={"STEREOLENS_DATA_MIRROR": "{tmp}/mirror"}, in_tmp=True),
        Case("survey folder missing a language", ["leakage", "human", "--survey", "{tmp}/survey", "--output",
                                                  "{tmp}/earlier/human", "--languages", "EN", "HI"],
             "survey file not found: {tmp}/survey/data_full_english.json (the survey folder lacks this language)", {"survey/README.txt": "no files yet\n"}),
    ]
    # --- config
    cases += [
        Case("unknown key in an override", ["config", "compose", "study.crows.limitt=5", "--output",
                                            "{tmp}/earlier/params.yaml"], "limitt", {}),
        Case("unknown group option", ["config", "compose", "model=no_such_model", "--output",
                                      "{tmp}/earlier/params.yaml"], "no_such_model", {}),
        Case("typed config value", ["config", "compose", "study.crows.limit=abc", "--output",
                                    "{tmp}/earlier/params.yaml"], "study.crows.limit", {}),
        Case("unknown metric", ["config", "compose", "metric=nope", "--output", "{tmp}/earlier/params.yaml"],
             "nope", {}),
        Case("compose output under a file", ["config", "compose", "--output", "{tmp}/earlier/params.yaml/p.yaml"],
             "is not a writable folder", {}),
    ]
    # --- config values typed and ranged per group (issue 22, cause 1)
    for overrides, expect in [
        (["study.heads.threads=abc"], "study.heads.threads must be"),
        (["study.heads.shapley.value=bogus"], "study.heads.shapley.value must be one of ['accuracy', 'loss']"),
        (["study.heads.probe.pooling=middle"], "study.heads.probe.pooling must be one of"),
        (["study.heads.split.shapley_fraction=1.5"], "study.heads.split.shapley_fraction must be a number in (0, 1)"),
        (["study.stereo.overlap.similarity.threshold=7"], "must be a number in [0, 1] or one of ['calibrated'], got 7"),
        (["study.stereo.overlap.similarity.method=cosine"], "study.stereo.overlap.similarity.method must be one of"),
        (["study.stereo.countries=[Narnia]"], "study.stereo.countries: ['Narnia'] not in"),
        (["study.pairs.evaluation.bootstrap_resamples=-5"], "must be an integer >= 1, got -5"),
        (["study.pairs.contrast.caste.Bamon=Women"], "contrast 'Women' is not a caste group"),
        (["study.crows.limit=-5"], "study.crows.limit must be an integer >= 1 (or null), got -5"),
        (["executor=ray", "executor.actors=-1"], "executor.actors must be an integer >= 1, got -1"),
        (["executor=ray", "executor.shard_size=0"], "executor.shard_size must be an integer >= 1, got 0"),
    ]:
        cases.append(Case(f"config {overrides[-1]}", ["config", "compose", *overrides, "--output",
                                                      "{tmp}/earlier/params.yaml"], expect, {}))
    committed = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    cases += [
        Case("params.yaml not valid YAML", ["stage", "crows-report"], "params.yaml line 3, column 1: not valid YAML",
             {"params.yaml": "study:\n  crows: {limit: [1\n", "reports/crows/summary.json": '{"bias_score": 0.6}\n'},
             in_tmp=True),
        Case("hand-edited params value", ["stage", "heads-probe"],
             "study.heads.probe.pooling must be one of ['auto', 'first', 'last', 'mean'], got 'middle' in params.yaml",
             {"params.yaml": yaml.safe_dump(with_value(committed, "study.heads.probe.pooling", "middle")),
              "data/processed/heads/probe.json": '{"accuracy": 0.75}\n'}, in_tmp=True),
        Case("hand-edited crows limit", ["stage", "crows-score"], "study.crows.limit must be an integer >= 1",
             {"params.yaml": yaml.safe_dump(with_value(committed, "study.crows.limit", -5)),
              "data/processed/crows/scores.csv": "id,score_stereo,score_anti\n0,-3.5,-4.0\n"}, in_tmp=True),
        # issue 35 item 4: a dtype that is no dtype, refused before a conversion and naming the key written
        Case("hand-edited model dtype", ["stage", "prepare-model", "--model", "smollm2-135m"],
             "models.smollm2-135m.dtype must be one of ['float32', 'bfloat16', 'float16', 'auto'] (or null), got 'float8'",
             {"params.yaml": yaml.safe_dump(with_value(committed, "models.smollm2-135m.dtype", "float8")),
              "models/smollm2-135m/config.json": '{"model_type": "llama"}\n'}, in_tmp=True),
        Case("composed model dtype", ["config", "compose", "model.dtype=float8", "--output", "{tmp}/earlier/params.yaml"],
             "model.dtype must be one of ['float32', 'bfloat16', 'float16', 'auto'] (or null), got 'float8' "
             "(from override 'model.dtype=float8')", {}),
        Case("reduced precision policy", ["config", "compose", "+model.reduced_precision=sometimes", "--output",
                                          "{tmp}/earlier/params.yaml"], "model.reduced_precision must be one of", {}),
    ]
    # --- lineage, release and tracking stores that say no (issue 22, cause 5)
    release_params = yaml.safe_dump({"release": {"stereo": committed["release"]["stereo"]}})
    cases += [
        Case("lineage outside the repository", ["lineage", "/etc/hostname"], "outside the repository", {}),
        Case("lineage of a file no stage reads", ["lineage", str(REPO / "README.md")],
             "not an output of any stage nor an input a stage reads", {}),
        Case("lineage of a file missing from an output folder", ["lineage", str(REPO / "reports/stereo/overlap/no.json")],
             "no such file in reports/stereo/overlap, the output of stage stereo_overlap", {}),
        Case("release before the study has run", ["release", "stereo", "--output", "{tmp}/rel"],
             "not found: run the study first", {"params.yaml": release_params}, in_tmp=True),
        Case("release output under a file", ["release", "stereo", "--output", "{tmp}/params.yaml/rel"],
             "is a file, not a folder", {"params.yaml": release_params}, in_tmp=True),
        Case("release with a broken --params", ["release", "stereo", "--params", "{tmp}/p.yaml", "--output", "{tmp}/rel"],
             "p.yaml line 2, column 1: not valid YAML", {"p.yaml": "release: [1\n"}, in_tmp=True),
        Case("compare in a clone with no runs", ["compare", "--study", "crows", "--tracking-uri",
                                                 "sqlite:///{tmp}/mlruns/mlflow.db"], "no MLflow store at sqlite:///",
             {"params.yaml": "seed: 0\n"}, in_tmp=True),
        Case("compare with a store that is not a database", ["compare", "--study", "crows", "--tracking-uri",
                                                             "sqlite:///{tmp}/j.csv"], "j.csv is not an SQLite database",
             judgements("item_id,annotator_id,label\nt1,a1,1\n")),
        Case("lineage with a mistyped store", ["lineage", str(REPO / "data/seed/stereo/prompts.yaml"), "--tracking-uri",
                                               "sqlite:///{tmp}/no/such.db"], "no MLflow store at sqlite:///", {}),
    ]
    # --- counts that cannot be (issue 22, cause 2)
    cases += [
        Case("pairs analyze --resamples 0", ["pairs", "analyze", "--scores", "{tmp}/s.csv", "--output",
                                             "{tmp}/earlier/pairs", "--resamples", "0"],
             "--resamples must be an integer >= 1, got 0", {"s.csv": "id,dimension,score_stereo,score_anti\na,x,-1,-2\n"}),
        Case("pairs analyze --resamples -5", ["pairs", "analyze", "--scores", "{tmp}/s.csv", "--output",
                                              "{tmp}/earlier/pairs", "--resamples", "-5"],
             "--resamples must be an integer >= 1, got -5", {"s.csv": "id,dimension,score_stereo,score_anti\na,x,-1,-2\n"}),
        Case("stereo evaluate --bootstrap -1", ["stereo", "evaluate", "--scores", "{tmp}/s.csv", "--output",
                                                "{tmp}/earlier/stereo", "--bootstrap", "-1"],
             "--bootstrap must be an integer >= 0, got -1", {"s.csv": "id\n"}),
        Case("agreement --resamples -5", [*AGREE[:-1], "-5"], "--resamples must be an integer >= 0, got -5",
             judgements("item_id,annotator_id,label\nt1,a1,1\nt1,a2,2\n")),
    ]
    # --- numbers that cannot be scores, duplicates, mismatches between two inputs (issue 22, causes 2-4)
    for name, (argv, files), expect in [
        ("pairs score inf", pairs_analyze(PAIRS_SCORES.replace("-2.5", "inf")),
         "s.csv line 3, column score_anti: inf is not a finite number"),
        ("pairs scores that are probabilities", pairs_analyze(PAIRS_SCORES.replace("-1.5,-2.0", "0.6,0.2")),
         "s.csv line 2, column score_stereo: 0.6 is positive, but scores are log-likelihoods (<= 0)"),
        ("pairs duplicate ids", pairs_analyze(PAIRS_SCORES + "a,caste,-1.0,-2.0\n"),
         "s.csv line 4, column id: 'a' appears twice"),
        ("pairs dimension named all", pairs_analyze(PAIRS_SCORES.replace("b,gender", "b,all")),
         "s.csv line 3, column dimension: 'all' is the name of the overall row"),
        ("pairs blank model", pairs_analyze("id,model,dimension,score_stereo,score_anti\na,m1,caste,-1.5,-2.0\n"
                                            "b,,caste,-3.0,-2.5\n"),
         "s.csv line 3, column model: empty model (the row would fall out of every model x language cell)"),
        ("fragmentation with negative tokens per term",
         (pairs_analyze(PAIRS_SCORES, "--fragmentation", "{tmp}/f.csv")[0],
          {"s.csv": PAIRS_SCORES, "f.csv": "model,language,mean_tokens_per_term\n-,-,-1.5\n"}),
         "f.csv line 2, column mean_tokens_per_term: -1.5 is not a number of tokens per term (>= 1)"),
        ("fragmentation sharing no model with the scores",
         (pairs_analyze(PAIRS_SCORES, "--fragmentation", "{tmp}/f.csv")[0],
          {"s.csv": PAIRS_SCORES, "f.csv": "model,language,mean_tokens_per_term\nother,en,1.5\n"}),
         "f.csv: no (model, language) in common with the scores"),
        ("stereo score inf", stereo_evaluate(STEREO_SCORES.replace("-4.0", "inf")),
         "s.csv line 3, column score_unrelated: 'inf' is not a finite number"),
        ("stereo scores that are probabilities", stereo_evaluate(STEREO_SCORES.replace("-2.0,-1.0", "0.2,0.7")),
         "s.csv line 3, column score_stereo: 0.2 is positive, but scores are log-likelihoods (<= 0)"),
        ("stereo duplicate ids", stereo_evaluate(STEREO_SCORES.replace("\n2,", "\n1,")),
         "s.csv line 3, column id: '1' already on line 2"),
        ("stereo nan cell", stereo_evaluate(STEREO_SCORES.replace("-3.0", "nan")),
         "s.csv line 2, column score_unrelated: 'nan' is not a number"),
        ("stereo header only", stereo_evaluate(STEREO_SCORES.splitlines()[0] + "\n"),
         "s.csv has a header but no rows"),
    ]:
        cases.append(Case(name, argv, expect, files))
    cases.append(Case("lineage of a path that does not exist", ["lineage", str(REPO / "data/seed/no-such-file.csv")],
                      "no-such-file.csv: not an output of any stage nor an input a stage reads", {}))
    # --- the same, reached only through a stage: its repository is built in {tmp}
    classes = (REPO / "data/seed/pairs/group_classes.csv").read_text(encoding="utf-8")
    human = with_value(with_value(committed, "annotation.source", "human"), "study.pairs.validation.judgements", "j.csv")
    triples = ("stereotype_id,annotator_id,context,sent_stereo,sent_anti,distributor_review,author_review,country,"
               "ethnicity,gender,religion,sexual_orientation,age_band,education,area\n"
               + "MX-1,h1,Ana conduce al trabajo.,Ana choca el coche.,Ana conduce con cuidado.,accepted,accepted,"
                 "Mexico,mestizo,female,catholic,heterosexual,22-40,college,urban\n" * 2)
    instantiate = with_value(committed, "study.stereo.instantiation",
                             {**committed["study"]["stereo"]["instantiation"], "generate": False,
                              "human": "triples.csv", "starter": None})
    overlap = with_value(committed, "study.stereo.overlap",
                         {**committed["study"]["stereo"]["overlap"], "adjudication": "adj.csv", "crows": None,
                          "stereoset": None, "similarity": {**committed["study"]["stereo"]["overlap"]["similarity"],
                                                            "method": "lexical", "threshold": 0.6}})
    cases += [
        Case("group_classes.csv with a group twice", ["stage", "pairs-evaluate"],
             "group_classes.csv line 39, column group: duplicate value 'Bamon' (first at line 2",
             pairs_evaluate_stage(committed, group_classes=classes + "caste,Bamon,pan_regional,ours,again\n"),
             in_tmp=True),
        Case("unknown group_class blamed on group_classes.csv", ["stage", "pairs-evaluate"],
             "group_classes.csv line 39, column class:",
             pairs_evaluate_stage(committed, group_classes=classes + "caste,Newcomers,regional,ours,x\n"), in_tmp=True),
        Case("a case suffix with a space in case_suffixes.csv", ["stage", "pairs-translate"],
             "case suffixes data/seed/pairs/case_suffixes.csv line 2, column suffix: a suffix is one word, no spaces",
             {"params.yaml": yaml.safe_dump(committed, allow_unicode=True),
              "data/processed/pairs/constructed_en.csv": "pair_id,sent_stereo,sent_anti\nc0001,A b.,C b.\n",
              "data/seed/pairs/case_suffixes.csv": "language,kind,suffix,case,attested,source\n"
                                                   "kok,case,ां क,dative,,ours\n"}, in_tmp=True),
        Case("header-only controls.csv", ["stage", "pairs-evaluate"],
             "control sentences data/seed/pairs/controls.csv has a header but no rows",
             pairs_evaluate_stage(committed, controls="control_id,language,sentence\n"), in_tmp=True),
        Case("a tuple nobody judged", ["stage", "pairs-validate"],
             "j.csv: 1 item(s) nobody judged, which would count as rejected: 'Kharvi::Fishing'",
             {"params.yaml": yaml.safe_dump(human, allow_unicode=True),
              "data/interim/pairs/attributes.csv": "tuple_id,group,attribute\nBamon::Caste,Bamon,Caste\n"
                                                   "Kharvi::Fishing,Kharvi,Fishing\nRender::Toddy,Render,Toddy\n",
              "j.csv": "item_id,annotator_id,label\nBamon::Caste,a1,yes\nBamon::Caste,a2,no\nRender::Toddy,a1,yes\n",
              "data/interim/pairs/tuples.csv": "tuple_id,keep\nBamon::Caste,True\n"}, in_tmp=True),
        Case("the same triple twice in an instantiation import", ["stage", "stereo-instantiate"],
             "triples.csv line 3: the same triple (stereotype_id, context, sent_stereo, sent_anti) as line 2",
             stereo_stage(instantiate, {"triples.csv": triples}), in_tmp=True),
        Case("adjudication of an id that exists nowhere", ["stage", "stereo-overlap"],
             "adj.csv line 3, column right_id: 'ES-9' is not a validated stereotype",
             stereo_stage(overlap, {"adj.csv": "left_id,right_id,decision\nMX-1,ES-1,absent\nMX-1,ES-9,present\n"}),
             in_tmp=True),
    ]
    cases += _issue35_cases(committed, triples, instantiate)
    # --- seegull (issue 34): a bad SeeGULL file, refused by the associate stage before any model loads, and a bad
    # associations file given to `seegull evaluate`
    seegull_header = ("identity,attribute,non_stereotype,stereotype,unsure,mean_offensive_score,translated_identity,"
                      "translated_attribute_list\n")
    seegull_rows = "afganos,terrorista,0,3,0,4,afghans,terrorist\nsuecos,ordenados,2,1,0,-1,Swedes,tidy\n"
    mexico = "data/raw/seegull_multilingual/Spanish (es) in Mexico.csv"

    def seegull_stage(files: dict[str, str]) -> dict[str, str]:
        params = with_value(committed, "study.seegull.locales", ["es-MX"])
        params = with_value(params, "study.seegull.analysis.cross_locale", [])
        return {"params.yaml": yaml.safe_dump(params, allow_unicode=True), **files,
                "data/processed/seegull/gemma3-270m/associations.csv": "locale,identity\nes-MX,earlier\n"}

    associations = ("locale,identity,attribute,stereotype_votes,non_stereotype_votes,unsure_votes,association\n"
                    "es-MX,afganos,terrorista,3,0,0,-0.5\nes-MX,suecos,ordenados,2.5,1,0,0.1\n")
    cases += [
        Case("SeeGULL vote that is not a whole number", ["stage", "seegull-associate"],
             "Spanish (es) in Mexico.csv line 3, column stereotype: stereotype vote count is not a whole number in "
             "0..3, got '2.5'",
             seegull_stage({mexico: seegull_header + seegull_rows.replace("2,1,0,-1", "2,2.5,0,-1")}), in_tmp=True),
        Case("SeeGULL file missing a column", ["stage", "seegull-associate"], "missing column(s) unsure",
             seegull_stage({mexico: seegull_header.replace(",unsure,", ",") + seegull_rows.replace(",0,4,", ",4,")
                            .replace(",0,-1,", ",-1,")}), in_tmp=True),
        Case("SeeGULL file of an unknown locale", ["stage", "seegull-associate"],
             "SeeGULL file 'Klingon (kl) in Mexico.csv': unknown language 'Klingon'",
             seegull_stage({mexico: seegull_header + seegull_rows,
                            "data/raw/seegull_multilingual/Klingon (kl) in Mexico.csv": seegull_header + seegull_rows}),
             in_tmp=True),
        Case("seegull evaluate: a vote that is not a whole number",
             ["seegull", "evaluate", "--associations", "{tmp}/a.csv", "--output", "{tmp}/earlier/seegull"],
             "a.csv line 3, column stereotype_votes: stereotype_votes count is not a whole number in 0..1000, got '2.5'",
             {"a.csv": associations}),
    ]
    return cases


# --- Label Studio exports and annotator maps (issue 35, items 1-3 and 7): every export and map checked whole before
# anything is read into judgements; the bad record named by its place in the file and its Label Studio ids
LS_FIXTURES = REPO / "tests/annotation/fixtures/label_studio"


def ls_export(fmt: str, edit=None, kind: str = "tuple_tasks") -> str:
    """The recorded tuple-validation export (users 1, 2, 3 on three tasks; task 4 answered twice by user 3) in
    ``fmt`` (json, min.json, csv), as text after ``edit`` (records -> records for JSON, text -> text for CSV)."""
    text = (LS_FIXTURES / f"{kind}.{fmt}").read_text(encoding="utf-8")
    if edit is None:
        return text
    if fmt == "csv":
        return edit(text)
    records = json.loads(text)
    return json.dumps(edit(records) or records, ensure_ascii=False, indent=1)


def ls_import(name: str, *extra: str) -> list[str]:
    return ["annotation", "import", "--input", f"{{tmp}}/{name}", "--scale", "yes_no", *extra,
            "--output", "{tmp}/earlier/judgements.csv"]


def _set(path: str, value):
    """An edit of the JSON records: ``path`` ("1.annotations.0.id") set to ``value``, or deleted when ``value``
    is ``_set``."""
    def edit(records):
        *head, last = path.split(".")
        node = records
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key = int(last) if isinstance(node, list) else last
        if value is _set:
            del node[key]
        else:
            node[key] = value
    return edit


def pairs_validate_stage(judgements_key, files: dict[str, str], *, tasks: bool = False) -> dict[str, str]:
    """pairs-validate's repository: annotation=human with ``study.pairs.validation.judgements`` set to
    ``judgements_key``, three tuples, ``files``, and an earlier run's outputs (with ``tasks``: the task files it
    wrote, which a run without judgements writes again)."""
    committed = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params = with_value(with_value(committed, "annotation.source", "human"), "study.pairs.validation.judgements",
                        judgements_key)
    tuples = pd.DataFrame({"tuple_id": ["Bamon::Caste", "Kharvi::Fishing", "Render::Toddy"],
                           "group": ["Bamon", "Kharvi", "Render"], "attribute": ["Caste", "Fishing", "Toddy"]})
    out = {"params.yaml": yaml.safe_dump(params, allow_unicode=True),
           "data/interim/pairs/attributes.csv": tuples.to_csv(index=False),
           "data/interim/pairs/tuples.csv": "tuple_id,keep\nBamon::Caste,True\n", **files}
    if tasks:
        import tempfile

        from stereolens.annotation.scales import YES_NO
        from stereolens.annotation.tasks import export_tasks
        from stereolens.studies.pairs.validation import INSTRUCTIONS

        items = tuples.assign(item_id=tuples["tuple_id"], text=tuples["group"] + ": " + tuples["attribute"])
        with tempfile.TemporaryDirectory() as folder:
            written = export_tasks(items[["item_id", "text"]], YES_NO,
                                   INSTRUCTIONS.format(region=params["study"]["pairs"]["region"]["name"]), folder,
                                   name="tuple_tasks")
            out.update({f"reports/pairs/validation/tasks/{p.name}": p.read_text(encoding="utf-8")
                        for p in written.values()})
    return out


def stereo_validate_stage(judgements_key: str, files: dict[str, str]) -> dict[str, str]:
    """stereo-validate's repository: annotation=human, the judgements at ``judgements_key``, one validator per
    panel, two retrieved stereotypes, the prompts, ``files`` and an earlier run's outputs."""
    from stereolens.studies.stereo.validation import DEMOGRAPHIC_VALUES

    committed = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params = with_value(committed, "annotation.source", "human")
    params = with_value(params, "study.stereo.validation", {**committed["study"]["stereo"]["validation"],
                                                           "judgements": judgements_key,
                                                           "annotators": "annotators.csv"})
    demo = {c: values[0] for c, values in DEMOGRAPHIC_VALUES.items()}
    annotators = pd.DataFrame([{"annotator_id": "MX-01", "panel": "Mexico/gender", "label_studio_user": "1", **demo}])
    stereotypes = ("stereotype_id,country,category,target,stereotype,examples,source\n"
                   "Mexico-gender-001,Mexico,gender,mujeres,Las mujeres manejan mal.,[],machine\n")
    return {"params.yaml": yaml.safe_dump(params, allow_unicode=True),
            "data/seed/stereo/prompts.yaml": (REPO / "data/seed/stereo/prompts.yaml").read_text(encoding="utf-8"),
            "data/interim/stereo/retrieval/stereotypes.csv": stereotypes,
            "annotators.csv": annotators.to_csv(index=False), **files,
            "data/interim/stereo/validation/validated.csv": "stereotype_id\nearlier\n",
            "reports/stereo/validation/summary.json": '{"n_validated": 1}\n'}


def _label_studio_cases() -> list[Case]:
    pretty = ls_export("json", lambda records: None)  # one key a line, so that line numbers say something
    latin1 = pretty.replace("Bamon: Caste", "Bamon: Cast\u00e9")
    latin1_line = 1 + latin1[:latin1.index("Cast\u00e9")].count("\n")
    cut = pretty[:pretty.index('"Kharvi: Fishing"')]
    csv_text = ls_export("csv")
    two_results = _set("1.annotations.0.result", [{"from_name": "label", "value": {"choices": ["Yes"]}},
                                                  {"from_name": "label", "value": {"choices": ["No"]}}])
    cases = [
        # --- structure: lists where lists belong, ids of the right type
        Case("LS annotations an object, not a list", ls_import("e.json"),
             "e.json record 2 (task 5): 'annotations' is a JSON object, not a list",
             {"e.json": ls_export("json", lambda r: r[1].update(annotations={"a": r[1]["annotations"][0]}))}),
        Case("LS export an object, not a list", ls_import("e.json"),
             "e.json: a JSON object, not the list of tasks (JSON) or annotations (JSON-MIN)",
             {"e.json": json.dumps({"tasks": json.loads(ls_export("json"))})}),
        Case("LS text annotation id (JSON)", ls_import("e.json"),
             "e.json record 2 (task 5), annotation 1 of 3: annotation id 'abc' is not a number",
             {"e.json": ls_export("json", _set("1.annotations.0.id", "abc"))}),
        Case("LS text annotation id (JSON-MIN)", ls_import("e.min.json"),
             "e.min.json record 3 (task 4, annotation 'x14'): annotation id 'x14' is not a number",
             {"e.min.json": ls_export("min.json", _set("2.annotation_id", "x14"))}),
        Case("LS text annotation id (CSV)", ls_import("e.csv"),
             "e.csv line 3 (task 4, annotation 'xyz'): annotation id 'xyz' is not a number",
             {"e.csv": csv_text.replace("\n17,", "\nxyz,")}),
        Case("LS annotator a list (JSON-MIN)", ls_import("e.min.json"),
             "e.min.json record 2 (task 4, annotation 17): annotator [3] is no Label Studio user",
             {"e.min.json": ls_export("min.json", _set("1.annotator", [3]))}),
        Case("LS export not UTF-8 (JSON)", ls_import("e.json"), f"e.json line {latin1_line}: not UTF-8 (byte 0xe9)",
             {"e.json": latin1.encode("latin-1")}),
        Case("LS export not UTF-8 (CSV)", ls_import("e.csv"), "e.csv line 2: not UTF-8 (byte 0xe9)",
             {"e.csv": csv_text.replace("Bamon: Caste", "Bamon: Cast\u00e9").encode("latin-1")}),
        Case("LS --input a folder", ls_import("exports"), "exports is a folder, not a file",
             {"exports/tuple_tasks.json": ls_export("json")}),
        Case("LS CSV cut inside a field", ls_import("e.csv"),
             "e.csv line 6: not a whole CSV row (unexpected end of data): a file cut short",
             {"e.csv": csv_text[:csv_text.index("Kharvi") + 3]}),
        Case("LS CSV cut between fields", ls_import("e.csv"),
             "e.csv line 6: 4 fields where the header has 9 (a file cut short",
             {"e.csv": csv_text[:csv_text.index(',"Kharvi::Fishing"')]}),
        Case("LS JSON export cut short", ls_import("e.json"),
             f"e.json line {1 + cut.count(chr(10))}, column {len(cut.splitlines()[-1]) + 1}: not valid JSON",
             {"e.json": cut}),
        Case("LS annotation pasted twice (JSON-MIN)", ls_import("e.min.json"),
             "e.min.json record 11 (task 4, annotation 20): annotation 20 again (first at record 1 (task 4, "
             "annotation 20))", {"e.min.json": ls_export("min.json", lambda r: r + r[:1])}),
        Case("LS time that is not a time", ls_import("e.min.json"),
             "e.min.json record 2 (task 4, annotation 17): time 'yesterday' is not an ISO 8601 time",
             {"e.min.json": ls_export("min.json", _set("1.updated_at", "yesterday"))}),
        # --- one answer per annotator and item
        Case("LS two choices ticked (JSON)", ls_import("e.json"),
             "e.json record 2 (task 5), annotation 12: 2 choices ticked ('Yes', 'No') where the scale takes one",
             {"e.json": ls_export("json", _set("1.annotations.0.result.0.value.choices", ["Yes", "No"]))}),
        Case("LS two choices ticked (JSON-MIN)", ls_import("e.min.json"),
             "e.min.json record 5 (task 5, annotation 18): 2 choices ticked ('Yes', 'No')",
             {"e.min.json": ls_export("min.json", _set("4.label", {"choices": ["Yes", "No"]}))}),
        Case("LS two choices ticked (CSV)", ls_import("e.csv"),
             "e.csv line 6 (task 5, annotation 18): 2 choices ticked ('Yes', 'No')",
             {"e.csv": csv_text.replace('5,"Kharvi::Fishing","Yes"', '5,"Kharvi::Fishing","{""choices"":[""Yes"",""No""]}"')}),
        Case("LS two answers to one question (JSON)", ls_import("e.json"),
             "e.json record 2 (task 5), annotation 12: two answers to 'label' where the scale takes one",
             {"e.json": ls_export("json", two_results)}),
        Case("LS submitted without an answer (JSON)", ls_import("e.json"),
             "e.json record 3 (task 6), annotation 13: no answer to 'label' (submitted empty)",
             {"e.json": ls_export("json", _set("2.annotations.0.result", []))}),
        Case("LS label off the scale named by its record", ls_import("e.min.json"),
             "e.min.json record 9 (task 6, annotation 16), column label (item 'Render::Toddy', annotator '2'): "
             "label 'Maybe' is not one of", {"e.min.json": ls_export("min.json", _set("8.label", "Maybe"))}),
        # --- every task carries its item id; the bad record named, not the first
        Case("LS task without data.item_id (JSON)", ls_import("e.json"),
             "e.json record 3 (task 6): no data.item_id (every task the project exports carries its item id",
             {"e.json": ls_export("json", _set("2.data.item_id", _set))}),
        Case("LS record without item_id (JSON-MIN)", ls_import("e.min.json"),
             "e.min.json record 8 (task 6, annotation 19): no item_id",
             {"e.min.json": ls_export("min.json", _set("7.item_id", _set))}),
        Case("LS record with an empty item_id (CSV)", ls_import("e.csv"),
             "e.csv line 9 (task 6, annotation 19): no item_id",
             {"e.csv": csv_text.replace('6,"Render::Toddy","No"', '6,"","No"')}),
        Case("LS one malformed record among good ones", ls_import("e.min.json"),
             "e.min.json record 4 (task 4): not a JSON-MIN annotation like the other records: lacks 'annotation_id'",
             {"e.min.json": ls_export("min.json", _set("3.annotation_id", _set))}),
        # --- annotator maps: every user mapped once to a non-empty id, every id to one user
        Case("annotator map: two users on one id", ls_import("e.json", "--annotator-map", "{tmp}/map.csv"),
             "map.csv line 4: annotator id 'goa-02' is given to Label Studio users '2' (line 3) and '3'",
             {"e.json": ls_export("json"), "map.csv": "label_studio_user,annotator_id\n1,lead\n2,goa-02\n3,goa-02\n"}),
        Case("annotator map: an empty id", ls_import("e.json", "--annotator-map", "{tmp}/map.csv"),
             "map.csv line 3: Label Studio user '2' has an empty annotator id",
             {"e.json": ls_export("json"), "map.csv": "label_studio_user,annotator_id\n1,lead\n2,\n3,goa-03\n"}),
        Case("annotator map: an id that is another user's number",
             ls_import("e.json", "--annotator-map", "{tmp}/map.csv"),
             "e.json: Label Studio users '1' and '3' would both be credited to annotator '3'",
             {"e.json": ls_export("json"), "map.csv": "label_studio_user,annotator_id\n1,3\n2,goa-02\n"}),
        Case("user list: two accounts share an email", ls_import("e.json", "--annotator-map", "{tmp}/users.json"),
             "users.json record 3: annotator id 'ann-a@example.org' is given to Label Studio users '2' (record 2) "
             "and '3'", {"e.json": ls_export("json"),
                         "users.json": (LS_FIXTURES / "users.json").read_text().replace("ann-b@", "ann-a@")}),
        Case("user list: a user without a numeric id", ls_import("e.json", "--annotator-map", "{tmp}/users.json"),
             "users.json record 2: not a Label Studio user",
             {"e.json": ls_export("json"),
              "users.json": (LS_FIXTURES / "users.json").read_text().replace('"id":2,', '"id":"two",')}),
        # --- messages naming the real cause
        Case("semicolon-separated judgements", ls_import("j.csv"),
             "j.csv line 1: one column 'item_id;annotator_id;label'; the header looks semicolon-separated",
             {"j.csv": "item_id;annotator_id;label\nBamon::Caste;a1;yes\n"}),
        # --- the stage paths, through the same reader
        Case("pairs-validate: judgements path a folder", ["stage", "pairs-validate"],
             "study.pairs.validation.judgements=data/annotations is a folder, not a judgements file",
             pairs_validate_stage("data/annotations", {"data/annotations/tuple_tasks.json": ls_export("json")}),
             in_tmp=True),
        Case("pairs-validate: judgements file deleted", ["stage", "pairs-validate"],
             "study.pairs.validation.judgements: judgements not found: data/annotations/j.json",
             pairs_validate_stage("data/annotations/j.json", {}, tasks=True), in_tmp=True),
        Case("pairs-validate: two choices ticked", ["stage", "pairs-validate"],
             "j.json record 1 (task 4), annotation 11: 2 choices ticked",
             pairs_validate_stage("j.json", {"j.json": ls_export("json", _set("0.annotations.0.result.0.value.choices",
                                                                             ["Yes", "No"]))}), in_tmp=True),
        Case("stereo-validate: judgements path a folder", ["stage", "stereo-validate"],
             "study.stereo.validation.judgements=data/annotations is a folder, not a judgements file",
             stereo_validate_stage("data/annotations", {"data/annotations/validation.json": "[]"}), in_tmp=True),
    ]
    return cases




# --- issue 35 items 5-8: what `profile` believes, meaning checks, messages naming the real cause, a port
STEREO_SUMMARY = {"model": "m", "ss": 50.0, "lms": 90.0, "icat": 90.0, "n": 4, "models": {}}
PROFILE = ["profile", "--reports", "{tmp}/reports", "--csv", "{tmp}/profile.csv"]
EARLIER_PROFILE = {"profile.csv": "model,stereo.ss\nm,50.0\n"}


def _summary(study: str, summary: dict, model: str = "m") -> dict[str, str]:
    return {f"reports/{study}/{model}/summary.json": json.dumps(summary)}


def _busy_port() -> int:
    """A port something listens on for as long as the tests run."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    _HELD.append(sock)
    return sock.getsockname()[1]


_HELD: list[socket.socket] = []


def _issue35_cases(committed: dict, triples: str, instantiate: dict) -> list[Case]:
    header, row = triples.splitlines()[:2]
    cells = row.split(",")
    cells[4] = cells[3]  # sent_anti = sent_stereo
    same_sentences = f"{header}\n{','.join(cells)}\n"
    release = dict(committed["release"]["stereo"])
    release["items"] = [{"path": "data/processed/stereo/instances.csv", "id": ["instance_id"]}]
    busy = _busy_port()
    return [
        # 5. profile reads summaries through the report contract's schema
        Case("profile: a measure that is text", PROFILE,
             "reports/stereo/m/summary.json: ss must be a number in [0, 100] (or null), got '27.17949abc'",
             {**_summary("stereo", {**STEREO_SUMMARY, "ss": "27.17949abc"}), **EARLIER_PROFILE}, in_tmp=True),
        Case("profile: a measure under models that is text", PROFILE,
             "summary.json: models.m.lms must be a number in [0, 100] (or null), got 'high'",
             {**_summary("stereo", {**STEREO_SUMMARY, "models": {"m": {**STEREO_SUMMARY, "lms": "high"}}}),
              **EARLIER_PROFILE}, in_tmp=True),
        Case("profile: a stripped summary", PROFILE, "reports/crows/m/summary.json: bias_score: missing",
             {**_summary("crows", {"model": "m", "provenance": {"annotation_source": "human"}}),
              **_summary("stereo", STEREO_SUMMARY), **EARLIER_PROFILE}, in_tmp=True),
        Case("profile: a deleted summary", PROFILE,
             "reports/crows/m/summary.json: missing, though {tmp}/reports/crows/m holds the study's other outputs "
             "(bias_by_type.csv, headline.json)",
             {"reports/crows/m/bias_by_type.csv": "group,bias_score\nall,0.6\n", "reports/crows/m/headline.json": "{}\n",
              **_summary("stereo", STEREO_SUMMARY), **EARLIER_PROFILE}, in_tmp=True),
        Case("profile: NaN in a summary", PROFILE, "summary.json: not valid JSON (NaN is not a JSON value",
             {"reports/stereo/m/summary.json": '{"model": "m", "ss": NaN, "lms": 90, "icat": 9, "n": 4}',
              **EARLIER_PROFILE}, in_tmp=True),
        Case("profile: --params that does not exist", [*PROFILE, "--params", "{tmp}/nope.yaml"],
             "--params {tmp}/nope.yaml: not found", {**_summary("stereo", STEREO_SUMMARY), **EARLIER_PROFILE},
             in_tmp=True),
        # 6. meaning checks
        Case("pairs analyze header only", pairs_analyze("")[0], "s.csv has a header but no rows",
             pairs_analyze("id,dimension,score_stereo,score_anti\n")[1]),
        Case("a human triple whose two sentences are the same", ["stage", "stereo-instantiate"],
             "triples.csv line 2, column sent_anti: the same sentence as sent_stereo",
             stereo_stage(instantiate, {"triples.csv": same_sentences}), in_tmp=True),
        Case("stereoset_generative with a negative ratio",
             [*stereo_evaluate(STEREO_SCORES)[0], "--score", "stereoset_generative"],
             "s.csv line 2, column score_stereo: -1 is negative, but these scores are ratios of two negative mean "
             "log-probabilities (>= 0)", stereo_evaluate(STEREO_SCORES)[1]),
        Case("stereo scores with a country the study does not know", stereo_evaluate("")[0],
             "s.csv line 3, column country: 'Spian' is not a country of the prompt templates "
             "data/seed/stereo/prompts.yaml (Spain, Mexico, Argentina, Colombia, Nicaragua); did you mean 'Spain'?",
             stereo_evaluate(STEREO_SCORES.replace("2,Spain", "2,Spian"))[1]),
        # 7. messages naming the real cause
        Case("release items naming an id column the table lacks", ["release", "stereo", "--output", "{tmp}/rel"],
             "release.stereo.items: id column(s) instance_id of data/processed/stereo/instances.csv not in that file "
             "(has: id, source)",
             {"params.yaml": yaml.safe_dump({"release": {"stereo": release}}, allow_unicode=True),
              "data/processed/stereo/instances.csv": "id,source\n1,machine\n",
              "data/processed/stereo/instances_provenance.csv": "id,validation_source\n1,simulated\n",
              "data/interim/stereo/validation/validated.csv": "stereotype_id,source\nMX-1,machine\n"}, in_tmp=True),
        Case("compare with an empty file as the store", ["compare", "--study", "crows", "--tracking-uri",
                                                         "sqlite:///{tmp}/empty.db"],
             "empty.db is an empty file, not an MLflow store", {"empty.db": b"", "params.yaml": "seed: 0\n"},
             in_tmp=True),
        # 8. a port that cannot be served, refused before a server starts
        Case("ui --port out of range", ["ui", "--port", "99999"], "--port must be an integer in [1, 65535], got 99999",
             {}),
        Case("ui --port in use", ["ui", "--port", str(busy)], f"--port {busy}: already in use on 127.0.0.1", {}),
    ]


CASES = _cases() + _label_studio_cases()


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _fill(arg: str, tmp: Path, models: dict[str, str]) -> str:
    return arg.format(tmp=tmp, **models)


def _places(case: Case, tmp: Path, models: dict[str, str]) -> set[str]:
    """What an error line may name as the place: an input file, a path or option given on the
    command line, a config key or option it sets, an environment variable the case sets, the
    model (name or endpoint) a stage's params name."""
    argv = [_fill(a, tmp, models) for a in case.argv]
    places = {Path(name).name for name in case.files} | set(case.env)
    for arg in argv:
        if "/" in arg:
            places.add(Path(arg).name)
        elif arg.startswith("--"):
            places.add(arg)
        elif "=" in arg:
            key, _, value = arg.partition("=")
            places |= {key, value}
    if "stage" in argv[:1]:
        places.add("params.yaml")
    if "params.yaml" in case.files:  # a stage's model: its name or endpoint
        try:
            params = yaml.safe_load(case.files["params.yaml"])
        except yaml.YAMLError:  # the case is a broken params.yaml
            params = {}
        params = params if isinstance(params, dict) else {}
        model = params.get("model") or {}
        places |= {v for k, v in model.items() if k in ("name", "base_url") and isinstance(v, str)}
        # a key the case's params set to something other than the committed value (a path to a human input)
        places |= _keys_set(params, yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8")))
    return places - {""}


def _keys_set(params: dict, committed: dict, prefix: str = "") -> set[str]:
    """The dotted keys whose value in ``params`` differs from ``committed``'s."""
    keys = set()
    for key, value in params.items():
        dotted = f"{prefix}{key}"
        other = committed.get(key) if isinstance(committed, dict) else None
        if isinstance(value, dict) and isinstance(other, dict):
            keys |= _keys_set(value, other, dotted + ".")
        elif value != other:
            keys.add(dotted)
    return keys


@pytest.fixture(scope="module")
def earlier(tmp_path_factory, tiny_masked_lm_dir):
    """Outputs of an earlier good run of every command, copied into each case's folder."""
    root = tmp_path_factory.mktemp("earlier")
    (root / "in.csv").write_text(GOOD_PAIRS, encoding="utf-8")
    assert main(["score", "pairs", "--model", str(tiny_masked_lm_dir), "--metric", "pll", "--input",
                 str(root / "in.csv"), "--output", str(root / "earlier/scores.csv"), "--no-cache"]) == 0
    for name, text in pcs_scores().items():
        (root / name).write_text(text, encoding="utf-8")
    assert main(["pcs", "analyze", "--scores", str(root / "scores.csv"), "--output", str(root / "earlier/pcs")]) == 0
    (root / "earlier/params.yaml").write_text("# an earlier params.yaml\nseed: 0\n", encoding="utf-8")
    return root / "earlier"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_lost(case, earlier, tmp_path, tiny_masked_lm_dir,
                                                         tiny_causal_lm_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path if case.in_tmp else REPO)  # conf/ and data/seed are read from the repository
    shutil.copytree(earlier, tmp_path / "earlier")
    for name, content in case.files.items():
        dest = tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    for key, value in case.env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, _fill(value, tmp_path, {}))
    before = _digest(tmp_path if case.in_tmp else tmp_path / "earlier")
    models = {"masked": str(tiny_masked_lm_dir), "causal": str(tiny_causal_lm_dir)}
    capsys.readouterr()
    rc = main([_fill(a, tmp_path, models) for a in case.argv])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2, captured
    assert len(lines) == 1 and lines[0].startswith("stereolens: error: "), captured.err
    assert _fill(case.expect, tmp_path, models) in lines[0], lines[0]
    places = _places(case, tmp_path, models)
    assert any(place in lines[0] for place in places), f"{lines[0]!r} names none of {sorted(places)}"
    assert _digest(tmp_path if case.in_tmp else tmp_path / "earlier") == before
    assert not list((tmp_path / "earlier").rglob(".*.tmp")), "a temporary file was left behind"



def test_bom_prefixed_csv_is_read_as_its_columns(tmp_path, tiny_masked_lm_dir, capsys):
    """A spreadsheet's UTF-8 byte-order mark is not part of the first column's name."""
    (tmp_path / "in.csv").write_bytes(b"\xef\xbb\xbf" + GOOD_PAIRS.encode("utf-8"))
    (tmp_path / "plain.csv").write_bytes(GOOD_PAIRS.encode("utf-8"))
    for name in ("in", "plain"):
        assert main(["score", "pairs", "--model", str(tiny_masked_lm_dir), "--metric", "pll", "--input",
                     str(tmp_path / f"{name}.csv"), "--output", str(tmp_path / f"{name}.out.csv"), "--no-cache"]) == 0
    assert (tmp_path / "in.out.csv").read_bytes() == (tmp_path / "plain.out.csv").read_bytes()


def test_outputs_are_valid_json_and_group_readable(tmp_path, tiny_masked_lm_dir):
    (tmp_path / "in.csv").write_text(GOOD_PAIRS, encoding="utf-8")
    old = os.umask(0o022)
    try:
        assert main(["score", "pairs", "--model", str(tiny_masked_lm_dir), "--metric", "pll", "--input",
                     str(tmp_path / "in.csv"), "--output", str(tmp_path / "o.csv"), "--no-cache"]) == 0
    finally:
        os.umask(old)
    from stereolens.io import FILE_MODE

    for name in ("o.csv", "o.summary.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == FILE_MODE
    assert FILE_MODE & 0o044 == 0o044  # group and others can read under the usual umask
    json.loads((tmp_path / "o.summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


def test_nan_scores_are_refused_by_the_report_stage(tmp_path, monkeypatch, capsys):
    """Scored pairs with a NaN score: crows-report stops at the line instead of averaging around it."""
    import yaml

    monkeypatch.chdir(tmp_path)
    scores = tmp_path / "data/processed/crows/m/scores.csv"
    scores.parent.mkdir(parents=True)
    scores.write_text("id,sent_stereo,sent_anti,bias_type,score_stereo,score_anti\n"
                      "0,a b,c b,gender,-3.5,-4.0\n1,d e,f e,gender,,-2.0\n", encoding="utf-8")
    (tmp_path / "data/processed/crows/m/scoring.json").write_text('{"skipped": null}', encoding="utf-8")
    params = {"model": {"id": "m", "name": "m", "kind": "causal"}, "metric": {"name": "causal"},
              "tracking": {"enabled": False}, "language": {"include": None}, "seed": 0,
              "study": {"crows": {"dataset": "crows_pairs", "limit": None, "bootstrap_resamples": 10}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    assert main(["stage", "crows-report"]) == 2
    assert "scores.csv line 3, column score_stereo: empty cell" in capsys.readouterr().err
    assert not (tmp_path / "reports/crows/m/summary.json").exists()


# --- stopping: a signal stops a stage within seconds and leaves its outputs as the guard promises (issue 35 item 8)
RAW_CROWS = "data/raw/crows_pairs/crows_pairs_anonymized.csv"


# A tiny model scores 3,000 pairs in under 7 s on CI's machine, so a stop sent after the first cached answer could
# arrive after the stage had finished (CI, 2026-11-28); 40,000 leave it a minute or more still to score.
MANY_PAIRS = 40_000


def _many_pairs(n: int) -> str:
    """CrowS-Pairs rows, each pair different so none is a cache hit; ``MANY_PAIRS`` keep a tiny model scoring
    long after a stop is sent."""
    return pd.DataFrame({"sent_more": [f"The doctors number {i} were kind and smart." for i in range(n)],
                         "sent_less": [f"The nurses number {i} were kind and smart." for i in range(n)],
                         "stereo_antistereo": "stereo", "bias_type": "gender"}).to_csv()


def _cache_entries(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("*.json")) if cache.is_dir() else 0


def _wait_for_scoring(proc: subprocess.Popen, cache: Path, more_than: int = 0, timeout_s: float = 300) -> None:
    """Until the stage has cached an answer beyond ``more_than``: it is scoring, past start-up and model loading."""
    deadline = time.monotonic() + timeout_s
    while _cache_entries(cache) <= more_than:
        assert proc.poll() is None, f"ended before scoring: {proc.returncode}"
        assert time.monotonic() < deadline, "no answer cached within the time allowed"
        time.sleep(0.2)


def _stage_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "DVC_ROOT")}
    return {**env, "STEREOLENS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(sys.path)}


def _ignore_sigint() -> None:
    # as a shell starts a script's background job: Python then installs no KeyboardInterrupt of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_scoring_stage_within_seconds_and_its_outputs_are_intact(signum, tmp_path, tiny_causal_lm_dir):
    """`crows-score` on a tiny model, started with SIGINT ignored (a script's background job, where the stage used
    to score on to the end and exit 0), is stopped by SIGINT or SIGTERM within seconds: exit 128 + the signal, one
    line, the earlier outputs byte-identical."""
    files = crows_stage({"id": "tiny", "name": str(tiny_causal_lm_dir), "kind": "causal"})
    files[RAW_CROWS] = _many_pairs(MANY_PAIRS)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    before = _digest(tmp_path / "data/processed")
    proc = subprocess.Popen([sys.executable, "-m", "stereolens", "stage", "crows-score"], cwd=tmp_path,
                            env=_stage_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_ignore_sigint)
    try:
        _wait_for_scoring(proc, tmp_path / "cache")
        sent = time.monotonic()
        proc.send_signal(signum)
        rc = proc.wait(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().strip().splitlines()
    assert rc == 128 + signum, err
    assert took < 15, f"stopped {took:.1f} s after {signal.Signals(signum).name}"
    assert len(err) == 1 and err[0].startswith(f"stereolens: interrupted ({signal.Signals(signum).name})"), err
    assert _digest(tmp_path / "data/processed") == before
    assert not list((tmp_path / "data/processed").rglob(".*.tmp"))


CROWS_DVC_YAML = """stages:
  crows_score:
    cmd: {python} -m stereolens stage crows-score
    deps:
      - data/raw/crows_pairs
    params:
      - model
      - metric
      - study.crows
    outs:
      - data/processed/crows/tiny/scores.csv
      - data/processed/crows/tiny/scoring.json
"""


@pytest.mark.slow
def test_stopping_dvc_repro_stops_its_stage_and_the_guard_puts_the_outputs_back(tmp_path, tiny_causal_lm_dir):
    """Under `dvc repro` (which removes a stage's outputs before it runs): SIGINT to the process group (Ctrl-C, or
    `kill -INT -- -PGID` from a script whose jobs ignore SIGINT), and SIGTERM to DVC alone (DVC dies at once; the
    kernel tells the stage, stages.signals), each stop the scoring stage within seconds, and its earlier outputs are
    checked out of the DVC cache again byte-identical."""
    import psutil

    files = crows_stage({"id": "tiny", "name": str(tiny_causal_lm_dir), "kind": "causal"})
    files["dvc.yaml"] = CROWS_DVC_YAML.format(python=sys.executable)
    files[RAW_CROWS] = _many_pairs(20)
    for name, text in files.items():
        if name.startswith("data/processed"):
            continue  # this time the earlier outputs are a real run's, recorded in dvc.lock
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    # DVC runs the stage through `$SHELL -c`: /bin/sh (dash on Debian) as on a machine without $SHELL (CI), the
    # shell that stays alive between DVC and the stage (tests/stages/test_signals.py has bash and no shell)
    env = {**_stage_env(tmp_path), "SHELL": "/bin/sh"}
    for command in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"],
                    [sys.executable, "-m", "dvc", "repro", "-q"]):
        subprocess.run(command, cwd=tmp_path, env=env, check=True, capture_output=True)
    earlier = _digest(tmp_path / "data/processed")
    assert earlier, "the first run wrote nothing"
    (tmp_path / RAW_CROWS).write_text(_many_pairs(MANY_PAIRS), encoding="utf-8")
    for how in ("SIGINT to the process group", "SIGTERM to DVC"):
        cached = _cache_entries(tmp_path / "cache")
        dvc = subprocess.Popen([sys.executable, "-m", "dvc", "repro"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=_ignore_sigint)
        try:
            _wait_for_scoring(dvc, tmp_path / "cache", more_than=cached)
            stage = psutil.Process(dvc.pid).children(recursive=True)
            assert stage, "no stage process under dvc repro"
            sent = time.monotonic()
            if how.startswith("SIGINT"):
                os.killpg(dvc.pid, signal.SIGINT)
            else:
                dvc.send_signal(signal.SIGTERM)
            _, alive = psutil.wait_procs(stage, timeout=60)  # DVC itself is waited for as our child, below
            rc = dvc.wait(timeout=60)
            took = time.monotonic() - sent
        finally:
            # whatever is left of this run (its own session): DVC and a stage that outlived it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(dvc.pid, signal.SIGKILL)
            dvc.wait()
        output = dvc.stdout.read()
        assert not alive and took < 20, f"{how}: {len(alive)} process(es) still running after {took:.0f} s\n{output}"
        assert rc != 0, output
        assert _digest(tmp_path / "data/processed") == earlier, f"{how}: outputs not restored\n{output}"


def test_make_without_params_yaml_says_what_is_missing_and_how_to_make_it(tmp_path):
    """DVC reads params.yaml while it parses dvc.yaml, so without it `dvc repro` says only "Could not find
    'model_ids'"; `make run` and `make repro` name the file and the command that makes it, in one line, exit 2."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    for target in ("repro", "run"):
        res = subprocess.run(["make", "-s", target], cwd=tmp_path, capture_output=True, text=True)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "params.yaml is missing" in lines[0] and "stereolens config compose" in lines[0], lines[0]
        assert res.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Makefile"]  # refused before any install or DVC
