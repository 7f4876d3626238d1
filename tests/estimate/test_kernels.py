"""ftmodel.estimate.kernels.DeviceModel: sample interpolation, extrapolation, fallback, roofline."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from ftmodel.errors import FtmodelError
from ftmodel.estimate.curves import inversions
from ftmodel.estimate.kernels import DeviceModel
from ftmodel.program import Kernel
from ftmodel.tracing.prepacked_variants import PLAIN_INPUT
from ftmodel.hardware.profile import (
    DeviceProfile,
    HardwareProfile,
    OpClassData,
    profile_from_dict,
)


def _device(op_classes: dict[str, OpClassData], floor: float = 0.0) -> DeviceProfile:
    return DeviceProfile("dev", "cpu", "sync", op_classes, kernel_floor_s=floor)


def _gemm(macs: float, nbytes: float = 0.0) -> Kernel:
    return Kernel("gemm", int(macs), int(nbytes), 0, "m", ("aten.mm",))


def _ew(nbytes: float, op_class: str = "elementwise") -> Kernel:
    return Kernel(op_class, 0, int(nbytes) // 2, int(nbytes) // 2, "m", ("aten.add",))


# Saturating throughput: small kernels are slow per MAC, large ones reach 1e10 MAC/s.
SAT_ROWS = tuple((m, 0.0, 0.0, (m + 1e5) / 1e10) for m in (1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9))


# ---- samples ------------------------------------------------------------------------------------

def test_samples_exact_at_sample_points() -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}))
    t = dm.kernel_times_s([_gemm(r[0]) for r in SAT_ROWS])
    np.testing.assert_allclose(t, [r[3] for r in SAT_ROWS], rtol=1e-4)


def test_samples_interpolate_between_points() -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}))
    t_lo, t_mid, t_hi = dm.kernel_times_s([_gemm(1e5), _gemm(3e5), _gemm(1e6)])
    assert t_lo < t_mid < t_hi


def test_doubling_macs_beyond_range_doubles_time() -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}))
    for macs in (1e10, 1e11, 1e12):
        t1, t2 = dm.kernel_times_s([_gemm(macs), _gemm(2 * macs)])
        # the samples top out at 1e10 MAC/s, so time = macs / 1e10 and doubles with macs
        assert t2 / t1 == pytest.approx(2.0, rel=1e-3)
        assert t1 == pytest.approx(macs / 1e10, rel=2e-2)


def test_extrapolation_keeps_edge_throughput() -> None:
    # throughput doubles per decade: 1e3 MAC -> 8e6 MAC/s ... 1e6 MAC -> 6.4e7 MAC/s
    rows = tuple((m, 0.0, 0.0, m / (1e6 * 2 ** np.log10(m))) for m in (1e3, 1e4, 1e5, 1e6))
    dm = DeviceModel(_device({"gemm": OpClassData("samples", rows)}))
    t1, t2 = dm.kernel_times_s([_gemm(1e7), _gemm(2e7)])
    # observed: t2 / t1 ≈ 2.11 and t1 ≈ 0.199 s (27% above the edge throughput's 0.156 s)
    assert t2 / t1 == pytest.approx(2.0, rel=1e-2)
    assert t1 == pytest.approx(1e7 / 6.4e7, rel=5e-2)


def test_below_the_smallest_sample_time_follows_the_curves_own_slope() -> None:
    """Less work than any sample: the edge's time scaled by the work to the power of the
    curve's slope over its first e-fold. Samples on a fixed per-call cost (50 µs up to 1e6
    MACs) keep about that cost for a smaller kernel; samples in proportion to their work (1e10 MAC/s)
    scale it down in proportion."""
    floor = tuple((m, 0.0, 0.0, 50e-6 + m / 1e11) for m in (1e5, 3e5, 1e6, 1e7, 1e8))
    linear = tuple((m, 0.0, 0.0, m / 1e10) for m in (1e5, 3e5, 1e6, 1e7, 1e8))
    t_floor = DeviceModel(_device({"gemm": OpClassData("samples", floor)})).kernel_times_s(
        [_gemm(1e4), _gemm(1e5)])
    assert t_floor[1] == pytest.approx(51e-6, rel=1e-3)
    # the first e-fold's slope is ~0.03: 10x less work, 7% less time (not 90%)
    assert 0.9 * t_floor[1] < t_floor[0] < t_floor[1]
    t_lin = DeviceModel(_device({"gemm": OpClassData("samples", linear)})).kernel_times_s(
        [_gemm(1e4), _gemm(1e5)])
    assert t_lin[0] == pytest.approx(t_lin[1] / 10, rel=1e-3)


def test_byte_class_uses_bytes() -> None:
    rows = tuple((0.0, b / 2, b / 2, b / 1e10) for b in (1e3, 1e5, 1e7))
    dm = DeviceModel(_device({"elementwise": OpClassData("samples", rows)}))
    t1, t2 = dm.kernel_times_s([_ew(1e8), _ew(2e8)])
    assert t1 == pytest.approx(1e8 / 1e10, rel=1e-3)
    assert t2 / t1 == pytest.approx(2.0, rel=1e-3)


def test_kernel_floor() -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}, floor=1e-3))
    t = dm.kernel_times_s([_gemm(1e3), _gemm(1e9)])
    assert t[0] == pytest.approx(1e-3)  # tiny kernel: the floor
    assert t[1] == pytest.approx((1e9 + 1e5) / 1e10, rel=1e-4)


def test_no_kernel_beats_the_fastest_rate_ever_measured() -> None:
    # a copy curve with a sample whose time vanished under its floor (1 ns for 192 KiB, as ONNX
    # Runtime's profiler reports sub-µs nodes), next to resolved samples at 1e10 B/s
    copy = tuple((0.0, b, b, 2 * b / 1e10) for b in (1e5, 1e6, 1e7)) + ((0.0, 65536.0, 131072.0,
                                                                         1e-9),)
    gemm = tuple((m, 0.0, 0.0, m / 5e10) for m in (1e6, 1e8)) + ((1e4, 0.0, 0.0, 1e-9),)
    dm = DeviceModel(_device({"copy": OpClassData("samples", copy),
                              "gemm": OpClassData("samples", gemm)}))
    t = dm.kernel_times_s([_ew(262144.0, "copy"), _gemm(1e4)])
    assert t[0] >= 262144.0 / 1e10 * (1 - 1e-9)  # its bytes at the fastest resolved rate
    assert t[1] >= 1e4 / 5e10 * (1 - 1e-9)


def test_no_kernels() -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}))
    assert dm.kernel_times_s([]).shape == (0,)


def test_order_preserved_across_classes() -> None:
    rows = tuple((0.0, b / 2, b / 2, b / 1e10) for b in (1e3, 1e5, 1e7))
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS),
                              "elementwise": OpClassData("samples", rows)}))
    ks = [_gemm(1e9), _ew(1e7), _gemm(1e3), _ew(1e3)]
    t = dm.kernel_times_s(ks)
    np.testing.assert_allclose(t, [(1e9 + 1e5) / 1e10, 1e-3, (1e3 + 1e5) / 1e10, 1e-7],
                               rtol=1e-3)


def test_variant_curve_preferred() -> None:
    slow = tuple((0.0, b / 2, b / 2, 10 * b / 1e10) for b in (1e3, 1e5, 1e7))
    fast = tuple((0.0, b / 2, b / 2, b / 1e10) for b in (1e3, 1e5, 1e7))
    dm = DeviceModel(_device({"elementwise": OpClassData("samples", fast),
                              "elementwise:math": OpClassData("samples", slow)}))
    plain = _ew(1e5)
    math = Kernel("elementwise", 0, 50_000, 50_000, "m", ("aten.exp",), variant="math")
    math_inplace = Kernel("elementwise", 0, 50_000, 50_000, "m", ("aten.exp_",),
                          variant="math_inplace")
    warnings: list[str] = []
    t = dm.kernel_times_s([plain, math, math_inplace], warnings)
    assert t[1] == pytest.approx(10 * t[0], rel=1e-3)
    assert t[2] == pytest.approx(t[1])  # math_inplace -> math
    assert warnings == []


def test_framework_curves_preferred_over_shared_ones() -> None:
    """A framework's own curves (measured through its runtime) win over every shared curve,
    the shared variant curve included; other frameworks and eager keep the shared ones."""
    slow = tuple((0.0, b / 2, b / 2, 10 * b / 1e10) for b in (1e3, 1e5, 1e7))
    fast = tuple((0.0, b / 2, b / 2, b / 1e10) for b in (1e3, 1e5, 1e7))
    dev = _device({"elementwise": OpClassData("samples", fast),
                   "elementwise:math": OpClassData("samples", fast),
                   "onnxruntime/elementwise": OpClassData("samples", slow)})
    math = Kernel("elementwise", 0, 50_000, 50_000, "m", ("Exp",), variant="math")
    (t_ort,) = DeviceModel(dev, "fp32", "onnxruntime").kernel_times_s([math])
    (t_ts,) = DeviceModel(dev, "fp32", "torchscript").kernel_times_s([math])
    (t_eager,) = DeviceModel(dev).kernel_times_s([math])
    assert t_ort == pytest.approx(10 * t_eager, rel=1e-3)
    assert t_ts == pytest.approx(t_eager)


def test_own_curve_without_cold_data_borrows_the_shared_cold_penalty() -> None:
    """A memory-bound kernel on a framework's own (hot-only) curve pays the cold penalty of
    the shared curve it would otherwise use; a MAC kernel pays that of a shared reduction over
    its bytes (streaming), not eager's GEMM penalty; eager keeps the shared blend."""
    hot = tuple((0.0, b / 2, b / 2, b / 1e10) for b in (1e3, 1e5, 1e7))
    slow = tuple((0.0, b / 2, b / 2, 4 * b / 1e10) for b in (1e3, 1e5, 1e7))
    red = tuple((0.0, b, 8.0, b / 2e10) for b in (1e3, 1e5, 1e7))
    dev = _device({
        "elementwise": OpClassData("samples", hot, cold_s=tuple(3 * r[3] for r in hot)),
        "inductor/elementwise": OpClassData("samples", slow),
        "reduction": OpClassData("samples", red, cold_s=tuple(5 * r[3] for r in red)),
        "gemm": OpClassData("samples", SAT_ROWS, cold_s=tuple(2 * r[3] for r in SAT_ROWS)),
        "inductor/gemm": OpClassData("samples", SAT_ROWS)})
    ew, mm = _ew(1e5), _gemm(1e6, 1e5)
    h_sh, c_sh = DeviceModel(dev).hot_cold_times_s([ew, mm])
    h_ind, c_ind = DeviceModel(dev, "fp32", "inductor").hot_cold_times_s([ew, mm])
    assert h_ind[0] == pytest.approx(4 * h_sh[0], rel=1e-3)  # its own hot curve
    assert c_ind[0] - h_ind[0] == pytest.approx(c_sh[0] - h_sh[0], rel=1e-3)  # borrowed
    # the GEMM reads 1e5 bytes: the reduction's penalty for them, 4 × 1e5 / 2e10 s
    assert c_ind[1] - h_ind[1] == pytest.approx(4 * 1e5 / 2e10, rel=0.05)
    assert c_sh[1] == pytest.approx(2 * h_sh[1], rel=1e-3)  # eager: its own GEMM cold curve


def test_weights_read_once_per_image_are_looked_up_on_all_they_read() -> None:
    """A kernel that streams its weights once per image (Kernel.weight_reads) is priced on its
    curve at all the bytes it reads; the cold penalty it borrows is for each byte once."""

    # a conv curve on which bytes cost time: intensity falls, time rises
    rows = tuple((m, b, 0.0, m / 1e10 + b / 1e9) for m in (1e6, 1e8) for b in (1e4, 1e6, 1e8))
    red = tuple((0.0, b, 8.0, b / 2e10) for b in (1e3, 1e5, 1e7, 1e9))
    dev = _device({"conv": OpClassData("samples", rows),
                   "onnxruntime/conv": OpClassData("samples", rows),
                   "reduction": OpClassData("samples", red, cold_s=tuple(5 * r[3] for r in red))})
    once = Kernel("conv", 10**7, 2 * 10**6, 0, "m", ("com.microsoft.nchwc::Conv",),
                  bytes_weights=10**6)
    per_image = dataclasses.replace(once, weight_reads=8, weights_per_image=True)
    as_traffic = dataclasses.replace(once, bytes_read=per_image.read_traffic_bytes)
    assert per_image.read_traffic_bytes == 2 * 10**6 + 7 * 10**6
    dm = DeviceModel(dev, "fp32", "onnxruntime")
    hot, cold = dm.hot_cold_times_s([once, per_image, as_traffic])
    assert hot[1] == pytest.approx(hot[2], rel=1e-6) and hot[1] > 1.5 * hot[0]
    assert cold[1] - hot[1] == pytest.approx(cold[0] - hot[0], rel=1e-6)  # bytes once
    assert cold[2] - hot[2] > 2 * (cold[0] - hot[0])


def test_mac_kernels_pay_the_cache_probes_penalty_per_byte() -> None:
    """With the cache probe's cold penalty per byte in the profile, every MAC kernel, on a
    framework's hot-only curve or on eager's curves with cold samples, is charged it for each
    byte it reads (each weight once); a memory-bound one keeps the shared curve's penalty;
    without it, a hot-only MAC curve borrows the shared reduction's and eager keeps its own."""

    hot = tuple((0.0, b / 2, b / 2, b / 1e10) for b in (1e3, 1e5, 1e7))
    red = tuple((0.0, b, 8.0, b / 2e10) for b in (1e3, 1e5, 1e7))
    classes = {
        "elementwise": OpClassData("samples", hot, cold_s=tuple(3 * r[3] for r in hot)),
        "onnxruntime/elementwise": OpClassData("samples", hot),
        "reduction": OpClassData("samples", red, cold_s=tuple(5 * r[3] for r in red)),
        "gemm": OpClassData("samples", SAT_ROWS, cold_s=tuple(2 * r[3] for r in SAT_ROWS)),
        "onnxruntime/gemm": OpClassData("samples", SAT_ROWS)}
    cache = {"lo_bytes": 1e9, "hi_bytes": 1e12, "stream_share": 0.2}  # all in cache when hot
    with_probe = DeviceProfile("dev", "cpu", "sync", classes,
                               cache={**cache, "cold_s_per_byte": 2e-10})
    without = DeviceProfile("dev", "cpu", "sync", classes, cache=cache)
    mm = dataclasses.replace(_gemm(1e6, 1e5), bytes_weights=6 * 10**4, weight_reads=4,
                             weights_per_image=True)
    ew = _ew(1e5)
    h, c = DeviceModel(with_probe, "fp32", "onnxruntime").hot_cold_times_s([mm, ew])
    assert c[0] - h[0] == pytest.approx(1e5 * 2e-10, rel=1e-6)  # 1e5 bytes, each once
    h0, c0 = DeviceModel(without, "fp32", "onnxruntime").hot_cold_times_s([mm, ew])
    assert c0[0] - h0[0] == pytest.approx(4 * 1e5 / 2e10, rel=0.05)  # the reduction's
    assert c[1] - h[1] == pytest.approx(c0[1] - h0[1])  # memory-bound: unchanged
    # eager's GEMM too pays the probe's penalty per byte, not its own flushed curve's excess;
    # without the probe's price it keeps its own cold curve
    he, ce = DeviceModel(with_probe).hot_cold_times_s([_gemm(1e6, 1e5)])
    assert ce[0] - he[0] == pytest.approx(1e5 * 2e-10, rel=1e-6)
    he0, ce0 = DeviceModel(without).hot_cold_times_s([_gemm(1e6, 1e5)])
    assert ce0[0] == pytest.approx(2 * he0[0], rel=1e-3)


def test_streaming_penalty_per_byte_follows_the_probed_layer_sizes() -> None:
    """With a probe of wide layers, a MAC kernel reading as much as a wide layer pays
    ``wide_ratio`` times the narrow layers' penalty per byte, one reading a narrow layer's or
    less the narrow one's, log-linear between; without it, the same penalty at every size."""
    from ftmodel.estimate.cache import CacheModel

    model = CacheModel(0.0, 1e8, 0.5, 2e-10, narrow_bytes=2**20, wide_bytes=2**24, wide_ratio=0.4)
    rates = model.cold_s_per_byte_at(np.array([2**18, 2**20, 2**22, 2**24, 2**26]))
    assert rates[0] == rates[1] == pytest.approx(2e-10)
    assert rates[3] == rates[4] == pytest.approx(0.8e-10)
    assert rates[2] == pytest.approx(2e-10 * 0.4 ** 0.5)  # halfway in log bytes
    flat = CacheModel(0.0, 1e8, 0.5, 2e-10).cold_s_per_byte_at(np.array([2**18, 2**26]))
    assert list(flat) == [2e-10, 2e-10]

    cache = {"lo_bytes": 1e9, "hi_bytes": 1e12, "stream_share": 0.5, "cold_s_per_byte": 2e-10}
    classes = {"gemm": OpClassData("samples", SAT_ROWS)}
    probed = DeviceProfile("dev", "cpu", "sync", classes, cache={
        **cache, "narrow_bytes": 2.0**20, "wide_bytes": 2.0**24, "wide_ratio": 0.4})
    plain = DeviceProfile("dev", "cpu", "sync", classes, cache=cache)
    big = _gemm(1e8, 2**25)
    h, c = DeviceModel(probed).hot_cold_times_s([big])
    h0, c0 = DeviceModel(plain).hot_cold_times_s([big])
    assert h[0] == h0[0]
    assert c[0] - h[0] == pytest.approx(0.4 * (c0[0] - h0[0]), rel=1e-6)
    # the probe's layers are GEMMs: an eager convolution (re-ordering its weights as it reads
    # them) reading as much keeps the narrow price; a prepacked one streams as a GEMM does
    conv = Kernel("conv", int(1e8), 2**25, 0, "m", ("aten.convolution",), variant="mkldnn")
    hc, cc = DeviceModel(probed).hot_cold_times_s([conv])
    assert cc[0] - hc[0] == pytest.approx(2**25 * 2e-10, rel=1e-6)
    for variant in ("mkldnn_prepacked", "mkldnn_prepacked_unaligned"):
        packed = dataclasses.replace(conv, variant=variant)
        hp, cp = DeviceModel(probed).hot_cold_times_s([packed])
        assert cp[0] - hp[0] == pytest.approx(2**25 * 0.4 * 2e-10, rel=1e-6)


def test_kernels_larger_than_the_cache_paid_the_stream_in_their_hot_samples() -> None:
    """The probe's penalty per byte is paid in proportion to the share of its bytes a kernel's
    own hot samples found in cache (the soft LRU's 1 − φ of what it touches) over that share for
    the probe's layers of its size: in full up to the probed sizes, less beyond them, nothing
    once a kernel touches more than the cache holds (its hot samples streamed from memory).
    A convolution eager runs as im2col and one GEMM on its weights as stored (``slow2d``)
    streams as a GEMM does."""
    cache = {"lo_bytes": 2.0**23, "hi_bytes": 2.0**25, "stream_share": 0.5,
             "cold_s_per_byte": 2e-10, "narrow_bytes": 2.0**20, "wide_bytes": 2.0**23,
             "wide_ratio": 0.5}
    device = DeviceProfile("dev", "cpu", "sync", {"gemm": OpClassData("samples", SAT_ROWS),
                                                  "conv": OpClassData("samples", SAT_ROWS)},
                           cache=cache)
    sizes = (2**20, 2**23, 5 * 2**22, 2**25, 2**26)
    h, c = DeviceModel(device).hot_cold_times_s([_gemm(1e8, b) for b in sizes])
    per_byte = (c - h) / np.array(sizes)
    assert per_byte[0] == pytest.approx(2e-10)
    assert per_byte[1] == pytest.approx(1e-10)  # the wide layers' price, all resident
    assert per_byte[2] == pytest.approx(0.5 * 1e-10)  # half of it resident when hot
    assert per_byte[3] == per_byte[4] == 0.0  # streamed in their hot samples already
    conv = Kernel("conv", int(1e8), 2**23, 0, "m", ("aten.convolution",), variant="mkldnn")
    slow = dataclasses.replace(conv, variant="slow2d")
    hc, cc = DeviceModel(device).hot_cold_times_s([conv, slow])
    assert cc[0] - hc[0] == pytest.approx(2**23 * 2e-10, rel=1e-6)  # re-orders: narrow price
    assert cc[1] - hc[1] == pytest.approx(2**23 * 1e-10, rel=1e-6)  # a GEMM's


def test_eagers_convolution_chain_prices_its_oneDNN_convolutions_streaming() -> None:
    """With a shared ``conv_ratio`` (eager's own chain of oneDNN convolutions, timed by the
    calibration), a convolution oneDNN runs streams at the GEMM rate for its size times the
    ratio; one run as im2col and a GEMM (``slow2d``) or on prepacked weights keeps a GEMM's."""
    cache = {"lo_bytes": 1e9, "hi_bytes": 1e12, "stream_share": 0.5, "cold_s_per_byte": 2e-10,
             "narrow_bytes": 2.0**20, "wide_bytes": 2.0**24, "wide_ratio": 0.4,
             "conv_ratio": 0.3}
    classes = {"gemm": OpClassData("samples", SAT_ROWS), "conv": OpClassData("samples", SAT_ROWS)}
    device = DeviceProfile("dev", "cpu", "sync", classes, cache=cache)
    conv = Kernel("conv", int(1e8), 2**25, 0, "m", ("aten.convolution",), variant="mkldnn")
    others = [dataclasses.replace(conv, variant=v) for v in ("slow2d", "mkldnn_prepacked")]
    h, c = DeviceModel(device).hot_cold_times_s([_gemm(1e8, 2**25), conv, *others])
    gemm = 2**25 * 0.4 * 2e-10  # a 32 MiB layer: the wide layers' price per byte
    assert c[0] - h[0] == pytest.approx(gemm, rel=1e-6)
    assert c[1] - h[1] == pytest.approx(gemm * 0.3, rel=1e-6)
    assert c[2] - h[2] == pytest.approx(gemm, rel=1e-6)
    assert c[3] - h[3] == pytest.approx(gemm, rel=1e-6)


def test_a_framework_probed_through_its_runtime_streams_by_its_own_chains() -> None:
    """``<framework>/`` cache entries (a cache probe run through the framework's runtime)
    override the shared ones for that framework only; with its ``conv_ratio``, every
    convolution, whatever its variant, streams at the GEMM rate for its size times the ratio."""
    cache = {"lo_bytes": 1e9, "hi_bytes": 1e12, "stream_share": 0.5, "cold_s_per_byte": 2e-10,
             "narrow_bytes": 2.0**20, "wide_bytes": 2.0**24, "wide_ratio": 0.4,
             "onnxruntime/cold_s_per_byte": 5e-11, "onnxruntime/wide_ratio": 1.0,
             "onnxruntime/conv_ratio": 1.5}
    classes = {"gemm": OpClassData("samples", SAT_ROWS), "conv": OpClassData("samples", SAT_ROWS)}
    device = DeviceProfile("dev", "cpu", "sync", classes, cache=cache)
    conv = Kernel("conv", int(1e8), 2**25, 0, "m", ("com.microsoft.nchwc::Conv",))
    gemm = _gemm(1e8, 2**25)
    h, c = DeviceModel(device, "fp32", "onnxruntime").hot_cold_times_s([gemm, conv])
    assert c[0] - h[0] == pytest.approx(2**25 * 5e-11, rel=1e-6)
    assert c[1] - h[1] == pytest.approx(2**25 * 5e-11 * 1.5, rel=1e-6)
    # eager keeps the shared model: its convolution the narrow layers' price
    he, ce = DeviceModel(device).hot_cold_times_s([gemm, conv])
    assert ce[0] - he[0] == pytest.approx(2**25 * 0.4 * 2e-10, rel=1e-6)
    assert ce[1] - he[1] == pytest.approx(2**25 * 2e-10, rel=1e-6)


# ---- fallback -----------------------------------------------------------------------------------

def test_missing_class_falls_back_with_warning() -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}))
    warnings: list[str] = []
    conv = Kernel("conv", 10**9, 0, 0, "m", ("aten.convolution",))
    (t,) = dm.kernel_times_s([conv], warnings)
    assert t == pytest.approx(dm.kernel_times_s([_gemm(1e9)])[0])  # priced as a gemm
    assert len(warnings) == 1
    assert "'conv'" in warnings[0] and "'gemm'" in warnings[0]


def test_fallback_chain() -> None:
    rows = tuple((0.0, b / 2, b / 2, b / 1e10) for b in (1e3, 1e5, 1e7))
    dm = DeviceModel(_device({"elementwise": OpClassData("samples", rows)}))
    warnings: list[str] = []
    dm.kernel_times_s([_ew(1e5, "embedding")], warnings)  # embedding -> copy -> elementwise
    assert len(warnings) == 1 and "'embedding'" in warnings[0] and "'elementwise'" in warnings[0]


def test_unreachable_fallback_is_a_profile_error() -> None:
    prof = HardwareProfile("p", "calibrated", _device({"gemm": OpClassData("samples", SAT_ROWS)}))
    with pytest.raises(FtmodelError):
        device = profile_from_dict(json.loads(json.dumps(prof.to_dict()))).device
        DeviceModel(device).kernel_times_s([_ew(1e5)])


# ---- roofline -----------------------------------------------------------------------------------

ROOF: dict[str, Any] = {"peak_macs_per_s": 1e12, "bandwidth_Bps": 1e11, "floor_s": 2e-6}


@pytest.mark.parametrize("macs, nbytes", [(1e12, 1e9), (1e9, 1e11), (5e11, 5e10)])
def test_roofline_big_kernels(macs: float, nbytes: float) -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("roofline", params=ROOF)}))
    (t,) = dm.kernel_times_s([_gemm(macs, nbytes)])
    assert t == pytest.approx(max(macs / 1e12, nbytes / 1e11), rel=1e-9)


def test_roofline_floor() -> None:
    dm = DeviceModel(_device({"gemm": OpClassData("roofline", params=ROOF)}, floor=5e-6))
    t = dm.kernel_times_s([_gemm(0), _gemm(10, 10), _gemm(1e3, 1e3)])
    assert (t >= 2e-6).all()
    assert (t >= 5e-6).all()  # the device's kernel floor applies too
    np.testing.assert_allclose(t, 5e-6)


def test_roofline_efficiency_halves() -> None:
    params = {**ROOF, "half_macs": 1e9, "half_bytes": 1e6}
    dm = DeviceModel(_device({"gemm": OpClassData("roofline", params=params)}))
    (t,) = dm.kernel_times_s([_gemm(1e9, 0)])
    # at macs == half_macs the efficiency is 1/2: time = 2 · macs / peak
    assert t == pytest.approx(2 * 1e9 / 1e12, rel=1e-6)


def test_roofline_byte_class_ignores_macs() -> None:
    dm = DeviceModel(_device({"elementwise": OpClassData("roofline",
                                                         params={"bandwidth_Bps": 1e11})}))
    (t,) = dm.kernel_times_s([_ew(2e9)])
    assert t == pytest.approx(2e9 / 1e11, rel=1e-9)


def test_more_work_never_less_time() -> None:
    rows = tuple((m, 2 * 4.0 * m ** (2 / 3), 4.0 * m ** (2 / 3), (m + 1e5) / 1e10)
                 for m in (1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9))
    dm = DeviceModel(_device({"gemm": OpClassData("samples", rows)}))
    # nn.Linear(16, 32) at batch b: macs = 512·b, read = 4·(16·b + 512 + 32), written = 4·32·b
    ks = [Kernel("gemm", 512 * b, 4 * (16 * b + 512 + 32), 4 * 32 * b, "0", ("aten.addmm",))
          for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    t = dm.kernel_times_s(ks)
    # the raw nearest-neighbour interpolation priced batch 8 ~26% below batch 4 (where the
    # samples bound the time, equal times may differ in the last bits)
    assert (np.diff(t) >= -1e-12 * t[1:]).all(), t
    raw = dm._curves["gemm"].raw(*(np.array(v, dtype=float) for v in zip(
        *[(k.macs, k.bytes_read, k.bytes_written) for k in ks])))
    assert (np.diff(raw) < 0).any()  # the case is one that needs the monotone grid



def test_monotone_over_a_noisy_sample_cloud() -> None:
    """Timed samples are noisy (a larger GEMM measured faster than a smaller one): along any
    path that adds MACs and bytes, the priced time still never falls, and samples that agree
    with their neighbours are reproduced."""
    rng = np.random.default_rng(0)
    m = np.exp(rng.uniform(np.log(1e3), np.log(1e9), 60))
    nbytes = 12.0 * m ** (2 / 3) * np.exp(rng.uniform(-1.0, 2.0, 60))  # square to skinny
    t = (m / 2e10 + nbytes / 4e10 + 2e-6) * np.exp(rng.normal(0.0, 0.2, 60))  # ±20% noise
    rows = tuple((float(a), float(b), 0.0, float(c)) for a, b, c in zip(m, nbytes, t))
    dm = DeviceModel(_device({"gemm": OpClassData("samples", rows)}))
    for _ in range(20):  # random paths of growing MACs and bytes
        steps = np.exp(np.cumsum(rng.uniform(0.0, 0.4, (40, 2)), axis=0))
        macs, nb = 2e3 * steps[:, 0], 1e4 * steps[:, 1]
        ks = [Kernel("gemm", int(a), int(b), 0, "m", ("aten.mm",)) for a, b in zip(macs, nb)]
        times = dm.kernel_times_s(ks)
        assert (np.diff(times) >= -1e-12 * times[1:]).all()
    mid = int(np.argsort(m)[30])
    (at,) = dm.kernel_times_s([Kernel("gemm", int(m[mid]), int(nbytes[mid]), 0, "m",
                                      ("aten.mm",))])
    assert at == pytest.approx(t[mid], rel=0.5)  # near its sample despite the noise


def test_no_node_is_priced_above_a_sample_doing_more_work() -> None:
    """oneDNN-like convolutions: a fixed 30 µs per call, then MACs and bytes. Few samples lie
    on the thin low-intensity edge (a tiny kernel and a large one, 4 decades apart): the time
    per MAC interpolated or extrapolated there must not price a node above a calibrated sample
    that does more MACs and moves more bytes, nor spread that to the samples themselves."""
    def row(macs: float, nbytes: float) -> tuple[float, float, float, float]:
        return macs, nbytes, 0.0, 30e-6 + macs / 2.5e11 + nbytes / 1e10

    shapes = ((2e3, 4.6e3), (1.2e4, 2.6e4), (2.2e5, 2.4e4), (3.9e5, 1.3e5), (1.3e6, 1.9e5),
              (1.8e6, 1.7e5), (3.5e6, 3.2e5), (1.4e7, 4e5), (1.9e7, 1.3e7), (7.7e7, 2e6),
              (3e8, 3e6), (9e8, 1.1e7))
    rows = tuple(row(m, b) for m, b in shapes)
    dm = DeviceModel(_device({"conv": OpClassData("samples", rows)}))
    ks = [Kernel("conv", int(m), int(b), 0, "m", ("aten.convolution",)) for m, b in shapes]
    t = dm.kernel_times_s(ks)
    # observed before samples bounded the grid: the (1.3e6, 1.9e5) sample at 1.45x its time
    np.testing.assert_allclose(t, [r[3] for r in rows], rtol=0.05)
    (mid,) = dm.kernel_times_s([Kernel("conv", 2_360_000, 188_000, 0, "m",
                                       ("aten.convolution",))])
    assert rows[4][3] * 0.9 <= mid <= rows[6][3] * 1.05


def _gpu_conv_rows(n: int, seed: int) -> list[tuple[float, float, float, float]]:
    """cuDNN-like convolutions: 4 µs, then 5e13 MAC/s and 2e12 B/s, ±15% noise."""
    rng = np.random.default_rng(seed)
    m = np.exp(rng.uniform(np.log(1e6), np.log(3e10), n))
    nbytes = 8.0 * m ** (2 / 3) * np.exp(rng.uniform(-1.0, 1.5, n))
    t = (4e-6 + m / 5e13 + nbytes / 2e12) * np.exp(rng.normal(0.0, 0.15, n))
    return [(float(a), float(b), 0.0, float(c)) for a, b, c in zip(m, nbytes, t)]


def test_an_inverted_sample_does_not_raise_larger_kernels() -> None:
    """One odd shape for which the library picks a slow algorithm (on an H200: a 7x7
    convolution on a 7-px map, 2e7 MACs in 675 µs, 30-70x the convolutions around it) is set
    aside; kept, the monotone envelope priced every larger convolution towards it (ResNet-34's
    3x3 convolutions at 6 TMAC/s, 2.3x their measured time)."""
    rows = _gpu_conv_rows(60, 1)
    odd = (2e7, 1.7e6, 0.0, 675e-6)
    dm = DeviceModel(_device({"conv": OpClassData("samples", tuple(rows) + (odd,))}))
    clean = DeviceModel(_device({"conv": OpClassData("samples", tuple(rows))}))
    ks = [Kernel("conv", int(m), int(b), 0, "m", ("aten.convolution",))
          for m, b in ((6.8e8, 9.6e6), (3.4e8, 7.4e6), (2e9, 2e7), (5e7, 3e6))]
    np.testing.assert_allclose(dm.kernel_times_s(ks), clean.kernel_times_s(ks), rtol=1e-9)
    truth = [4e-6 + k.macs / 5e13 + k.bytes_total / 2e12 for k in ks]
    np.testing.assert_allclose(dm.kernel_times_s(ks), truth, rtol=0.35)


def test_noise_and_other_classes_are_not_inversions() -> None:
    """A sample 3x slower than larger ones is noise the envelope averages, not an inversion;
    a byte class's slow family (one transcendental function beside faster ones on a merged
    curve) is a different kernel, and GEMMs' slow small-row regime is one models run in: both
    are kept."""
    rows = _gpu_conv_rows(30, 2)
    slow = (2e7, 1.7e6, 0.0, 3 * (4e-6 + 2e7 / 5e13 + 1.7e6 / 2e12))
    s = np.array(rows + [slow])
    assert not inversions("conv", s[:, 0], s[:, 1], s[:, 2], s[:, 3]).any()
    b = np.geomspace(1e4, 1e8, 6)
    fast, slowf = b / 1e11, 20 * b / 1e11
    t = np.concatenate([fast, slowf])
    both = np.concatenate([b, b])
    assert not inversions("elementwise", np.zeros(12), both, both, t).any()
    odd = np.array(rows + [(2e7, 1.7e6, 0.0, 675e-6)])
    flagged = inversions("conv", odd[:, 0], odd[:, 1], odd[:, 2], odd[:, 3])
    assert flagged.tolist() == [False] * len(rows) + [True]
    assert not inversions("gemm", odd[:, 0], odd[:, 1], odd[:, 2], odd[:, 3]).any()


def test_two_shapes_of_one_size_are_averaged() -> None:
    """A copy curve with two families at the same bytes (a contiguous clone and a transpose):
    a kernel of that size is priced at their geometric mean, not at either one."""
    rows = tuple((0.0, b, b, b / 1e10) for b in (1e4, 1e5, 1e6)) + tuple(
        (0.0, b, b, 4 * b / 1e10) for b in (1e4, 1e5, 1e6))
    dm = DeviceModel(_device({"copy": OpClassData("samples", rows)}))
    (t,) = dm.kernel_times_s([Kernel("copy", 0, 100_000, 100_000, "m", ("aten.clone",))])
    assert t == pytest.approx(2 * 1e5 / 1e10, rel=0.05)

# ---- MAC classes: arithmetic intensity in the neighbour metric ----------------------------------

# the (k, n) of the CPU GEMM sweep (ftmodel.calibration.ops), at m = 1 ... 1024
_SWEEP_KNS = ((64, 64), (128, 128), (256, 256), (512, 1000), (768, 768), (768, 3072), (3072, 768),
              (1024, 1024), (2048, 512), (128, 512), (4096, 1024), (4096, 4096))


def _gemm_row(m: int, k: int, n: int) -> tuple[float, float, float, float]:
    """A GEMM on a machine with 2e10 MAC/s of math, 4e9 B/s to its weights and 4e10 B/s to
    its activations: a few-row GEMM streams its weights at a few MACs per byte, bound by them."""
    macs = float(m * k * n)
    t = macs / 2e10 + 4.0 * k * n / 4e9 + 4.0 * (m * k + m * n) / 4e10
    return macs, 4.0 * (m * k + k * n), 4.0 * m * n, t


def test_few_row_gemm_priced_from_samples_of_like_intensity() -> None:
    rows = tuple(_gemm_row(m, k, n) for m in (1, 4, 16, 64, 256, 1024) for k, n in _SWEEP_KNS
                 if m * k * n <= 1.2e9)
    dm = DeviceModel(_device({"gemm": OpClassData("samples", rows)}))
    assert dm._curves["gemm"].intensity_weight > 0  # chosen on the samples themselves
    for m, k, n in ((4, 64, 2048), (4, 192, 1152), (32, 128, 128), (8, 256, 512)):
        macs, br, bw, truth = _gemm_row(m, k, n)
        (t,) = dm.kernel_times_s([Kernel("gemm", int(macs), int(br), int(bw), "m", ("aten.mm",))])
        # observed: 1.00, 1.00, 0.87, 0.83 of the truth; in the plain (log MACs, log bytes)
        # plane 0.51, 1.82, 0.94, 0.60 (a 1×1 convolution on a 2×2 map is such a GEMM)
        assert t == pytest.approx(truth, rel=0.3), (m, k, n)


# ---- fused recurrent layers: sequential steps ----------------------------------------------------

def test_recurrent_steps_run_one_after_another() -> None:
    # 64 steps, half the MACs recurrent: one GEMM of the input half over all tokens, then 64
    # GEMMs of 1/128 of the MACs each (SAT_ROWS: time = (macs + 1e5) / 1e10, no bytes)
    dm = DeviceModel(_device({"onnxruntime/gemm": OpClassData("samples", SAT_ROWS),
                              "gemm": OpClassData("samples", SAT_ROWS)}), "fp32", "onnxruntime")
    macs = 1.28e7
    fused = Kernel("gemm", int(macs), 0, 0, "rnn", ("aten.mkldnn_rnn_layer",),
                   variant="steps=64,rec=0.5")
    t = dm.kernel_times_s([fused, _gemm(macs)])
    one_gemm = (macs + 1e5) / 1e10
    expected = (macs / 2 + 1e5) / 1e10 + 64 * (macs / 2 / 64 + 1e5) / 1e10
    assert t[0] == pytest.approx(expected, rel=1e-2)  # the curve interpolates between samples
    assert t[1] == pytest.approx(one_gemm, rel=1e-2)
    assert t[0] > t[1]  # dependent small steps cost more than one GEMM of the same MACs
    # on eager's curves (weights re-packed per call in the samples) it stays one GEMM
    eager = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}))
    assert eager.kernel_times_s([fused])[0] == pytest.approx(one_gemm, rel=1e-2)


def test_fused_layer_on_a_per_step_curve_costs_its_steps_times_a_step() -> None:
    # a per-step curve (gemm@mkldnn_rnn_layer) holds one step's work and time: 10 steps of
    # 1/10 of the layer's MACs each, whatever the recurrent share; a GEMM stays on the GEMM curve
    # (twice as slow here); both at sample points (no weights: a step is 1/10 of every byte)
    dm = DeviceModel(_device({"gemm@mkldnn_rnn_layer": OpClassData("samples", SAT_ROWS),
                              "gemm": OpClassData("samples", tuple(
                                  (m, b_r, b_w, 2 * t) for m, b_r, b_w, t in SAT_ROWS))}))
    macs = 1e7
    fused = Kernel("gemm", int(macs), 0, 0, "rnn", ("aten.mkldnn_rnn_layer.default",),
                   variant="steps=10,rec=0.5")
    t = dm.kernel_times_s([fused, _gemm(macs)])
    assert t[0] == pytest.approx(10 * (macs / 10 + 1e5) / 1e10, rel=1e-2)
    assert t[1] == pytest.approx(2 * (macs + 1e5) / 1e10, rel=1e-2)


def test_a_per_step_curve_is_monotone_in_macs_only() -> None:
    """A step's bytes are the layer's weights, read whole by every step: at equal MACs a step
    with more weights has fewer rows, and oneDNN runs it faster (an Intel Xeon: 25.5 µs at
    hidden 64 and batch 64, 18.5 µs at hidden 256 and batch 4, both 1.6 M MACs). Each sample is
    priced as measured; on a GEMM curve the same samples are held monotone in bytes too."""
    rows = []
    for hidden, per_mac in ((64, 16e-12), (128, 13e-12), (256, 11e-12), (512, 10e-12)):
        weights = 4.0 * 4 * (hidden + hidden // 2) * hidden
        for batch in (1, 4, 16, 64):
            macs = weights / 4 * batch
            rows.append((macs, weights, 16.0 * hidden * batch, 2e-6 + macs * per_mac))
    dm = DeviceModel(_device({"gemm@mkldnn_rnn_layer": OpClassData("samples", tuple(rows)),
                              "gemm": OpClassData("samples", tuple(rows))}))
    steps = 48
    layers = [Kernel("gemm", int(m * steps), int(w), int(bw * steps), "rnn",
                     ("aten.mkldnn_rnn_layer.default",), variant=f"steps={steps},rec=0.5",
                     bytes_weights=int(w)) for m, w, bw, _ in rows]
    t = dm.kernel_times_s(layers)
    np.testing.assert_allclose(t, [steps * r[3] for r in rows], rtol=1e-6)
    # two directions run one after the other (dirs=2): twice the steps and the weights of the
    # kernel, each step reading one direction's, is twice a one-way layer's time
    both = [Kernel("gemm", int(2 * m * steps), int(2 * w), int(2 * bw * steps), "rnn",
                   ("LSTM",), variant=f"steps={2 * steps},rec=0.5,dirs=2",
                   bytes_weights=int(2 * w)) for m, w, bw, _ in rows]
    np.testing.assert_allclose(dm.kernel_times_s(both), 2 * t, rtol=1e-6)
    gemm = dm._curves["gemm"]
    on_gemm = gemm(*(np.array(v) for v in zip(*[r[:3] for r in rows])))
    assert np.abs(np.log(on_gemm / np.array([r[3] for r in rows]))).max() > 0.05


def test_a_per_call_curve_adds_each_call_once_to_a_fused_layer() -> None:
    # gemm@mkldnn_rnn_layer:per_call prices what a call of the layer costs besides its steps
    # (oneDNN's weight re-order), at a step's work: 10 and 40 steps differ by 30 steps exactly
    call = tuple((m, b_r, b_w, 2e-4) for m, b_r, b_w, _ in SAT_ROWS)
    dm = DeviceModel(_device({"gemm@mkldnn_rnn_layer": OpClassData("samples", SAT_ROWS),
                              "gemm@mkldnn_rnn_layer:per_call": OpClassData("samples", call),
                              "gemm": OpClassData("samples", SAT_ROWS)}))
    step_macs = 1e6

    def layer(steps: int) -> Kernel:
        return Kernel("gemm", int(step_macs * steps), 0, 0, "rnn",
                      ("aten.mkldnn_rnn_layer.default",), variant=f"steps={steps},rec=0.5")

    t10, t40 = dm.kernel_times_s([layer(10), layer(40)])
    step_s = (step_macs + 1e5) / 1e10
    assert t10 == pytest.approx(2e-4 + 10 * step_s, rel=1e-2)
    assert t40 - t10 == pytest.approx(30 * step_s, rel=1e-2)
    # without the per-call curve (an older profile) a call costs its steps only
    old = DeviceModel(_device({"gemm@mkldnn_rnn_layer": OpClassData("samples", SAT_ROWS),
                               "gemm": OpClassData("samples", SAT_ROWS)}))
    assert old.kernel_times_s([layer(10)])[0] == pytest.approx(10 * step_s, rel=1e-2)


def test_runtime_recurrent_nodes_take_its_per_step_curve() -> None:
    # ONNX Runtime's LSTM and GRU nodes (op names "LSTM", "GRU") are priced on its per-step
    # curve of fused layers when the profile has one (measured through its LSTM: each step's
    # fixed work included), not as steps of its lone GEMM samples; a plain GEMM node is not
    slow = tuple((m, b_r, b_w, 3 * t) for m, b_r, b_w, t in SAT_ROWS)
    dev = _device({"onnxruntime/gemm@mkldnn_rnn_layer": OpClassData("samples", slow),
                   "onnxruntime/gemm": OpClassData("samples", SAT_ROWS),
                   "gemm": OpClassData("samples", SAT_ROWS)})
    dm = DeviceModel(dev, "fp32", "onnxruntime")
    macs = 1e7
    gru = Kernel("gemm", int(macs), 0, 0, "rnn", ("GRU",), variant="steps=10,rec=0.5")
    lstm = Kernel("gemm", int(macs), 0, 0, "rnn", ("LSTM",), variant="steps=10,rec=0.5")
    plain = Kernel("gemm", int(macs), 0, 0, "fc", ("Gemm",))
    assert dm._key("gemm", gru.variant, "GRU") == "onnxruntime/gemm@mkldnn_rnn_layer"
    t = dm.kernel_times_s([gru, lstm, plain])
    assert t[0] == pytest.approx(10 * 3 * (macs / 10 + 1e5) / 1e10, rel=1e-2)
    assert t[1] == pytest.approx(t[0])
    assert t[2] == pytest.approx((macs + 1e5) / 1e10, rel=1e-2)
    # a profile with a per-step curve measured through its GRU prices GRU nodes on it, and
    # never its LSTM nodes
    slower = tuple((m, b_r, b_w, 5 * t) for m, b_r, b_w, t in SAT_ROWS)
    with_gru = DeviceModel(_device({**dev.op_classes,
                                    "onnxruntime/gemm@gru": OpClassData("samples", slower)}),
                           "fp32", "onnxruntime")
    assert with_gru._key("gemm", gru.variant, "GRU") == "onnxruntime/gemm@gru"
    assert with_gru._key("gemm", lstm.variant, "LSTM") == "onnxruntime/gemm@mkldnn_rnn_layer"
    t_gru, t_lstm = with_gru.kernel_times_s([gru, lstm])
    assert t_gru == pytest.approx(10 * 5 * (macs / 10 + 1e5) / 1e10, rel=1e-2)
    assert t_lstm == pytest.approx(t[1])


def test_lstm_variant_declares_its_steps_and_recurrent_share() -> None:
    import torch
    from torch import nn

    from ftmodel.tracing.dispatch import trace
    from ftmodel.tracing.rnn_variants import steps_of

    t, b, i, h = 9, 2, 12, 20
    tr = trace(nn.LSTM(i, h, batch_first=True), torch.randn(b, t, i))  # (B, T, I)
    rnn = [r for r in tr.records if r.op_class == "gemm"]
    assert len(rnn) == 1  # one fused layer
    steps, rec = steps_of(rnn[0].variant)
    assert steps == t and rec == pytest.approx(h / (i + h), abs=1e-4)


@pytest.mark.parametrize("op_class,variant,refined", [
    ("conv_grouped", "mkldnn_gemm", "mkldnn"),  # grouped convolutions oneDNN runs as GEMMs
    ("conv", "slow2d_narrow", "slow2d"),  # im2col convolutions with few output pixels
])
def test_a_variant_takes_its_own_curve_or_the_one_it_refines(op_class: str, variant: str,
                                                              refined: str) -> None:
    # a profile with a curve of the variant prices it there; one calibrated before it was
    # sampled on the curve of the variant it refines, as before
    slow = tuple((m, b_r, b_w, 5 * t) for m, b_r, b_w, t in SAT_ROWS)
    fast = tuple((m, b_r, b_w, 2 * t) for m, b_r, b_w, t in SAT_ROWS)
    k = Kernel(op_class, 10**7, 10**6, 10**6, "c", ("aten.convolution.default",),
               variant=variant)
    base = {op_class: OpClassData("samples", SAT_ROWS),
            f"{op_class}:{refined}": OpClassData("samples", fast)}
    old = DeviceModel(_device(base), "fp32")
    assert old._key(op_class, variant, "") == f"{op_class}:{refined}"
    new = DeviceModel(_device({**base, f"{op_class}:{variant}": OpClassData("samples", slow)}),
                      "fp32")
    assert new._key(op_class, variant, "") == f"{op_class}:{variant}"
    (t_old,), (t_new,) = old.kernel_times_s([k]), new.kernel_times_s([k])
    assert t_new == pytest.approx(2.5 * t_old, rel=1e-2)


def test_grouped_gemm_convolutions_on_channels_last_fall_back_to_their_nhwc_curve() -> None:
    # inductor's channels-last variant of a grouped convolution run as GEMMs falls back to the
    # channels-last oneDNN curve, then the class's
    fast = tuple((m, b_r, b_w, 2 * t) for m, b_r, b_w, t in SAT_ROWS)
    base = {"conv_grouped": OpClassData("samples", SAT_ROWS),
            "conv_grouped:mkldnn": OpClassData("samples", fast)}
    assert DeviceModel(_device(base), "fp32")._key(
        "conv_grouped", "mkldnn_gemm_nhwc", "") == "conv_grouped"
    nhwc = DeviceModel(_device({**base, "conv_grouped:mkldnn_nhwc": OpClassData("samples", fast)}),
                       "fp32")
    assert nhwc._key("conv_grouped", "mkldnn_gemm_nhwc", "") == "conv_grouped:mkldnn_nhwc"


def test_convolutions_off_the_channel_block_take_their_own_curve() -> None:
    # eager's oneDNN convolutions on and off the channel block (variants mkldnn and
    # mkldnn_unaligned) and a framework's prepacked ones keyed by op and variant each take their
    # own curve; a variant without one falls back to the op's, then the class's
    slow = tuple((m, b_r, b_w, 2 * t) for m, b_r, b_w, t in SAT_ROWS)
    dev = _device({"conv_grouped": OpClassData("samples", SAT_ROWS),
                   "conv_grouped:mkldnn_unaligned": OpClassData("samples", slow),
                   "torchscript/conv_grouped@mkldnn_convolution": OpClassData("samples", SAT_ROWS),
                   "torchscript/conv_grouped@mkldnn_convolution:mkldnn_prepacked_unaligned":
                       OpClassData("samples", slow)})

    def dw(variant: str, op: str = "aten.convolution.default") -> Kernel:
        return Kernel("conv_grouped", 10**7, 10**6, 10**6, "dw", (op,), variant=variant)

    eager = DeviceModel(dev, "fp32")
    on, off = eager.kernel_times_s([dw("mkldnn"), dw("mkldnn_unaligned")])
    assert off == pytest.approx(2 * on, rel=1e-2)
    ts = DeviceModel(dev, "fp32", "torchscript")
    prim = "prim::mkldnn_convolution"
    assert ts._key("conv_grouped", "mkldnn_prepacked_unaligned", prim) == \
        "torchscript/conv_grouped@mkldnn_convolution:mkldnn_prepacked_unaligned"
    assert ts._key("conv_grouped", "mkldnn_prepacked", prim) == \
        "torchscript/conv_grouped@mkldnn_convolution"
    on, off = ts.kernel_times_s([dw("mkldnn_prepacked", prim), dw("mkldnn_prepacked_unaligned",
                                                                    prim)])
    assert off == pytest.approx(2 * on, rel=1e-2)


def test_a_sample_faster_than_the_device_ever_ran_is_left_out() -> None:
    # a sample whose time net of its floor vanished (1 ns for 1e7 MACs: 1e16 MAC/s) would price
    # the kernels around it far below what every resolved sample ran at
    ghost = (1e7, 0.0, 0.0, 1e-9)
    dm = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS + (ghost,))}))
    clean = DeviceModel(_device({"gemm": OpClassData("samples", SAT_ROWS)}))
    probe = [_gemm(m) for m in (3e6, 1e7, 3e7)]
    np.testing.assert_allclose(dm.kernel_times_s(probe), clean.kernel_times_s(probe), rtol=1e-6)


def test_per_call_curves_set_no_peak_rate() -> None:
    # a per-call curve's axis is one step's work: its rate is not a rate the device reached
    from ftmodel.estimate.kernels import measured_peaks

    per_call = OpClassData("samples", ((1e8, 0.0, 0.0, 2e-5), (1e9, 0.0, 0.0, 3e-5),
                                       (1e10, 0.0, 0.0, 4e-5)))
    dev = _device({"gemm": OpClassData("samples", SAT_ROWS),
                   "gemm@mkldnn_rnn_layer:per_call": per_call})
    assert measured_peaks(dev)[0] == pytest.approx(measured_peaks(_device(
        {"gemm": OpClassData("samples", SAT_ROWS)}))[0])


# ---- per-plane cost (batch norm over many small planes) ---------------------------------------

# batch norm's curve: bytes read and written at 2 GB/s plus 2 µs
BN_ROWS = tuple((0.0, b, b, 2e-6 + 2 * b / 2e9) for b in (1e3, 1e4, 1e5, 1e6, 1e7))
# what looping over planes adds: 5 ns per plane
PLANE_ROWS = tuple((0.0, p, 0.0, 5e-9 * p) for p in (256.0, 4096.0, 65536.0))


def _bn(nbytes: float, planes: int) -> Kernel:
    return Kernel("norm", 0, int(nbytes), int(nbytes), "bn", ("aten.native_batch_norm.default",),
                  planes=planes)


def test_a_per_plane_curve_adds_the_planes_cost() -> None:
    curves = {"norm": OpClassData("samples", BN_ROWS),
              "norm@native_batch_norm": OpClassData("samples", BN_ROWS)}
    with_planes = DeviceModel(_device({**curves, "norm@native_batch_norm:per_plane":
                                       OpClassData("samples", PLANE_ROWS)}))
    without = DeviceModel(_device(curves))
    few, many = _bn(1e5, 0), _bn(1e5, 4096)
    t_few, t_many = with_planes.kernel_times_s([few, many])
    assert t_many - t_few == pytest.approx(5e-9 * 4096, rel=2e-2)
    # a kernel that counts no planes, and a profile without the curve, price bytes alone
    assert t_few == pytest.approx(without.kernel_times_s([few])[0], rel=1e-9)
    assert without.kernel_times_s([many])[0] == pytest.approx(t_few, rel=1e-9)
    # a per-plane curve's axis is planes, not bytes: it sets no peak byte rate
    from ftmodel.estimate.kernels import measured_peaks
    assert measured_peaks(with_planes.device) == measured_peaks(without.device)


def test_onnx_runtime_inner_calls_are_priced_on_their_curves_companion() -> None:
    # an MLAS transpose's calls on the transpose curve's companion, an Add's broadcast spans on
    # the element-wise one's; a kernel of another variant does not borrow the transposes'
    curves = {"copy": OpClassData("samples", BN_ROWS),
              "elementwise": OpClassData("samples", BN_ROWS),
              "onnxruntime/copy": OpClassData("samples", BN_ROWS),
              "onnxruntime/copy:transpose_mlas": OpClassData("samples", BN_ROWS),
              "onnxruntime/elementwise": OpClassData("samples", BN_ROWS)}
    per_call = tuple((0.0, p, 0.0, 6e-7 * p) for p in (64.0, 256.0, 1024.0))
    per_span = tuple((0.0, p, 0.0, 9e-9 * p) for p in (1024.0, 4096.0, 16384.0))
    dm = DeviceModel(_device({**curves,
                              "onnxruntime/copy:transpose_mlas:per_plane":
                                  OpClassData("samples", per_call),
                              "onnxruntime/elementwise:per_plane":
                                  OpClassData("samples", per_span)}), framework="onnxruntime")

    def k(op_class: str, member: str, variant: str, planes: int) -> Kernel:
        return Kernel(op_class, 0, 10**5, 10**5, "m", (member,), variant=variant, planes=planes)

    t = dm.kernel_times_s([k("copy", "Transpose", "transpose_mlas", 512),
                           k("copy", "Transpose", "transpose_mlas", 0),
                           k("elementwise", "Add", "", 16384), k("elementwise", "Add", "", 0),
                           k("copy", "Transpose", "transpose_blocks", 512)])
    assert t[0] - t[1] == pytest.approx(6e-7 * 512, rel=2e-2)
    assert t[2] - t[3] == pytest.approx(9e-9 * 16384, rel=2e-2)
    assert t[4] == pytest.approx(t[1], rel=1e-9)


def test_a_mac_class_companion_is_read_along_its_plane_count() -> None:
    # a batched MatMul's matrices on the bmm curve's companion: the companion's axis is the
    # count, held where a byte class holds bytes, though bmm itself is priced on MACs
    bmm_rows = tuple((m, m / 4.0, m / 4.0, m / 2e10) for m in (1e5, 1e6, 1e7, 1e8))
    per_matrix = tuple((0.0, p, 0.0, 1.5e-7 * p) for p in (64.0, 512.0, 2048.0))
    curves = {"bmm": OpClassData("samples", bmm_rows),
              "onnxruntime/bmm": OpClassData("samples", bmm_rows)}
    dm = DeviceModel(_device({**curves, "onnxruntime/bmm:per_plane":
                              OpClassData("samples", per_matrix)}), framework="onnxruntime")

    def k(planes: int) -> Kernel:
        return Kernel("bmm", 10**6, 10**5, 10**5, "m", ("MatMul",), planes=planes)

    t = dm.kernel_times_s([k(0), k(512), k(1024)])
    assert t[1] - t[0] == pytest.approx(1.5e-7 * 512, rel=2e-2)
    assert t[2] - t[0] == pytest.approx(1.5e-7 * 1024, rel=2e-2)


def test_planes_of_counts_batch_norm_planes_only() -> None:
    from ftmodel.tracing.variants import planes_of
    bn = "aten._native_batch_norm_legit_no_training.default"
    assert planes_of(bn, ((4, 112, 7, 7), (112,))) == 448
    assert planes_of("aten.native_batch_norm.default", ((2, 8, 16),)) == 16
    assert planes_of(bn, ((4, 112),)) == 0  # no spatial dimensions: one plane per channel row
    assert planes_of("aten.native_layer_norm.default", ((4, 112, 7, 7),)) == 0


def test_eager_batch_norm_kernels_carry_their_planes() -> None:
    import torch
    from ftmodel.frameworks import eager
    from ftmodel.tracing.dispatch import trace
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    prog = eager.lower(trace(model, (torch.randn(3, 8, 4, 4),)))
    norms = [k for k in prog.kernels if k.op_class == "norm"]
    assert [k.planes for k in norms] == [24]
    assert all(k.planes == 0 for k in prog.kernels if k.op_class != "norm")


def test_kernel_at_batch_scales_planes() -> None:
    from ftmodel.api import kernel_at_batch
    assert kernel_at_batch(_bn(1e5, 64), 2, 8).planes == 256


def test_ort_transposes_price_on_their_code_paths_curve_where_the_profile_has_it() -> None:
    # ONNX Runtime walks a transpose that moves its innermost axis element by element, 1.4-1.8
    # GB/s on the EPYC against 16-54 for block copies: a profile with a curve of that path
    # prices those transposes on it, and every other copy on the class's curve
    from ftmodel.frameworks.ort_transpose import BLOCKS, ELEMENTWISE

    def rows(gb_s: float) -> tuple[tuple[float, float, float, float], ...]:
        return tuple((0.0, b / 2, b / 2, b / (gb_s * 1e9)) for b in (1e3, 1e5, 1e7))

    fast = {"onnxruntime/copy": OpClassData("samples", rows(30.0)),
            "copy": OpClassData("samples", rows(20.0))}
    slow = dict(fast, **{f"onnxruntime/copy:{ELEMENTWISE}": OpClassData("samples", rows(1.5))})
    old = DeviceModel(_device(fast), "fp32", "onnxruntime")
    new = DeviceModel(_device(slow), "fp32", "onnxruntime")
    assert old._key("copy", ELEMENTWISE, "Transpose") == "onnxruntime/copy"
    assert new._key("copy", ELEMENTWISE, "Transpose") == f"onnxruntime/copy:{ELEMENTWISE}"
    walk = Kernel("copy", 0, 500_000, 500_000, "t", ("Transpose",), variant=ELEMENTWISE)
    block = Kernel("copy", 0, 500_000, 500_000, "t", ("Transpose",), variant=BLOCKS)
    concat = Kernel("copy", 0, 500_000, 500_000, "c", ("Concat",))
    t_old, t_new = old.kernel_times_s([walk, block, concat]), new.kernel_times_s([walk, block,
                                                                                 concat])
    assert t_new[0] == pytest.approx(20 * t_old[0], rel=0.05)
    assert t_new[1:] == pytest.approx(t_old[1:])
    assert t_new[1] == pytest.approx(1e6 / 30e9, rel=0.05)


def test_a_convolution_on_a_plain_input_takes_its_own_curve_else_its_variants() -> None:
    # a frozen graph's prepacked convolution on to_mkldnn's plain tensor (variant ending
    # PLAIN_INPUT) takes the curve of its variant with it; a profile without one prices it on
    # the curve of the variant without it, as before the variant existed, not on the op's
    slow = tuple((m, b_r, b_w, 2 * t) for m, b_r, b_w, t in SAT_ROWS)
    slower = tuple((m, b_r, b_w, 3 * t) for m, b_r, b_w, t in SAT_ROWS)
    op = "torchscript/conv@mkldnn_convolution"
    base = {"conv": OpClassData("samples", SAT_ROWS), op: OpClassData("samples", SAT_ROWS),
            f"{op}:mkldnn_prepacked_unaligned": OpClassData("samples", slow)}
    prim = "prim::mkldnn_convolution"
    plain = "mkldnn_prepacked_unaligned" + PLAIN_INPUT

    def conv(variant: str) -> Kernel:
        return Kernel("conv", 10**7, 10**6, 10**6, "c", (prim,), variant=variant)

    old = DeviceModel(_device(base), "fp32", "torchscript")
    assert old._key("conv", plain, prim) == f"{op}:mkldnn_prepacked_unaligned"
    np.testing.assert_allclose(old.kernel_times_s([conv(plain)]),
                               old.kernel_times_s([conv("mkldnn_prepacked_unaligned")]))
    new = DeviceModel(_device({**base, f"{op}:{plain}": OpClassData("samples", slower)}),
                      "fp32", "torchscript")
    assert new._key("conv", plain, prim) == f"{op}:{plain}"
    blocked, on_plain = new.kernel_times_s([conv("mkldnn_prepacked_unaligned"), conv(plain)])
    assert on_plain == pytest.approx(1.5 * blocked, rel=1e-2)
