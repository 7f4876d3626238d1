"""Size limits of the per-op-class sweeps (:mod:`ftmodel.calibration.ops`), for a CPU and a GPU.

A grid says how large each class's samples get, how many random convolutions are drawn and
which hand-picked shapes join them (the last stages and heads of CNNs, where a convolution
streams megabytes of weights for few MACs). The shapes themselves are drawn in
:mod:`ftmodel.calibration.ops` and :mod:`ftmodel.calibration.conv_samples`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CPU_GRID", "GPU_GRID", "SweepGrid"]


@dataclass(frozen=True)
class SweepGrid:
    """Size limits of the sweeps. A GPU runs a large batch in the time a CPU runs a small one,
    so its curves must reach the sizes of batch 128-256 (interpolated, not extrapolated, there)."""

    gemm_ms: tuple[int, ...]
    gemm_max_macs: float
    bmm_batches: tuple[int, ...]
    bmm_max_macs: float
    sdpa_batch_heads: tuple[tuple[int, int], ...]
    sdpa_seqs: tuple[int, ...]
    conv_batches: tuple[int, ...]
    conv_max_macs: float
    conv_max_input: float  # elements
    conv_samples: int
    depthwise_samples: int
    stem_batches: tuple[int, ...]
    max_size_exp: int  # bytes-bound ops up to 2**max_size_exp elements
    # (batch, in channels, out channels, map size, kernel): the last stages of CNNs at small
    # resolution, where a convolution streams megabytes of weights for few MACs. The random
    # configurations reach 512 channels and rarely pair them with a 2-4 px map; at batch 1 with
    # at most 20,480 input elements and a kernel of at most 3x3, PyTorch runs such a convolution
    # on its slow path (im2col and one GEMM on the weights as stored), at 5-10 GB/s of weights.
    # Also the heads of mobile CNNs (timm's GhostNet, MobileNet-V3): a 1x1 convolution on the
    # 1x1 map left by global pooling, each weight used once per image (oneDNN ran 1024->2048 at
    # batch 16 at 13 GMAC/s on a 2-vCPU AMD EPYC, where the 2x2 samples gave 70)
    late_stage_convs: tuple[tuple[int, int, int, int, int], ...] = ()
    # fused LSTM layers (eager's mkldnn_rnn_layer on a CPU), timed per step; 0: none (a GPU
    # runs cuDNN's, which its sweep does not sample)
    lstm_max_macs: float = 0.0
    # shares of the random convolutions with a channel count off oneDNN's block (a CPU's
    # convolutions run at two speeds, see ``ftmodel.calibration.conv_configs.conv_configs``; a
    # GPU's sweep has none)
    conv_unaligned_share: float = 0.0
    depthwise_unaligned_share: float = 0.0
    # grouped convolutions of 4-64 channels per group (ResNeXt, RegNet), beside the depthwise
    # ones on the same curve: per MAC they move several times the bytes of a dense convolution
    # and a few times fewer than a depthwise one, so neither family's samples price them
    grouped_samples: int = 0
    # grouped convolutions that oneDNN runs as im2col and a GEMM per group (1-3 channels per
    # group, or a channel multiplier: FastViT's and MobileOne's downsampling, 48 channels to 96
    # in 48 groups; ``ftmodel.tracing.variants.grouped_runs_gemm``), at 4-13 GMAC/s where the
    # direct kernels reach 30-90: a curve of their own (``conv_grouped:mkldnn_gemm``)
    gemm_grouped_samples: int = 0
    # the early stages of image models at batch 4-16, dense and depthwise: few channels on large
    # maps, bound by oneDNN's reorders of megabytes of activations
    # (``ftmodel.calibration.conv_configs.early_stage_configs``)
    early_stage_samples: int = 0
    early_stage_depthwise_samples: int = 0
    # dense convolutions at batch 1 on maps of 1-8 px, which eager runs as im2col and one GEMM
    # (``ftmodel.calibration.conv_configs.slow_path_configs``)
    slow_path_samples: int = 0
    # kernel sizes the random convolutions draw from, dense (a 2 is drawn with stride 2: the
    # patchifying downsampling of ConvNeXt) and depthwise (1: the per-channel scale branch of
    # MobileOne and FastViT blocks; 7: ConvNeXt's and FastViT's). A size no sample has is priced
    # by its neighbours' throughput at another arithmetic intensity: on a 2-vCPU AMD EPYC (Zen 5)
    # sweep of 3x3 and 5x5 depthwise samples, a 1x1 depthwise convolution at batch 16 (48
    # channels, 32 px) was priced at 0.09 ms where it took 0.34 ms alone, and ConvNeXt's 2x2
    # stride-2 downsampling at 0.55 ms where it took 1.1 ms
    dense_kernels: tuple[int, ...] = (1, 1, 3, 3, 3, 7)
    depthwise_kernels: tuple[int, ...] = (3, 5)


CPU_GRID = SweepGrid(
    gemm_ms=(1, 4, 16, 64, 256, 1024), gemm_max_macs=1.2e9, bmm_batches=(4, 12, 48, 192),
    bmm_max_macs=6e8, sdpa_batch_heads=((1, 4), (1, 12), (4, 12), (16, 12)),
    sdpa_seqs=(16, 64, 128, 256), conv_batches=(1, 1, 2, 4, 8, 16), conv_max_macs=1.0e9,
    conv_max_input=2.5e7, conv_samples=80, depthwise_samples=64, stem_batches=(1, 4, 16),
    max_size_exp=24,
    late_stage_convs=((1, 256, 256, 4, 3), (1, 512, 512, 3, 3), (1, 1024, 1024, 2, 3),
                      (1, 256, 1024, 4, 1), (1, 1024, 256, 4, 1), (1, 2048, 512, 2, 1),
                      (1, 512, 2048, 2, 1), (1, 1024, 2048, 2, 1), (4, 512, 512, 3, 3),
                      (4, 1024, 1024, 2, 3), (4, 2048, 512, 2, 1), (16, 512, 2048, 2, 1),
                      (1, 960, 1280, 1, 1), (4, 960, 1280, 1, 1), (16, 960, 1280, 1, 1),
                      (4, 1024, 2048, 1, 1), (16, 1024, 2048, 1, 1)),
    lstm_max_macs=2.2e9, conv_unaligned_share=1 / 3, depthwise_unaligned_share=0.45,
    grouped_samples=16, gemm_grouped_samples=12, early_stage_samples=12,
    early_stage_depthwise_samples=8, slow_path_samples=24,
    dense_kernels=(1, 1, 2, 3, 3, 3, 7), depthwise_kernels=(1, 3, 3, 5, 7))
GPU_GRID = SweepGrid(
    gemm_ms=(1, 4, 16, 64, 256, 1024, 4096, 16384), gemm_max_macs=7e10,
    bmm_batches=(4, 12, 48, 192, 768, 1536), bmm_max_macs=2e10,
    sdpa_batch_heads=((1, 4), (1, 12), (4, 12), (16, 12), (64, 12), (128, 12)),
    sdpa_seqs=(16, 64, 128, 256, 512), conv_batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    conv_max_macs=4e10, conv_max_input=2e8, conv_samples=90, depthwise_samples=40,
    stem_batches=(1, 4, 16, 64, 128),
    max_size_exp=26)
