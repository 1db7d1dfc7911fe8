"""The executor config group: parsing, refusal of bad values, and that local stays local (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stereolens.errors import ConfigError
from stereolens.models import ModelSpec, ResponseCache, load_model
from stereolens.models.executor import ExecutorSpec, executor_from_config, flat_map_shards, is_sharded, shards
from stereolens.stages.common import executor_config

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_configs_parse():
    local = executor_from_config(yaml.safe_load((REPO / "conf/executor/local.yaml").read_text()))
    ray = executor_from_config(yaml.safe_load((REPO / "conf/executor/ray.yaml").read_text()))
    assert local == ExecutorSpec() and local.is_local
    assert ray.kind == "ray" and ray.address is None and ray.actors == 2 and ray.shard_size == 64
    assert ray.num_gpus_per_actor == 0.0 and ray.object_store_memory_mb == 256
    assert executor_from_config(None).is_local


@pytest.mark.parametrize("cfg, message", [
    ({"kind": "dask"}, "executor.kind='dask' is not one of local, ray"),
    ({"kind": "ray", "actors": 0}, "executor.actors must be a positive integer, got 0"),
    ({"kind": "ray", "shard_size": 2.5}, "executor.shard_size must be a positive integer, got 2.5"),
    ({"kind": "ray", "num_gpus_per_actor": -1}, "executor.num_gpus_per_actor must be a number >= 0, got -1"),
    ({"kind": "ray", "actor": 2}, "unknown key executor.actor"),
    ({"kind": "ray", "runtime_env": "x"}, "executor.runtime_env must be a mapping"),
])
def test_bad_values_are_one_clear_line(cfg, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        executor_from_config(cfg)


def test_shards_cover_every_item_once_in_order():
    assert shards(10, 4) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert shards(0, 4) == []
    assert [i for s in shards(7, 3) for i in range(7)[s]] == list(range(7))


def test_local_executor_returns_the_backend_itself(tiny_causal_lm_dir, tmp_path):
    spec = ModelSpec(name=str(tiny_causal_lm_dir), kind="causal")
    model = load_model(spec, cache=ResponseCache(tmp_path), executor={"kind": "local"})
    assert type(model).__name__ == "HFCausalLM" and not is_sharded(model)
    # a study's own request function runs in place for a local model
    assert flat_map_shards(model, len, {"items": [1, 2]}, {}) is None


def test_stage_reads_the_executor_section_or_runs_locally_without_it(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"model": {"id": "x"}}))
    assert executor_config(params) is None  # a params file composed before conf/executor existed
    params.write_text(yaml.safe_dump({"executor": {"kind": "ray", "actors": 3}}))
    assert executor_config(params) == {"kind": "ray", "actors": 3}
    with pytest.raises(ConfigError, match="params file not found"):
        executor_config(tmp_path / "missing.yaml")
