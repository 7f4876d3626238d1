"""The calibration's model fits on synthetic data with known answers: the in-model form chosen by
cross-validation, and the cache model from a probe."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ftmodel.calibration.cache import (CONV_LAYER_BYTES, LAYER_BYTES, fit_cache_model,
                                       fit_runtime_cache)
from ftmodel.calibration.networks import fit_in_model

MIB = 1 << 20


def _networks(seed: int = 0) -> tuple[list[float], list[float], list[float], list[int],
                                      list[str]]:
    rng = np.random.default_rng(seed)
    host, dev, nbytes, kernels, groups = [], [], [], [], []
    for net in range(8):
        n = int(rng.integers(10, 200))
        for b in (1, 4, 16):
            host.append(n * 2e-6)
            dev.append(float(rng.uniform(1e-4, 1e-2)) * b)
            nbytes.append(float(rng.uniform(1e5, 1e8)) * b)
            kernels.append(n)
            groups.append(f"net{net}")
    return host, dev, nbytes, kernels, groups


def test_in_model_fit_recovers_the_true_form_and_coefficients() -> None:
    host, dev, nbytes, kernels, groups = _networks()
    # truth: device time 20% slower in a model, plus 3 µs per kernel; no per-byte term
    measured = [h + 1.2 * d + 3e-6 * n for h, d, n in zip(host, dev, kernels)]
    fit = fit_in_model(host, dev, nbytes, kernels, measured, groups=groups)
    assert fit["device_scale"] == pytest.approx(1.2, rel=1e-3)
    assert fit["per_kernel_s"] == pytest.approx(3e-6, rel=1e-2)
    assert fit["per_byte_s"] == pytest.approx(0.0, abs=1e-15)
    assert fit["cv_median_ape"] < 1e-3
    assert fit["host_scale"] == 1.0


def test_in_model_fit_keeps_no_correction_when_none_helps() -> None:
    """Costs that add up as predicted, with ±10% noise: no fitted form beats leaving the
    prediction alone on held-out networks, so the identity is kept."""
    host, dev, nbytes, kernels, groups = _networks(2)
    rng = np.random.default_rng(3)
    measured = [(h + d) * float(rng.uniform(0.9, 1.1)) for h, d in zip(host, dev)]
    fit = fit_in_model(host, dev, nbytes, kernels, measured, groups=groups)
    assert (fit["device_scale"], fit["per_kernel_s"], fit["per_byte_s"]) == (1.0, 0.0, 0.0)
    assert 0.0 < fit["cv_median_ape"] < 0.1


def test_in_model_fitwithout_samples_groups_fits_every_term() -> None:
    host, dev, nbytes, kernels, _ = _networks(1)
    measured = [h + d + 1e-11 * b for h, d, b in zip(host, dev, nbytes)]
    fit = fit_in_model(host, dev, nbytes, kernels, measured)
    assert "cv_median_ape" not in fit
    assert fit["per_byte_s"] == pytest.approx(1e-11, rel=1e-2)


def test_host_scaled_forms_recover_a_host_time_that_adds_up_slower_in_a_model() -> None:
    """Host programs price each event in a tight loop; inside a network the same events cost
    more (a 2-vCPU EPYC's synthetic networks: 1.5-3x). Where the host time per kernel differs
    between networks, a host scale is not a per-kernel cost, and the forms that scale the host
    time find it; those that keep it can only approximate it."""
    from ftmodel.calibration.networks import DEVICE_SCALED_FORMS, HOST_SCALED_FORMS

    host, dev, nbytes, kernels, groups = _networks(5)
    rng = np.random.default_rng(6)
    per_event = {g: float(rng.uniform(1e-6, 8e-6)) for g in set(groups)}
    host = [per_event[g] * n for g, n in zip(groups, kernels)]
    measured = [1.7 * h + 0.9 * d for h, d in zip(host, dev)]
    fit = fit_in_model(host, dev, nbytes, kernels, measured, groups=groups,
                       forms=DEVICE_SCALED_FORMS + HOST_SCALED_FORMS)
    assert fit["host_scale"] == pytest.approx(1.7, rel=1e-3)
    assert fit["device_scale"] == pytest.approx(0.9, rel=1e-3)
    assert fit["per_kernel_s"] == pytest.approx(0.0, abs=1e-12)
    assert fit["cv_median_ape"] < 1e-3
    kept = fit_in_model(host, dev, nbytes, kernels, measured, groups=groups)
    assert kept["host_scale"] == 1.0 and kept["cv_median_ape"] > 10 * fit["cv_median_ape"]


def test_host_only_form_leaves_device_time_as_the_curves_give_it() -> None:
    # a runtime whose curves are its own in-session node times (ONNX Runtime): the form "n"
    # fits a per-kernel cost on top of device time at scale 1, never rescales it
    host, dev, nbytes, kernels, groups = _networks(4)
    measured = [h + d + 2e-6 * n for h, d, n in zip(host, dev, kernels)]
    fit = fit_in_model(host, dev, nbytes, kernels, measured, groups=groups, forms=("n",))
    assert fit["device_scale"] == 1.0
    assert fit["per_kernel_s"] == pytest.approx(2e-6, rel=1e-3)
    # even where the networks ran faster than the curves: no device scale is fitted
    faster = [h + 0.7 * d for h, d in zip(host, dev)]
    fit = fit_in_model(host, dev, nbytes, kernels, faster, groups=groups, forms=("n",))
    assert fit["device_scale"] == 1.0 and fit["per_kernel_s"] == 0.0


def _probe(lo_mib: float, hi_mib: float, share: float) -> dict[str, object]:
    grid = [1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64]
    hot, cold = 20e-6, 120e-6
    per_layer = [hot + share * float(np.clip((n - lo_mib) / (hi_mib - lo_mib), 0, 1))
                 * (cold - hot) for n in grid]
    return {"layer_bytes": LAYER_BYTES, "grid_layers": grid, "per_layer_s": per_layer,
            "hot_s": hot, "cold_s": cold}


def test_cache_fit_recovers_ramp_and_stream_share() -> None:
    fit = fit_cache_model(_probe(12, 32, 0.6))
    assert fit["lo_bytes"] == 12 * MIB
    assert fit["hi_bytes"] == 32 * MIB
    assert fit["stream_share"] == pytest.approx(0.6, rel=1e-6)
    # the flushed layer's penalty per byte of its weights: (120 − 20) µs over 1 MiB
    assert fit["cold_s_per_byte"] == pytest.approx(100e-6 / LAYER_BYTES, rel=1e-9)


def test_cache_fit_prices_wide_layers_streaming_by_their_own_chain() -> None:
    # the narrow chain streams at 0.6 x 100 us per MiB once past the cache; a chain of 16 MiB
    # layers pays 30% of that per byte over its hot layer: wide_ratio 0.3
    probe = _probe(12, 32, 0.6)
    wide = 16 * MIB
    probe.update({"wide_layer_bytes": wide, "wide_layers": 12, "wide_hot_s": 500e-6,
                  "wide_per_layer_s": 500e-6 + 0.3 * 0.6 * 100e-6 * 16})
    fit = fit_cache_model(probe)
    assert fit["wide_ratio"] == pytest.approx(0.3, rel=1e-6)
    assert (fit["narrow_bytes"], fit["wide_bytes"]) == (LAYER_BYTES, wide)
    assert "wide_ratio" not in fit_cache_model(_probe(12, 32, 0.6))  # an older probe: none


def test_cache_fit_prices_eagers_convolutions_by_their_own_chain() -> None:
    # eager's chain of 9 MiB oneDNN convolutions paid 12 ps a byte over its hot layer, where the
    # GEMM chains charge a layer of that size 0.6 x 100 µs per MiB x 0.5 ** (log 9 / log 16)
    probe = _probe(12, 32, 0.6)
    wide = 16 * MIB
    probe.update({"wide_layer_bytes": wide, "wide_layers": 12, "wide_hot_s": 500e-6,
                  "wide_per_layer_s": 500e-6 + 0.5 * 0.6 * 100e-6 * 16,
                  "conv_layer_bytes": CONV_LAYER_BYTES, "conv_layers": 11, "conv_batch": 4,
                  "conv_hot_s": 720e-6, "conv_per_layer_s": 720e-6 + 12e-12 * CONV_LAYER_BYTES})
    fit = fit_cache_model(probe)
    gemm_at_conv = 0.6 * 100e-6 / LAYER_BYTES * 0.5 ** (np.log(9) / np.log(16))
    assert fit["conv_ratio"] == pytest.approx(12e-12 / gemm_at_conv, rel=1e-6)
    assert "conv_ratio" not in fit_cache_model(_probe(12, 32, 0.6))  # an older probe: none


def _runtime_probe(lo_mib: float, hi_mib: float, excess_s: float) -> dict[str, object]:
    """A runtime's chains: 1 MiB layers hot at 8 µs, ``excess_s`` more per layer once their
    weights stream; 16 MiB layers at 20 ps per byte over their hot time, 9 MiB convolutions
    at 30."""
    grid = [3, 8, 14, 19, 24, 29, 34, 38, 48, 58, 77, 96]
    hot = 8e-6
    per_layer = [hot + excess_s * float(np.clip((n - lo_mib) / (hi_mib - lo_mib), 0, 1))
                 for n in grid]
    wide = 16 * MIB
    return {"layer_bytes": LAYER_BYTES, "grid_layers": grid, "per_layer_s": per_layer,
            "hot_s": hot, "floor_s": 5e-6, "wide_layer_bytes": wide, "wide_layers": 6,
            "wide_hot_s": 100e-6, "wide_per_layer_s": 100e-6 + 20e-12 * wide,
            "conv_layer_bytes": CONV_LAYER_BYTES, "conv_layers": 11, "conv_hot_s": 200e-6,
            "conv_per_layer_s": 200e-6 + 30e-12 * CONV_LAYER_BYTES}


def test_runtime_cache_fit_prices_its_chains_with_the_shared_stream_share() -> None:
    # narrow layers: 25 µs more per 1 MiB layer once streaming = 23.8 ps per byte in the chain
    fit = fit_runtime_cache(_runtime_probe(8, 58, 25e-6), stream_share=0.5)
    assert (fit["lo_bytes"], fit["hi_bytes"]) == (8 * MIB, 58 * MIB)
    assert fit["stream_share"] == 0.5
    narrow = 25e-6 / LAYER_BYTES  # what the chain pays per byte: stream_share x cold_s_per_byte
    assert fit["cold_s_per_byte"] * 0.5 == pytest.approx(narrow, rel=1e-6)
    assert fit["wide_ratio"] == pytest.approx(20e-12 / narrow, rel=1e-6)
    # the convolutions against what the GEMM chains charge a 9 MiB layer (log-linear between
    # the narrow and the wide layers' price per byte)
    pos = np.log(CONV_LAYER_BYTES / LAYER_BYTES) / np.log(16)
    gemm_at_conv = narrow * fit["wide_ratio"] ** pos
    assert fit["conv_ratio"] == pytest.approx(30e-12 / gemm_at_conv, rel=1e-6)
    # chains that never slowed down, or no shared stream share: nothing to model
    assert fit_runtime_cache(_runtime_probe(8, 58, 0.0), stream_share=0.5) == {}
    assert fit_runtime_cache(_runtime_probe(8, 58, 25e-6), stream_share=0.0) == {}


def test_cache_fit_finds_nothing_when_flushing_changes_nothing() -> None:
    probe = _probe(12, 32, 0.6)
    probe["cold_s"] = probe["hot_s"]
    assert fit_cache_model(probe) == {}


def test_cpu_conv_sweep_reaches_the_weight_bound_last_stages_of_cnns() -> None:
    """A ResNet's last stage at 64-96 px and batch 1 (512-1024 channels, 3x3, a 2-3 px map) runs on
    PyTorch's slow convolution path with megabytes of weights per call; the conv curves must hold
    samples there, not extrapolate to it from convolutions with a hundredth of the weights."""
    from ftmodel.calibration.ops import op_samples
    from ftmodel.frameworks import eager
    from ftmodel.tracing.dispatch import trace

    stage = nn.Conv2d(1024, 1024, 3, padding=1, bias=False).requires_grad_(False)
    (target,) = [k for k in eager.lower(trace(stage, (torch.randn(1, 1024, 2, 2),))).kernels
                 if k.op_class == "conv"]
    samples = [s for s in op_samples(quick=True)["conv"] if not s.is_floor]
    kernels = [k for s in samples for k in eager.lower(trace(s.module, s.inputs)).kernels
               if k.op_class == "conv"]
    same_path = [k for k in kernels if k.variant == target.variant]
    assert target.bytes_weights >= 32 * MIB
    assert max(k.bytes_weights for k in same_path) >= target.bytes_weights / 2


def test_inductor_on_a_gpu_fits_one_cost_for_all_triton_kernels() -> None:
    # a convolution block launches a layout copy, a convolution and a norm in equal numbers:
    # fitted per class, NNLS may give the convolution's cost to the copy. Tied, the Triton
    # classes share one launch cost that single-kernel programs pin down.
    from ftmodel.calibration.framework_host import fit_framework_costs
    from ftmodel.hardware.host_priors import TRITON_CLASSES

    truth = {"kernel:elementwise": 15e-6, "kernel:copy": 15e-6, "kernel:norm": 15e-6,
             "kernel:conv": 12e-6, "kernel:gemm": 14e-6}
    programs = [{"kernel:elementwise": 1}, {"kernel:elementwise": 4, "kernel:gemm": 4},
                {"kernel:gemm": 16}, {"kernel:copy": 5, "kernel:conv": 4, "kernel:norm": 4},
                {"kernel:copy": 17, "kernel:conv": 16, "kernel:norm": 16}]
    times = [66e-6 + sum(truth[k] * n for k, n in p.items()) for p in programs]
    per_event, per_call = fit_framework_costs("inductor", "cuda", programs, times)
    assert per_call == pytest.approx(66e-6, rel=1e-6)
    assert per_event["kernel:conv"] == pytest.approx(12e-6, rel=1e-6)
    assert per_event["kernel:gemm"] == pytest.approx(14e-6, rel=1e-6)
    assert [per_event[f"kernel:{c}"] for c in TRITON_CLASSES] == pytest.approx(
        [15e-6] * len(TRITON_CLASSES))
    # on a CPU (C++ kernels) and for other frameworks each class keeps its own column
    cpu_events, _ = fit_framework_costs("inductor", "cpu", programs, times)
    assert "kernel:softmax" not in cpu_events and "kernel:triton" not in cpu_events


def test_the_host_fit_takes_the_guards_warm_cost_off_and_fits_no_guard_column() -> None:
    """A program's guards are priced by the calibration's guard rows: the host fit takes their
    warm cost off each program's time, fits no column for them, and keeps the rows."""
    from ftmodel.calibration.framework_host import FrameworkPrograms, fit_framework_passes
    from ftmodel.program import GUARD_MODULE, GUARD_TENSOR

    rows = ((0.0, 0.5e-6, 0.25e-6), (1e8, 2e-6, 2e-6))
    events = {"a": {"kernel:elementwise": 1, GUARD_TENSOR: 3, GUARD_MODULE: 2},
              "b": {"kernel:elementwise": 8, GUARD_TENSOR: 40, GUARD_MODULE: 20},
              "c": {"kernel:gemm": 4, GUARD_TENSOR: 9, GUARD_MODULE: 5}}
    cost = {"kernel:elementwise": 3e-6, "kernel:gemm": 7e-6}
    times = {n: 20e-6 + sum(cost.get(k, 0.0) * v for k, v in e.items())
             + 0.5e-6 * e[GUARD_TENSOR] + 0.25e-6 * e[GUARD_MODULE] for n, e in events.items()}
    programs = FrameworkPrograms("inductor", "cpu", {n: lambda: None for n in events}, events,
                                 {n: 1.0 for n in events})
    fh = fit_framework_passes(programs, [{n: (t, 0.01) for n, t in times.items()}], rows)
    assert fh.guards == rows
    assert fh.per_call_s == pytest.approx(20e-6, rel=1e-4)
    assert fh.per_event_s["kernel:elementwise"] == pytest.approx(3e-6, rel=1e-4)
    assert not any(k.startswith("guard:") for k in fh.per_event_s)


def test_guard_prices_are_fitted_per_tensor_and_per_module_with_a_constant() -> None:
    from ftmodel.calibration.guards import fit_guard_prices

    chains = [(33, 9), (257, 65), (1, 17), (1, 129)]
    times = [8e-6 + 0.3e-6 * t + 0.1e-6 * m for t, m in chains]
    per_tensor, per_module = fit_guard_prices([c[0] for c in chains], [c[1] for c in chains],
                                              times)
    assert (per_tensor, per_module) == pytest.approx((0.3e-6, 0.1e-6), rel=1e-6)


def test_guard_rows_are_scaled_to_the_level_measured_inside_models() -> None:
    from ftmodel.calibration.guards import fit_guard_scale, scaled_rows

    priced = [10e-6, 40e-6, 160e-6, 400e-6]
    scale, constant = fit_guard_scale(priced, [15e-6 + 2.5 * p for p in priced])
    assert (scale, constant) == pytest.approx((2.5, 15e-6), rel=1e-6)
    assert fit_guard_scale([0.0, 0.0], [1e-5, 2e-5]) == (1.0, 0.0)  # nothing priced
    rows = ((0.0, 1e-7, 2e-7), (float(32 << 20), 4e-7, 8e-7))
    scaled = scaled_rows(rows, 2.5)
    assert [r[0] for r in scaled] == [0.0, float(32 << 20)]  # the bytes kept
    assert [x for r in scaled for x in r[1:]] == pytest.approx([2.5e-7, 5e-7, 1e-6, 2e-6])


def test_a_class_of_several_ops_gets_a_curve_per_op() -> None:
    from ftmodel.calibration.sweep_stage import per_op_curves
    from ftmodel.hardware.profile import OpClassData

    rows = tuple((0.0, float(n), float(n), n * 1e-10) for n in range(1, 8))
    raw = [{"op": op} for op in ["native_layer_norm"] * 4 + ["native_batch_norm"] * 3]
    curves = per_op_curves("norm", OpClassData("samples", rows), raw)
    assert sorted(curves) == ["norm@native_batch_norm", "norm@native_layer_norm"]
    assert curves["norm@native_batch_norm"].samples == rows[4:]
    assert per_op_curves("norm", OpClassData("samples", rows[:4]), raw[:4]) == {}  # one op
    # an op with fewer than three samples gets none
    assert sorted(per_op_curves("pool", OpClassData("samples", rows[:6]), raw[:6])) == [
        "pool@native_layer_norm"]


def test_lstm_samples_timed_at_two_lengths_make_a_per_call_curve() -> None:
    from ftmodel.calibration.ops import CPU_GRID, LSTM_SHORT_STEPS, LSTM_STEPS, op_samples
    from ftmodel.calibration.sweep_stage import per_call_curve
    from ftmodel.hardware.profile import OpClassData

    lstm = [s for s in op_samples(True, CPU_GRID)["gemm@mkldnn_rnn_layer"] if not s.is_floor]
    assert lstm and all(s.inputs[0].shape[1] == LSTM_STEPS for s in lstm)
    assert all(s.short_inputs[0].shape[1] == LSTM_SHORT_STEPS for s in lstm)
    rows = tuple((m, 0.0, 0.0, 1e-6) for m in (1e4, 1e5, 1e6))
    raw = [{"per_call_s": 2e-4}, {"per_call_s": 3e-4}, {"per_call_s": 0.0}]
    call = per_call_curve(OpClassData("samples", rows), raw)
    assert call is not None
    assert [r[3] for r in call.samples] == [2e-4, 3e-4, 1e-9]  # never zero: a curve's times
    assert [r[0] for r in call.samples] == [1e4, 1e5, 1e6]
    assert per_call_curve(OpClassData("samples", rows), [{}, {}, {}]) is None


def test_cpu_sweeps_sample_convolutions_on_and_off_the_channel_block() -> None:
    """Each side of the block gets enough samples for a curve of its own (three or more)."""
    from ftmodel.calibration.ops import CPU_GRID, op_samples

    for cls in ("conv", "conv_grouped"):
        convs = [s.module for s in op_samples(False, CPU_GRID)[cls] if not s.is_floor]
        off = [m for m in convs if isinstance(m, nn.Conv2d)
               and (m.in_channels % 16 or m.out_channels % 16)]
        assert len(off) >= 10 and len(convs) - len(off) >= 20, (cls, len(off), len(convs))


def test_framework_curves_split_by_their_main_kernels_variant() -> None:
    from ftmodel.calibration.framework_ops import variant_curves
    from ftmodel.hardware.profile import OpClassData

    samples = tuple((float(m), 1.0, 1.0, m * 1e-9) for m in range(1, 8))
    variants = ["a", "a", "b", "a", "b", "b", "c"]
    rows = [{"label": "floor skipped", "skipped": "x"}] + [
        {"label": str(i), "total_s": 1.0, "variant": v} for i, v in enumerate(variants)]
    out = variant_curves("fw/conv", OpClassData("samples", samples), rows)
    assert set(out) == {"fw/conv:a", "fw/conv:b"}  # "c" has one sample only
    assert out["fw/conv:b"].samples == (samples[2], samples[4], samples[5])
    one = [{"label": str(i), "total_s": 1.0, "variant": "a"} for i in range(7)]
    assert variant_curves("fw/conv", OpClassData("samples", samples), one) == {}


def test_cpu_grouped_sweep_samples_grouped_convolutions_beside_depthwise_ones() -> None:
    """ResNeXt and RegNet run 3x3 convolutions of 4-64 channels per group: the grouped curve
    holds samples of those, not only depthwise ones (one channel per group)."""
    from ftmodel.calibration.ops import CPU_GRID, op_samples

    convs = [s.module for s in op_samples(False, CPU_GRID)["conv_grouped"] if not s.is_floor]
    assert all(isinstance(m, nn.Conv2d) and m.groups > 1 for m in convs)
    grouped = [m for m in convs if m.in_channels // m.groups >= 4]  # type: ignore[operator]
    depthwise = [m for m in convs if m.groups == m.in_channels == m.out_channels]
    assert len(grouped) == CPU_GRID.grouped_samples >= 10
    # unchanged beside them, with the early-stage ones of their own
    assert len(depthwise) == CPU_GRID.depthwise_samples + CPU_GRID.early_stage_depthwise_samples
    assert {m.in_channels // m.groups for m in grouped} >= {4, 8, 16}  # type: ignore[operator]


def test_cpu_sweep_samples_the_kernel_sizes_models_run() -> None:
    """A depthwise 1x1 convolution (MobileOne's and FastViT's scale branch) moves 8 bytes per
    MAC, several times a 3x3's; a ConvNeXt's 2x2 downsampling of stride 2 sits between 1x1 and
    3x3 ones. The CPU sweep samples both, and 7x7 depthwise ones; the GPU sweep keeps its
    sizes and draws the same configurations as before the sizes became the grid's."""
    import random

    from ftmodel.calibration.conv_configs import conv_configs
    from ftmodel.calibration.ops import CPU_GRID, GPU_GRID, op_samples

    sweep = op_samples(False, CPU_GRID)
    depthwise = [s.module for s in sweep["conv_grouped"] if not s.is_floor
                 and s.module.groups == s.module.in_channels == s.module.out_channels]
    assert {m.kernel_size[0] for m in depthwise} >= {1, 3, 5, 7}
    dense = [s.module for s in sweep["conv"] if not s.is_floor and isinstance(s.module, nn.Conv2d)]
    patchify = [m for m in dense if m.kernel_size[0] == 2]
    assert patchify and all(m.stride[0] == 2 and m.padding[0] == 0 for m in patchify)
    # the GPU's configurations, drawn as before (kernel sizes 1, 3, 7 dense; 3, 5 depthwise)
    for dw in (False, True):
        configs = conv_configs(random.Random(1234 + dw), 40, dw, GPU_GRID)
        assert {k for *_, k, _, _ in configs} <= ({3, 5, 1} if dw else {1, 3, 7})
    # the first draws of each, as the sweep drew them with its kernel sizes written inline
    assert conv_configs(random.Random(1234), 3, False, GPU_GRID) == [
        (128, 32, 16, 4, 3, 1, 1), (2, 32, 128, 7, 1, 1, 1), (1, 128, 512, 56, 3, 1, 1)]
    assert conv_configs(random.Random(1235), 3, True, GPU_GRID) == [
        (4, 192, 192, 56, 3, 2, 192), (2, 384, 384, 28, 5, 1, 384), (128, 192, 192, 7, 5, 2, 192)]


def test_cpu_sweep_samples_early_stages_at_batch_4_and_16() -> None:
    """Few channels on large maps at batch 4-16 (stems, mobile CNNs' first blocks) run at the
    speed of oneDNN's activation reorders: the full CPU sweep samples such convolutions, dense
    (3-channel stems among them) and depthwise, and a quick sweep does not."""
    from ftmodel.calibration.ops import CPU_GRID, op_samples

    full, quick = op_samples(False, CPU_GRID), op_samples(True, CPU_GRID)
    for cls, count in (("conv", CPU_GRID.early_stage_samples),
                       ("conv_grouped", CPU_GRID.early_stage_depthwise_samples)):
        early = [s for s in full[cls] if s.label.endswith(" early")]
        assert len(early) == count >= 8
        shapes = [tuple(s.inputs[0].shape) for s in early]
        assert {b for b, *_ in shapes} == {4, 16}
        assert min(hw for *_, hw in shapes) >= 56
        assert all(c <= 96 for _, c, *_ in shapes)
        assert not [s for s in quick[cls] if s.label.endswith(" early")]
    stems = [s for s in full["conv"] if s.label.endswith(" early") and s.inputs[0].shape[1] == 3]
    assert stems


def test_cpu_sweep_samples_im2col_convolutions_with_few_and_many_output_pixels() -> None:
    """Dense convolutions at batch 1 on maps of 1-8 px, which eager runs as im2col and one GEMM:
    the full CPU sweep samples them (a quick sweep does not), and where this CPU runs them so,
    enough of them fall on either side of :func:`ftmodel.tracing.variants.narrow_gemm` for a
    curve each."""
    from ftmodel.calibration.ops import CPU_GRID, op_samples
    from ftmodel.frameworks import eager
    from ftmodel.tracing.dispatch import trace

    full, quick = op_samples(False, CPU_GRID), op_samples(True, CPU_GRID)
    small = [s for s in full["conv"] if s.label.endswith(" small")]
    assert len(small) == CPU_GRID.slow_path_samples >= 16
    assert {tuple(s.inputs[0].shape)[0] for s in small} == {1}
    assert max(s.inputs[0].shape[-1] for s in small) <= 8
    assert not [s for s in quick["conv"] if s.label.endswith(" small")]
    variants = [max(eager.lower(trace(s.module, s.inputs)).kernels, key=lambda k: k.macs).variant
                for s in full["conv"]]
    if "slow2d_narrow" in variants:
        assert variants.count("slow2d_narrow") >= 8 and variants.count("slow2d") >= 8


def test_cpu_grouped_sweep_samples_the_convolutions_onednn_runs_as_gemms() -> None:
    """Grouped convolutions of 1-3 input channels per group (FastViT's downsampling: 48 to 96
    channels in 48 groups) run as im2col and GEMMs: the sweep samples them, and where this CPU
    runs them so, the trace gives them the variant of their own curve."""
    from ftmodel.calibration.ops import CPU_GRID, op_samples
    from ftmodel.tracing.dispatch import trace
    from ftmodel.tracing.variants import grouped_runs_gemm

    convs = [s.module for s in op_samples(False, CPU_GRID)["conv_grouped"] if not s.is_floor]
    gemm = [m for m in convs if isinstance(m, nn.Conv2d) and m.in_channels // m.groups < 4
            and not m.in_channels == m.out_channels == m.groups]
    assert len(gemm) == CPU_GRID.gemm_grouped_samples >= 10
    assert {m.out_channels // m.in_channels for m in gemm} >= {1, 2, 4}
    assert {m.kernel_size[0] for m in gemm} >= {1, 3, 7}
    if grouped_runs_gemm(48, 96, 48):  # x86 with AVX-512 or AVX2
        quick = [s for s in op_samples(True, CPU_GRID)["conv_grouped"] if not s.is_floor
                 and s.module.in_channels // s.module.groups < 4  # type: ignore[operator]
                 and s.module.out_channels != s.module.groups]
        assert len(quick) == 3  # enough for a curve of their own in a quick calibration
        variants = {r.variant for s in quick for r in trace(s.module, s.inputs).records
                    if r.op_class.startswith("conv")}
        assert variants == {"mkldnn_gemm"}


def test_inductor_conv_samples_run_channels_last_as_inductor_lays_them_out() -> None:
    """Inductor on a CPU hands its convolutions to aten on channels-last tensors; calibration
    times the same call eagerly: the program is eager's one convolution, the run's output is
    the sample's and channels-last."""
    from ftmodel.calibration.channels_last import channels_last_run
    from ftmodel.calibration.framework_ops import FRAMEWORK_SWEEPS
    from ftmodel.calibration.ops import op_samples
    from ftmodel.tracing.variants import NHWC

    assert set(FRAMEWORK_SWEEPS["inductor"].channels_last) == {"conv", "conv_grouped"}
    for cls in ("conv", "conv_grouped"):
        sample = [s for s in op_samples(True)[cls] if not s.is_floor][0]
        program, run = channels_last_run(sample)
        assert [k.op_class for k in program.kernels] == [cls]
        assert program.kernels[0].variant.endswith(NHWC)  # the variant inductor's calls get
        out = run()
        assert isinstance(out, torch.Tensor)
        assert out.is_contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            torch.testing.assert_close(out, sample.module(*sample.inputs), rtol=1e-4, atol=1e-4)
        assert not sample.inputs[0].is_contiguous(memory_format=torch.channels_last) or \
            sample.inputs[0].shape[1] == 1  # the sample itself is left as it was


def test_channels_last_curves_are_kept_by_variant_even_when_all_samples_share_one() -> None:
    from ftmodel.calibration.framework_ops import variant_curves
    from ftmodel.hardware.profile import OpClassData

    samples = tuple((float(m), 1.0, 1.0, m * 1e-9) for m in range(1, 6))
    rows = [{"label": str(i), "total_s": 1.0, "variant": "mkldnn_nhwc"} for i in range(5)]
    data = OpClassData("samples", samples)
    assert variant_curves("inductor/conv", data, rows) == {}
    assert variant_curves("inductor/conv", data, rows, whole=True) == {
        "inductor/conv:mkldnn_nhwc": data}


def test_ort_copy_curve_keeps_its_transposes_out_and_gives_each_path_a_curve() -> None:
    # the transposes only ONNX Runtime's copy sweep times make curves of their code paths,
    # not the class's curve, which prices its Concat, Slice and other copies
    from ftmodel.calibration.framework_ops import FRAMEWORK_SWEEPS, without_samples, variant_curves
    from ftmodel.calibration.ops import ort_samples
    from ftmodel.hardware.profile import OpClassData

    extra = ort_samples(quick=True)["copy"]
    assert FRAMEWORK_SWEEPS["onnxruntime"].own_samples
    assert not FRAMEWORK_SWEEPS["torchscript"].own_samples
    labels = ["cat n1", "cat n2", "cat n3", "t n1", "t n2", "t n3"] + [
        s.label for s in extra if not s.is_floor][:3]
    variants = ["", "", ""] + ["transpose_mlas"] * 3 + ["transpose_elementwise"] * 3
    samples = tuple((0.0, float(i), float(i), i * 1e-9) for i in range(1, 10))
    rows = [{"label": lab, "total_s": 1.0, "variant": v} for lab, v in zip(labels, variants)]
    data = OpClassData("samples", samples)
    cls = without_samples(data, rows, {s.label for s in extra})
    assert cls.samples == samples[:6]
    assert set(variant_curves("onnxruntime/copy", data, rows)) == {
        "onnxruntime/copy:transpose_mlas", "onnxruntime/copy:transpose_elementwise"}
    norms = ort_samples(quick=True)["norm"]
    assert len(norms) >= 4 and norms[0].is_floor and all(s.curve == "norm" for s in norms)
    # 1-d convolutions: ONNX Runtime's plain NCHW kernel, a curve of that path only
    convs = ort_samples(quick=True)["conv"]
    assert convs and all(s.curve == "conv" and s.inputs[0].dim() == 3 for s in convs)
    # GRU layers: a per-step curve of their own, on the LSTMs' grid, with a floor
    from ftmodel.calibration.ops import op_samples
    from ftmodel.estimate.curves import STEP_CURVES

    grus = ort_samples(quick=True)["gemm@gru"]
    lstms = op_samples(True)["gemm@mkldnn_rnn_layer"]
    assert "gemm@gru" in STEP_CURVES and grus[0].is_floor
    assert [s.inputs[0].shape for s in grus] == [s.inputs[0].shape for s in lstms]
    assert all(isinstance(s.module, torch.nn.GRU) and s.short_inputs for s in grus[1:])


def test_conv1d_configs_stay_within_the_grid_and_include_front_ends() -> None:
    from ftmodel.calibration.conv_configs import conv1d_configs
    from ftmodel.calibration.sweep_grid import CPU_GRID

    configs = conv1d_configs(24, CPU_GRID)
    assert len(configs) == 24 and configs == conv1d_configs(24, CPU_GRID)
    assert sum(c[1] == 1 for c in configs) >= 6  # waveform front ends
    for b, cin, cout, length, k, stride, dilation in configs:
        out_len = (length - dilation * (k - 1) - 1) // stride + 1
        assert out_len >= 1
        assert b * cout * out_len * cin * k <= CPU_GRID.conv_max_macs
        assert b * cin * length <= CPU_GRID.conv_max_input


def test_per_kind_forms_recover_a_scale_for_each_kind_of_kernel() -> None:
    """TorchScript's frozen networks on an Intel Xeon VM ran their kernels without MACs about
    twice their sampled times and their GEMMs as sampled: where the kinds compose differently,
    a device scale per kind (convolutions, other MAC kernels, the rest) is found and chosen;
    where every kind scales alike, one scale is kept."""
    host, dev, nbytes, kernels, groups = _networks(7)
    rng = np.random.default_rng(8)
    shares = {g: rng.dirichlet((1.0, 1.0, 1.0)) for g in sorted(set(groups))}
    conv, mm, other = ([float(d * shares[g][i]) for d, g in zip(dev, groups)] for i in range(3))
    measured = [h + 1.15 * c + 1.0 * m + 2.2 * o for h, c, m, o in zip(host, conv, mm, other)]
    fit = fit_in_model(host, dev, nbytes, kernels, measured, groups=groups,
                       device_by_kind=(conv, mm, other))
    assert fit["device_scale_conv"] == pytest.approx(1.15, rel=1e-3)
    assert fit["device_scale"] == pytest.approx(1.0, rel=1e-3)
    assert fit["device_scale_other"] == pytest.approx(2.2, rel=1e-3)
    assert fit["cv_median_ape"] < 1e-3
    alike = [h + 1.2 * d for h, d in zip(host, dev)]
    one = fit_in_model(host, dev, nbytes, kernels, alike, groups=groups,
                       device_by_kind=(conv, mm, other))
    assert one["device_scale"] == pytest.approx(1.2, rel=1e-3)
    assert "device_scale_conv" not in one and "device_scale_other" not in one
    # networks without a convolution leave nothing to fit a convolution's scale to
    no_conv = fit_in_model(host, dev, nbytes, kernels, measured, groups=groups,
                           device_by_kind=([0.0] * len(conv), mm, other))
    assert "device_scale_conv" not in no_conv


def test_math_families_are_floored_at_a_plain_relu() -> None:
    """A transcendental op's curve keeps what it costs per call beyond a plain elementwise op
    (exact GELU runs oneDNN's eltwise primitive on every call): its floor is a ReLU on four
    elements, which a prediction charges like any elementwise kernel; its samples run the op."""
    from ftmodel.calibration.ops import MATH_FAMILIES, op_samples
    from ftmodel.frameworks import eager
    from ftmodel.tracing.dispatch import trace

    samples = op_samples(quick=True)
    for name in MATH_FAMILIES:
        fam = samples[f"elementwise@{name}"]
        floors = [s for s in fam if s.is_floor]
        assert len(floors) == 1, name
        ops = [m for k in eager.lower(trace(floors[0].module, floors[0].inputs)).kernels
               for m in k.members]
        assert ops == ["aten.relu.default"], (name, ops)
        assert floors[0].inputs[0].numel() == 4
        sample = next(s for s in fam if not s.is_floor)
        ops = [m for k in eager.lower(trace(sample.module, sample.inputs)).kernels
               for m in k.members]
        assert ops and "aten.relu.default" not in ops, (name, ops)
