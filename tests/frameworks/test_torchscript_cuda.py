"""TorchScript for a GPU profile, counted without a GPU (ftmodel.frameworks.torchscript_cuda)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from ftmodel.api import Predictor
from ftmodel.errors import BackendUnavailable
from ftmodel.estimate.launches import expand_launches
from ftmodel.frameworks import eager
from ftmodel.frameworks import torchscript as ts
from ftmodel.frameworks.torchscript_cuda import GROUP, apply_fuser, fuse_kernels, fuser_for
from ftmodel.hardware.registry import load_profile
from ftmodel.program import Program
from ftmodel.tracing.dispatch import trace


def _cnn() -> nn.Module:
    """conv, bn, relu, conv, relu, pool: 6 eager kernels."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3),
                         nn.ReLU(), nn.MaxPool2d(2)).eval()


def _x() -> torch.Tensor:
    return torch.randn(1, 3, 16, 16)


def test_unfused_cuda_graph_counts_like_eager() -> None:
    prog = ts.lower_model(_cnn(), _x(), 2, device="cuda")
    ref = eager.lower(trace(_cnn(), _x(), 2))
    # the traced (unfrozen) graph dispatches the same aten kernels as eager: no conv-bn folding
    assert [k.op_class for k in prog.kernels] == [k.op_class for k in ref.kernels]
    assert prog.macs == ref.macs
    assert prog.host_events.get("jit_node", 0) > 0 and "module_call" not in prog.host_events


def test_fusers_group_chained_ops() -> None:
    prog = ts.lower_model(_cnn(), _x(), 2, device="cuda")
    classes = [k.op_class for k in prog.kernels]
    assert classes == ["conv", "norm", "elementwise", "conv", "elementwise", "pool"]
    # nvFuser: bn+relu -> one kernel (a norm group); the lone relu after conv 2 stays: 5 kernels
    nv = fuse_kernels(prog.kernels, "nvfuser")
    assert [k.op_class for k in nv] == ["conv", "norm", "conv", "elementwise", "pool"]
    assert nv[1].members[0] == GROUP
    # NNC fuses pointwise ops only: nothing to group here
    assert len(fuse_kernels(prog.kernels, "nnc")) == 6
    assert apply_fuser(prog, "none") is prog


def test_fuser_follows_the_device() -> None:
    assert fuser_for(load_profile("rtx8000").device) == "nvfuser"  # Turing
    assert fuser_for(load_profile("titanx").device) == "nnc"  # Pascal
    model, x = _cnn(), _x()
    tr = trace(model, x, 2)

    def lowered(device: Any) -> Program:
        return ts.FRAMEWORK.program(model, x, 2, tr, device=device, dtype="fp32")

    turing = lowered(load_profile("rtx8000").device)
    pascal = lowered(load_profile("titanx").device)
    assert sum(k.op_class == "norm" and k.members[0] == GROUP for k in turing.kernels) == 1
    assert not any(k.members[0] == GROUP for k in pascal.kernels)
    # the device type alone lowers without the device's fuser
    assert not any(k.members[0] == GROUP for k in lowered("cuda").kernels)


def test_predictor_lowers_for_its_device() -> None:
    model, x = _cnn(), _x()
    pred = Predictor("torchscript", "rtx8000")
    prog = pred.lower(model, x, 2, pred.trace(model, x, 2))
    assert sum(k.members[0] == GROUP for k in prog.kernels) == 1
    # the estimate's launch expansion only adds helper kernels: the groups are the lowering's
    unfused = ts.lower_model(model, x, 2, device="cuda")
    expanded = expand_launches(unfused, pred.profile.device, "torchscript")
    assert not any(k.members[0] == GROUP for k in expanded.kernels)


def test_unknown_fuser() -> None:
    with pytest.raises(ValueError, match="nvfuser, nnc, none"):
        fuse_kernels((), "xla")


def test_runner_without_gpu_says_so() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available")
    with pytest.raises(BackendUnavailable, match="CUDA device"):
        ts.runner(_cnn(), _x(), 1, device="cuda")
