"""Live validation measures on the profile's device: the CPU for a CPU profile, the GPU for a GPU
profile (refused with a clear message on a machine without CUDA)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ftmodel.api import Predictor
from ftmodel.errors import InvalidArgumentError
from ftmodel.frameworks.base import get_framework
from ftmodel.tools.validation import LiveModel, compare_live_many, framework_call


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def test_cpu_profile_measures_on_the_cpu(tiny_profile) -> None:
    lm = LiveModel("mlp", _mlp(), lambda b: torch.ones(b, 8))
    pts = compare_live_many([lm], [1, 4], Predictor("eager", tiny_profile), rounds=2,
                            round_s=0.001)
    assert [p.batch for p in pts] == [1, 4]
    assert all(p.measured_s > 0 and p.predicted_s > 0 for p in pts)
    assert next(lm.model.parameters()).device.type == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_gpu_profile_without_cuda_says_so() -> None:
    lm = LiveModel("mlp", _mlp(), lambda b: torch.ones(b, 8))
    with pytest.raises(InvalidArgumentError, match="GPU profile.*no CUDA device"):
        compare_live_many([lm], [1], Predictor("eager", "h100-sxm5"), rounds=1)


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_profile_measures_on_the_gpu() -> None:
    lm = LiveModel("mlp", _mlp(), lambda b: torch.ones(b, 8))
    pts = compare_live_many([lm], [1], Predictor("eager", "h100-sxm5"), rounds=2, round_s=0.001)
    assert pts[0].measured_s > 0
    assert next(lm.model.parameters()).device.type == "cuda"


def test_framework_call_runs_eager_on_the_module_itself() -> None:
    # eager has no runner: the call is the module's own forward on inputs resized to the batch,
    # without autograd
    torch.manual_seed(0)
    model = nn.Linear(4, 3).eval()
    x = torch.randn(1, 4)
    out = framework_call(get_framework("eager"), model, x, 5)()
    assert isinstance(out, torch.Tensor) and out.shape == (5, 3) and not out.requires_grad
