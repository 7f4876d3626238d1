"""Random convolution configurations of the CPU and GPU op sweeps
(``calibration/conv_samples.py``), each ``(batch, in channels, out channels, map size, kernel,
stride, groups)``: dense and depthwise ones, on and off oneDNN's channel block; grouped ones of
4-64 channels per group; grouped ones that oneDNN runs as im2col and a GEMM per group; the
early stages of image models at batch 4-16 (few channels on large maps); dense ones at batch 1
on maps of 1-8 px (eager's im2col path); and 1-d convolutions, each
``(batch, in channels, out channels, length, kernel, stride, dilation)``."""

from __future__ import annotations

import random

from ftmodel.calibration.sweep_grid import SweepGrid

__all__ = ["FRONT_END_CHANNELS", "FRONT_END_KERNELS", "FRONT_END_LENGTHS", "SEQUENCE_CHANNELS",
           "conv1d_configs", "conv_configs", "early_stage_configs", "gemm_grouped_configs",
           "grouped_configs", "slow_path_configs"]


# channel counts of the convolution sweeps: multiples of 16 (oneDNN's fp32 block with AVX-512,
# two of AVX2's) and counts that are not (see ``ftmodel.tracing.variants.conv_variant``)
_CONV_CHANNELS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
_DEPTHWISE_CHANNELS = (16, 32, 64, 96, 144, 192, 384, 576, 960)
_UNALIGNED_CHANNELS = (12, 20, 24, 36, 40, 60, 72, 88, 100, 120, 184, 200, 360, 600)


def conv_configs(rng: random.Random, n: int, depthwise: bool, grid: SweepGrid
                  ) -> list[tuple[int, ...]]:
    """Random convolutions within the grid's limits, of the grid's kernel sizes
    (``grid.dense_kernels`` / ``grid.depthwise_kernels``; a 2x2 one of stride 2); a share of
    them (``grid.conv_unaligned_share`` / ``grid.depthwise_unaligned_share``) with a channel
    count, in or out, from ``_UNALIGNED_CHANNELS``."""
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
        k = rng.choice(grid.depthwise_kernels if depthwise else grid.dense_kernels)
        if hw < k:
            k = 1
        stride = 2 if k == 2 else rng.choice([1, 1, 2]) if hw > 1 else 1
        groups = cin if depthwise else 1
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


# channels of the early-stage samples: an image's 3, then the 8-96 that stems and the first
# blocks of mobile CNNs keep on 56-128 px maps
_EARLY_IN_CHANNELS = (3, 8, 16, 24, 32, 48)
_EARLY_OUT_CHANNELS = (8, 16, 24, 32, 48, 64, 96)
_EARLY_DEPTHWISE_CHANNELS = (16, 24, 32, 48, 64, 72, 96)


def early_stage_configs(n: int, depthwise: bool, grid: SweepGrid) -> list[tuple[int, ...]]:
    """Random convolutions of the early stages of image models at batch 4 and 16: few channels
    (3-96) on 56-128 px maps, dense 1x1 and 3x3 (or depthwise 3x3 and 5x5), stride 1 or 2,
    within the grid's limits, from a generator of their own.

    There a convolution moves megabytes of activations for few MACs, and oneDNN reorders its
    input into its blocked layout and its output back on every eager call, so it runs at the
    speed of memory, not of its MACs. The random samples rarely draw so few channels on so
    large a map at batch 16, and curves interpolated from cache-resident neighbours priced them
    2-10x too fast (2-vCPU AMD EPYC, batch 16: a 1x1 convolution from 16 to 8 channels at 56 px,
    0.24 ms predicted, 0.70 ms alone; a 3x3 stem from 3 to 48 channels at 128 px, stride 2,
    1.5 ms predicted, 3.1 ms alone)."""
    rng = random.Random(2468 + depthwise)
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        b = rng.choice((4, 16))
        if depthwise:
            cin = cout = rng.choice(_EARLY_DEPTHWISE_CHANNELS)
            k, groups = rng.choice((3, 3, 5)), cin
        else:
            cin, cout = rng.choice(_EARLY_IN_CHANNELS), rng.choice(_EARLY_OUT_CHANNELS)
            k, groups = rng.choice((1, 1, 3)), 1
        hw = rng.choice((56, 64, 112, 128))
        stride = rng.choice((1, 2))
        macs = b * (hw // stride) ** 2 * cout * (cin // groups) * k * k
        if macs > grid.conv_max_macs or b * cin * hw * hw > grid.conv_max_input:
            continue
        configs.append((b, cin, cout, hw, k, stride, groups))
    return configs


# map sizes of the batch-1 samples on small maps: 2-3 px give 4-9 output pixels, 4 px 16, 1 px
# one, 5-8 px 25-64 (stride 2 halves them)
_SLOW_PATH_MAPS = (1, 2, 2, 3, 3, 4, 5, 6, 7, 8)
# eager runs a batch-1 convolution with a kernel of at most 3x3 on at most this many input
# elements as im2col and one GEMM (``slow2d``; PyTorch's ``ConvParams::use_mkldnn``)
_SLOW_PATH_MAX_INPUT = 20480


def slow_path_configs(n: int, grid: SweepGrid) -> list[tuple[int, ...]]:
    """Random dense convolutions at batch 1 on maps of 1-8 px (1x1 and 3x3, stride 1 or 2,
    16-1024 channels, a third of them off oneDNN's block), which eager runs as im2col and one
    GEMM (``slow2d``), within the grid's limits, from a generator of their own.

    There MKL's GEMM runs several times slower per MAC with 2-15 output pixels than with one or
    16 (``ftmodel.tracing.variants.narrow_gemm``), and the late stages of CNNs at batch 1 on
    64-128 px images land on such maps. The random samples rarely draw batch 1 with a map
    below 7 px, and the hand-picked late-stage ones hold 4-38 MiB of weights: on the 2-vCPU AMD
    EPYC (Zen 4) the curves priced a 96 -> 96 3x3 convolution on a 2-px map at 8.5 µs of device
    time where it took 66-70 µs alone."""
    rng = random.Random(9753)
    chans = (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        cin, cout = rng.choice(chans), rng.choice(chans)
        if rng.random() < 1 / 3:
            odd = rng.choice(_UNALIGNED_CHANNELS)
            cin, cout = (odd, cout) if rng.random() < 0.5 else (cin, odd)
        hw, k = rng.choice(_SLOW_PATH_MAPS), rng.choice((1, 3, 3))
        stride = rng.choice((1, 1, 2)) if hw > 2 else 1
        macs = (hw // stride) ** 2 * cout * cin * k * k
        if macs > grid.conv_max_macs or cin * hw * hw > _SLOW_PATH_MAX_INPUT:
            continue
        configs.append((1, cin, cout, hw, k, stride, 1))
    return configs


# 1-d convolutions: waveform front ends (one input channel, (kernel, stride) of the first layer
# of raw-audio networks: wav2vec2's 10/5, SincNet's 251/1 ...) and sequence layers (few to many
# channels, kernels 1-7, stride 1-2 or dilation 1-8, short to long sequences)
FRONT_END_KERNELS = ((10, 5), (40, 2), (80, 4), (80, 16), (160, 8), (251, 1))
FRONT_END_CHANNELS = (32, 64, 128, 256, 512)
FRONT_END_LENGTHS = (4000, 8000, 16000)
SEQUENCE_CHANNELS = (16, 32, 64, 128, 256, 512)
_SEQUENCE_LENGTHS = (16, 64, 256, 1024, 4096)


def conv1d_configs(n: int, grid: SweepGrid, seed: int = 4321) -> list[tuple[int, ...]]:
    """``n`` random 1-d convolutions ``(batch, in, out, length, kernel, stride, dilation)``
    within the grid's limits on MACs and input elements, a quarter of them front ends."""
    rng = random.Random(seed)
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        b = rng.choice(grid.conv_batches)
        if len(configs) < n // 4:
            (k, stride), cin, dilation = rng.choice(FRONT_END_KERNELS), 1, 1
            cout, length = rng.choice(FRONT_END_CHANNELS), rng.choice(FRONT_END_LENGTHS)
        else:
            cin, cout = rng.choice(SEQUENCE_CHANNELS), rng.choice(SEQUENCE_CHANNELS)
            k, length = rng.choice((1, 3, 3, 5, 7)), rng.choice(_SEQUENCE_LENGTHS)
            stride, dilation = (rng.choice((1, 2)), 1) if rng.random() < 0.5 else \
                (1, rng.choice((1, 2, 4, 8)))
        out_len = (length - dilation * (k - 1) - 1) // stride + 1
        if out_len < 1:
            continue
        if b * cout * out_len * cin * k > grid.conv_max_macs or \
                b * cin * length > grid.conv_max_input:
            continue
        configs.append((b, cin, cout, length, k, stride, dilation))
    return configs
