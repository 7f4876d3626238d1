"""ftmodel.tracing.windows: the bytes of input a pool's windows read, checked against the
windows themselves (unfolded), and carried by every lowering that sees a pool's arguments."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ftmodel.frameworks import eager
from ftmodel.tracing.dispatch import trace
from ftmodel.tracing.windows import window_bytes_of

MAX2D = "aten.max_pool2d_with_indices.default"


def _unfolded_reads(x: torch.Tensor, k: int, s: int, p: int, d: int = 1) -> int:
    """Input positions inside the windows, counted from the windows themselves: every window
    of a zero-padded tensor of ones, summed (padding reads nothing)."""
    ones = F.pad(torch.ones_like(x), (p, p, p, p))
    return int(F.unfold(ones, k, dilation=d, stride=s).sum())


@pytest.mark.parametrize("side,k,s,p,d", [
    (n, k, s, p, d) for n, k, s, p, d in itertools.product((5, 8, 28), (1, 2, 3, 5), (1, 2, 3),
                                                          (0, 1, 2), (1, 2))
    if p <= k // 2 and n + 2 * p >= d * (k - 1) + 1])
def test_a_max_pools_windows_read_what_unfolding_them_reads(side: int, k: int, s: int, p: int,
                                                            d: int) -> None:
    x = torch.zeros(2, 3, side, side)
    y = F.max_pool2d(x, k, s, p, d)
    got = window_bytes_of(MAX2D, [x, [k, k], [s, s], [p, p], [d, d], False], x.shape, y.shape, 4)
    assert got == 4 * _unfolded_reads(x, k, s, p, d)


def test_average_pools_read_without_dilation_and_an_empty_stride_is_the_window() -> None:
    x = torch.zeros(1, 4, 9, 9)
    y = F.avg_pool2d(x, 3, None, 1)  # stride = window
    # avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, ...): the
    # booleans after the padding are not a dilation
    got = window_bytes_of("aten::avg_pool2d", [x, [3, 3], [], [1, 1], True, True, None],
                          x.shape, y.shape, 2)
    assert got == 2 * _unfolded_reads(x, 3, 3, 1)


def test_one_and_three_dimensional_pools_and_adaptive_ones() -> None:
    x1 = torch.zeros(1, 2, 10)
    y1 = F.max_pool1d(x1, 4, 2)
    assert window_bytes_of("aten.max_pool1d.default", [x1, [4], [2], [0], [1], False], x1.shape,
                           y1.shape, 1) == 2 * 4 * 4  # 4 windows of 4 per channel
    x3 = torch.zeros(1, 1, 4, 4, 4)
    y3 = F.avg_pool3d(x3, 2)
    assert window_bytes_of("aten.avg_pool3d.default", [x3, [2, 2, 2], [], [0, 0, 0]], x3.shape,
                           y3.shape, 4) == 4 * 64  # windows that tile the input read it once
    # an adaptive pool's windows tile its input: it reads it once
    assert window_bytes_of("aten._adaptive_avg_pool2d.default", [None, [1, 1]], (2, 8, 7, 7),
                           (2, 8, 1, 1), 4) == 4 * 2 * 8 * 49
    assert window_bytes_of("aten.add.Tensor", [None, None], (4, 4), (4, 4), 4) == 0


def test_eager_pools_carry_their_window_reads_and_other_kernels_none() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(3, 1, 1),
                          nn.AvgPool2d(2), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    prog = eager.lower(trace(model, (x,)))
    pools = [k for k in prog.kernels if k.op_class == "pool"]
    assert [k.members[0] for k in pools] == [MAX2D, "aten.avg_pool2d.default"]
    assert pools[0].bytes_window_reads == 4 * 8 * _unfolded_reads(torch.zeros(1, 1, 8, 8), 3,
                                                                  1, 1)
    assert pools[1].bytes_window_reads == 4 * 8 * 64  # 2x2 windows of stride 2 tile the map
    assert all(k.bytes_window_reads == 0 for k in prog.kernels if k.op_class != "pool")


def test_a_1d_max_pool_seen_as_a_2d_one_keeps_its_windows() -> None:
    # under fake tensors max_pool1d takes the 2-d with-indices path (a 1-row window); the
    # record is eager's own 1-d kernel and its windows are the 1-d ones
    class Pool1d(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.max_pool1d(x, 4)

    prog = eager.lower(trace(Pool1d().eval(), (torch.randn(1, 16, 64),)))
    pool = next(k for k in prog.kernels if k.op_class == "pool")
    assert pool.members[0] == "aten.max_pool1d.default"
    assert pool.bytes_window_reads == 4 * 16 * 64
