"""Which passes of the in-model stage's synthetic networks a calibration fits: those that agree
with the fastest (``calibration/in_model_cpu.py``)."""

from __future__ import annotations

import pytest

from ftmodel.calibration.in_model_cpu import (EXTRA_PASSES, PASS_AGREEMENT, kept_passes,
                                                measure_until_agreed, pass_speeds,
                                                passes_record)

NETS = {("cnn0", 1): 1e-3, ("cnn0", 4): 3e-3, ("mlp1", 1): 2e-4, ("mlp1", 4): 5e-4}


def _pass(factor: float, **slower: float) -> dict[tuple[str, int], float]:
    """A pass whose networks took ``factor`` times their base time (``slower``: a network,
    ``name_b``, that took that many times more on its own)."""
    return {k: t * factor * slower.get(f"{k[0]}_{k[1]}", 1.0) for k, t in NETS.items()}


def test_a_pass_speed_is_its_networks_median_time_against_their_medians() -> None:
    speeds = pass_speeds([_pass(1.0), _pass(1.2), _pass(1.1)])
    assert speeds == pytest.approx([1.0 / 1.1, 1.2 / 1.1, 1.0])
    # one network slow in one pass moves nothing: the median over the networks
    assert pass_speeds([_pass(1.0), _pass(1.0, cnn0_1=3.0), _pass(1.0)]) == pytest.approx(
        [1.0, 1.0, 1.0])
    assert pass_speeds([_pass(1.0)]) == [1.0]


def test_passes_slower_than_the_fastest_by_more_than_the_agreement_are_left_out() -> None:
    assert kept_passes([_pass(1.0), _pass(1.05), _pass(1.08)]) == [0, 1, 2]
    # calibration 122's TorchScript networks: 0.89, 1.00 and 1.09 of their medians
    assert kept_passes([_pass(0.89), _pass(1.0), _pass(1.09)]) == [0]
    edge = 1.0 + PASS_AGREEMENT
    assert kept_passes([_pass(1.0), _pass(edge * 0.999), _pass(edge * 1.01)]) == [0, 1]
    assert kept_passes([_pass(1.3)]) == [0]


def test_disagreeing_passes_are_followed_by_at_most_the_extra_ones() -> None:
    passes = [_pass(1.0), _pass(1.05)]
    calls: list[float] = []

    def measure(factor: float) -> dict[tuple[str, int], float]:
        calls.append(factor)
        return _pass(factor)

    assert measure_until_agreed(lambda: measure(1.0), passes) == 0 and not calls
    passes = [_pass(1.0), _pass(1.4)]  # disagree; the next pass agrees with the first
    assert measure_until_agreed(lambda: measure(1.02), passes) == 1 and len(passes) == 3
    assert kept_passes(passes) == [0, 2]
    calls.clear()
    passes = [_pass(1.0), _pass(1.5)]  # the machine stays slow: extra passes, then stop
    added = measure_until_agreed(lambda: measure(1.5), passes)
    assert added == EXTRA_PASSES == len(calls) and len(passes) == 2 + EXTRA_PASSES
    assert kept_passes(passes) == [0]
    assert measure_until_agreed(lambda: measure(1.5), [_pass(1.0)]) == 0  # one pass: no more


def test_the_record_keeps_each_pass_speed_and_the_passes_fitted() -> None:
    passes = [_pass(1.0), _pass(1.3), _pass(1.02)]
    record = passes_record(passes, kept_passes(passes))
    assert record["kept"] == [0, 2]
    assert record["speeds"] == pytest.approx([1.0 / 1.02, 1.3 / 1.02, 1.0], abs=1e-4)
