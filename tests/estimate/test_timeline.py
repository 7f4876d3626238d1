"""ftmodel.estimate.timeline: host costs, sync/async timelines, closed form, regime, crossover."""

from __future__ import annotations

import numpy as np
import pytest

from ftmodel.estimate.timeline import crossover, device_scales, host_costs_s, run_timeline
from ftmodel.program import Kernel, Program
from ftmodel.hardware.profile import FrameworkHost


def _arr(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


# ---- host costs ---------------------------------------------------------------------------------

def _kernel(op_class: str) -> Kernel:
    return Kernel(op_class, 0, 4, 4, "m", (f"aten.{op_class}",))


def test_device_scales_by_kind_where_the_fit_chose_them() -> None:
    ks = [_kernel(c) for c in ("conv", "conv_grouped", "gemm", "bmm", "elementwise", "norm")]
    assert device_scales(ks, {"device_scale": 1.2}) == 1.2
    assert device_scales(ks, {}) == 1.0
    kinds = {"device_scale": 1.0, "device_scale_conv": 1.15, "device_scale_other": 2.2}
    np.testing.assert_allclose(device_scales(ks, kinds), [1.15, 1.15, 1.0, 1.0, 2.2, 2.2])


def test_host_costs_spread_shared_events() -> None:
    prog = Program("eager", (_kernel("gemm"), _kernel("elementwise"), _kernel("conv")),
                   {"kernel:gemm": 1, "kernel:elementwise": 1, "kernel:conv": 1,
                    "module_call": 4, "view": 2, "alloc": 0})
    host = FrameworkHost(per_event_s={"kernel:gemm": 5.0, "kernel:elementwise": 3.0,
                                      "module_call": 1.5, "view": 0.75, "alloc": 100.0})
    warnings: list[str] = []
    o = host_costs_s(prog, host, warnings)
    shared = (4 * 1.5 + 2 * 0.75 + 0 * 100.0) / 3  # = 2.5 per kernel
    # conv has no price of its own: it pays kernel:elementwise
    np.testing.assert_allclose(o, [5.0 + shared, 3.0 + shared, 3.0 + shared])
    assert warnings == []


def test_host_costs_unpriced_event_warns() -> None:
    prog = Program("eager", (_kernel("gemm"),), {"kernel:gemm": 1, "mystery": 3})
    warnings: list[str] = []
    o = host_costs_s(prog, FrameworkHost(per_event_s={"kernel:gemm": 2.0}), warnings)
    np.testing.assert_allclose(o, [2.0])
    assert len(warnings) == 1 and "mystery" in warnings[0]


def test_host_costs_no_kernels() -> None:
    prog = Program("eager", (), {"module_call": 2})
    o = host_costs_s(prog, FrameworkHost(per_event_s={"module_call": 1.0}), [])
    assert o.shape == (0,)


# ---- sync ---------------------------------------------------------------------------------------

def test_sync_is_sum() -> None:
    o, k = _arr(1.0, 2.0, 3.0), _arr(0.5, 0.25, 4.0)
    tl = run_timeline(o, k, execution="sync", per_call_s=0.125, launch_latency_s=9.0, sync_s=9.0)
    # per_call + Σo + Σk = 0.125 + 6 + 4.75; launch latency and sync don't apply on a sync device
    assert tl.latency_s == pytest.approx(0.125 + 6.0 + 4.75)
    assert tl.overhead_s == pytest.approx(0.125 + 6.0)
    assert tl.compute_s == pytest.approx(4.75)
    assert tl.latency_s == pytest.approx(tl.overhead_s + tl.compute_s)
    assert tl.closed_form_s == pytest.approx(max(6.125, 4.75))
    assert tl.regime == "framework-bound"
    assert tl.framework_tax == pytest.approx(1 - 4.75 / 10.875)
    np.testing.assert_array_equal(tl.host_s, o)
    np.testing.assert_array_equal(tl.device_s, k)


def test_sync_compute_bound() -> None:
    tl = run_timeline(_arr(0.1, 0.1), _arr(1.0, 2.0), execution="sync")
    assert tl.regime == "compute-bound"
    assert tl.framework_tax == pytest.approx(0.2 / 3.2)


def test_empty_program() -> None:
    tl = run_timeline(_arr(), _arr(), execution="async")
    assert tl.latency_s == 0.0 and tl.framework_tax == 0.0


# ---- async --------------------------------------------------------------------------------------

def test_async_recurrence_by_hand() -> None:
    o, k = _arr(1.0, 1.0, 1.0), _arr(2.0, 0.5, 3.0)
    tl = run_timeline(o, k, execution="async", per_call_s=0.5, launch_latency_s=0.5, sync_s=0.25)
    # t_host starts at per_call = 0.5; t_dev = max(t_dev, t_host + 0.5) + k_i:
    #   i=0: t_host = 1.5, t_dev = max(0.0, 1.5 + 0.5) + 2.0 = 4.0
    #   i=1: t_host = 2.5, t_dev = max(4.0, 2.5 + 0.5) + 0.5 = 4.5
    #   i=2: t_host = 3.5, t_dev = max(4.5, 3.5 + 0.5) + 3.0 = 7.5
    # latency = max(7.5, 3.5) + sync 0.25 = 7.75
    assert tl.latency_s == pytest.approx(7.75)
    assert tl.overhead_s == pytest.approx(0.5 + 3.0)
    assert tl.compute_s == pytest.approx(5.5)
    assert tl.closed_form_s == pytest.approx(5.5)
    assert tl.regime == "compute-bound"
    assert tl.framework_tax == pytest.approx(1 - 5.5 / 7.75)


def test_async_host_heavy_extreme() -> None:
    n = 100
    o, k = np.full(n, 1e-3), np.full(n, 1e-9)
    tl = run_timeline(o, k, execution="async")
    # ≈ Σo + the last kernel = 0.1 + 1e-9
    assert tl.latency_s == pytest.approx(max(o.sum(), k.sum()), rel=1e-6)
    assert tl.regime == "framework-bound"
    assert tl.framework_tax == pytest.approx(1.0, abs=1e-6)


def test_async_device_heavy_extreme() -> None:
    n = 100
    o, k = np.full(n, 1e-9), np.full(n, 1e-3)
    tl = run_timeline(o, k, execution="async")
    # ≈ the first host cost + Σk = 1e-9 + 0.1
    assert tl.latency_s == pytest.approx(max(o.sum(), k.sum()), rel=1e-6)
    assert tl.regime == "compute-bound"
    assert tl.framework_tax == pytest.approx(0.0, abs=1e-6)


def test_async_between_max_form_and_sum() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        o, k = rng.exponential(1.0, 30), rng.exponential(1.0, 30)
        tl = run_timeline(o, k, execution="async", per_call_s=0.3, launch_latency_s=0.2,
                          sync_s=0.1)
        assert tl.latency_s >= tl.closed_form_s - 1e-12  # the max form is optimistic
        assert tl.latency_s <= tl.overhead_s + tl.compute_s + 0.2 + 0.1 + 1e-12
        assert 0.0 <= tl.framework_tax <= 1.0


# ---- crossover ----------------------------------------------------------------------------------

def test_crossover_analytic_root() -> None:
    b = crossover(lambda b: 1.0, lambda b: 0.1 * b)  # 0.1 b = 1 at b = 10
    assert b is not None
    assert b == pytest.approx(10.0, abs=1e-2)


def test_crossover_nonlinear_root() -> None:
    b = crossover(lambda b: 2.0 + 0.0 * b, lambda b: 1e-3 * b**2)  # b = sqrt(2000) ≈ 44.72
    assert b == pytest.approx(2000**0.5, abs=1e-2)


def test_crossover_compute_bound_from_start() -> None:
    assert crossover(lambda b: 1.0, lambda b: 10.0 * b) is None


def test_crossover_never() -> None:
    assert crossover(lambda b: 1.0, lambda b: 1e-6 * b) is None  # 1e-6·1024 < 1


def test_crossover_respects_range() -> None:
    assert crossover(lambda b: 1.0, lambda b: 0.1 * b, lo=1.0, hi=8.0) is None
    assert crossover(lambda b: 1.0, lambda b: 0.1 * b, lo=2.0, hi=64.0) == pytest.approx(
        10.0, abs=1e-2)
