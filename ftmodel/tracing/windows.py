"""The input a pooling window reads: a pool's work is its windows, not its operands.

A max or average pool reads, for each output element, the input elements under its window, so
its time follows ``outputs × window`` as much as the bytes it moves: on an AMD EPYC (2
threads, 192 x 28 x 28, eager) a 5x5 max pool of stride 1 took 4.5 ms and a 3x3 one of stride
2 on the same input 0.5 ms (``benchmarks/results/cpu-epyc/pool-windows.md``): 8.8x the time
for 2.4x the bytes moved, and 12x the window reads.

:func:`window_bytes_of` counts, for the pools with a ``kernel_size`` (max and average, 1-, 2-
and 3-d, aten's and oneDNN's), the bytes of input read through the windows: for each output
element the window's positions that fall inside the input (padding is not read; dilation
spreads the window, it does not enlarge it), times the element size. An adaptive pool's
windows tile its input, so it reads its input once (``adaptive_avg_pool2d`` to 1x1: the
whole input). Other ops count 0. Held in ``Kernel.bytes_window_reads`` and priced on a
device profile's per-window curve where it has one (``pool@<op>:windows``,
:data:`ftmodel.estimate.curves.WINDOWS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["ADAPTIVE_POOLS", "WINDOW_POOLS", "pool_window_bytes", "window_bytes_of"]

# pools with a kernel_size: the op name -> the spatial dimensions its window spans
WINDOW_POOLS: dict[str, int] = {
    "max_pool1d": 1, "max_pool1d_with_indices": 1, "avg_pool1d": 1,
    "max_pool2d": 2, "max_pool2d_with_indices": 2, "avg_pool2d": 2, "mkldnn_max_pool2d": 2,
    "mkldnn_avg_pool2d": 2,
    "max_pool3d": 3, "max_pool3d_with_indices": 3, "avg_pool3d": 3, "mkldnn_max_pool3d": 3,
    "mkldnn_avg_pool3d": 3,
}
ADAPTIVE_POOLS = frozenset({
    "adaptive_avg_pool1d", "adaptive_max_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "adaptive_max_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool3d", "adaptive_max_pool3d",
    "_mkldnn_adaptive_avg_pool2d", "mkldnn_adaptive_avg_pool2d"})


def _name(op: str) -> str:
    """``aten.max_pool2d_with_indices.default`` / ``aten::avg_pool2d`` -> the op's name."""
    parts = op.split("::")[-1].split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]


def _per_dim(value: Any, dims: int, default: int) -> list[int] | None:
    """An int or a list of ``dims`` ints (one int for all; empty: ``default``) as a list."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return [default] * dims
    if isinstance(value, int):
        return [value] * dims
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        vals = [int(v) for v in value]
        return vals * dims if len(vals) == 1 else vals if len(vals) == dims else None
    return None


def _reads_along(size_in: int, size_out: int, kernel: int, stride: int, pad: int,
                 dilation: int) -> int:
    """Input positions one dimension's windows read in all: the (output ``o``, window
    position ``j``) pairs with ``0 <= o·stride − pad + j·dilation < size_in``, counted per
    ``j``."""
    total = 0
    for j in range(kernel):
        shift = pad - j * dilation  # o·stride must lie in [shift, size_in + shift)
        lo = max(0, -(-shift // stride))
        hi = min(size_out - 1, (size_in - 1 + shift) // stride)
        total += max(0, hi - lo + 1)
    return total


def window_bytes_of(op: str, args: Sequence[Any], input_shape: Sequence[int],
                    output_shape: Sequence[int], element_bytes: int) -> int:
    """Bytes of input a pool's windows read (module docstring), from its op name (``aten.``
    or ``aten::`` spelling), its arguments as called (``(input, kernel_size, stride, padding,
    dilation, ...)``; average pools have no dilation), its input and (first) output shapes and
    its element size; 0 for an op that is not a pool or whose arguments are not constant."""
    name = _name(op)
    if name in ADAPTIVE_POOLS:
        return math.prod(int(d) for d in input_shape) * element_bytes
    dims = WINDOW_POOLS.get(name)
    if dims is None or len(input_shape) < dims + 1 or len(output_shape) != len(input_shape):
        return 0
    kernel = _per_dim(args[1] if len(args) > 1 else None, dims, 1)
    stride = _per_dim(args[2] if len(args) > 2 else None, dims, 0)
    pad = _per_dim(args[3] if len(args) > 3 else None, dims, 0)
    dilated = name.startswith(("max_", "mkldnn_max_"))
    dilation = _per_dim(args[4] if dilated and len(args) > 4 else None, dims, 1)
    if kernel is None or stride is None or pad is None or dilation is None:
        return 0
    stride = [s or k for s, k in zip(stride, kernel)]  # an empty stride is the window's
    planes = math.prod(int(d) for d in input_shape[:-dims])
    reads = planes
    for d in range(dims):
        reads *= _reads_along(int(input_shape[d - dims]), int(output_shape[d - dims]),
                              kernel[d], stride[d], pad[d], dilation[d])
    return reads * element_bytes


def pool_window_bytes(op_class: str, op: str, args: Sequence[Any], ins: Sequence[Any],
                      outs: Sequence[Any]) -> int:
    """:func:`window_bytes_of` for a recorded call: a kernel of class ``pool`` with input and
    output tensors ``ins`` and ``outs`` (its first of each counts); 0 for any other kernel."""
    if op_class != "pool" or not ins or not outs:
        return 0
    return window_bytes_of(op, args, ins[0].shape, outs[0].shape, int(ins[0].element_size()))
