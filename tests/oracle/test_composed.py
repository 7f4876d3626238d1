"""The search-space oracle: candidates priced from their configurations equal predict_latency
on the built candidates."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch

from ftmodel.api import predict_latency
from ftmodel.errors import InvalidArgumentError
from ftmodel.hardware.profile import HardwareProfile, OpClassData
from ftmodel.oracle import CostOracle
from ftmodel.oracle.search_space import (BlockConfig, CandidateConfig, MobileNetV2Space,
                                         StageConfig)
from ftmodel.oracle.space_oracle import SpaceResult
from ftmodel.search_space import ViTBlockConfig, ViTConfig, ViTSpace
from tests.conftest import byte_rows, mac_rows

SPACE = MobileNetV2Space(resolution=64, n_classes=10)


def _configs(n: int, seed: int) -> list[CandidateConfig]:
    rng = random.Random(seed)
    return [SPACE.sample(rng) for _ in range(n)]


def _cached_profile(profile_factory: Any) -> HardwareProfile:
    """A CPU profile with cold-operand curves and a cache model, in-model scales per kind."""
    def curve(rows: Any) -> OpClassData:
        return OpClassData("samples", rows, cold_s=tuple(3.0 * r[3] for r in rows))
    classes = {c: curve(mac_rows()) for c in ("gemm", "conv", "conv_grouped", "bmm")}
    classes.update({c: curve(byte_rows()) for c in ("elementwise", "copy", "norm", "pool",
                                                     "reduction", "softmax", "embedding")})
    prof: HardwareProfile = profile_factory(op_classes=classes,
                                            cache={"lo_bytes": 2e5, "hi_bytes": 2e6,
                                                   "stream_share": 0.8})
    return prof


def _assert_equal(res: SpaceResult, configs: list[CandidateConfig], device: Any,
                  batches: list[int]) -> None:
    assert res.composed and res.failures == ()
    assert res.candidates == tuple(configs) and res.batches == tuple(batches)
    assert res.latency_s.shape == (len(configs), len(batches))
    for i, cfg in enumerate(configs):
        # the built candidate with real weights, priced whole as a user would
        torch.manual_seed(0)
        model = SPACE.build(cfg, device="cpu")
        want = predict_latency(model, "eager", device, batches, inputs=SPACE.input_spec(),
                               heap="kept")
        for j, p in enumerate(want):
            assert res.latency_s[i, j] == pytest.approx(p.latency_s, rel=1e-12)
            assert res.overhead_s[i, j] == pytest.approx(p.overhead_s, rel=1e-12)
            assert res.compute_s[i, j] == pytest.approx(p.compute_s, rel=1e-12)


def test_composed_equals_predict_latency_on_a_cpu_profile(tiny_profile: HardwareProfile
                                                          ) -> None:
    configs = _configs(3, seed=1)
    res = CostOracle("eager", tiny_profile).latencies(configs, [1, 4], space=SPACE)
    _assert_equal(res, configs, tiny_profile, [1, 4])


def test_composed_equals_predict_latency_with_the_cache_model(profile_factory: Any) -> None:
    """Cold weights at the candidate's bytes per pass, each block's input at the bytes the
    block before it touched after its output: the composition needs the whole candidate."""
    prof = _cached_profile(profile_factory)
    oracle = CostOracle("eager", prof)
    assert oracle.predictor.device_model.has_cold_data
    configs = _configs(4, seed=2)
    _assert_equal(oracle.latencies(configs, [1, 8], space=SPACE), configs, prof, [1, 8])
    # warm: the same candidates again, from the cached block summaries
    again = oracle.latencies(configs, [1, 8], space=SPACE)
    assert np.array_equal(again.latency_s, oracle.latencies(configs, [1, 8],
                                                            space=SPACE).latency_s)


def test_composed_equals_predict_latency_on_a_gpu_with_helper_kernels() -> None:
    """Built-in A100: the two-timeline recurrence and helper kernels counted over the whole
    candidate (the k-th convolution's helpers depend on k)."""
    configs = _configs(3, seed=3)
    res = CostOracle("eager", "a100").latencies(configs, [1, 8], space=SPACE)
    _assert_equal(res, configs, "a100", [1, 8])


def test_a_plain_heap_on_a_cpu_is_priced_on_the_built_candidate(tiny_profile: HardwareProfile
                                                                ) -> None:
    """Page faults follow the whole program's allocations: not composed, but answered as the
    oracle answers a built model."""
    cfg = _configs(1, seed=4)
    oracle = CostOracle("eager", tiny_profile, heap="plain")
    res = oracle.latencies(cfg, [1], space=SPACE)
    assert not res.composed
    want = oracle.latency(SPACE.build(cfg[0], device="meta"), 1, SPACE.input_spec())
    assert res.latency_s[0, 0] == want.latency_s


def test_a_configuration_outside_the_space_names_the_choices(tiny_profile: HardwareProfile
                                                            ) -> None:
    good = _configs(1, seed=5)[0]
    bad = CandidateConfig((StageConfig(0.5, (BlockConfig(6, 3),)),) + good.stages[1:])
    with pytest.raises(InvalidArgumentError, match=r"width 0\.5.*widths \(0\.75, 1\.0, 1\.25\)"):
        CostOracle("eager", tiny_profile).latencies([good, bad], [1], space=SPACE)
    with pytest.raises(InvalidArgumentError, match="not a block key"):
        SPACE.block(("mbconv", 16, 24))


def test_blocks_name_what_build_builds() -> None:
    cfg = _configs(1, seed=6)[0]
    keys = SPACE.blocks(cfg)
    model = SPACE.build(cfg, device="meta")
    assert len(model) == len(keys)
    for key, child in zip(keys, model):
        assert type(child) is type(SPACE.block(key))


def test_a_vit_space_is_composed_exactly(profile_factory: Any) -> None:
    """Transformer blocks: attention, layer norms, the position embedding's add, the token
    mean (a block whose reads of its input come after a reshape)."""
    vit = ViTSpace(resolution=64, n_classes=10)
    rng = random.Random(7)
    configs = [vit.sample(rng) for _ in range(2)]
    for device in ("a100", _cached_profile(profile_factory)):
        res = CostOracle("eager", device).latencies(configs, [1, 4], space=vit)
        assert res.composed and res.failures == ()
        for i, cfg in enumerate(configs):
            torch.manual_seed(0)
            want = predict_latency(vit.build(cfg), "eager", device, [1, 4],
                                   inputs=vit.input_spec(), heap="kept")
            for j, p in enumerate(want):
                assert res.latency_s[i, j] == pytest.approx(p.latency_s, rel=1e-12)
    with pytest.raises(InvalidArgumentError, match=r"heads 3 .*heads \(2, 4, 8\)"):
        vit.check(ViTConfig(192, (ViTBlockConfig(3, 2),) * 6))
    covered = {k for cfg in vit.covering() for k in vit.blocks(cfg)}
    assert all(set(vit.blocks(vit.sample(rng))) <= covered for _ in range(50))


@pytest.mark.parametrize("which", ["cached", "a100"])
def test_the_batch_prices_each_candidate_as_the_reference_composition(profile_factory: Any,
                                                                      which: str) -> None:
    """composed_batch.PiecePool.price (many candidates at once) against composed.price (one
    candidate, kernel by kernel), the rows of one batch of different lengths."""
    from ftmodel.oracle.composed import price

    device = _cached_profile(profile_factory) if which == "cached" else "a100"
    oracle = CostOracle("eager", device)
    pricer = oracle._space_pricer()  # noqa: SLF001 - the pricer under test
    assert pricer is not None
    configs = _configs(5, seed=11)
    rows = [pricer.row(SPACE, cfg, 4) for cfg in configs]
    ids = np.full((len(rows), max(map(len, rows))), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    lat, ovh, comp, bad = pricer.pool.price(ids)
    assert not bad.any()
    for i, r in enumerate(rows):
        want = price([pricer.pool.pieces[k] for k in r], pricer.pricing)
        assert (lat[i], ovh[i], comp[i]) == pytest.approx(want, rel=1e-12)


def test_encoded_configurations_decode_to_themselves() -> None:
    """Plain tuples to send to other processes (Ray pickles them 20x faster)."""
    for cfg in _configs(20, seed=12):
        plain = SPACE.encode(cfg)
        assert SPACE.decode(plain) == cfg
        assert all(isinstance(w, float) for w, _ in plain)


class _BrokenSpace(MobileNetV2Space):
    """A space one of whose blocks (the head after the widest last stage) cannot be traced."""

    def block(self, key: Any, device: Any = "meta") -> Any:
        if key == ("head", 400):
            raise RuntimeError("this block cannot be traced")
        return super().block(key, device)


def test_a_block_that_fails_is_reported_with_its_configuration(tiny_profile: HardwareProfile
                                                              ) -> None:
    space = _BrokenSpace(resolution=64, n_classes=10)
    rng = random.Random(13)
    configs = [space.sample(rng) for _ in range(8)]
    broken = [("head", 400) in space.blocks(c) for c in configs]
    assert any(broken) and not all(broken)
    with pytest.warns(RuntimeWarning, match="skipped"):
        res = CostOracle("eager", tiny_profile).latencies(configs, [1, 4], space=space)
    assert [f.candidate for f in res.failures] == [c for c, b in zip(configs, broken) if b]
    assert all("cannot be traced" in f.error for f in res.failures)
    assert res.candidates == tuple(c for c, b in zip(configs, broken) if not b)
    assert np.isfinite(res.latency_s).all() and res.latency_s.shape == (len(res), 2)
