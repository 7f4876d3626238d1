"""Eager launch counts of ``trace`` on tiny hand-built modules.

Expected counts are derived from first principles, written as a formula in a comment: views
(view, t, transpose, permute, expand, slice, split, ...) and uninitialised allocations (empty,
_unsafe_view, detach) launch 0 kernels; every other aten op that reaches the dispatcher launches
1. Each expected count is also checked against ``eager_launches``: the same rule applied to the
ops that a REAL eager forward pass (CPU, eval, no_grad) dispatches, so a wrong first-principles
count is caught as well as a wrong trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torchvision
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ftmodel.tracing.dispatch import trace

# aten ops that launch no kernel although their schema does not mark them as views
_NO_KERNEL = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided",
              "_unsafe_view", "detach", "alias", "lift_fresh", "_local_scalar_dense"}


class _EagerOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.launching: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name.split("::")[-1]
        if not func.is_view and name not in _NO_KERNEL:
            self.launching.append(str(func))
        return func(*args, **(kwargs or {}))


def eager_launches(model: nn.Module, args: tuple[Any, ...]) -> int:
    """Kernels a real eager CPU forward pass launches: its non-view, non-allocation aten ops."""
    mode = _EagerOps()
    with torch.no_grad(), mode:
        model.eval()(*args)
    return len(mode.launching)


@contextlib.contextmanager
def mha_fastpath(enabled: bool) -> Iterator[None]:
    old = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(old)


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


class LinearResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x) + x)


class LinearOnTransposed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (A, B, 8)
        return self.fc(x.transpose(0, 1))  # (B, A, 4), input not contiguous


class SelfAttention(nn.Module):
    """nn.MultiheadAttention called as self-attention inside forward (q is k is v)."""

    def __init__(self, embed: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(embed, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, E)
        return self.mha(x, x, x, need_weights=False)[0]


def _views(x: torch.Tensor) -> Any:  # x: (2, 8)
    y = x.view(2, 4, 2).permute(2, 0, 1).transpose(0, 1)  # (2, 2, 4)
    return (y, x.reshape(16), x.flatten(), x.unsqueeze(0), x[:, 1:3], x.t(), x.mT,
            x.split(4, dim=1), x.chunk(2, dim=1), x.unbind(0), x[:1].expand(5, 8),
            x.contiguous())  # already contiguous: no op at all


def _linear_relu_stack(n_layers: int) -> nn.Module:
    return nn.Sequential(*[m for _ in range(n_layers) for m in (nn.Linear(8, 8), nn.ReLU())])


CASES = [
    # t (view, 0) + addmm (bias + matmul in one kernel, 1) = 1
    pytest.param(lambda: nn.Linear(8, 4), (2, 8), 1, id="linear"),
    # t (0) + mm (1) = 1
    pytest.param(lambda: nn.Linear(8, 4, bias=False), (2, 8), 1, id="linear-no-bias"),
    # contiguous 3-D input is flattened: view (0) + t (0) + addmm (1) + view (0) = 1
    pytest.param(lambda: nn.Linear(8, 4), (2, 5, 8), 1, id="linear-3d"),
    # L x (addmm + relu) = 2L
    pytest.param(lambda: _linear_relu_stack(1), (2, 8), 2 * 1, id="linear-relu-x1"),
    pytest.param(lambda: _linear_relu_stack(3), (2, 8), 2 * 3, id="linear-relu-x3"),
    pytest.param(lambda: _linear_relu_stack(8), (2, 8), 2 * 8, id="linear-relu-x8"),
    # convolution (1) + [empty (0) + native_batch_norm (1)] + relu (1) = 3
    pytest.param(lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
                                       nn.ReLU()), (1, 3, 8, 8), 3, id="conv-bn-relu"),
    # addmm (1) + add (1) + relu (1) = 3
    pytest.param(LinearResidual, (2, 8), 3, id="linear-residual"),
    # torchvision BasicBlock, no downsample: 2 x (conv + bn) + relu_ + add_ + relu_ = 2*2 + 3 = 7
    pytest.param(lambda: torchvision.models.resnet.BasicBlock(8, 8), (1, 8, 6, 6), 7,
                 id="basic-block"),
    # native_layer_norm (1) = 1, whatever the leading dims
    pytest.param(lambda: nn.LayerNorm(8), (2, 5, 8), 1, id="layernorm"),
    # views only; .contiguous() of a contiguous tensor dispatches nothing = 0
    pytest.param(lambda: Fn(_views), (2, 8), 0, id="views"),
    # t (0) + clone (1) = 1
    pytest.param(lambda: Fn(lambda x: x.t().contiguous()), (2, 8), 1, id="contiguous-copy"),
    # addmm + gelu + addmm = 3; Dropout in eval dispatches nothing
    pytest.param(lambda: nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Dropout(0.1),
                                       nn.Linear(32, 8)), (2, 8), 3, id="mlp-gelu"),
    # resnet18: 20 conv + 20 bn + 17 relu_ + 8 add_ + maxpool + mean (adaptive avgpool to 1x1)
    #           + addmm = 20 + 20 + 17 + 8 + 1 + 1 + 1 = 68
    pytest.param(lambda: torchvision.models.resnet18(weights=None), (1, 3, 64, 64), 68,
                 id="resnet18"),
]


@pytest.mark.parametrize("factory,shape,expected", CASES)
def test_eager_launch_count(factory: Callable[[], nn.Module], shape: tuple[int, ...],
                            expected: int) -> None:
    torch.manual_seed(0)
    model = factory()
    x = torch.randn(shape)
    tr = trace(model, x)
    assert tr.fake
    assert tr.n_launches == expected, tr.by_operator()
    assert eager_launches(model, (x,)) == expected


def test_linear_relu_stack_module_calls() -> None:
    # the Sequential itself + 2 children per layer = 2L + 1
    assert trace(_linear_relu_stack(3), torch.randn(2, 8)).n_module_calls == 2 * 3 + 1


def test_views_are_recorded_with_zero_launches() -> None:
    tr = trace(Fn(_views), torch.randn(2, 8))
    assert tr.n_ops > 0 and tr.n_views == tr.n_ops
    assert all(r.launches == 0 and r.bytes_total == 0 for r in tr.records)


# ---- nn.MultiheadAttention ------------------------------------------------------------------
B, S, E, H = 2, 5, 16, 4


def test_mha_fastpath_is_one_fused_op() -> None:
    # eval + no_grad + self-attention: eager runs _native_multi_head_attention = 1 aten op, with
    # MACs = in-projections 3*B*S*E^2 + out-projection B*S*E^2 + Q.K^T and P.V 2*B*S^2*E
    model, x = SelfAttention(E, H), torch.randn(B, S, E)
    with mha_fastpath(True):
        tr = trace(model, x)
        assert eager_launches(model, (x,)) == 1
    assert tr.n_launches == 1
    assert tr.total_macs == 4 * B * S * E * E + 2 * B * S * S * E


def test_mha_slow_path_launches_without_grad_params() -> None:
    # Fast path off, parameters not requiring grad. The (B, S, E) input is transposed to
    # (S, B, E), so the packed in-projection is a matmul of a non-contiguous 3-D tensor that
    # matmul does not fold: bmm (1) + bias add (1); .contiguous() after unflatten: clone (1);
    # SDPA (1); out-projection on the flattened contiguous output: addmm (1). Total 5.
    model, x = SelfAttention(E, H).requires_grad_(False), torch.randn(B, S, E)
    with mha_fastpath(False):
        tr = trace(model, x)
        assert eager_launches(model, (x,)) == 5
    assert tr.n_launches == 5
    assert tr.total_macs == 4 * B * S * E * E + 2 * B * S * S * E


def test_mha_slow_path_launches_with_grad_params() -> None:
    # As above but with ordinary parameters (requires_grad=True, the default). Eager's matmul
    # folds the non-contiguous 3-D input: clone (1) + mm (1) + bias add (1); clone (1);
    # SDPA (1); addmm (1). Total 6.
    model, x = SelfAttention(E, H), torch.randn(B, S, E)
    with mha_fastpath(False):
        assert eager_launches(model, (x,)) == 6
        tr = trace(model, x)
    assert tr.n_launches == 6


def test_linear_on_transposed_input_launches() -> None:
    # transpose (0) + t (0) + clone (1) + _unsafe_view (0) + mm (1) + _unsafe_view (0) + add (1)
    model, x = LinearOnTransposed(), torch.randn(3, 5, 8)
    assert eager_launches(model, (x,)) == 3
    assert trace(model, x).n_launches == 3


def test_mha_called_with_same_tensor_three_times() -> None:
    # top-level self-attention call, fast path on: _native_multi_head_attention = 1
    mha, x = nn.MultiheadAttention(E, H, batch_first=True), torch.randn(B, S, E)
    with mha_fastpath(True):
        assert eager_launches(mha, (x, x, x)) == 1
        tr = trace(mha, (x, x, x))
    assert tr.n_launches == 1


# ---- ops that are views in effect but not flagged as views by their schema -------------------

def test_unsafe_split_launches_nothing() -> None:
    tr = trace(Fn(lambda x: x.unsafe_chunk(2, dim=1)), torch.randn(2, 8))
    assert tr.n_launches == 0  # unsafe_split: a view in effect, 0
    assert tr.unsupported_ops() == {}


def test_inplace_metadata_ops_launch_nothing() -> None:
    # clone (1) + t_ (0) + unsqueeze_ (0) + squeeze_ (0) = 1
    tr = trace(Fn(lambda x: x.clone().t_().unsqueeze_(0).squeeze_(0)), torch.randn(2, 8))
    assert tr.n_launches == 1
    assert tr.unsupported_ops() == {}
