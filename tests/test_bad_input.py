"""Bad input, one clear line, nothing lost (issues #17 item 4 and #18).

Each case feeds one kind of bad input to a real command and asserts:

* exit status 2 and exactly one line on stderr, ``stereolens: error: ...``, that
  names the place (file and line/column, or the key) and what is wrong;
* every output an earlier good run left behind is byte-identical afterwards.

The commands run in-process through :func:`stereolens.cli.main` (the console
script's body) with the tiny local models of ``conftest.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
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


CASES = _cases()


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
            model = yaml.safe_load(case.files["params.yaml"]).get("model") or {}
        except yaml.YAMLError:  # the case is a broken params.yaml
            model = {}
        places |= {v for k, v in model.items() if k in ("name", "base_url") and isinstance(v, str)}
    return places - {""}


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
