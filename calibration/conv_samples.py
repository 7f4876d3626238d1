"""The convolution samples of the op sweeps: 2-d ones of every eager curve (dense, depthwise and
grouped, from :mod:`ftmodel.calibration.conv_configs`) and the 1-d ones ONNX Runtime's sweep
times, each a module with its input (:class:`~ftmodel.calibration.op_sample.OpSample`).
"""

from __future__ import annotations

import random

from torch import nn

from ftmodel.calibration.conv_configs import (conv1d_configs, conv_configs, early_stage_configs,
                                              gemm_grouped_configs, grouped_configs,
                                              slow_path_configs)
from ftmodel.calibration.op_sample import OpSample, random_tensor as _r
from ftmodel.calibration.sweep_grid import SweepGrid

__all__ = ["ORT_CONV1D_SAMPLES", "conv1d_samples", "conv_samples"]


def _conv_module(cin: int, cout: int, k: int, stride: int, groups: int) -> nn.Module:
    conv = nn.Conv2d(cin, cout, k, stride, padding=(k - 1) // 2, groups=groups, bias=False)
    return conv.requires_grad_(False)


def _conv_sample(cls: str, config: tuple[int, ...], suffix: str = "") -> OpSample:
    """The sweep sample of one ``(batch, in, out, map size, kernel, stride, groups)``."""
    b, cin, cout, hw, k, stride, groups = config
    return OpSample(cls, cls, f"conv b{b} c{cin}->{cout} {hw}px k{k} s{stride} g{groups}{suffix}",
                    _conv_module(cin, cout, k, stride, groups), (_r(b, cin, hw, hw),))


def conv_samples(quick: bool, depthwise: bool, grid: SweepGrid) -> list[OpSample]:
    """The sweep's dense (``conv``) or depthwise and grouped (``conv_grouped``) convolutions,
    their family's floor first: random ones within ``grid``'s limits, and on a full sweep the
    early stages of image models, batch-1 ones on maps of 1-8 px, the late stages and the
    3-channel stem (:mod:`ftmodel.calibration.conv_configs`)."""
    rng = random.Random(1234 + depthwise)
    cls = "conv_grouped" if depthwise else "conv"
    out = [OpSample(cls, cls, f"{cls} floor", _conv_module(2, 2, 3, 1, 2 if depthwise else 1),
                    (_r(1, 2, 4, 4),), is_floor=True)]
    n = (grid.conv_samples if not depthwise else grid.depthwise_samples) if not quick else 8
    out += [_conv_sample(cls, c) for c in conv_configs(rng, n, depthwise, grid)]
    # grouped convolutions beside the depthwise ones: of 4-64 channels per group, and those
    # oneDNN runs as GEMMs
    extra = ((grouped_configs, grid.grouped_samples),
             (gemm_grouped_configs, grid.gemm_grouped_samples)) if depthwise else ()
    for configs, count in extra:
        if count:
            out += [_conv_sample(cls, c) for c in configs(count if not quick else 3, grid)]
    # the early stages of image models at batch 4-16 (bound by activation bytes; full sweep only)
    early = grid.early_stage_depthwise_samples if depthwise else grid.early_stage_samples
    if early and not quick:
        out += [_conv_sample(cls, c, " early") for c in early_stage_configs(early, depthwise, grid)]
    if not depthwise and not quick and grid.slow_path_samples:  # batch 1 on maps of 1-8 px
        out += [_conv_sample(cls, c, " small")
                for c in slow_path_configs(grid.slow_path_samples, grid)]
    if not depthwise:  # the last stages of CNNs at small resolution (weight-bound)
        late = grid.late_stage_convs if not quick else grid.late_stage_convs[1:3]
        out += [_conv_sample(cls, (b, cin, cout, hw, k, 1, 1)) for b, cin, cout, hw, k in late]
    if not quick and not depthwise:  # the 3-channel stem of image models
        for b in grid.stem_batches:
            out.append(OpSample("conv", "conv", f"stem b{b}", _conv_module(3, 64, 7, 2, 1),
                                (_r(b, 3, 112, 112),)))
    return out


ORT_CONV1D_SAMPLES = 24  # 1-d convolutions ONNX Runtime's sweep times (6 with quick)


def conv1d_samples(quick: bool, grid: SweepGrid) -> list[OpSample]:
    """1-d convolutions (:func:`~ftmodel.calibration.conv_configs.conv1d_configs`): ONNX Runtime
    runs them on its plain NCHW kernel (im2col and SGEMM), never on the NCHWc one its 2-d
    samples mostly take (:func:`ftmodel.frameworks.onnx_graph.kernel_path`)."""
    out = []
    for b, cin, cout, length, k, stride, dilation in conv1d_configs(
            6 if quick else ORT_CONV1D_SAMPLES, grid):
        conv = nn.Conv1d(cin, cout, k, stride, dilation=dilation, bias=False).requires_grad_(False)
        out.append(OpSample("conv", "conv", f"conv1d b{b} c{cin}->{cout} L{length} k{k} "
                            f"s{stride} d{dilation}", conv, (_r(b, cin, length),)))
    return out
