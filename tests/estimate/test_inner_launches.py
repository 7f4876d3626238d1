"""Kernels C++ launches inside one Python call (``OpRecord.inner``) and what they cost.

A fused recurrent layer (``torch._VF.gru``) is one Python call that launches every step's GEMM
and gate kernels from C++; the eager in-model cost per kernel (Python glue between calls) is
paid once for the call, not once per kernel. Kernels the model's own Python launches, one call
each, are never inner, whichever helper or loop they come from.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from ftmodel.api import Predictor
from ftmodel.frameworks import eager
from ftmodel.program import entry_launches
from ftmodel.hardware.profile import FrameworkHost
from ftmodel.tracing.dispatch import trace

TINY_PER_EVENT_S = {"module_call": 2e-6, "view": 5e-7, "alloc": 3e-7,
                    **{f"kernel:{c}": 4e-6 for c in (
                        "gemm", "conv", "conv_grouped", "bmm", "attention", "elementwise", "copy",
                        "norm", "pool", "reduction", "softmax", "embedding")}}


def _act(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x)


class PythonCalls(nn.Module):
    """Five launching calls, each its own Python call: two torch functions, a helper called
    twice (the second call may reuse the first call's frame memory), and a loop."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        y = torch.sigmoid(y)
        y = _act(_act(y))
        for _ in range(2):
            y = torch.neg(y)
        return y


def test_python_calls_are_never_inner() -> None:
    records = [r for r in trace(PythonCalls(), (torch.randn(2, 8),)).records if r.launches]
    assert [r.op.split(".")[1] for r in records] == ["relu", "sigmoid", "tanh", "tanh", "neg",
                                                     "neg"]
    assert not any(r.inner for r in records)


def test_fused_gru_launches_its_steps_from_cpp() -> None:
    steps = 5
    gru = nn.GRU(8, 8, batch_first=True).eval()
    records = [r for r in trace(gru, (torch.randn(1, steps, 8),)).records if r.launches]
    # the initial hidden state (one Python call) and the first kernel of _VF.gru are launched
    # by Python; every other kernel of the layer's steps by C++ inside that call
    entries = [r for r in records if not r.inner]
    assert len(entries) == 2, [r.op for r in entries]
    assert len(records) - len(entries) >= 4 * steps  # each step: GEMM and gate kernels


def _in_model_profile(profile_factory: Any, per_kernel_s: float) -> Any:
    fh = FrameworkHost(per_event_s=dict(TINY_PER_EVENT_S), per_call_s=1e-5,
                       in_model={"host_scale": 1.0, "device_scale": 1.0, "per_byte_s": 0.0,
                                 "per_kernel_s": per_kernel_s})
    return profile_factory(frameworks={"eager": fh})


def test_in_model_cost_per_kernel_is_paid_per_python_launch(profile_factory: Any) -> None:
    gru = nn.GRU(8, 8, batch_first=True).eval()
    program = eager.lower(trace(gru, (torch.randn(1, 5, 8),)))
    assert 0 < program.n_python_launches < program.n_launches
    assert entry_launches(program.kernels).sum() == program.n_python_launches
    per_kernel = 1e-3
    base = Predictor("eager", _in_model_profile(profile_factory, 0.0), heap="kept")
    taxed = Predictor("eager", _in_model_profile(profile_factory, per_kernel), heap="kept")
    extra = taxed.program_timeline(program).overhead_s - base.program_timeline(program).overhead_s
    assert extra == pytest.approx(per_kernel * program.n_python_launches, rel=1e-9)
