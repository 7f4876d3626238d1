"""How repeatable ONNX Runtime's profiler shares of its convolution samples are.

    python benchmarks/ort_conv_shares.py --passes 2 \\
        --profiles benchmarks/results/cpu-epyc/cpu-profile-86.json \\
        benchmarks/results/cpu-epyc/cpu-profile-94.json

The ONNX Runtime calibration prices a convolution sample as its session's time less the floor's,
times the convolution node's share of the node time ONNX Runtime's profiler records in one
profiled session (:func:`ftmodel.calibration.runtime_timing.ort_node_share`). This script
computes that share for every convolution sample of the sweep (the ones the given profiles
recorded a share for) ``--passes`` times in this process and prints how the passes agree with
one another and with each profile's recorded shares (ratios' median, P10, P90 and extremes),
then the samples whose passes disagree most and those whose first profile's share is
furthest below this process's first pass. Times nothing
but the profiled sessions; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.calibration.ops import op_samples  # noqa: E402
from ftmodel.calibration.runtime_timing import ort_node_share  # noqa: E402

Shares = dict[str, float]


def recorded_shares(path: str) -> Shares:
    """The ``node_share`` a profile recorded for each ONNX Runtime convolution sample."""
    raw = json.loads(Path(path).read_text())["provenance"]["raw_op_times"]
    return {r["label"]: float(r["node_share"]) for r in raw.get("onnxruntime/conv", [])
            if r.get("node_share")}


def ratio_summary(num: Shares, den: Shares) -> str:
    r = sorted(num[k] / den[k] for k in num if k in den and den[k] > 0)
    if not r:
        return "no common samples"
    return (f"median {statistics.median(r):.2f}, P10 {r[len(r) // 10]:.2f}, "
            f"P90 {r[len(r) * 9 // 10]:.2f}, least {r[0]:.2f}, most {r[-1]:.2f} ({len(r)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", nargs="+", required=True)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--show", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    recorded = {p: recorded_shares(p) for p in args.profiles}
    wanted = set().union(*recorded.values())
    samples = [s for s in op_samples()["conv"] if not s.is_floor and s.label in wanted]
    t0 = time.time()
    passes: list[Shares] = []
    for _ in range(args.passes):
        got = {s.label: ort_node_share(s, int(s.inputs[0].shape[0]), "Conv") for s in samples}
        passes.append({k: v for k, v in got.items() if v})
    print(f"{len(samples)} samples, {args.passes} passes in {time.time() - t0:.0f} s "
          f"({args.threads} threads)")
    for i, p in enumerate(passes[1:], start=2):
        print(f"pass {i} / pass 1: {ratio_summary(p, passes[0])}")
    for path, rec in recorded.items():
        print(f"{Path(path).name} / pass 1: {ratio_summary(rec, passes[0])}")
    spread = sorted(passes[0], key=lambda k: -max(p.get(k, 0.0) for p in passes)
                    / max(min(p.get(k, 1.0) for p in passes), 1e-9))
    for label in spread[:args.show // 2]:
        runs = "  ".join(f"pass {i + 1} {p.get(label, float('nan')):.2f}"
                         for i, p in enumerate(passes))
        print(f"  passes apart: {label:<36} {runs}")
    first = recorded[args.profiles[0]]
    low = sorted((k for k in first if k in passes[0]), key=lambda k: first[k] / passes[0][k])
    for label in low[:args.show]:
        cols = "  ".join(f"{Path(p).stem[-2:]} {recorded[p].get(label, float('nan')):.2f}"
                         for p in args.profiles)
        runs = "  ".join(f"pass {i + 1} {p.get(label, float('nan')):.2f}"
                         for i, p in enumerate(passes))
        print(f"  {label:<36} {runs}  recorded: {cols}")


if __name__ == "__main__":
    main()
