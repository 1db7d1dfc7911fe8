"""Robustness of the Shapley ranking (issue 32): the same game's values from other permutation seeds and, for a
few players, exactly; reusing the headline's coalitions changes no value, and the robustness table's rank
correlations are scipy's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.studies.heads.attribution import (
    ShapleySettings, SplitSettings, heads_of_layers, probe_and_attribute, shapley_seed, stability_table,
)
from stereolens.studies.heads.probe import GatedEncoder, ProbeSettings
from stereolens.studies.heads.report import ranking_robustness, top_decision
from stereolens.studies.heads.shapley import (
    CoalitionValues, exact_from, exact_shapley, permutation_shapley, sample_permutations,
)

from test_heads_shapley import glove_game, weighted_game


def test_a_shared_cache_changes_no_value_and_evaluates_only_new_coalitions():
    first, second = sample_permutations(4, 6, seed=1), sample_permutations(4, 6, seed=2)
    values = CoalitionValues(weighted_game)
    permutation_shapley(weighted_game, first, values=values)
    met = len(values)
    again = permutation_shapley(weighted_game, second, values=values)
    fresh = permutation_shapley(weighted_game, second)
    np.testing.assert_array_equal(again.values, fresh.values)
    np.testing.assert_array_equal(again.standard_errors, fresh.standard_errors)
    assert met < len(values) <= 16 and len(values) - met < fresh.n_evaluations


def test_exact_values_from_the_cache_are_the_subset_formulas():
    values = CoalitionValues(glove_game)
    permutation_shapley(glove_game, sample_permutations(3, 2, seed=0), values=values)
    calls = values.n_calls
    np.testing.assert_allclose(exact_from(values, 3), [1 / 6, 1 / 6, 2 / 3])
    assert values.n_calls == calls + 1 and len(values) == 8  # the unmet coalitions in one batched call
    np.testing.assert_allclose(exact_from(CoalitionValues(weighted_game), 4), exact_shapley(weighted_game, 4))


@pytest.fixture(scope="module")
def attributed(mlm, instances):
    """MX attributed with two other seeds and the exact values (with the exact values computed afresh, every
    coalition in one call of the probe's value function, while its head gates are on), and the headlines of runs
    with seeds 1 and 2.  The value is minus the probe's cross-entropy: a coalition evaluated in another batch can
    differ in the last float digits, which an accuracy could turn into a flipped prediction, a cross-entropy only
    into 1e-7."""
    model, tok = mlm
    part = instances[instances["country"] == "MX"]

    def run(seed: int, stability_seeds: int):
        encoder = GatedEncoder(model.base_model, tok, pooling="first", gated_layers=[0, 1], reuse_prefix=True)
        try:
            result, value_fn = probe_and_attribute(
                encoder, part, heads_of_layers([0, 1], encoder.gate.n_heads), country="MX", split=SplitSettings(),
                probe_settings=ProbeSettings(epochs=30, batch_size=16),
                shapley=ShapleySettings(permutations=6, antithetic=True, seed=seed, stability_seeds=stability_seeds,
                                        value="loss"))
            return result, exact_shapley(value_fn, len(result.players))
        finally:
            encoder.gate.remove()

    return run(0, 2), {1: run(1, 0)[0], 2: run(2, 0)[0]}


def test_another_seed_gives_what_a_run_with_that_seed_gives(attributed):
    (result, _), runs = attributed
    seeds = [e for e in result.stability if e.kind == "seed"]
    assert [e.seed_offset for e in seeds] == [1, 2] and [e.seed for e in seeds] == [shapley_seed(k, "MX") for k in (1, 2)]
    for e in seeds:
        np.testing.assert_allclose(e.values, runs[e.seed_offset].estimate.values, atol=1e-6)
        np.testing.assert_allclose(e.standard_errors, runs[e.seed_offset].estimate.standard_errors, atol=1e-6)
        assert not np.allclose(e.values, result.estimate.values, atol=1e-4)  # another draw, another estimate
    assert result.probe_summary["stability_seeds"] == [shapley_seed(1, "MX"), shapley_seed(2, "MX")]


def test_the_exact_values_are_the_subset_formula_on_the_probe_game(attributed):
    (result, afresh), _ = attributed
    exact = next(e for e in result.stability if e.kind == "exact")
    np.testing.assert_allclose(exact.values, afresh, atol=1e-6)
    assert np.isnan(exact.standard_errors).all()
    table = stability_table(result)
    assert table.groupby("estimate").size().to_dict() == {"exact": 4, "seed": 8}
    assert result.probe_summary["n_coalitions_evaluated"] + result.probe_summary["n_coalitions_evaluated_stability"] == 16


def _shapley(values: dict[str, list[float]]) -> pd.DataFrame:
    rows = [{"country": c, "layer": i // 2, "head": i % 2, "shapley": v, "se": 0.01}
            for c, vals in values.items() for i, v in enumerate(vals)]
    table = pd.DataFrame(rows)
    table["rank"] = table.groupby("country")["shapley"].rank(ascending=False, method="first").astype(int)
    return table


def _stability(estimates: list[tuple[str, str, int | None, list[float]]]) -> pd.DataFrame:
    frames = []
    for country, kind, offset, values in estimates:
        part = _shapley({country: values}).assign(estimate=kind, seed_offset=offset,
                                                  permutation_seed=None if offset is None else 100 + offset)
        frames.append(part)
    return pd.concat(frames, ignore_index=True)


CFG = {"shapley": {"permutations": 8, "seed": 0, "stability_seeds": 2}}


def test_the_robustness_table_is_spearman_and_the_top_head_against_the_headline():
    headline = {"Mexico": [0.3, 0.1, -0.2, 0.0], "Spain": [0.0, 0.0, 0.0, 0.0]}
    seed_1, seed_2, exact = [0.2, 0.25, -0.1, 0.0], [0.4, 0.1, 0.0, -0.3], [0.3, 0.1, -0.2, 0.05]
    table = ranking_robustness(_shapley(headline), _stability(
        [("Mexico", "seed", 1, seed_1), ("Mexico", "seed", 2, seed_2), ("Mexico", "exact", None, exact),
         ("Spain", "seed", 1, [0.0] * 4), ("Spain", "seed", 2, [0.1, 0, 0, 0]), ("Spain", "exact", None, [0.0] * 4)]), CFG)
    mexico = table[table["cell"] == "Mexico"].set_index("variant")
    assert mexico.index.tolist() == ["headline", "seed 1", "seed 2", "exact"]
    for variant, values in (("seed 1", seed_1), ("seed 2", seed_2), ("exact", exact)):
        assert mexico.loc[variant, "estimate"] == pytest.approx(stats.spearmanr(headline["Mexico"], values).statistic)
    assert mexico.loc["headline", "decision"] == "top head L0H0" and mexico.loc["seed 1", "decision"] == "top head L0H1"
    assert mexico["agrees"].tolist() == [True, False, True, True]
    assert "top 3 heads shared with the headline: 2 of 3" in mexico.loc["seed 2", "reason"]
    # Spain has no ranking: its headline decision says so, and a seed that finds one disagrees
    spain = table[table["cell"] == "Spain"].set_index("variant")
    assert spain.loc["headline", "decision"] == "no ranking: all 4 Shapley values are +0"
    assert np.isnan(spain.loc["headline", "estimate"]) and "no ranking of heads" in spain.loc["headline", "reason"]
    assert spain["agrees"].tolist() == [True, True, False, True]
    assert "undefined" in spain.loc["seed 1", "reason"]


def test_what_is_not_run_says_why():
    shap = _shapley({"Mexico": [0.3, 0.1, -0.2, 0.0]})
    empty = _stability([("Mexico", "seed", 1, [0.0] * 4)]).iloc[0:0]
    off = ranking_robustness(shap, empty, {"shapley": {**CFG["shapley"], "stability_seeds": 0}})
    assert off["reason"].tolist()[1:] == ["study.heads.shapley.stability_seeds is 0",
                                          "computed with the other seeds' estimates; study.heads.shapley.stability_seeds is 0"]
    assert not off["ran"].tolist()[1] and not off["ran"].tolist()[2]
    many = _shapley({"Mexico": list(np.linspace(0, 1, 12))})
    table = ranking_robustness(many, _stability([("Mexico", "seed", 1, list(np.linspace(0, 1, 12)))]), CFG)
    assert table["reason"].tolist()[-1] == "12 players: 2^12 coalitions (exact values are computed up to 10 players)"


def test_tied_top_heads_are_named_together():
    assert top_decision(_shapley({"Mexico": [0.2, 0.2, 0.0, -0.1]})) == "tied top heads L0H0, L0H1"
