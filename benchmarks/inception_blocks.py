"""An inception-block network, for studying pooling and layout costs outside the corpus.

    ftmodel validate benchmarks/inception_blocks.py:factory --input-shape 3x128x128 \\
        -f torchscript --device P.json --batch 1,4,16 --threads 2 --default-malloc
    python benchmarks/diagnose.py --profile P.json --model benchmarks/inception_blocks.py:factory \\
        --input-shape 3x128x128 --batch 4 --framework torchscript

Blocks of four branches (1x1; 1x1 then 3x3, twice; a 3x3 stride-1 max pool with ``ceil_mode``
then 1x1) concatenated, as GoogLeNet's, with widths and a stem of its own: the corpus's
GoogLeNet is in its held-out half, which is measured and reported, never studied, so this
network stands in for it. Random weights; nothing is timed here.
"""

from __future__ import annotations

import torch
from torch import nn


def _cbr(c_in: int, c_out: int, k: int, stride: int = 1, pad: int = 0) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, stride, pad, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class InceptionBlock(nn.Module):
    """Four branches concatenated on channels: a + b + c + d output channels."""

    def __init__(self, c_in: int, a: int, b_mid: int, b: int, c_mid: int, c: int, d: int
                 ) -> None:
        super().__init__()
        self.b1 = _cbr(c_in, a, 1)
        self.b2 = nn.Sequential(_cbr(c_in, b_mid, 1), _cbr(b_mid, b, 3, pad=1))
        self.b3 = nn.Sequential(_cbr(c_in, c_mid, 1), _cbr(c_mid, c, 3, pad=1))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), _cbr(c_in, d, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


def factory() -> nn.Module:
    """The network, in eval mode (images of any size from 64 px; 128 px in the studies)."""
    torch.manual_seed(0)
    return nn.Sequential(
        _cbr(3, 48, 7, 2, 3), nn.MaxPool2d(3, 2, ceil_mode=True),
        _cbr(48, 48, 1), _cbr(48, 160, 3, pad=1), nn.MaxPool2d(3, 2, ceil_mode=True),
        InceptionBlock(160, 48, 80, 112, 16, 24, 24),
        InceptionBlock(208, 112, 112, 160, 24, 80, 48),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        InceptionBlock(400, 160, 80, 176, 16, 40, 56),
        InceptionBlock(432, 128, 96, 224, 24, 56, 56),
        InceptionBlock(464, 224, 128, 256, 32, 112, 112),
        nn.MaxPool2d(2, 2, ceil_mode=True),
        InceptionBlock(704, 256, 160, 320, 32, 128, 128),
        InceptionBlock(832, 320, 192, 352, 48, 128, 128),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(928, 1000)).eval()
