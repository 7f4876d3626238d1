"""dynamo's guard evaluation (ftmodel.estimate.guards): per tensor and per module, priced at
the bytes a call touches between two calls, and carried by a profile."""

from __future__ import annotations

import math

import pytest

from ftmodel.errors import ProfileError
from ftmodel.estimate.guards import bytes_touched, guard_prices_s, guard_seconds
from ftmodel.hardware.profile import FrameworkHost, host_profile_from_dict
from ftmodel.program import GUARD_MODULE, GUARD_TENSOR, Kernel

# warm: 0.3 µs a tensor, 0.2 µs a module; 1 µs and 2 µs after 1 MiB and 100 MiB written
ROWS = ((0.0, 0.3e-6, 0.2e-6), (1048576.0, 1.0e-6, 1.0e-6), (104857600.0, 2.0e-6, 1.5e-6))


def _kernel(reads: tuple[tuple[int, int], ...], writes: tuple[tuple[int, int], ...],
            nbytes: int = 0) -> Kernel:
    return Kernel("elementwise", 0, nbytes, 0, "m", ("k",), reads=reads, writes=writes)


def test_bytes_touched_counts_each_storage_once() -> None:
    a, b = (1, 4000), (2, 1000)
    kernels = [_kernel((a,), (b,)), _kernel((b, a), ((3, 500),)), _kernel((), (), nbytes=77)]
    assert bytes_touched(kernels) == 4000 + 1000 + 500 + 77


def test_prices_interpolate_in_log_bytes_and_hold_at_the_ends() -> None:
    assert guard_prices_s(ROWS, 0.0) == (0.3e-6, 0.2e-6)
    # between the 0 row and the first: linear in bytes
    t, m = guard_prices_s(ROWS, 524288.0)
    assert t == pytest.approx(0.65e-6) and m == pytest.approx(0.6e-6)
    # 10 MiB is half-way from 1 MiB to 100 MiB in log bytes
    t, m = guard_prices_s(ROWS, 10485760.0)
    assert t == pytest.approx(1.5e-6) and m == pytest.approx(1.25e-6)
    assert guard_prices_s(ROWS, 1e12) == (2.0e-6, 1.5e-6)
    assert guard_prices_s((), 1e6) == (0.0, 0.0)
    # rows in any order
    assert guard_prices_s(tuple(reversed(ROWS)), 10485760.0)[0] == pytest.approx(1.5e-6)


def test_guard_seconds_count_tensors_and_modules_at_the_calls_bytes() -> None:
    kernels = [_kernel(((1, 1048576),), ())]
    events = {GUARD_TENSOR: 100, GUARD_MODULE: 50, "kernel:elementwise": 1}
    assert guard_seconds(events, kernels, ROWS) == pytest.approx(100e-6 + 50e-6)
    assert guard_seconds(events, kernels, ()) == 0.0
    assert guard_seconds({"kernel:elementwise": 1}, kernels, ROWS) == 0.0


def _host_dict(guards: object) -> dict[str, object]:
    return {"schema": "ftmodel.host", "schema_version": 1, "name": "h", "kind": "calibrated",
            "host": {
                "name": "h", "cpu": "c", "threads": 2,
                "frameworks": {"inductor": {"per_event_s": {}, "per_call_s": 1e-5,
                                            "guards": guards}}}}


def test_a_profile_round_trips_its_guard_rows_and_refuses_bad_ones() -> None:
    prof = host_profile_from_dict(_host_dict([list(r) for r in ROWS]))
    fh = prof.host.frameworks["inductor"]
    assert fh.guards == ROWS
    assert host_profile_from_dict(prof.to_dict()).host.frameworks["inductor"].guards == ROWS
    assert FrameworkHost({}).guards == ()
    for bad in ([[0.0, 1e-6]], [[0.0, -1e-6, 1e-6]], [[0.0, math.inf, 1e-6]], [["x", 0, 0]]):
        with pytest.raises(ProfileError, match="guards"):
            host_profile_from_dict(_host_dict(bad))
