"""ONNX Runtime's broadcast spans (ftmodel.frameworks.ort_broadcast) and their pricing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ftmodel.frameworks.ort_broadcast import broadcast_spans
from tests.conftest import lower_with_onnxruntime


@pytest.mark.parametrize("a,b,spans", [
    ((16, 16, 64, 1), (), 16384),  # innermost axis 1 and a scalar: one span per element
    ((16384,), (), 1),  # a scalar over a flat tensor: one span
    ((16, 16, 64), (), 1),
    ((16, 16, 64, 16), (16, 16, 64, 1), 16384),  # a row divided by its last element: per row
    ((16, 16, 64, 1), (16, 16, 64, 16), 16384),  # either input's order
    ((16, 197, 768), (768,), 3152),  # a bias over tokens: one span per token
    ((16, 6, 64, 64), (16, 1, 1, 64), 6144),  # an attention mask
    ((16, 6, 64, 64), (16, 1, 64, 1), 6144),
    ((16, 64, 32, 32), (64, 1, 1), 1024),  # a per-channel scale: one span per plane
    ((4, 5), (4, 5), 1),  # equal shapes: one span
    ((1, 1), (1, 1), 1),
    ((0, 4), (4,), 0),  # nothing to do
])
def test_broadcast_spans_follow_ort(a: tuple[int, ...], b: tuple[int, ...], spans: int) -> None:
    assert broadcast_spans(a, b) == spans


def _reference_spans(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Spans counted the long way: a new span wherever, walking the output in order, either
    input's next element is not the one after its previous (or, for an input that stays,
    the same one)."""
    out = torch.broadcast_shapes(a, b)
    ia = torch.arange(int(torch.tensor(a).prod()) if a else 1).reshape(a).expand(out).flatten()
    ib = torch.arange(int(torch.tensor(b).prod()) if b else 1).reshape(b).expand(out).flatten()
    if ia.numel() <= 1:
        return ia.numel()
    da, db = ia[1:] - ia[:-1], ib[1:] - ib[:-1]
    # ORT's span: a run over which each input advances by one, or one input stays put
    same = ((da == 1) & (db == 1)) | ((da == 0) & (db == 1)) | ((da == 1) & (db == 0))
    return int((~same).sum()) + 1


@pytest.mark.parametrize("a,b", [((3, 1, 5), (4, 1)), ((2, 3, 4), (3, 1)), ((5, 1), (5, 7))])
def test_broadcast_spans_never_exceed_the_runs_of_contiguous_reads(a: tuple[int, ...],
                                                                   b: tuple[int, ...]) -> None:
    # ORT's spans are at least as many as the runs both inputs read contiguously (it cuts a
    # run where either input's walk changes, and sometimes earlier), and at most the output
    numel = int(torch.broadcast_shapes(a, b).numel())
    assert _reference_spans(a, b) <= broadcast_spans(a, b) <= numel


class _Normalised(nn.Module):
    """EfficientViT's linear attention tail: ``out[..., :-1] / (out[..., -1:] + eps)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2.0
        return y[..., :-1] / (y[..., -1:] + 1e-5)


@pytest.mark.requires_onnxruntime
def test_onnx_lowering_counts_the_spans_of_broadcasting_ops() -> None:
    x = torch.randn(4, 8, 32, 17)
    prog = lower_with_onnxruntime(_Normalised().eval(), (x,), 4)
    planes = {k.members[0]: k.planes for k in prog.kernels}
    assert planes["Add"] == 4 * 8 * 32  # (4, 8, 32, 1) + eps: one span per element
    assert planes["Div"] == 4 * 8 * 32  # (4, 8, 32, 16) / (4, 8, 32, 1): one span per row
    assert planes["Mul"] == 0  # a scalar over the whole tensor: one span, not counted
