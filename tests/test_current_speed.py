"""Pricing a CPU profile at the speed probed now (``speed="now"``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

import ftmodel
from ftmodel import current_speed
from ftmodel.api import Predictor
from ftmodel.errors import InvalidArgumentError
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.speed import Reference

NOMINAL = {"normalised": True, "reference_s": 2e-3, "host_reference_s": 1.5e-4,
           "memory_reference_s": 1e-3, "memory_normalised": True}


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).eval()


def _inputs(b: int) -> torch.Tensor:
    return torch.randn(b, 64)


@pytest.fixture
def timed_profile(tiny_profile: HardwareProfile) -> HardwareProfile:
    """``tiny_profile`` as a calibration with a speed meter records it."""
    return replace(tiny_profile, provenance={**tiny_profile.provenance, "speed": dict(NOMINAL)})


def _probe_returns(monkeypatch: pytest.MonkeyPatch, ref: Reference) -> list[int]:
    calls: list[int] = []

    def fake(device: str = "cpu", references: int = 10) -> Reference:
        calls.append(references)
        return ref
    monkeypatch.setattr(current_speed, "probe_speed", fake)
    return calls


def test_speed_now_at_the_nominal_speed_changes_nothing(
        timed_profile: HardwareProfile, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _probe_returns(monkeypatch, Reference(2e-3, 1.5e-4, 1e-3))
    base = Predictor("eager", timed_profile, heap="kept").predict(_mlp(), [1, 8], _inputs)
    now = Predictor("eager", timed_profile, heap="kept", speed="now").predict(
        _mlp(), [1, 8], _inputs)
    assert calls == [current_speed.PROBE_REFERENCES]
    for a, b in zip(base, now):
        assert b.latency_s == pytest.approx(a.latency_s, rel=1e-9)
    assert base[0].extra["speed"]["basis"] == "profile"
    assert now[0].extra["speed"] == {"basis": "now", "reference_s": 2e-3,
                                     "host_reference_s": 1.5e-4, "memory_reference_s": 1e-3}


def test_a_machine_twice_as_slow_is_priced_twice_as_slow(
        timed_profile: HardwareProfile, monkeypatch: pytest.MonkeyPatch) -> None:
    _probe_returns(monkeypatch, Reference(4e-3, 3e-4, 2e-3))
    base = Predictor("eager", timed_profile, heap="kept").predict(_mlp(), [1, 8], _inputs)
    slow = Predictor("eager", timed_profile, heap="kept", speed="now").predict(
        _mlp(), [1, 8], _inputs)
    for a, b in zip(base, slow):
        assert b.overhead_s == pytest.approx(2 * a.overhead_s, rel=1e-6)
        assert b.compute_s == pytest.approx(2 * a.compute_s, rel=1e-6)
        assert b.latency_s == pytest.approx(2 * a.latency_s, rel=1e-6)


def test_host_and_memory_speeds_move_their_own_parts(
        timed_profile: HardwareProfile, monkeypatch: pytest.MonkeyPatch) -> None:
    # host three times as slow, GEMM and memory unchanged: host time triples, device time stays
    _probe_returns(monkeypatch, Reference(2e-3, 4.5e-4, 1e-3))
    base = Predictor("eager", timed_profile, heap="kept").predict(_mlp(), [4], _inputs)[0]
    now = Predictor("eager", timed_profile, heap="kept", speed="now").predict(
        _mlp(), [4], _inputs)[0]
    assert now.overhead_s == pytest.approx(3 * base.overhead_s, rel=1e-6)
    assert now.compute_s == pytest.approx(base.compute_s, rel=1e-6)


def test_predict_latency_passes_speed(timed_profile: HardwareProfile,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _probe_returns(monkeypatch, Reference(4e-3, 3e-4, 2e-3))
    base = ftmodel.predict_latency(_mlp(), "eager", timed_profile, 2, inputs=_inputs)
    now = ftmodel.predict_latency(_mlp(), "eager", timed_profile, 2, inputs=_inputs,
                                  speed="now")
    assert now.latency_s == pytest.approx(2 * base.latency_s, rel=1e-6)


@pytest.mark.parametrize("bad", ["fast", "", "NOW"])
def test_unknown_speed_is_named(timed_profile: HardwareProfile, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=repr(bad)):
        Predictor("eager", timed_profile, speed=bad)


def test_speed_now_needs_a_cpu_profile_with_a_recorded_speed(
        tiny_profile: HardwareProfile) -> None:
    with pytest.raises(InvalidArgumentError, match="no recorded speed"):
        Predictor("eager", tiny_profile, speed="now")
    with pytest.raises(InvalidArgumentError, match="'a100-sxm4-40gb' is a cuda profile"):
        Predictor("eager", "a100", speed="now")


def test_probe_reads_this_machine() -> None:
    ref = current_speed.probe_speed(references=2)
    assert ref.gemm_s > 0 and ref.host_s is not None and ref.host_s > 0
    assert ref.memory_s is not None and ref.memory_s > 0
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        current_speed.probe_speed(references=0)


def test_device_exponent_moves_device_times_part_of_the_way(
        timed_profile: HardwareProfile) -> None:
    from ftmodel.hardware.rescale import at_speed
    full = at_speed(timed_profile, 8e-3, 6e-4, 4e-3)  # every reference 4x slower
    half = at_speed(timed_profile, 8e-3, 6e-4, 4e-3, device_exponent=0.5)
    for name, data in timed_profile.device.op_classes.items():
        t0 = data.samples[0][3]
        assert full.device.op_classes[name].samples[0][3] == pytest.approx(4 * t0), name
        assert half.device.op_classes[name].samples[0][3] == pytest.approx(2 * t0), name
    eager0 = timed_profile.host.frameworks["eager"]  # type: ignore[union-attr]
    for prof in (full, half):  # host costs follow the host reference in proportion either way
        eager = prof.host.frameworks["eager"]  # type: ignore[union-attr]
        assert eager.per_call_s == pytest.approx(4 * eager0.per_call_s)
    assert half.provenance["speed"]["reference_s"] == 8e-3
    with pytest.raises(ValueError, match="exponent"):
        at_speed(timed_profile, 8e-3, device_exponent=0.0)
