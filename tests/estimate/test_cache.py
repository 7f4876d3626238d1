"""The cache model: which operand bytes are cold, and how device time blends hot and cold."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import ftmodel
from ftmodel.estimate.cache import CacheModel, cold_fractions, cold_fractions_reference
from ftmodel.estimate.kernels import DeviceModel, blend_hot_cold
from ftmodel.program import Kernel
from ftmodel.frameworks.eager import lower
from ftmodel.hardware.profile import DeviceProfile, OpClassData

MB = 1 << 20


def _k(reads: list[tuple[int, int]], writes: list[tuple[int, int]], weights: int = 0) -> Kernel:
    br, bw = sum(b for _, b in reads), sum(b for _, b in writes)
    return Kernel("elementwise", 0, br, bw, "", ("aten.add.Tensor",), bytes_weights=weights,
                  reads=tuple(reads), writes=tuple(writes))


def test_cold_share_ramps_between_lo_and_hi() -> None:
    c = CacheModel(lo_bytes=10, hi_bytes=20, stream_share=0.5)
    assert c.cold_share(5) == 0 and c.cold_share(15) == 0.5 and c.cold_share(40) == 1
    assert CacheModel.from_params({}) is None
    assert CacheModel.from_params({"lo_bytes": 1.0, "hi_bytes": 3.0}) == CacheModel(1.0, 3.0)


def test_activation_just_written_is_warm_skip_connection_is_cold() -> None:
    # x(0) -> a(1) -> b(2) -> ... chain of 1 MB activations; the last kernel also reads x again
    cache = CacheModel(6 * MB, 8 * MB, stream_share=0.8)
    ks = [_k([(0, MB)], [(1, MB)])]
    for i in range(1, 12):
        ks.append(_k([(i, MB)], [(i + 1, MB)]))
    ks.append(_k([(12, MB), (0, MB)], [(13, MB)]))  # residual: x was touched ~24 MB ago
    f = cold_fractions(ks, cache)
    assert all(v == 0 for v in f[1:-1])  # each reads what the previous kernel just wrote
    assert f[-1] == pytest.approx(0.5 * 0.8)  # x cold, the fresh input warm: half, streamed


def test_weights_cold_only_when_the_pass_exceeds_the_cache() -> None:
    # each kernel reads a private 1 MB weight and a small activation: 10 kernels ≈ 10+ MB a pass
    ks = [_k([(100 + i, MB), (i, 1024)], [(i + 1, 1024)], weights=MB) for i in range(10)]
    assert cold_fractions(ks, CacheModel(32 * MB, 64 * MB)).max() == 0  # all fits: all hot
    f = cold_fractions(ks, CacheModel(2 * MB, 4 * MB))
    assert f.min() > 0.99  # weights were last touched a whole pass ago, beyond 4 MB


def test_no_cache_model_no_cold_operands() -> None:
    ks = [_k([(0, 100 * MB)], [(1, MB)])]
    assert cold_fractions(ks, None).tolist() == [0.0]
    assert cold_fractions([], CacheModel(MB, 2 * MB)).shape == (0,)


def test_kernels_without_operands_fall_back_to_weights_cold() -> None:
    fused = Kernel("gemm", 10, 3 * MB, MB, "", ("Gemm",), bytes_weights=2 * MB)
    f = cold_fractions([fused] * 8, CacheModel(4 * MB, 8 * MB))  # 32 MB a pass
    assert f[0] == pytest.approx(2 / 3)  # weights cold, 1 MB of activations warm


def test_trace_records_storage_identity() -> None:
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    tr = ftmodel.trace(m, torch.randn(2, 8))
    addmm1, relu, addmm2 = [r for r in tr.records if not r.is_view]
    assert relu.reads == relu.writes == addmm1.writes  # in-place on the first output
    assert addmm2.reads[1] == relu.writes[0]  # the second layer reads that same storage
    assert {b for _, b in addmm1.reads} == {16 * 4, 2 * 8 * 4, 16 * 8 * 4}  # bias, x, W
    assert all(not r.reads and not r.writes for r in tr.records if r.is_view)
    # the weight is read through its transposed view (aten.t) and still counts as a weight
    assert addmm1.bytes_weights == (16 * 8 + 16) * 4
    kernels = lower(tr).kernels
    assert kernels[1].reads == relu.reads  # eager kernels carry the operands


def _device(cold: bool) -> DeviceProfile:
    rows = tuple((0.0, float(n), float(n), n * 1e-10) for n in (1e3, 1e5, 1e7))
    data = OpClassData("samples", rows, cold_s=tuple(3 * r[3] for r in rows) if cold else ())
    return DeviceProfile("t", "cpu", "sync", {"elementwise": data},
                         cache={"lo_bytes": 4.0 * MB, "hi_bytes": 8.0 * MB})


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


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_cold_fractions_equal_the_reference_loop(seed: int) -> None:
    """Random operand sequences (reuse, repeats within a kernel, kernels without identities,
    kernels that only write): the vectorised simulation gives the loop's answer."""
    rng = np.random.default_rng(seed)
    kernels = []
    for _ in range(int(rng.integers(1, 60))):
        kind = rng.integers(0, 5)
        if kind == 0:  # no identities: the fallback path
            kernels.append(Kernel("gemm", 10, int(rng.integers(0, 4 * MB)),
                                  int(rng.integers(0, MB)), "", ("Gemm",),
                                  bytes_weights=int(rng.integers(0, 2 * MB))))
            continue
        def ops(k: int) -> list[tuple[int, int]]:
            return [(int(rng.integers(0, 12)), int(rng.integers(1, 3 * MB))) for _ in range(k)]
        reads = [] if kind == 1 else ops(int(rng.integers(1, 4)))
        kernels.append(_k(reads, ops(int(rng.integers(0 if reads else 1, 3)))))
    cache = CacheModel(2 * MB, 8 * MB, stream_share=0.7)
    np.testing.assert_allclose(cold_fractions(kernels, cache),
                               cold_fractions_reference(kernels, cache), rtol=1e-9, atol=1e-12)
