"""What a GELU costs over a ReLU inside a network, against the same difference alone.

    python benchmarks/gelu_in_network.py --networks mlp2,transformer4,cnn0 --batch 1

Each of the calibration's synthetic networks (``ftmodel.calibration.networks``) is timed as it is
and with every ``nn.GELU`` replaced by ``nn.ReLU``, in eager PyTorch and frozen TorchScript
(``ftmodel.frameworks.torchscript.runner``), next to GELU and ReLU alone on the shapes the
network gives them, all in one set of interleaved rounds
(``ftmodel.measure.measure_interleaved``, ``--repeats`` times; the least and the median time of
the repeats). Prints the network's GELU - ReLU difference and the sum of the lone differences:
the calibration prices each GELU by the second. Times, 2 threads; nothing is written.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.calibration.networks import synthetic_networks  # noqa: E402
from ftmodel.calibration.sweep_stage import caller  # noqa: E402
from ftmodel.frameworks import torchscript  # noqa: E402
from ftmodel.measure import measure_interleaved  # noqa: E402


def _relu_for_gelu(model: nn.Module) -> nn.Module:
    out = copy.deepcopy(model)
    for mod in out.modules():
        for name, child in list(mod.named_children()):
            if isinstance(child, nn.GELU):
                setattr(mod, name, nn.ReLU())
    return out


def _gelu_shapes(model: nn.Module, xs: tuple[Any, ...]) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    hooks = [m.register_forward_hook(lambda _m, i, _o: shapes.append(tuple(i[0].shape)))
             for m in model.modules() if isinstance(m, nn.GELU)]
    with torch.no_grad():
        model(*xs)
    for h in hooks:
        h.remove()
    return shapes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--networks", default="mlp2,transformer4,cnn0")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(2)
    nets = {n.name: n for n in synthetic_networks(18)}
    fns: dict[tuple[str, str, str], Callable[[], object]] = {}
    shapes: dict[str, list[tuple[int, ...]]] = {}
    for name in args.networks.split(","):
        net = nets[name]
        xs = tuple(net.make_inputs(args.batch))
        model = net.module.eval()
        shapes[name] = _gelu_shapes(model, xs)
        relu = _relu_for_gelu(model)
        for variant, m in (("gelu", model), ("relu", relu)):
            # eager: the module itself; TorchScript: the frozen artifact its predictions lower
            fns[(name, "eager", variant)] = caller(m, xs)
            fns[(name, "torchscript", variant)] = torchscript.runner(m, xs, args.batch)
        for s in set(shapes[name]):
            x = torch.randn(s)
            fns[(name, "alone", f"gelu{s}")] = partial(F.gelu, x)
            fns[(name, "alone", f"relu{s}")] = partial(F.relu, x)
    times: dict[tuple[str, str, str], list[float]] = {k: [] for k in fns}
    for _ in range(args.repeats):
        for key, m in measure_interleaved(fns, rounds=3, round_s=0.03, max_reps=300).items():
            times[key].append(m.time_s * 1e6)
    least = {k: min(v) for k, v in times.items()}
    median = {k: float(np.median(v)) for k, v in times.items()}
    for name, gelus in shapes.items():
        alone = [sum(t[(name, "alone", f"gelu{s}")] - t[(name, "alone", f"relu{s}")]
                     for s in gelus) for t in (least, median)]
        for fw in ("eager", "torchscript"):
            net = [t[(name, fw, "gelu")] - t[(name, fw, "relu")] for t in (least, median)]
            spread = max(max(times[(name, fw, v)]) / min(times[(name, fw, v)]) - 1
                         for v in ("gelu", "relu"))
            print(f"{name}@b{args.batch} {fw}: {len(gelus)} GELUs; in the network GELU - ReLU "
                  f"{net[0]:.0f} us (least) / {net[1]:.0f} us (median); alone, summed "
                  f"{alone[0]:.0f} / {alone[1]:.0f} us; repeats up to {spread:.0%} apart")


if __name__ == "__main__":
    main()
