"""TorchScript's prepacked convolutions one by one: each convolution of a model timed as the
calibration times its samples, next to the device time the profile's curves give it.

    python benchmarks/ts_convs.py --profile P.json --model efficientnet_lite0@112 --batch 4

Every distinct 2-d convolution of the model (its module, at the input shape the model gives it)
is called as TorchScript's frozen graph calls it, on an input already in oneDNN's blocked
layout (:func:`ftmodel.calibration.runtime_timing.ts_prepacked_conv`), less the calibration's
floor sample called the same way; beside it, the device time the profile's TorchScript curves
give that kernel, and its host price. The whole model's TorchScript runner is timed in the
same interleaved rounds, against its prediction, so the convolutions' share of a miss can be
read off. Batch norms that TorchScript folds into a convolution are left out (the folded
convolution has a bias; these have the module's own). Corpus models: the tuning half only.
Writes nothing; prints a table per convolution and totals per kind (depthwise, grouped, 1x1,
full).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diagnose import model_by_name  # noqa: E402
from ftmodel.api import Predictor  # noqa: E402
from ftmodel.calibration.ops import OpSample  # noqa: E402
from ftmodel.calibration.runtime_timing import ts_prepacked_conv  # noqa: E402
from ftmodel.estimate.timeline import host_costs_s  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.measure import keep_heap, measure_interleaved  # noqa: E402


@dataclass
class ConvCase:
    """One distinct convolution of the model and how often the model runs it."""

    module: nn.Conv2d
    shape: tuple[int, ...]
    count: int

    @property
    def kind(self) -> str:
        m = self.module
        if m.groups > 1 and m.groups == m.in_channels:
            return "depthwise"
        if m.groups > 1:
            return "grouped"
        return "1x1" if m.kernel_size == (1, 1) else "full"

    @property
    def label(self) -> str:
        m = self.module
        return (f"{m.in_channels}->{m.out_channels} k{m.kernel_size[0]} s{m.stride[0]} "
                f"g{m.groups} @{'x'.join(map(str, self.shape[1:]))}")


def model_convs(model: nn.Module, inputs: object) -> list[ConvCase]:
    """The distinct ``nn.Conv2d`` calls of one forward (by configuration and input shape)."""
    cases: dict[tuple[object, ...], ConvCase] = {}

    def hook(mod: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        assert isinstance(mod, nn.Conv2d)
        shape = tuple(args[0].shape)
        key = (mod.in_channels, mod.out_channels, mod.kernel_size, mod.stride, mod.padding,
               mod.dilation, mod.groups, mod.bias is not None, shape)
        if key in cases:
            cases[key].count += 1
        else:
            cases[key] = ConvCase(mod, shape, 1)

    handles = [m.register_forward_pre_hook(hook) for m in model.modules()
               if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        if isinstance(inputs, dict):
            model(**inputs)
        elif isinstance(inputs, tuple):
            model(*inputs)
        else:
            model(inputs)
    for h in handles:
        h.remove()
    return list(cases.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-s", type=float, default=0.1)
    ap.add_argument("--speed", choices=("profile", "now"), default="profile")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_heap()
    model, make_inputs = model_by_name(args.model)
    model.eval()
    pred = Predictor("torchscript", read_profile(args.profile), heap="kept", speed=args.speed)
    fw = pred.framework
    assert fw.runner is not None
    cases = model_convs(model, make_inputs(args.batch))
    fns: dict[str, Callable[[], object]] = {}
    conv_price: dict[str, tuple[float, float]] = {}
    floors = {groups: ts_prepacked_conv(OpSample(
        "conv", "conv", "floor", nn.Conv2d(2, 2, 3, 1, 1, groups=groups, bias=False).eval(),
        (torch.randn(1, 2, 4, 4),))) for groups in (1, 2)}
    for groups, run in floors.items():
        assert run is not None
        fns[f"floor g{groups}"] = run
    for case in cases:
        x = torch.randn(case.shape)
        b = case.shape[0]
        run = ts_prepacked_conv(OpSample("conv", "conv", case.label, case.module, (x,)))
        if run is None:
            continue
        fns[case.label] = run
        prog = pred.lower(case.module, (x,), b, pred.trace(case.module, (x,), b))
        dev = pred.kernel_arrays(prog.kernels).device_s
        host = host_costs_s(prog, pred.fw_host, [])
        convs = [i for i, k in enumerate(prog.kernels)
                 if k.members and "mkldnn_convolution" in k.members[0]]
        conv_price[case.label] = ((float(dev[convs[0]]), float(host[convs[0]]))
                                  if convs else (float("nan"),) * 2)
    fns["model"] = fw.runner(model, make_inputs, args.batch, device="cpu", dtype="fp32")
    model_pred = pred.predict(model, [args.batch], make_inputs)[0]
    print(f"{args.model} b{args.batch}: {len(cases)} distinct convolutions, "
          f"{sum(c.count for c in cases)} calls; timing {len(fns)} calls "
          f"({args.rounds} rounds)", flush=True)
    with torch.no_grad():
        timed = measure_interleaved(fns, rounds=args.rounds, round_s=args.round_s)
    print(f"{'convolution':<44}{'n':>3}{'meas us':>9}{'dev us':>9}{'ratio':>7}{'host us':>9}"
          f"{'spread':>8}")
    kinds: dict[str, list[float]] = {}
    for case in sorted(cases, key=lambda c: (c.kind, c.label)):
        if case.label not in timed:
            continue
        floor = timed[f"floor g{2 if case.module.groups > 1 else 1}"].time_s
        meas = timed[case.label].time_s - floor
        dev, host = conv_price[case.label]
        print(f"{case.label:<44}{case.count:>3}{meas * 1e6:>9.1f}{dev * 1e6:>9.1f}"
              f"{dev / meas if meas > 0 else float('nan'):>7.2f}{host * 1e6:>9.1f}"
              f"{timed[case.label].spread:>8.1%}")
        k = kinds.setdefault(case.kind, [0, 0.0, 0.0, 0.0])
        k[0] += case.count
        k[1] += case.count * meas
        k[2] += case.count * dev
        k[3] += case.count * host
    print(f"\n{'kind':<12}{'calls':>6}{'meas ms':>9}{'dev ms':>9}{'ratio':>7}{'host ms':>9}")
    for kind, (n, m, d, h) in sorted(kinds.items()):
        print(f"{kind:<12}{int(n):>6}{m * 1e3:>9.2f}{d * 1e3:>9.2f}{d / m:>7.2f}{h * 1e3:>9.2f}")
    n, m, d, h = (sum(k[i] for k in kinds.values()) for i in range(4))
    print(f"{'all convs':<12}{int(n):>6}{m * 1e3:>9.2f}{d * 1e3:>9.2f}{d / m:>7.2f}"
          f"{h * 1e3:>9.2f}")
    mm = timed["model"]
    print(f"model: measured {mm.time_s * 1e3:.2f} ms (spread {mm.spread:.1%}), predicted "
          f"{model_pred.latency_s * 1e3:.2f} ms ({model_pred.latency_s / mm.time_s:.2f}x)")


if __name__ == "__main__":
    main()
