"""MACs of ``ftmodel.tracing.dispatch.trace`` against independent references, and Trace queries.

References:
* ``torch.utils.flop_counter.FlopCounterMode`` run on REAL tensors (FLOPs = 2 x MACs), with the
  math SDPA backend forced and the nn.MultiheadAttention fast path off, so that every matmul
  reaches the counter as an mm/addmm/bmm/convolution it has a formula for. The tracer runs with
  default settings (fake tensors, fused SDPA, MHA fast path on), so the two sides count the same
  model through different kernels.
* torchvision's published ``Weights.meta["_ops"]`` (labelled GFLOPS in torchvision's docs, but in
  fact GMACs).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
import torchvision
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ftmodel.hardware.profile import HardwareProfile
from ftmodel.tracing.dispatch import trace

REL_TOL = 1e-3  # 0.1 %

TORCHVISION = [  # (builder, weights enum) -- reading Weights.meta downloads nothing
    ("resnet18", "ResNet18_Weights"),
    ("resnet50", "ResNet50_Weights"),
    ("mobilenet_v2", "MobileNet_V2_Weights"),
    ("vit_b_16", "ViT_B_16_Weights"),
]
IMAGE = (1, 3, 224, 224)


@contextlib.contextmanager
def mha_fastpath(enabled: bool) -> Iterator[None]:
    old = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(old)


def reference_flops(model: nn.Module, args: tuple[Any, ...],
                    kwargs: dict[str, Any] | None = None) -> int:
    """FLOPs counted by FlopCounterMode on real tensors (math SDPA, MHA fast path off)."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), mha_fastpath(False), counter:
        model(*args, **(kwargs or {}))
    return int(counter.get_total_flops())


@pytest.fixture(scope="module")
def tv_models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {name: getattr(torchvision.models, name)(weights=None).eval()
            for name, _ in TORCHVISION}


@pytest.fixture(scope="module")
def bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig()).eval()  # BERT-Base, random weights


# ---- whole models against FlopCounterMode ----------------------------------------------------

@pytest.mark.parametrize("name", [n for n, _ in TORCHVISION])
def test_torchvision_macs_match_flop_counter(tv_models: dict[str, nn.Module], name: str) -> None:
    model = tv_models[name]
    x = torch.randn(IMAGE)
    tr = trace(model, x)
    assert tr.fake
    assert 2 * tr.total_macs == pytest.approx(reference_flops(model, (x,)), rel=REL_TOL)


def test_bert_base_macs_match_flop_counter(bert: nn.Module) -> None:
    ids = torch.zeros(1, 128, dtype=torch.long)  # (B, S)
    tr = trace(bert, ids)
    assert tr.fake
    ref = reference_flops(bert, (ids,))
    assert 2 * tr.total_macs == pytest.approx(ref, rel=REL_TOL)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_bert_attention_matmuls_are_counted(bert: nn.Module, attn: str) -> None:
    """Each layer's Q.K^T and P.V are counted: B*H*S*S*(Dq + Dv) MACs in "attention.self".

    With SDPA that is one op of class "attention"; with eager attention two "bmm" ops of
    B*H*S*S*Dq and B*H*S*S*Dv MACs.
    """
    cfg = bert.config
    b, s = 1, 128
    h = cfg.num_attention_heads  # 12
    d_q = d_v = cfg.hidden_size // h  # 64
    per_layer = b * h * s * s * (d_q + d_v)  # 25,165,824
    old = cfg._attn_implementation
    bert.set_attn_implementation(attn)
    try:
        tr = trace(bert, torch.zeros(b, s, dtype=torch.long))
    finally:
        bert.set_attn_implementation(old)
    got: dict[str, int] = defaultdict(int)
    for r in tr.records:
        if r.op_class in ("attention", "bmm"):
            got[r.module_path] += r.macs
    assert dict(got) == {f"encoder.layer.{i}.attention.self": per_layer
                         for i in range(cfg.num_hidden_layers)}
    if attn == "sdpa":
        fused = [r for r in tr.records if r.op_class == "attention"]
        assert len(fused) == cfg.num_hidden_layers
        assert all(r.macs == per_layer for r in fused)


def test_vit_macs_same_with_and_without_mha_fastpath(tv_models: dict[str, nn.Module]) -> None:
    # fast path on: one _native_multi_head_attention per block, MACs 4*B*S*E^2 + 2*B*S^2*E;
    # fast path off: linear + SDPA + linear. Both are the same arithmetic.
    model = tv_models["vit_b_16"]
    with mha_fastpath(True):
        fast = trace(model, torch.randn(IMAGE))
    with mha_fastpath(False):
        slow = trace(model, torch.randn(IMAGE))
    assert "aten._native_multi_head_attention.default" in fast.by_operator()
    assert "aten._native_multi_head_attention.default" not in slow.by_operator()
    assert fast.total_macs == slow.total_macs


def test_encoder_layer_macs_same_with_and_without_its_fastpath() -> None:
    # nn.TransformerEncoderLayer in eval + no_grad: one _transformer_encoder_layer_fwd op,
    # counted as 0 MACs before; the slow path is linear + SDPA + linear + the FFN's two linears
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True,
                                                             dropout=0.0), 2).eval()
    x = torch.randn(3, 16, 64)
    with mha_fastpath(True):
        fast = trace(model, x)
    with mha_fastpath(False):
        slow = trace(model, x)
    assert "aten._transformer_encoder_layer_fwd.default" in fast.by_operator()
    assert fast.total_macs == slow.total_macs == 2 * (3 * 16 * (4 * 64 * 64 + 2 * 64 * 128)
                                                      + 3 * 16 * 16 * 2 * 64)


# ---- published figures ---------------------------------------------------------------------

@pytest.mark.parametrize("name,weights", TORCHVISION)
def test_torchvision_macs_match_published_ops(name: str, weights: str) -> None:
    published_gmacs = float(getattr(torchvision.models, weights).IMAGENET1K_V1.meta["_ops"])
    with torch.device("meta"):  # no weights needed: the figure is a function of shapes
        model = getattr(torchvision.models, name)(weights=None)
    tr = trace(model, torch.zeros(IMAGE))
    assert tr.fake
    # The published figures are rounded to 3 decimals (in G), so the tolerance is the larger of
    # 0.1 % and the rounding half-unit 0.0005 G (relative: 0.0005 / published).
    rel = max(REL_TOL, 0.0005 / published_gmacs)
    assert tr.total_macs / 1e9 == pytest.approx(published_gmacs, rel=rel)


# ---- small modules: each MAC formula against FlopCounterMode --------------------------------

class Fn(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


SMALL = [
    # N * prod(out spatial) * C_out * C_in/groups * prod(kernel)
    pytest.param(nn.Conv1d(4, 8, 5, padding=2), (_r(2, 4, 16),), id="conv1d"),
    pytest.param(nn.Conv2d(4, 8, 3, stride=2, dilation=2), (_r(2, 4, 15, 15),), id="conv2d-dilated"),
    pytest.param(nn.Conv2d(8, 8, 3, groups=8), (_r(2, 8, 9, 9),), id="depthwise"),
    pytest.param(nn.Conv3d(2, 4, 3), (_r(1, 2, 6, 6, 6),), id="conv3d"),
    # transposed: the INPUT's spatial size replaces the output's
    pytest.param(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
                 (_r(2, 4, 7, 7),), id="conv-transpose"),
    pytest.param(nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), (_r(2, 4, 7, 7),),
                 id="conv-transpose-grouped"),
    # B*M*K*N
    pytest.param(Fn(torch.matmul), (_r(2, 3, 4, 5), _r(2, 3, 5, 6)), id="matmul-4d"),
    pytest.param(Fn(torch.baddbmm), (_r(3, 4, 6), _r(3, 4, 5), _r(3, 5, 6)), id="baddbmm"),
    pytest.param(Fn(lambda a, b: torch.einsum("bij,bjk->bik", a, b)), (_r(3, 4, 5), _r(3, 5, 6)),
                 id="einsum"),
    # B*H*Sq*Sk*(Dq + Dv), also with Sq != Sk and Dq != Dv; causal masks are not discounted
    pytest.param(Fn(nn.functional.scaled_dot_product_attention),
                 (_r(2, 3, 7, 8), _r(2, 3, 9, 8), _r(2, 3, 9, 16)), id="sdpa-cross"),
    pytest.param(Fn(lambda q, k, v: nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True)), (_r(2, 3, 7, 8), _r(2, 3, 7, 8), _r(2, 3, 7, 8)),
        id="sdpa-causal"),
    pytest.param(nn.GRU(8, 16), (_r(5, 2, 8),), id="gru"),
]


@pytest.mark.parametrize("model,args", SMALL)
def test_small_module_macs_match_flop_counter(model: nn.Module, args: tuple[Any, ...]) -> None:
    tr = trace(model.eval(), args)
    ref = reference_flops(model, args)
    assert ref > 0
    assert 2 * tr.total_macs == ref


def test_lstm_macs_counted() -> None:
    t, b, i, h = 5, 2, 8, 16
    lstm = nn.LSTM(i, h, batch_first=True)
    tr = trace(lstm, torch.randn(b, t, i))  # (B, T, I)
    # 4 gates, each an input (I -> H) and a hidden (H -> H) projection per step:
    assert tr.total_macs == t * b * 4 * h * (i + h)  # 15,360


def _rnn_macs(gates: int, t: int, b: int, i: int, h: int, layers: int, dirs: int) -> int:
    """Every token of every layer and direction: gates x (input -> H and H -> H) projections;
    layers above the first take the concatenated directions (dirs x H) as input."""
    per_token = sum(dirs * gates * h * ((i if layer == 0 else dirs * h) + h)
                    for layer in range(layers))
    return t * b * per_token


@pytest.mark.parametrize(("cls", "gates"), [(nn.LSTM, 4), (nn.GRU, 3), (nn.RNN, 1)])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_macs_equal_the_analytic_count(cls: type[nn.Module], gates: int,
                                                 bidirectional: bool) -> None:
    t, b, i, h, layers = 7, 3, 12, 20, 2
    rnn = cls(i, h, layers, batch_first=True, bidirectional=bidirectional)
    tr = trace(rnn, torch.randn(b, t, i))  # (B, T, I)
    assert tr.total_macs == _rnn_macs(gates, t, b, i, h, layers, 2 if bidirectional else 1)


# ---- Trace queries -----------------------------------------------------------------------

def test_by_module_attributes_ops_to_dotted_paths(tv_models: dict[str, nn.Module]) -> None:
    tr = trace(tv_models["resnet18"], torch.zeros(IMAGE))
    by_mod = tr.by_module()
    # layer1.0.conv1: 3x3, 64 -> 64 channels on 56x56: N*H*W*C_out*C_in*k*k
    assert by_mod["layer1.0.conv1"].macs == 1 * 56 * 56 * 64 * 64 * 3 * 3  # 115,605,504
    assert by_mod["layer1.0.conv1"].count == 1
    assert by_mod["fc"].macs == 512 * 1000
    assert by_mod["layer1.0"].count == 1  # the residual add_ is the block's own op
    assert {"conv1", "bn1", "layer4.1.bn2", "layer2.0.downsample.0", "avgpool"} <= set(by_mod)
    assert sum(s.macs for s in by_mod.values()) == tr.total_macs
    top = tr.by_module(depth=1)
    assert top["layer3"].macs == sum(r.macs for r in tr.records
                                     if r.module_path.startswith("layer3."))
    assert {"conv1", "layer1", "layer2", "layer3", "layer4", "fc"} <= set(top)
    assert not any("." in k for k in top)


def test_by_operator_aggregates_counts(tv_models: dict[str, nn.Module]) -> None:
    tr = trace(tv_models["resnet18"], torch.zeros(IMAGE))
    ops = tr.by_operator()
    # resnet18: 1 stem conv + 8 blocks x 2 convs + 3 downsample convs = 20, one BN after each;
    # ReLU: 1 stem + 2 per block = 17; one residual add per block = 8; one fc
    assert ops["aten.convolution.default"].count == 20
    assert ops["aten.native_batch_norm.default"].count == 20
    assert ops["aten.relu_.default"].count == 17
    assert ops["aten.add_.Tensor"].count == 8
    assert ops["aten.addmm.default"].count == 1
    assert sum(s.count for s in ops.values()) == tr.n_ops
    assert sum(s.launches for s in ops.values()) == tr.n_launches
    assert sum(s.macs for s in ops.values()) == tr.total_macs
    assert next(iter(ops)) == "aten.convolution.default"  # sorted by MACs, most first


def test_unsupported_ops_empty_for_resnet18(tv_models: dict[str, nn.Module]) -> None:
    assert trace(tv_models["resnet18"], torch.zeros(IMAGE)).unsupported_ops() == {}


def test_batch_argument_scales_macs_linearly(tv_models: dict[str, nn.Module]) -> None:
    model, x = tv_models["resnet18"], torch.zeros(IMAGE)
    one, four = trace(model, x, batch=1), trace(model, x, batch=4)
    assert (one.batch, four.batch) == (1, 4)
    assert four.total_macs == 4 * one.total_macs
    assert four.n_launches == one.n_launches  # eager launches do not depend on the batch
    assert four.records[0].input_shapes[0] == (4, 3, 224, 224)


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX2"),
                    reason="oneDNN's channel block is known for AVX-512 and AVX2 CPUs")
def test_a_convolution_off_onednns_channel_block_has_a_variant_of_its_own() -> None:
    """Traced convolutions say whether oneDNN's blocked kernels cover their channels: 16 fp32
    channels with AVX-512, 8 with AVX2 (multiples of 16 are aligned on both)."""
    block = 16 if torch.backends.cpu.get_cpu_capability() == "AVX512" else 8

    def variants(model: nn.Module, channels: int) -> list[str]:
        tr = trace(model.eval(), torch.zeros(1, channels, 56, 56))
        return [r.variant for r in tr.records if r.op_class in ("conv", "conv_grouped")]

    for c in (16, 32, 48, 64, 96):  # depthwise, then a 1x1 into 64 channels
        assert variants(nn.Conv2d(c, c, 3, padding=1, groups=c), c) == ["mkldnn"]
        assert variants(nn.Conv2d(c, 64, 1), c) == ["mkldnn"]
    for c in (block // 2 + block * 2, block * 4 + 4):  # e.g. 40, 68
        assert variants(nn.Conv2d(c, c, 3, padding=1, groups=c), c) == ["mkldnn_unaligned"]
        assert variants(nn.Conv2d(c, 64, 1), c) == ["mkldnn_unaligned"]
        assert variants(nn.Conv2d(64, c, 1), 64) == ["mkldnn_unaligned"]
    assert variants(nn.Conv2d(3, 64, 7, 2, 3), 3) == ["mkldnn_unaligned"]  # an RGB stem


def test_a_convolutions_backend_is_selected_for_the_thread_count_it_is_traced_for(
        tiny_profile: HardwareProfile) -> None:
    """PyTorch runs an unstrided 1x1 convolution at batch below 16 on oneDNN with several
    threads and on its own kernel with one; a trace records the backend of the thread count it
    is made for (a Predictor: its profile's), whatever count the calling process has set."""
    from ftmodel.api import Predictor
    from ftmodel.tracing.variants import backend_threads

    model, x = nn.Conv2d(16, 32, 1).eval(), torch.zeros(8, 16, 16, 16)

    def variant() -> str:
        return next(r.variant for r in trace(model, x).records if r.op_class == "conv")

    one = replace(tiny_profile, host=replace(tiny_profile.host, threads=1))
    own = torch.get_num_threads()
    for process in (1, 2):
        torch.set_num_threads(process)
        assert variant() == ("slow2d" if process == 1 else "mkldnn")
        for threads, backend in ((1, "slow2d"), (2, "mkldnn")):
            with backend_threads(threads):
                assert variant() == backend
            assert torch.get_num_threads() == process  # left as it was
        assert Predictor("eager", one).threads == 1
        for prof, backend in ((one, "slow2d"), (tiny_profile, "mkldnn")):
            tr = Predictor("eager", prof).trace(model, x, 8)
            assert [r.variant for r in tr.records if r.op_class == "conv"] == [backend]
    torch.set_num_threads(own)



@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX2"),
                    reason="oneDNN's grouped kernels are known for AVX-512 and AVX2 CPUs")
def test_grouped_convolutions_onednn_runs_as_gemms_have_a_variant_of_their_own(
        capfd: pytest.CaptureFixture[str]) -> None:
    """A grouped convolution that is not depthwise and whose channels per group are off what
    oneDNN's direct grouped kernels take runs as im2col and a GEMM per group: the traced variant
    says so exactly where oneDNN, asked for its verbose log, names that implementation."""
    from ftmodel.tracing.variants import grouped_runs_gemm

    cases = [(48, 96, 48), (48, 96, 24), (64, 64, 32), (96, 96, 16), (128, 128, 32),
             (48, 48, 48), (24, 72, 24), (192, 192, 8), (36, 36, 12), (64, 128, 2)]
    for c_in, c_out, groups in cases:
        conv = nn.Conv2d(c_in, c_out, 3, padding=1, groups=groups, bias=False).eval()
        x = torch.randn(1, c_in, 8, 8)
        with torch.no_grad():
            conv(x)
            capfd.readouterr()
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                conv(x)
        impls = [line.split(",")[6] for line in capfd.readouterr().out.splitlines()
                 if ",exec,cpu,convolution," in line]
        if not impls:
            pytest.skip("this build's oneDNN does not log its primitives")
        tr = trace(conv, x)
        (variant,) = [r.variant for r in tr.records if r.op_class.startswith("conv")]
        on_gemm = impls[0].startswith("x64:gemm")
        assert grouped_runs_gemm(c_in, c_out, groups) == on_gemm, (c_in, c_out, groups, impls)
        assert (variant == "mkldnn_gemm") == on_gemm, (c_in, c_out, groups, variant)


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX2"),
                    reason="the vector width is known for AVX-512 and AVX2 CPUs")
def test_im2col_convolutions_with_few_output_pixels_are_narrow() -> None:
    """Eager's im2col convolution (``slow2d``) whose per-image GEMM has 2 to one vector's worth
    minus one output pixels on a contiguous map is ``slow2d_narrow``; one pixel, a full vector
    of them, or a channels-last map is not."""
    from ftmodel.tracing.variants import NARROW_GEMM, channels_last_conv_variant, conv_variant

    block = 16 if torch.backends.cpu.get_cpu_capability() == "AVX512" else 8
    cases = [((1, 64, 2, 2), 3, 1, True), ((1, 64, 3, 3), 3, 1, block > 9),
             ((1, 64, 1, 1), 3, 1, False), ((1, 64, 4, 4), 3, 1, block > 16),
             ((1, 64, 6, 6), 3, 2, block > 9), ((1, 64, 8, 8), 3, 2, False),
             ((1, 64, 2, 2), 1, 1, True)]
    for shape, k, stride, narrow in cases:
        x, w = torch.randn(*shape), torch.randn(32, shape[1], k, k)
        args = (x, w, None, (stride, stride), (k // 2, k // 2), (1, 1), False, (0, 0), 1)
        variant = conv_variant(args)
        if not variant.startswith("slow2d"):
            pytest.skip(f"this build runs {shape} on {variant}, not im2col")
        assert (variant == "slow2d" + NARROW_GEMM) == narrow, (shape, k, stride, variant)
        assert NARROW_GEMM not in channels_last_conv_variant(args)


def test_a_convolution_on_channels_last_tensors_is_its_own_variant() -> None:
    """Inductor runs 2-d convolutions on channels-last tensors, for which oneDNN picks other
    kernels: their variant says so; 1-d convolutions, which inductor leaves contiguous, keep
    the contiguous call's."""
    from ftmodel.tracing.variants import NHWC, channels_last_conv_variant, conv_variant

    x, w = torch.randn(1, 16, 8, 8), torch.randn(32, 16, 3, 3)
    args = (x, w, None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    cl_args = (x.contiguous(memory_format=torch.channels_last),
               w.contiguous(memory_format=torch.channels_last), *args[2:])
    assert channels_last_conv_variant(args) == conv_variant(cl_args) + NHWC
    assert conv_variant(args) and not conv_variant(args).endswith(NHWC)
    one_d = (torch.randn(1, 16, 32), torch.randn(32, 16, 3), None, (1,), (1,), (1,), False,
             (0,), 1)
    assert channels_last_conv_variant(one_d) == conv_variant(one_d)
