"""No prediction beats physics: over frameworks × built-in GPUs × small models × dtypes, no
kernel's device time is below its MACs at the GPU's peak rate for its dtype, nor below its bytes
at the GPU's memory bandwidth (spec sheet), and fusion removes launches, not arithmetic."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch
from torch import nn

from ftmodel.api import Predictor
from ftmodel.hardware.profile import DeviceProfile
from ftmodel.hardware.registry import load_profile

pytestmark = pytest.mark.slow

GPUS = ("gtx1080ti", "t4", "rtx8000", "a100", "l4", "h100")
FRAMEWORKS = ["eager", "torchscript", "cudagraphs"]
if importlib.util.find_spec("onnxruntime") is not None:
    FRAMEWORKS += ["onnxruntime", "onnxruntime-cudagraphs"]
if shutil.which("g++") or shutil.which("c++"):
    FRAMEWORKS += ["inductor", "inductor-cudagraphs"]
_TFLOPS = {"fp32": ("fp32_tflops",), "tf32": ("tf32_tensor_tflops", "fp32_tflops"),
           "fp16": ("fp16_tensor_tflops", "fp32_tflops"),
           "bf16": ("bf16_tensor_tflops", "fp32_tflops")}
_KERNEL_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def _peak_macs_per_s(device: DeviceProfile, dtype: str) -> float:
    """The fastest MAC rate the spec sheet allows a kernel of ``dtype``."""
    flops = [device.specs.get(k) for k in _TFLOPS.get(dtype, ("fp32_tflops",))]
    return max(float(f) for f in flops if f) * 1e12 / 2


class _Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


MODELS = {
    "cnn": (lambda: nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
        lambda b: torch.randn(b, 3, 32, 32)),
    "encoder": (_Attn, lambda b: torch.randn(b, 16, 64)),
    "mlp": (lambda: nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128)),
            lambda b: torch.randn(b, 128)),
}


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_no_kernel_beats_the_spec_sheet(model_name: str, dtype: str) -> None:
    make, inputs = MODELS[model_name]
    torch.manual_seed(0)
    model = make().eval()
    for gpu in GPUS:
        prof = load_profile(gpu)
        bandwidth = float(prof.device.specs["mem_bw_gbps"]) * 1e9
        macs_of: dict[str, float] = {}
        for fw in FRAMEWORKS:
            if dtype not in prof.device.dtypes:
                continue
            pred = Predictor(fw, prof, dtype=dtype)
            for batch in (1, 64):
                trace = pred.trace(model, inputs, batch)
                program = pred.lower(model, inputs, batch, trace)
                device_s = pred.kernel_arrays(program.kernels).device_s
                for k, t in zip(program.kernels, device_s):
                    kd = _KERNEL_DTYPE.get(k.dtype, dtype)
                    floor = max(k.macs / _peak_macs_per_s(prof.device, kd),
                                k.bytes_total / bandwidth)
                    assert t >= floor * (1 - 1e-9), (gpu, fw, dtype, batch, k.op_class,
                                                      k.members[:1], t, floor)
                if batch == 64:
                    macs_of[fw] = float(sum(k.macs for k in program.kernels))
        if macs_of:
            eager = macs_of["eager"]
            for fw, macs in macs_of.items():
                assert macs == pytest.approx(eager, rel=0.03), (gpu, dtype, fw, macs, eager)
