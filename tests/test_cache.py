"""The cache model: which operand bytes are cold, and how device time blends hot and cold."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import ftmodel
from ftmodel.estimate.cache import cold_bytes, cold_fractions
from ftmodel.estimate.kernels import DeviceModel, blend_hot_cold
from ftmodel.frameworks.base import Kernel
from ftmodel.frameworks.eager import lower
from ftmodel.hardware.profile import DeviceProfile, OpClassData

MB = 1 << 20


def _k(reads: list[tuple[int, int]], writes: list[tuple[int, int]], weights: int = 0) -> Kernel:
    br, bw = sum(b for _, b in reads), sum(b for _, b in writes)
    return Kernel("elementwise", 0, br, bw, "", ("aten.add.Tensor",), bytes_weights=weights,
                  reads=tuple(reads), writes=tuple(writes))


def test_cold_bytes_lru_arithmetic() -> None:
    # capacity 10: an operand of 4 touched 3 bytes ago is all cached; 8 ago, 2 of 4 are gone
    assert cold_bytes(4, 3, 10) == 0
    assert cold_bytes(4, 8, 10) == 2
    assert cold_bytes(4, 50, 10) == 4
    assert cold_bytes(40, 0, 10) == 30  # larger than the cache even when just written


def test_activation_just_written_is_warm_skip_connection_is_cold() -> None:
    # x(0) -> a(1) -> b(2) -> ... chain of 1 MB activations; the last kernel also reads x again
    cap = 8 * MB
    ks = [_k([(0, MB)], [(1, MB)])]
    for i in range(1, 12):
        ks.append(_k([(i, MB)], [(i + 1, MB)]))
    ks.append(_k([(12, MB), (0, MB)], [(13, MB)]))  # residual: x was touched ~24 MB ago
    f = cold_fractions(ks, cap)
    assert all(v == 0 for v in f[1:-1])  # each reads what the previous kernel just wrote
    assert f[-1] == pytest.approx(0.5)  # x is cold, the fresh input warm: half the bytes


def test_weights_cold_only_when_the_pass_exceeds_the_cache() -> None:
    # each kernel reads a private 1 MB weight and a small activation: 10 kernels ≈ 10+ MB a pass
    ks = [_k([(100 + i, MB), (i, 1024)], [(i + 1, 1024)], weights=MB) for i in range(10)]
    assert cold_fractions(ks, 64 * MB).max() == 0  # everything fits: steady state is all hot
    f = cold_fractions(ks, 4 * MB)
    assert f.min() > 0.99  # weights were last touched a whole pass ago, beyond 4 MB


def test_no_cache_model_without_capacity() -> None:
    ks = [_k([(0, 100 * MB)], [(1, MB)])]
    assert cold_fractions(ks, 0).tolist() == [0.0]
    assert cold_fractions([], 8 * MB).shape == (0,)


def test_kernels_without_operands_fall_back_to_weights_cold() -> None:
    fused = Kernel("gemm", 10, 3 * MB, MB, "", ("Gemm",), bytes_weights=2 * MB)
    f = cold_fractions([fused] * 8, 8 * MB)  # 32 MB a pass: weights cold, activations warm
    assert f[0] == pytest.approx(2 / 3)


def test_trace_records_storage_identity() -> None:
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    tr = ftmodel.trace(m, torch.randn(2, 8))
    addmm1, relu, addmm2 = [r for r in tr.records if not r.is_view]
    assert relu.reads == relu.writes == addmm1.writes  # in-place on the first output
    assert addmm2.reads[1] == relu.writes[0]  # the second layer reads that same storage
    assert {b for _, b in addmm1.reads} == {16 * 4, 2 * 8 * 4, 16 * 8 * 4}  # bias, x, W
    assert all(not r.reads and not r.writes for r in tr.records if r.is_view)
    kernels = lower(tr).kernels
    assert kernels[1].reads == relu.reads  # eager kernels carry the operands


def _device(cold: bool) -> DeviceProfile:
    rows = tuple((0.0, float(n), float(n), n * 1e-10) for n in (1e3, 1e5, 1e7))
    data = OpClassData("samples", rows, cold_s=tuple(3 * r[3] for r in rows) if cold else ())
    return DeviceProfile("t", "cpu", "sync", {"elementwise": data}, cache_bytes=8 * MB)


def test_device_time_blends_hot_and_cold() -> None:
    k = Kernel("elementwise", 0, 100_000, 100_000, "", ("aten.add.Tensor",))
    dm = DeviceModel(_device(cold=True))
    hot, cold = dm.hot_cold_times_s([k])
    assert cold[0] == pytest.approx(3 * hot[0], rel=1e-6)
    for f in (0.0, 0.25, 1.0):
        (t,) = dm.kernel_times_s([k], cold=np.array([f]))
        assert t == pytest.approx(hot[0] + f * (cold[0] - hot[0]))
    assert dm.has_cold_data
    assert not DeviceModel(_device(cold=False)).has_cold_data
    assert blend_hot_cold(np.array([2.0]), np.array([1.0]), np.array([1.0]))[0] == 2.0
