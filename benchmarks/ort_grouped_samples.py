"""Grouped convolutions timed as ONNX Runtime's calibration times them, against their price.

    python benchmarks/ort_grouped_samples.py --profile P.json --convs 1x960x7k5,4x1152x4k5

Each ``<batch>x<channels>x<map>k<kernel>`` is a depthwise convolution (groups = channels,
stride 1, "same" padding) sampled exactly as ``ftmodel calibrate`` samples ONNX Runtime's
grouped-convolution curve (``ftmodel.calibration.framework_ops.framework_curve``: its session,
interleaved with the family's floor, the session time less the floor's, times the main node's
share of the node time ONNX Runtime's profiler records), next to the hot device time the
profile's own curve prices that node at (``Predictor.hot_cold_times_s`` on the main kernel of
the framework's lowering). A shape the curve's samples do not cover shows as a ratio far from 1.
Times, 2 threads; nothing is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.calibration.framework_ops import framework_curve  # noqa: E402
from ftmodel.calibration.ops import OpSample  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.measure import set_threads  # noqa: E402

CLASS = "conv_grouped"


def depthwise(batch: int, channels: int, side: int, kernel: int, label: str,
              is_floor: bool = False) -> OpSample:
    conv = nn.Conv2d(channels, channels, kernel, 1, padding=kernel // 2, groups=channels,
                     bias=False).requires_grad_(False)
    return OpSample(CLASS, CLASS, label, conv, (torch.randn(batch, channels, side, side),),
                    is_floor=is_floor)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--convs", default="1x960x7k5,4x1152x4k5,4x1152x8k5,4x480x7k5,4x1152x4k3")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    set_threads(2)
    prof = read_profile(args.profile)
    pred = Predictor("onnxruntime", prof, heap="kept")
    shapes = {}
    for spec in args.convs.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)k(\d+)", spec.strip())
        if m is None:
            raise SystemExit(f"--convs: {spec!r} is not <batch>x<channels>x<map>k<kernel>, "
                             "e.g. 4x1152x4k5")
        shapes[spec.strip()] = tuple(int(v) for v in m.groups())
    samples = [depthwise(1, 2, 4, 3, f"{CLASS} floor", is_floor=True)]
    samples += [depthwise(*shape, label=spec) for spec, shape in shapes.items()]
    data, raw, _ = framework_curve("onnxruntime", samples, "cpu", prof.device,
                                   rounds=args.rounds, round_s=0.05)
    if data is None:
        raise SystemExit("ONNX Runtime ran too few of the samples to compare")
    timed = [r for r in raw if "total_s" in r]
    print("| conv (batch x channels x map, kernel) | sampled µs | priced µs | priced / sampled |")
    print("|---|---|---|---|")
    for row, r in zip(data.samples, timed):
        s = next(s for s in samples if s.label == r["label"])
        prog = pred.lower(s.module, s.inputs, s.inputs[0].shape[0],
                          pred.trace(s.module, s.inputs, s.inputs[0].shape[0]))
        main = max((k for k in prog.kernels if k.op_class == CLASS), key=lambda k: k.macs)
        hot, _ = pred.hot_cold_times_s([main])
        print(f"| {r['label']} | {row[3] * 1e6:.1f} | {hot[0] * 1e6:.1f} | "
              f"{hot[0] / row[3]:.2f} |")


if __name__ == "__main__":
    main()
