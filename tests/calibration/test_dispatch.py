"""ftmodel.calibration.dispatch.fit_event_costs: NNLS recovers per-event costs from synthetic programs."""

from __future__ import annotations

import numpy as np
import pytest

from ftmodel.calibration.dispatch import fit_event_costs

TRUE = {"kernel:elementwise": 3e-6, "kernel:gemm": 6e-6, "module_call": 1.5e-6, "view": 4e-7}


def _times(counts: list[dict[str, int]], costs: dict[str, float], per_call: float = 0.0
           ) -> list[float]:
    return [per_call + sum(c * costs[k] for k, c in cnt.items()) for cnt in counts]


COUNTS = [
    {"kernel:elementwise": 40},
    {"kernel:gemm": 40, "view": 40},
    {"module_call": 40, "kernel:elementwise": 40},
    {"view": 40},
    {"module_call": 41, "kernel:gemm": 40, "view": 40},
    {"kernel:elementwise": 20, "kernel:gemm": 10, "module_call": 11, "view": 5},
]


def test_recovers_known_costs() -> None:
    fit = fit_event_costs(COUNTS, _times(COUNTS, TRUE))
    assert set(fit) == set(TRUE)
    for k, v in TRUE.items():
        assert fit[k] == pytest.approx(v, rel=1e-6), k


def test_recovers_with_constant_term() -> None:
    # a per-forward cost modelled as an event every program has once
    true = {**TRUE, "call": 2e-5}
    counts = [{**c, "call": 1} for c in COUNTS]
    fit = fit_event_costs(counts, _times(counts, true))
    for k, v in true.items():
        assert fit[k] == pytest.approx(v, rel=1e-6), k


def test_zero_count_kinds_dropped() -> None:
    counts = [{**c, "alloc": 0} for c in COUNTS]
    fit = fit_event_costs(counts, _times(COUNTS, TRUE))
    assert "alloc" not in fit
    assert fit["view"] == pytest.approx(TRUE["view"], rel=1e-6)


def test_non_negative() -> None:
    # times that would need a negative cost for 'view' are clipped at 0 (NNLS)
    counts = [{"kernel:gemm": 10}, {"kernel:gemm": 10, "view": 10}, {"view": 10, "kernel:gemm": 5}]
    times = [1e-4, 0.5e-4, 0.4e-4]
    fit = fit_event_costs(counts, times)
    assert all(v >= 0 for v in fit.values())


def test_random_programs_exact() -> None:
    rng = np.random.default_rng(1)
    kinds = [f"kernel:c{i}" for i in range(8)] + ["module_call", "view", "alloc"]
    true = {k: float(rng.uniform(1e-7, 1e-5)) for k in kinds}
    counts = [{k: int(rng.integers(0, 50)) for k in kinds} for _ in range(40)]
    fit = fit_event_costs(counts, _times(counts, true))
    for k, v in true.items():
        assert fit[k] == pytest.approx(v, rel=1e-6), k
