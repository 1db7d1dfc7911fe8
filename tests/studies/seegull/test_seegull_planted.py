"""Known answers for the seegull study from a tiny causal LM trained here on a planted corpus.

Two fixture locales in SeeGULL's own file format, the same six attributes, eight invented identities each, three
of each identity's six tuples judged stereotypes (a seeded draw):

- ``es-MX`` (planted): for half of its stereotype tuples the corpus says "<Identity> son <attribute>." many
  times; the model should associate those attributes with those identities, so the AUC of the association for
  stereotype- against not-stereotype-majority tuples is well above 0.5 (about 0.75 expected: the planted half
  beats every non-stereotype tuple, the other half ties with them on average);
- ``es-ES`` (control): every identity appears with every attribute equally often, so the verdicts (drawn
  independently) carry nothing the model saw: the AUC is near 0.5.

The stages run end to end on these files (one MLflow run per locale); the AUC is checked against scipy's
Mann-Whitney U, and one tuple's association against a direct computation from the model's logits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from stereolens.cli import main

pytestmark = pytest.mark.slow  # trains a tiny model (about 15 s on a CPU), an MLflow SQLite store

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tiny_models  # noqa: E402

PLANTED = ["zorvanos", "quelmitas", "barunes", "tolcanos", "mireños", "palquitas", "sendaros", "vortinos"]
CONTROL = ["lumbreños", "carvitas", "dostanos", "fenilos", "grazunos", "hortenses", "jalvinos", "kestaños"]
ATTRIBUTES = ["valientes", "perezosos", "alegres", "tacaños", "ruidosos", "honrados"]
TEMPLATE = "{identity} son {attribute}."
MODEL_ID = "planted"


def fixture_tuples() -> tuple[pd.DataFrame, list[str]]:
    """The fixture tuples (locale, identity, attribute, stereotype, planted) and the training corpus."""
    rng = np.random.default_rng(7)
    rows, corpus = [], []
    for locale, identities in (("es-MX", PLANTED), ("es-ES", CONTROL)):
        for k, identity in enumerate(identities):
            stereotype = set(rng.choice(len(ATTRIBUTES), 3, replace=False).tolist())
            # two of three stereotype tuples planted for even identities, one for odd ones: half of 24
            planted = set(sorted(stereotype)[: 2 if k % 2 == 0 else 1]) if locale == "es-MX" else set()
            for j, attribute in enumerate(ATTRIBUTES):
                rows.append({"locale": locale, "k": k, "identity": identity, "attribute": attribute,
                             "stereotype": j in stereotype, "planted": j in planted})
                sentence = TEMPLATE.format(identity=identity.capitalize(), attribute=attribute)
                corpus += [sentence] * (6 if j in planted else 2 if locale == "es-ES" else 0)
    corpus += [TEMPLATE.format(identity="Las personas", attribute=a) for a in ATTRIBUTES] * 4
    return pd.DataFrame(rows), corpus


def seegull_file(rows: pd.DataFrame) -> str:
    """Rows in SeeGULL's file format: 2 or 3 of 3 stereotype votes for a stereotype, 1 of 3 otherwise; the
    English identity is shared by the k-th identity of both locales, so every tuple aligns across them."""
    votes = [(0, 3, 0) if s and k % 2 else (1, 2, 0) if s else (2, 1, 0) for s, k in zip(rows["stereotype"], rows["k"])]
    return pd.DataFrame({"identity": rows["identity"], "attribute": rows["attribute"],
                         "non_stereotype": [v[0] for v in votes], "stereotype": [v[1] for v in votes],
                         "unsure": [v[2] for v in votes], "mean_offensive_score": np.where(rows["k"] < 4, 2.0, -1.0),
                         "translated_identity": [f"people{k}" for k in rows["k"]],
                         "translated_attribute_list": rows["attribute"]}).to_csv(index=False)


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("seegull-planted")
    rows, corpus = fixture_tuples()
    model = tiny_models.build_trained_causal_lm(root / "planted-model", corpus, steps=200)
    raw = root / "data/raw/seegull_multilingual"
    raw.mkdir(parents=True)
    for locale, name in (("es-MX", "Spanish (es) in Mexico.csv"), ("es-ES", "Spanish (es) in Spain.csv")):
        (raw / name).write_text(seegull_file(rows[rows["locale"] == locale]), encoding="utf-8")
    # the ingest record: every file's sha256 (re-checked when read), the licence and the attribution
    from stereolens.io import sha256_file

    (raw / "PROVENANCE.json").write_text(json.dumps({
        "dataset": "seegull_multilingual", "license": "CC BY 4.0", "attribution": "Bhutani et al. 2024 (fixture)",
        "upstream_commit": "589a2580", "files": [{"file": p.name, "sha256": sha256_file(p)} for p in raw.glob("*.csv")]}))
    seed = root / "data/seed/seegull"
    seed.mkdir(parents=True)
    pd.DataFrame([{"language": "es", "template_id": "son", "template": TEMPLATE, "generic": "las personas",
                   "source": "authored"}]).to_csv(seed / "templates.csv", index=False)
    config = yaml.safe_load((Path(__file__).resolve().parents[3] / "params.yaml").read_text(encoding="utf-8"))
    model_cfg = {"id": MODEL_ID, "name": str(model), "kind": "causal", "backend": "hf", "dtype": "float32",
                 "device": "cpu"}
    study = config["study"]["seegull"]
    study.update({"data": str(raw), "seed_dir": str(seed), "locales": ["es-MX", "es-ES"],
                  "sample": {"per_verdict": None, "seed": 0}})
    study["analysis"].update({"resamples": 300, "min_aligned": 10})
    uri = f"sqlite:///{root}/mlruns/mlflow.db"
    (root / "mlruns").mkdir()
    params = {"model": model_cfg, "models": {MODEL_ID: model_cfg}, "model_ids": [MODEL_ID],
              "tracking": {"enabled": True, "tracking_uri": uri, "artifact_location": str(root / "mlruns/artifacts"),
                           "experiment": "stereolens"},
              "study": {"seegull": study}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return root, rows, uri


@pytest.fixture(scope="module")
def stages_done(planted_run):
    import os

    root = planted_run[0]
    before = os.getcwd()
    os.chdir(root)
    os.environ["STEREOLENS_CACHE_DIR"] = str(root / "cache")
    try:
        assert main(["stage", "seegull-associate", "--model", MODEL_ID]) == 0
        assert main(["stage", "seegull-report", "--model", MODEL_ID]) == 0
    finally:
        os.chdir(before)
        os.environ.pop("STEREOLENS_CACHE_DIR", None)
    associations = pd.read_csv(root / f"data/processed/seegull/{MODEL_ID}/associations.csv")
    summary = json.loads((root / f"reports/seegull/{MODEL_ID}/summary.json").read_text(encoding="utf-8"))
    return associations, summary


def test_planted_associations_raise_the_auc_and_the_control_stays_near_half(stages_done):
    associations, summary = stages_done
    planted, control = summary["by_locale"]["es-MX"], summary["by_locale"]["es-ES"]
    assert (planted["n_stereotype"], planted["n_not"]) == (24, 24) and (control["n_stereotype"], control["n_not"]) == (24, 24)
    assert planted["auc"] > 0.7 and planted["auc_low"] > 0.5, planted
    assert control["auc_low"] <= 0.5 <= control["auc_high"] and abs(control["auc"] - 0.5) < 0.2, control
    # the planted tuples themselves carry the effect
    mx = associations[associations["locale"] == "es-MX"]
    assert mx.loc[mx["stereotype_votes"] >= 2, "association"].max() > mx.loc[mx["stereotype_votes"] < 2,
                                                                            "association"].max()


def test_the_auc_is_mann_whitney_u_from_the_associations_file(stages_done):
    associations, summary = stages_done
    for locale, block in summary["by_locale"].items():
        rows = associations[associations["locale"] == locale]
        pos = rows.loc[rows["stereotype_votes"] * 2 > rows["n_annotators"], "association"]
        neg = rows.loc[rows["non_stereotype_votes"] * 2 > rows["n_annotators"], "association"]
        u = stats.mannwhitneyu(pos, neg).statistic
        assert block["auc"] == pytest.approx(u / (len(pos) * len(neg)), rel=1e-6)  # summary.json keeps 7 digits
        assert block["auc_ci"] == [block["auc_low"], block["auc_high"]]
        rho = stats.spearmanr(rows["association"], rows["stereotype_votes"] / 3).statistic
        assert block["spearman"] == pytest.approx(rho, abs=1e-6)


def test_the_association_of_a_tuple_is_the_ilps_from_the_models_logits(planted_run, stages_done):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = planted_run[0]
    associations, _ = stages_done
    tok = AutoTokenizer.from_pretrained(root / "planted-model")
    model = AutoModelForCausalLM.from_pretrained(root / "planted-model").eval()

    def logprob(context: str, word: str) -> float:
        ctx = tok(context, add_special_tokens=False)["input_ids"]
        ids = [tok.bos_token_id] + tok(context + " " + word, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        return float(sum(logp[t - 1, ids[t]] for t in range(1 + len(ctx), len(ids))))

    for _, row in associations.iloc[[0, 7, 60]].iterrows():
        identity_term = logprob(f"{row['identity'].capitalize()} son", row["attribute"])
        generic_term = logprob("Las personas son", row["attribute"])
        assert row["target_logprob"] == pytest.approx(identity_term, abs=1e-4)
        assert row["generic_logprob"] == pytest.approx(generic_term, abs=1e-4)
        assert row["association"] == pytest.approx(identity_term - generic_term, abs=1e-4)


def test_one_mlflow_run_per_model_and_locale(planted_run, stages_done):
    from stereolens.tracking.compare import compare_runs

    _, summary = stages_done
    table = compare_runs("seegull", tracking_uri=planted_run[2])
    assert sorted(set(table["run_name"])) == ["seegull/associate/planted", "seegull/report/planted/es-ES",
                                              "seegull/report/planted/es-MX"]
    runs = table.set_index("run_name")
    for locale in ("es-MX", "es-ES"):
        run = runs.loc[f"seegull/report/planted/{locale}"]
        assert run["auc"] == pytest.approx(summary["by_locale"][locale]["auc"], rel=1e-6)
        assert run["n_stereotype"] == 24 and run["language"] == locale
    assert runs.loc["seegull/associate/planted", "n_tuples_es-MX"] == 48


def test_the_cross_locale_fit_finds_the_own_verdict_and_not_the_other(stages_done):
    _, summary = stages_done
    fit = next(c for c in summary["cross_locale"] if (c["locale"], c["other_locale"]) == ("es-MX", "es-ES"))
    assert fit["n_aligned"] == 48 and fit["n_identities"] == 8
    own, other = fit["own verdict"], fit["other locale's verdict"]
    assert own["ci_low"] > 0 and abs(other["estimate"]) < own["estimate"]


def test_the_report_and_the_evaluate_command_agree(planted_run, stages_done, tmp_path, capsys):
    root = planted_run[0]
    _, summary = stages_done
    report = root / f"reports/seegull/{MODEL_ID}"
    for name in ("by_locale.csv", "cross_locale.csv", "report.md", "templates.csv", "headline.json",
                 "figures/association_es-MX.png", "figures/association_es-MX.svg", "figures/auc_by_locale.png"):
        assert (report / name).is_file(), name
    text = (report / "report.md").read_text(encoding="utf-8")
    assert "3 annotators" in text and "dataset's authors" in text
    # the licence and attribution of the ingest record, on the page and in the summary the site shows
    assert "Dataset: Bhutani et al. 2024 (fixture); licence CC BY 4.0; upstream commit 589a2580." in text
    assert (summary["dataset"]["license"], summary["dataset"]["attribution"]) == ("CC BY 4.0", "Bhutani et al. 2024 (fixture)")
    assert any("licence CC BY 4.0; attribution: Bhutani et al. 2024 (fixture)" in n for n in summary["provenance"]["notes"])
    assert summary["provenance"]["annotation_source"] == "human" and summary["provenance"]["source"] == {"authored": 1}
    assert main(["seegull", "evaluate", "--associations", str(root / f"data/processed/seegull/{MODEL_ID}/associations.csv"),
                 "--output", str(tmp_path / "out"), "--seegull", str(root / "data/raw/seegull_multilingual"),
                 "--pair", "es-MX:es-ES", "--pair", "es-ES:es-MX", "--resamples", "300", "--model", MODEL_ID]) == 0
    again = json.loads((tmp_path / "out/summary.json").read_text(encoding="utf-8"))
    assert again["by_locale"] == summary["by_locale"] and again["cross_locale"] == summary["cross_locale"]
    assert "es-MX: AUC" in capsys.readouterr().out


def test_every_file_the_stages_wrote_is_an_output_dvc_yaml_declares(planted_run, stages_done):
    """What `dvc repro` caches and `dvc checkout` restores: the two stages write nothing else."""
    root = planted_run[0]
    stages = yaml.safe_load((Path(__file__).resolve().parents[3] / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    declared = [str(next(iter(o)) if isinstance(o, dict) else o).replace("${item}", MODEL_ID)
                for name in ("seegull_associate", "seegull_report")
                for o in [*stages[name]["do"].get("outs", []), *stages[name]["do"].get("metrics", [])]]
    written = [p.relative_to(root).as_posix() for folder in ("data/processed/seegull", "reports/seegull")
               for p in (root / folder).rglob("*") if p.is_file()]
    assert written and all(any(w == d or w.startswith(d + "/") for d in declared) for w in written), \
        sorted(w for w in written if not any(w == d or w.startswith(d + "/") for d in declared))
    assert all((root / d).exists() for d in declared)
