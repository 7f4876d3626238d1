"""ONNX Runtime's transposes by code path: each measured alone against its prediction.

    python benchmarks/ort_transposes.py --profile benchmarks/results/cpu-epyc/cpu-profile-68.json \\
        --out benchmarks/results/cpu-epyc/ort-transposes.md

ONNX Runtime's CPU ``Transpose`` copies blocks, runs MLAS 2-D transposes or walks the tensor
element by element, by permutation and shape (:mod:`ftmodel.frameworks.ort_transpose`). Each
case below is a transpose of a shape and permutation that a model of the corpus's tuning half,
or timm's MobileViT-XS (outside the corpus), runs at batch 1 or 16 under ONNX Runtime; none is
the calibration's own sample shape. Each is exported as a one-op model (``x.permute(...)``
between two cheap pointwise ops that keep ONNX Runtime from folding it into the graph's
inputs), run in a session of ``--threads`` threads, and timed in interleaved rounds
(:func:`ftmodel.measure.measure_interleaved`, scaled to the profile's nominal speed as the
calibration's samples are) beside the same model without the transpose; the difference is the
transpose's time. Its prediction is the profile's device time for the lowered ``Transpose``
kernel (:meth:`ftmodel.estimate.kernels.DeviceModel.kernel_times_s`, the ONNX Runtime
curves), beside what the profile's plain ONNX Runtime copy curve gives it (the price before
transposes had paths). Prints a table; ``--out`` writes it as markdown.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ort_alone import emit, session, setup, time_sessions  # noqa: E402

from ftmodel.estimate.kernels import DeviceModel  # noqa: E402
from ftmodel.program import Kernel  # noqa: E402

# (shape, permutation, where it comes from)
CASES: tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...] = (
    ((16, 64, 8, 64), (0, 2, 1, 3), "GPT-2 heads, b16"),
    ((1, 64, 8, 64), (0, 2, 1, 3), "GPT-2 heads, b1"),
    ((16, 96, 6, 64), (0, 2, 1, 3), "DistilBERT heads, b16"),
    ((16, 49, 4, 32), (0, 2, 1, 3), "LeViT heads, b16"),
    ((16, 4, 7, 4, 7, 96), (0, 1, 3, 2, 4, 5), "Swin windows, b16"),
    ((1, 4, 7, 4, 7, 96), (0, 1, 3, 2, 4, 5), "Swin windows, b1"),
    ((64, 64, 1, 4, 24), (2, 0, 3, 1, 4), "MobileViT-XS, b16"),
    ((64, 4, 64, 24), (0, 2, 1, 3), "MobileViT-XS, b16"),
    ((16, 64, 256), (1, 0, 2), "LSTM LM input, b16"),
    ((12288, 2, 8, 2), (0, 2, 1, 3), "MobileViT-XS patches, b16"),
    ((16, 49, 4, 16), (0, 2, 1, 3), "LeViT keys, b16"),
    ((16, 64, 8, 64), (0, 2, 3, 1), "GPT-2 keys, b16"),
    ((1, 64, 8, 64), (0, 2, 3, 1), "GPT-2 keys, b1"),
    ((256, 49, 3, 32), (0, 2, 3, 1), "Swin keys, b16"),
    ((16, 8, 8, 192), (0, 3, 1, 2), "ConvNeXt NHWC->NCHW, b16"),
    ((16, 192, 8, 8), (0, 2, 3, 1), "ConvNeXt NCHW->NHWC, b16"),
    ((1, 192, 8, 8), (0, 2, 3, 1), "ConvNeXt NCHW->NHWC, b1"),
    ((16, 128, 49), (0, 2, 1), "LeViT tokens, b16"),
    ((64, 64, 4, 24), (0, 2, 3, 1), "MobileViT-XS, b16"),
    ((16, 96, 64, 4), (0, 3, 2, 1), "MobileViT-XS unfold, b16"),
    ((1, 96, 64, 4), (0, 3, 2, 1), "MobileViT-XS unfold, b1"),
    ((4, 96, 64, 4), (0, 3, 2, 1), "MobileViT-XS unfold, b4"),
)


class _Around(nn.Module):
    """``x * 2``, the permutation (``perm`` empty: none), ``+ 1``: the transpose sits between
    two nodes, as in a model."""

    def __init__(self, perm: tuple[int, ...]) -> None:
        super().__init__()
        self.perm = perm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2.0
        if self.perm:
            y = y.permute(*self.perm).contiguous()
        return y + 1.0


def main() -> None:
    args, profile, model = setup(__doc__ or "", rounds=15)
    plain = DeviceModel(dataclasses.replace(profile.device, op_classes={
        k: v for k, v in profile.device.op_classes.items()
        if not k.startswith("onnxruntime/copy:transpose")}), "fp32", "onnxruntime")
    fns: dict[tuple[str, int], Callable[[], object]] = {}
    kernels: dict[int, Kernel] = {}
    for i, (shape, perm, _) in enumerate(CASES):
        x = torch.randn(*shape)
        fns[("t", i)], ks = session(_Around(perm).eval(), (x,), shape[0])
        kernels[i] = next(k for k in ks if k.members[0] == "Transpose")
        fns[("base", i)], _ = session(_Around(()).eval(), (x,), shape[0])
    timed = time_sessions(fns, profile, args.rounds)
    lines = ["| shape | permutation | from | path | MB moved | measured us | predicted us | "
             "ratio | one copy curve us | ratio | spread |", "|" + "---|" * 11]
    ratios: dict[str, list[tuple[float, float]]] = {}
    for i, (shape, perm, where) in enumerate(CASES):
        k = kernels[i]
        meas = max(timed[("t", i)].time_s - timed[("base", i)].time_s, 1e-9)
        pred = float(model.kernel_times_s([k])[0])
        old = float(plain.kernel_times_s([k])[0])
        spread = max(timed[("t", i)].spread, timed[("base", i)].spread)
        ratios.setdefault(k.variant or "plain copy", []).append((pred / meas, old / meas))
        lines.append(f"| `{list(shape)}` | `{perm}` | {where} | {k.variant or 'plain copy'} | "
                     f"{k.bytes_total / 1e6:.3f} | {meas * 1e6:.1f} | {pred * 1e6:.1f} | "
                     f"{pred / meas:.2f} | {old * 1e6:.1f} | {old / meas:.2f} | "
                     f"{spread * 100:.0f}% |")
    lines += ["", "| path | cases | median ratio | median ratio on one copy curve |",
              "|---|---|---|---|"]
    for path, rs in sorted(ratios.items()):
        lines.append(f"| {path} | {len(rs)} | {statistics.median(r for r, _ in rs):.2f} | "
                     f"{statistics.median(o for _, o in rs):.2f} |")
    emit("ort_transposes.py", args, lines)


if __name__ == "__main__":
    main()
