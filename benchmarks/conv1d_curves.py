"""Do 1-d convolutions need curves of their own? Prices held-apart 1-d convolutions with a
profile's (2-d) convolution curves, with curves of 1-d samples only, and with both.

    python benchmarks/conv1d_curves.py --profile benchmarks/results/cpu-epyc/cpu-profile-64.json \\
        --out benchmarks/results/cpu-epyc/conv1d-curves.md

ATen runs a 1-d convolution as a 2-d one of height 1, on the backend the same rules select (at
batch 1 with at most 20,480 input elements and 3 taps, im2col and one GEMM: ``slow2d``), and
the calibration's conv sweep samples only square 2-d maps: waveform front ends (one input
channel, 10-251 taps at stride 1-16, unfolded ``kernel / stride`` times into a GEMM whose inner
dimension is the taps) and long sequences at few channels lie far from its samples.

Draws ``--train`` random 1-d convolutions (:func:`conv1d_configs`: a quarter front ends, the
rest sequence layers of 12-512 channels, kernels 1-7, stride 1-2 or dilation 1-8, lengths
4-4,096) and ``--held-apart`` more with another seed, and times them hot in one interleaved
stage with the calibration's 2-d conv sweep (``calibration.ops``) and its own protocol
(``calibration.sweep_stage.class_stage``: rounds, the floor subtracted, scaled to the
profile's nominal speed), so that the machine's speed is the same for all. Each held-apart
convolution's kernel is then priced (``DeviceModel.kernel_times_s``, hot) on conv curves made
as the calibration makes them (the class and one per variant) from the 2-d samples, from the
1-d training samples, and from both; the profile gives everything else. Prints each
convolution and the median / P90 error and median ratio of each; ``--out`` writes it as
markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import random
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.calibration.conv_configs import (FRONT_END_CHANNELS, FRONT_END_KERNELS,  # noqa: E402
                                              FRONT_END_LENGTHS, SEQUENCE_CHANNELS)
from ftmodel.calibration.ops import CPU_GRID, OpSample, named_sweeps  # noqa: E402
from ftmodel.calibration.speed_probe import speed_meter_for  # noqa: E402
from ftmodel.calibration.sweep_stage import class_stage, grouped_curves, subset_curve  # noqa: E402
from ftmodel.estimate.kernels import DeviceModel  # noqa: E402
from ftmodel.frameworks import eager  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile, OpClassData, read_profile  # noqa: E402
from ftmodel.measure import keep_heap  # noqa: E402
from ftmodel.program import Kernel  # noqa: E402
from ftmodel.speed import speed_normalised  # noqa: E402
from ftmodel.tracing.dispatch import trace  # noqa: E402

# waveform front ends and aligned sequence channels as the calibration draws them
# (FRONT_END_*, SEQUENCE_CHANNELS); this study also draws channel counts off oneDNN's block,
# shorter sequences and "same" padding
_SEQUENCE_UNALIGNED_CHANNELS = (12, 20, 24, 40, 60, 100, 120, 200)
_SEQUENCE_LENGTHS = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def conv1d_configs(n: int, seed: int) -> list[tuple[int, ...]]:
    """``n`` random ``(batch, in, out, length, kernel, stride, dilation)``, a quarter of them
    front ends, within the CPU sweep's limits on MACs and input elements."""
    rng = random.Random(seed)
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        b = rng.choice(CPU_GRID.conv_batches)
        if len(configs) < n // 4:
            (k, stride), cin, dilation = rng.choice(FRONT_END_KERNELS), 1, 1
            cout, length = rng.choice(FRONT_END_CHANNELS), rng.choice(FRONT_END_LENGTHS)
        else:
            cin, cout = rng.choice(SEQUENCE_CHANNELS), rng.choice(SEQUENCE_CHANNELS)
            if rng.random() < 1 / 3:  # a channel count off oneDNN's block, in or out
                if rng.random() < 0.5:
                    cin = rng.choice(_SEQUENCE_UNALIGNED_CHANNELS)
                else:
                    cout = rng.choice(_SEQUENCE_UNALIGNED_CHANNELS)
            k, length = rng.choice((1, 3, 3, 5, 7)), rng.choice(_SEQUENCE_LENGTHS)
            stride = rng.choice((1, 1, 2))
            dilation = rng.choice((1, 1, 2, 4, 8)) if stride == 1 and k > 1 else 1
        span = (k - 1) * dilation + 1
        if length < span:
            continue
        out_length = (length - span) // stride + 1 if stride > 1 else length  # "same" at stride 1
        if (b * out_length * cout * cin * k > CPU_GRID.conv_max_macs
                or b * cin * length > CPU_GRID.conv_max_input):
            continue
        configs.append((b, cin, cout, length, k, stride, dilation))
    return configs


def conv1d_sample(config: tuple[int, ...], tag: str) -> OpSample:
    b, cin, cout, length, k, stride, dilation = config
    pad = (k - 1) * dilation // 2 if stride == 1 else 0
    conv = nn.Conv1d(cin, cout, k, stride, padding=pad, dilation=dilation, bias=False)
    label = f"{tag} b{b} c{cin}->{cout} L{length} k{k} s{stride} d{dilation}"
    return OpSample("conv", "conv", label, conv.requires_grad_(False),
                    (torch.randn(b, cin, length),))


def with_conv_curves(profile: HardwareProfile, data: OpClassData, variants: Sequence[str],
                     keep: Sequence[int]) -> HardwareProfile:
    """``profile`` with its dense conv curves (``conv``, ``conv:<variant>``) replaced by those of
    the samples ``keep`` of ``data``, made as the calibration makes them."""
    sub = subset_curve(data, list(keep))
    curves = {"conv": sub, **grouped_curves("conv:", sub, [variants[i] for i in keep])}
    op_classes = {k: v for k, v in profile.device.op_classes.items()
                  if k != "conv" and not k.startswith("conv:")}
    return dataclasses.replace(profile, device=dataclasses.replace(
        profile.device, op_classes={**op_classes, **curves}))


def main_kernel(sample: OpSample) -> Kernel:
    prog = eager.lower(trace(sample.module, sample.inputs))
    return max((k for k in prog.kernels if k.op_class == "conv"),
               key=lambda k: (k.macs, k.bytes_total))


def summary(ratios: Sequence[float]) -> str:
    apes = sorted(abs(r - 1.0) for r in ratios)
    p90 = apes[min(len(apes) - 1, int(0.9 * len(apes)))]
    within = sum(a <= 0.25 for a in apes) / len(apes)
    return (f"{statistics.median(apes):.1%} | {p90:.1%} | {statistics.median(ratios):.2f} | "
            f"{within:.0%}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--train", type=int, default=32)
    ap.add_argument("--held-apart", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    profile = read_profile(args.profile)
    torch.set_num_threads(args.threads)
    keep_heap()  # the calibration's measurement protocol
    sweep = named_sweeps("conv")["conv"]
    floor, two_d = [s for s in sweep if s.is_floor], [s for s in sweep if not s.is_floor]
    train = [conv1d_sample(c, "train") for c in conv1d_configs(args.train, 1357)]
    apart = [conv1d_sample(c, "held-apart") for c in conv1d_configs(args.held_apart, 97531)]
    with torch.no_grad(), speed_normalised(speed_meter_for("cpu", profile)):
        data, raw, variants = class_stage(floor + two_d + train + apart, "cpu", args.rounds, 0.03)
    n2, n1 = len(two_d), len(train)
    sets = {"2-d samples": range(n2), "1-d samples": range(n2, n2 + n1),
            "2-d and 1-d samples": range(n2 + n1)}
    pricers = [(name, DeviceModel(with_conv_curves(profile, data, variants, idx).device, "fp32"))
               for name, idx in sets.items()]
    pricers.append(("the profile as calibrated", DeviceModel(profile.device, "fp32")))
    by_variant = Counter(variants[n2:n2 + n1])
    lines = ["| held-apart convolution | variant | measured ms | "
             + " | ".join(f"{name} ms (ratio)" for name, _ in pricers) + " |",
             "|---|---|---|" + "---|" * len(pricers)]
    ratios: list[list[float]] = [[] for _ in pricers]
    for s, r, row in zip(apart, raw[n2 + n1:], data.samples[n2 + n1:]):
        kernel, measured_s = main_kernel(s), row[3]
        cells = []
        for i, (_, model) in enumerate(pricers):
            (pred_s,) = model.kernel_times_s([kernel])
            ratios[i].append(float(pred_s) / measured_s)
            cells.append(f"{pred_s * 1e3:.3f} ({pred_s / measured_s:.2f})")
        lines.append(f"| {s.label.split(' ', 1)[1]} | {r['variant']} | {measured_s * 1e3:.3f} | "
                     + " | ".join(cells) + " |")
    lines += ["", "| curves | median APE | P90 APE | median ratio | within ±25% |",
              "|---|---|---|---|---|"]
    lines += [f"| {name} | {summary(rs)} |" for (name, _), rs in zip(pricers, ratios)]
    counts = ", ".join(f"{v or 'none'}: {c}" for v, c in sorted(by_variant.items()))
    lines += ["", f"1-d training samples per variant: {counts} (a variant's curve needs 3); "
              f"2-d samples: {n2}."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        args.out.write_text(
            f"# 1-d convolutions priced by 2-d and 1-d curves\n\n- date: {stamp}; torch "
            f"{torch.__version__}, {args.threads} threads\n- command: `python "
            f"benchmarks/conv1d_curves.py --profile {args.profile} --train {args.train} "
            f"--held-apart {args.held_apart} --rounds {args.rounds}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
