"""Variants: what refines an op class for device time beyond its work (see
:mod:`ftmodel.tracing.records`), for the ops whose variant depends on their arguments.

* Convolutions: the backend eager PyTorch selects for these shapes on this host (``mkldnn``,
  ``slow2d``, ...), and for oneDNN whether the channel counts fill its block
  (:func:`channel_variant`) and whether a grouped convolution runs as im2col and a GEMM per
  group (:func:`grouped_runs_gemm`); for a frozen TorchScript graph's prepacked ones, in
  :mod:`ftmodel.tracing.prepacked_variants`; ``_nhwc`` added for a 2-d convolution that
  inductor runs on channels-last tensors (:func:`channels_last_conv_variant`), and whether
  oneDNN copies such a one's weights on every call (:func:`channels_last_reorders_weights`).
* Fused recurrent layers: in :mod:`ftmodel.tracing.rnn_variants`.
* Batch norm: the (image, channel) planes it loops over one by one (:func:`planes_of`), read by
  the lowerings into ``Kernel.planes``.

:func:`ftmodel.tracing.formulas.variant_of` dispatches an aten op to these.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import torch

__all__ = ["GROUPED_GEMM", "NARROW_GEMM", "NHWC", "ONEDNN_VARIANTS", "PLANE_OPS",
           "PADDED_REORDER", "REF_ELTWISE", "TRANSPOSE",
           "backend_threads",
           "blocked_eltwise_variant", "channel_variant", "channels_last_conv_variant",
           "channels_last_reorders_weights",
           "conv_variant", "grouped_runs_gemm", "narrow_gemm", "planes_of",
           "prepacked_reorders_weights", "selection_threads"]


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(s) for s in shape)


def _shape_of(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape) if isinstance(x, torch.Tensor) else ()


# the intra-op thread count convolution backends are chosen for (None: this process's own)
_SELECTION_THREADS: ContextVar[int | None] = ContextVar("ftmodel_selection_threads",
                                                        default=None)


@contextlib.contextmanager
def backend_threads(threads: int | None) -> Iterator[None]:
    """Within this block, record each convolution's backend as eager PyTorch selects it in a
    process with ``threads`` intra-op threads (None: with this process's own count).

    PyTorch selects some convolutions' backend by the thread count: an unstrided 1x1
    convolution at batch below 16 runs on oneDNN with several threads and on its own kernel
    (``slow2d``) with one (``ConvParams::use_mkldnn``). A prediction is for the thread count of
    its profile, whatever the calling process has set: :class:`ftmodel.api.Predictor` traces and
    lowers inside this block with its profile's.
    """
    token = _SELECTION_THREADS.set(threads)
    try:
        yield
    finally:
        _SELECTION_THREADS.reset(token)


def selection_threads() -> int:
    """The intra-op thread count convolution backends are selected for here and now
    (:func:`backend_threads`)."""
    threads = _SELECTION_THREADS.get()
    return torch.get_num_threads() if threads is None else threads


def _conv_backend(args: Sequence[Any]) -> str:
    """The backend eager PyTorch picks for this convolution here (e.g. "mkldnn", "slow2d"),
    with the thread count of :func:`selection_threads`."""
    own, wanted = torch.get_num_threads(), selection_threads()
    try:
        if wanted == own:
            backend = torch._C._select_conv_backend(*args[:9], None)
        else:  # PyTorch reads the thread count from its own global setting
            torch.set_num_threads(wanted)
            try:
                backend = torch._C._select_conv_backend(*args[:9], None)
            finally:
                torch.set_num_threads(own)
    except Exception:  # noqa: BLE001 - private API; absent or changed: no variant
        return ""
    return str(backend).rsplit(".", 1)[-1].lower()


# the bytes of one vector register of the CPU capability ATen dispatches to here: oneDNN blocks
# a convolution's channels by that many elements (16 fp32 with AVX-512, 8 with AVX2)
_VECTOR_BYTES = {"AVX512": 64, "AVX512_BF16": 64, "AMX": 64, "AVX2": 32}
# eager's oneDNN convolutions, which reorder their weights and output (or, run as GEMMs, unfold
# their input) on every call (a frozen TorchScript graph's prepacked ones, "mkldnn_prepacked",
# do not)
ONEDNN_VARIANTS = frozenset({"mkldnn", "mkldnn_unaligned", "mkldnn_gemm"})
# a pointwise kernel that oneDNN runs with its reference code (blocked_eltwise_variant); a profile
# without a curve of such kernels prices them as the op's math (ftmodel.estimate.kernels)
REF_ELTWISE = "mkldnn_ref"
# a reorder out of a convolution's blocked layout whose channels leave the last block part
# empty (padded_reorder_variant); a profile without a curve of such reorders prices them as
# the other reorders back to a dense tensor
PADDED_REORDER = "mkldnn_padded"
# a generated kernel that only copies tensors into another memory order (inductor's
# channels-last copies of a graph's input and of convolution weights; Kernel.bytes_transposed):
# priced on the framework's transpose curve (``<framework>/copy:transpose``), which a fused
# kernel's transposed bytes also take
TRANSPOSE = "transpose"
# what ends the variant of a grouped convolution that oneDNN runs as im2col and a GEMM per group
# (:func:`grouped_runs_gemm`); a profile without curves of such convolutions prices them on the
# curves of the variant without it (ftmodel.estimate.kernels)
GROUPED_GEMM = "_gemm"
# what ends the variant of a convolution eager runs as im2col and one GEMM (``slow2d``) on a
# contiguous map of 2 to one vector's worth of output pixels (:func:`narrow_gemm`); a profile
# without a curve of such convolutions prices them on the curve of the variant without it
NARROW_GEMM = "_narrow"
# channels per group, in and out, that oneDNN's direct grouped kernels need: a multiple of
# this for the CPU capability ATen dispatches to (oneDNN 3.x; AVX-512 measured on an AMD EPYC,
# AVX2 with ONEDNN_MAX_CPU_ISA=AVX2 on the same machine)
_GROUPED_MULTIPLE = {"AVX512": 4, "AVX512_BF16": 4, "AMX": 4, "AVX2": 8}
@functools.lru_cache(maxsize=None)
def _capability() -> str:
    """The CPU capability ATen dispatches to here ("AVX512", "AVX2", ...), the key of the
    per-capability tables above."""
    return str(torch.backends.cpu.get_cpu_capability()).upper()


@functools.lru_cache(maxsize=None)
def _channel_block(dtype: Any) -> int:
    """Channels per oneDNN block for ``dtype`` on this CPU (0: unknown, no block)."""
    vector = _VECTOR_BYTES.get(_capability(), 0)
    size = dtype.itemsize if isinstance(dtype, torch.dtype) else 4
    return vector // size if vector and size else 0


def _conv_groups(args: Sequence[Any]) -> int:
    return int(args[8]) if len(args) > 8 and isinstance(args[8], int) and args[8] > 0 else 1


def _conv_channels(args: Sequence[Any]) -> tuple[int, int]:
    """(input, output) channels of ``convolution(input, weight, ..., transposed, _, groups)``;
    (0, 0) where the shapes say nothing."""
    x, w = _shape_of(args[0]), _shape_of(args[1])
    if len(x) < 2 or len(w) < 2:
        return 0, 0
    transposed = bool(args[6]) if len(args) > 6 and isinstance(args[6], bool) else False
    groups = _conv_groups(args)
    return int(x[1]), int(w[1] * groups if transposed else w[0])


def _grouped_multiple() -> int:
    """Channels per group oneDNN's direct grouped kernels take on this CPU (0: unknown)."""
    return _GROUPED_MULTIPLE.get(_capability(), 0)


def grouped_runs_gemm(c_in: int, c_out: int, groups: int) -> bool:
    """Whether oneDNN runs this grouped convolution as im2col and a GEMM per group
    (``x64:gemm:jit``) rather than by its direct kernels: a grouped convolution that is not
    depthwise (one input and one output channel per group) and whose channels per group, in or
    out, are not a multiple of what the direct grouped kernels take on this CPU (4 fp32
    channels with AVX-512, 8 with AVX2). Such convolutions run several times slower per MAC
    (FastViT's downsampling: 48 channels to 96 in 48 groups, 7x7, at batch 16 on a 2-vCPU AMD
    EPYC: 4.5 ms, 4 GMAC/s, where the depthwise 48 to 48 took 0.8 ms). False off x86 and where
    the shapes say nothing."""
    multiple = _grouped_multiple()
    if not multiple or groups <= 1 or c_in <= 0 or c_out <= 0 or c_in % groups or c_out % groups:
        return False
    per_in, per_out = c_in // groups, c_out // groups
    if per_in == 1 and per_out == 1:
        return False
    return bool(per_in % multiple or per_out % multiple)


# channels per group up to which oneDNN's direct grouped kernels take a frozen TorchScript
# graph's prepacked weights as they are (prepacked_reorders_weights; logged on an AMD EPYC: 4-16
# channels per group with AVX-512, none with ONEDNN_MAX_CPU_ISA=AVX2 and ATEN_CPU_CAPABILITY=avx2)
_GROUPED_KEEPS_PREPACKED = {"AVX512": 16, "AVX512_BF16": 16, "AMX": 16}


def prepacked_reorders_weights(c_in: int, c_out: int, groups: int) -> bool:
    """Whether a frozen TorchScript graph's prepacked oneDNN convolution (``prim::mkldnn_
    convolution``) copies its weights into a fresh buffer of their size on every call.
    Freezing reorders a convolution's weights once (``ConvertFrozenOpsToMKLDNN``,
    ``torch/csrc/jit/passes/frozen_ops_to_mkldnn.cpp``: ``mkldnn_reorder_conv2d_weight`` with
    the convolution's padding, stride, dilation and groups, not its input's size); the primitive
    each call creates for its input may want another layout, and oneDNN then reorders them into
    a temporary buffer for the call. oneDNN's verbose log of one call shows it (a 64 -> 64 3x3
    one, AVX-512: weights frozen as ``Acdb64a``, reordered to ``ABcd16b16a`` on every call):
    for every dense and depthwise convolution and grouped one run as GEMMs, but not for grouped
    ones whose groups hold 4 to 16 channels with AVX-512, frozen in the layout their direct
    kernel takes. With AVX2 all of them reorder. An ``LD_PRELOAD`` malloc logger sees the
    buffers (Wide-ResNet-50-2 at 64 px, batch 1: 33 of 1 MiB or more, 248 MiB in all)."""
    if groups <= 1 or c_in <= 0 or c_out <= 0 or c_in % groups or c_out % groups:
        return True
    per_in, per_out = c_in // groups, c_out // groups
    if (per_in == 1 and per_out == 1) or grouped_runs_gemm(c_in, c_out, groups):
        return True
    keeps = _GROUPED_KEEPS_PREPACKED.get(_capability(), 0)
    return max(per_in, per_out) > keeps


def channel_variant(backend: str, c_in: int, c_out: int, dtype: Any = None) -> str:
    """``<backend>_unaligned`` where oneDNN (``backend`` "mkldnn", or "mkldnn_prepacked" for a
    frozen TorchScript graph's prepacked convolution) runs a convolution with a channel count,
    in or out, that is not a multiple of its block on this CPU (16 fp32 channels with AVX-512, 8
    with AVX2), else ``backend``. oneDNN's blocked kernels cover whole blocks only; other counts
    take slower kernels (depthwise 3x3 at 56 px on a 2-thread Intel Xeon: 72 channels 0.42 ms,
    64 and 80 channels 0.25 and 0.28 ms; ``benchmarks/conv_channels.py``)."""
    if backend not in ("mkldnn", "mkldnn_prepacked"):
        return backend
    block = _channel_block(dtype)
    if block > 1 and c_in > 0 and c_out > 0 and (c_in % block or c_out % block):
        return f"{backend}_unaligned"
    return backend


def _partly_filled_block(channels: int, dtype: Any) -> bool:
    """Whether ``channels`` leave oneDNN's last channel block on this CPU part empty."""
    block = _channel_block(dtype)
    return block > 1 and channels > 0 and channels % block != 0


def blocked_eltwise_variant(op: str, channels: int, dtype: Any = None) -> str:
    """:data:`REF_ELTWISE` where oneDNN runs the pointwise ``op`` (an aten name, ``sigmoid_``)
    on a convolution's blocked output with its reference code, else "". oneDNN's vectorised
    eltwise kernels take a tensor whose channels do not fill their last block (padded memory)
    only for functions that keep 0 at 0, since they also compute the padding
    (``jit_uni_eltwise``: ``IMPLICATION(!src_d.is_dense(), is_zero_preserved())``); a sigmoid
    (0 -> 0.5) on such a tensor falls back to ``ref:any``, one element at a time. On the Zen 4
    EPYC (AVX-512, 2 threads) a sigmoid on a blocked 16x72x14x14 tensor took 3.7 ms, on
    16x80x14x14 57 µs. TorchScript's frozen graphs call oneDNN's eltwise for ``sigmoid`` only:
    its other pointwise ops on blocked tensors (``prim::MKLDNNHardSigmoid_``, ...) run aten's
    code over the padded buffer, and ``tanh``/ReLU keep 0 at 0."""
    return REF_ELTWISE if op.rstrip("_") == "sigmoid" and _partly_filled_block(channels, dtype) \
        else ""


def padded_reorder_variant(channels: int, dtype: Any = None) -> str:
    """:data:`PADDED_REORDER` for the reorder of a convolution's blocked output back to a dense
    tensor (``aten::to_dense``) when its channels do not fill oneDNN's last block, else "".
    oneDNN reorders a full-block ``aBcd16b`` tensor to ``abcd`` with its blocked kernel
    (``jit:blk``) and a padded one with its generic kernel (``jit:uni``, oneDNN's verbose log):
    on the Zen 4 EPYC (AVX-512, 2 threads) 16x60x28x28 (3.0 MB) took 248 µs, 16x64x28x28 60 µs,
    16x48x28x28 50 µs; 0.08-0.13 ns per byte for every channel count tried that is not a
    multiple of 16 (8-72), 0.02-0.03 for those that are. The reorder into the layout
    (``to_mkldnn``, to oneDNN's plain ``abcd``) has no such case."""
    return PADDED_REORDER if _partly_filled_block(channels, dtype) else ""


def _output_pixels(args: Sequence[Any]) -> int:
    """Output pixels per image of a 2-d ``convolution(input, weight, bias, stride, padding,
    dilation, transposed, ...)`` (0 where the arguments say nothing or it is transposed)."""
    x, w = _shape_of(args[0]), _shape_of(args[1])
    if len(x) != 4 or len(w) != 4 or (len(args) > 6 and args[6] is True):
        return 0

    def pair(i: int, default: int) -> tuple[int, int]:
        v = args[i] if len(args) > i else None
        vals = [int(e) for e in v] if isinstance(v, (list, tuple)) and v else [default]
        return (vals[0], vals[-1])

    stride, pad, dil = pair(3, 1), pair(4, 0), pair(5, 1)
    out = [(x[2 + d] + 2 * pad[d] - dil[d] * (w[2 + d] - 1) - 1) // max(stride[d], 1) + 1
           for d in (0, 1)]
    return max(out[0], 0) * max(out[1], 0)


def narrow_gemm(args: Sequence[Any]) -> bool:
    """Whether eager's im2col convolution (``slow2d``) runs its per-image GEMM, weights (out
    channels × in channels·kernel) times columns (… × output pixels), with 2 to one vector's
    worth minus one output pixels (2-15 fp32 with AVX-512, 2-7 with AVX2) on a contiguous
    (NCHW) map. MKL then runs that GEMM several times slower per MAC than with one pixel (a
    matrix-vector product) or a full vector of them: on the 2-vCPU AMD EPYC (Zen 4, AVX-512),
    a 256 -> 256 3x3 convolution at batch 1 took 58 µs on a 1-px map, 374 and 495 µs on 2 and
    3 px, 172 µs on 4 px; 512 -> 512 on 3 and 4 px, 1.88 and 0.58 ms. Channels-last maps run
    the GEMM the other way round and slow down smoothly with the pixels (256 channels: 134,
    184, 197 µs on 2, 3, 4 px), so they are never narrow."""
    block = _channel_block(getattr(args[0], "dtype", None))
    x = args[0]
    if block <= 1 or not isinstance(x, torch.Tensor) or not x.is_contiguous():
        return False
    return 2 <= _output_pixels(args) < block


def conv_variant(args: Sequence[Any]) -> str:
    """A ``convolution`` call's variant: the backend eager selects for it (:func:`channel_variant`
    for oneDNN's), ``mkldnn_gemm`` for a grouped one oneDNN runs as GEMMs
    (:func:`grouped_runs_gemm`), ``slow2d_narrow`` for an im2col one whose GEMM has few columns
    (:func:`narrow_gemm`)."""
    c_in, c_out = _conv_channels(args)
    backend = _conv_backend(args)
    if backend == "mkldnn" and grouped_runs_gemm(c_in, c_out, _conv_groups(args)):
        return backend + GROUPED_GEMM
    if backend == "slow2d" and narrow_gemm(args):
        return backend + NARROW_GEMM
    return channel_variant(backend, c_in, c_out, getattr(args[0], "dtype", None))


# what ends the variant of a convolution run on channels-last tensors
NHWC = "_nhwc"


def channels_last_conv_variant(args: Sequence[Any]) -> str:
    """The variant of a ``convolution`` call that runs on channels-last tensors, as inductor
    runs every 2-d convolution on a CPU: the backend selected for channels-last input and
    weight (:func:`conv_variant`) and :data:`NHWC`, for which oneDNN runs other kernels than for
    contiguous (NCHW) tensors (a depthwise 3x3 at half the time, a 1x1 convolution streaming
    megabytes of weights at several times it: they are reordered on every call). A call on
    other than 4-d tensors (1-d or 3-d convolutions, which inductor leaves contiguous) keeps
    :func:`conv_variant`'s."""
    x, w = (args[0], args[1]) if len(args) > 1 else (None, None)
    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.dim() == 4
            and w.dim() == 4):
        return conv_variant(args)
    last = torch.channels_last
    cl = [x.contiguous(memory_format=last), w.contiguous(memory_format=last), *args[2:]]
    # never narrow: channels-last maps run the im2col GEMM the other way round (narrow_gemm)
    return conv_variant(cl).replace(NARROW_GEMM, "") + NHWC


def channels_last_reorders_weights(variant: str) -> bool:
    """Whether a convolution of ``variant`` (:func:`channels_last_conv_variant`'s) copies its
    weights into a fresh buffer of their size on every call: oneDNN reorders the channels-last
    weights inductor hands aten (a copy inductor's own wrapper makes, also on every call) into
    the blocked layout of the primitive each call creates. An ``LD_PRELOAD`` malloc logger sees
    the buffers (ResNet-34 at 96 px under inductor, batch 4, AMD EPYC: six of 9 MiB per call,
    where the wrapper allocates one, its channels-last copy of a 512 -> 512 3x3's weights, and
    oneDNN one for each of the five such convolutions). Convolutions aten runs on other
    backends (``slow2d``: im2col and a GEMM) read the channels-last copy as it is."""
    return variant.startswith("mkldnn") and variant.endswith(NHWC)


# ops that loop over their input's (image, channel) planes one by one, each plane a short
# vectorised loop of its own: batch norm in inference (PyTorch's CPU kernel parallelises over
# N·C and normalises each H·W plane separately), so many small planes cost more than few large
# ones of the same bytes (planes_of)
PLANE_OPS = frozenset({"native_batch_norm", "_native_batch_norm_legit_no_training",
                       "_native_batch_norm_legit", "_batch_norm_no_update",
                       "_batch_norm_with_update", "cudnn_batch_norm", "miopen_batch_norm"})


def planes_of(op: str, input_shapes: Sequence[Sequence[int]]) -> int:
    """The (image, channel) planes a per-channel op (:data:`PLANE_OPS`) loops over: N·C of its
    first input when that has spatial dimensions, else 0 (not counted). ``op``: the record's
    op name, e.g. ``aten._native_batch_norm_legit_no_training.default``."""
    parts = op.split("::")[-1].split(".")
    name = parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]
    if name not in PLANE_OPS or not input_shapes or len(input_shapes[0]) < 3:
        return 0
    return int(input_shapes[0][0]) * int(input_shapes[0][1])
