"""Agreement metrics against statsmodels, the krippendorff package, published values and CrowS-Pairs."""

from __future__ import annotations

import ast

import krippendorff
import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.inter_rater import aggregate_raters, cohens_kappa
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from stereolens.annotation import agreement as A
from stereolens.annotation.scales import LIKERT5
from stereolens.errors import DataError

# Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers x 12 units
KRIPP_EXAMPLE = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, np.nan, np.nan, np.nan],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, np.nan, 3],
        [np.nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, np.nan],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, np.nan],
    ]
)


def to_long(matrix: np.ndarray) -> pd.DataFrame:
    """annotators x items (NaN = missing) -> long format."""
    rows = [
        (f"i{i}", f"a{a}", matrix[a, i])
        for a in range(matrix.shape[0])
        for i in range(matrix.shape[1])
        if not np.isnan(matrix[a, i])
    ]
    return pd.DataFrame(rows, columns=["item_id", "annotator_id", "label"])


@pytest.fixture(scope="module")
def noisy_ratings() -> np.ndarray:
    rng = np.random.default_rng(7)
    truth = rng.integers(1, 6, 150)
    m = np.clip(truth[None, :] + rng.integers(-1, 2, (6, 150)), 1, 5).astype(float)
    m[rng.random(m.shape) < 0.25] = np.nan
    return m


@pytest.mark.parametrize("level, published", [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_krippendorff_published_example(level, published):
    res = A.krippendorff_alpha(to_long(KRIPP_EXAMPLE), level, n_boot=0)
    assert res.value == pytest.approx(published, abs=5e-4)
    assert res.value == pytest.approx(krippendorff.alpha(reliability_data=KRIPP_EXAMPLE, level_of_measurement=level))
    assert res.n == 11  # unit 12 has a single value: not pairable


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_matches_package_with_missing(noisy_ratings, level):
    res = A.krippendorff_alpha(to_long(noisy_ratings), level, n_boot=200, seed=1)
    expected = krippendorff.alpha(reliability_data=noisy_ratings, level_of_measurement=level)
    assert res.value == pytest.approx(expected, rel=1e-10)
    assert res.ci_low < res.value < res.ci_high
    assert res.n_annotators == 6


def test_fleiss_matches_statsmodels():
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 3, 120)
    ratings = np.where(rng.random((120, 5)) < 0.7, truth[:, None], rng.integers(0, 3, (120, 5)))
    long = to_long(ratings.T.astype(float))
    res = A.fleiss_kappa(long, n_boot=300)
    assert res.value == pytest.approx(sm_fleiss_kappa(aggregate_raters(ratings)[0]), rel=1e-12)
    assert res.ci_low < res.value < res.ci_high and res.n == 120


def test_fleiss_perfect_and_undefined():
    perfect = to_long(np.array([[0, 1, 2, 0], [0, 1, 2, 0], [0, 1, 2, 0]], dtype=float))
    assert A.fleiss_kappa(perfect, n_boot=0).value == pytest.approx(1.0)
    one_label = to_long(np.zeros((3, 4)))
    assert np.isnan(A.fleiss_kappa(one_label, n_boot=0).value)


@pytest.mark.parametrize("level, wt", [("nominal", None), ("ordinal", "linear"), ("interval", "quadratic")])
def test_cohen_matches_statsmodels(level, wt):
    rng = np.random.default_rng(11)
    a = rng.integers(1, 6, 200)
    b = np.clip(a + rng.integers(-1, 2, 200), 1, 5)
    long = to_long(np.vstack([a, b]).astype(float))
    table = pd.crosstab(a, b).reindex(index=range(1, 6), columns=range(1, 6), fill_value=0).to_numpy()
    res = A.cohen_kappa(long, level, n_boot=100)
    assert res.value == pytest.approx(cohens_kappa(table, wt=wt).kappa, rel=1e-10)
    assert res.metric == "cohen"


def test_cohen_light_and_named_pair():
    m = np.array([[1, 2, 1, 2, 1, 1], [1, 2, 1, 2, 2, 1], [2, 2, 1, 2, 1, 1]], dtype=float)
    long = to_long(m)
    pair = A.cohen_kappa(long, annotators=["a0", "a1"], n_boot=0)
    light = A.cohen_kappa(long, n_boot=0, min_overlap=6)
    assert light.metric == "cohen_light" and pair.metric == "cohen"
    pairs = [A.cohen_kappa(long, annotators=p, n_boot=0).value for p in (["a0", "a1"], ["a0", "a2"], ["a1", "a2"])]
    assert light.value == pytest.approx(np.mean(pairs))
    with pytest.raises(DataError):
        A.cohen_kappa(long, annotators=["a0", "zz"])
    with pytest.raises(DataError, match="no annotator pair shares 7"):
        A.cohen_kappa(long, min_overlap=7)


def test_cohen_light_on_sparse_crowd_design():
    # 40 annotators, 3 per item: only pairs with enough shared items enter the mean
    from stereolens.annotation.scales import YES_NO
    from stereolens.annotation.simulate import simulate_annotations

    long = simulate_annotations([f"i{k}" for k in range(400)], 40, YES_NO, reliability=0.8, per_item=3, seed=0)
    res = A.cohen_kappa(long, n_boot=50, min_overlap=5)
    assert res.metric == "cohen_light" and 0.4 < res.value < 0.9 and res.ci_low < res.value < res.ci_high


def test_raw_agreement_known_answer():
    # item 1: 3 of 3 agree (1.0); item 2: labels x, x, y -> 1 of 3 pairs agree
    long = pd.DataFrame(
        {"item_id": ["1"] * 3 + ["2"] * 3, "annotator_id": list("abc") * 2, "label": ["x", "x", "x", "x", "x", "y"]}
    )
    assert A.raw_agreement(long, n_boot=0).value == pytest.approx((1 + 1 / 3) / 2)


def test_bootstrap_is_seeded_and_bca_runs(noisy_ratings):
    long = to_long(noisy_ratings)
    r1 = A.krippendorff_alpha(long, "interval", n_boot=200, seed=5)
    r2 = A.krippendorff_alpha(long, "interval", n_boot=200, seed=5)
    assert (r1.ci_low, r1.ci_high) == (r2.ci_low, r2.ci_high)
    bca = A.krippendorff_alpha(long, "interval", n_boot=200, seed=5, ci_method="BCa")
    assert bca.ci_method == "BCa" and bca.ci_low < bca.value < bca.ci_high


def test_duplicate_judgement_rejected():
    long = pd.DataFrame({"item_id": ["1", "1"], "annotator_id": ["a", "a"], "label": ["x", "y"]})
    with pytest.raises(DataError, match="more than one label"):
        A.fleiss_kappa(long)


def test_vote_ratio_table_known_counts():
    # EspanStereo tables E1-E5: valid = Likert >= 3; five validators per stereotype
    votes = {"s1": [5, 4, 3, 4, 5], "s2": [5, 4, 1, 4, 5], "s3": [1, 2, 3, 4, 5], "s4": [1, 1, 2, 4, 5], "s5": [3, 3, 3, 3, 3]}
    cats = {"s1": "Race", "s2": "Race", "s3": "Age", "s4": "Age", "s5": "Age"}
    long = pd.DataFrame(
        [(i, f"v{k}", v, cats[i]) for i, vs in votes.items() for k, v in enumerate(vs)],
        columns=["item_id", "annotator_id", "label", "category"],
    )
    res = A.vote_ratio_table(long, positive=3, by="category", n_boot=100)
    assert list(res.table.columns) == ["5:0", "4:1", "3:2", "Total"]
    assert res.table.loc["Race"].tolist() == [1, 1, 0, 2]
    assert res.table.loc["Age"].tolist() == [1, 0, 1, 2]  # s4 (2:3) is not validated
    assert res.table.loc["Total", "Total"] == 4
    share = res.shares.set_index("ratio").loc["5:0"]
    assert share["share"] == pytest.approx(0.5) and share["ci_low"] <= 0.5 <= share["ci_high"]


def test_landis_koch_labels():
    assert [A.landis_koch(v) for v in (-0.1, 0.1, 0.3, 0.5, 0.7, 0.9)] == [
        "poor", "slight", "fair", "moderate", "substantial", "almost perfect"
    ]


def crows_validation_labels(data_mirror) -> pd.DataFrame:
    df = pd.read_csv(data_mirror / "crows_pairs" / "crows_pairs_anonymized.csv")
    rows = []
    for item, labels, annotators in zip(df.iloc[:, 0], df["annotations"], df["anon_annotators"]):
        for annotator, label in zip(ast.literal_eval(annotators), ast.literal_eval(labels)):
            # a validator may tick several bias types or none (pair judged invalid)
            rows.append((str(item), annotator, "+".join(sorted(label)) or "none"))
    return pd.DataFrame(rows, columns=["item_id", "annotator_id", "label"])


def test_crows_pairs_validation_agreement(data_mirror):
    long = crows_validation_labels(data_mirror)
    assert long.groupby("item_id").size().eq(5).all()
    res = A.fleiss_kappa(long, n_boot=200)
    table = pd.crosstab(long["item_id"], long["label"]).to_numpy()
    assert res.value == pytest.approx(sm_fleiss_kappa(table), rel=1e-12)
    assert res.n == 1508 and 0.6 < res.value < 0.67  # 0.634: "substantial" per Landis-Koch
    codes = {c: i for i, c in enumerate(sorted(long["label"].unique()))}
    wide = long.pivot(index="annotator_id", columns="item_id", values="label").apply(lambda s: s.map(codes))
    alpha = A.krippendorff_alpha(long, "nominal", n_boot=100)
    assert alpha.value == pytest.approx(
        krippendorff.alpha(reliability_data=wide.to_numpy(dtype=float), level_of_measurement="nominal"), rel=1e-10
    )


def test_cohen_ordinal_counts_an_unused_category_as_a_step():
    # two raters on a 1..5 Likert scale; nobody ever answers 3
    rng = np.random.default_rng(5)
    a = rng.choice([1, 2, 4, 5], 120)
    b = np.where(rng.random(120) < 0.6, a, rng.choice([1, 2, 4, 5], 120))
    long = to_long(np.vstack([a, b]).astype(float))
    full = pd.crosstab(a, b).reindex(index=range(1, 6), columns=range(1, 6), fill_value=0).to_numpy()
    assert full[2].sum() == 0 and full[:, 2].sum() == 0
    # statsmodels on the full 1..5 table: weights |i - j| / 4 over the scale positions
    expected = cohens_kappa(full, weights=np.arange(5), wt="linear").kappa
    res = A.cohen_kappa(long, "ordinal", scale=LIKERT5, n_boot=0)
    assert res.value == pytest.approx(expected, rel=1e-12)
    assert A.cohen_kappa(long, "ordinal", scale=[1, 2, 3, 4, 5], n_boot=0).value == pytest.approx(expected, rel=1e-12)
    # by hand: kappa_w = 1 - sum(w * p_obs) / sum(w * p_exp)
    p = full / full.sum()
    w = np.abs(np.subtract.outer(np.arange(5), np.arange(5))) / 4
    assert res.value == pytest.approx(1 - (w * p).sum() / (w * np.outer(p.sum(1), p.sum(0))).sum(), rel=1e-12)
    # observed categories only (2 -> 4 one step): a different, smaller-step answer
    observed_only = A.cohen_kappa(long, "ordinal", n_boot=0).value
    assert observed_only == pytest.approx(cohens_kappa(full[[0, 1, 3, 4]][:, [0, 1, 3, 4]], wt="linear").kappa)
    assert abs(observed_only - expected) > 1e-3
    with pytest.raises(DataError, match=r"label 5.0 is not on the scale domain \[1, 2, 3, 4\]"):
        A.cohen_kappa(long, "ordinal", scale=[1, 2, 3, 4], n_boot=0)


def test_cohen_interval_weights_use_the_values_not_their_ranks():
    # slider ratings at unequal spacing: -50, -10, 0, 40
    values = np.array([-50.0, -10.0, 0.0, 40.0])
    rng = np.random.default_rng(9)
    ia = rng.integers(0, 4, 150)
    ib = np.where(rng.random(150) < 0.5, ia, rng.integers(0, 4, 150))
    long = to_long(np.vstack([values[ia], values[ib]]))
    table = pd.crosstab(ia, ib).reindex(index=range(4), columns=range(4), fill_value=0).to_numpy()
    expected = cohens_kappa(table, weights=values, wt="quadratic").kappa
    res = A.cohen_kappa(long, "interval", n_boot=0)
    assert res.value == pytest.approx(expected, rel=1e-12)
    assert res.value != pytest.approx(cohens_kappa(table, wt="quadratic").kappa, rel=1e-3)  # rank spacing differs
