"""Host dispatch overhead of PyTorch eager, measured with programs of tiny ops.

Each program is an nn.Module whose forward repeats one pattern ``REPEAT`` times on tensors of a
few elements, so kernel work is negligible and the time is host cost: Python (the model's own function calls
included: ``python_glue`` wraps each op in model-style helper calls), ``nn.Module`` calls,
argument parsing, the dispatcher, allocation. The same tracer the predictor uses counts each
program's host events (module calls, torch calls, views, allocations, kernels by op class); a
non-negative least-squares fit of measured time against those counts, in relative error, gives
seconds per event. Patterns are generic building blocks, never models from the validation zoo.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import nnls
from torch import nn

from ftmodel.hardware.profile import FrameworkHost

__all__ = ["HostProgram", "host_programs", "compiled_host_programs", "fit_event_costs",
           "fit_host_passes", "pass_medians", "REPEAT",
           "INDUCTOR_PATTERNS"]

REPEAT = 40


@dataclass
class HostProgram:
    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]


class _Repeat(nn.Module):
    """forward(x) = step applied REPEAT times (step is a function or a ModuleList)."""

    def __init__(self, step: Callable[..., torch.Tensor] | None = None,
                 modules: list[nn.Module] | None = None, chain: bool = False) -> None:
        super().__init__()
        self.step = step
        self.mods = nn.ModuleList(modules or [])
        self.chain = chain

    def forward(self, x: torch.Tensor, *extra: torch.Tensor) -> torch.Tensor:
        y = x
        if len(self.mods):
            for m in self.mods:
                y = m(y if self.chain else x, *extra)
            return y
        assert self.step is not None
        for _ in range(REPEAT):
            y = self.step(y if self.chain else x, *extra)
        return y


class _Block(nn.Module):
    """A tiny residual MLP block with nested submodules (module-call-heavy glue)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class _ConvBlock(nn.Module):
    def __init__(self, c: int, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class _Attn(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape  # (B, S, D)
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, H, S, Dh)
        return x + self.proj(y.transpose(1, 2).reshape(b, s, d))


_GLUE_CONFIG = {"scale": 0.5, "activation": "relu", "layers": 4}


def _config_value(config: dict[str, object], key: str, default: float) -> float:
    value = config.get(key, default)
    return float(value) if isinstance(value, (int, float)) else default


def _scaled_shape(x: torch.Tensor, factor: float) -> tuple[int, ...]:
    return tuple(int(d * factor) or 1 for d in x.shape)


def _glue_step(x: torch.Tensor) -> torch.Tensor:
    """Model-style Python glue (a config lookup, a shape helper) around one tiny op."""
    scale = _config_value(_GLUE_CONFIG, "scale", 1.0)
    _scaled_shape(x, scale)
    return x * scale


def _mods(factory: Callable[[], nn.Module], n: int = REPEAT) -> list[nn.Module]:
    return [factory() for _ in range(n)]


def host_programs() -> list[HostProgram]:
    """The calibration programs, each on tensors of a few elements."""
    v = torch.ones(4)  # (4,)
    m = torch.ones(2, 4)  # (2, 4)
    img = torch.ones(1, 2, 4, 4)  # (N, C, H, W)
    seq = torch.ones(1, 4, 8)  # (B, S, D)
    ids = torch.zeros(1, 4, dtype=torch.long)
    P = HostProgram
    return [
        P("relu_fn", _Repeat(torch.relu), (v,)),
        P("add_scalar", _Repeat(lambda x: x + 1.0), (v,)),
        P("mul_tensor", _Repeat(lambda x, y: x * y), (v, v)),
        P("add_inplace", _Repeat(lambda x: x.add_(0.0)), (v.clone(),)),
        P("sigmoid_chain", _Repeat(torch.sigmoid, chain=True), (v,)),
        P("view", _Repeat(lambda x: x.view(2, 2)), (v,)),
        P("transpose", _Repeat(lambda x: x.transpose(0, 1)), (m,)),
        P("getitem", _Repeat(lambda x: x[0]), (m,)),
        P("empty", _Repeat(lambda x: torch.empty(4)), (v,)),
        P("identity_modules", _Repeat(modules=_mods(nn.Identity)), (v,)),
        P("relu_modules", _Repeat(modules=_mods(nn.ReLU)), (v,)),
        P("linear_modules", _Repeat(modules=_mods(lambda: nn.Linear(4, 4))), (m,)),
        P("linear_fn", _Repeat(lambda x, w: F.linear(x, w)), (m, torch.ones(4, 4))),
        P("tanh", _Repeat(torch.tanh), (v,)),
        P("mul_scalar_chain", _Repeat(lambda x: x * 0.5, chain=True), (v,)),
        P("matmul_2d", _Repeat(lambda x, w: x @ w), (m, torch.ones(4, 4))),
        P("bmm", _Repeat(lambda x: torch.bmm(x, x.transpose(1, 2))), (seq,)),
        P("conv_modules", _Repeat(modules=_mods(lambda: nn.Conv2d(2, 2, 3, padding=1))), (img,)),
        P("dwconv_modules", _Repeat(modules=_mods(lambda: nn.Conv2d(2, 2, 3, padding=1, groups=2))),
          (img,)),
        P("bn_modules", _Repeat(modules=_mods(lambda: nn.BatchNorm2d(2).eval())), (img,)),
        P("ln_modules", _Repeat(modules=_mods(lambda: nn.LayerNorm(8))), (seq,)),
        P("gelu_modules", _Repeat(modules=_mods(nn.GELU)), (seq,)),
        P("softmax", _Repeat(lambda x: torch.softmax(x, -1)), (seq,)),
        P("mean", _Repeat(lambda x: x.mean(-1)), (seq,)),
        P("maxpool", _Repeat(lambda x: F.max_pool2d(x, 2)), (img,)),
        P("avgpool_adaptive", _Repeat(lambda x: F.adaptive_avg_pool2d(x, 1)), (img,)),
        P("embedding_modules", _Repeat(modules=_mods(lambda: nn.Embedding(8, 4))), (ids,)),
        P("cat", _Repeat(lambda x: torch.cat([x, x], 0)), (m,)),
        P("contiguous_t", _Repeat(lambda x: x.t().contiguous()), (m,)),
        P("reshape_permuted", _Repeat(lambda x: x.permute(0, 2, 1).reshape(1, -1)), (seq,)),
        P("sdpa", _Repeat(lambda x: F.scaled_dot_product_attention(x, x, x)), (seq.view(1, 1, 4, 8),)),
        P("mlp_blocks", _Repeat(modules=_mods(lambda: _Block(8), REPEAT // 4), chain=True), (seq,)),
        P("conv_blocks", _Repeat(modules=_mods(lambda: _ConvBlock(2), REPEAT // 4), chain=True),
          (img,)),
        P("attn_blocks", _Repeat(modules=_mods(lambda: _Attn(8, 2), REPEAT // 4), chain=True),
          (seq,)),
        P("python_glue", _Repeat(_glue_step), (v,)),
    ]


def fit_event_costs(event_counts: list[dict[str, int]], times_s: list[float]
                    ) -> dict[str, float]:
    """Seconds per host event from programs' counts and times (NNLS on relative error)."""
    kinds = sorted({k for counts in event_counts for k, c in counts.items() if c})
    a = np.array([[counts.get(k, 0) for k in kinds] for counts in event_counts], dtype=float)
    t = np.asarray(times_s, dtype=float)
    w = 1.0 / t  # relative error: each program counts alike whatever its length
    coef, _ = nnls(a * w[:, None], t * w)
    return {k: float(c) for k, c in zip(kinds, coef)}


def fit_host_passes(programs: Sequence[HostProgram], counts: Sequence[dict[str, int]],
                    passes: Sequence[Mapping[str, tuple[float, float]]]) -> FrameworkHost:
    """Eager's host costs from its programs timed once or more (``passes``: per pass, each
    program's (seconds, spread)): each program's time is the median of its passes' and the costs
    are fitted to those (:func:`fit_event_costs`). Every pass's time is kept in the program's
    sample (``pass_time_s``) when there is more than one."""
    rows = [pass_medians(p.name, passes) for p in programs]
    costs = fit_event_costs(list(counts), [r["time_s"] for r in rows])
    samples = tuple({"program": p.name, "events": c, **r}
                    for p, c, r in zip(programs, counts, rows))
    return FrameworkHost(per_event_s=costs, per_call_s=0.0, samples=samples)


def pass_medians(name: str, passes: Sequence[Mapping[str, tuple[float, float]]]
                 ) -> dict[str, Any]:
    """A host program's sample from its passes (each: name → (seconds, spread)): the median
    time and spread, and every pass's time (``pass_time_s``) when there is more than one."""
    if not passes:
        raise ValueError("no host passes to fit")
    return {"time_s": statistics.median(x[name][0] for x in passes),
            "spread": statistics.median(x[name][1] for x in passes),
            **({"pass_time_s": [x[name][0] for x in passes]} if len(passes) > 1 else {})}


# ---- compiled frameworks (onnxruntime, torchscript, inductor) ---------------------------------
# Graph compilers drop dead code, so every program chains its ops (each step consumes the last
# step's output). Each pattern comes at two lengths, which separates the per-call cost
# (session.run, guards, interpreter entry) from the per-event costs. The framework's own
# lowering counts what survives its optimizations (fusion, folding): the fit sees exactly the
# events a prediction sees.

class _Chain(nn.Module):
    """forward(x, *extra) = step applied n times, chained (a list of modules or a function)."""

    def __init__(self, n: int, step: Callable[..., torch.Tensor] | None = None,
                 factory: Callable[[], nn.Module] | None = None) -> None:
        super().__init__()
        self.n = n
        self.step = step
        self.mods = nn.ModuleList([factory() for _ in range(n)] if factory else [])

    def forward(self, x: torch.Tensor, *extra: torch.Tensor) -> torch.Tensor:
        if len(self.mods):
            for m in self.mods:
                x = m(x, *extra)
            return x
        assert self.step is not None
        for _ in range(self.n):
            x = self.step(x, *extra)
        return x


class _EmbedSum(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(8, 4) for _ in range(n)])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        y = self.embs[0](ids)
        for e in self.embs[1:]:
            y = y + e(ids) * y  # keeps the embeddings from being summed as one gather
        return y


class _LinAct(nn.Module):
    def __init__(self, d: int, act: nn.Module) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class _MatW(nn.Module):
    """x @ w with w a buffer (extra program inputs would be resized to the batch)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.register_buffer("w", torch.ones(d, d) / d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


# inductor fuses every chain of pointwise/norm/reduction ops into one generated kernel, so only
# programs around library (extern) kernels tell its per-kernel costs apart; relu gives the
# one-kernel program that pins per_call_s. An extern kernel alone (linear: addmm; conv: the
# convolution and its layout copy) beside the same kernel followed by a generated one
# (linear_relu, conv_blocks) separates the two: without them every generated kernel came in a
# fixed ratio to an extern one, and the fit priced them at 0 and the extern ones for both.
# Its C++ compile is slow, so it gets these only.
INDUCTOR_PATTERNS = ("relu", "linear", "linear_relu", "bmm", "conv", "conv_blocks", "dwconv",
                     "sdpa", "mlp_blocks", "attn_blocks")


def compiled_host_programs(lengths: tuple[int, ...] = (4, 16), full: bool = True,
                           only: tuple[str, ...] | None = None) -> list[HostProgram]:
    """Chained tiny-op programs for frameworks that compile a graph, each at every length.

    ``full=False`` keeps one program per kernel class that models of the zoo's kinds launch;
    ``only`` keeps the named patterns (e.g. :data:`INDUCTOR_PATTERNS`).
    """
    v = torch.ones(4)  # (4,)
    m = torch.ones(2, 4)  # (2, 4)
    sq = torch.ones(4, 4)  # (4, 4)
    img = torch.ones(1, 2, 4, 4)  # (N, C, H, W)
    seq = torch.ones(1, 4, 8)  # (B, S, D)
    heads = torch.ones(1, 1, 4, 8)  # (B, H, S, Dh)
    ids = torch.zeros(1, 4, dtype=torch.long)
    patterns: list[tuple[str, Callable[[int], nn.Module], tuple[torch.Tensor, ...], bool]] = [
        # name, builder(n), inputs, in the short list
        ("relu", lambda n: _Chain(n, lambda x: torch.relu(x - 0.5)), (v,), False),
        ("mul_tensor", lambda n: _Chain(n, lambda x, y: x * y), (v, v), True),
        ("sigmoid", lambda n: _Chain(n, torch.sigmoid), (v,), False),
        ("tanh_add", lambda n: _Chain(n, lambda x: torch.tanh(x) + x), (v,), False),
        ("linear", lambda n: _Chain(n, factory=lambda: nn.Linear(4, 4)), (m,), True),
        ("linear_relu", lambda n: _Chain(n, factory=lambda: _LinAct(4, nn.ReLU())), (m,), True),
        ("linear_gelu", lambda n: _Chain(n, factory=lambda: _LinAct(8, nn.GELU())), (seq,),
         False),
        ("matmul", lambda n: _Chain(n, factory=lambda: _MatW(4)), (m,), False),
        ("bmm", lambda n: _Chain(n, lambda x: torch.bmm(x, x.transpose(1, 2))),
         (torch.ones(1, 4, 4),), True),
        ("conv", lambda n: _Chain(n, factory=lambda: nn.Conv2d(2, 2, 3, padding=1)), (img,),
         True),
        ("dwconv", lambda n: _Chain(n, factory=lambda: nn.Conv2d(2, 2, 3, padding=1,
                                                                groups=2)), (img,), True),
        ("conv_blocks", lambda n: _Chain(n, factory=lambda: _ConvBlock(2)), (img,), True),
        ("bn_relu", lambda n: _Chain(n, factory=lambda: nn.Sequential(
            nn.BatchNorm2d(2).eval(), nn.Hardswish())), (img,), False),
        ("layernorm", lambda n: _Chain(n, factory=lambda: nn.LayerNorm(8)), (seq,), True),
        ("softmax", lambda n: _Chain(n, lambda x: torch.softmax(x, -1) * x), (seq,), True),
        ("mean_center", lambda n: _Chain(n, lambda x: x - x.mean(-1, keepdim=True)), (seq,),
         True),
        ("maxpool", lambda n: _Chain(n, lambda x: F.max_pool2d(x, 3, 1, 1) * 0.5), (img,),
         True),
        ("avgpool_se", lambda n: _Chain(n, lambda x: x * F.adaptive_avg_pool2d(x, 1)), (img,),
         False),
        ("transpose_copy", lambda n: _Chain(n, lambda x: x.transpose(0, 1).contiguous() + 1.0),
         (sq,), True),
        ("permute_reshape", lambda n: _Chain(n, lambda x: x.permute(0, 2, 1).reshape(
            1, 4, 8) * 2.0), (seq,), False),
        ("cat_slice", lambda n: _Chain(n, lambda x: torch.cat([x, x * 2.0], 0)[1:3]), (m,),
         False),
        ("sdpa", lambda n: _Chain(n, lambda x: F.scaled_dot_product_attention(x, x, x)),
         (heads,), True),
        ("embedding", lambda n: _EmbedSum(n), (ids,), True),
        ("mlp_blocks", lambda n: _Chain(max(1, n // 2), factory=lambda: _Block(8)), (seq,),
         True),
        ("attn_blocks", lambda n: _Chain(max(1, n // 2), factory=lambda: _Attn(8, 2)), (seq,),
         True),
    ]
    torch.manual_seed(0)
    out = []  # every input's dim 0 is the program's batch (lowerings resize inputs to it)
    for name, make, inputs, short in patterns:
        if (not full and not short) or (only is not None and name not in only):
            continue
        for n in lengths:
            out.append(HostProgram(f"{name}_x{n}", make(n).eval().requires_grad_(False), inputs))
    return out
