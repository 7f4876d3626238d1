"""No prediction beats physics: over frameworks × built-in GPUs × small models × dtypes, no
kernel's device time is below its MACs at the GPU's peak rate for its dtype, nor below its bytes
at the GPU's memory bandwidth (spec sheet), and fusion removes launches, not arithmetic. The
matrix test adds every built-in GPU and small configurations of the model families users deploy
(a CNN, a ViT, encoders, a decoder in prefill and in decode)."""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

import pytest
import torch
from torch import nn

from ftmodel.api import Predictor
from ftmodel.errors import FrameworkUnsupported
from ftmodel.inputs import decode
from ftmodel.hardware.profile import DeviceProfile
from ftmodel.hardware.registry import list_profiles, load_profile
from ftmodel.tracing.records import Trace

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


def _matrix_models() -> dict[str, tuple[Any, Any]]:
    timm = pytest.importorskip("timm")
    transformers = pytest.importorskip("transformers")

    def ids(b: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.randint(0, 1000, (b, 32))}

    def llama() -> nn.Module:
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1000, bos_token_id=0, eos_token_id=0))

    def img(b: int) -> torch.Tensor:
        return torch.randn(b, 3, 64, 64)

    return {
        "convnext": (lambda: timm.create_model("convnext_atto", pretrained=False), img),
        "vit": (lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False,
                                          img_size=64), img),
        "bert": (lambda: transformers.BertModel(transformers.BertConfig(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
            vocab_size=1000)), ids),
        "t5-encoder": (lambda: transformers.T5EncoderModel(transformers.T5Config(
            d_model=128, d_ff=256, d_kv=32, num_layers=2, num_heads=4, vocab_size=1000)), ids),
        "llama-prefill": (llama, ids),
        "llama-decode": (llama, decode(context=64)),
    }


ALL_GPUS = sorted({e.name for e in list_profiles()
                   if e.source == "builtin" and e.path.parent.name == "builtin"})  # no hosts


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_every_framework_on_every_gpu_predicts_or_names_what_it_cannot(dtype: str) -> None:
    """The matrix: small configurations of a ConvNeXt, a ViT, BERT, a T5 encoder and a GQA
    decoder in prefill and decode, × every framework × every built-in GPU: a prediction that
    beats no spec sheet with eager's MACs (within 5%), or FrameworkUnsupported."""
    assert len(ALL_GPUS) >= 20
    for name, (make, inputs) in _matrix_models().items():
        torch.manual_seed(0)
        model = make().eval()
        macs_of: dict[str, float] = {}
        traced: Trace | None = None  # the trace depends on model, inputs, batch and dtype only
        for fw in FRAMEWORKS:
            for gpu in ALL_GPUS:
                prof = load_profile(gpu)
                if dtype not in prof.device.dtypes:
                    continue
                pred = Predictor(fw, prof, dtype=dtype)
                try:
                    if traced is None:
                        traced = pred.trace(model, inputs, 4)
                    program = pred.lower(model, inputs, 4, traced)
                except FrameworkUnsupported as err:
                    assert fw in ("torchscript", "onnxruntime", "onnxruntime-cudagraphs") \
                        and name == "llama-decode", (name, fw, gpu, err)
                    break
                bandwidth = float(prof.device.specs["mem_bw_gbps"]) * 1e9
                device_s = pred.kernel_arrays(program.kernels).device_s
                for k, t in zip(program.kernels, device_s):
                    kd = _KERNEL_DTYPE.get(k.dtype, dtype)
                    floor = max(k.macs / _peak_macs_per_s(prof.device, kd),
                                k.bytes_total / bandwidth)
                    assert t >= floor * (1 - 1e-9), (name, gpu, fw, k.op_class, t, floor)
                macs_of[fw] = float(sum(k.macs for k in program.kernels))
        for fw, macs in macs_of.items():
            assert macs == pytest.approx(macs_of["eager"], rel=0.05), (name, dtype, fw)
