"""Raw-waveform 1-d CNNs outside the validation corpus, for studying its audio family without
its held-out model: Dai et al.'s M3, M11 and M18 ("Very deep convolutional neural networks
for raw waveforms", ICASSP 2017; random weights, 10 classes) and their front end alone.

    ftmodel validate benchmarks/raw_waveform_nets.py:m11 --input-shape 1x16000 \\
        --batch 1,4,16 -f eager --default-malloc
    python benchmarks/heap_by_kind.py benchmarks/raw_waveform_nets.py:front2 \\
        --input-shape 1x8000 --batches 4,16
"""

from __future__ import annotations

import torch
from torch import nn


def _stage(c_in: int, c_out: int, kernel: int, stride: int = 1, n: int = 1) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for i in range(n):
        layers += [nn.Conv1d(c_in if i == 0 else c_out, c_out, kernel,
                             stride=stride if i == 0 else 1, padding=0 if kernel > 3 else 1),
                   nn.BatchNorm1d(c_out), nn.ReLU()]
    return layers


class DaiNet(nn.Module):
    """A front end (1 -> c channels, ``k`` taps, stride ``s``), then stages of 3-tap
    convolutions, each followed by a max pool of 4, a global mean and a linear classifier."""

    def __init__(self, plan: list[tuple[int, int]], front: tuple[int, int, int] = (64, 80, 4),
                 classes: int = 10) -> None:
        super().__init__()
        c0, k0, s0 = front
        layers = _stage(1, c0, k0, s0) + [nn.MaxPool1d(4)]
        c_in = c0
        for c_out, n in plan:
            layers += _stage(c_in, c_out, 3, 1, n) + [nn.MaxPool1d(4)]
            c_in = c_out
        self.features = nn.Sequential(*layers[:-1])
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x).mean(dim=-1))
        return out


class FrontEnd(nn.Module):
    """A raw-waveform front end alone: conv (1 -> c, k taps, stride s), batch norm, ReLU, max
    pool of 4 (``extra`` more 3-tap blocks), global mean."""

    def __init__(self, c: int = 64, k: int = 80, s: int = 4, extra: int = 0) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(1, c, k, stride=s), nn.BatchNorm1d(c), nn.ReLU(),
                                   nn.MaxPool1d(4)]
        for _ in range(extra):
            layers += [nn.Conv1d(c, c, 3), nn.BatchNorm1d(c), nn.ReLU(), nn.MaxPool1d(4)]
        self.f = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.f(x).mean(dim=-1)
        return out


def m3() -> DaiNet:
    return DaiNet([(256, 1)], front=(256, 80, 4))


def m11() -> DaiNet:
    return DaiNet([(64, 2), (128, 2), (256, 3), (512, 2)])


def m18() -> DaiNet:
    return DaiNet([(64, 4), (128, 4), (256, 4), (512, 4)])


def front() -> FrontEnd:
    return FrontEnd()


def front2() -> FrontEnd:
    return FrontEnd(extra=1)
