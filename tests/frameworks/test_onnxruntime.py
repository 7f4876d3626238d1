"""ONNX Runtime lowering: kernel counts against ORT's own profiler, fusion, errors, caching."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import ftmodel
from ftmodel.errors import BackendUnavailable, FrameworkUnsupported, InvalidArgumentError
from ftmodel.frameworks import onnxruntime as ort_fw
from ftmodel.frameworks.base import get_framework
from ftmodel.frameworks.onnx_graph import VIEW_OPS

pytestmark = pytest.mark.requires_onnxruntime

IN, HID, OUT = 16, 32, 8


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT)).eval()


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4)).eval()


def _tiny_bert() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.BertModel(cfg).eval(), {"input_ids": torch.zeros(1, 16,
                                                                          dtype=torch.long)}


class _Mixer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft(torch.fft.fft(self.proj(x), dim=-1), dim=-2).real  # FNet mixing


class _FNetLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = _Mixer()
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(x))


def _profiled(model: nn.Module, inputs: Any, batch: int, tmp_path: Path
              ) -> tuple[ort_fw.OrtArtifact, list[dict[str, Any]]]:
    """Build with ORT's profiler on, run once, return the artifact and its "Node" events."""
    tr = ftmodel.trace(model, inputs, batch)
    art = ort_fw.build(model, inputs, batch, tr, enable_profiling=True,
                       profile_dir=str(tmp_path))
    art.run()
    path = art.session.end_profiling()
    events = [e for e in json.loads(Path(path).read_text())
              if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    return art, events


@pytest.mark.parametrize("name", ["mlp", "cnn", "bert"])
def test_count_matches_ort_profiler(name: str, tmp_path: Path) -> None:
    model, inputs, batch = {
        "mlp": lambda: (_mlp(), torch.randn(1, IN), 4),
        "cnn": lambda: (_cnn(), torch.randn(1, 3, 8, 8), 2),
        "bert": lambda: (*_tiny_bert(), 2),
    }[name]()
    art, events = _profiled(model, inputs, batch, tmp_path)
    prog = art.program
    # every node ORT ran is either a kernel or a view-like host event, none uncounted
    assert prog.n_launches + prog.host_events.get("view", 0) == len(events)
    kernel_events = [e for e in events if e["args"]["op_name"] not in VIEW_OPS]
    assert prog.n_launches == len(kernel_events)
    # same order and op types as ORT executed them
    assert [k.members[0].split("::")[-1] for k in prog.kernels] == \
        [e["args"]["op_name"] for e in kernel_events]
    assert sum(v for k, v in prog.host_events.items() if k.startswith("kernel:")) == \
        prog.n_launches


def test_conv_bn_relu_fuse_into_one_kernel() -> None:
    model = _cnn()
    x = torch.randn(1, 3, 8, 8)
    prog = ort_fw.lower_model(model, x, 2, ftmodel.trace(model, x, 2))
    convs = [k for k in prog.kernels if k.op_class == "conv"]
    # BatchNorm folds into the conv at export; ORT fuses the ReLU into the conv kernel
    assert len(convs) == 1
    assert "Relu" in convs[0].members
    assert not any(k.op_class == "norm" for k in prog.kernels)
    assert not any("Relu" == k.members[0] for k in prog.kernels)
    assert convs[0].module_path == "0"  # the conv's module, not the fused ReLU's
    # MACs = N·H·W·C_out_padded·C_in·k² with C_out ≥ 16 (NCHWc pads to its block)
    assert convs[0].macs >= 2 * 8 * 8 * 16 * 3 * 9


def test_nchwc_convolution_reads_its_weights_once_per_image() -> None:
    # MLAS's NCHWc convolution starts its filters over for every image of the batch: the
    # curve axis counts the weights that many times, the cache model's bytes once
    from ftmodel.api import kernel_at_batch

    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(32, 32, 3, padding=1)).eval()
    x = torch.randn(1, 16, 8, 8)
    prog = ort_fw.lower_model(model, x, 4, ftmodel.trace(model, x, 4))
    nchwc = [k for k in prog.kernels if k.members[0] == "com.microsoft.nchwc::Conv"]
    assert nchwc, [k.members for k in prog.kernels]
    for k in nchwc:
        assert k.weights_per_image and k.weight_reads == 4 and k.bytes_weights > 0
        assert k.read_traffic_bytes == k.bytes_read + 3 * k.bytes_weights
        k8 = kernel_at_batch(k, 4, 8)
        assert k8.weight_reads == 8 and k8.bytes_weights == k.bytes_weights
    # other kernels (the layout reorders, a Gemm) read what they read once
    assert all(k.weight_reads == 1 and k.read_traffic_bytes == k.bytes_read
               for k in prog.kernels if k not in nchwc)
    mlp = ort_fw.lower_model(_mlp(), torch.randn(1, IN), 4)
    assert all(not k.weights_per_image and k.weight_reads == 1 for k in mlp.kernels)


def test_convolutions_carry_the_code_path_onnx_runtime_runs_them_on() -> None:
    # the NCHWc transformer takes 2-d convolutions (ONNX Runtime 1.31 pads channel counts off
    # MLAS's block); a 1-d convolution runs on the plain NCHW kernel
    from ftmodel.frameworks.onnx_graph import NCHW_PATH, NCHWC_PATH

    def paths(model: nn.Module, x: torch.Tensor) -> list[str]:
        prog = ort_fw.lower_model(model.eval(), x, 2, ftmodel.trace(model, x, 2))
        return [k.variant for k in prog.kernels if k.op_class == "conv"]

    assert paths(nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()),
                 torch.randn(1, 16, 8, 8)) == [NCHWC_PATH]
    assert paths(nn.Sequential(nn.Conv1d(1, 16, 80, 4), nn.ReLU(), nn.Conv1d(16, 16, 3)),
                 torch.randn(1, 1, 800)) == [NCHW_PATH, NCHW_PATH]


def test_pools_take_their_code_path_as_variant() -> None:
    # a 2-d max pool behind a blocked convolution runs on the NCHWc kernel; a 1-d one on MLAS's
    # plain pooling, one channel at a time (a quarter of the blocked one's speed on the EPYC)
    from ftmodel.frameworks.onnx_graph import NCHW_PATH, NCHWC_PATH

    def paths(model: nn.Module, x: torch.Tensor) -> list[str]:
        prog = ort_fw.lower_model(model.eval(), x, 2, ftmodel.trace(model, x, 2))
        return [k.variant for k in prog.kernels if k.op_class == "pool"]

    assert paths(nn.Sequential(nn.Conv2d(16, 16, 3), nn.MaxPool2d(2)),
                 torch.randn(1, 16, 12, 12)) == [NCHWC_PATH]
    assert paths(nn.Sequential(nn.Conv1d(8, 16, 3), nn.MaxPool1d(4), nn.AvgPool1d(2)),
                 torch.randn(1, 8, 400)) == [NCHW_PATH, NCHW_PATH]


def test_mlp_work_from_graph_shapes() -> None:
    model, b = _mlp(), 4
    prog = ort_fw.lower_model(model, torch.randn(1, IN), b)
    gemms = [k for k in prog.kernels if k.op_class == "gemm"]
    # two Gemm nodes (bias folded in); ReLU fused into the first as FusedGemm or kept apart
    assert len(gemms) == 2
    # MACs = b·16·32 + b·32·8, exactly as eager
    assert prog.macs == b * IN * HID + b * HID * OUT
    first = gemms[0]
    # bytes at the kernel boundary: x (b·16) + W (32·16) + bias (32) in, y (b·32) out, fp32
    assert first.bytes_read == 4 * (b * IN + HID * IN + HID)
    assert first.bytes_written == 4 * b * HID
    assert [k.module_path for k in gemms] == ["0", "2"]


def test_bert_fusions_and_paths() -> None:
    model, inputs = _tiny_bert()
    prog = ort_fw.lower_model(model, inputs, 1, ftmodel.trace(model, inputs, 1))
    members = {m for k in prog.kernels for m in k.members}
    assert "com.microsoft::SkipLayerNormalization" in members  # residual add + LayerNorm
    assert "com.microsoft::Gelu" in members  # erf-GELU pattern fused
    assert prog.macs == ftmodel.trace(model, inputs, 1).total_macs
    assert any(k.module_path.startswith("encoder.layer.1.attention") for k in prog.kernels)


def test_fft_exports_through_the_dynamo_exporter() -> None:
    # the TorchScript-based exporter has no FFT conversion; the dynamo one exports a DFT node,
    # which ONNX Runtime runs
    model = _FNetLike().eval()
    x = torch.randn(2, 4, 8)
    prog = ort_fw.lower_model(model, x, 2, ftmodel.trace(model, x, 2))
    assert any("dynamo ONNX exporter" in w for w in prog.warnings)
    assert ort_fw.runner(model, x, 2)() is not None


class _Eigen(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvalsh(x @ x.transpose(-1, -2))


def test_unexportable_op_named_from_export_error() -> None:
    # neither exporter converts eigvalsh: the first exporter's error is translated
    with pytest.raises(FrameworkUnsupported, match="eigvalsh"):
        ort_fw.build(_Eigen().eval(), torch.randn(2, 4, 4), 2, None)


def test_missing_provider_names_it_and_how_to_install() -> None:
    provider = "TensorrtExecutionProvider"
    try:
        ort_fw.check_provider(provider)
    except BackendUnavailable:
        pass
    else:
        pytest.skip("TensorRT execution provider is usable on this machine")
    with pytest.raises(BackendUnavailable) as err:
        ort_fw.lower_model(_mlp(), torch.randn(1, IN), 1, provider=provider)
    msg = str(err.value)
    assert provider in msg and "install" in msg and "tensorrt" in msg.lower()


def test_unknown_provider() -> None:
    with pytest.raises(BackendUnavailable, match="does not include it"):
        ort_fw.check_provider("NoSuchExecutionProvider")


def test_cache_and_runner_match_eager() -> None:
    model, x = _mlp(), torch.randn(3, IN)
    ort_fw.CACHE.clear()
    p1 = ort_fw.lower_model(model, x, 3)
    p2 = ort_fw.lower_model(model, x, 3)
    assert p1 is p2 and len(ort_fw.CACHE) == 1  # one export per (model, batch, dtype, ...)
    run = ort_fw.runner(model, x, 3)
    assert len(ort_fw.CACHE) == 1  # the runner reuses the cached session
    (out,) = run()  # type: ignore[misc]
    with torch.no_grad():
        np.testing.assert_allclose(out, model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_registry_entry() -> None:
    fw = get_framework("ort")
    assert fw.name == "onnxruntime" and fw.lower_model is not None and fw.runner is not None
    with pytest.raises(InvalidArgumentError, match="lower_model"):
        fw.lower(ftmodel.trace(_mlp(), torch.randn(1, IN)))


def test_predict_latency_uses_lower_model(profile_factory: Any) -> None:
    from ftmodel.hardware.profile import FrameworkHost
    from tests.conftest import TINY_PER_CALL_S, TINY_PER_EVENT_S

    per = {k: v for k, v in TINY_PER_EVENT_S.items() if k.startswith("kernel:")}
    prof = profile_factory(name="ort-cpu", frameworks={
        "onnxruntime": FrameworkHost(per_event_s={**per, "view": 1e-7},
                                     per_call_s=TINY_PER_CALL_S)})
    model = _mlp()
    p = ftmodel.predict_latency(model, "ort", prof, 4, inputs=torch.randn(1, IN))
    expected = ort_fw.lower_model(model, torch.randn(1, IN), 4)
    assert p.framework == "onnxruntime" and p.n_launches == expected.n_launches
    assert p.macs == 4 * IN * HID + 4 * HID * OUT


def _small_vit() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        num_classes=10).eval()


def test_torchvision_vit_lowers_with_mha_fastpath_off_during_export() -> None:
    # In eval mode under no_grad nn.MultiheadAttention takes PyTorch's fused fast path
    # (_native_multi_head_attention), which has no ONNX conversion; the export turns it off.
    assert torch.backends.mha.get_fastpath_enabled()
    prog = ort_fw.lower_model(_small_vit(), torch.randn(1, 3, 32, 32), 1)
    assert torch.backends.mha.get_fastpath_enabled()  # restored
    # one softmax (or one fused ORT Attention node) per layer: the attention was exported
    ops = [k.op_class for k in prog.kernels]
    assert ops.count("softmax") + ops.count("attention") >= 2 and prog.macs > 0


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_recurrent_layers_count_their_macs_as_eager_does(cls: type[nn.Module]) -> None:
    torch.manual_seed(0)
    rnn = cls(12, 20, 2, batch_first=True, bidirectional=True).eval()
    x = torch.randn(3, 7, 12)  # (B, T, I)
    prog = ort_fw.lower_model(rnn, x, 3, ftmodel.trace(rnn, x, 3))
    # one ONNX LSTM/GRU node per layer: tokens × (W + R) elements, as the traced fused layers
    assert prog.macs == ftmodel.trace(rnn, x, 3).total_macs > 0
    # each node runs its two directions one after the other: 2 × 7 sequential steps
    from ftmodel.tracing.rnn_variants import directions_of, steps_of

    nodes = [k for k in prog.kernels if k.members and k.members[0].split("::")[-1] in
             ("LSTM", "GRU")]
    assert len(nodes) == 2 and all(steps_of(k.variant)[0] == 2 * 7 for k in nodes)
    assert all(directions_of(k.variant) == 2 for k in nodes)
    one_way = cls(12, 20, 1, batch_first=True).eval()
    uni = ort_fw.lower_model(one_way, x, 3, ftmodel.trace(one_way, x, 3))
    rec = [k for k in uni.kernels if "steps=" in k.variant]
    assert [(steps_of(k.variant)[0], directions_of(k.variant)) for k in rec] == [(7, 1)]


def test_grouped_query_attention_falls_back_to_the_dynamo_exporter() -> None:
    # the TorchScript-based exporter cannot convert scaled_dot_product_attention(enable_gqa=True)
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    cfg = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.Qwen2Model(cfg).eval()
    ids = {"input_ids": torch.randint(0, 100, (1, 16))}  # (B, S)
    tr = ftmodel.trace(model, ids, 1)
    prog = ort_fw.lower_model(model, ids, 1, tr)
    assert any("dynamo ONNX exporter" in w for w in prog.warnings)
    # fusion removes launches, not arithmetic
    assert prog.macs == pytest.approx(tr.total_macs, rel=0.05)


def test_t5_rms_norm_fusion_keeps_shapes_known() -> None:
    # ORT fuses T5's RMS norm into SimplifiedLayerNormalization, a contrib op registered in the
    # default ONNX domain; every GEMM after it used to lose its shape and count 0 MACs
    transformers = pytest.importorskip("transformers")
    cfg = transformers.T5Config(d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4,
                                vocab_size=100)
    torch.manual_seed(0)
    model = transformers.T5EncoderModel(cfg).eval()
    ids = {"input_ids": torch.randint(0, 100, (2, 16))}  # (B, S)
    tr = ftmodel.trace(model, ids, 2)
    prog = ort_fw.lower_model(model, ids, 2, tr)
    assert "SimplifiedLayerNormalization" in {k.members[0] for k in prog.kernels}
    assert not any("shapes unknown" in w for w in prog.warnings), prog.warnings
    assert prog.macs == pytest.approx(tr.total_macs, rel=0.05)


def test_failed_export_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    # the TorchScript-based exporter dumps the whole IR graph from C++ when it fails (here on
    # grouped-query attention) before the dynamo exporter takes over
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=32)
    model = transformers.LlamaModel(cfg).eval()
    ids = {"input_ids": torch.randint(0, 100, (1, 8))}
    ort_fw.build(model, ids, 1)
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out[:200], err[:200])


def test_gpu_profile_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    # predicting for a GPU profile probes the CUDA execution provider; on a machine without
    # CUDA, ORT's default logger printed the library's load failure in red from C++
    ort_fw._provider_problem.cache_clear()
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).eval()
    p = ftmodel.predict_latency(model, "onnxruntime", "a100", 1,
                                inputs=lambda b: torch.randn(b, 3, 16, 16))
    assert p.latency_s > 0
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out[:200], err[:300])


def test_fused_matmul_with_folded_head_transposes_counts_every_head() -> None:
    # ORT folds attention's head Transpose into FusedMatMul (transBatchA/B): its MACs counted
    # one head's share before (a quarter with 4 heads)
    model = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0).eval()
    x = torch.randn(8, 16, 64)
    tr = ftmodel.trace(model, x, 8)
    prog = ort_fw.lower_model(model, x, 8, tr)
    assert any(k.members[0].endswith("FusedMatMul") for k in prog.kernels)
    assert prog.macs == pytest.approx(tr.total_macs, rel=0.01)


class _ResidualNorm(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(self.norm1(x + self.fc(x)))


def test_layer_norms_carry_the_kernel_onnx_runtime_runs_them_on() -> None:
    # ORT fuses the residual sum into the first norm (SkipLayerNormalization, a scalar loop per
    # row, 3.5-11x its LayerNormalization on the EPYC): the two get curves of their own
    x = torch.randn(1, 16, 32)
    prog = ort_fw.lower_model(_ResidualNorm(32).eval(), (x,), 1)
    norms = [(k.members[0].split("::")[-1], k.variant) for k in prog.kernels
             if k.op_class == "norm"]
    assert norms == [("SkipLayerNormalization", "skip"), ("LayerNormalization", "layer")]
