"""Convolution time by channel count, measured and predicted, at a profile's speed.

    python benchmarks/conv_channels.py --profile benchmarks/results/cpu-xeon/cpu-profile-x6-median.json
    python benchmarks/conv_channels.py --profile ... --kind pointwise

Times single depthwise 3x3 convolutions (``--kind pointwise``: 1x1 convolutions, C to C
channels) at batch 1, 56x56, channels 16-96, in interleaved rounds,
every round scaled to the profile's nominal machine speed (``ftmodel.speed``, as calibration
measures), beside the profile's eager prediction of each. A probe of op-level pricing with
generic layers (no corpus model), for channel counts that are and are not multiples of 16.
Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ftmodel.measure import measure_interleaved  # noqa: E402
from ftmodel.speed import speed_normalised  # noqa: E402
from op_probe import probe_setup  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="a calibrated CPU profile")
    ap.add_argument("--channels", default="16,20,24,32,36,40,48,60,64,72,80,92,96")
    ap.add_argument("--hw", type=int, default=56)
    ap.add_argument("--kind", choices=("depthwise", "pointwise"), default="depthwise")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    predictor, meter = probe_setup(args.profile, args.threads)
    fns, predicted = {}, {}
    for c in (int(x) for x in args.channels.split(",")):
        conv = (nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False) if args.kind == "depthwise"
                else nn.Conv2d(c, c, 1, bias=False)).eval().requires_grad_(False)
        x = torch.randn(1, c, args.hw, args.hw)
        fns[c] = (lambda conv=conv, x=x: conv(x))
        predicted[c] = predictor.predict(conv, [1], x)[0].latency_s
    with torch.no_grad(), speed_normalised(meter):
        measured = measure_interleaved(fns, rounds=5, round_s=0.03)
    print(f"{'depthwise 3x3' if args.kind == 'depthwise' else 'pointwise 1x1'}, batch 1, "
          f"{args.hw}x{args.hw}, {args.threads} threads; "
          + ("at the profile's speed" if meter else "as measured (profile has no speed)"))
    print("| channels | multiple of 16 | measured µs | predicted µs | predicted / measured |")
    print("|---|---|---|---|---|")
    for c, m in measured.items():
        print(f"| {c} | {'yes' if c % 16 == 0 else 'no'} | {m.time_s * 1e6:.0f} | "
              f"{predicted[c] * 1e6:.0f} | {predicted[c] / m.time_s:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
