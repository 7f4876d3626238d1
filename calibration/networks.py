"""Random synthetic networks: how single-op costs add up inside a real forward pass.

Op sweeps time each op alone, in a tight loop: warm caches, warm thread pool, one code path.
Inside a model, ops of many kinds follow each other, weights stream from memory and the thread
pool wakes between parallel regions, so each kernel costs a little more. This stage builds random
networks from generic blocks (conv-BN-activation, depthwise-separable, residual MLP, attention),
with widths, depths and resolutions drawn from a fixed seed — never the validation models —
measures them at a few batch sizes, and fits, by non-negative least squares in relative error,
``measured − Σo ≈ device_scale·Σk + per_byte_s·Σbytes + per_kernel_s·n_kernels`` (host costs
Σo come from the dispatch stage and are kept as measured; ``host_scale`` is 1). ``per_byte_s``
prices the traffic of every kernel's inputs and outputs again: in a sweep an op re-reads the same
hot buffers, inside a model its operands were just written by other ops or stream from memory.
Forms tried on this CPU (1 thread), by median error of the fit on the synthetic networks
themselves: Σk 16.6%, Σk+n 16.2%, Σk+Σbytes 14.1%, Σk+n+Σbytes 13.9%, Σk+parameter bytes
15.8%; the last but one is kept.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import nnls
from torch import nn

__all__ = ["SyntheticNet", "synthetic_networks", "fit_in_model"]


@dataclass
class SyntheticNet:
    name: str
    module: nn.Module
    make_inputs: "callable"  # type: ignore[valid-type]


class _ConvBlock(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, groups: int, act: nn.Module
                 ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class _Residual(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def _act(rng: random.Random) -> nn.Module:
    return rng.choice([nn.ReLU(), nn.ReLU(inplace=True), nn.SiLU(), nn.Hardswish(), nn.GELU()])


def _cnn(rng: random.Random) -> tuple[nn.Module, int]:
    c = rng.choice([8, 16, 24, 32])
    layers: list[nn.Module] = [_ConvBlock(3, c, 3, 2, 1, _act(rng))]
    for _stage in range(rng.randint(2, 4)):
        cout = min(512, c * rng.choice([1, 2]))
        layers.append(_ConvBlock(c, cout, rng.choice([1, 3]), 2, 1, _act(rng)))
        c = cout
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.5:  # depthwise-separable, inverted residual style
                e = c * rng.choice([1, 3, 6])
                body = nn.Sequential(_ConvBlock(c, e, 1, 1, 1, _act(rng)),
                                     _ConvBlock(e, e, rng.choice([3, 5]), 1, e, _act(rng)),
                                     nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))
            else:
                body = nn.Sequential(_ConvBlock(c, c, 3, 1, 1, _act(rng)),
                                     nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))
            layers.append(_Residual(body))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 100)]
    return nn.Sequential(*layers).eval(), rng.choice([32, 48, 64, 96])


class _TBlock(nn.Module):
    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape  # (B, S, D)
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4)  # 3 × (B, H, S, Dh)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, d))
        return x + self.ff(self.ln2(x))


def _transformer(rng: random.Random) -> tuple[nn.Module, int]:
    d = rng.choice([64, 128, 192, 256])
    blocks = [_TBlock(d, rng.choice([2, 4]), d * rng.choice([2, 4]))
              for _ in range(rng.randint(1, 4))]
    return nn.Sequential(*blocks).eval(), d


def _mlp(rng: random.Random) -> tuple[nn.Module, int]:
    d_in = rng.choice([64, 256, 512])
    layers: list[nn.Module] = []
    d = d_in
    for _ in range(rng.randint(2, 16)):
        w = rng.choice([64, 256, 512, 1024, 2048])
        layers += [nn.Linear(d, w), _act(rng)]
        d = w
    return nn.Sequential(*layers).eval(), d_in


def synthetic_networks(n: int = 12, seed: int = 7) -> list[SyntheticNet]:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    out = []
    for i in range(n):
        kind = ("cnn", "transformer", "mlp")[i % 3]
        if kind == "cnn":
            m, side = _cnn(rng)
            make = (lambda s: lambda b: (torch.randn(b, 3, s, s),))(side)
        elif kind == "transformer":
            m, d = _transformer(rng)
            seq = rng.choice([16, 32, 64])
            make = (lambda d, s: lambda b: (torch.randn(b, s, d),))(d, seq)
        else:
            m, d = _mlp(rng)
            make = (lambda d: lambda b: (torch.randn(b, d),))(d)
        out.append(SyntheticNet(f"{kind}{i}", m.requires_grad_(False), make))
    return out


def fit_in_model(host_s: list[float], device_s: list[float], bytes_moved: list[float],
                 n_kernels: list[int], measured_s: list[float]) -> dict[str, float]:
    """device_scale, per_byte_s and per_kernel_s by NNLS in relative error (host_scale = 1)."""
    a = np.array([device_s, bytes_moved, n_kernels], dtype=float).T
    t = np.asarray(measured_s, dtype=float)
    rest = t - np.asarray(host_s, dtype=float)
    coef, _ = nnls(a / t[:, None], rest / t)
    return {"host_scale": 1.0, "device_scale": float(coef[0]), "per_byte_s": float(coef[1]),
            "per_kernel_s": float(coef[2])}
