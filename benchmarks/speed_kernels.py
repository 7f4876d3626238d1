"""Which speed reference each kind of kernel follows when a shared machine changes speed.

    python benchmarks/speed_kernels.py --minutes 5 --raw raw.json > report.md

One process (heap kept, ``--threads`` threads) times a set of single kernels of every kind --
compute-bound (GEMM, 3x3 convolution), memory-bound out of cache (a 64 MiB add, LayerNorm,
softmax, max pooling, depthwise convolution) and cache-resident (a 1 MiB add) -- in passes for
``--minutes``. Around each kernel it times the three references of :mod:`ftmodel.speed` (the
reference GEMM, the host reference and the memory reference). Over the passes, a kernel whose
time is scaled by the reference it follows repeats best: the report gives, per kernel, the
standard deviation (log scale; 0.05 ≈ 5%) of its time raw, scaled by each reference
(``nominal / reference``, nominals the medians of all references) and by the blend
``w × GEMM factor + (1 − w) × memory factor`` for ``w`` in 0, 0.25, ..., 1 (the best ``w`` and
its deviation: what :func:`ftmodel.speed.gemm_share` assigns per op class), and the
least-squares exponents of its log time on the logs of the GEMM and memory references.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REFERENCES = ("gemm", "host", "memory")


def _kernels() -> dict[str, Callable[[], object]]:
    """The kernels timed: name -> a call of one kernel on inputs made once."""
    import torch
    from torch.nn import functional as F

    g = torch.Generator().manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    a, b = rnd(256, 1024), rnd(1024, 1024)
    x_conv, w_conv = rnd(8, 64, 56, 56), rnd(64, 64, 3, 3)
    x_dw, w_dw = rnd(16, 96, 56, 56), rnd(96, 1, 3, 3)
    big1, big2 = rnd(16 * 2**20), rnd(16 * 2**20)
    small1, small2 = rnd(2**18), rnd(2**18)
    x_ln, w_ln, b_ln = rnd(64, 197, 768), rnd(768), rnd(768)
    x_sm = rnd(8, 12, 197, 197)
    x_pool = rnd(8, 64, 112, 112)
    x_gemv, w_gemv, b_gemv = rnd(1, 4096), rnd(1024, 4096), rnd(1024)
    return {
        "GEMM 256x1024x1024": lambda: torch.mm(a, b),
        "GEMV 1x4096x1024 (addmm, 16 MiB weight)": lambda: torch.addmm(b_gemv, x_gemv,
                                                                        w_gemv.t()),
        "conv 3x3 64ch 56px b8": lambda: F.conv2d(x_conv, w_conv, padding=1),
        "depthwise 3x3 96ch 56px b16": lambda: F.conv2d(x_dw, w_dw, padding=1, groups=96),
        "add 64 MiB": lambda: torch.add(big1, big2),
        "add 1 MiB (cache)": lambda: torch.add(small1, small2),
        "LayerNorm 64x197x768": lambda: F.layer_norm(x_ln, (768,), w_ln, b_ln),
        "softmax 8x12x197x197": lambda: torch.softmax(x_sm, -1),
        "max pool 3x3/2 64ch 112px b8": lambda: F.max_pool2d(x_pool, 3, 2, 1),
    }


def _child(minutes: float, threads: int) -> dict[str, Any]:
    """Passes of (references, kernel, references) for every kernel, for ``minutes``."""
    import torch

    from ftmodel.measure import keep_heap, set_threads
    from ftmodel.speed import (median_of_calls, reference_gemm, reference_host,
                               reference_memory)

    keep_heap()
    set_threads(threads)
    kernels = _kernels()
    refs = {"gemm": (reference_gemm(), 8), "host": (reference_host(), 8),
            "memory": (reference_memory(), 4)}
    with torch.no_grad():
        for fn in [*kernels.values(), *(f for f, _ in refs.values())]:
            for _ in range(3):
                fn()
        reps = {k: int(max(3, min(50, 0.02 / max(median_of_calls(fn, 3), 1e-7))))
                for k, fn in kernels.items()}

        def reference() -> dict[str, float]:
            return {k: median_of_calls(f, n) for k, (f, n) in refs.items()}

        samples: list[dict[str, Any]] = []
        end = time.perf_counter() + minutes * 60
        while time.perf_counter() < end:
            for k, fn in kernels.items():
                before = reference()
                t = median_of_calls(fn, reps[k])
                samples.append({"kernel": k, "s": t, "before": before, "after": reference()})
    return {"threads": threads, "samples": samples}


def _report(raw: dict[str, Any], command: str) -> str:
    samples = raw["samples"]
    ref = {r: np.array([np.sqrt(s["before"][r] * s["after"][r]) for s in samples])
           for r in REFERENCES}
    nominal = {r: float(np.median(v)) for r, v in ref.items()}
    passes = len(samples) // max(1, len({s["kernel"] for s in samples}))
    lines = ["# Which speed reference each kind of kernel follows", "",
             f"`{command}`: {passes} passes, {raw['threads']} threads, heap kept.", "",
             "- references over the run (median, 10th-90th percentile, std of log): " + "; ".join(
                 f"{r} {nominal[r] * 1e3:.3f} ms ({np.quantile(v, 0.1) * 1e3:.3f}-"
                 f"{np.quantile(v, 0.9) * 1e3:.3f}, {np.std(np.log(v)):.3f})"
                 for r, v in ref.items()),
             "- correlation of the references' logs: " + ", ".join(
                 f"{p}/{q} {np.corrcoef(np.log(ref[p]), np.log(ref[q]))[0, 1]:.2f}"
                 for p, q in (("gemm", "host"), ("gemm", "memory"), ("host", "memory"))), "",
             "Standard deviation of each kernel's log time over the passes, raw and scaled by "
             "each reference; exponents of log time on log GEMM and log memory reference:", "",
             "| kernel | median ms | raw | by GEMM | by host | by memory | best blend w | "
             "exp. GEMM | exp. memory |", "|---|---|---|---|---|---|---|---|---|"]
    for kernel in dict.fromkeys(s["kernel"] for s in samples):
        idx = [i for i, s in enumerate(samples) if s["kernel"] == kernel]
        t = np.log([samples[i]["s"] for i in idx])
        cells = [f"{np.std(t):.3f}"]
        for r in REFERENCES:
            cells.append(f"{np.std(t + np.log(nominal[r]) - np.log(ref[r][idx])):.3f}")
        gemm_f = nominal["gemm"] / ref["gemm"][idx]
        memory_f = nominal["memory"] / ref["memory"][idx]
        blends = {w: float(np.std(t + np.log(w * gemm_f + (1 - w) * memory_f)))
                  for w in (0.0, 0.25, 0.5, 0.75, 1.0)}
        best = min(blends, key=lambda w: blends[w])
        cells.append(f"{best:g} ({blends[best]:.3f})")
        design = np.column_stack([np.ones(len(idx)), np.log(ref["gemm"][idx]),
                                  np.log(ref["memory"][idx])])
        coef = np.linalg.lstsq(design, t, rcond=None)[0]
        lines.append(f"| {kernel} | {np.exp(np.median(t)) * 1e3:.3f} | " + " | ".join(cells)
                     + f" | {coef[1]:.2f} | {coef[2]:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--raw", help="also write every sample and its references here (JSON)")
    ap.add_argument("--from-raw", help="report a raw file written earlier; time nothing")
    args = ap.parse_args(argv)
    if args.from_raw:
        raw = json.loads(Path(args.from_raw).read_text())
    else:
        raw = _child(args.minutes, args.threads)
        if args.raw:
            Path(args.raw).write_text(json.dumps(raw))
    command = (f"python benchmarks/speed_kernels.py --minutes {args.minutes:g} "
               f"--threads {args.threads}")
    print(_report(raw, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
