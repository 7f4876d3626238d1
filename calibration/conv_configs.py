"""Random convolution configurations of the CPU and GPU op sweeps (``calibration/ops.py``), each
``(batch, in channels, out channels, map size, kernel, stride, groups)``: dense and depthwise
ones, on and off oneDNN's channel block; grouped ones of 4-64 channels per group; and grouped
ones that oneDNN runs as im2col and a GEMM per group."""

from __future__ import annotations

import random

from ftmodel.calibration.sweep_grid import SweepGrid

__all__ = ["conv_configs", "gemm_grouped_configs", "grouped_configs"]


# channel counts of the convolution sweeps: multiples of 16 (oneDNN's fp32 block with AVX-512,
# two of AVX2's) and counts that are not (see ``ftmodel.tracing.variants.conv_variant``)
_CONV_CHANNELS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
_DEPTHWISE_CHANNELS = (16, 32, 64, 96, 144, 192, 384, 576, 960)
_UNALIGNED_CHANNELS = (12, 20, 24, 36, 40, 60, 72, 88, 100, 120, 184, 200, 360, 600)


def conv_configs(rng: random.Random, n: int, depthwise: bool, grid: SweepGrid
                  ) -> list[tuple[int, ...]]:
    """Random convolutions within the grid's limits; a share of them
    (``grid.conv_unaligned_share`` / ``grid.depthwise_unaligned_share``) with a channel count,
    in or out, from ``_UNALIGNED_CHANNELS``."""
    chans = _CONV_CHANNELS if not depthwise else _DEPTHWISE_CHANNELS
    share = grid.depthwise_unaligned_share if depthwise else grid.conv_unaligned_share
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        b = rng.choice(grid.conv_batches)
        cin = rng.choice(chans)
        cout = cin if depthwise else rng.choice(chans)
        if share > 0 and rng.random() < share:
            odd = rng.choice(_UNALIGNED_CHANNELS)
            if depthwise:
                cin = cout = odd
            elif rng.random() < 0.5:
                cin = odd
            else:
                cout = odd
        hw = rng.choice([1, 4, 7, 7, 14, 14, 28, 56, 112] if not depthwise else [7, 14, 28, 56, 112])
        k = rng.choice([3, 5] if depthwise else [1, 1, 3, 3, 3, 7])
        stride = rng.choice([1, 1, 2]) if hw > 1 else 1
        groups = cin if depthwise else 1
        if hw < k:
            k = 1
        macs = b * (hw // stride) ** 2 * cout * (cin // groups) * k * k
        if macs > grid.conv_max_macs or b * cin * hw * hw > grid.conv_max_input:
            continue
        configs.append((b, cin, cout, hw, k, stride, groups))
    return configs


# channels and channels per group of the grouped (not depthwise) samples: ResNeXt's 128-1024
# channels in 32 groups, RegNet's 32-912 channels in groups of 8-24
_GROUPED_CHANNELS = (32, 48, 64, 96, 128, 144, 192, 256, 384, 400, 512, 784, 1024)
_GROUP_WIDTHS = (4, 8, 16, 24, 32, 64)


def grouped_configs(n: int, grid: SweepGrid) -> list[tuple[int, ...]]:
    """Random 3x3 grouped convolutions (2 or more groups of 4-64 channels), like depthwise ones
    within the grid's limits, from a generator of their own (the depthwise samples stay as
    they were)."""
    rng = random.Random(4321)
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        b = rng.choice(grid.conv_batches)
        c = rng.choice(_GROUPED_CHANNELS)
        widths = [w for w in _GROUP_WIDTHS if c % w == 0 and c // w >= 2]
        width = rng.choice(widths)
        hw = rng.choice([3, 4, 7, 7, 14, 14, 28, 56])
        stride = rng.choice([1, 1, 2])
        macs = b * (hw // stride) ** 2 * c * width * 9
        if macs > grid.conv_max_macs or b * c * hw * hw > grid.conv_max_input:
            continue
        configs.append((b, c, c, hw, 3, stride, c // width))
    return configs


# (input, output) channels per group of the grouped convolutions oneDNN runs as GEMMs
_GEMM_GROUP_SHAPES = ((1, 2), (1, 2), (1, 4), (2, 2), (2, 4), (3, 3))
_GEMM_GROUP_CHANNELS = (24, 32, 48, 64, 96, 128, 192, 384)


def gemm_grouped_configs(n: int, grid: SweepGrid) -> list[tuple[int, ...]]:
    """Random grouped convolutions of 1-3 input channels per group (channel multipliers 1-4,
    kernels 1x1 to 7x7), which oneDNN runs as im2col and a GEMM per group, within the grid's
    limits, from a generator of their own."""
    rng = random.Random(8765)
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        b = rng.choice(grid.conv_batches)
        per_in, per_out = rng.choice(_GEMM_GROUP_SHAPES)
        groups = rng.choice(_GEMM_GROUP_CHANNELS)
        hw = rng.choice([4, 7, 14, 28, 32, 56])
        k = rng.choice([1, 3, 3, 5, 7, 7])
        stride = rng.choice([1, 2])
        if hw < k:
            k = 1
        macs = b * (hw // stride) ** 2 * groups * per_out * per_in * k * k
        if macs > grid.conv_max_macs / 8 or b * groups * per_in * hw * hw > grid.conv_max_input:
            continue
        configs.append((b, groups * per_in, groups * per_out, hw, k, stride, groups))
    return configs
