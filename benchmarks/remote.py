"""Remote throughput: concurrency 16 against sequential calls to a slow OpenAI-compatible endpoint.

The endpoint is the loopback test server (``tests/loopback_openai.py``), run in its
own process as a real remote server would be, with 200 ms of latency added to every
request, which is what a paid API's round trip costs.
The same chat requests go through :class:`stereolens.models.OpenAIChatModel` once
with ``max_concurrency=1`` and once with ``max_concurrency=16``, each with a fresh
response cache; the answers must be equal.  Writes ``remote.json``,
``remote.png`` and ``remote.svg`` to ``benchmarks/out/`` (``--record``: the tracked ``benchmarks/results/``).

    python benchmarks/remote.py [--requests 96] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import add_output_arguments, output_path  # noqa: E402
from stereolens.models import GenerationRequest, ModelSpec, ResponseCache, load_model  # noqa: E402


def timed_run(base_url: str, requests: list[GenerationRequest], concurrency: int) -> tuple[float, list[str]]:
    with tempfile.TemporaryDirectory() as cache_dir:
        spec = ModelSpec(name="toy-model", kind="chat", backend="openai", base_url=base_url,
                         max_concurrency=concurrency, timeout_s=30)
        model = load_model(spec, cache=ResponseCache(cache_dir))
        start = time.perf_counter()
        answers = [g.text for g in model.generate(requests)]
        return time.perf_counter() - start, answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds added to every request")
    add_output_arguments(parser, "")
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-local-benchmark")
    requests = [GenerationRequest(prompt=f"Describe item number {i}", max_tokens=8) for i in range(args.requests)]
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "requests.jsonl"
        server = subprocess.Popen([sys.executable, str(REPO / "tests/loopback_openai.py"), "--log", str(log),
                                   "--delay", str(args.latency)], stdout=subprocess.PIPE, text=True)
        try:
            base_url = server.stdout.readline().strip()
            sequential_s, sequential = timed_run(base_url, requests, 1)
            concurrent_s, concurrent = timed_run(base_url, requests, 16)
        finally:
            server.terminate()
            server.wait(timeout=30)
    if sequential != concurrent:
        print("remote benchmark: concurrent answers differ from sequential ones", file=sys.stderr)
        return 1
    result = {
        "requests": args.requests, "latency_s": args.latency,
        "sequential_s": round(sequential_s, 3), "concurrency_16_s": round(concurrent_s, 3),
        "sequential_rps": round(args.requests / sequential_s, 2), "concurrency_16_rps": round(args.requests / concurrent_s, 2),
        "speedup": round(sequential_s / concurrent_s, 2), "same_answers": True,
    }
    out = output_path(args, "")
    out.mkdir(parents=True, exist_ok=True)
    from stereolens.io import write_json

    write_json(out / "remote.json", result)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stereolens.figures import save_figure

    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.bar(["sequential", "concurrency 16"], [result["sequential_rps"], result["concurrency_16_rps"]],
           color=["#999999", "#1f77b4"])
    ax.set_ylabel("requests per second")
    ax.set_title(f"{args.requests} chat requests, {args.latency * 1000:.0f} ms latency: {result['speedup']}x")
    save_figure(fig, out / "remote")
    print(f"remote: sequential {result['sequential_rps']} req/s, concurrency 16 {result['concurrency_16_rps']} req/s "
          f"({result['speedup']}x, same answers) -> {out / 'remote.json'}")
    return 0 if result["speedup"] >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
