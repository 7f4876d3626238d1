"""CUDA-graph frameworks: eager kernels, one replay event, per-kernel gap events; GPU only."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ftmodel
from ftmodel.errors import FrameworkUnsupported, InvalidArgumentError
from ftmodel.frameworks import cudagraphs, eager
from ftmodel.frameworks.base import (BUILTIN_FRAMEWORKS, FRAMEWORKS, framework_names,
                                     get_framework)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


def test_cudagraphs_reuses_eager_kernels() -> None:
    tr = ftmodel.trace(_mlp(), torch.randn(4, 16))
    prog, base = cudagraphs.lower(tr), eager.lower(tr)
    assert prog.kernels == base.kernels
    # one graph launch; a device-side gap per kernel: 2 gemm + 1 elementwise
    assert dict(prog.host_events) == {"graph_replay": 1, "kernel_gap:gemm": 2,
                                      "kernel_gap:elementwise": 1}
    assert "module_call" not in prog.host_events


def test_needs_gpu() -> None:
    for name in ("cudagraphs", "onnxruntime-cudagraphs", "ort-cudagraphs"):
        assert get_framework(name).needs_gpu


def test_framework_names_by_device() -> None:
    assert set(BUILTIN_FRAMEWORKS) == set(FRAMEWORKS)  # every built-in one registers itself
    assert framework_names() == framework_names("cuda") == BUILTIN_FRAMEWORKS
    assert framework_names("cpu") == ("eager", "torchscript", "onnxruntime", "inductor")
    # onnxruntime-cudagraphs is predicted only: no runner to time it with
    assert framework_names(runnable=True) == ("eager", "torchscript", "onnxruntime", "inductor",
                                              "cudagraphs")


def test_cpu_profile_refused(tiny_profile: object) -> None:
    with pytest.raises(InvalidArgumentError, match="GPU profile"):
        ftmodel.predict_latency(_mlp(), "cudagraphs", tiny_profile, 1,
                                inputs=torch.randn(1, 16))


def test_capture_rejects_data_dependent_branch() -> None:
    class Net(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if x.sum() > 0 else -x

    with pytest.raises(FrameworkUnsupported, match="data-dependent"):
        cudagraphs.lower(ftmodel.trace(Net(), torch.randn(2, 4)))


class _EmbedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(self.emb(ids)))


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runner_replays_the_eager_forward() -> None:
    torch.manual_seed(0)
    model = _EmbedMLP().eval()
    ids = torch.randint(0, 16, (2, 5))
    with torch.no_grad():
        want = model(ids)
    run = cudagraphs.runner(model, ids, 3)  # batch 3: rows repeated cyclically
    for _ in range(4):  # other allocations must not reuse the graph's static input buffer
        torch.empty(1 << 20, device="cuda").fill_(7.0)
        got = run()
    torch.cuda.synchronize()
    assert torch.allclose(got[:2].cpu(), want, atol=1e-5)
    assert torch.allclose(got[2].cpu(), want[0], atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_runner_without_cuda_says_what_it_needs() -> None:
    from ftmodel.errors import BackendUnavailable
    with pytest.raises(BackendUnavailable, match="CUDA device"):
        cudagraphs.runner(_mlp(), torch.ones(1, 16), 1)
    with pytest.raises(InvalidArgumentError, match="device='cpu'"):
        cudagraphs.runner(_mlp(), torch.ones(1, 16), 1, device="cpu")
