"""Pooling time by window and stride, measured and predicted, at a profile's speed.

    python benchmarks/pool_windows.py --profile benchmarks/results/cpu-epyc/cpu-profile-100.json

Times single 2-d max and average pools (2x2 stride 2, 3x3 stride 2, 3x3 stride 1, 5x5 stride
1, padded to keep a stride-1 pool's map) on one ``N x C x H x W`` input (batch 1 by default), in
interleaved rounds, every round scaled to the profile's nominal machine speed
(``ftmodel.speed``, as calibration measures), beside the profile's eager prediction of each.
Per pool: its time per input byte (the axis its curve is priced on) and per window read
(outputs × kh × kw, the work it does). A probe of op-level pricing with generic layers (no
corpus model). Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ftmodel.measure import measure_interleaved  # noqa: E402
from ftmodel.speed import speed_normalised  # noqa: E402
from op_probe import probe_setup  # noqa: E402

WINDOWS = ((2, 2), (3, 2), (3, 1), (5, 1))  # (kernel, stride)


def _pool(kind: str, k: int, s: int) -> nn.Module:
    pad = k // 2 if s == 1 else 0
    return (nn.MaxPool2d(k, s, pad) if kind == "max" else nn.AvgPool2d(k, s, pad)).eval()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="a calibrated CPU profile")
    ap.add_argument("--channels", type=int, default=192)
    ap.add_argument("--hw", type=int, default=28)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    predictor, meter = probe_setup(args.profile, args.threads)
    x = torch.randn(args.batch, args.channels, args.hw, args.hw)
    fns: dict[tuple[str, int, int], Callable[[], object]] = {}
    predicted: dict[tuple[str, int, int], float] = {}
    reads: dict[tuple[str, int, int], int] = {}
    for kind in ("max", "avg"):
        for k, s in WINDOWS:
            pool = _pool(kind, k, s)
            fns[(kind, k, s)] = functools.partial(pool, x)
            predicted[(kind, k, s)] = predictor.predict(pool, [args.batch], x)[0].latency_s
            with torch.no_grad():
                reads[(kind, k, s)] = pool(x).numel() * k * k
    with torch.no_grad(), speed_normalised(meter):
        measured = measure_interleaved(fns, rounds=5, round_s=0.03)
    in_bytes = x.numel() * x.element_size()
    print(f"2-d pools, batch {args.batch}, {args.channels} x {args.hw} x {args.hw} fp32, {args.threads} "
          "threads; " + ("at the profile's speed" if meter else "as measured (profile has no "
                                                                 "speed)"))
    print("| pool | window / stride | measured µs | predicted µs | predicted / measured "
          "| ns per input byte | ns per window read |")
    print("|---|---|---|---|---|---|---|")
    for key, fn in fns.items():
        kind, k, s = key
        t = measured[key].time_s
        print(f"| {kind} | {k}x{k} / {s} | {t * 1e6:.1f} | {predicted[key] * 1e6:.1f} | "
              f"{predicted[key] / t:.2f} | {t / in_bytes * 1e9:.2f} | "
              f"{t / reads[key] * 1e9:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
