"""The completions path against a loopback server that answers in vLLM's response shape.

The server below serves the tiny causal test model the way vLLM's OpenAI-compatible
``/v1/completions`` does with ``echo=True, logprobs=1``: the echoed tokens start with
the BOS token the server adds (its decoded text, e.g. ``<s>``, counted in
``text_offset`` although absent from ``text``) with a null log-probability, each
later token carries its log-probability and top-1 alternative, one generated token
follows the prompt, and ``prompt_logprobs`` (token id -> logprob, rank,
decoded_token) comes back when the request asks for it.  The known answer: the
sentence log-likelihood through the endpoint equals the HF backend's on the same
weights.  Nothing of ours is mocked; requests go through the real ``openai`` client.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from stereolens.models import LoglikelihoodRequest, ModelSpec, ResponseCache, load_model, spec_from_config

REPO = Path(__file__).resolve().parents[2]


class VLLMLikeServer:
    """Computes real log-probabilities of the tiny causal LM and answers in vLLM's JSON shape."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.bodies: list[dict] = []
        self.lock = threading.Lock()

    def completion(self, body: dict) -> dict:
        torch = self.torch
        prompt = body["prompt"]
        ids = self.tok(prompt)["input_ids"]  # the tokenizer adds BOS, as vLLM's does
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        generated = int(logprobs[-1].argmax())
        all_ids = ids + [generated][: body.get("max_tokens", 16)]
        tokens, token_lps, tops, offsets, prompt_lps = [], [], [], [], []
        offset, last_len = 0, 0
        for pos, tid in enumerate(all_ids):
            text = self.tok.decode([tid])
            offset += last_len
            offsets.append(offset)
            last_len = len(text)
            tokens.append(text)
            if pos == 0:
                token_lps.append(None)
                tops.append(None)
                prompt_lps.append(None)
                continue
            row = logprobs[pos - 1]
            lp = float(row[tid])
            best = int(row.argmax())
            token_lps.append(lp)
            tops.append({text: lp, self.tok.decode([best]): float(row[best])})
            if pos < len(ids):
                rank = int((row > row[tid]).sum()) + 1
                prompt_lps.append({str(tid): {"logprob": lp, "rank": rank, "decoded_token": text}})
        choice = {
            "index": 0,
            "text": (prompt if body.get("echo") else "") + self.tok.decode([generated]),
            "logprobs": {"text_offset": offsets, "token_logprobs": token_lps, "tokens": tokens, "top_logprobs": tops}
            if body.get("logprobs") is not None else None,
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_logprobs": prompt_lps if body.get("prompt_logprobs") is not None else None,
            "prompt_token_ids": None,
        }
        return {
            "id": "cmpl-0123456789abcdef", "object": "text_completion", "created": int(time.time()),
            "model": body["model"], "choices": [choice],
            "usage": {"prompt_tokens": len(ids), "total_tokens": len(all_ids), "completion_tokens": 1,
                      "prompt_tokens_details": None},
            "system_fingerprint": None, "service_tier": None, "kv_transfer_params": None,
        }


@pytest.fixture(scope="module")
def vllm_server(tiny_causal_lm_dir):
    state = VLLMLikeServer(tiny_causal_lm_dir)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.bodies.append(body)
            payload = json.dumps(state.completion(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def _endpoint(base_url: str, tmp_path: Path):
    cfg = yaml.safe_load((REPO / "conf" / "model" / "vllm_completions.yaml").read_text(encoding="utf-8"))
    cfg.update(base_url=base_url, name="tiny-causal")
    return load_model(spec_from_config(cfg), cache=ResponseCache(tmp_path / "cache"))


def test_vllm_shaped_echo_gives_the_model_sentence_loglikelihood(vllm_server, tiny_causal_lm_dir, tmp_path):
    state, base_url = vllm_server
    endpoint = _endpoint(base_url, tmp_path)
    local = load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal"), cache=ResponseCache(enabled=False))
    requests = [
        LoglikelihoodRequest(context="", continuation="The nurse said she was tired."),
        LoglikelihoodRequest(context="", continuation="Poor people are lazy."),
        LoglikelihoodRequest(context="The nurse said", continuation=" she was tired."),
        LoglikelihoodRequest(context="Rich people own", continuation=" boats."),
    ]
    got = endpoint.loglikelihood(requests)
    want = local.loglikelihood(requests)
    for g, w, r in zip(got, want, requests):
        assert g.n_tokens == w.n_tokens, r
        assert g.logprob == pytest.approx(w.logprob, abs=1e-4), r
    # the requests were the echo form: prompt log-probabilities, one generated token dropped
    body = state.bodies[-1]
    assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1


def test_vllm_shaped_prompt_logprobs_field_matches_echoed_logprobs(vllm_server):
    """vLLM's own ``prompt_logprobs`` (asked through extra_body) agrees with the echoed token logprobs."""
    import openai

    state, base_url = vllm_server
    client = openai.OpenAI(api_key="EMPTY", base_url=base_url, max_retries=0)
    resp = client.completions.create(model="tiny-causal", prompt="Children play outside.", echo=True, logprobs=1,
                                     max_tokens=1, extra_body={"prompt_logprobs": 1})
    choice = resp.choices[0]
    prompt_lps = choice.model_extra["prompt_logprobs"]
    assert prompt_lps[0] is None
    n_prompt = len(prompt_lps)
    echoed = choice.logprobs.token_logprobs[:n_prompt]
    from_field = [None] + [next(iter(d.values()))["logprob"] for d in prompt_lps[1:]]
    assert echoed == from_field
    # the first echoed token is the BOS the server added: counted in text_offset, absent from text
    assert choice.logprobs.tokens[0] == "<s>" and choice.logprobs.text_offset[1] == len("<s>")
    assert choice.text.startswith("Children play outside.")
