"""ONNX Runtime's batched MatMul counts its matrices (ftmodel.frameworks.onnx_graph)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import lower_with_onnxruntime


class _LinearAttention(nn.Module):
    """A linear projection, then each head's (N, 16) queries times its (16, 17) summary."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return torch.matmul(self.proj(q), kv)


@pytest.mark.requires_onnxruntime
def test_a_batched_matmul_counts_one_gemm_per_matrix() -> None:
    q, kv = torch.randn(2, 6, 64, 16), torch.randn(2, 6, 16, 17)
    prog = lower_with_onnxruntime(_LinearAttention().eval(), (q, kv), 2)
    by_class = {k.op_class: k for k in prog.kernels if k.op_class in ("gemm", "bmm")}
    assert by_class["bmm"].planes == 2 * 6  # (2, 6, 64, 16) @ (2, 6, 16, 17): 12 matrices
    assert by_class["bmm"].macs == 2 * 6 * 64 * 16 * 17
    assert by_class["gemm"].planes == 0  # a weight: one GEMM over the flattened batch
