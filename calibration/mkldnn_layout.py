"""TorchScript's oneDNN layout kernels: reorders into and out of oneDNN's blocked layout and
pointwise ops on blocked tensors, timed as aten runs them.

On a CPU, ``torch.jit.optimize_for_inference`` hands 2-d convolutions to oneDNN with prepacked
weights and keeps their activations in oneDNN's blocked layout between them: it inserts
``aten::to_mkldnn`` before a run of such convolutions, ``aten::to_dense`` after it, and the
pointwise ops in between (``relu_``, ``prim::MKLDNNHardSigmoid_``, ...) run on the blocked
tensors. Each of these is a oneDNN primitive (a reorder or an eltwise) created and executed per
call: a reorder of a few KiB takes 10-14 µs and a ReLU on a blocked tensor 6 µs where a dense
copy or ReLU of the same size takes under 1 µs (Intel Xeon, 2 threads). Priced as plain copies
and ReLUs, GhostNet's 125 reorders and 51 blocked pointwise ops at batch 1 came to 0.5 ms where
the profiler recorded 3.9 ms.

Curves (TorchScript's own, see :mod:`ftmodel.calibration.framework_ops`):

* ``torchscript/copy@to_mkldnn`` — a dense NCHW tensor into oneDNN's layout;
* ``torchscript/copy@to_dense`` — a convolution's blocked output back to a dense tensor;
* ``torchscript/elementwise:mkldnn_layout`` — an in-place ReLU on a convolution's blocked output (the
  lowering gives that variant to every pointwise kernel whose input is blocked, except a
  transcendental one, which keeps its own op's curve: GELU's math, not the layout, sets its time);
* ``torchscript/elementwise:mkldnn_ref`` — an in-place sigmoid on a convolution's blocked output
  whose channels do not fill oneDNN's last block, which oneDNN runs with its reference code
  (:func:`ftmodel.tracing.variants.blocked_eltwise_variant`), on tensors of 4 more channels
  than a multiple of 8 (:func:`ref_shapes`);
* ``torchscript/copy@to_dense:mkldnn_padded`` — the reorder back to a dense tensor of a
  convolution's output whose channels do not fill oneDNN's last block, which oneDNN runs with
  its generic reorder kernel (:func:`ftmodel.tracing.variants.padded_reorder_variant`), on
  tensors of 4 more channels than a multiple of 8 (:func:`padded_shapes`).

Each sample is the op on one tensor size, timed in eager PyTorch (the same aten kernel the
TorchScript interpreter calls), less its *floor*: the dense op on 4 elements (``clone`` for the
reorders, ``relu_`` for the pointwise op), whose dispatch TorchScript's host costs already
price. What remains is oneDNN's per-call work (primitive and memory descriptors) plus the data
movement, so the curve keeps the fixed part at small sizes. Operands in the blocked layout come
from a 1x1 oneDNN convolution, as in a model. Not measured: binary ops and pooling on blocked
tensors (they keep the shared curves).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ftmodel.frameworks.torchscript_graph import LAYOUT_CURVES
from ftmodel.hardware.profile import OpClassData
from ftmodel.measure import measure_interleaved

__all__ = ["LAYOUT_CURVES", "layout_shapes", "mkldnn_layout_curves", "padded_shapes",
           "ref_shapes"]

PREFIX = "torchscript/"
# each of the lowering's LAYOUT_CURVES (in its order: to_mkldnn, to_dense, the blocked
# pointwise op, the sigmoid on padded blocks, to_dense from padded blocks) -> (the op timed,
# the dense floor's op)
_OPS: dict[str, tuple[str, str]] = dict(zip(LAYOUT_CURVES, (
    ("to_mkldnn", "clone"), ("to_dense", "clone"), ("relu_", "relu_"),
    ("sigmoid_", "sigmoid_"), ("to_dense", "clone"))))


def layout_shapes(quick: bool) -> list[tuple[int, int, int, int]]:
    """NCHW sizes from 1 KiB to 51 MiB (quick: four of them)."""
    shapes = [(1, 16, 4, 4), (1, 32, 8, 8), (1, 64, 14, 14), (1, 128, 28, 28),
              (4, 128, 28, 28), (8, 256, 28, 28), (16, 256, 56, 56)]
    return shapes[::2] if quick else shapes


def ref_shapes(quick: bool) -> list[tuple[int, int, int, int]]:
    """NCHW sizes from 3 KiB to 853 KiB whose channels (4 more than a multiple of 8) leave
    oneDNN's last block part empty with AVX2's blocks of 8 and AVX-512's of 16 (quick: two)."""
    shapes = [(1, 12, 8, 8), (1, 36, 14, 14), (4, 68, 14, 14), (16, 68, 14, 14)]
    return shapes[::2] if quick else shapes


def padded_shapes(quick: bool) -> list[tuple[int, int, int, int]]:
    """NCHW sizes from 3 KiB to 20 MiB whose channels (4 more than a multiple of 8) leave
    oneDNN's last block part empty, for the reorder back to a dense tensor, whose generic kernel
    costs several times the blocked one's per byte beyond the caches (quick: three)."""
    shapes = [(1, 12, 8, 8), (1, 36, 14, 14), (4, 68, 14, 14), (16, 68, 28, 28),
              (16, 100, 56, 56)]
    return shapes[::2] if quick else shapes


# the curves timed on other sizes than layout_shapes: the sigmoid and the reorder back on
# partly filled blocks
_SHAPES = {LAYOUT_CURVES[3]: ref_shapes, LAYOUT_CURVES[4]: padded_shapes}


def _blocked(x: torch.Tensor) -> torch.Tensor:
    """``x`` in oneDNN's blocked layout as a convolution leaves it (a 1x1 identity conv)."""
    c = int(x.shape[1])
    w = torch.eye(c).reshape(c, c, 1, 1).to_mkldnn()
    out: torch.Tensor = torch.mkldnn_convolution(
        x.to_mkldnn(), w, None, [0, 0], [1, 1], [1, 1], 1)
    return out


def _fn(op: str, dense: torch.Tensor, blocked: torch.Tensor) -> Callable[[], object]:
    if op == "to_mkldnn":
        return dense.to_mkldnn
    if op == "to_dense":
        return blocked.to_dense
    if op == "clone":
        return dense.clone
    if op == "relu_":
        return lambda: torch.relu_(blocked)
    if op == "sigmoid_":
        return lambda: torch.sigmoid_(blocked)
    raise ValueError(f"unknown layout op {op!r}")


def mkldnn_layout_curves(device: str, quick: bool, *, rounds: int, round_s: float
                         ) -> tuple[dict[str, OpClassData], dict[str, list[dict[str, Any]]]]:
    """The curves of the lowering's ``LAYOUT_CURVES``, keyed ``torchscript/<curve>``, and their
    raw rows; nothing on a device other than the CPU (oneDNN's layout is a CPU one)."""
    if device != "cpu":
        return {}, {}
    torch.manual_seed(0)
    tiny = torch.randn(1, 1, 2, 2)
    # curve -> label -> bytes of the tensor (each op reads and writes it)
    sizes: dict[str, dict[str, float]] = {}
    fns: dict[tuple[str, str], Callable[[], object]] = {}
    # label -> (dense, blocked): one pair per shape, shared by the curves timed on it
    operands: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    with torch.no_grad():
        for curve, (op, floor_op) in _OPS.items():
            shapes = _SHAPES.get(curve, layout_shapes)(quick)
            labels = ["x".join(map(str, shape)) for shape in shapes]
            for label, shape in zip(labels, shapes):
                if label not in operands:
                    dense = torch.randn(*shape)
                    operands[label] = (dense, _blocked(dense))
            sizes[curve] = {label: float(operands[label][0].nbytes) for label in labels}
            fns[(curve, "floor")] = _fn(floor_op, tiny, tiny)
            for label in labels:
                fns[(curve, label)] = _fn(op, *operands[label])
        timed = measure_interleaved(fns, device=device, rounds=rounds, round_s=round_s)
    curves: dict[str, OpClassData] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    for curve in LAYOUT_CURVES:
        floor_s = timed[(curve, "floor")].time_s
        ms = {label: timed[(curve, label)] for label in sizes[curve]}
        curves[PREFIX + curve] = OpClassData("samples", tuple(
            (0.0, n, n, max(ms[label].time_s - floor_s, 1e-9))
            for label, n in sizes[curve].items()))
        raw[PREFIX + curve] = [{"label": label, "total_s": m.time_s, "floor_s": floor_s,
                                "spread": m.spread} for label, m in ms.items()]
    return curves, raw
