"""Fixtures of the stereo tests: a scripted OpenAI-compatible chat server on 127.0.0.1.

``script(last_user_message, seed) -> reply`` decides every answer; the server
records each request body.  Requests go through the real ``openai`` client.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedChatServer:
    def __init__(self, script: Callable[[str, int], str]) -> None:
        self.script = script
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with state.lock:
                    state.bodies.append(body)
                last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
                text = state.script(last, int(body.get("seed") or 0))
                out = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop", "logprobs": None}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def model(self, cache_dir):
        from stereolens.models import ModelSpec, ResponseCache, load_model

        spec = ModelSpec(name="scripted", kind="chat", backend="openai", base_url=self.base_url, retry_base_s=0.01, max_retries=0)
        return load_model(spec, cache=ResponseCache(cache_dir))


import pytest  # noqa: E402


@pytest.fixture
def scripted_server():
    """``scripted_server(script)``: a context manager serving ``script(last_user_message, seed)``."""
    return ScriptedChatServer
