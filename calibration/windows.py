"""Pools priced by their windows: max and average pools of several windows and strides.

A pool's time follows the input its windows read (``outputs × window``,
:mod:`ftmodel.tracing.windows`) and the outputs it writes, not the bytes it moves: on an AMD
EPYC (eager, 2 threads, 192 x 28 x 28) a 3x3 max pool of stride 1 took 4x the time of a 3x3
one of stride 2 and a 5x5 one of stride 1 2.2x that, on the same input; aten's average pool ran
2-4x faster than its max pool (which also writes each output's index) on the same windows. The
shared ``pool`` samples are 3x3 stride-2 max pools, global averages and 1-d max pools, so a
curve in bytes priced stride-1 pools at 0.27-0.60x and average pools at 0.10-0.24x
(``benchmarks/pool_windows.py``).

This stage times 2x2/2, 3x3/2, 3x3/1 and 5x5/1 max and average pools (padded to keep a stride-1
pool's map) on generic ``1 x C x H x W`` inputs of 16 KiB to 6.4 MB, hot and, where the run
flushes the cache, cold, and gives each op a per-window curve (``pool@<op>:windows``,
:data:`ftmodel.estimate.curves.WINDOWS`): its samples hold the bytes the windows read on the
bytes-read axis (:meth:`ftmodel.calibration.op_sample.OpSample.curve_row`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ftmodel.calibration.op_sample import OpSample
from ftmodel.calibration.sweep_stage import class_stage, grouped_curves
from ftmodel.estimate.curves import WINDOWS
from ftmodel.hardware.profile import DeviceProfile, OpClassData

__all__ = ["WINDOWS_SWEEP", "window_samples", "window_stage", "windows_stale"]

WINDOWS_SWEEP = "pool" + WINDOWS  # the samples' curve key (raw timings are kept under it)
# (kernel, stride) of the windows timed; stride-1 ones padded by kernel // 2
_WINDOWS = ((2, 2), (3, 2), (3, 1), (5, 1))
# (channels, side) of the inputs: 16 KiB, 256 KiB (on a large and a small map), 0.8 MB, 2 MiB,
# 3.2 MB and 6.4 MB. Above the cores' L2 a window read costs more: with inputs up to 0.8 MB
# the curve priced 2-d pools on a 6.4 MB input (batch 16, 128 x 28 x 28) at 0.40-0.79x (AMD
# EPYC, 1 MiB L2 per core)
_INPUTS = ((16, 16), (64, 32), (256, 16), (64, 56), (128, 64), (256, 56), (128, 112))
_POOLS: dict[str, Callable[..., torch.Tensor]] = {"max": F.max_pool2d, "avg": F.avg_pool2d}


class _Pool(nn.Module):
    """One functional pool: ``kind`` ("max", "avg"), window ``k`` x ``k``, stride ``s``."""

    def __init__(self, kind: str, k: int, s: int) -> None:
        super().__init__()
        self.pool, self.k, self.s, self.pad = _POOLS[kind], k, s, (k // 2 if s == 1 else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x, self.k, self.s, self.pad)


def window_samples(quick: bool = False) -> list[OpSample]:
    """Each pool (max, average) at each window of :data:`_WINDOWS` on each input of
    :data:`_INPUTS` (with ``quick``, the 16 KiB and 0.8 MB ones), a floor per pool first (a
    2x2 window on a 1 x 1 x 2 x 2 input)."""
    inputs = (_INPUTS[0], _INPUTS[3]) if quick else _INPUTS
    out: list[OpSample] = []
    for kind in _POOLS:
        family = f"{kind}_pool windows"
        out.append(OpSample(WINDOWS_SWEEP, family, f"{family} floor", _Pool(kind, 2, 2),
                            (torch.randn(1, 1, 2, 2),), is_floor=True))
        for c, side in inputs:
            for k, s in _WINDOWS:
                out.append(OpSample(WINDOWS_SWEEP, family, f"{family} {k}x{k}/{s} c{c} "
                                    f"{side}x{side}", _Pool(kind, k, s),
                                    (torch.randn(1, c, side, side),)))
    return out


def window_stage(samples: list[OpSample], device: str, rounds: int, round_s: float,
                 flush: Callable[[], object] | None = None
                 ) -> tuple[dict[str, OpClassData], list[dict[str, Any]]]:
    """Times ``samples`` (:func:`window_samples`; cold too with ``flush``) and returns (each
    op's per-window curve, keyed ``pool@<op>:windows``; the samples' raw timings)."""
    measured, raw, _ = class_stage(samples, device, rounds, round_s, flush)
    ops = [str(r.get("op", "")) for r in raw]
    curves = grouped_curves("pool@", measured, ops)
    return {name + WINDOWS: data for name, data in curves.items()}, raw


def windows_stale(device: DeviceProfile) -> bool:
    """Whether a CPU profile lacks the per-window pool curves (made before this stage was)."""
    return not any(name.endswith(WINDOWS) for name in device.op_classes)
