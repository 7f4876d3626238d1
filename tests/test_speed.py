"""The speed meter: measurements scaled to one machine speed by a reference timed around them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ftmodel.measure as measure_mod
from ftmodel.measure import measure_cold_interleaved, measure_interleaved
from ftmodel.speed import (REFERENCE_SHAPE, SpeedMeter, active_meter, at_nominal_speed,
                           speed_normalised)


class ScriptedMeter(SpeedMeter):
    """A meter whose references are given (seconds, in order) instead of timed."""

    def __init__(self, nominal_s: float, refs: list[float]) -> None:
        super().__init__("cpu", nominal_s=nominal_s)
        self._refs: Iterator[float] = iter(refs)

    def reference_s(self) -> float:
        t = next(self._refs)
        self.seen_s.append(t)
        return t

    def due(self) -> bool:
        return False  # one reference before a round's first block and one after its last


@pytest.fixture
def constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed call takes 1 ms."""
    monkeypatch.setattr(measure_mod, "_time_once", lambda fn, device: 1e-3)


def test_each_round_is_scaled_by_the_references_around_it(constant_time: None) -> None:
    meter = ScriptedMeter(2e-3, [1e-3, 4e-3, 2e-3, 2e-3])
    with speed_normalised(meter):
        out = measure_interleaved({"a": lambda: None}, rounds=2, warmup=0, round_s=0.01)
    # round 1 between references of 1 and 4 ms (geometric mean 2 ms): as measured;
    # round 2 between 2 and 2 ms: as measured; the nominal is 2 ms
    assert out["a"].round_medians_s == pytest.approx((1e-3, 1e-3))
    meter = ScriptedMeter(2e-3, [1e-3, 1e-3, 0.5e-3, 0.5e-3])
    with speed_normalised(meter):
        out = measure_interleaved({"a": lambda: None}, rounds=2, warmup=0, round_s=0.01)
    # a machine twice as fast as nominal, then four times: times doubled, then quadrupled
    assert out["a"].round_medians_s == pytest.approx((2e-3, 4e-3))
    assert out["a"].time_s == pytest.approx(2e-3)
    assert meter.seen_s == [1e-3, 1e-3, 0.5e-3, 0.5e-3]


def test_blocks_of_a_round_share_its_references(constant_time: None) -> None:
    meter = ScriptedMeter(1e-3, [0.5e-3, 2e-3])
    with speed_normalised(meter):
        out = measure_interleaved({"a": lambda: None, "b": lambda: None}, rounds=1,
                                  warmup=0, round_s=0.01)
    assert out["a"].time_s == out["b"].time_s == pytest.approx(1e-3)


def test_cold_measurements_are_scaled_too(constant_time: None) -> None:
    meter = ScriptedMeter(3e-3, [1e-3, 1e-3])
    with speed_normalised(meter):
        out = measure_cold_interleaved({"a": lambda: None}, flush=lambda: None, rounds=1,
                                       reps=3, warmup=0)
    assert out["a"].time_s == pytest.approx(3e-3)


def test_without_a_meter_or_off_its_device_times_are_as_measured(constant_time: None) -> None:
    assert measure_interleaved({"a": lambda: None}, rounds=1, warmup=0)["a"].time_s == 1e-3
    meter = ScriptedMeter(2e-3, [])  # any reference taken would exhaust it
    with speed_normalised(meter):
        assert active_meter("cpu") is meter
        assert active_meter("cuda") is None
    assert active_meter("cpu") is None
    with speed_normalised(None):
        assert active_meter("cpu") is None


def test_at_nominal_speed_scales_one_timing() -> None:
    assert at_nominal_speed(lambda: 0.5) == 0.5
    with speed_normalised(ScriptedMeter(1e-3, [2e-3, 8e-3])):
        assert at_nominal_speed(lambda: 0.5) == pytest.approx(0.5 * 1e-3 / 4e-3)


def test_meter_times_the_reference_and_records_what_it_saw() -> None:
    meter = SpeedMeter("cpu", nominal_s=1e-3)
    t = meter.reference_s()
    assert t > 0 and meter.seen_s == [t]
    summary = meter.summary()
    assert summary["reference_s"] == 1e-3 and summary["normalised"] is True
    assert summary["shape"] == list(REFERENCE_SHAPE)
    assert summary["references"] == 1 and summary["min_s"] == summary["max_s"] == t
    with pytest.raises(ValueError, match="measures a CPU"):
        SpeedMeter("cuda")
    with pytest.raises(ValueError, match="must be positive"):
        SpeedMeter("cpu", nominal_s=0.0)
