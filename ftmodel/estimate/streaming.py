"""What a MAC kernel pays to stream its operands from memory: the cache probe's price per byte.

Used by :class:`ftmodel.estimate.kernels.DeviceModel`, which blends each kernel's hot and cold
times by its cold share (:mod:`ftmodel.estimate.cache`). Counted: each operand's bytes once
(:func:`read_once`), at the probe's per-byte penalty, which follows a GEMM's size where the probe
also timed wide layers. Not counted: re-reads of weights already streamed once in the call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ftmodel.estimate.cache import CacheModel
from ftmodel.program import Kernel
from ftmodel.tracing.formulas import MAC_CLASSES
from ftmodel.tracing.prepacked_variants import PREPACKED_VARIANTS

__all__ = ["CONV_CLASSES", "GEMM_CONV_PREFIX", "read_once", "stream_mac_penalty"]

CONV_CLASSES = frozenset({"conv", "conv_grouped"})  # what ``CacheModel.conv_ratio`` prices
# convolution variants eager runs as im2col (or col2im) and one GEMM on the weights as stored
# (ATen's ``slow2d``, ``slow3d``, ``slowdilated2d``, ``slowtranspose2d``...: a batch-1 call with
# 3x3 or smaller kernels on a small map): they stream their weights as a GEMM does, with no
# re-order
GEMM_CONV_PREFIX = "slow"


def _hot_resident_ratio(cache: CacheModel, touched_bytes: np.ndarray,
                        probed_bytes: np.ndarray) -> np.ndarray:
    """How much of the probe's per-byte penalty kernels touching ``touched_bytes`` each still
    pay: the share of their bytes their own hot samples found in cache (1 − φ of what they
    touch, the soft LRU's), relative to that share for the probe's layers of ``probed_bytes``
    whose penalty the rate is. A kernel touching more than the cache holds streamed from memory
    in its hot samples already; the penalty on top counted the stream twice (eager's 1024-channel
    3x3 convolution at 2x2 px and batch 1 on the AMD EPYC: 38 MB of weights, 6.95 ms hot in the
    sweep, 5.9 ms inside the model, 10.2 ms predicted with the full penalty)."""
    def resident(b: np.ndarray) -> np.ndarray:
        return 1.0 - np.array([cache.cold_share(float(x)) for x in b.tolist()], dtype=np.float64)
    ref = resident(probed_bytes)
    ratio: np.ndarray = np.clip(np.where(ref > 0.0, resident(touched_bytes)
                                         / np.maximum(ref, 1e-12), 1.0), 0.0, 1.0)
    return ratio


def read_once(kernels: Sequence[Kernel], idx: np.ndarray, br: np.ndarray) -> np.ndarray:
    """Read bytes of the kernels at ``idx`` with each weight counted once: streaming from
    memory is paid once per operand, not per re-read of the weights (``Kernel.weight_reads``);
    only the first pass over them can find them cold."""
    rereads = np.array([max(0, kernels[i].weight_reads - 1) * kernels[i].bytes_weights
                        for i in idx.tolist()], dtype=np.float64)
    out: np.ndarray = br[idx] - rereads
    return out


def stream_mac_penalty(kernels: Sequence[Kernel], hot: np.ndarray, cold: np.ndarray,
                       br: np.ndarray, cache: CacheModel | None) -> None:
    """Every MAC kernel, on any curve, eager's included, is charged per byte it reads (each
    operand once) the cache probe's cold penalty per byte (``CacheModel.cold_s_per_byte``),
    which the cache model scales by ``stream_share · φ`` to what a layer streaming its
    weights from memory pays inside a chain of layers. Not the kernel's own flushed
    samples: a flushed call's excess over its hot time is mostly fixed (the Intel Xeon's
    GEMM of 4 MiB of weights at batch 1 took 178 µs flushed, 40 µs hot: 3.4x a 1 MiB
    layer's excess for 4x its bytes), so scaled by the probe's share it priced a 4 MiB
    layer streaming from memory at +20 µs where chains of such layers beyond 200 MiB ran
    +64 µs (batch 1) to +163 µs (batch 16) over their in-cache time, and convolutions of
    9.4 MiB at batch 1 +250-400 µs; the probe's per-byte penalty gives +133 and +298 µs.
    A GEMM's penalty per byte depends on its bytes where the probe also timed wide
    layers (:meth:`CacheModel.cold_s_per_byte_at`): a 16 MiB weight matrix streams at
    close to the memory's bandwidth, a chain of 1 MiB layers at about half of it. The
    probe's layers are GEMMs, and so are convolutions whose weights were packed once, ahead of
    the call (a frozen TorchScript graph's,
    :data:`~ftmodel.tracing.prepacked_variants.PREPACKED_VARIANTS`:
    on the EPYC a chain of 512-channel 3x3 ones at batch 1, 9.4 MiB of weights each, ran
    +430 µs per layer over the layer alone, 46 ps per byte, where the probe's 1 MiB layers
    paid 138 and its 16 MiB ones 47); other MAC kernels keep the narrow layers' price (an
    eager oneDNN convolution re-orders its weights as it reads them: 9.4 MiB of them at batch
    1 cost the Xeon +250-400 µs, more per byte than the probe's 1 MiB layers), unless the
    calibration timed a chain of the framework's own convolutions (``CacheModel.conv_ratio``,
    :mod:`ftmodel.calibration.cache`): then every convolution not streamed as a GEMM pays the
    GEMM rate for its size times that ratio (eager's oneDNN ones on the Zen 5 EPYC: 0.22-0.24x, a
    compute-bound convolution streams its weights while it computes).
    Convolutions eager runs as im2col and one GEMM (:data:`GEMM_CONV_PREFIX`) stream as GEMMs
    do. Every kernel pays the penalty for the share of its bytes its own hot samples found in
    cache (:func:`_hot_resident_ratio`): none once it touches more than the cache holds.
    No-op in a profile without the probe's per-byte penalty. In place."""
    if cache is None or cache.cold_s_per_byte <= 0.0:
        return
    idx = np.array([i for i, k in enumerate(kernels) if k.op_class in MAC_CLASSES],
                   dtype=np.int64)
    if len(idx):
        once = np.maximum(read_once(kernels, idx, br), 0.0)
        gemm = np.array([kernels[i].op_class == "gemm" or kernels[i].variant in PREPACKED_VARIANTS
                         or kernels[i].variant.startswith(GEMM_CONV_PREFIX)
                         for i in idx.tolist()], dtype=bool)
        at_size = cache.cold_s_per_byte_at(once)
        rate = np.where(gemm, at_size, cache.cold_s_per_byte)
        # the size of the probe's layers each rate was measured at
        probed_at_size = np.clip(once, cache.narrow_bytes, cache.wide_bytes)
        probed = np.where(gemm, probed_at_size, cache.narrow_bytes)
        if cache.conv_ratio > 0.0:  # the framework's own convolution chain was probed
            conv = np.array([kernels[i].op_class in CONV_CLASSES for i in idx.tolist()],
                            dtype=bool) & ~gemm
            rate = np.where(conv, at_size * cache.conv_ratio, rate)
            probed = np.where(conv, probed_at_size, probed)
        touched = once + np.array([kernels[i].bytes_written for i in idx.tolist()],
                                  dtype=np.float64)
        cold[idx] = hot[idx] + once * rate * _hot_resident_ratio(cache, touched, probed)
