"""Per-op-class size sweeps: the device time of single ops across sizes, small ones included.

Each :class:`OpSample` is one op at one size, wrapped in a module so the predictor's own tracer
counts its work (MACs, bytes). Every family of samples (one op called one way) has a *floor*: the
same call on tensors of a few elements, measured in the same interleaved rounds. The device time
of a sample is its time minus its family's floor, so host cost (Python, module call, dispatch,
allocation of a tiny output) cancels exactly. Curves are keyed by op class, refined by variant
where it matters on a CPU (``elementwise:inplace`` writes into existing memory; out-of-place ops
pay for fresh pages; ``elementwise:math`` are transcendental). Shapes come from generic grids
(powers of two, common channel widths, a fixed seed), not from the validation models.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ftmodel.calibration.conv_samples import conv1d_samples, conv_samples
from ftmodel.calibration.op_sample import OpSample, random_tensor as _r
from ftmodel.calibration.sweep_grid import CPU_GRID, GPU_GRID, SweepGrid
from ftmodel.errors import InvalidArgumentError
from ftmodel.estimate.curves import GRU_STEP_CURVE, LSTM_STEP_CURVE
from ftmodel.tracing.attention_variants import ATTENTION_HEAD_DIMS

__all__ = ["OpSample", "op_samples", "named_sweeps", "ort_samples", "OP_SWEEP_CLASSES",
           "ORT_ONLY_CURVES", "PER_OP_CLASSES", "VARIANT_CURVE_CLASSES", "SweepGrid", "CPU_GRID",
           "GPU_GRID",
           "LSTM_STEPS", "LSTM_SHORT_STEPS"]


class _Fn(nn.Module):
    """fn(*inputs, *params) with up to two parameters held as buffers (cheap to reach)."""

    def __init__(self, fn: Callable[..., torch.Tensor], *params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        self.n = len(params)
        for i, p in enumerate(params):
            self.register_buffer(f"p{i}", p)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if self.n == 0:
            return self.fn(*xs)
        if self.n == 1:
            return self.fn(*xs, self.p0)
        return self.fn(*xs, self.p0, self.p1)


def _linear(m: int, k: int, n: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return _Fn(F.linear, _r(n, k), _r(n)), (_r(m, k),)


def _gemm(quick: bool, grid: SweepGrid) -> list[OpSample]:
    out = [OpSample("gemm", "linear", "linear floor", *_linear(1, 4, 4), is_floor=True)]
    ms = list(grid.gemm_ms) if not quick else list(grid.gemm_ms[::2])
    kns = [(64, 64), (128, 128), (256, 256), (512, 1000), (768, 768), (768, 3072), (3072, 768),
           (1024, 1024), (2048, 512), (128, 512), (4096, 1024), (4096, 4096)]
    if quick:
        kns = kns[1::3]
    for m in ms:
        for k, n in kns:
            if m * k * n <= grid.gemm_max_macs:
                out.append(OpSample("gemm", "linear", f"linear m{m} k{k} n{n}", *_linear(m, k, n)))
    return out


def _bmm(quick: bool, grid: SweepGrid) -> list[OpSample]:
    bmm = _Fn(torch.bmm)
    out = [OpSample("bmm", "bmm", "bmm floor", bmm, (_r(1, 2, 2), _r(1, 2, 2)), is_floor=True)]
    for b in (grid.bmm_batches if not quick else (12, 96)):
        for s in ([16, 32, 64, 128, 256] if not quick else [32, 128]):
            for d in ([32, 64] if not quick else [64]):
                if b * s * s * d > grid.bmm_max_macs:
                    continue
                out.append(OpSample("bmm", "bmm", f"bmm qk b{b} s{s} d{d}", bmm,
                                    (_r(b, s, d), _r(b, d, s))))
                out.append(OpSample("bmm", "bmm", f"bmm pv b{b} s{s} d{d}", bmm,
                                    (_r(b, s, s), _r(b, s, d))))
    return out


def _attention(quick: bool, grid: SweepGrid) -> list[OpSample]:
    """Fused attention over the grid's batches, heads and sequence lengths, at each head
    dimension of :data:`~ftmodel.tracing.attention_variants.ATTENTION_HEAD_DIMS`: each its own
    curve (``attention:head16``, ..., from the samples' variants, ``sweep_stage``), since at
    equal MACs small heads have more scores to softmax."""
    sdpa = _Fn(F.scaled_dot_product_attention)
    t = _r(1, 1, 2, 4)
    out = [OpSample("attention", "sdpa", "sdpa floor", sdpa, (t, t, t), is_floor=True)]
    for d in ATTENTION_HEAD_DIMS:
        for b, h in (grid.sdpa_batch_heads if not quick else ((1, 12),)):
            for s in (grid.sdpa_seqs if not quick else (64,)):
                q = _r(b, h, s, d)
                out.append(OpSample("attention", "sdpa", f"sdpa b{b} h{h} s{s} d{d}", sdpa,
                                    (q, q.clone(), q.clone())))
    return out


LSTM_STEPS = 48  # time steps of each recurrent sample (its curve is per step)
LSTM_SHORT_STEPS = 8  # ... and of its short twin (the difference prices one step)


def _lstm(quick: bool, grid: SweepGrid) -> list[OpSample]:
    """One-layer LSTMs over ``LSTM_STEPS`` steps, each with a twin over ``LSTM_SHORT_STEPS``:
    hidden 64-1024, input half or all of it, batch 1-64 (CPU only: ``grid.lstm_max_macs``).

    Hidden sizes step by 1.5-2x, not by 2x alone: a step reads the layer's weights whole, and
    its time jumps where they outgrow the cores' L2; with hidden 256 and 512 only, the weights
    went from 2.1 to 6.3 MB in one step across an Intel Xeon's 2 x 2 MB, and a layer of hidden
    320 (3.3 MB, L2-resident) was priced by log-interpolation at about 17 us a step where it
    took about 13.

    oneDNN's LSTM layer costs a fixed time per call (about 0.2-0.3 ms at hidden 256 on an
    Intel Xeon with 2 threads; it re-orders the weights on every call) besides its steps: a
    per-step price from one length over-prices longer sequences and under-prices shorter ones
    (1.4-1.7x at 128-256 steps, 0.7x at 16, from 32-step samples)."""
    return _recurrent(LSTM_STEP_CURVE, "lstm", nn.LSTM, 4, quick, grid)


def _gru(quick: bool, grid: SweepGrid) -> list[OpSample]:
    """One-layer GRUs on the LSTMs' grid (:func:`_lstm`), for ONNX Runtime's own GRU kernel
    (``gemm@gru``): each of its steps runs two GEMMs on the hidden state (the update and reset
    gates', then the candidate's, after the reset gate: PyTorch exports
    ``linear_before_reset=1``) and a loop over the batch's rows between them, where its LSTM
    runs one; on the EPYC a GRU of hidden 128 at batch 16 took 1.6x the time per MAC of the
    LSTM of the same size (``UniDirectionalGru::Compute`` in ONNX Runtime's
    ``deep_cpu_gru.cc``)."""
    return _recurrent(GRU_STEP_CURVE, "gru", nn.GRU, 3, quick, grid)


def _recurrent(curve: str, family: str, layer: Callable[..., nn.Module], gates: int,
               quick: bool, grid: SweepGrid) -> list[OpSample]:
    """One-layer recurrent samples of ``layer`` (``gates`` weight blocks per step) on the grid
    :func:`_lstm` describes, its floor first."""
    if grid.lstm_max_macs <= 0:
        return []

    def make(d_in: int, hidden: int) -> nn.Module:
        return layer(d_in, hidden, batch_first=True).requires_grad_(False)

    out = [OpSample(curve, family, f"{family} floor", make(2, 2), (_r(1, 1, 2),),
                    is_floor=True)]
    hiddens = (64, 128, 192, 256, 384, 512, 768, 1024) if not quick else (128, 512)
    batches = (1, 4, 16, 64) if not quick else (1, 16)
    for hidden in hiddens:
        for d_in in ((hidden // 2, hidden) if not quick else (hidden,)):
            for b in batches:
                if gates * (d_in + hidden) * hidden * b * LSTM_STEPS > grid.lstm_max_macs:
                    continue
                out.append(OpSample(curve, family, f"{family} b{b} in{d_in} h{hidden} "
                                    f"s{LSTM_STEPS}", make(d_in, hidden),
                                    (_r(b, LSTM_STEPS, d_in),),
                                    short_inputs=(_r(b, LSTM_SHORT_STEPS, d_in),)))
    return out


def _sizes(quick: bool, grid: SweepGrid) -> list[int]:
    top = grid.max_size_exp + 1
    return [2**e for e in (range(8, top, 2) if not quick else range(8, top, 5))]


def _family(curve: str, family: str, make: Callable[[int], tuple[nn.Module, tuple[torch.Tensor, ...]]],
            sizes: list[int],
            floor: Callable[[int], tuple[nn.Module, tuple[torch.Tensor, ...]]] | None = None
            ) -> list[OpSample]:
    """A floor at 4 elements (``floor``'s op where given, else the family's own), then one
    sample per size."""
    out = [OpSample(curve, family, f"{family} floor", *(floor or make)(4), is_floor=True)]
    out += [OpSample(curve, family, f"{family} n{n}", *make(n)) for n in sizes]
    return out


def _mat(n: int) -> torch.Tensor:
    cols = 64 if n < 4096 else 256
    return _r(max(1, n // cols), min(n, cols))  # (rows, cols)


def _img(n: int) -> torch.Tensor:
    c = 16 if n < 2**16 else 64
    hw = max(2, int((max(n, 4 * c) // c) ** 0.5))
    return _r(1, c, hw, hw)  # (N, C, H, W)


def _seq(n: int) -> torch.Tensor:
    c = 16 if n < 2**16 else 64
    return _r(1, c, max(4, n // c))  # (N, C, L): a 1-d signal


# classes whose samples come from ops several-fold apart in speed (layer norm against batch
# norm; a 3x3 max pool with its indices against an average or a 1-d max pool): besides the
# class's curve of all of them, each op gets a curve of its own samples (``<class>@<op>``)
PER_OP_CLASSES = ("norm", "pool")
# classes whose samples' variants each get a curve of their own (``<class>:<variant>``) besides
# the class's curve of all of them: a convolution's backend, an attention's head dimension
VARIANT_CURVE_CLASSES = ("conv", "conv_grouped", "attention")


def _bytes_classes(quick: bool, grid: SweepGrid) -> list[OpSample]:
    sz = _sizes(quick, grid)
    fam = _family
    out: list[OpSample] = []
    out += fam("elementwise", "relu", lambda n: (_Fn(torch.relu), (_r(n),)), sz)
    out += fam("elementwise", "add", lambda n: (_Fn(torch.add), (_r(n), _r(n))), sz)
    out += fam("elementwise", "mul-scalar", lambda n: (_Fn(lambda t: t * 0.5), (_r(n),)), sz)
    out += fam("elementwise:inplace", "mul_", lambda n: (_Fn(lambda t: t.mul_(1.0)), (_r(n),)), sz)
    out += fam("elementwise:inplace", "relu_", lambda n: (_Fn(torch.relu_), (_r(n),)), sz)
    out += fam("elementwise:inplace", "add_", lambda n: (_Fn(lambda a, b: a.add_(b)),
                                                         (_r(n), _r(n))), sz)
    for name, fn in MATH_FAMILIES.items():  # floored at a plain ReLU (MATH_FAMILIES)
        out += fam(f"elementwise@{name}", name, lambda n, fn=fn: (_Fn(fn), (_r(n),)), sz,
                   floor=lambda n: (_Fn(torch.relu), (_r(n),)))
    out += fam("copy", "clone", lambda n: (_Fn(torch.clone), (_r(n),)), sz)
    out += fam("copy", "t-contiguous", lambda n: (_Fn(lambda t: t.t().contiguous()), (_mat(n),)),
               sz)
    out += fam("copy", "cat", lambda n: (_Fn(lambda t: torch.cat([t, t], 0)), (_mat(n),)), sz)
    out += fam("softmax", "softmax", lambda n: (_Fn(lambda t: torch.softmax(t, -1)), (_mat(n),)),
               sz)
    out += fam("reduction", "mean", lambda n: (_Fn(lambda t: t.mean(-1)), (_mat(n),)), sz)
    out += fam("norm", "layer_norm", lambda n: (_Fn(lambda t: F.layer_norm(t, (t.shape[-1],))),
                                                (_mat(n),)), sz)

    def bn(n: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        x = _img(n)
        return nn.BatchNorm2d(x.shape[1]).eval().requires_grad_(False), (x,)

    out += fam("norm", "batch_norm", bn, sz)
    out += fam("pool", "maxpool3s2", lambda n: (_Fn(lambda t: F.max_pool2d(t, 3, 2, 1)),
                                                (_img(n),)), sz)
    out += fam("pool", "adaptive_avg", lambda n: (_Fn(lambda t: F.adaptive_avg_pool2d(t, 1)),
                                                  (_img(n),)), sz)
    out += fam("pool", "maxpool1d", lambda n: (_Fn(lambda t: F.max_pool1d(t, 4)), (_seq(n),)),
               sz)

    def emb(n: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        e = 64 if n < 2**16 else 256
        vocab = max(8, min(n // e, 30522))
        return nn.Embedding(vocab, e).requires_grad_(False), \
            (torch.randint(0, vocab, (1, max(1, n // e // 4))),)

    out += fam("embedding", "embedding", emb, sz)
    return out


# ONNX Runtime's transposes on the paths its lowering tells apart
# (:mod:`ftmodel.frameworks.ort_transpose`), up to 2**22 elements (a 16 MB tensor; an
# element-wise one of 64 MB would take ~90 ms a call)
_TRANSPOSE_MAX_EXP = 22


def _heads(n: int) -> torch.Tensor:
    d = min(64, n)
    h = max(1, min(8, n // d))
    return _r(1, max(1, n // (h * d)), h, d)  # (N, S, heads, D)


def _quads(n: int) -> torch.Tensor:
    c = 16 if n < 2**16 else 64
    return _r(1, c, max(1, n // (4 * c)), 4)  # (N, C, L, 4)


def _transpose_samples(quick: bool, grid: SweepGrid) -> list[OpSample]:
    """ONNX Runtime's transposes on its block-copy path (an attention head split, ``(0, 2, 1, 3)`` of
    ``(N, S, heads, 64)``) and on its element-by-element path (``(0, 3, 2, 1)`` of
    ``(N, C, L, 4)``, as MobileViT unfolds its patches). Its MLAS path is the copy sweep's own
    ``t-contiguous`` family (a 2-D transpose)."""
    sz = [n for n in _sizes(quick, grid) if n <= 2**_TRANSPOSE_MAX_EXP]
    out = _family("copy", "transpose-heads",
                  lambda n: (_Fn(lambda t: t.permute(0, 2, 1, 3).contiguous()), (_heads(n),)), sz)
    out += _family("copy", "transpose-quads",
                   lambda n: (_Fn(lambda t: t.permute(0, 3, 2, 1).contiguous()), (_quads(n),)),
                   sz)
    return out


def _skip_norm(n: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    h = 96 if n < 2**16 else 384
    x = _r(1, max(1, n // h), h)  # (N, tokens, hidden)
    return (_Fn(lambda a, b, g, beta: F.layer_norm(a + b, (h,), g, beta), torch.ones(h),
                torch.zeros(h)), (x, _r(*x.shape)))


def ort_samples(quick: bool = False, grid: SweepGrid = CPU_GRID) -> dict[str, list[OpSample]]:
    """Samples only ONNX Runtime's sweep times (``FrameworkSweep.own_samples``), by curve:
    transposes on its block-copy and element-by-element paths (copy), a residual sum
    followed by a layer norm, which it fuses into one ``SkipLayerNormalization`` node (norm): a
    scalar loop per row, 3.5-11x a ``LayerNormalization`` of the same tensor on the EPYC; and
    1-d convolutions (conv), which it runs on its plain NCHW kernel; and GRU layers
    (``gemm@gru``, a per-step curve of their own: :func:`_gru`)."""
    sz = [n for n in _sizes(quick, grid) if n <= 2**_TRANSPOSE_MAX_EXP]
    return {"copy": _transpose_samples(quick, grid),
            "norm": _family("norm", "skip_layer_norm", _skip_norm, sz),
            "conv": conv1d_samples(quick, grid),
            GRU_STEP_CURVE: _gru(quick, grid)}


# the curves that ONNX Runtime's own samples (ort_samples) make and the shared sweep does not
ORT_ONLY_CURVES = (GRU_STEP_CURVE,)


# Transcendental elementwise ops, each on a curve of its own (``elementwise@<op>``), floored at a
# plain ReLU: a prediction charges every elementwise kernel one host cost, so an op's own
# per-call cost is its curve's (exact fp32 GELU runs oneDNN's eltwise primitive on every call:
# 17.8 us for 4 elements on the Intel Xeon, ReLU 4.4; docs/accuracy.md).
MATH_FAMILIES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": F.silu,
    "exp": torch.exp, "pow": lambda t: torch.pow(t, 3.0), "erf": torch.erf,
}

OP_SWEEP_CLASSES = ("gemm", "bmm", "attention", "conv", "conv_grouped", "elementwise",
                    "elementwise:inplace",
                    *(f"elementwise@{n}" for n in ("gelu", "tanh", "sigmoid", "silu", "exp", "pow",
                                                   "erf")), "copy", "softmax", "reduction",
                    "norm", "pool", "embedding", LSTM_STEP_CURVE)


def op_samples(quick: bool = False, grid: SweepGrid = CPU_GRID) -> dict[str, list[OpSample]]:
    """The sweep, grouped by curve key, in OP_SWEEP_CLASSES order (floors included); ``grid``:
    :data:`CPU_GRID` or, on a GPU, :data:`GPU_GRID`."""
    all_samples = (_gemm(quick, grid) + _bmm(quick, grid) + _attention(quick, grid)
                   + conv_samples(quick, False, grid) + conv_samples(quick, True, grid)
                   + _bytes_classes(quick, grid) + _lstm(quick, grid))
    grouped: dict[str, list[OpSample]] = {c: [] for c in OP_SWEEP_CLASSES}
    for s in all_samples:
        grouped[s.curve].append(s)
    return grouped


def named_sweeps(names: str, grid: SweepGrid = CPU_GRID) -> dict[str, list[OpSample]]:
    """The full sweep of each class in ``names`` (comma-separated, e.g. ``"gemm,conv"``), in
    the order given; an unknown name raises :class:`~ftmodel.errors.InvalidArgumentError`."""
    sweeps = op_samples(False, grid)
    classes = [c.strip() for c in names.split(",") if c.strip()]
    unknown = [c for c in classes if c not in sweeps]
    if unknown or not classes:
        raise InvalidArgumentError(f"unknown sweep class(es) {unknown or names!r}; choose from "
                                   f"{', '.join(sweeps)}")
    return {c: sweeps[c] for c in classes}
