"""TorchScript lowering: counts of the frozen, optimized graph on small modules."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from torch import nn

import ftmodel
from ftmodel.api import Predictor
from ftmodel.calibration.mkldnn_layout import LAYOUT_CURVES
from ftmodel.errors import FrameworkUnsupported
from ftmodel.estimate.kernels import DeviceModel
from ftmodel.frameworks import torchscript as ts
from ftmodel.frameworks import torchscript_graph as ts_graph
from ftmodel.frameworks.base import get_framework
from ftmodel.hardware.profile import HardwareProfile, OpClassData
from ftmodel.program import Kernel
from ftmodel.tracing.prepacked_variants import PLAIN_INPUT, PREPACKED_VARIANTS
from ftmodel.tracing.variants import (PADDED_REORDER, REF_ELTWISE, blocked_eltwise_variant,
                                      grouped_runs_gemm, padded_reorder_variant,
                                      prepacked_reorders_weights)

IN, HID, OUT = 16, 32, 8


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT)).eval()


def _build(model: nn.Module, x: torch.Tensor, batch: int) -> ts.TsArtifact:
    return ts.build(model, x, batch, ftmodel.trace(model, x, batch))


def test_registry_entry_is_legacy() -> None:
    fw = get_framework("jit")
    assert fw.name == "torchscript" and fw.legacy
    assert fw.lower_model is not None and fw.runner is not None


def test_mlp_counts() -> None:
    b = 4
    prog = _build(_mlp(), torch.randn(1, IN), b).program
    # freezing turns each Linear into matmul (pre-transposed weight) + bias add:
    # n_launches = 2 Linear × (matmul + add) + 1 ReLU = 5
    assert prog.n_launches == 2 * 2 + 1
    assert prog.host_events["kernel:gemm"] == 2 and prog.host_events["kernel:elementwise"] == 3
    assert "module_call" not in prog.host_events  # the frozen graph has no module calls
    # MACs = b·16·32 + b·32·8, as eager
    assert prog.macs == b * IN * HID + b * HID * OUT
    gemm = prog.kernels[0]
    # bytes: x (b·16) + W (16·32) in, y (b·32) out, fp32; W is a frozen constant (weights)
    assert (gemm.bytes_read, gemm.bytes_written) == (4 * (b * IN + IN * HID), 4 * b * HID)
    assert gemm.bytes_weights == 4 * IN * HID
    assert [k.module_path for k in prog.kernels] == ["0", "0", "1", "2", "2"]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs MKLDNN (CPU)")
def test_cnn_counts_with_mkldnn_conversion() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 8 * 8, 4)).eval()
    x, b = torch.randn(1, 3, 8, 8), 2
    prog = _build(model, x, b).program
    kinds = [k.members[0] for k in prog.kernels]
    # optimize_for_inference on the CPU: BN folds into the conv, the conv runs in MKLDNN layout
    # n_launches = to_mkldnn + conv + relu_ + to_dense + (matmul + add) = 6
    assert kinds == ["aten::to_mkldnn", "prim::mkldnn_convolution", "aten::relu_",
                     "aten::to_dense", "aten::matmul", "aten::add"]
    assert prog.host_events["view"] == 1  # flatten of a contiguous tensor
    # conv MACs = b·8·8·8·3·9; linear MACs = b·512·4
    assert prog.kernels[1].macs == b * 8 * 8 * 8 * 3 * 9
    assert prog.macs == b * 8 * 8 * 8 * 3 * 9 + b * 512 * 4
    assert prog.kernels[1].module_path == "0" and prog.kernels[4].module_path == "4"
    # only the ReLU reads a blocked (oneDNN-layout) tensor: it alone takes that variant; the
    # reorders are found by their op, the linear layer's kernels read the dense result
    assert [k.variant for k in prog.kernels][2] == ts_graph.BLOCKED_VARIANT
    assert [k.variant == ts_graph.BLOCKED_VARIANT for k in prog.kernels] == [
        False, False, True, False, False, False]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs MKLDNN (CPU)")
def test_a_transcendental_op_on_a_blocked_tensor_keeps_its_own_curve() -> None:
    """GELU between two oneDNN convolutions reads a blocked tensor, as the ReLU after them does,
    but its time is its math: it keeps its op's variant and so its own curve, the ReLU takes
    the blocked-layout one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GELU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()).eval()
    prog = _build(model, torch.randn(1, 3, 8, 8), 1).program
    by_op = {k.members[0]: k.variant for k in prog.kernels}
    assert by_op["aten::gelu"] == "math"
    assert by_op["aten::relu_"] == ts_graph.BLOCKED_VARIANT


@pytest.mark.skipif(not blocked_eltwise_variant("sigmoid_", 12),
                    reason="oneDNN's channel block unknown on this CPU")
def test_a_sigmoid_on_a_convolutions_partly_filled_blocks_takes_onednns_reference_curve() -> None:
    """oneDNN runs a sigmoid on a convolution's blocked output with its reference code where
    the channels leave the last block part empty (12 channels: blocks of 8 or 16), its
    vectorised code where they fill it (48); a tanh keeps 0 at 0 and stays vectorised."""
    torch.manual_seed(0)
    variants = {}
    for channels in (12, 48):
        for act in (nn.Sigmoid(), nn.Tanh()):
            model = nn.Sequential(nn.Conv2d(3, channels, 1), act).eval()
            prog = _build(model, torch.randn(1, 3, 8, 8), 2).program
            (kernel,) = [k for k in prog.kernels if k.members[0].startswith(
                ("aten::sigmoid", "aten::tanh"))]
            variants[(channels, kernel.members[0].rstrip("_"))] = kernel.variant
    assert variants[(12, "aten::sigmoid")] == REF_ELTWISE
    assert variants[(48, "aten::sigmoid")] != REF_ELTWISE
    assert REF_ELTWISE not in (variants[(12, "aten::tanh")], variants[(48, "aten::tanh")])


def test_onednns_reference_sigmoid_is_priced_on_its_curve_or_as_the_ops_math(
        tiny_profile: HardwareProfile) -> None:
    """A profile with TorchScript's curve of reference-code sigmoids prices them on it; one
    calibrated before that curve prices them as the op's math, as before."""
    ref = Kernel("elementwise", 0, 200_704, 200_704, "",
                                 ("aten::sigmoid_",), variant=REF_ELTWISE)
    math = dataclasses.replace(ref, variant="math_inplace")
    base = tiny_profile.device
    curve = OpClassData("samples", tuple((0.0, float(n), float(n), 1e-3)
                                         for n in (4096, 65536, 1 << 20)))
    with_ref = dataclasses.replace(base, op_classes={
        **base.op_classes, f"torchscript/elementwise:{REF_ELTWISE}": curve})
    old = DeviceModel(base, framework="torchscript")
    assert old.kernel_times_s([ref])[0] == old.kernel_times_s([math])[0]
    assert DeviceModel(with_ref, framework="torchscript").kernel_times_s([ref])[0] == \
        pytest.approx(1e-3, rel=0.05)


@pytest.mark.skipif(not padded_reorder_variant(12),
                    reason="oneDNN's channel block unknown on this CPU")
def test_the_reorder_back_from_partly_filled_blocks_takes_its_own_variant() -> None:
    """A convolution's output of 12 channels (blocks of 8 or 16) leaves oneDNN's last block
    part empty: its reorder back to a dense tensor before the flatten takes the padded variant;
    of 48 channels it does not, nor does the reorder into the layout."""
    torch.manual_seed(0)
    variants = {}
    for channels in (12, 48):
        model = nn.Sequential(nn.Conv2d(3, channels, 1), nn.ReLU(), nn.Flatten()).eval()
        prog = _build(model, torch.randn(1, 3, 8, 8), 2).program
        for k in prog.kernels:
            if k.members[0] in ("aten::to_dense", "aten::to_mkldnn"):
                variants[(channels, k.members[0])] = k.variant
    assert variants[(12, "aten::to_dense")] == PADDED_REORDER
    assert variants[(48, "aten::to_dense")] == ""
    assert variants[(12, "aten::to_mkldnn")] == variants[(48, "aten::to_mkldnn")] == ""


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX2"),
                    reason="oneDNN's reorder kernels are known for AVX-512 and AVX2 CPUs")
def test_onednn_reorders_partly_filled_blocks_with_its_generic_kernel(
        capfd: pytest.CaptureFixture[str]) -> None:
    """oneDNN's verbose log: the reorder of a convolution's blocked output back to a dense
    tensor runs its blocked kernel (``jit:blk``) where the channels fill the last block and
    another one where ``padded_reorder_variant`` says they do not."""
    for channels in (8, 12, 16, 24, 48, 60, 64, 72):
        x = torch.randn(2, channels, 8, 8)
        w = torch.eye(channels).reshape(channels, channels, 1, 1).to_mkldnn()
        y = torch.mkldnn_convolution(x.to_mkldnn(), w, None, [0, 0], [1, 1], [1, 1], 1)
        capfd.readouterr()
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            y.to_dense()
        lines = [line for line in capfd.readouterr().out.splitlines()
                 if ",exec,cpu,reorder," in line and f",2x{channels}x8x8," in line]
        if not lines:
            pytest.skip("this build's oneDNN does not log its primitives")
        blocked_kernel = ",jit:blk," in lines[0]
        assert blocked_kernel == (padded_reorder_variant(channels) == ""), (channels, lines)


def test_a_padded_reorder_is_priced_on_its_curve_or_as_the_other_reorders(
        tiny_profile: HardwareProfile) -> None:
    """A profile with TorchScript's curve of padded reorders prices them on it; one calibrated
    before that curve prices them as the other reorders back to a dense tensor."""
    padded = Kernel("copy", 0, 200_704, 200_704, "", ("aten::to_dense",), variant=PADDED_REORDER)
    plain = dataclasses.replace(padded, variant="")
    base = tiny_profile.device
    curve = OpClassData("samples", tuple((0.0, float(n), float(n), t)
                                         for n, t in ((4096, 1e-4), (65536, 2e-4),
                                                      (1 << 20, 4e-4))))
    layout = {"torchscript/copy@to_dense": curve,
              f"torchscript/copy@to_dense:{PADDED_REORDER}": dataclasses.replace(
                  curve, samples=tuple((a, b, c, 3 * t) for a, b, c, t in curve.samples))}
    old = DeviceModel(dataclasses.replace(base, op_classes={
        **base.op_classes, "torchscript/copy@to_dense": curve}), framework="torchscript")
    assert old.kernel_times_s([padded])[0] == old.kernel_times_s([plain])[0]
    new = DeviceModel(dataclasses.replace(base, op_classes={**base.op_classes, **layout}),
                      framework="torchscript")
    assert new.kernel_times_s([padded])[0] == pytest.approx(
        3 * new.kernel_times_s([plain])[0], rel=0.05)


def test_a_convolution_reading_more_weights_than_input_takes_the_weight_bound_variant() -> None:
    """A late-stage 1x1 convolution on a 2-px map reads 1 MiB of weights and 8 KiB of input:
    it streams its weights, unlike the 16 -> 96 one on a 32-px map before it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 512, 1), nn.AdaptiveAvgPool2d(2),
                          nn.Conv2d(512, 512, 1)).eval()
    prog = _build(model, torch.randn(1, 16, 32, 32), 1).program
    convs = [k for k in prog.kernels if k.members[0] == "prim::mkldnn_convolution"]
    # the first on the plain input to_mkldnn made of the graph's input
    assert [k.variant for k in convs] == ["mkldnn_prepacked" + PLAIN_INPUT,
                                          "mkldnn_prepacked_weights"]
    assert all(k.variant in PREPACKED_VARIANTS for k in convs)


@pytest.mark.skipif(not grouped_runs_gemm(48, 96, 48),
                    reason="oneDNN's direct grouped kernels unknown on this CPU")
def test_a_grouped_convolution_onednn_runs_as_gemms_takes_its_own_variant() -> None:
    """As eager's: 48 -> 96 channels in 48 groups (two outputs per group) runs as im2col and
    GEMMs, several times slower per MAC than the depthwise 48 -> 48 beside it, whose variant
    stays the prepacked one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(48, 48, 3, padding=1, groups=48),
                          nn.Conv2d(48, 96, 7, padding=3, groups=48)).eval()
    prog = _build(model, torch.randn(1, 48, 8, 8), 2).program
    convs = [k.variant for k in prog.kernels if k.members[0] == "prim::mkldnn_convolution"]
    assert convs == ["mkldnn_prepacked" + PLAIN_INPUT, "mkldnn_prepacked_gemm"]


def test_prepacked_convolutions_carry_their_per_call_weight_copy() -> None:
    """A dense and a depthwise prepacked convolution copy their weights on every call
    (``Kernel.bytes_scratch``: the weight tensor's bytes, bias apart); a grouped one whose
    groups the direct kernels take as prepacked copies nothing; other kernels nothing."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(64, 64, 3, padding=1, groups=64),
                          nn.Conv2d(64, 64, 3, padding=1, groups=8)).eval()
    prog = _build(model, torch.randn(1, 32, 8, 8), 2).program
    convs = [k for k in prog.kernels if k.members[0] == "prim::mkldnn_convolution"]
    assert [k.bytes_scratch for k in convs[:2]] == [4 * 64 * 32 * 9, 4 * 64 * 9]
    assert convs[2].bytes_scratch == (4 * 64 * 8 * 9 if prepacked_reorders_weights(64, 64, 8)
                                      else 0)
    assert all(k.bytes_scratch == 0 for k in prog.kernels if k not in convs)


def test_every_weight_copy_is_recorded_whatever_its_size() -> None:
    """A 1024 -> 1024 3x3 convolution's 36 MiB copy is recorded like a 512 -> 512 one's 9 MiB
    one (whether glibc maps it is the allocator's business); a 1x1 one copies too."""
    model = nn.Sequential(nn.Conv2d(1024, 1024, 3, padding=1, bias=False),
                          nn.Conv2d(1024, 512, 1, bias=False),
                          nn.Conv2d(512, 512, 3, padding=1, bias=False)).eval()
    prog = _build(model, torch.randn(1, 1024, 2, 2), 1).program
    convs = [k for k in prog.kernels if k.members[0] == "prim::mkldnn_convolution"]
    assert [k.bytes_scratch for k in convs] == [4 * 1024 * 1024 * 9, 4 * 512 * 1024,
                                                4 * 512 * 512 * 9]


def _onednn_log(run: Callable[[], object], capfd: pytest.CaptureFixture[str]) -> list[str]:
    """oneDNN's verbose log of one call of ``run`` after a warm one (the test is skipped where
    this build's oneDNN logs no primitives)."""
    with torch.no_grad():
        run()
        capfd.readouterr()
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            run()
    lines = capfd.readouterr().out.splitlines()
    if not any(",exec,cpu,convolution," in line for line in lines):
        pytest.skip("this build's oneDNN does not log its primitives")
    return lines


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX2"),
                    reason="oneDNN's grouped kernels are known for AVX-512 and AVX2 CPUs")
def test_which_prepacked_convolutions_reorder_their_weights_every_call(
        capfd: pytest.CaptureFixture[str]) -> None:
    """oneDNN's verbose log of one call of a frozen graph shows a reorder of the convolution's
    weights (their dims: out x in x kh x kw, or groups x out x in x kh x kw) exactly where
    ``prepacked_reorders_weights`` says it copies them: dense, depthwise and GEMM-run grouped
    convolutions, and grouped ones depending on their channels per group."""
    cases = [(64, 64, 1), (64, 64, 64), (256, 256, 32), (256, 256, 8), (384, 384, 192),
             (768, 768, 48), (768, 768, 32), (96, 96, 8)]
    for c_in, c_out, groups in cases:
        model = nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, groups=groups)).eval()
        x = torch.randn(1, c_in, 8, 8)
        lines = _onednn_log(ts.runner(model, (x,), 1), capfd)
        per_in, per_out = c_in // groups, c_out // groups
        dims = (f"{c_out}x{c_in}x3x3" if groups == 1
                else f"{groups}x{per_out}x{per_in}x3x3")
        reordered = any(",exec,cpu,reorder," in line and f",{dims}," in line for line in lines)
        assert prepacked_reorders_weights(c_in, c_out, groups) == reordered, (
            c_in, c_out, groups, [line for line in lines if ",reorder," in line])


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs MKLDNN (CPU)")
def test_convolutions_on_a_plain_input_are_those_onednn_reorders_the_input_of(
        capfd: pytest.CaptureFixture[str]) -> None:
    """oneDNN's verbose log of one call of a frozen graph shows a reorder of a convolution's
    input from the plain layout (``abcd``) into a blocked one exactly for the convolutions the
    lowering gives the plain-input variant: the first (after to_mkldnn of the graph's input)
    and the one after a SiLU (run on a dense tensor between to_dense and to_mkldnn), not those
    after a ReLU, a GELU or a sigmoid (run on the blocked tensor)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.SiLU(), nn.Conv2d(32, 48, 1),
                          nn.ReLU(), nn.Conv2d(48, 64, 3, padding=1), nn.GELU(),
                          nn.Conv2d(64, 64, 1), nn.Sigmoid(),
                          nn.Conv2d(64, 64, 3, padding=1, groups=64)).eval()
    x = torch.randn(2, 16, 8, 8)
    convs = [k for k in _build(model, x, 2).program.kernels
             if k.members[0] == "prim::mkldnn_convolution"]
    plain = [k.variant.endswith(PLAIN_INPUT) for k in convs]
    assert plain == [True, True, False, False, False]
    assert all(k.variant in PREPACKED_VARIANTS for k in convs)
    lines = _onednn_log(ts.runner(model, (x,), 2), capfd)
    # the activations reordered from the plain layout into a blocked one (not to_mkldnn's
    # plain-to-plain copy of the graph's input)
    reordered = {line.split(",")[-2] for line in lines if ",exec,cpu,reorder," in line
                 and "src:f32::blocked:abcd::" in line and "dst:f32::blocked:abcd::" not in line}
    inputs = [f"2x{c}x8x8" for c in (16, 32, 48, 64, 64)]
    assert [dims in reordered for dims in inputs] == plain, reordered


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs MKLDNN (CPU)")
def test_blocked_layout_curves_price_the_reorders(tiny_profile: HardwareProfile) -> None:
    """A TorchScript CNN's reorders and blocked ReLU take TorchScript's own oneDNN-layout
    curves where the profile has them, and their time grows by what those curves hold."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 4)).eval()
    prog = _build(model, torch.randn(1, 3, 8, 8), 1).program
    base = tiny_profile.device
    # a fixed 10 µs per call at every size, far above any shared copy or ReLU sample here
    fixed = OpClassData("samples", tuple((0.0, float(n), float(n), 10e-6)
                                         for n in (256, 4096, 65536, 1 << 20)))
    with_layout = dataclasses.replace(base, op_classes={
        **base.op_classes, **{f"torchscript/{c}": fixed for c in LAYOUT_CURVES}})
    before = DeviceModel(base, framework="torchscript").kernel_times_s(prog.kernels)
    after = DeviceModel(with_layout, framework="torchscript").kernel_times_s(prog.kernels)
    layout = [i for i, k in enumerate(prog.kernels)
              if k.members[0] in ("aten::to_mkldnn", "aten::to_dense")
              or k.variant == ts_graph.BLOCKED_VARIANT]
    assert len(layout) == 3
    for i in range(len(prog.kernels)):
        if i in layout:
            assert after[i] >= 9e-6 > before[i]
        else:
            assert after[i] == before[i]


def test_fusion_group_is_one_kernel() -> None:
    # NNC fusion is off on the CPU (and needs LLVM to run), so build the group with the pass
    g = torch._C.parse_ir("""
graph(%x : Float(4, 16, strides=[16, 1], requires_grad=0, device=cpu),
      %w : Float(16, 8, strides=[8, 1], requires_grad=0, device=cpu)):
  %y : Float(4, 8, strides=[8, 1], requires_grad=0, device=cpu) = aten::mm(%x, %w)
  %t : Float(4, 8, strides=[8, 1], requires_grad=0, device=cpu) = aten::tanh(%y)
  %z : Float(4, 8, strides=[8, 1], requires_grad=0, device=cpu) = aten::mul(%t, %t)
  %s : Float(4, 8, strides=[8, 1], requires_grad=0, device=cpu) = aten::sigmoid(%z)
  return (%s)
""")
    old = torch._C._jit_can_fuse_on_cpu()
    torch._C._jit_override_can_fuse_on_cpu(True)
    try:
        torch._C._jit_pass_fuse_tensorexprs(g)
    finally:
        torch._C._jit_override_can_fuse_on_cpu(old)
    assert "prim::TensorExprGroup" in str(g)
    prog = ts.lower_graph(g, (torch.randn(4, 16), torch.randn(16, 8)), frozenset({""}),
                          batch=4)
    # mm + one group for tanh·mul·sigmoid = 2 kernels; the type guard and If are instructions
    assert prog.n_launches == 2
    group = prog.kernels[1]
    assert group.members == ("prim::TensorExprGroup", "aten::tanh", "aten::mul", "aten::sigmoid")
    assert (group.bytes_read, group.bytes_written) == (4 * 4 * 8, 4 * 4 * 8)  # boundary only
    assert prog.kernels[0].macs == 4 * 16 * 8
    assert prog.host_events["jit_node"] == 2


def test_fft_runs_under_torchscript() -> None:
    # TorchScript runs FFTs (ordinary aten ops); only the ONNX path rejects them
    class Mix(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real

    prog = _build(Mix().eval(), torch.randn(2, 4, 8), 2).program
    assert [k.members[0] for k in prog.kernels].count("aten::fft_fft") == 2


def test_data_dependent_control_flow_unsupported() -> None:
    class Gate(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.relu() if x.sum() > 0 else -x

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.gate = Gate()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gate(self.proj(x))

    model, x = Net().eval(), torch.randn(2, 4)
    with pytest.raises(FrameworkUnsupported) as err:
        ts.lower_model(model, x, 2, ftmodel.trace(model, x, 2))
    assert err.value.framework == "torchscript" and err.value.module == "gate"
    assert "data-dependent" in str(err.value)


def test_runner_and_cache() -> None:
    model, x = _mlp(), torch.randn(3, IN)
    ts.CACHE.clear()
    p1 = ts.lower_model(model, x, 3)
    assert ts.lower_model(model, x, 3) is p1
    out = ts.runner(model, x, 3)()
    with torch.no_grad():
        torch.testing.assert_close(out[0], model(x))  # type: ignore[index]


class _PadToWindow(nn.Module):
    """Swin's window padding: Python arithmetic on sizes, which a trace records as tensor ops
    on ``prim::NumToTensor`` values (``aten::remainder``, ``aten::rsub``, ``aten::pow``)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(12, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = x.shape[1]
        pad = (7 - w % 7) % 7
        x = nn.functional.pad(x, (0, 0, 0, pad))
        return self.proj(x) * x.shape[-1] ** -0.5


def test_size_arithmetic_keeps_shapes() -> None:
    torch.manual_seed(0)
    model, x, b = _PadToWindow().eval(), torch.randn(1, 10, 12), 2
    tr = ftmodel.trace(model, x, b)
    prog = _build(model, x, b).program
    assert not prog.warnings  # every node evaluated on fake tensors
    # the padded sequence is 14 long: MACs = b·14·12·12, as eager counts them
    assert prog.macs == get_framework("eager").lower(tr).macs == b * 14 * 12 * 12
    # the size arithmetic runs as ops on 0-d tensors: kernels, not interpreter instructions
    scalar_ops = [k for k in prog.kernels if k.members[0] in ("aten::remainder", "aten::rsub")]
    assert len(scalar_ops) == 3 and all(k.bytes_read == 0 for k in scalar_ops)
    # on a GPU profile (the traced graph, counted without a GPU) the shapes hold too
    cuda = ts.lower_model(model, x, b, tr, device="cuda")
    assert not cuda.warnings and cuda.macs == prog.macs


def test_recurrent_nodes_count_the_kernels_aten_runs() -> None:
    torch.manual_seed(0)
    # a GRU runs its cell ops step by step, an LSTM one oneDNN kernel per layer and direction
    for rnn in (nn.GRU(8, 16, 2, bidirectional=True), nn.LSTM(8, 16, 2)):
        model, x, b = rnn.eval(), torch.randn(5, 1, 8), 1
        tr = ftmodel.trace(model, x, b)
        ref = get_framework("eager").lower(tr)
        prog = _build(model, x, b).program
        # the node's kernels, as eager records them (the initial states' zeros aside: the
        # frozen graph shares one between h0 and c0)
        ours = [k for k in prog.kernels if k.members[-1] in ("aten::gru", "aten::lstm")]
        theirs = [k for k in ref.kernels if k.members[0] != "aten.zeros.default"]
        assert [(k.op_class, k.members[0], k.inner) for k in ours] == [
            (k.op_class, k.members[0], k.inner) for k in theirs]
        assert prog.macs == ref.macs and any(k.inner for k in ours)
        rec = [k for k in prog.kernels if "steps=" in k.variant]
        # the frozen weights are still weights: a step re-reads them (the step curves' premise)
        assert all(k.bytes_weights > 0 for k in rec)
        assert [k.bytes_weights for k in rec] == [k.bytes_weights for k in ref.kernels
                                                  if "steps=" in k.variant]


def test_tracing_a_hugging_face_model_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    # torch.jit.trace reads the modules' attributes; transformers logs a loss_type notice then
    transformers = pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging
    hf_logging.get_logger("x").warning_once.cache_clear()  # warning_once: once per process
    cfg = transformers.T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
                                vocab_size=100)
    model = transformers.T5EncoderModel(cfg).eval()
    capfd.readouterr()
    p = ftmodel.predict_latency(model, "torchscript", "a100", 2,
                                inputs=lambda b: {"input_ids": torch.randint(0, 100, (b, 16))})
    assert p.n_launches > 0
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out[:200], err[:300])


def test_a_profile_without_the_layout_curves_says_so(tiny_profile: HardwareProfile) -> None:
    """A CPU profile with TorchScript curves of its own but not the oneDNN-layout ones was
    calibrated before them: predictions warn and name the command that adds them."""
    curve = OpClassData("samples", tuple((0.0, float(n), float(n), 1e-6) for n in (256, 4096,
                                                                                  65536)))
    base = tiny_profile.device.op_classes
    assert tiny_profile.host is not None
    eager = tiny_profile.host.frameworks["eager"]
    tiny_profile = dataclasses.replace(tiny_profile, host=dataclasses.replace(
        tiny_profile.host, frameworks={"eager": eager, "torchscript": eager}))

    def with_curves(*keys: str) -> HardwareProfile:
        device = dataclasses.replace(tiny_profile.device, op_classes={
            **base, **{f"torchscript/{k}": curve for k in keys}})
        return dataclasses.replace(tiny_profile, device=device)

    old = Predictor("torchscript", with_curves("conv@mkldnn_convolution"))
    assert any("copy@to_mkldnn" in w and "--update" in w for w in old.warnings)
    current = Predictor("torchscript", with_curves(
        "conv@mkldnn_convolution", *ts_graph.LAYOUT_CURVES))
    assert not any("calibrated before" in w for w in current.warnings)
    # a profile without any TorchScript curves of its own gets no such warning (it prices every
    # TorchScript kernel on the shared curves, as its docs say)
    assert not any("calibrated before" in w
                   for w in Predictor("torchscript", tiny_profile).warnings)


def test_a_dense_max_pool_runs_with_indices_and_a_blocked_one_as_one_node() -> None:
    """A frozen graph's max pool on a dense tensor is ATen's with-indices kernel (what
    torch.profiler shows under it), counted as eager counts it, indices written; one on a
    convolution's blocked output is oneDNN's pooling, one node. Both carry their window
    reads."""
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pool = nn.functional.max_pool2d
            blocked = pool(self.conv(x), 3, 1, 1)
            dense = pool(x * 2.0, 3, 1, 1)
            return blocked.flatten(1).sum(1) + dense.flatten(1).sum(1)

    prog = _build(Net().eval(), torch.randn(1, 16, 8, 8), 1).program
    pools = [k for k in prog.kernels if k.op_class == "pool"]
    assert sorted(k.members for k in pools) == [
        ("aten.max_pool2d_with_indices.default", "aten::max_pool2d"), ("aten::max_pool2d",)]
    dense = next(k for k in pools if len(k.members) == 2)
    assert dense.variant == "" and dense.bytes_written == 3 * dense.bytes_read  # out + int64
    assert dense.bytes_window_reads > dense.bytes_read
    assert all(k.bytes_window_reads > 0 for k in pools)
