"""The speed meter: measurements scaled to one machine speed by a reference timed around them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ftmodel.measure as measure_mod
from ftmodel.measure import fastest_over_fastest, measure_cold_interleaved, measure_interleaved
from ftmodel.speed import (DEVICE_SPEED_EXPONENT, HOST_REFERENCE_CALLS, MEMORY_REFERENCE_BYTES, REFERENCE_SHAPE,
                           Reference, SpeedMeter, active_meter, at_nominal_speed,
                           device_speed_exponent, gemm_share,
                           memory_normalised, nominal_host_reference_s,
                           nominal_memory_reference_s,
                           reference_memory, speed_normalised)


class ScriptedMeter(SpeedMeter):
    """A meter whose references are given (seconds, in order) instead of timed: GEMM times, or
    (GEMM, host) pairs with a nominal host time."""

    def __init__(self, nominal_s: float, refs: list[float] | list[tuple[float, float]],
                 nominal_host_s: float | None = None) -> None:
        # in proportion: these tests follow the scaling's bookkeeping, not its exponent
        super().__init__("cpu", nominal_s=nominal_s, nominal_host_s=nominal_host_s,
                         device_exponent=1.0)
        self._refs: Iterator[float | tuple[float, float]] = iter(refs)

    def reference(self) -> Reference:
        r = next(self._refs)
        ref = Reference(*r) if isinstance(r, tuple) else Reference(r)
        self.seen_s.append(ref.gemm_s)
        if ref.host_s is not None:
            self.seen_host_s.append(ref.host_s)
        return ref

    def due(self) -> bool:
        return False  # one reference before a round's first block and one after its last


@pytest.fixture
def constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed call takes 1 ms."""
    monkeypatch.setattr(measure_mod, "time_once", lambda fn, device: 1e-3)


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
    # the time: the fastest round as timed (1 ms) over the fastest reference (0.5 ms)
    assert out["a"].time_s == pytest.approx(4e-3)
    assert meter.seen_s == [1e-3, 1e-3, 0.5e-3, 0.5e-3]


def test_a_reference_that_read_slow_does_not_make_a_round_fast(constant_time: None) -> None:
    # two rounds of 1 ms on a machine at nominal speed; the reference after the second read
    # 3 ms (disturbed): that round scaled by its references reads 0.58 ms, which the fastest
    # scaled round would have kept
    meter = ScriptedMeter(1e-3, [1e-3, 1e-3, 1e-3, 3e-3])
    with speed_normalised(meter):
        out = measure_interleaved({"a": lambda: None}, rounds=2, warmup=0, round_s=0.01)
    assert out["a"].round_medians_s == pytest.approx((1e-3, 1e-3 / 3 ** 0.5))
    assert out["a"].time_s == pytest.approx(1e-3)
    # what it was computed from: the rounds as timed and the references around each
    assert out["a"].timed_round_s == pytest.approx((1e-3, 1e-3))
    assert [(a.gemm_s, b.gemm_s) for a, b in out["a"].references] == [(1e-3, 1e-3), (1e-3, 3e-3)]


def test_host_work_follows_the_host_reference(constant_time: None) -> None:
    # GEMM at nominal speed; host reference twice as slow as its nominal around the round
    meter = ScriptedMeter(1e-3, [(1e-3, 2e-4), (1e-3, 2e-4)], nominal_host_s=1e-4)
    fns = {"host": lambda: None, "device": lambda: None, "half": lambda: None}
    with speed_normalised(meter):
        out = measure_interleaved(fns, rounds=1, warmup=0, round_s=0.01,
                                  host_share={"host": 1.0, "half": 0.5})
    assert out["host"].time_s == pytest.approx(0.5e-3)  # halved: host work at nominal speed
    assert out["device"].time_s == pytest.approx(1e-3)  # no share given: the GEMM's factor
    assert out["half"].time_s == pytest.approx(0.75e-3)  # half host, half kernels
    # a meter without a host reference (a profile measured before it) scales by the GEMM
    meter = ScriptedMeter(1e-3, [1e-3, 1e-3])
    with speed_normalised(meter):
        out = measure_interleaved({"host": lambda: None}, rounds=1, warmup=0, round_s=0.01,
                                  host_share={"host": 1.0})
    assert out["host"].time_s == pytest.approx(1e-3)
    with speed_normalised(ScriptedMeter(1e-3, [(4e-3, 2e-4)] * 4, nominal_host_s=1e-4)):
        assert at_nominal_speed(lambda: 1.0, host_share=1.0) == pytest.approx(0.5)
        assert at_nominal_speed(lambda: 1.0) == pytest.approx(0.25)


def test_blocks_of_a_round_share_its_references(constant_time: None) -> None:
    meter = ScriptedMeter(1e-3, [0.5e-3, 2e-3])
    with speed_normalised(meter):
        out = measure_interleaved({"a": lambda: None, "b": lambda: None}, rounds=1,
                                  warmup=0, round_s=0.01)
    # both scaled by the fastest of the round's two references: 1 ms at 0.5 ms of the nominal 1
    assert out["a"].time_s == out["b"].time_s == pytest.approx(2e-3)
    assert out["a"].round_medians_s == out["b"].round_medians_s == pytest.approx((1e-3,))


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
    assert "host_reference_s" not in summary and meter.seen_host_s == []
    meter = SpeedMeter("cpu", nominal_s=1e-3, nominal_host_s=2e-4)
    ref = meter.reference()
    assert ref.host_s is not None and ref.host_s > 0 and meter.seen_host_s == [ref.host_s]
    summary = meter.summary()
    assert summary["host_reference_s"] == 2e-4
    assert summary["host_reference_calls"] == HOST_REFERENCE_CALLS
    assert summary["host_min_s"] == summary["host_max_s"] == ref.host_s
    assert nominal_host_reference_s({"speed": summary}) == 2e-4
    assert nominal_host_reference_s({"speed": {"normalised": True, "reference_s": 1e-3}}) is None
    assert ref.memory_s is None and meter.seen_memory_s == []  # no nominal memory time
    assert "memory_reference_s" not in summary
    with pytest.raises(ValueError, match="measures a CPU"):
        SpeedMeter("cuda")
    with pytest.raises(ValueError, match="must be positive"):
        SpeedMeter("cpu", nominal_s=0.0)
    with pytest.raises(ValueError, match="host reference time must be positive"):
        SpeedMeter("cpu", nominal_s=1e-3, nominal_host_s=-1.0)


def test_meter_records_the_memory_reference_beside_the_others() -> None:
    meter = SpeedMeter("cpu", nominal_s=1e-3, nominal_memory_s=5e-4, device_exponent=1.0)
    refs = [meter.reference() for _ in range(3)]
    assert all(r.memory_s is not None and r.memory_s > 0 for r in refs)
    assert meter.seen_memory_s == [r.memory_s for r in refs]
    assert refs[0].host_s is None  # the host reference is timed only where it has a nominal
    summary = meter.summary()
    assert summary["memory_reference_s"] == 5e-4
    assert summary["memory_reference_bytes"] == MEMORY_REFERENCE_BYTES
    assert summary["memory_min_s"] <= summary["memory_median_s"] <= summary["memory_max_s"]
    # what a profile stands for: the nominal its device times were scaled to
    assert nominal_memory_reference_s({"speed": summary}) == 5e-4
    assert nominal_memory_reference_s({"speed": {"memory_reference_s": 4e-4}}) == 4e-4
    assert nominal_memory_reference_s({"speed": {"normalised": True, "reference_s": 1e-3}}) \
        is None
    assert meter.typical().memory_s == summary["memory_median_s"]
    # a GEMM-bound measurement ignores it; others blend it in by their share of the GEMM
    slow = Reference(2e-3, None, 1e-3)
    assert meter.factor(slow, slow) == 0.5
    assert meter.factor(slow, slow, gemm_share=0.25) == pytest.approx(0.25 * 0.5 + 0.75 * 0.5)
    assert meter.factor(slow, Reference(2e-3, None, None), gemm_share=0.0) == 0.5  # none after
    assert summary["memory_normalised"] is True
    with pytest.raises(ValueError, match="memory reference time must be positive"):
        SpeedMeter("cpu", nominal_s=1e-3, nominal_memory_s=0.0)


def test_memory_reference_copies_into_a_kept_buffer() -> None:
    call = reference_memory("cpu")
    first, second = call(), call()
    assert first.data_ptr() == second.data_ptr()  # no allocation per call
    assert first.numel() * first.element_size() == MEMORY_REFERENCE_BYTES
    assert float(first.abs().sum()) > 0


def test_device_times_blend_the_gemm_and_memory_references_by_op_class() -> None:
    assert gemm_share("gemm") == 0.75 and gemm_share("gemm@mkldnn_rnn_layer:per_call") == 0.75
    assert gemm_share("elementwise@exp") == 0.0 and gemm_share("copy") == 0.0
    assert gemm_share("conv_grouped:mkldnn") == 0.25 and gemm_share("conv") == 0.5
    assert gemm_share("no such class") == 0.5
    meter = SpeedMeter("cpu", nominal_s=1e-3, nominal_memory_s=2e-3, device_exponent=1.0)
    ref = Reference(2e-3, None, 1e-3)  # GEMM twice as slow as nominal, memory twice as fast
    assert meter.factor(ref, ref, gemm_share=1.0) == 0.5
    assert meter.factor(ref, ref, gemm_share=0.0) == 2.0
    assert meter.factor(ref, ref, gemm_share=0.25) == pytest.approx(0.25 * 0.5 + 0.75 * 2.0)
    # fastest over fastest: each reference's fastest reading, the memory one's too
    refs = [Reference(2e-3, None, 4e-3), Reference(3e-3, None, 1e-3)]
    assert fastest_over_fastest(meter, [1.0, 2.0], refs, gemm_share=0.0) == 2.0
    # an update of a profile whose device times were not scaled by it keeps the GEMM alone
    old = SpeedMeter("cpu", nominal_s=1e-3, nominal_memory_s=2e-3, normalise_memory=False,
                     device_exponent=1.0)
    assert old.factor(ref, ref, gemm_share=0.0) == 0.5
    assert old.summary()["memory_normalised"] is False
    speed = {"normalised": True, "reference_s": 1e-3, "memory_reference_s": 2e-3,
             "memory_median_s": 3e-3}
    assert not memory_normalised({"speed": speed})
    assert nominal_memory_reference_s({"speed": speed}) == 3e-3  # the median: not scaled to it
    speed["memory_normalised"] = True
    assert memory_normalised({"speed": speed})
    assert nominal_memory_reference_s({"speed": speed}) == 2e-3  # what it was scaled to


def test_device_times_follow_their_references_at_the_recorded_exponent() -> None:
    # kernels moved by about half their references' log change on the Zen 3 guest
    # (speed-kernels.md, corpus-calibration-53-run2): device times move by the factor to the
    # power 0.5, host times in proportion
    assert DEVICE_SPEED_EXPONENT == 0.5
    meter = SpeedMeter("cpu", nominal_s=1e-3, nominal_host_s=1e-4)
    assert meter.device_exponent == DEVICE_SPEED_EXPONENT
    slow = Reference(4e-3, 4e-4, None)  # both references four times nominal
    assert meter.factor(slow, slow) == pytest.approx(0.5)  # (1/4) ** 0.5
    assert meter.factor(slow, slow, host_share=1.0) == pytest.approx(0.25)
    assert meter.factor(slow, slow, host_share=0.5) == pytest.approx(0.5 * 0.5 + 0.5 * 0.25)
    assert meter.summary()["device_exponent"] == 0.5
    # what a profile records; one without the record moved in proportion
    assert device_speed_exponent({"speed": meter.summary()}) == 0.5
    assert device_speed_exponent({"speed": {"normalised": True, "reference_s": 1e-3}}) == 1.0
    assert device_speed_exponent({}) == 1.0
    assert device_speed_exponent({"speed": {"device_exponent": -1}}) == 1.0
    with pytest.raises(ValueError, match="device exponent must be positive"):
        SpeedMeter("cpu", nominal_s=1e-3, device_exponent=0.0)
