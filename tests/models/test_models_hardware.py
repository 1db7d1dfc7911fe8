"""Reduced precision only where the hardware has it (issue 36, part 1b): the check, the three policies,
and the precision a run records."""

from __future__ import annotations

import pytest

from stereolens.errors import ConfigError, ModelLoadError
from stereolens.models.base import ModelSpec
from stereolens.models.hardware import capability_record, effective_dtype, native_support, resolve_dtype
from stereolens.models.registry import spec_from_config
from stereolens.tracking.mlflow_run import computed_precision

# /proc/cpuinfo flag sets of the two machines the issue names: AVX-512 with bf16, and AVX2 only
AVX512_BF16 = frozenset({"sse4_2", "avx2", "avx512f", "avx512_bf16", "avx512_vnni"})
AVX2_ONLY = frozenset({"sse4_2", "avx2", "fma"})
ARM_BF16 = frozenset({"fp", "asimd", "fphp", "asimdhp", "bf16"})


@pytest.mark.parametrize(("dtype", "flags", "native"), [
    ("bfloat16", AVX512_BF16, True), ("bfloat16", AVX2_ONLY, False), ("bfloat16", ARM_BF16, True),
    ("bfloat16", frozenset({"amx_bf16", "avx2"}), True), ("float16", AVX512_BF16, False), ("float16", ARM_BF16, True),
    ("float32", AVX2_ONLY, True), (None, frozenset(), True), ("auto", AVX2_ONLY, True),
])
def test_native_support_reads_the_cpu_flags(dtype, flags, native):
    assert native_support(dtype, "cpu", flags=flags)[0] is native


def test_the_three_policies_on_a_cpu_without_bfloat16():
    assert effective_dtype("bfloat16", "cpu", "fall_back", flags=AVX2_ONLY) == (
        "float32", "this CPU has no native bfloat16 (avx512_bf16/amx_bf16 not in /proc/cpuinfo)")
    assert effective_dtype("bfloat16", "cpu", "emulate", flags=AVX2_ONLY) == ("bfloat16", None)
    with pytest.raises(ModelLoadError, match="model.dtype=bfloat16: this CPU has no native bfloat16.*refuse"):
        effective_dtype("bfloat16", "cpu", "refuse", flags=AVX2_ONLY)
    # where the CPU has it, every policy keeps the dtype
    for policy in ("fall_back", "refuse", "emulate"):
        assert effective_dtype("bfloat16", "cpu", policy, flags=AVX512_BF16) == ("bfloat16", None)


def test_a_fallback_is_one_line_and_the_spec_that_loads_says_float32(capsys):
    spec = ModelSpec(name="m", kind="causal", dtype="bfloat16", id="tiny")
    loaded = resolve_dtype(spec, flags=AVX2_ONLY)
    assert loaded.dtype == "float32" and spec.dtype == "bfloat16"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["model.dtype=bfloat16 for 'tiny': this CPU has no native bfloat16 (avx512_bf16/amx_bf16 not in "
                   "/proc/cpuinfo); scoring in float32 (model.reduced_precision=fall_back)"]
    assert resolve_dtype(spec, flags=AVX512_BF16) is spec


def test_the_recorded_precision_is_the_one_computed_here():
    # float32 needs nothing: every machine records it as configured
    assert computed_precision({"dtype": None}) == "float32"
    assert computed_precision({"dtype": "float32", "reduced_precision": "refuse"}) == "float32"
    # bfloat16 is recorded as bfloat16 exactly where this machine computes it so
    expected = "bfloat16" if native_support("bfloat16", "cpu")[0] else "float32"
    assert computed_precision({"dtype": "bfloat16"}) == expected
    assert computed_precision({"dtype": "bfloat16", "reduced_precision": "emulate"}) == "bfloat16"


def test_capability_record_names_the_instruction_set_and_both_half_precisions():
    record = capability_record("cpu")
    assert set(record) == {"device", "cpu_capability", "bfloat16_native", "float16_native"}
    assert record["cpu_capability"] in ("DEFAULT", "AVX2", "AVX512", "AVX512_VNNI", "AMX", "NEON", "SVE256",
                                        "VSX", "ZVECTOR") or record["cpu_capability"]


def test_the_policy_is_a_checked_model_field():
    assert spec_from_config({"name": "m", "kind": "causal", "reduced_precision": "refuse"}).reduced_precision == "refuse"
    with pytest.raises(ConfigError, match="model.reduced_precision='sometimes' is not one of fall_back, refuse, emulate"):
        spec_from_config({"name": "m", "kind": "causal", "reduced_precision": "sometimes"})
