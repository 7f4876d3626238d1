"""ONNX Runtime's layer norms, each measured alone against its prediction.

    python benchmarks/ort_norms.py --profile benchmarks/results/cpu-epyc/cpu-profile-69.json \\
        --out benchmarks/results/cpu-epyc/ort-norms.md

ONNX Runtime fuses a residual sum and the layer norm after it into one
``SkipLayerNormalization`` node (``onnxruntime/contrib_ops/cpu/skip_layer_norm.cc``: a scalar
loop per row), which runs several times slower than its ``LayerNormalization`` of the same
tensor. For (tokens, hidden) shapes of the corpus's transformers and MobileViT-XS (outside the
corpus) at batch 1 and 16, three one-block models are exported: ``x * 2`` then a layer norm, a
residual sum and a layer norm (fused), or a residual sum alone, then ``+ 1``. Each runs in a
session of ``--threads`` threads and is timed in interleaved rounds
(:func:`ftmodel.measure.measure_interleaved`, scaled to the profile's nominal speed) beside the
same model without the block; the difference is the block's time, its prediction the
profile's device time of the block's kernels (ONNX Runtime's curves). Prints a table; ``--out``
writes it as markdown.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ort_alone import emit, session, setup, time_sessions  # noqa: E402

from ftmodel.program import Kernel  # noqa: E402

# (tokens, hidden, where it comes from)
SHAPES: tuple[tuple[int, int, str], ...] = (
    (64, 512, "GPT-2, b1"), (1024, 512, "GPT-2, b16"), (96, 384, "DistilBERT, b1"),
    (1536, 384, "DistilBERT, b16"), (64, 256, "T5 encoder, b1"), (1024, 256, "T5 encoder, b16"),
    (4096, 96, "MobileViT-XS, b16"), (1024, 120, "MobileViT-XS, b16"),
    (196, 192, "LeViT-like, b1"), (4096, 768, "a 768-wide encoder, b16"),
)
BLOCKS = ("layer norm", "residual + layer norm", "residual sum")


class _Block(nn.Module):
    """``x * 2``, the block (``kind`` one of :data:`BLOCKS`, or "" for none), ``+ 1``."""

    def __init__(self, kind: str, hidden: int) -> None:
        super().__init__()
        self.kind = kind
        self.gamma = nn.Parameter(torch.ones(hidden))
        self.beta = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        y = x * 2.0
        if self.kind == "residual sum":
            y = y + skip
        elif self.kind:
            if self.kind.startswith("residual"):
                y = y + skip
            y = F.layer_norm(y, (y.shape[-1],), self.gamma, self.beta)
        return y + 1.0


def main() -> None:
    args, profile, model = setup(__doc__ or "", rounds=11)
    fns: dict[tuple[int, str], Callable[[], object]] = {}
    kernels: dict[tuple[int, str], list[Kernel]] = {}
    for i, (tokens, hidden, _) in enumerate(SHAPES):
        inputs = (torch.randn(1, tokens, hidden), torch.randn(1, tokens, hidden))
        for kind in ("",) + BLOCKS:
            fns[(i, kind)], kernels[(i, kind)] = session(_Block(kind, hidden).eval(), inputs, 1)
    timed = time_sessions(fns, profile, args.rounds)
    lines = ["| tokens x hidden | from | block | nodes | measured us | predicted us | ratio |",
             "|---|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {}
    for i, (tokens, hidden, where) in enumerate(SHAPES):
        base_s = timed[(i, "")].time_s
        base_pred_s = float(model.kernel_times_s(kernels[(i, "")]).sum())
        for kind in BLOCKS:
            ks = kernels[(i, kind)]
            meas = max(timed[(i, kind)].time_s - base_s, 1e-9)
            pred = float(model.kernel_times_s(ks).sum()) - base_pred_s
            nodes = ", ".join(k.members[0].split("::")[-1] for k in ks[1:-1])
            ratios.setdefault(kind, []).append(pred / meas)
            lines.append(f"| {tokens} x {hidden} | {where} | {kind} | {nodes} | "
                         f"{meas * 1e6:.1f} | {pred * 1e6:.1f} | {pred / meas:.2f} |")
    lines += ["", "| block | cases | median ratio | range |", "|---|---|---|---|"]
    for kind, rs in ratios.items():
        lines.append(f"| {kind} | {len(rs)} | {statistics.median(rs):.2f} | "
                     f"{min(rs):.2f}-{max(rs):.2f} |")
    emit("ort_norms.py", args, lines)


if __name__ == "__main__":
    main()
