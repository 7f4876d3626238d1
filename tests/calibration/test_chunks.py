"""A framework's curve is built and timed in chunks that fit this machine's memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch

from ftmodel.calibration import chunks, framework_ops
from ftmodel.calibration.chunks import ChunkBudget
from ftmodel.calibration.ops import CPU_GRID, op_samples
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.heap import heap_in_use_bytes
from ftmodel.measure import Measurement


def test_a_chunk_is_full_after_its_items_or_its_bytes() -> None:
    budget = ChunkBudget(None, max_items=3)
    budget.begin()
    assert [budget.add() for _ in range(3)] == [False, False, True]
    budget.begin()
    assert not budget.add()  # a new chunk counts from zero
    if heap_in_use_bytes() is None:
        pytest.skip("allocated memory cannot be read here (glibc's mallinfo2)")
    budget = ChunkBudget(32 << 20, max_items=100)
    budget.begin()
    assert not budget.add()
    held = torch.ones(16 << 20)  # 64 MiB, allocated with malloc
    assert budget.add()
    grown = budget.grown_bytes()
    assert grown is not None and grown >= 64 << 20
    del held
    budget.begin()
    assert not budget.add()


def test_the_budget_is_a_share_of_the_memory_available(monkeypatch: pytest.MonkeyPatch) -> None:
    # the memory available read once (other processes move it between two reads)
    monkeypatch.setattr(chunks, "available_memory_bytes", lambda: 8 << 30)
    budget = ChunkBudget.for_this_machine(share=0.25, max_items=7)
    assert budget.max_items == 7
    if heap_in_use_bytes() is None:
        assert budget.limit_bytes is None
    else:
        assert budget.limit_bytes == 2 << 30
    monkeypatch.setattr(chunks, "available_memory_bytes", lambda: None)
    assert ChunkBudget.for_this_machine().limit_bytes is None  # only its items count


def test_each_chunk_of_a_framework_curve_is_timed_with_its_floors(
        monkeypatch: pytest.MonkeyPatch, tiny_profile: HardwareProfile) -> None:
    """Every sample is timed once, in a chunk of at most ``max_items`` samples timed with the
    floor it is taken from; the curve has a row for each sample."""
    samples = [s for s in op_samples(True, CPU_GRID)["elementwise"]
               if s.family in ("relu", "add")]
    floors = {s.label for s in samples if s.is_floor}
    assert len(floors) == 2 and len(samples) > 6
    calls: list[list[str]] = []

    def fake_measure(fns: Mapping[str, Callable[[], object]], **_: Any
                     ) -> dict[str, Measurement]:
        calls.append(list(fns))
        # each chunk's floor reads slower than the one before: a sample's time is taken from
        # its own chunk's floor
        floor_s = 1e-5 * len(calls)
        return {label: Measurement(floor_s if label in floors else floor_s + 2e-5, (1.0,), 1)
                for label in fns}

    monkeypatch.setattr(framework_ops, "measure_interleaved", fake_measure)
    monkeypatch.setattr(chunks.ChunkBudget, "for_this_machine",
                        classmethod(lambda cls: ChunkBudget(None, max_items=3)))
    data, raw, _ = framework_ops.framework_curve(
        "torchscript", samples, "cpu", tiny_profile.device, rounds=1, round_s=0.01)
    timed = [label for call in calls for label in call if label not in floors]
    assert sorted(timed) == sorted(s.label for s in samples if not s.is_floor)
    assert len(calls) > 1 and all(floors <= set(call) and len(call) <= 3 + 2 for call in calls)
    assert data is not None and len(data.samples) == len(timed)
    rows = [r for r in raw if "total_s" in r]
    assert all(r["total_s"] - r["floor_s"] == pytest.approx(2e-5) for r in rows)


def test_the_runtime_cache_probe_times_its_chains_in_chunks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime's chain sessions copy their weights: they are built and timed a few at a time,
    each chunk with the floor and the one-layer chain, and each chain's time is taken less the
    floor of its own chunk."""
    from torch import nn

    from ftmodel.calibration import cache

    built: list[int] = []
    alive: set[int] = set()
    peak = [0]

    class Session:
        def __init__(self, layers: int) -> None:
            self.layers = layers
            alive.add(id(self))
            peak[0] = max(peak[0], len(alive))

        def __del__(self) -> None:
            alive.discard(id(self))

        def run(self) -> object:
            return None

    def runner(net: nn.Module, x: torch.Tensor) -> Callable[[], object]:
        built.append(len(net))
        return Session(len(net)).run

    calls: list[int] = []

    def fake_measure(fns: Mapping[Any, Callable[[], object]], **_: Any
                     ) -> dict[Any, Measurement]:
        calls.append(len(fns))
        floor_s = 1e-5 * len(calls)  # each chunk's floor reads slower than the last
        return {key: Measurement(floor_s + (0.0 if key == "floor" else
                                            1e-6 * getattr(fn, "__self__").layers), (1.0,), 1)
                for key, fn in fns.items()}

    monkeypatch.setattr(cache, "measure_interleaved", fake_measure)
    monkeypatch.setattr(chunks.ChunkBudget, "for_this_machine",
                        classmethod(lambda cls: ChunkBudget(None, max_items=2)))
    monkeypatch.setattr(cache, "_chain", lambda n, device, width=512: nn.Sequential(
        *[nn.Identity() for _ in range(n)]))
    monkeypatch.setattr(cache, "_conv_chain", lambda n, device: nn.Sequential(
        *[nn.Identity() for _ in range(n)]))
    probe = cache.probe_runtime_cache(runner, 32 << 20, quick=True)
    grid = probe["grid_layers"]
    assert len(calls) == -(-(len(grid) + 4) // 2) and max(calls) == 4  # floor, hot, 2 chains
    assert peak[0] <= 4 + 1  # the chunk before is let go before the next is built
    assert probe["floor_s"] == pytest.approx(1e-5)
    assert probe["hot_s"] == pytest.approx(1e-6)
    assert probe["per_layer_s"] == pytest.approx([1e-6] * len(grid))
    assert probe["conv_per_layer_s"] == pytest.approx(1e-6)
