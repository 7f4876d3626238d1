"""ONNX Runtime's Transpose code paths (ftmodel.frameworks.ort_transpose) and their pricing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ftmodel.frameworks.ort_transpose import (BLOCKS, ELEMENTWISE, MLAS, mlas_calls, moved_axis,
                                             transpose_variant)

from tests.conftest import lower_with_onnxruntime


@pytest.mark.parametrize("perm,expected", [
    ((0, 3, 1, 2, 4), (3, 1)),  # ORT's own example: axis 3 moves out to 1
    ((0, 2, 3, 1, 4), (1, 3)),  # ... and axis 1 moves in to 3
    ((0, 2, 1, 3), (2, 1)),  # two neighbours swap: one of them moved
    ((1, 0), (1, 0)),
    ((0, 3, 2, 1), None),
    ((2, 0, 3, 1), None),
    ((0, 1, 2), None),  # identity: nothing moves
])
def test_moved_axis_follows_ort(perm: tuple[int, ...], expected: tuple[int, int] | None) -> None:
    assert moved_axis(perm) == expected


@pytest.mark.parametrize("perm,dims,expected", [
    ((2, 0, 3, 1), (1, 1, 1024, 4096), ""),  # ORT's example of a transpose that is a reshape
    ((0, 2, 1, 3), (16, 64, 8, 64), BLOCKS),  # attention heads: rows of 64 floats move
    ((0, 1, 3, 2, 4, 5), (16, 4, 7, 4, 7, 96), BLOCKS),  # Swin's window partition
    ((2, 0, 3, 1, 4), (64, 64, 1, 4, 24), BLOCKS),  # innermost axis kept, several moved
    ((0, 2, 3, 1), (16, 64, 8, 64), MLAS),  # keys transposed: single floats move
    ((0, 3, 1, 2), (16, 8, 8, 192), MLAS),  # NHWC -> NCHW
    ((1, 0), (64, 256), MLAS),
    ((0, 3, 2, 1), (16, 96, 64, 4), ELEMENTWISE),  # MobileViT's patch unfolding
    ((0, 1), (3, 4, 5), ""),  # a permutation that does not fit the shape
])
def test_transpose_variant_by_code_path(perm: tuple[int, ...], dims: tuple[int, ...],
                                        expected: str) -> None:
    assert transpose_variant(perm, dims) == expected


class _Permute(nn.Module):
    def __init__(self, *perm: int) -> None:
        super().__init__()
        self.perm = perm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2.0).permute(*self.perm).contiguous() + 1.0


@pytest.mark.requires_onnxruntime
@pytest.mark.parametrize("perm,expected", [((0, 3, 2, 1), ELEMENTWISE), ((0, 2, 1, 3), BLOCKS)])
def test_onnx_lowering_gives_transposes_their_path(perm: tuple[int, ...], expected: str) -> None:
    model = _Permute(*perm).eval()
    x = torch.randn(2, 8, 6, 4)
    prog = lower_with_onnxruntime(model, (x,), 2)
    transposes = [k for k in prog.kernels if k.members[0] == "Transpose"]
    assert [k.variant for k in transposes] == [expected]
    assert transposes[0].op_class == "copy"


@pytest.mark.parametrize("perm,dims,calls", [
    ((0, 1, 3, 2), (16, 32, 16, 16), 512),  # EfficientViT's attention: one call per (image, head)
    ((0, 2, 3, 1), (16, 64, 8, 64), 16),  # axis 1 moves in to 3: one call per image
    ((0, 3, 1, 2), (16, 8, 8, 192), 16),  # axis 3 moves out to 1: one call per image
    ((1, 0), (64, 256), 1),  # one 2-D transpose
    ((0, 2, 1, 3), (16, 64, 8, 64), 0),  # a block copy: no MLAS call
    ((0, 3, 2, 1), (16, 96, 64, 4), 0),  # element by element
])
def test_mlas_calls_count_one_call_per_outer_index(perm: tuple[int, ...], dims: tuple[int, ...],
                                                   calls: int) -> None:
    assert mlas_calls(perm, dims) == calls


class _KeysTransposed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2.0).transpose(-1, -2).contiguous() + 1.0


@pytest.mark.requires_onnxruntime
def test_onnx_lowering_counts_a_transposes_mlas_calls() -> None:
    x = torch.randn(4, 6, 16, 8)
    prog = lower_with_onnxruntime(_KeysTransposed().eval(), (x,), 4)
    transposes = [k for k in prog.kernels if k.members[0] == "Transpose"]
    assert [(k.variant, k.planes) for k in transposes] == [(MLAS, 24)]
