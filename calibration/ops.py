"""Per-op-class size sweeps: the device time of single ops across sizes, small ones included.

Each :class:`OpSample` is one op at one size, wrapped in a module so the predictor's own tracer
counts its work (MACs, bytes) and host events. The device time of the op is its measured time
minus the host cost the fitted event costs assign to it (the tiny-size floor is host cost).
Shapes are drawn from generic grids (powers of two and common channel widths, a fixed seed),
not from the models the validation uses.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["OpSample", "op_samples", "OP_SWEEP_CLASSES"]


@dataclass
class OpSample:
    op_class: str
    label: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]


class _Fn(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor], *params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList([nn.Parameter(p, requires_grad=False) for p in params])

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs, *self.params)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _gemm(quick: bool) -> list[OpSample]:
    out = []
    ms = [1, 4, 16, 64, 256, 1024] if not quick else [1, 16, 256]
    kns = [(64, 64), (128, 128), (256, 256), (512, 1000), (768, 768), (768, 3072), (3072, 768),
           (1024, 1024), (2048, 512), (128, 512), (4096, 1024), (4096, 4096)]
    if quick:
        kns = kns[1::3]
    for m in ms:
        for k, n in kns:
            if m * k * n > 1.2e9:
                continue
            out.append(OpSample("gemm", f"linear m{m} k{k} n{n}", _Fn(F.linear, _r(n, k), _r(n)),
                                (_r(m, k),)))
    return out


def _bmm(quick: bool) -> list[OpSample]:
    out = []
    for b in ([4, 12, 48, 192] if not quick else [12, 96]):
        for s in ([16, 32, 64, 128, 256] if not quick else [32, 128]):
            for d in ([32, 64] if not quick else [64]):
                if b * s * s * d > 6e8:
                    continue
                out.append(OpSample("bmm", f"bmm qk b{b} s{s} d{d}",
                                    _Fn(lambda q, k: torch.bmm(q, k)), (_r(b, s, d), _r(b, d, s))))
                out.append(OpSample("bmm", f"bmm pv b{b} s{s} d{d}",
                                    _Fn(lambda p, v: torch.bmm(p, v)), (_r(b, s, s), _r(b, s, d))))
    return out


def _attention(quick: bool) -> list[OpSample]:
    out = []
    for b, h in ([(1, 4), (1, 12), (4, 12), (16, 12)] if not quick else [(1, 12)]):
        for s in ([16, 64, 128, 256] if not quick else [64]):
            d = 64
            q = _r(b, h, s, d)
            out.append(OpSample("attention", f"sdpa b{b} h{h} s{s} d{d}",
                                _Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
                                (q, q.clone(), q.clone())))
    return out


def _conv_configs(rng: random.Random, n: int, depthwise: bool) -> list[tuple[int, ...]]:
    chans = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512] if not depthwise else \
        [16, 32, 64, 96, 144, 192, 384, 576, 960]
    sizes = [7, 14, 28, 56, 112]
    configs: list[tuple[int, ...]] = []
    while len(configs) < n:
        b = rng.choice([1, 1, 2, 4, 8, 16])
        cin = rng.choice(chans)
        cout = cin if depthwise else rng.choice(chans)
        hw = rng.choice(sizes)
        k = rng.choice([3, 5] if depthwise else [1, 1, 3, 3, 3, 7])
        stride = rng.choice([1, 1, 2])
        groups = cin if depthwise else 1
        macs = b * (hw // stride) ** 2 * cout * (cin // groups) * k * k
        if macs > 1.0e9 or b * cin * hw * hw > 2.5e7:
            continue
        configs.append((b, cin, cout, hw, k, stride, groups))
    return configs


def _conv(quick: bool, depthwise: bool) -> list[OpSample]:
    rng = random.Random(1234 + depthwise)
    out = []
    n = (36 if not depthwise else 24) if not quick else 8
    for b, cin, cout, hw, k, stride, groups in _conv_configs(rng, n, depthwise):
        conv = nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=False)
        conv.requires_grad_(False)
        cls = "conv_grouped" if depthwise else "conv"
        out.append(OpSample(cls, f"conv b{b} c{cin}->{cout} {hw}px k{k} s{stride} g{groups}",
                            conv, (_r(b, cin, hw, hw),)))
    if not quick and not depthwise:  # the 3-channel stem of image models
        for b in (1, 4, 16):
            conv = nn.Conv2d(3, 64, 7, 2, 3, bias=False).requires_grad_(False)
            out.append(OpSample("conv", f"stem b{b}", conv, (_r(b, 3, 112, 112),)))
    return out


def _sizes(quick: bool) -> list[int]:
    return [2**e for e in (range(8, 25, 2) if not quick else range(8, 25, 5))]


def _bytes_classes(quick: bool) -> list[OpSample]:
    out = []
    for n in _sizes(quick):
        x = _r(n)
        out += [
            OpSample("elementwise", f"relu n{n}", _Fn(torch.relu), (x,)),
            OpSample("elementwise", f"add n{n}", _Fn(torch.add), (x, x.clone())),
            OpSample("elementwise", f"gelu n{n}", _Fn(F.gelu), (x,)),
            OpSample("elementwise", f"mul_ n{n}", _Fn(lambda t: t.mul_(1.0)), (x.clone(),)),
            OpSample("copy", f"clone n{n}", _Fn(torch.clone), (x,)),
        ]
        cols = 64 if n < 4096 else 256
        m2 = x.view(-1, cols)  # (rows, cols)
        out += [
            OpSample("copy", f"transpose-contiguous n{n}", _Fn(lambda t: t.t().contiguous()), (m2,)),
            OpSample("copy", f"cat n{n}", _Fn(lambda t: torch.cat([t, t], 0)), (m2,)),
            OpSample("softmax", f"softmax n{n}", _Fn(lambda t: torch.softmax(t, -1)), (m2,)),
            OpSample("reduction", f"mean n{n}", _Fn(lambda t: t.mean(-1)), (m2,)),
            OpSample("norm", f"layer_norm n{n}",
                     _Fn(lambda t: F.layer_norm(t, (t.shape[-1],))), (m2,)),
        ]
        c = 16 if n < 2**16 else 64
        hw = max(2, int((n // c) ** 0.5))
        img = _r(1, c, hw, hw)  # (N, C, H, W)
        bn = nn.BatchNorm2d(c).eval().requires_grad_(False)
        out += [
            OpSample("norm", f"batch_norm c{c} {hw}px", bn, (img,)),
            OpSample("pool", f"maxpool3s2 c{c} {hw}px", _Fn(lambda t: F.max_pool2d(t, 3, 2, 1)),
                     (img,)),
            OpSample("pool", f"adaptive_avg c{c} {hw}px",
                     _Fn(lambda t: F.adaptive_avg_pool2d(t, 1)), (img,)),
        ]
        e = 64 if n < 2**16 else 256
        vocab = max(8, min(n // e, 30522))
        ids = torch.randint(0, vocab, (1, max(1, n // e // 4)))
        out.append(OpSample("embedding", f"embedding v{vocab} e{e}",
                            nn.Embedding(vocab, e).requires_grad_(False), (ids,)))
    return out


OP_SWEEP_CLASSES = ("gemm", "bmm", "attention", "conv", "conv_grouped", "elementwise", "copy",
                    "softmax", "reduction", "norm", "pool", "embedding")


def op_samples(quick: bool = False) -> dict[str, list[OpSample]]:
    """The sweep, grouped by op class, in OP_SWEEP_CLASSES order."""
    all_samples = (_gemm(quick) + _bmm(quick) + _attention(quick) + _conv(quick, False)
                   + _conv(quick, True) + _bytes_classes(quick))
    grouped: dict[str, list[OpSample]] = {c: [] for c in OP_SWEEP_CLASSES}
    for s in all_samples:
        grouped[s.op_class].append(s)
    return grouped
