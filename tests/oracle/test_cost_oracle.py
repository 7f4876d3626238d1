"""CostOracle: identical to predict_latency, block-level trace reuse, bad input, search space."""

from __future__ import annotations

import functools

import random
import warnings
from typing import Any

import pytest
import torch
from torch import nn

from ftmodel.api import predict_latency as _predict_latency
from ftmodel.errors import InvalidArgumentError
from ftmodel.frameworks import eager
from ftmodel.hardware.profile import FrameworkHost, HardwareProfile
from ftmodel.oracle import CostOracle
from ftmodel.oracle.search_space import BlockConfig, CandidateConfig, MBConv, MobileNetV2Space, StageConfig
from ftmodel.oracle.structure import Uncacheable, input_meta, plan_of, structure_key
from ftmodel.oracle.trace_cache import TraceCache
from ftmodel.tracing.dispatch import trace

# the oracle predicts the kept heap (its blocks' storage ids do not give a whole program's
# allocation lifetimes): compare it with predict_latency for the same state
predict_latency = functools.partial(_predict_latency, heap="kept")

SPACE = MobileNetV2Space(resolution=64, n_classes=10)


def _candidates(n: int, seed: int = 0) -> list[CandidateConfig]:
    rng = random.Random(seed)
    return [SPACE.sample(rng) for _ in range(n)]


class Residual(nn.Module):
    """y = x + relu(linear(x)); a block with its own forward (not a Sequential)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.lin(x))


def _mlp(d: int = 16) -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, d), Residual(d), nn.Sequential(Residual(d), nn.ReLU()),
                         nn.Linear(d, 4)).eval()


# -- identical predictions ----------------------------------------------------------------------
@pytest.mark.parametrize("cfg", _candidates(2))
def test_identical_to_predict_latency(cfg: CandidateConfig, tiny_profile: HardwareProfile
                                      ) -> None:
    model = SPACE.build(cfg, device="meta")
    x = SPACE.input_spec()
    oracle = CostOracle("eager", tiny_profile, crossover=True)
    got = oracle.latency(model, [1, 4], x)
    want = predict_latency(model, "eager", tiny_profile, [1, 4], inputs=x)
    assert got == want  # every field, the per-layer breakdown and the crossover included
    # without the crossover search, everything else is unchanged
    fast = CostOracle("eager", tiny_profile).latency(model, [1, 4], x)
    assert [p.crossover_batch for p in fast] == [None, None]
    for a, b in zip(fast, want):
        assert a.latency_s == b.latency_s and a.layers == b.layers
        assert a.n_launches == b.n_launches and a.macs == b.macs and a.warnings == b.warnings


def test_assembled_trace_equals_whole_trace() -> None:
    """Records (re-indexed, module paths, storage ids), module calls and counters all match."""
    cache = TraceCache()
    for cfg in _candidates(3, seed=1):
        model = SPACE.build(cfg, device="meta")
        plan = plan_of(model, cache.intern)
        assert plan.chain
        for batch in (1, 3):
            _, metas = input_meta(model, SPACE.input_spec(), batch, torch.float32, plan.device)
            got = cache.assemble(model, plan, metas[0], torch.float32)
            assert got == trace(model, SPACE.input_spec(), batch, dtype=torch.float32)


def test_assembly_keeps_the_storage_of_an_in_place_first_segment(
        tiny_profile: HardwareProfile) -> None:
    """A first segment that works in place hands its input storage on: the next segment reads
    the same storage id (before, it was numbered as a new one, so the cache model saw a cold
    tensor where the whole trace has a warm one)."""
    x = torch.randn(2, 8)
    for model in (nn.Sequential(nn.ReLU(inplace=True), nn.Linear(8, 4)),
                  nn.Sequential(nn.ReLU(inplace=True), nn.ReLU(inplace=True), nn.Linear(8, 4)),
                  nn.Sequential(nn.Identity(), nn.ReLU(inplace=True), nn.Linear(8, 4))):
        cache = TraceCache()
        plan = plan_of(model, cache.intern)
        _, metas = input_meta(model, x, 2, torch.float32, plan.device)
        assert cache.assemble(model, plan, metas[0], torch.float32) == trace(
            model, x, 2, dtype=torch.float32)
        assert cache.assemble_eager(plan, metas[0], torch.float32) == eager.lower(
            trace(model, x, 2, dtype=torch.float32))
        got = CostOracle("eager", tiny_profile, trace_cache=cache).latency(model, 2, x)
        assert got.latency_s == predict_latency(model, "eager", tiny_profile, 2,
                                                inputs=x).latency_s


def test_program_events_equal_the_assembled_programs() -> None:
    """The oracle's operand events, mapped from each segment's own, equal those of the
    assembled program's kernels (storage ids, sizes, reads, owners), fresh and cached."""
    from ftmodel.oracle.device_cache import program_events
    from ftmodel.estimate.cache import operand_events
    cache = TraceCache()
    for cfg in _candidates(3, seed=6) * 2:
        model = SPACE.build(cfg, device="meta")
        plan = plan_of(model, cache.intern)
        for batch in (1, 2):
            _, metas = input_meta(model, SPACE.input_spec(), batch, torch.float32, plan.device)
            got = cache.assemble_eager_parts(plan, metas[0], torch.float32)
            assert got is not None
            program, parts = got
            mapped = program_events(parts, [operand_events(p.local) for p in parts])
            want = operand_events(program.kernels)
            for a, b in zip(mapped, want):
                assert a.dtype == b.dtype and a.tolist() == b.tolist()


def test_assembled_eager_program_equals_lowered_trace() -> None:
    """Kernels (fields, order, relocated storage ids), host events and their order match
    eager.lower of the whole trace, on fresh segments and on cached ones."""
    cache = TraceCache()
    for cfg in _candidates(3, seed=4) * 2:  # the second pass hits every cached segment
        model = SPACE.build(cfg, device="meta")
        plan = plan_of(model, cache.intern)
        for batch in (1, 3):
            _, metas = input_meta(model, SPACE.input_spec(), batch, torch.float32, plan.device)
            got = cache.assemble_eager(plan, metas[0], torch.float32)
            want = eager.lower(trace(model, SPACE.input_spec(), batch, dtype=torch.float32))
            assert got == want
            assert list(got.host_events) == list(want.host_events)


def test_clearing_a_shared_cache_never_aliases_keys(tiny_profile: HardwareProfile) -> None:
    """Two oracles share a TraceCache; one clears it. The other's program cache holds keys made
    before the clear, and a different candidate seen after it must not match one of them."""
    shared = TraceCache()
    a = CostOracle("eager", tiny_profile, trace_cache=shared, crossover=True)
    b = CostOracle("eager", tiny_profile, trace_cache=shared)
    x = torch.randn(1, 8)
    # the same tree (so keys numbered afresh would come out equal), different layer widths
    first = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    second = nn.Sequential(nn.Linear(8, 64), nn.ReLU()).eval()
    a.latency(first, 1, x)
    b.clear()
    got = a.latency(second, 1, x)
    assert got == predict_latency(second, "eager", tiny_profile, 1, inputs=x)


def test_identical_with_the_cache_model_and_no_crossover(profile_factory: Any) -> None:
    """Without the crossover search an eager program's kernels keep their segments' storage
    ids; with a cache model (which reads operand identities) the predictions are still those
    of predict_latency, and the assembled kernels differ from the relocated ones only there."""
    from dataclasses import replace

    from tests.conftest import byte_rows, mac_rows
    from ftmodel.oracle.device_cache import program_events
    from ftmodel.estimate.cache import operand_events
    from ftmodel.hardware.profile import OpClassData

    def curve(rows: Any) -> OpClassData:
        return OpClassData("samples", rows, cold_s=tuple(3.0 * r[3] for r in rows))
    classes = {c: curve(mac_rows()) for c in ("gemm", "conv", "conv_grouped", "bmm")}
    classes.update({c: curve(byte_rows()) for c in ("elementwise", "copy", "norm", "pool",
                                                     "reduction", "softmax", "embedding")})
    prof = profile_factory(op_classes=classes, cache={"lo_bytes": 2e5, "hi_bytes": 2e6})
    oracle = CostOracle("eager", prof)
    assert oracle.predictor.device_model.has_cold_data
    x = SPACE.input_spec()
    for cfg in _candidates(3, seed=9) * 2:
        model = SPACE.build(cfg, device="meta")
        got = oracle.latency(model, [1, 4], x)
        want = predict_latency(model, "eager", prof, [1, 4], inputs=x)
        for a, b in zip(got, want):
            assert a.latency_s == b.latency_s and a.layers == b.layers
        plan = plan_of(model, oracle.traces.intern)
        _, metas = input_meta(model, x, 4, torch.float32, plan.device)
        local = oracle.traces.assemble_eager_parts(plan, metas[0], torch.float32,
                                                   relocate=False)
        full = oracle.traces.assemble_eager_parts(plan, metas[0], torch.float32)
        assert local is not None and full is not None
        assert local[1] == full[1]
        assert local[0].kernels != full[0].kernels  # later segments' ids are not relocated
        assert [replace(k, reads=(), writes=()) for k in local[0].kernels] == [
            replace(k, reads=(), writes=()) for k in full[0].kernels]
        assert local[0].host_events == full[0].host_events
        mapped = program_events(local[1], [operand_events(p.local) for p in local[1]])
        for a, b in zip(mapped, operand_events(full[0].kernels)):
            assert a.tolist() == b.tolist()


def test_identical_on_async_gpu_profile() -> None:
    """Built-in GPU profile: helper-kernel expansion and the two-timeline recurrence."""
    model = _mlp()
    x = torch.randn(2, 8)
    got = CostOracle("eager", "a100", crossover=True).latency(model, [1, 8], x)
    want = predict_latency(model, "eager", "a100", [1, 8], inputs=x)
    assert got == want
    # without the crossover: helper kernels make the oracle relocate the kernels after all
    fast = CostOracle("eager", "a100")
    for a, b in zip(fast.latency(model, [1, 8], x), want):
        assert a.latency_s == b.latency_s and a.layers == b.layers
    assert fast._helpers


def test_not_a_sequential_is_traced_whole(tiny_profile: HardwareProfile) -> None:
    model = Residual(16).eval()
    x = torch.randn(1, 16)
    oracle = CostOracle("eager", tiny_profile, crossover=True)
    assert oracle.latency(model, 2, x) == predict_latency(model, "eager", tiny_profile, 2,
                                                          inputs=x)
    assert oracle.cache_info().block_traces == 0  # nothing to open: one whole trace


# -- reuse -------------------------------------------------------------------------------------
def test_a_block_seen_once_is_not_traced_again(tiny_profile: HardwareProfile) -> None:
    base = _candidates(1, seed=2)[0]
    s2 = base.stages[2]
    b0 = s2.blocks[0]
    other = BlockConfig(3 if b0.expansion != 3 else 4, b0.kernel)  # same channels in and out
    changed = CandidateConfig(base.stages[:2] + (StageConfig(s2.width, (other,) + s2.blocks[1:]),)
                              + base.stages[3:])
    oracle = CostOracle("eager", tiny_profile)
    x = SPACE.input_spec()
    oracle.latency(SPACE.build(base, "meta"), 1, x)
    first = oracle.cache_info()
    oracle.latency(SPACE.build(changed, "meta"), 1, x)
    second = oracle.cache_info()
    # segments: stem (conv, bn, relu: a Sequential is opened) + first block + one per
    # searchable block + head (conv, bn, relu) + pool + flatten + fc
    n_segments = 3 + 1 + sum(s.depth for s in base.stages) + 3 + 3
    assert first.block_misses + first.block_hits == n_segments
    assert second.block_misses - first.block_misses == 1  # only the changed block is traced
    assert second.block_hits - first.block_hits == n_segments - 1
    # the same candidate again: its program is reused
    oracle.latency(SPACE.build(changed, "meta"), 1, x)
    assert oracle.cache_info().program_hits == 1


def test_structure_keys_tell_hyperparameters_apart() -> None:
    a = nn.Conv2d(8, 8, 3, padding=1)
    b = nn.Conv2d(8, 8, 3, padding=0)
    c = nn.Conv2d(8, 8, 3, padding=1, device="meta")
    assert structure_key(a) != structure_key(b)
    assert structure_key(a) == structure_key(c)  # values and devices do not matter
    assert structure_key(nn.ReLU()) != structure_key(nn.ReLU6())
    assert structure_key(MBConv(16, 16, 1, 3, 3)) != structure_key(MBConv(16, 16, 1, 3, 5))


def test_uncacheable_modules_are_traced_each_time(tiny_profile: HardwareProfile) -> None:
    model = _mlp()
    model[1].register_forward_hook(lambda m, i, o: None)
    model[3].note = object()  # not plain data
    with pytest.raises(Uncacheable, match="forward hooks"):
        structure_key(model[1])
    x = torch.randn(1, 8)
    oracle = CostOracle("eager", tiny_profile)
    for _ in range(2):
        got = oracle.latency(model, 3, x)
    want = predict_latency(model, "eager", tiny_profile, 3, inputs=x)
    assert (got.latency_s, got.layers) == (want.latency_s, want.layers)
    info = oracle.cache_info()
    assert any("forward hooks" in w for w in info.uncacheable)
    assert any("'3'" in w and "object" in w for w in info.uncacheable)


def test_shared_modules_and_tied_weights_fall_back_to_whole_trace(
        tiny_profile: HardwareProfile) -> None:
    shared = Residual(16)
    tied = nn.Linear(16, 16)
    tied2 = nn.Linear(16, 16)
    tied2.weight = tied.weight
    for model in (nn.Sequential(nn.Linear(8, 16), shared, shared),
                  nn.Sequential(nn.Linear(8, 16), tied, tied2)):
        x = torch.randn(1, 8)
        got = CostOracle("eager", tiny_profile, crossover=True).latency(model, 2, x)
        assert got == predict_latency(model, "eager", tiny_profile, 2, inputs=x)
        assert not plan_of(model).chain


# -- many candidates, bad input ------------------------------------------------------------------
class Broken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(3, 3, device=x.device)  # wrong inner dimension for (B, 16)


def test_latencies_reports_and_skips_failures(tiny_profile: HardwareProfile) -> None:
    models: dict[Any, nn.Module] = {"good": _mlp(), "bad": nn.Sequential(_mlp(), Broken()),
                                    "also good": _mlp(32)}
    oracle = CostOracle("eager", tiny_profile)
    with pytest.warns(RuntimeWarning, match="candidate 'bad' skipped"):
        res = oracle.latencies(models, [1, 2], torch.randn(1, 8))
    assert res.candidates == ("good", "also good")
    assert res.latency_s.shape == (2, 2)
    assert [f.candidate for f in res.failures] == ["bad"]
    assert "TraceError" in res.failures[0].error
    assert res["also good"][1].batch == 2


def test_latencies_of_nothing_is_empty(tiny_profile: HardwareProfile) -> None:
    res = CostOracle("eager", tiny_profile).latencies([], [1, 8])
    assert len(res) == 0 and res.failures == () and res.latency_s.shape == (0, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(CostOracle("eager", tiny_profile).latencies(iter([]))) == 0


def test_bad_arguments_raise(tiny_profile: HardwareProfile) -> None:
    oracle = CostOracle("eager", tiny_profile)
    with pytest.raises(InvalidArgumentError, match="batch must be an integer"):
        oracle.latencies([_mlp()], [0], torch.randn(1, 8))
    with pytest.raises(InvalidArgumentError, match="torch.nn.Module"):
        oracle.latency("resnet", 1)  # type: ignore[arg-type]
    with pytest.warns(RuntimeWarning, match="candidate 0 skipped"):
        res = oracle.latencies(["not a model"], 1, torch.randn(1, 8))  # type: ignore[list-item]
    assert res.failures[0].candidate == 0 and "torch.nn.Module" in res.failures[0].error


def test_generator_of_candidates(tiny_profile: HardwareProfile) -> None:
    cfgs = _candidates(2, seed=3)
    oracle = CostOracle("eager", tiny_profile)
    res = oracle.latencies((SPACE.build(c, "meta") for c in cfgs), 1, SPACE.input_spec())
    assert res.candidates == (0, 1)
    assert res.latency_s[1, 0] == oracle.latency(SPACE.build(cfgs[1], "meta"), 1,
                                                 SPACE.input_spec()).latency_s


# -- frameworks that build an artifact --------------------------------------------------------------
@pytest.mark.requires_onnxruntime
def test_onnxruntime_from_meta_candidate(profile_factory: Any) -> None:
    pytest.importorskip("onnxruntime")
    host = {"per_event_s": {"kernel:conv": 5e-6, "kernel:conv_grouped": 5e-6,
                            "kernel:gemm": 4e-6, "kernel:elementwise": 2e-6,
                            "kernel:pool": 2e-6, "view": 1e-7},
            "per_call_s": 2e-5}
    prof = profile_factory(frameworks={"eager": FrameworkHost(**host),
                                       "onnxruntime": FrameworkHost(**host)})
    cfg = _candidates(1, seed=4)[0]
    real = SPACE.build(cfg)
    oracle = CostOracle("onnxruntime", prof, crossover=True)
    got = oracle.latency(SPACE.build(cfg, "meta"), 2, SPACE.inputs)  # weights materialised
    assert got == predict_latency(real, "onnxruntime", prof, 2, inputs=SPACE.inputs)
    again = oracle.latency(SPACE.build(cfg, "meta"), 2, SPACE.inputs)
    # first call: batch 2 built for the crossover (an exported graph's crossover comes from
    # the first batch's program alone), then batch 2 again (1 hit); second call: 2 hits
    assert again == got and oracle.cache_info().program_hits == 1 + 2
    assert oracle.cache_info().program_misses == 1


# -- the search space -------------------------------------------------------------------------
def test_search_space_builds_what_it_describes() -> None:
    cfg = _candidates(1, seed=5)[0]
    model = SPACE.build(cfg, device="meta")
    blocks = [m for m in model if isinstance(m, MBConv)]
    assert len(blocks) == 1 + sum(s.depth for s in cfg.stages)
    assert all(p.device.type == "meta" for p in model.parameters())
    out = SPACE.build(cfg)(SPACE.inputs(2))
    assert out.shape == (2, 10)
    with pytest.raises(InvalidArgumentError, match="kernel 4"):
        SPACE.build(CandidateConfig(cfg.stages[:1] + (
            StageConfig(1.0, (BlockConfig(3, 4),)),) + cfg.stages[2:]))
    with pytest.raises(InvalidArgumentError, match="multiple of 32"):
        MobileNetV2Space(resolution=100)
