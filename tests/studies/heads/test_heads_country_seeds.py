"""Each country draws its own Shapley permutations (a shared draw shares its sampling error across countries
and pushes their Spearman correlations up), and a rerun draws the same ones."""

from __future__ import annotations

import numpy as np
import pytest

from stereolens.studies.heads.attribution import (
    ShapleySettings, SplitSettings, heads_of_layers, probe_and_attribute, shapley_seed,
)
from stereolens.studies.heads.probe import GatedEncoder, ProbeSettings


def _attribute(mlm, instances, country: str):
    model, tok = mlm
    encoder = GatedEncoder(model.base_model, tok, pooling="first", gated_layers=[0, 1], reuse_prefix=True)
    try:
        result, _ = probe_and_attribute(
            encoder, instances[instances["country"] == country], heads_of_layers([0, 1], encoder.gate.n_heads),
            country=country, split=SplitSettings(), probe_settings=ProbeSettings(epochs=2, batch_size=16),
            shapley=ShapleySettings(permutations=6, antithetic=False, seed=0))
    finally:
        encoder.gate.remove()
    return result


@pytest.fixture(scope="module")
def results(mlm, instances):
    return {"MX": _attribute(mlm, instances, "MX"), "ES": _attribute(mlm, instances, "ES"),
            "MX again": _attribute(mlm, instances, "MX")}


def test_two_countries_walk_different_permutations(results):
    mx, es = results["MX"].estimate.permutations, results["ES"].estimate.permutations
    assert mx.shape == es.shape == (6, 4)
    assert not np.array_equal(mx, es)
    assert results["MX"].probe_summary["shapley_seed"] != results["ES"].probe_summary["shapley_seed"]


def test_a_rerun_draws_the_same_permutations_from_the_recorded_seed(results):
    np.testing.assert_array_equal(results["MX"].estimate.permutations, results["MX again"].estimate.permutations)
    np.testing.assert_array_equal(results["MX"].estimate.values, results["MX again"].estimate.values)
    assert results["MX"].probe_summary["shapley_seed"] == shapley_seed(0, "MX")  # written to probe.json


def test_the_country_seed_depends_on_the_base_seed_too():
    assert shapley_seed(0, "Mexico") != shapley_seed(1, "Mexico")
    assert shapley_seed(0, "Mexico") == shapley_seed(0, "Mexico")
