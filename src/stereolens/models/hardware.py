"""Whether the device computes a half-precision dtype natively, and what to do when it does not.

bfloat16 on a CPU without bfloat16 instructions is emulated: on an AVX2 machine a 512x640 by 640x2048
bfloat16 matmul took 2.57 s against 9.1 ms in float32 (283x), so ``model.dtype: bfloat16`` there turns a
3-minute stage into hours.  Before a model loads in reduced precision, :func:`resolve_dtype` checks the
device and, by ``model.reduced_precision``, scores in float32 with one line saying why (``fall_back``,
the default), stops (``refuse``) or runs emulated anyway (``emulate``).

Native means: on x86 CPUs the ``avx512_bf16`` or ``amx_bf16`` flag (``avx512_fp16`` / ``amx_fp16`` for
float16), on ARM the ``bf16`` feature (``fphp`` for float16), as Linux lists them in /proc/cpuinfo; on
CUDA ``torch.cuda.is_bf16_supported()`` (float16 always).  Other platforms (macOS, MPS) are taken as
native: no flag list to read, and the user chose the dtype.
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import sys
from pathlib import Path

from stereolens.errors import ModelLoadError

HALF = ("bfloat16", "float16")
# the CPU flags that give a half-precision dtype native kernels (x86 names, then ARM's)
NATIVE_FLAGS = {"bfloat16": ("avx512_bf16", "amx_bf16", "bf16"), "float16": ("avx512_fp16", "amx_fp16", "fphp")}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (``flags`` on x86, ``Features`` on ARM); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_capability() -> str:
    """The vector instruction set torch dispatches to on this CPU (``AVX2``, ``AVX512``, ``DEFAULT``...)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def native_support(dtype: str | None, device: str = "cpu", *, flags: frozenset[str] | None = None
                   ) -> tuple[bool, str]:
    """Whether ``device`` computes ``dtype`` natively, and a few words saying why.  ``flags``: the CPU's
    flags (default: this machine's)."""
    if dtype not in HALF:
        return True, f"{dtype or 'float32'} needs no special support"
    kind = device.split(":")[0]
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            return False, "CUDA is not available"
        name = torch.cuda.get_device_name(device)
        if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            return False, f"{name} has no native bfloat16"
        return True, f"{name} computes {dtype} natively"
    if kind != "cpu" or (flags is None and sys.platform != "linux"):
        return True, f"{dtype} on {device} ({platform.system()}): not checked"
    flags = cpu_flags() if flags is None else flags
    have = [f for f in NATIVE_FLAGS[dtype] if f in flags]
    if have:
        return True, f"this CPU has {', '.join(have)}"
    return False, f"this CPU has no native {dtype} ({'/'.join(NATIVE_FLAGS[dtype][:2])} not in /proc/cpuinfo)"


def capability_record(device: str = "cpu") -> dict[str, object]:
    """What a benchmark result and a run's lineage record about the hardware's precision support."""
    record: dict[str, object] = {"device": device}
    if device.split(":")[0] == "cpu":
        record["cpu_capability"] = cpu_capability()
    for dtype in HALF:
        record[f"{dtype}_native"] = native_support(dtype, device)[0]
    return record


def effective_dtype(dtype: str | None, device: str = "cpu", policy: str = "fall_back", *,
                    flags: frozenset[str] | None = None) -> tuple[str | None, str | None]:
    """The dtype a model configured with ``dtype`` computes in on ``device``, and why it differs (None when
    it does not): float32 for a half-precision dtype the device lacks under ``fall_back``; ModelLoadError
    under ``refuse``; unchanged under ``emulate``."""
    native, why = native_support(dtype, device, flags=flags)
    if native or policy == "emulate":
        return dtype, None
    if policy == "refuse":
        raise ModelLoadError(f"model.dtype={dtype}: {why}, and model.reduced_precision=refuse "
                             "(fall_back scores in float32; emulate runs it, slowly)")
    return "float32", why


def resolve_dtype(spec, *, flags: frozenset[str] | None = None):
    """``spec`` as it loads here (:func:`effective_dtype`); a fallback is said in one line on stderr.

    The returned spec is what identifies the model's scores (cache key, MLflow ``precision``), so a run that
    fell back is never recorded as bfloat16.
    """
    dtype, why = effective_dtype(spec.dtype, spec.device, spec.reduced_precision, flags=flags)
    if why is None:
        return spec
    print(f"model.dtype={spec.dtype} for {spec.label!r}: {why}; scoring in float32 "
          "(model.reduced_precision=fall_back)", file=sys.stderr)
    return dataclasses.replace(spec, dtype=dtype)


def precision_mode(dtype: str | None, verify: str | None) -> str:
    """The name of the precision a run scores in: its dtype, with ``+verify-fp32`` when a half-precision
    model's near-boundary decisions are rescored in float32 (``model.verify``, stereolens.scoring.verified)."""
    dtype = str(dtype or "float32")
    return f"{dtype}+verify-{verify}" if verify and dtype != "float32" else dtype
