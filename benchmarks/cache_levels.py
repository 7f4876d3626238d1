"""Time per layer of a chain of distinct weight-bound layers, by the chain's weight footprint.

    python benchmarks/cache_levels.py
    python benchmarks/cache_levels.py --profile benchmarks/results/cpu-xeon/cpu-profile-x8.json
    python benchmarks/cache_levels.py --profile P.json --width 1024 --rows 4 --mib 8,32,96,200,400
    python benchmarks/cache_levels.py --profile P.json --layer conv --mib 8,32,96,200,400

Chains of 1 to 32 distinct ``nn.Linear(512, 512)`` layers (1 MiB of fp32 weights each) at
batch 1, timed in interleaved rounds: a layer's time is the chain's over its length, its
dispatch included. ``--width`` and ``--rows`` change the layer and its batch; ``--layer conv``
chains ``nn.Conv2d(width, width, 3)`` on a 3x3 map (a late stage of a CNN at batch ``rows``);
``--mib`` gives the chains by weight footprint instead of length. Where the footprint outgrows a cache level, every layer's weights come
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



def _layer(kind: str, width: int) -> nn.Module:
    if kind == "conv":
        return nn.Conv2d(width, width, 3, padding=1, bias=False)
    return nn.Linear(width, width, bias=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", help="a calibrated CPU profile to predict each chain with")
    ap.add_argument("--lengths", default="1,2,3,4,6,8,12,16,32")
    ap.add_argument("--mib", default="",
                    help="weight footprints in MiB (comma-separated), in place of --lengths")
    ap.add_argument("--layer", choices=("linear", "conv"), default="linear")
    ap.add_argument("--width", type=int, default=512, help="features or channels per layer")
    ap.add_argument("--rows", type=int, default=1, help="the input's batch (rows)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_heap()
    w = args.width
    x = torch.randn(args.rows, w, 3, 3) if args.layer == "conv" else torch.randn(args.rows, w)
    mib = sum(p.numel() for p in _layer(args.layer, w).parameters()) * 4 / 2**20
    lengths = ([max(1, round(float(v) / mib)) for v in args.mib.split(",")] if args.mib
               else [int(v) for v in args.lengths.split(",")])
    chains = {n: nn.Sequential(*[_layer(args.layer, w) for _ in range(n)]).eval()
              .requires_grad_(False) for n in lengths}
    predictor = Predictor("eager", load_profile(args.profile), heap="kept") \
        if args.profile else None
    with torch.no_grad():
        measured = measure_interleaved({n: (lambda c=c: c(x)) for n, c in chains.items()},
                                       rounds=args.rounds, round_s=0.05)
    layer = (f"Conv2d({w}, {w}, 3) on 3x3 maps" if args.layer == "conv"
             else f"Linear({w}, {w})")
    print(f"chains of distinct {layer} at batch {args.rows}, {args.threads} threads, "
          f"{args.rounds} interleaved rounds")
    print("| layers | weights MiB | µs per layer | spread |"
          + (" predicted µs per layer | predicted / measured |" if predictor else ""))
    print("|---|---|---|---|" + ("---|---|" if predictor else ""))
    for n, m in measured.items():
        per_layer = m.time_s / n
        row = f"| {n} | {n * mib:.0f} | {per_layer * 1e6:.1f} | {m.spread:.2f} |"
        if predictor is not None:
            p = predictor.predict(chains[n], [args.rows], x)[0].latency_s / n
            row += f" {p * 1e6:.1f} | {p / per_layer:.2f} |"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
