"""ONNX Runtime's CUDA-EP graph reproduced on the CPU EP (ftmodel.frameworks.onnx_cuda).

Counts are written as formulas of the tiny models below; the ResNet-50 check against the
paper's profiler traces is in tests/hardware/test_builtin_profiles.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from ftmodel.errors import BackendUnavailable, InvalidArgumentError
from ftmodel.frameworks import onnx_cuda
from ftmodel.frameworks import onnxruntime as ort_fw

pytestmark = pytest.mark.requires_onnxruntime


class _Block(nn.Module):
    """conv-bn-relu, conv-bn, + identity, relu: a residual block (2 convs)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.b(self.a(x)) + x)


def _lower(dtype: str) -> object:
    torch.manual_seed(0)
    return ort_fw.lower_model(_Block().eval(), torch.randn(1, 8, 16, 16), 2, device="cuda",
                              dtype=dtype, emulate=True)


def test_fp32_fuses_conv_relu_and_conv_add_relu() -> None:
    prog = _lower("fp32")
    # BN folds into the convs (level 1); Conv->Relu and Conv->Add->Relu become FusedConv:
    # 2 kernels, both convolutions
    assert [k.op_class for k in prog.kernels] == ["conv", "conv"]  # type: ignore[attr-defined]
    assert any(onnx_cuda.EMULATION_NOTE in w for w in prog.warnings)  # type: ignore[attr-defined]


def test_fp16_keeps_activations_separate_and_halves_bytes() -> None:
    p32, p16 = _lower("fp32"), _lower("fp16")
    # FusedConv is registered for float only on the CUDA EP: conv, relu, conv, add, relu
    assert len(p16.kernels) == 5  # type: ignore[attr-defined]
    conv32 = p32.kernels[0]  # type: ignore[attr-defined]
    conv16 = p16.kernels[0]  # type: ignore[attr-defined]
    assert conv16.dtype == "float16" and conv16.macs == conv32.macs
    # same tensors (input 2x8x16x16, weight 8x8x3x3, bias 8; output 2x8x16x16), 2 bytes each
    assert conv16.bytes_read * 2 == conv32.bytes_read
    assert conv16.bytes_written * 2 == conv32.bytes_written


def test_emulated_artifact_cannot_run() -> None:
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(1, 8, 16, 16)
    ort_fw.lower_model(model, x, 1, device="cuda", emulate=True)
    try:
        ort_fw.check_provider(ort_fw.PROVIDERS["cuda"])
    except BackendUnavailable:
        with pytest.raises(BackendUnavailable, match="CUDA execution provider"):
            ort_fw.runner(model, x, 1, device="cuda")
    else:
        pytest.skip("the CUDA execution provider is usable here: the real session runs")


def test_emulate_only_for_cuda() -> None:
    with pytest.raises(InvalidArgumentError, match="emulate=True.*CPUExecutionProvider"):
        ort_fw.lower_model(_Block().eval(), torch.randn(1, 8, 16, 16), 1, emulate=True)


def test_unknown_rule_set() -> None:
    with pytest.raises(ValueError, match="ort-1.12"):
        onnx_cuda.fuse_conv_activation_cuda(None, "fp32", rules="ort-9")
