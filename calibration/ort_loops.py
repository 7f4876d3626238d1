"""ONNX Runtime's cost per inner call, a calibration stage of its own.

Three of ONNX Runtime's CPU kernels loop over many small calls where a model's shapes make
them: a ``Transpose`` on its MLAS path calls ``MlasTranspose`` once per index of the outer axes,
each call waking the thread pool (:func:`ftmodel.frameworks.ort_transpose.mlas_calls`), a
broadcasting binary op walks its output in spans, one call of its vectorised loop each
(:func:`ftmodel.frameworks.ort_broadcast.broadcast_spans`), and a batched ``MatMul`` of two
activations runs one MLAS GEMM per matrix. The op sweep's samples make one call, or a few
dozen large ones; EfficientViT's linear attention transposes 512 matrices of 16x16 per node,
adds ``eps`` to a tensor whose innermost axis has size 1, one span per element, and multiplies
hundreds of 16-row matrices a node.

Here all three are timed through ONNX Runtime
(:func:`ftmodel.calibration.framework_ops.framework_curve`: its runner, interleaved with a
floor, the node's share of the profiled session): transposes of 64 to 2,048 matrices of 16x16,
16x64 and 64x16 floats; an ``Add`` of a scalar to an ``(n, 1)`` tensor and a ``Div`` of
``(n, 16)`` by ``(n, 1)``, 1,024 to 65,536 spans; and ``MatMul`` of 64 to 2,048 pairs of
16x16, 64x16 and 16x64 by 17-column matrices. What each sample takes beyond the framework's
curve for its work (``onnxruntime/copy:transpose_mlas``, ``onnxruntime/elementwise``,
``onnxruntime/bmm``), the median at each count, is that curve's per-call companion
(``<curve>:per_plane``, :data:`ftmodel.estimate.curves.PER_PLANE`), which prices each kernel's
``Kernel.planes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ftmodel.calibration.framework_ops import framework_curve
from ftmodel.calibration.op_sample import OpSample, random_tensor
from ftmodel.calibration.planes import per_plane_curve
from ftmodel.estimate.curves import PER_PLANE
from ftmodel.hardware.profile import DeviceProfile, OpClassData

__all__ = ["LOOP_CURVES", "loop_samples", "ort_loop_curves"]

FRAMEWORK = "onnxruntime"
# the curve (under ``onnxruntime/``) whose per-call companion each family gives, by family
LOOP_CURVES = {"transpose calls": "copy:transpose_mlas", "broadcast spans": "elementwise",
               "batched matmuls": "bmm"}


class _Transposed(nn.Module):
    """The last two axes swapped, made contiguous (one ``Transpose`` node)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()


class _PlusScalar(nn.Module):
    """``x + 1.5`` (one ``Add`` node with a scalar initializer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1.5


class _Multiplied(nn.Module):
    """``a @ b`` (one ``MatMul`` node of two activations)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


class _Divided(nn.Module):
    """``a / b`` (one ``Div`` node)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a / b


def loop_samples(quick: bool = False) -> dict[str, list[OpSample]]:
    """The samples of each family of :data:`LOOP_CURVES`, a floor first: transposes of
    64-2,048 matrices (16x16, 16x64, 64x16 floats), broadcasts of 1,024-65,536 spans (a
    scalar added to ``(n, 1)``, ``(n, 16)`` divided by ``(n, 1)``) and batched matrix
    products of 64-2,048 pairs (16x16, 64x16, 16x64 by 17 columns); fewer counts when
    ``quick``."""
    out: dict[str, list[OpSample]] = {}
    fam = "transpose calls"
    rows = [OpSample("copy", fam, f"{fam} floor", _Transposed(), (random_tensor(1, 2, 2),),
                     is_floor=True)]
    for calls in ((64, 256, 1024) if quick else (64, 256, 1024, 2048)):
        for r, c in ((16, 16), (16, 64), (64, 16)):
            rows.append(OpSample("copy", fam, f"{fam} {calls}x{r}x{c}", _Transposed(),
                                 (random_tensor(calls, r, c),)))
    out[fam] = rows
    fam = "broadcast spans"
    rows = [OpSample("elementwise", fam, f"{fam} floor", _PlusScalar(), (random_tensor(4),),
                     is_floor=True)]
    for spans in ((1024, 4096, 16384) if quick else (1024, 4096, 16384, 65536)):
        rows.append(OpSample("elementwise", fam, f"{fam} {spans}x1 + scalar", _PlusScalar(),
                             (random_tensor(spans, 1),)))
        rows.append(OpSample("elementwise", fam, f"{fam} {spans}x16 / {spans}x1", _Divided(),
                             (random_tensor(spans, 16), random_tensor(spans, 1).abs() + 1)))
    out[fam] = rows
    fam = "batched matmuls"
    rows = [OpSample("bmm", fam, f"{fam} floor", _Multiplied(),
                     (random_tensor(1, 2, 2), random_tensor(1, 2, 2)), is_floor=True)]
    for count in ((128, 512, 2048) if quick else (64, 128, 512, 2048)):
        for m, k in ((16, 16), (64, 16), (16, 64)):
            rows.append(OpSample("bmm", fam, f"{fam} {count}x{m}x{k}x17", _Multiplied(),
                                 (random_tensor(count, m, k), random_tensor(count, k, 17))))
    out[fam] = rows
    return out


def ort_loop_curves(shared: DeviceProfile, own: Mapping[str, OpClassData], device: str,
                    quick: bool, *, rounds: int, round_s: float
                    ) -> tuple[dict[str, OpClassData], dict[str, list[dict[str, Any]]]]:
    """The per-call companions ONNX Runtime's samples give (see the module docstring), keyed
    ``onnxruntime/<curve>:per_plane``, and their raw rows keyed by the family. ``shared``: the
    profile calibrated so far, which prices the other kernels of each sample's lowering;
    ``own``: the framework's own curves, whose :data:`LOOP_CURVES` price each sample's bytes
    (a family whose curve is missing gives no companion)."""
    curves: dict[str, OpClassData] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    for fam, samples in loop_samples(quick).items():
        data, rows, _ = framework_curve(FRAMEWORK, samples, device, shared, rounds=rounds,
                                        round_s=round_s)
        raw[f"{FRAMEWORK}/{fam}"] = rows
        base = own.get(f"{FRAMEWORK}/{LOOP_CURVES[fam]}")
        if data is None or base is None:
            continue
        counts = [int(r.get("planes", 0)) for r in rows if "total_s" in r]
        op_class = LOOP_CURVES[fam].split(":")[0]
        curve = per_plane_curve(base, data, counts, op_class)
        if curve is not None:
            curves[f"{FRAMEWORK}/{LOOP_CURVES[fam]}{PER_PLANE}"] = curve
    return curves, raw
