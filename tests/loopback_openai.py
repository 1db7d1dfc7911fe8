"""An OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks.

It speaks the OpenAI wire format (POST /v1/chat/completions and /v1/completions,
log-probabilities included) with a deterministic toy "model" whose answers the
tests can compute.  Faults are injected per request, either from a fixed plan or
at a set rate drawn from a seeded generator:

=============  ===========================================================
``429``        Too Many Requests with a ``Retry-After`` header
``500``        Internal Server Error
``502``        Bad Gateway
``503``        Service Unavailable
``timeout``    a stall past the client's timeout, then an (unread) answer
``truncated``  200 with a body cut in half (valid HTTP, undecodable JSON)
``drop``       the connection is closed without any response
``no_choices`` 200 with ``choices: []``
``no_message`` 200 whose choice has neither ``message`` nor ``text``
=============  ===========================================================

Every request is logged with its outcome, so a test can count how many times the
same request was *answered* (a resumed run must not repeat successful calls).
Nothing of ours is mocked: clients go through the real ``openai`` package over TCP.
"""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULT_MODES = ("429", "500", "503", "timeout", "truncated", "drop")
MALFORMED_MODES = ("truncated", "no_choices", "no_message")


# --- the toy model the server serves -------------------------------------------------


def toy_tokens(text: str) -> list[str]:
    """Words with their leading whitespace, like a BPE that merges ' word'."""
    return re.findall(r"\s*\S+|\s+$", text)


def toy_logprob(token: str) -> float:
    return -0.25 - 0.1 * len(token.strip())


def toy_answer(prompt: str, temperature: float, seed: int) -> str:
    base = f"echo {prompt.split()[-1] if prompt.split() else ''} and more words here"
    return base if temperature == 0 else f"{base} seed{seed}"


def truncate(text: str, max_tokens: int, stop: list[str]) -> tuple[str, str]:
    toks = toy_tokens(text)
    finish = "stop"
    if len(toks) > max_tokens:
        toks, finish = toks[:max_tokens], "length"
    text = "".join(toks)
    for s in stop:
        if s in text:
            text, finish = text[: text.index(s)], "stop"
    return text, finish


def request_key(path: str, body: dict) -> str:
    """What identifies one logical request across retries and reruns."""
    return path + " " + json.dumps(body, sort_keys=True)


class FakeOpenAI:
    """State shared by the handler threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.plan: list[str] = []  # actions for the next calls ("429", "timeout", "ok", ...)
        self.always_fail_on: str | None = None  # any request whose prompt contains this gets a 500
        self.always_status: int | None = None
        self.always_action: str | None = None  # any fault mode, on every request
        self.delay_s = 0.0  # latency added to every request
        self.timeout_sleep_s = 1.5  # how long a "timeout" stalls
        self.retry_after = "0"  # the Retry-After header a 429 carries
        self.fault_rate = 0.0
        self.fault_modes: tuple[str, ...] = FAULT_MODES
        self.rng = random.Random(0)
        self.headers: list[dict[str, str]] = []
        self.bodies: list[dict] = []
        self.log: list[tuple[str, str]] = []  # (request_key, action) per request, in arrival order
        self.base_url = ""
        # scripted answers: ``script(last_user_message, body) -> reply`` replaces the toy model's chat answer
        self.script = None

    def pick_action(self) -> str:
        # called with the lock held
        if self.plan:
            return self.plan.pop(0)
        if self.always_action is not None:
            return self.always_action
        if self.fault_rate and self.rng.random() < self.fault_rate:
            return self.rng.choice(self.fault_modes)
        return "ok"

    def answered(self) -> Counter:
        """How many times each logical request got a successful answer."""
        return Counter(key for key, action in self.log if action == "ok")

    def faults(self) -> Counter:
        return Counter(action for _, action in self.log if action != "ok")


def make_handler(state: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep pytest output clean
            pass

        def _send_bytes(self, status: int, data: bytes, extra_headers: dict | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (extra_headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def _send(self, status: int, obj: dict, extra_headers: dict | None = None) -> None:
            self._send_bytes(status, json.dumps(obj).encode(), extra_headers)

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            text_in = json.dumps(body.get("messages") or body.get("prompt"))
            with state.lock:
                state.calls += 1
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
                state.headers.append({k.lower(): v for k, v in self.headers.items()})
                state.bodies.append(body)
                action = state.pick_action()
                if state.always_status is not None:
                    action = str(state.always_status)
                elif state.always_fail_on and state.always_fail_on in text_in:
                    action = "500"
                state.log.append((request_key(self.path, body), action))
            try:
                if state.delay_s:
                    time.sleep(state.delay_s)
                self._act(action, body)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _act(self, action: str, body: dict) -> None:
            if action == "timeout":
                time.sleep(state.timeout_sleep_s)
                return self._send(200, {})
            if action == "drop":
                return self._drop()
            if action not in ("ok", "truncated", "no_choices", "no_message"):
                status = int(action)
                return self._send(
                    status,
                    {"error": {"message": f"injected {status}", "type": "server_error", "code": None}},
                    {"retry-after": state.retry_after} if status == 429 else None,
                )
            if self.path.endswith("/chat/completions"):
                answer = self._chat(body)
            elif self.path.endswith("/completions"):
                answer = self._completion(body)
            else:
                return self._send(404, {"error": {"message": "no such route"}})
            if action == "truncated":
                data = json.dumps(answer).encode()
                return self._send_bytes(200, data[: len(data) // 2])
            if action == "no_choices":
                answer["choices"] = []
            elif action == "no_message":
                answer["choices"][0].pop("message", None)
                answer["choices"][0].pop("text", None)
            return self._send(200, answer)

        def _chat(self, body: dict) -> dict:
            last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
            if state.script is not None:
                text, finish = state.script(last, body), "stop"
                return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                                     "logprobs": None}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            text, finish = truncate(
                toy_answer(last, body.get("temperature", 1), body.get("seed", 0)),
                body.get("max_tokens", 16), body.get("stop") or [],
            )
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                      "logprobs": None}
            if body.get("logprobs"):
                k = body.get("top_logprobs", 0)
                content = []
                for tok in toy_tokens(text):
                    alts = [{"token": tok, "logprob": toy_logprob(tok), "bytes": list(tok.encode())}]
                    alts += [{"token": f"alt{j}", "logprob": toy_logprob(tok) - j, "bytes": None} for j in range(1, k)]
                    content.append({"token": tok, "logprob": toy_logprob(tok), "bytes": list(tok.encode()),
                                    "top_logprobs": alts[:k]})
                choice["logprobs"] = {"content": content, "refusal": None}
            return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

        def _completion(self, body: dict) -> dict:
            prompt = body["prompt"]
            generated, finish = truncate(
                toy_answer(prompt, body.get("temperature", 1), body.get("seed", 0)),
                body.get("max_tokens", 16), body.get("stop") or [],
            )
            logprobs = None
            if body.get("logprobs") is not None:
                echoed = toy_tokens(prompt) if body.get("echo") else []
                toks = echoed + toy_tokens(generated)
                offsets, pos = [], 0
                for t in toks:
                    offsets.append(pos)
                    pos += len(t)
                lps = [toy_logprob(t) for t in toks]
                if echoed:
                    lps[0] = None  # the first prompt token has no context, as OpenAI reports it
                k = max(1, body["logprobs"])
                tops = [None if lp is None else {t: lp, **{f"alt{j}": lp - j for j in range(1, k)}}
                        for t, lp in zip(toks, lps)]
                logprobs = {"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
            text = (prompt if body.get("echo") else "") + generated
            return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    return Handler


class LoopbackServer:
    """Start/stop the server in a background thread; ``state`` is the shared :class:`FakeOpenAI`."""

    def __init__(self, port: int = 0) -> None:
        self.state = FakeOpenAI()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), make_handler(self.state))
        self.httpd.daemon_threads = True
        self.state.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self.state

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    """Run the server in the foreground (a subprocess for kill/resume tests).

    Writes ``<log>`` as JSON lines ``{"key": ..., "action": ...}`` as requests arrive
    and prints the base URL on the first line of stdout.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    args = parser.parse_args()
    server = LoopbackServer()
    state = server.state
    state.delay_s, state.fault_rate = args.delay, args.fault_rate
    log = open(args.log, "a", encoding="utf-8", buffering=1)
    with server:
        print(state.base_url, flush=True)
        written = 0
        try:
            while True:
                time.sleep(0.05)
                with state.lock:
                    new = state.log[written:]
                    written = len(state.log)
                for key, action in new:
                    log.write(json.dumps({"key": key, "action": action}) + "\n")
        except KeyboardInterrupt:
            sys.exit(0)


if __name__ == "__main__":
    main()
