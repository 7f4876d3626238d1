"""Time per layer of a chain of distinct weight-bound layers, by the chain's weight footprint.

    python benchmarks/cache_levels.py
    python benchmarks/cache_levels.py --profile benchmarks/results/cpu-xeon/cpu-profile-x8.json

Chains of 1 to 32 distinct ``nn.Linear(512, 512)`` layers (1 MiB of fp32 weights each) at
batch 1, timed in interleaved rounds: a layer's time is the chain's over its length, its
dispatch included. Where the footprint outgrows a cache level, every layer's weights come
from the next level and the time per layer steps up. With ``--profile``, each chain's eager
prediction beside it (heap kept, as measured here), which shows where the profile's cache model
(``ftmodel.estimate.cache``) sees the step. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.measure import keep_heap, measure_interleaved  # noqa: E402

WIDTH = 512  # 512 x 512 fp32 weights: 1 MiB per layer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", help="a calibrated CPU profile to predict each chain with")
    ap.add_argument("--lengths", default="1,2,3,4,6,8,12,16,32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_heap()
    x = torch.randn(1, WIDTH)
    chains = {n: nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(n)]).eval()
              .requires_grad_(False) for n in (int(v) for v in args.lengths.split(","))}
    predictor = Predictor("eager", load_profile(args.profile), heap="kept") \
        if args.profile else None
    with torch.no_grad():
        measured = measure_interleaved({n: (lambda c=c: c(x)) for n, c in chains.items()},
                                       rounds=args.rounds, round_s=0.05)
    mib = WIDTH * WIDTH * 4 / 2**20
    print(f"chains of distinct Linear({WIDTH}, {WIDTH}) at batch 1, {args.threads} threads, "
          f"{args.rounds} interleaved rounds")
    print("| layers | weights MiB | µs per layer | spread |"
          + (" predicted µs per layer | predicted / measured |" if predictor else ""))
    print("|---|---|---|---|" + ("---|---|" if predictor else ""))
    for n, m in measured.items():
        per_layer = m.time_s / n
        row = f"| {n} | {n * mib:.0f} | {per_layer * 1e6:.1f} | {m.spread:.2f} |"
        if predictor is not None:
            p = predictor.predict(chains[n], [1], x)[0].latency_s / n
            row += f" {p * 1e6:.1f} | {p / per_layer:.2f} |"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
