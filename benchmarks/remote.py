"""Remote throughput: concurrency 16 against sequential calls to a slow OpenAI-compatible endpoint.

The endpoint is the loopback test server (``tests/loopback_openai.py``), run in its
own process as a real remote server would be, with 200 ms of latency added to every
request, which is what a paid API's round trip costs.
The same chat requests go through :class:`stereolens.models.OpenAIChatModel` with
``max_concurrency=1`` and with ``max_concurrency=16``, each call with a fresh response
cache, taking turns in one process (``_common.take_turns``: a warm-up call each, then
``--rounds`` rounds, order rotated and reversed); the figure is the median of the
per-round ratios, with the load average of every round, and the answers must be equal.
Writes ``remote.json``, ``remote.png`` and ``remote.svg`` to ``benchmarks/out/``
(``--record``: the tracked ``benchmarks/results/``).

    python benchmarks/remote.py [--requests 96] [--latency 0.2] [--rounds 3]
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

from _common import add_output_arguments, describe, machine, output_path, take_turns  # noqa: E402
from stereolens.models import GenerationRequest, ModelSpec, ResponseCache, load_model  # noqa: E402


def answers(base_url: str, requests: list[GenerationRequest], concurrency: int) -> list[str]:
    """Every request answered through a fresh response cache (so each call reaches the server)."""
    with tempfile.TemporaryDirectory() as cache_dir:
        spec = ModelSpec(name="toy-model", kind="chat", backend="openai", base_url=base_url,
                         max_concurrency=concurrency, timeout_s=30)
        model = load_model(spec, cache=ResponseCache(cache_dir))
        return [g.text for g in model.generate(requests)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds added to every request")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up")
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
            timed = take_turns({
                "concurrency_16": lambda: answers(base_url, requests, 16),
                "sequential": lambda: answers(base_url, requests, 1),
            }, args.rounds, baseline="concurrency_16")
        finally:
            server.terminate()
            server.wait(timeout=30)
    timed.pop("values")
    seconds = timed["median_seconds"]
    speedup = timed["median_ratio_to_concurrency_16"]["sequential"]
    result = {
        "requests": args.requests, "latency_s": args.latency, "rounds": args.rounds,
        "sequential_s": round(seconds["sequential"], 3), "concurrency_16_s": round(seconds["concurrency_16"], 3),
        "sequential_rps": round(args.requests / seconds["sequential"], 2),
        "concurrency_16_rps": round(args.requests / seconds["concurrency_16"], 2),
        "speedup": round(speedup, 2), "speedup_range": [round(x, 2) for x in timed["ratio_range"]["sequential"]],
        "same_answers": timed["values_equal"], "timing": timed, "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
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
    print(describe(timed, "concurrency_16"))
    if not timed["values_equal"]:
        print("remote benchmark: concurrent answers differ from sequential ones", file=sys.stderr)
        return 1
    print(f"remote: sequential {result['sequential_rps']} req/s, concurrency 16 {result['concurrency_16_rps']} req/s "
          f"({result['speedup']}x, same answers) -> {out / 'remote.json'}")
    return 0 if result["speedup"] >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
