"""How well each way of scaling to one machine speed makes a calibration's host and in-model
measurements repeat, across fresh processes and passes.

    python benchmarks/speed_references.py \
        --profile benchmarks/results/cpu-xeon/cpu-profile-x8.json --processes 5

Each of ``--processes`` fresh processes (one after another, never two at once) keeps the heap
as calibration does, builds the calibration's tiny-op host programs
(``ftmodel.calibration.dispatch.host_programs``) and its 18 synthetic networks at batches 1, 4,
16 and 64 (``ftmodel.calibration.networks``), and times them in ``--passes`` passes of 5
interleaved rounds, as the calibration's host and in-model stages do (0.03 / 0.05 s per round).
Around each block of calls (at most every 0.1 s) it times both references of
:mod:`ftmodel.speed`: the reference GEMM and the host reference. It records every round's raw
median and the references around it; this script then scales them four ways:

- ``gemm, fastest``: by the GEMM alone, the fastest round (the calibration before the host
  reference);
- ``gemm, median``: by the GEMM alone, the median of the scaled rounds;
- ``blend, fastest`` / ``blend, median``: by ``share × host factor + (1 − share) × GEMM
  factor``, where a host program's share is 1 and a network's is its host time over its total
  as ``--profile``'s in-model samples predicted them (the calibration now: blend, median).

A pass's level for a group (host programs; networks at one batch) is the median over the
group's items of the item's time in that pass over its median over all passes; the table gives,
per scaling, the standard deviation of the passes' levels (log scale; 0.05 ≈ 5%) and their
range. Smaller is more repeatable. The nominal times are the medians of all references taken.
Prints a Markdown report; with ``--raw FILE``, also writes the rounds and references.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.speed import blended  # noqa: E402

GROUPS = ("host programs", "networks b1", "networks b4", "networks b16", "networks b64")
SCALINGS = (("gemm", "fastest"), ("gemm", "median"), ("blend", "fastest"), ("blend", "median"))


def _child(passes: int, threads: int) -> dict[str, Any]:
    """One process's passes: per block, the raw round median and the references around it."""
    import torch

    from ftmodel.calibration.dispatch import host_programs
    from ftmodel.calibration.networks import synthetic_networks
    from ftmodel.calibration.sweep_stage import caller
    from ftmodel.measure import keep_heap, set_threads
    from ftmodel.speed import (REFERENCE_INTERVAL_S, median_of_calls, reference_gemm,
                               reference_host)

    keep_heap()
    set_threads(threads)
    torch.manual_seed(0)
    fns: dict[str, Callable[[], object]] = {}
    for p in host_programs():
        fns[f"host:{p.name}"] = caller(p.module, p.inputs)
    for net in synthetic_networks(18):
        for b in (1, 4, 16, 64):
            fns[f"{net.name}@b{b}"] = caller(net.module, tuple(net.make_inputs(b)))
    gemm, host = reference_gemm(), reference_host()

    out: dict[str, Any] = {"passes": []}
    with torch.no_grad():
        for fn in [*fns.values(), gemm, host]:
            for _ in range(3):
                fn()
        reps = {}
        for k, fn in fns.items():
            round_s, cap = (0.03, 200) if k.startswith("host:") else (0.05, 30)
            reps[k] = int(max(3, min(cap, round_s / max(median_of_calls(fn, 1), 1e-7))))
        for _ in range(passes):
            for prefix in ("host:", ""):
                keys = [k for k in fns if k.startswith("host:") == (prefix == "host:")]
                for _ in range(5):
                    blocks: list[list[Any]] = []  # [key, raw median, index of the reference before]
                    refs: list[tuple[float, float]] = []
                    last = -math.inf
                    for k in keys:
                        if time.perf_counter() - last >= REFERENCE_INTERVAL_S:
                            refs.append((median_of_calls(gemm, 8), median_of_calls(host, 8)))
                            last = time.perf_counter()
                        blocks.append([k, median_of_calls(fns[k], reps[k]), len(refs) - 1])
                    refs.append((median_of_calls(gemm, 8), median_of_calls(host, 8)))
                    out["passes"].append({"prefix": prefix, "blocks": blocks, "refs": refs})
    return out


def _group(key: str) -> str:
    return "host programs" if key.startswith("host:") else f"networks {key.split('@')[1]}"


def _values(rounds: list[dict[str, Any]], scaling: str, estimate: str, g0: float, h0: float,
            shares: dict[str, float]) -> dict[str, float]:
    """Each item's time in one pass under one scaling."""
    scaled: dict[str, list[float]] = {}
    for rd in rounds:
        refs = rd["refs"]
        for key, t, i in rd["blocks"]:
            (gb, hb), (ga, ha) = refs[i], refs[i + 1]
            gemm = g0 / math.sqrt(gb * ga)
            share = 1.0 if key.startswith("host:") else shares.get(key, 0.0)
            f = gemm if scaling == "gemm" else blended(gemm, h0 / math.sqrt(hb * ha), share)
            scaled.setdefault(key, []).append(t * f)
    pick = min if estimate == "fastest" else statistics.median
    return {k: pick(v) for k, v in scaled.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True,
                    help="a CPU profile whose in-model samples give each network's host share")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--raw", help="also write every process's rounds and references here (JSON)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.passes, args.threads)))
        return 0
    samples = json.loads(Path(args.profile).read_text())["host"]["frameworks"]["eager"]["samples"]
    shares = {s["network"]: s["host_s"] / (s["host_s"] + s["device_s"])
              for s in samples if "network" in s and s["host_s"] + s["device_s"] > 0}
    runs = []
    for i in range(args.processes):
        proc = subprocess.run([sys.executable, __file__, "--child", "--passes", str(args.passes),
                               "--threads", str(args.threads), "--profile", args.profile],
                              capture_output=True, text=True, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"process {i + 1}/{args.processes} done", file=sys.stderr)
    if args.raw:
        Path(args.raw).write_text(json.dumps(runs))
    gemm_refs = [g for r in runs for p in r["passes"] for g, _ in p["refs"]]
    host_refs = [h for r in runs for p in r["passes"] for _, h in p["refs"]]
    g0, h0 = statistics.median(gemm_refs), statistics.median(host_refs)
    passes = []  # one pass = 5 rounds of host programs, then 5 of networks
    for r in runs:
        ps = r["passes"]
        for j in range(0, len(ps), 10):
            passes.append(ps[j:j + 10])
    lines = ["# Scaling to one machine speed: repeatability across processes and passes", "",
             f"`python benchmarks/speed_references.py --profile {args.profile} --processes "
             f"{args.processes} --passes {args.passes}`: {len(passes)} passes in "
             f"{args.processes} fresh processes, {args.threads} threads, heap kept.", "",
             f"- references: GEMM median {g0 * 1e3:.3f} ms (CV "
             f"{np.std(np.log(gemm_refs)):.2f}), host median {h0 * 1e6:.1f} µs (CV "
             f"{np.std(np.log(host_refs)):.2f}), correlation of their logs "
             f"{np.corrcoef(np.log(gemm_refs), np.log(host_refs))[0, 1]:.2f} "
             f"({len(gemm_refs)} pairs)", "",
             "Standard deviation of the passes' levels (log scale), range in brackets:", "",
             "| scaling, rounds | " + " | ".join(GROUPS) + " |",
             "|---|" + "---|" * len(GROUPS)]
    for scaling, estimate in SCALINGS:
        per_pass = [_values(p, scaling, estimate, g0, h0, shares) for p in passes]
        everything: dict[str, list[float]] = {}
        for v in per_pass:
            for k, x in v.items():
                everything.setdefault(k, []).append(x)
        median = {k: statistics.median(x) for k, x in everything.items()}
        cells = []
        for g in GROUPS:
            levels = [statistics.median(v[k] / median[k] for k in v if _group(k) == g)
                      for v in per_pass]
            cells.append(f"{np.std(np.log(levels)):.3f} ({min(levels):.2f}-{max(levels):.2f})")
        lines.append(f"| {scaling}, {estimate} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
