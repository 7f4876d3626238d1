"""A fused attention kernel's head dimension as its variant (ftmodel.tracing.attention_variants),
and the curves calibration and predictions give it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ftmodel.frameworks import eager
from ftmodel.hardware.profile import OpClassData
from ftmodel.tracing.attention_variants import attention_variant, head_dim_variant
from ftmodel.tracing.dispatch import trace


@pytest.mark.parametrize(("head_dim", "variant"), [
    (8, "head16"), (16, "head16"), (20, "head16"), (24, "head32"), (32, "head32"),
    (40, "head32"), (48, "head64"), (64, "head64"), (128, "head64"), (0, "")])
def test_a_head_takes_the_sampled_dimension_nearest_on_a_log_scale(head_dim: int,
                                                                     variant: str) -> None:
    assert head_dim_variant(head_dim) == variant


def test_only_fused_attention_on_four_dimensional_inputs_has_a_head_variant() -> None:
    q = torch.empty(2, 4, 8, 16)
    assert attention_variant("_scaled_dot_product_flash_attention_for_cpu", (q, q, q)) == "head16"
    assert attention_variant("_native_multi_head_attention", (q, q, q)) == ""
    assert attention_variant("_scaled_dot_product_flash_attention_for_cpu",
                             (torch.empty(4, 8, 16),)) == ""


class _Attend(nn.Module):
    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = x.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q)


@pytest.mark.parametrize(("heads", "variant"), [(4, "head16"), (2, "head32"), (1, "head64")])
def test_eager_attention_kernels_carry_their_head_dimension(heads: int, variant: str) -> None:
    prog = eager.lower(trace(_Attend(heads).eval(), (torch.randn(2, 32, 64),)))
    attn = [k for k in prog.kernels if k.op_class == "attention"]
    assert [k.variant for k in attn] == [variant]


def test_a_torchscript_graphs_attention_node_carries_its_head_dimension() -> None:
    from ftmodel.frameworks.base import get_framework

    xs = (torch.randn(2, 32, 64),)
    model = _Attend(4).eval()
    prog = get_framework("torchscript").program(model, xs, 2, trace(model, xs), device="cpu",
                                                dtype="fp32")
    assert [k.variant for k in prog.kernels if k.op_class == "attention"] == ["head16"]


def test_calibration_gives_each_head_dimension_a_curve_of_its_own() -> None:
    from ftmodel.calibration.ops import CPU_GRID, op_samples
    from ftmodel.calibration.sweep_stage import ClassTimes, class_curves, grouped_curves

    samples = op_samples(True, CPU_GRID)["attention"]
    dims = sorted({s.inputs[0].shape[-1] for s in samples if not s.is_floor})
    assert dims == [16, 32, 64]
    # three samples a head dimension, each timed in proportion to its MACs
    full = [s for s in op_samples(False, CPU_GRID)["attention"] if not s.is_floor]
    picked = [s for d in dims for s in [x for x in full if x.inputs[0].shape[-1] == d][:3]]
    floor = next(s for s in samples if s.is_floor)
    hot = {floor.label: (1e-6, 0.0)} | {s.label: (1e-5 * (i + 1), 0.0)
                                         for i, s in enumerate(picked)}
    data, _, variants = class_curves([floor, *picked], [ClassTimes(hot, {})], "cpu")
    curves = grouped_curves("attention:", data, variants)
    assert set(curves) == {"attention:head16", "attention:head32", "attention:head64"}
    assert all(isinstance(c, OpClassData) and len(c.samples) == 3 for c in curves.values())


def test_an_attention_kernel_is_priced_on_its_head_dimensions_curve() -> None:
    from dataclasses import replace

    from ftmodel.estimate.kernels import DeviceModel
    from ftmodel.hardware.profile import DeviceProfile
    from ftmodel.program import Kernel

    def curve(ns_per_mac: float) -> OpClassData:
        return OpClassData("samples", tuple((m, m / 8.0, m / 32.0, m * ns_per_mac * 1e-9)
                                            for m in (1e5, 1e6, 1e7, 1e8)))

    dev = DeviceProfile(name="d", type="cpu", execution="sync",
                        op_classes={"attention": curve(0.05), "attention:head16": curve(0.2)})
    dm = DeviceModel(dev)
    k = Kernel("attention", 2_000_000, 250_000, 62_500, "m", ("aten.sdpa",), variant="head16")
    small, plain = dm.hot_cold_times_s([k, replace(k, variant="head64")])[0]
    assert small == pytest.approx(4 * plain, rel=0.05)  # head64 has no curve: the class's
